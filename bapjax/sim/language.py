"""Template-based Architect and Builder language with lexical and syntactic variation.

Every function that writes a phrase also returns a machine-readable record of what the phrase
means (directions and distances in the Builder's frame, the reference block, the counts), so
the grounding can be checked.  The phrase pieces a checker needs are kept verbatim in the
records (``relation["text"]``, ``ref["text"]``, ``anchor["text"]``).

The words and lines chosen from live in ``bapjax.sim.phrasebook``; this module builds sentences.

Conventions (see ``bapjax.sim.spatial``): offsets are (right, up, away); "front" is toward the
Builder, "behind" away from it; every direction is the Builder's at the time of the utterance.
"""

from __future__ import annotations

import re
from typing import Sequence

import numpy as np

from bapjax.sim import spatial
from bapjax.sim.phrasebook import (
    ADJACENT_1D,
    ANCHOR_WORDS,
    COLOR_ANSWERS,
    COLOR_QUESTIONS,
    CONFIRMATIONS,
    CORNER_2D,
    CORRECTIONS,
    COUNT_ANSWERS,
    COUNT_QUESTIONS,
    COUNTED,
    DIAGONAL_PARTS,
    DIRECTION_ANSWERS,
    DIRECTION_QUESTIONS,
    EXTREME_POSTFIX,
    EXTREME_WORDS,
    FLOATING_NOTES,
    FRAME_NOTES,
    LAST_PHRASES,
    LENGTH_QUESTIONS,
    LEVEL_WORDS,
    NUMBER_WORDS,
    ORDINALS,
    PLACE_VERBS,
    PREFIXES,
    REMOVE_IT,
    REMOVE_VERBS,
    SHAPE_DETAILS,
    SHAPE_NAMES,
    SHAPE_PLURALS,
)
from bapjax.world import grid

# --------------------------------------------------------------------------------------------
# Small helpers


def pick(rng: np.random.Generator, options: Sequence):
    return options[int(rng.integers(len(options)))]


def chance(rng: np.random.Generator, p: float) -> bool:
    return bool(rng.random() < p)


def number(rng: np.random.Generator, n: int, digits_p: float = 0.3) -> str:
    """A count as a word ("three") or digits ("3")."""
    if n < len(NUMBER_WORDS) and not chance(rng, digits_p):
        return NUMBER_WORDS[n]
    return str(n)


def color_word(color: int) -> str:
    return grid.color_name(color)


def blocks_noun(rng: np.random.Generator, n: int) -> str:
    if n == 1:
        return pick(rng, ("block", "block", "space", "cube", "brick"))
    return pick(rng, ("blocks", "blocks", "spaces", "cubes", "bricks"))


_ARTICLE = re.compile(r"\b([aA]) ([aeiou])")


def finish(rng: np.random.Generator, text: str, question: bool = False) -> str:
    """Sentence-level variation: optional capital letter and end punctuation."""
    text = _ARTICLE.sub(r"\1n \2", " ".join(text.split()))
    if chance(rng, 0.35):
        text = text[0].upper() + text[1:]
    if not question and chance(rng, 0.05):
        text += pick(rng, (" please", ", please", ", thanks"))
    end = "?" if question else pick(rng, ("", "", ".", ".", "!"))
    if question and (text.endswith("?") or chance(rng, 0.2)):
        end = ""
    return text + end


# --------------------------------------------------------------------------------------------
# Referring expressions for a reference block


def _unique_winner(cells: list, coords: dict, extreme: str):
    axis, sign = spatial.EXTREMES[extreme]
    best, winner, ties = None, None, 0
    for cell in cells:
        value = sign * coords[cell][axis]
        if best is None or value > best:
            best, winner, ties = value, cell, 1
        elif value == best:
            ties += 1
    return winner if ties == 1 else None


