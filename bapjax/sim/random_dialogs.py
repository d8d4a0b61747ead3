"""D_r: random structures, one block per instruction (paper section 5.2).

The target grows during the dialogue: ``bapjax.sim.structures.grow_random_structure`` gives the
blocks' growth order, and with a small probability an iteration instead removes a block placed
earlier (one whose removal keeps the structure on the ground and connected, now and at the
end).  The target is what stands at the end.  Each instruction addresses one block: the first
goes "on the ground"; every later placement is described by a 1D/2D/3D relation (with
distances) to a reference block the Architect picks among the blocks it can name uniquely by
color or by location ("the red one", "the bottom-most red block", "the block closest to you",
"the last block").  A removal names the block directly when it can, else by a relation to a
nameable block.
"""

from __future__ import annotations

import numpy as np

from bapjax.sim import language, spatial
from bapjax.sim.dialogue import GameState, SimGame
from bapjax.sim.structures import constraint_violations, grow_random_structure

MIN_BLOCKS, MAX_BLOCKS = 4, 13
REMOVE_P = 0.1
MAX_REFERENCE_DISTANCE = 3  # per Builder axis
OPTION_WEIGHTS = {"last": 0.6, "color": 3.0, "extreme_color": 2.0, "extreme": 1.2}


def choose_reference(state: GameState, target, yaw: float, exclude=()) -> tuple[tuple, dict] | None:
    """A (reference cell, realized referring expression) for describing ``target``."""
    rng = state.rng
    candidates, weights = [], []
    table = language.reference_table(state.structure, yaw, state.last_cell)
    for cell, options in table.items():
        if not options or cell in exclude or cell == tuple(target):
            continue
        offset = spatial.world_to_builder(spatial.sub(target, cell), yaw)
        if max(abs(v) for v in offset) > MAX_REFERENCE_DISTANCE:
            continue
        closeness = 1.0 / (1.0 + sum(abs(v) for v in offset))
        for option in options:
            candidates.append((cell, option))
            weights.append(OPTION_WEIGHTS[option["kind"]] * closeness)
    if not candidates:
        return None
    w = np.asarray(weights)
    cell, option = candidates[int(rng.choice(len(candidates), p=w / w.sum()))]
    return cell, language.realize_reference(rng, option)


def _reference_relation(state: GameState, rng, target, yaw: float) -> tuple[dict, dict] | None:
    """(reference, relation phrase) locating ``target`` from a chosen reference block, or None."""
    chosen = choose_reference(state, target, yaw)
    if chosen is None:
        return None
    ref_cell, ref = chosen
    offset = spatial.world_to_builder(spatial.sub(target, ref_cell), yaw)
    return ref, language.relation_phrase(rng, offset)


def _place_segment(state: GameState, cell, color: int) -> bool:
    rng = state.rng
    goal = {**state.structure, tuple(cell): color}
    omitted = state.maybe_omit(["color"])
    color_text = language.color_word(color)
    if not state.structure:
        pose = state.sample_pose([cell], [cell])
        text = language.first_block_instruction(rng, None if omitted else color_text, cell)
        record = {"kind": "first", "color": color_text, "target_cells": [list(cell)], "on_ground": True,
                  "ref": None, "relation": None, "anchor": None, "omitted": omitted}
    else:
        pose = state.sample_pose([cell], [cell])
        described = _reference_relation(state, rng, cell, pose.yaw)
        if described is None:
            return False
        ref, relation = described
        note = language.block_note(rng, state.structure, cell, ref["cell"])
        same_color = state.structure.get(tuple(ref["cell"])) == color
        text = language.place_instruction(rng, None if omitted else color_text, relation["text"], ref["text"],
                                          note=note, same_color=same_color)
        record = {"kind": "place", "color": color_text, "target_cells": [list(cell)], "ref": ref,
                  "relation": relation, "anchor": None, "omitted": omitted}
    clarification = language.clarification(rng, "color", color_text) if omitted else None
    notes = []
    if record["kind"] == "first" and language.chance(rng, 0.3):
        notes.append(language.finish(rng, language.first_block_note(rng, cell)))
    state.add_segment(pose, text, record, goal, clarification=clarification, notes=notes, mistake_cell=cell)
    return True


def _removable(state: GameState, future: list) -> list:
    """Built blocks whose removal keeps the structure valid now and at the end of the growth."""
    out = []
    final = dict(state.structure)
    final.update({tuple(b[:3]): b[3] for b in future})
    for cell in state.structure:
        now = {c: k for c, k in state.structure.items() if c != cell}
        end = {c: k for c, k in final.items() if c != cell}
        if now and not constraint_violations(now) and not constraint_violations(end):
            out.append(cell)
    return out


def _remove_segment(state: GameState, cell) -> bool:
    rng = state.rng
    color = state.structure[cell]
    pose = state.sample_pose([cell])
    goal = {c: k for c, k in state.structure.items() if c != cell}
    options = [o for o in language.reference_options(state.structure, cell, pose.yaw, state.last_cell)]
    color_text = language.color_word(color)
    if options and language.chance(rng, 0.7):
        ref = language.realize_reference(rng, options[int(rng.integers(len(options)))])
        text = language.remove_instruction(rng, ref["text"])
        record = {"kind": "remove", "color": color_text, "target_cells": [list(cell)], "ref": ref,
                  "relation": None, "anchor": None, "omitted": None, "target_is_ref": True}
    else:
        described = _reference_relation(state, rng, cell, pose.yaw)
        if described is None:
            return False
        ref, relation = described
        noun = language.pick(rng, ("block", "one", "block"))
        if noun == "one" and relation["text"].startswith(("one ", "a ")):  # no "the red one one behind"
            noun = "block"
        target_text = f"the {color_text} {noun} {relation['text']} {ref['text']}"
        text = language.remove_instruction(rng, target_text)
        record = {"kind": "remove", "color": color_text, "target_cells": [list(cell)], "ref": ref,
                  "relation": relation, "anchor": None, "omitted": None, "target_is_ref": False}
    state.add_segment(pose, text, record, goal)
    if state.last_cell == cell:
        state.last_cell = None
    return True


def simulate_game(rng: np.random.Generator) -> SimGame:
    """One D_r game."""
    state = GameState(rng, "r")
    num_blocks = int(rng.integers(MIN_BLOCKS, MAX_BLOCKS + 1))
    growth = [tuple(b) for b in grow_random_structure(rng, num_blocks)]
    removals = 0
    index = 0
    while index < len(growth):
        if len(state.structure) >= 3 and removals < num_blocks // 3 and language.chance(rng, REMOVE_P):
            candidates = _removable(state, growth[index:])
            if candidates:
                cell = candidates[int(rng.integers(len(candidates)))]
                if _remove_segment(state, cell):
                    removals += 1
                    continue
        x, y, z, color = growth[index]
        if not _place_segment(state, (x, y, z), color):
            break
        index += 1
    return state.finish({"num_blocks": num_blocks, "removals": removals, "shapes": []})
