"""D_ss: shape-based dialogues for two-shape structures (paper section 5.3.3).

The target is ``sample_shape_structure(rng, 2, kinds=("row", "diagonal", "plane"))``.  One
instruction per shape, each built in one go.  The Architect picks the shape order (first a
shape with a block on the ground) and, in each shape, a start block (an end of a row or
diagonal, a corner of a plane; low and near the last block) that is also where the Builder
starts.  The shape's extent is given with the Builder as anchor ("going up and to the left of
you"; a plane: "extending three to your left and two away from you"); the first shape starts
"on the ground", the second's start block is placed with a 1D/2D/3D relation to the last block
of the first shape ("starting one to the left, two underneath and one block in front of the last
block").  Clarifications: a left-out color, length or direction.
"""

from __future__ import annotations

import numpy as np

from bapjax.sim import language, phrasebook, spatial
from bapjax.sim.dialogue import GameState, SimGame
from bapjax.sim.structures import sample_shape_structure

SHAPE_KINDS = ("row", "diagonal", "plane")
NUM_SHAPES = 2
NEAR_START_P = 0.7  # start the second shape at the end/corner nearest the last block
LAST_REFERENCE_P = 0.7  # "the last block" rather than another unique description of it
SHAPE_INTRO_P = 0.4  # "the second part is a diagonal" before the instruction
NOTE_P = 0.3  # "that's one corner of it" / "parallel to the first one" after the instruction
PROGRESS_P = 0.4  # "good, the first shape is complete"

ROW_NOUNS = ("row", "line", "row", "straight line", "horizontal row", "horizontal line")
COLUMN_NOUNS = ("column", "tower", "stack", "vertical row", "pillar", "vertical column", "upright column")
DIAGONAL_NOUNS = ("diagonal", "diagonal line", "diagonal row")
STAIR_NOUNS = ("diagonal", "staircase", "diagonal", "diagonal line", "set of stairs", "row of steps")
FIRST_PREFIXES = ("", "", "", "first, ", "ok ", "so ", "let's start: ", "to start, ", "alright, ")
FLAT_PLANE_NOUNS = ("plane", "flat plane", "floor", "rectangle", "layer", "platform", "flat board",
                    "horizontal rectangle")
WALL_NOUNS = ("wall", "vertical plane", "wall", "vertical rectangle", "upright wall")


def _starts(shape) -> list[tuple[tuple, list[tuple], list[int]]]:
    """Possible (start cell, world unit directions, sizes) of a row/diagonal/plane."""
    if shape.kind in ("row", "diagonal"):
        geometry = spatial.line_geometry(shape.cells)
        if geometry is None:
            raise RuntimeError(f"{shape.kind} cells {shape.cells} are not a straight line")
        a, b, step = geometry
        back = tuple(-v for v in step)
        return [(a, [step], [len(shape.cells)]), (b, [back], [len(shape.cells)])]
    corners = spatial.plane_corners(shape.cells)
    if not corners:
        raise RuntimeError(f"plane cells {shape.cells} are not a rectangle")
    return [(corner, [d1, d2], [n1, n2]) for corner, d1, n1, d2, n2 in corners]


def _build_order(start, dirs, sizes) -> list[tuple]:
    """Cells from the start; a plane row by row, the upward direction outermost."""
    if len(dirs) == 1:
        return [spatial.add(start, tuple(k * v for v in dirs[0])) for k in range(sizes[0])]
    (d1, d2), (n1, n2) = dirs, sizes
    if d1[1] != 0:  # keep the inner loop horizontal, so a wall goes up row by row
        d1, d2, n1, n2 = d2, d1, n2, n1
    return [spatial.add(start, tuple(i * a + j * b for a, b in zip(d1, d2)))
            for j in range(n2) for i in range(n1)]


def _choose_start(rng, shape, first: bool, last_cell):
    options = _starts(shape)
    lowest = min(o[0][1] for o in options)
    low = [o for o in options if o[0][1] == lowest]
    if first or last_cell is None or not language.chance(rng, NEAR_START_P):
        return low[int(rng.integers(len(low)))]
    return min(low, key=lambda o: (sum(abs(v) for v in spatial.sub(o[0], last_cell)), o[0]))


def _shape_noun(rng, kind: str, dirs_builder: list, sizes: list) -> str:
    if kind == "row":
        return language.pick(rng, COLUMN_NOUNS if dirs_builder[0][1] != 0 else ROW_NOUNS)
    if kind == "diagonal":
        return language.pick(rng, STAIR_NOUNS if dirs_builder[0][1] != 0 else DIAGONAL_NOUNS)
    vertical = any(d[1] != 0 for d in dirs_builder)
    noun = language.pick(rng, WALL_NOUNS if vertical else FLAT_PLANE_NOUNS)
    if not vertical and sizes[0] == sizes[1] and language.chance(rng, 0.5):
        noun = "square"
    return noun


def _instruction_text(rng, kind, noun, color, size_text, anchor, where, first: bool) -> str:
    """Assemble the instruction; None parts were left out for a clarification."""
    c = f"{color} " if color else ""
    verb = language.pick(rng, ("build", "make", "place", "put down", "create", "add"))
    p = language.pick(rng, FIRST_PREFIXES if first else phrasebook.PREFIXES)
    anchor_part = f" {anchor}" if anchor else ""
    if kind == "plane":
        dims = f"{size_text} " if size_text else ""
        body = f"a {dims}{c}{noun}"
    else:
        if size_text:
            forms = [f"a {c}{noun} of {size_text} blocks", f"a {size_text}-block {c}{noun}",
                     f"{size_text} {c}blocks in a {noun}"]
            if noun in COLUMN_NOUNS:
                forms += [f"a {c}{noun} {size_text} tall", f"a {c}{noun} {size_text} blocks high"]
            body = language.pick(rng, forms)
        else:
            body = f"a {c}{noun}"
    form = int(rng.integers(3))
    if form == 0:
        text = f"{p}{verb} {body}{anchor_part}, {where}"
    elif form == 1:
        text = f"{p}{where}, {verb} {body}{anchor_part}"
    else:
        text = f"{p}{verb} {body} {where}{',' if anchor else ''}{anchor_part}"
    return language.finish(rng, text)