def reference_table(structure: dict, yaw: float, last_cell=None) -> dict:
    """{cell: [options]}: every way to identify each block of ``structure`` uniquely.

    Kinds: 'last' (the last block the Builder placed), 'color' (the only block of its color),
    'extreme_color' (the most-<extreme> block of its color), 'extreme' (of all blocks), with
    extremes in the Builder's frame at ``yaw``.
    """
    coords = {cell: spatial.world_to_builder(cell, yaw) for cell in structure}
    table: dict = {cell: [] for cell in structure}
    if last_cell is not None and tuple(last_cell) in table:
        table[tuple(last_cell)].append({"kind": "last", "color": None, "extreme": None})
    by_color: dict = {}
    for cell, color in structure.items():
        by_color.setdefault(color, []).append(cell)
    for color, cells in by_color.items():
        if len(cells) == 1:
            table[cells[0]].append({"kind": "color", "color": color_word(color), "extreme": None})
            continue
        for extreme in spatial.EXTREMES:
            winner = _unique_winner(cells, coords, extreme)
            if winner is not None:
                table[winner].append({"kind": "extreme_color", "color": color_word(color), "extreme": extreme})
    if len(structure) > 1:
        everything = list(structure)
        for extreme in spatial.EXTREMES:
            winner = _unique_winner(everything, coords, extreme)
            if winner is not None:
                table[winner].append({"kind": "extreme", "color": None, "extreme": extreme})
    for cell, options in table.items():
        for option in options:
            option["cell"] = list(cell)
    return table


def reference_options(structure: dict, ref_cell, yaw: float, last_cell=None) -> list[dict]:
    """All ways to identify ``ref_cell`` uniquely in ``structure`` (see ``reference_table``)."""
    return reference_table(structure, yaw, last_cell)[tuple(ref_cell)]


def realize_reference(rng: np.random.Generator, option: dict) -> dict:
    """Text for one referring-expression option; returns the option with 'text' added."""
    kind, color, extreme = option["kind"], option["color"], option["extreme"]
    noun = pick(rng, ("block", "block", "one", "cube", "brick"))
    if kind == "last":
        text = pick(rng, LAST_PHRASES)
    elif kind == "color":
        text = pick(rng, (f"the {color} block", f"the {color} one", f"the {color}", f"the {color} cube",
                          f"the {color} brick", f"the single {color} block", f"the only {color} one"))
    elif kind == "extreme_color":
        if chance(rng, 0.6):
            text = f"the {pick(rng, EXTREME_WORDS[extreme])} {color} {noun}"
        else:
            text = f"the {color} {noun} {pick(rng, EXTREME_POSTFIX[extreme])}"
    else:
        if chance(rng, 0.6):
            text = f"the {pick(rng, EXTREME_WORDS[extreme])} {noun}"
        else:
            text = f"the {noun} {pick(rng, EXTREME_POSTFIX[extreme])}"
    return {**option, "text": text}


# --------------------------------------------------------------------------------------------
# Relations to a reference block (1D / 2D / 3D with distances)


def _counted(rng: np.random.Generator, name: str, distance: int) -> tuple[str, str]:
    head, connector = pick(rng, COUNTED[name])
    n = "a" if distance == 1 and "{b}" in head and chance(rng, 0.25) else number(rng, distance)
    return head.format(n=n, b=blocks_noun(rng, distance)), connector


def relation_phrase(rng: np.random.Generator, offset: Sequence[int], adjacent_only: bool = False) -> dict:
    """A phrase placing a cell at ``offset`` (right, up, away) from a reference, without the
    reference itself: {'text', 'type', 'offset', 'components'}; the phrase ends so the reference
    expression can follow ("two to the left and one above" + " the red block")."""
    components = spatial.offset_components(offset)
    rtype = spatial.relation_type(offset)
    if rtype is None:
        raise ValueError("relation_phrase: zero offset")
    distances = [d for _, d in components]
    text = None
    # adjacent_only: a run's step ("two blocks behind the last block" means a line going back),
    # so no counted form that would read as a distance
    if rtype == "1D" and distances[0] == 1 and (adjacent_only or chance(rng, 0.65)):
        text = pick(rng, ADJACENT_1D[components[0][0]])
    elif rtype == "2D" and max(distances) == 1 and (adjacent_only or chance(rng, 0.55)):
        names = [n for n, _ in components]
        key = (names[1], names[0]) if names[0] in ("left", "right") and names[1] in ("up", "down") else None
        if key in CORNER_2D and chance(rng, 0.5):
            text = pick(rng, CORNER_2D[key])
        else:
            order = list(components)
            if chance(rng, 0.5):
                order.reverse()
            parts = [pick(rng, DIAGONAL_PARTS[n]) for n, _ in order]
            lead = pick(rng, ("diagonally ", "diagonally ", ""))
            text = f"{lead}{parts[0][0]}{parts[0][1]} and {parts[1][0]}{parts[1][1]}"
    if text is None:
        order = list(components)
        rng.shuffle(order)
        pieces = [_counted(rng, n, d) for n, d in order]
        heads = [h for h, _ in pieces]
        if len(heads) == 1:
            body = heads[0]
        elif len(heads) == 2:
            body = f"{heads[0]} and {heads[1]}"
        else:
            body = f"{heads[0]}, {heads[1]}{pick(rng, (',', ''))} and {heads[2]}"
        text = body + pieces[-1][1]
    return {"text": text, "type": rtype, "offset": [int(v) for v in offset],
            "components": [[n, int(d)] for n, d in components]}


