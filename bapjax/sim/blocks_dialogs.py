"""D_bs: blocks-based dialogues for three-shape structures (paper section 5.3.2).

The target is ``sample_shape_structure(rng, 3)`` over all six shape kinds.  The Architect builds
it shape by shape (each next shape one that touches what is built), and within a shape follows
its natural build order.  Each instruction covers one block or a line of several: a run of
cells where each is one step (1D or diagonal 2D/3D) from the one before, the first being the
same step from the last block the Builder placed ("now, place two red blocks behind the last
block", "stack three more blue blocks on top of it").  A block that is not adjacent to the last
one gets its own instruction with a 1D/2D/3D relation and distances, mostly to the last block,
sometimes to another block the Architect can name uniquely.  The first block of the game goes
"on the ground".
"""

from __future__ import annotations

import numpy as np

from bapjax.sim import language, phrasebook, spatial
from bapjax.sim.dialogue import GameState, SimGame
from bapjax.sim.random_dialogs import choose_reference
from bapjax.sim.structures import sample_shape_structure, touches

NUM_SHAPES = 3
MAX_RUN = 4
SINGLE_P = 0.25  # describe a block alone even when a run is possible
OTHER_REFERENCE_P = 0.15  # use a uniquely nameable block instead of "the last block"
ANCHOR_FORM_P = 0.3  # a run described by its Builder-anchored direction
FAR_FROM_LAST = 3  # farther than this from the last block: prefer a nearer nameable reference
SHAPE_INTRO_P = 0.5  # "the second shape is an L" before a shape's first instruction
SHAPE_DETAIL_P = 0.4  # and "like the letter L" / "two arms that meet at a corner" after it
PROGRESS_P = 0.5  # "good, the first shape is complete" when a shape is finished


def _shape_order(rng: np.random.Generator, shapes) -> list:
    """First a shape with a block on the ground, then repeatedly one touching what is built."""
    grounded = [s for s in shapes if min(c[1] for c in s.cells) == 1]
    first = grounded[int(rng.integers(len(grounded)))]
    order, built = [first], set(first.cells)
    rest = [s for s in shapes if s is not first]
    while rest:
        touching = [s for s in rest if touches(s.cells, built)] or rest
        nxt = touching[int(rng.integers(len(touching)))]
        order.append(nxt)
        built |= set(nxt.cells)
        rest.remove(nxt)
    return order


def _cell_order(shape, is_first: bool) -> list:
    cells = list(shape.cells)
    if is_first and cells[0][1] != 1:
        ground = next(c for c in cells if c[1] == 1)
        cells.remove(ground)
        cells.insert(0, ground)
    return cells


def _last_reference(state: GameState, yaw: float) -> dict:
    option = {"kind": "last", "color": None, "extreme": None, "cell": list(state.last_cell)}
    return language.realize_reference(state.rng, option)