def _shape_segment(state: GameState, shape, index: int, previous_dirs=None) -> list:
    """One instruction for a whole shape; returns its world directions."""
    first = index == 0
    rng = state.rng
    start, world_dirs, sizes = _choose_start(rng, shape, first, state.last_cell)
    order = _build_order(start, world_dirs, sizes)
    if set(order) != set(shape.cells):
        raise RuntimeError(f"{shape.kind} build order does not cover the shape")
    pose = state.sample_pose(order, order)
    dirs = [spatial.world_to_builder(d, pose.yaw) for d in world_dirs]
    color_text = language.color_word(shape.color)
    omitted = state.maybe_omit(["color", "length", "direction"])
    if shape.kind == "plane":
        anchor = language.plane_anchor_phrase(rng, dirs[0], sizes[0], dirs[1], sizes[1])
        size_text = (f"{sizes[0]}x{sizes[1]}" if language.chance(rng, 0.35)
                     else f"{language.number(rng, sizes[0])} by {language.number(rng, sizes[1])}")
        length_answer = size_text
    else:
        anchor = language.anchor_phrase(rng, dirs[0])
        size_text = language.number(rng, sizes[0])
        length_answer = size_text
    if shape.kind == "plane" and omitted == "length":
        omitted = "direction"  # a plane's anchor phrase carries its sizes
    noun = _shape_noun(rng, shape.kind, dirs, sizes)
    ref = relation = None
    if first:
        where = language.pick(rng, ("on the ground", "starting on the ground", "on the floor",
                                    "starting from the ground", "down on the ground"))
    else:
        last = state.last_cell
        options = language.reference_options(state.structure, last, pose.yaw, last)
        if not language.chance(rng, LAST_REFERENCE_P) and len(options) > 1:
            options = [o for o in options if o["kind"] != "last"]
        else:
            options = [o for o in options if o["kind"] == "last"]
        ref = language.realize_reference(rng, options[int(rng.integers(len(options)))])
        offset = spatial.world_to_builder(spatial.sub(start, last), pose.yaw)
        relation = language.relation_phrase(rng, offset)
        where = f"{language.pick(rng, ('starting', 'beginning', 'starting', 'with the first block'))} " \
                f"{relation['text']} {ref['text']}"
    text = _instruction_text(
        rng, shape.kind, noun,
        None if omitted == "color" else color_text,
        None if omitted == "length" else size_text,
        None if omitted == "direction" else anchor["text"], where, first)
    clar = None
    if omitted == "color":
        clar = language.clarification(rng, "color", color_text)
    elif omitted == "length":
        clar = language.clarification(rng, "length", length_answer)
    elif omitted == "direction":
        clar = language.clarification(rng, "direction", anchor["text"])
    record = {"kind": "shape", "shape": shape.kind, "color": color_text, "start": list(start),
              "dirs": [list(d) for d in dirs], "sizes": [int(s) for s in sizes],
              "target_cells": [list(c) for c in order], "on_ground": first, "ref": ref,
              "relation": relation, "anchor": anchor, "omitted": omitted, "noun": noun}
    goal = {**state.structure, **{c: shape.color for c in order}}
    lead = []
    if language.chance(rng, SHAPE_INTRO_P):
        lead.append(language.shape_intro(rng, shape.kind, index, NUM_SHAPES, color_text, len(order)))
    notes = []
    if not first and language.chance(rng, NOTE_P):
        notes.append(language.finish(rng, language.end_note(rng, shape.kind)))
    if shape.kind == "plane" and omitted != "direction" and language.chance(rng, NOTE_P):
        note = language.extent_note(rng, dirs, sizes)
        if note:
            notes.append(language.finish(rng, note))
    if previous_dirs is not None and language.chance(rng, NOTE_P):
        note = language.orientation_note(rng, previous_dirs, world_dirs)
        if note:
            notes.append(language.finish(rng, f"it's {note}"))
    state.add_segment(pose, text, record, goal, order=order, clarification=clar, lead=lead, notes=notes)
    if language.chance(rng, PROGRESS_P):
        state.say_after(language.progress_line(rng, shape.kind, index, NUM_SHAPES))
    return world_dirs


def _shape_order(rng, shapes) -> list:
    grounded = [s for s in shapes if min(c[1] for c in s.cells) == 1]
    first = grounded[int(rng.integers(len(grounded)))]
    return [first] + [s for s in shapes if s is not first]


def simulate_game(rng: np.random.Generator) -> SimGame:
    """One D_ss game."""
    state = GameState(rng, "ss")
    structure = sample_shape_structure(rng, NUM_SHAPES, kinds=SHAPE_KINDS)
    shapes = _shape_order(rng, structure.shapes)
    dirs = None
    for index, shape in enumerate(shapes):
        dirs = _shape_segment(state, shape, index, dirs)
    if state.structure != dict(structure.blocks):
        raise RuntimeError("D_ss game did not end at its target structure")
    return state.finish({"shapes": [s.kind for s in shapes], "shape_records": [s.to_json() for s in shapes]})