# --------------------------------------------------------------------------------------------
# Builder-anchored directions ("going up and to the left of you")


def anchor_phrase(rng: np.random.Generator, direction: Sequence[int]) -> dict:
    """The direction of travel of a line (a row or a diagonal) with the Builder as anchor:
    'going up and to the left of you'.  ``direction`` is a (right, up, away) step."""
    components = [n for n, _ in spatial.offset_components(direction)]
    if not components:
        raise ValueError("anchor_phrase: zero direction")
    components.sort(key=lambda n: 0 if n in ("up", "down") else 1)
    words = [pick(rng, ANCHOR_WORDS[n]) for n in components]
    body = words[0] if len(words) == 1 else (
        " and ".join(words) if len(words) == 2 else f"{words[0]}, {words[1]} and {words[2]}")
    lead = pick(rng, ("going ", "going ", "heading ", "running ", "extending ", ""))
    if lead == "" and components[0] in ("left", "right") and not body.startswith("to"):
        lead = "going "
    if lead == "" and components[0] in ("up", "down", "front", "behind"):
        lead = "going "
    return {"text": lead + body, "dirs": [[int(v) for v in direction]],
            "components": [[n] for n in components]}


def plane_anchor_phrase(rng: np.random.Generator, dir_a: Sequence[int], size_a: int,
                        dir_b: Sequence[int], size_b: int) -> dict:
    """Spanning directions of a plane from its first corner: '3 to your left and 2 away from you'."""
    (name_a, _), = spatial.offset_components(dir_a)
    (name_b, _), = spatial.offset_components(dir_b)
    pieces = []
    for name, size in ((name_a, size_a), (name_b, size_b)):
        word = pick(rng, ANCHOR_WORDS[name])
        if name in ("left", "right") and not word.startswith("to"):
            word = "to the " + word
        pieces.append(f"{number(rng, size)} {word}")
    lead = pick(rng, ("extending ", "going ", "spanning ", "reaching "))
    return {"text": lead + " and ".join(pieces), "dirs": [[int(v) for v in dir_a], [int(v) for v in dir_b]],
            "sizes": [int(size_a), int(size_b)]}


# --------------------------------------------------------------------------------------------
# Builder and Architect chit-chat

def talk(rng: np.random.Generator, bank: Sequence[str], question: bool = False) -> str:
    """One line from a bank of chat, with some variation of case, spelling and end punctuation."""
    line = informal(rng, pick(rng, bank))
    if chance(rng, 0.3):
        line = line[0].upper() + line[1:]
    if question or line.endswith(("?", "!", ")", ".")):
        return line
    return line + pick(rng, ("", "", "", ".", "!"))


def shape_intro(rng: np.random.Generator, kind: str, index: int, total: int, color: str, size: int) -> str:
    """A line announcing the next shape (true by construction: its kind, color and block count)."""
    name = pick(rng, SHAPE_NAMES[kind])
    nth = ORDINALS[index] if index < len(ORDINALS) else "next"
    options = [
        f"the {nth} part is {name}",
        f"now {name}",
        f"next we make {name}",
        f"the {nth} shape is {name}, all {color}",
        f"now a {color} shape, it looks like {name[2:] if name.startswith('a ') else name[3:]}",
        f"next: {name} made of {number(rng, size)} {color} blocks",
        f"ok, {name} next, {number(rng, size)} blocks",
        f"this part is {name}",
    ]
    if index == total - 1 and index > 0:
        options += [f"the last shape is {name}", f"finally, {name}"]
    if index == 0:
        options += [f"we're building {number(rng, total)} shapes, the first one is {name}",
                    f"this structure has {number(rng, total)} parts. first {name}"]
    return finish(rng, pick(rng, options))