def _instruction(state: GameState, shape, remaining: list, lead=()) -> int:
    """Write one instruction for the next cells of ``remaining``; returns how many it covers."""
    rng = state.rng
    color = shape.color
    color_text = language.color_word(color)
    first = remaining[0]
    if not state.structure:
        pose = state.sample_pose([first], [first])
        omitted = state.maybe_omit(["color"])
        text = language.first_block_instruction(rng, None if omitted else color_text, first)
        record = {"kind": "first", "color": color_text, "target_cells": [list(first)], "on_ground": True,
                  "ref": None, "relation": None, "anchor": None, "omitted": omitted, "shape": shape.kind}
        clar = language.clarification(rng, "color", color_text) if omitted else None
        notes = [language.finish(rng, language.first_block_note(rng, first))] if language.chance(rng, 0.3) else []
        state.add_segment(pose, text, record, {**state.structure, first: color}, clarification=clar, lead=lead,
                          notes=notes, mistake_cell=first)
        return 1
    last = state.last_cell
    world_step = spatial.sub(first, last)
    run = [first]
    if max(abs(v) for v in world_step) == 1 and not language.chance(rng, SINGLE_P):
        limit = int(rng.integers(2, MAX_RUN + 1))
        for cell in remaining[1:]:
            if len(run) >= limit or spatial.sub(cell, run[-1]) != world_step:
                break
            run.append(cell)
    pose = state.sample_pose(run, run)
    goal = {**state.structure, **{c: color for c in run}}
    if len(run) == 1:
        omitted = state.maybe_omit(["color"])
        chosen = None
        far = max(abs(v) for v in world_step) > FAR_FROM_LAST
        if language.chance(rng, 0.8 if far else OTHER_REFERENCE_P):
            chosen = choose_reference(state, first, pose.yaw)
        if chosen is None:
            ref_cell, ref = last, _last_reference(state, pose.yaw)
        else:
            ref_cell, ref = chosen
        offset = spatial.world_to_builder(spatial.sub(first, ref_cell), pose.yaw)
        relation = language.relation_phrase(rng, offset)
        note = language.block_note(rng, state.structure, first, ref_cell)
        same_color = state.structure.get(tuple(ref_cell)) == color
        text = language.place_instruction(rng, None if omitted else color_text, relation["text"], ref["text"],
                                          note=note, same_color=same_color)
        record = {"kind": "place", "color": color_text, "target_cells": [list(first)], "ref": ref,
                  "relation": relation, "anchor": None, "omitted": omitted, "shape": shape.kind}
        clar = language.clarification(rng, "color", color_text) if omitted else None
    else:
        omitted = state.maybe_omit(["color", "count"])
        ref = _last_reference(state, pose.yaw)
        step = spatial.world_to_builder(world_step, pose.yaw)
        count = None if omitted == "count" else len(run)
        color_word = None if omitted == "color" else color_text
        if language.chance(rng, ANCHOR_FORM_P):
            anchor = language.anchor_phrase(rng, step)
            relation = None
            text = language.run_anchor_instruction(rng, color_word, count, anchor["text"], ref["text"])
        else:
            anchor = None
            relation = language.relation_phrase(rng, step, adjacent_only=True)
            text = language.run_instruction(rng, color_word, count, relation["text"], ref["text"],
                                            upward=step == (0, 1, 0))
        record = {"kind": "run", "color": color_text, "count": len(run), "step": list(step),
                  "target_cells": [list(c) for c in run], "ref": ref, "relation": relation,
                  "anchor": anchor, "omitted": omitted, "shape": shape.kind}
        clar = None
        if omitted == "color":
            clar = language.clarification(rng, "color", color_text)
        elif omitted == "count":
            clar = language.clarification(rng, "count", language.number(rng, len(run)))
    state.add_segment(pose, text, record, goal, order=run, clarification=clar, lead=lead,
                      mistake_cell=first if len(run) == 1 else None)
    return len(run)


def simulate_game(rng: np.random.Generator) -> SimGame:
    """One D_bs game."""
    state = GameState(rng, "bs")
    structure = sample_shape_structure(rng, NUM_SHAPES)
    shapes = _shape_order(rng, structure.shapes)
    for index, shape in enumerate(shapes):
        remaining = [c for c in _cell_order(shape, index == 0) if c not in state.structure]
        lead = []
        if language.chance(rng, SHAPE_INTRO_P):  # name the shape, as MDC Architects often do
            lead.append(language.shape_intro(rng, shape.kind, index, len(shapes),
                                             language.color_word(shape.color), len(shape.cells)))
            if language.chance(rng, SHAPE_DETAIL_P):
                lead.append(language.shape_detail(rng, shape.kind))
            elif index > 0 and touches(shape.cells, state.structure) and language.chance(rng, 0.4):
                lead.append(language.finish(rng, language.pick(rng, phrasebook.CONNECTION_NOTES)))
        while remaining:
            covered = _instruction(state, shape, remaining, lead)
            lead = []
            if not [c for c in remaining[covered:] if c not in state.structure] and language.chance(rng, PROGRESS_P):
                state.say_after(language.progress_line(rng, shape.kind, index, len(shapes)))
            remaining = [c for c in remaining[covered:] if c not in state.structure]
    if state.structure != dict(structure.blocks):
        raise RuntimeError("D_bs game did not end at its target structure")
    return state.finish({"shapes": [s.kind for s in shapes], "shape_records": [s.to_json() for s in shapes]})