def floating_note(rng: np.random.Generator) -> str:
    """Said of a block with nothing under or beside it once placed (the Builder needs a support)."""
    return pick(rng, FLOATING_NOTES)


FLOATING_NOTE_P = 0.7
LEVEL_NOTE_P = 0.12


def block_note(rng: np.random.Generator, structure: dict, cell, ref_cell=None) -> str | None:
    """A true remark about a single block's place, or None: floating (nothing on any face and
    not on the ground, so the Builder needs a temporary support), else sometimes its level."""
    if not grid.supported(structure, *cell):
        return floating_note(rng) if chance(rng, FLOATING_NOTE_P) else None
    if chance(rng, LEVEL_NOTE_P):
        return level_note(rng, int(cell[1]), None if ref_cell is None else int(ref_cell[1]))
    return None


def level_note(rng: np.random.Generator, y: int, ref_y: int | None = None) -> str | None:
    """Where a block is in height: '(on the second level)', 'at the same level as it'."""
    if ref_y is not None and y == ref_y and chance(rng, 0.5):
        return pick(rng, ("at the same level", "on the same level", "at the same height"))
    if y in LEVEL_WORDS:
        return pick(rng, LEVEL_WORDS[y])
    return None


def clarification(rng: np.random.Generator, what: str, value: str) -> tuple[str, str]:
    """(Builder question, Architect answer) for an omitted detail ('color', 'count', 'direction',
    'length'); ``value`` is the omitted detail as text."""
    if what == "color":
        answer = _ARTICLE.sub(r"\1n \2", pick(rng, COLOR_ANSWERS).format(c=value))
        return finish(rng, pick(rng, COLOR_QUESTIONS), True), answer
    if what == "count":
        return finish(rng, pick(rng, COUNT_QUESTIONS), True), pick(rng, COUNT_ANSWERS).format(n=value)
    if what == "length":
        return finish(rng, pick(rng, LENGTH_QUESTIONS), True), pick(rng, COUNT_ANSWERS).format(n=value)
    if what == "direction":
        return finish(rng, pick(rng, DIRECTION_QUESTIONS), True), pick(rng, DIRECTION_ANSWERS).format(d=value)
    raise ValueError(f"clarification: unknown detail {what!r}")


def confirmation(rng: np.random.Generator) -> str:
    return pick(rng, CONFIRMATIONS)


# --------------------------------------------------------------------------------------------
# Instructions


def _color_adj(color: str | None) -> str:
    return f"{color} " if color else ""


MIDDLE_RADIUS = 1  # "in the middle" only for a cell this close (x and z) to the grid's centre


def first_block_instruction(rng: np.random.Generator, color: str | None, cell=None) -> str:
    """The first block of a game, on the empty ground (any cell is a correct reading; "in the
    middle" is only said when the block's `cell` is within MIDDLE_RADIUS of the centre)."""
    c = _color_adj(color)
    templates = [
        "{p}start with a {c}block on the ground",
        "{p}{v} a {c}block on the ground",
        "{p}{v} a {c}block anywhere on the ground",
        "{p}let's begin with a {c}block on the ground",
        "{p}first, {v} a {c}block down on the ground",
        "{p}we start with one {c}block on the floor",
    ]
    if cell is not None and abs(cell[0]) <= MIDDLE_RADIUS and abs(cell[2]) <= MIDDLE_RADIUS:
        templates.append("{p}{v} a {c}block somewhere in the middle, on the ground")
    template = pick(rng, tuple(templates))
    return finish(rng, template.format(p=pick(rng, ("", "", "ok ", "so ")), c=c, v=pick(rng, PLACE_VERBS)))


def place_instruction(rng: np.random.Generator, color: str | None, relation: str, reference: str,
                      note: str | None = None, same_color: bool = False) -> str:
    """One block at a relation to a reference: 'put a red block two to the left of the blue one'.
    ``note`` (a true remark: 'it will be floating', 'on the second level') follows after a comma;
    ``same_color``: the block has the reference's color ('another red one ...')."""
    c = _color_adj(color)
    question = False
    choice = int(rng.integers(12 if same_color and color else 10))
    p, v = pick(rng, PREFIXES), pick(rng, PLACE_VERBS)
    tail = f", {note}" if note else ""
    if choice >= 10:
        forms = [f"{p}{v} another {color} block {relation} {reference}",
                 f"{p}same color, {color}, {relation} {reference}"]
        if not relation.startswith(("one ", "a ")):  # no "another red one one to the left"
            forms += [f"{p}another {color} one {relation} {reference}", f"{p}one more {color} {relation} {reference}"]
        text = pick(rng, forms)
    elif choice == 0:
        text = f"{p}{relation} {reference}, {v} a {c}block"
    elif choice == 1 and not relation.startswith(("one ", "a ")):  # no "a red one one to the left"
        text = f"{p}a {c}one {relation} {reference}" if color else f"{p}one {relation} {reference}"
    elif choice == 1:
        text = f"{p}a {c}block {relation} {reference}"
    elif choice == 2:
        text = f"{p}{c}{relation} {reference}" if color else f"{p}one more {relation} {reference}"
    elif choice == 3:
        text = f"{p}i need a {c}block {relation} {reference}"
    elif choice == 4:
        text = f"can you {v} a {c}block {relation} {reference}"
        question = True
    elif choice == 5:
        text = f"{p}we need a {c}block {relation} {reference}"
    elif choice == 6:
        p = "" if "next" in p else p  # no "next, the next block ..."
        text = (f"{p}the next block is {color} and goes {relation} {reference}" if color
                else f"{p}the next block goes {relation} {reference}")
    elif choice == 7:
        text = f"{p}{v} one {c}block {relation} {reference}"
    else:
        text = f"{p}{v} a {c}block {relation} {reference}"
    return finish(rng, text + tail, question)


def run_instruction(rng: np.random.Generator, color: str | None, count: int | None, relation: str,
                    reference: str, upward: bool) -> str:
    """Several blocks in a line from a reference, each one step further ('place three red blocks
    on top of the last block').  ``count`` None leaves the number out (for a clarification)."""
    c = _color_adj(color)
    n = number(rng, count) if count else pick(rng, ("some", "a few", "more"))
    more = "more " if count and chance(rng, 0.3) else ""
    p, v = pick(rng, PREFIXES), pick(rng, PLACE_VERBS)
    noun = "blocks"
    if upward and chance(rng, 0.4):
        text = f"{p}stack {n} {more}{c}{noun} {relation} {reference}"
    else:
        # a line of blocks, not a heap: say so unless it is a stack going up
        tails = (", in a row", ", one after the other", ", in a line", " in a row", ", in a straight line",
                 f", each one {relation} the one before")
        tail = pick(rng, ("",) + tails) if upward else pick(rng, tails)
        text = pick(rng, (
            f"{p}{v} {n} {more}{c}{noun} {relation} {reference}{tail}",
            f"{p}{n} {more}{c}{noun} {relation} {reference}{tail}",
            f"{p}i need {n} {more}{c}{noun} {relation} {reference}{tail}",
        ))
    return finish(rng, text)


def run_anchor_instruction(rng: np.random.Generator, color: str | None, count: int | None, anchor: str,
                           reference: str) -> str:
    """A line of blocks starting next to the reference, described by its Builder-anchored direction."""
    c = _color_adj(color)
    n = number(rng, count) if count else pick(rng, ("some", "a few"))
    p, v = pick(rng, PREFIXES), pick(rng, PLACE_VERBS)
    text = pick(rng, (
        f"{p}{v} a row of {n} {c}blocks {anchor} from {reference}",
        f"{p}continue from {reference} with {n} {c}blocks {anchor}",
        f"{p}from {reference}, {v} {n} {c}blocks {anchor}",
    ))
    return finish(rng, text)


def remove_instruction(rng: np.random.Generator, target: str) -> str:
    p = pick(rng, PREFIXES + ("actually, ", "oops, ", "sorry, "))
    text = pick(rng, (f"{p}{pick(rng, REMOVE_VERBS)} {target}",
                      f"{p}please {pick(rng, REMOVE_VERBS)} {target}",
                      f"{p}we don't need {target} anymore, {pick(rng, REMOVE_IT)}",
                      f"{p}{target} has to go, {pick(rng, REMOVE_IT)}"))
    return finish(rng, text)


# --------------------------------------------------------------------------------------------
# What the Architect says about the whole structure before starting (true of the target)


def overview_lines(rng: np.random.Generator, target: dict, num_shapes: int | None = None,
                   shape_kinds: Sequence[str] = ()) -> list[str]:
    """Zero to two lines describing the target: block count, colors, height, shape count."""
    if not target:
        return []
    n = len(target)
    colors = sorted({color_word(c) for c in target.values()}, key=lambda w: grid.COLOR_TO_ID[w])
    height = max(c[1] for c in target) - grid.Y_MIN + 1
    color_list = colors[0] if len(colors) == 1 else ", ".join(colors[:-1]) + " and " + colors[-1]
    facts = [
        pick(rng, (f"this one has {number(rng, n)} blocks in total", f"the whole thing is {number(rng, n)} blocks",
                   f"it's {'a small' if n <= 10 else 'a fairly big'} structure, {number(rng, n)} blocks",
                   f"we need {number(rng, n)} blocks altogether")),
        pick(rng, (f"we'll use {color_list}", f"it's made of {color_list} bricks",
                   f"the colors are {color_list}", f"you'll need {color_list}")
             if len(colors) > 1 else (f"it's all {colors[0]}", f"only {colors[0]} blocks this time")),
        pick(rng, (f"it's {number(rng, height)} blocks tall at the highest point",
                   f"the tallest part is {number(rng, height)} high", f"it's {number(rng, height)} levels high")
             if height > 1 else ("it's flat, just one level", "everything is on the ground", "it's only one layer")),
    ]
    if num_shapes:
        facts.append(pick(rng, (f"there are {number(rng, num_shapes)} shapes", f"it has {number(rng, num_shapes)} parts",
                                f"it's made of {number(rng, num_shapes)} pieces")))
    if shape_kinds:
        facts.append(pick(rng, (f"it's {shapes_phrase(rng, shape_kinds)}", f"there's {shapes_phrase(rng, shape_kinds)}",
                                f"basically {shapes_phrase(rng, shape_kinds)} put together")))
    facts.append(pick(rng, (f"there are {color_counts_phrase(rng, target)}", f"you'll use {color_counts_phrase(rng, target)}",
                            f"in total {color_counts_phrase(rng, target)}")))
    across = max(max(c[0] for c in target) - min(c[0] for c in target),
                 max(c[2] for c in target) - min(c[2] for c in target)) + 1
    facts.append(pick(rng, (f"it's at most {number(rng, across)} blocks across", "the entire thing fits within the grid",
                            f"{number(rng, across)} blocks across at the widest")))
    count = int(rng.integers(1, 3))
    chosen = [facts[i] for i in sorted(rng.choice(len(facts), size=count, replace=False).tolist())]
    return [finish(rng, line) for line in chosen]


def shape_detail(rng: np.random.Generator, kind: str) -> str:
    return finish(rng, pick(rng, SHAPE_DETAILS[kind]))


def progress_line(rng: np.random.Generator, kind: str, index: int, total: int) -> str:
    """The Architect when a shape is finished (index of the shape, of ``total``)."""
    name = pick(rng, SHAPE_NAMES[kind])
    nth = ORDINALS[index] if index < len(ORDINALS) else "next"
    options = [f"good, the {nth} shape is complete", f"that finishes the {nth} part",
               f"ok, that's {name} done", f"great, {name} finished", f"the {nth} piece is done"]
    if index < total - 1:
        options += [f"{number(rng, total - index - 1)} more {'shape' if total - index - 1 == 1 else 'shapes'} to go",
                    "now the next shape", "good, on to the next part"]
    return finish(rng, pick(rng, options))


def frame_note(rng: np.random.Generator) -> str:
    return finish(rng, pick(rng, FRAME_NOTES))


def end_note(rng: np.random.Generator, kind: str) -> str:
    """Said of a shape's start block in D_ss: a corner of a plane, an end of a row or diagonal."""
    if kind == "plane":
        return pick(rng, ("that's one corner of it", "that block is a corner", "start from that corner"))
    return pick(rng, ("that's one end of it", "that block is one end", "start from that end"))


def orientation_note(rng: np.random.Generator, dirs_a, dirs_b) -> str | None:
    """'parallel to the first one' / 'perpendicular to the first one' for two lines (world steps)."""
    if len(dirs_a) != 1 or len(dirs_b) != 1:
        return None
    a, b = dirs_a[0], dirs_b[0]
    if a[1] or b[1]:  # only horizontal lines: "parallel" of stairs reads oddly
        return None
    if tuple(abs(v) for v in a) == tuple(abs(v) for v in b):
        return pick(rng, ("parallel to the first one", "running parallel to the first row", "parallel to it"))
    if a[0] * b[0] + a[2] * b[2] == 0:
        return pick(rng, ("perpendicular to the first one", "at a right angle to the first row",
                          "perpendicular to it"))
    return None


def informal(rng: np.random.Generator, text: str, p: float = 0.25) -> str:
    """Chat-style spelling for social lines (never for grounded instruction text): "thats",
    "im", "dont", "u", "teh", as in the MDC's chat."""
    if not chance(rng, p):
        return text
    swaps = (("that's", "thats"), ("i'm", "im"), ("don't", "dont"), ("let's", "lets"), ("you're", "youre"),
             ("what's", "whats"), ("okay", "k"), ("you", "u"), ("yes", "ya"), ("yeah", "yea"), ("the ", "teh "),
             ("going to", "gonna"), ("kind of", "kinda"), ("i've", "ive"), ("doesn't", "doesnt"))
    a, b = swaps[int(rng.integers(len(swaps)))]
    return re.sub(rf"\b{re.escape(a)}", b, text, count=1)


def first_block_note(rng: np.random.Generator, cell) -> str | None:
    """A true remark about where the first block is: near the centre, an edge or a corner of the
    grid, or that the board is still empty."""
    x, z = abs(int(cell[0])), abs(int(cell[2]))
    if x <= MIDDLE_RADIUS and z <= MIDDLE_RADIUS:
        return pick(rng, ("near the center of the grid", "roughly centered", "close to the center"))
    if x == grid.X_MAX and z == grid.Z_MAX:
        return pick(rng, ("in a corner of the board", "right in one of the corners"))
    if x == grid.X_MAX or z == grid.Z_MAX:
        return pick(rng, ("along one edge of the board", "right at the edge of the grid", "on the edge"))
    return pick(rng, ("the board is empty right now", "there's nothing built yet", "we start from an empty grid"))


def correction(rng: np.random.Generator, right: str, wrong: str) -> str:
    """The Architect's correction of a wrongly colored last block (its fix: remove, place right)."""
    return finish(rng, _ARTICLE.sub(r"\1n \2", pick(rng, CORRECTIONS).format(c=right, w=wrong)))


def shapes_phrase(rng: np.random.Generator, kinds: Sequence[str]) -> str:
    """'an L, a row and a square' / 'two rows and a T' for a list of shape kinds."""
    counts: dict = {}
    for kind in kinds:
        counts[kind] = counts.get(kind, 0) + 1
    parts = [pick(rng, SHAPE_NAMES[k]) if n == 1 else f"{number(rng, n)} {SHAPE_PLURALS[k]}" for k, n in counts.items()]
    return parts[0] if len(parts) == 1 else ", ".join(parts[:-1]) + " and " + parts[-1]


def color_counts_phrase(rng: np.random.Generator, target: dict) -> str:
    """'four reds, two blues and one green' (plural color names, as MDC Architects write)."""
    counts: dict = {}
    for color in target.values():
        counts[color] = counts.get(color, 0) + 1
    parts = [f"{number(rng, n)} {color_word(c)}{'s' if n > 1 else ''}" for c, n in sorted(counts.items())]
    return parts[0] if len(parts) == 1 else ", ".join(parts[:-1]) + " and " + parts[-1]


def extent_note(rng: np.random.Generator, dirs_builder, sizes) -> str | None:
    """'so it's three wide and two tall' from a plane's Builder-frame directions and sizes."""
    words = []
    for d, n in zip(dirs_builder, sizes):
        if d[0]:
            words.append(f"{number(rng, n)} wide")
        elif d[1]:
            words.append(f"{number(rng, n)} {pick(rng, ('tall', 'high'))}")
        else:
            words.append(f"{number(rng, n)} {pick(rng, ('deep', 'long'))}")
    return f"so it's {words[0]} and {words[1]}" if len(words) == 2 else None


