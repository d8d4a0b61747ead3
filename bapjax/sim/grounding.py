"""Check a simulated corpus from its exported items alone: is each instruction grounded?

    python -m bapjax.sim.grounding --corpus DIR [--split train] [--examples 5]

Independent of the simulators' own records (``instructions.json``): for every item the chat
since the Builder's previous action is read, the instruction in it is parsed with a small
grammar of its own, resolved in the Builder's frame (the item's pose, yaw snapped to a quadrant:
``spatial.world_to_builder``) against the item's start structure and the last block the Builder
placed (read from the history), and the cells it names are compared with the item's NET
reference actions (temporary supports cancel out). What is parsed:

* the reference block: "the last block" and its synonyms, "the red one" (the only red block),
  "the left-most red block" / "the red block closest to you" (the most-<extreme> block of its
  color), "the highest block" (of all blocks), each resolved and required to be unique;
* the relation in front of it: direction words with their counts ("two to the left and one
  above", "diagonally in front of and below", "3 blocks closer to you than"), read backwards
  from the reference up to the first word that cannot belong to a relation;
* Builder-anchored directions ("going up and to the left of you", "extending three to your
  left and two away from you"), line lengths and counts ("three blue blocks"), plane sizes;
* first blocks and shapes "on the ground"; corrections ("no, that one should be red": the last
  block recolored); an item whose next item is such a correction is the Builder's mistake and
  is reported as such, not checked.

Words of phrase tables come from ``bapjax.sim.phrasebook`` (synonyms added there are understood);
an instruction this grammar cannot read is counted as unparsed with the reason, never an error.
The report gives, per kind, how many items were parsed and how many of those were correct.
"""

from __future__ import annotations

import collections
import dataclasses
import json
import re
import sys
from typing import Iterable, Sequence

from absl import flags

from bapjax import cli
from bapjax.corpus.load import items_from_flags
from bapjax.errors import UserError
from bapjax.sim import phrasebook, spatial
from bapjax.world import grid
from bapjax.world.grid import PLACE, Action
from bapjax.world.items import BapItem, ChatTurn

# ---------------------------------------------------------------------------------------------
# Words

NUMBERS = {w: n for n, w in enumerate(phrasebook.NUMBER_WORDS)}
NUMBERS["a"] = 1
DIRECTIONS = {  # word -> unit (right, up, away) in the Builder's frame
    "left": (-1, 0, 0), "right": (1, 0, 0),
    "above": (0, 1, 0), "top": (0, 1, 0), "up": (0, 1, 0), "upper": (0, 1, 0), "higher": (0, 1, 0),
    "over": (0, 1, 0), "atop": (0, 1, 0), "upwards": (0, 1, 0), "upward": (0, 1, 0),
    "below": (0, -1, 0), "under": (0, -1, 0), "underneath": (0, -1, 0), "beneath": (0, -1, 0),
    "bottom": (0, -1, 0), "down": (0, -1, 0), "lower": (0, -1, 0), "downwards": (0, -1, 0),
    "front": (0, 0, -1), "closer": (0, 0, -1), "nearer": (0, 0, -1), "near": (0, 0, -1),
    "toward": (0, 0, -1), "towards": (0, 0, -1),
    "behind": (0, 0, 1), "back": (0, 0, 1), "far": (0, 0, 1), "farther": (0, 0, 1),
    "further": (0, 0, 1), "away": (0, 0, 1),
}
RELATION_FILLERS = {",", "and", "to", "the", "of", "than", "from", "on", "in", "side", "directly", "just",
                    "diagonally", "you", "your", "block", "blocks", "space", "spaces", "cube", "cubes", "brick",
                    "bricks"}
NOUN = r"(?:block|one|cube|brick)"
COLOR = "(" + "|".join(grid.COLORS) + ")"
ANCHOR_LEADS = ("going", "heading", "running", "extending", "spanning", "reaching")
EXTREME_AXES = spatial.EXTREMES  # name -> (axis, sign)


def _alternation(phrases: Iterable[str]) -> str:
    return "|".join(re.escape(p) for p in sorted(set(phrases), key=len, reverse=True))


_EXTREME_WORD = {w: e for e, words in phrasebook.EXTREME_WORDS.items() for w in words}
_EXTREME_POST = {w: e for e, words in phrasebook.EXTREME_POSTFIX.items() for w in words}
REFERENCE_PATTERNS = [  # (kind, regex); groups: color / extreme words
    ("extreme_color", re.compile(rf"\bthe ({_alternation(_EXTREME_WORD)}) {COLOR} {NOUN}\b")),
    ("extreme_color_post", re.compile(rf"\bthe {COLOR} {NOUN} ({_alternation(_EXTREME_POST)})")),
    ("extreme", re.compile(rf"\bthe ({_alternation(_EXTREME_WORD)}) {NOUN}\b")),
    ("extreme_post", re.compile(rf"\bthe {NOUN} ({_alternation(_EXTREME_POST)})")),
    ("color", re.compile(rf"\bthe (?:single |only )?{COLOR}(?: {NOUN})?\b")),
    ("last", re.compile(r"\blastblock\b")),
]


def _plain(text: str) -> str:
    """Lower case, punctuation other than commas, hyphens and apostrophes dropped, single spaces."""
    text = re.sub(r"[^a-z0-9,\- ']+", " ", text.lower())
    return " ".join(text.replace(",", " , ").split()).replace(" ,", ",")


_PREFIXES = sorted({_plain(p) for p in phrasebook.PREFIXES + phrasebook.REPEAT_PREFIXES + ("actually, ", "oops, ", "sorry, ")
                    if p.strip()}, key=len, reverse=True)
VERB = " ; "  # what verb phrases become: a stop for the backward walk over a relation
_VERBS = re.compile(r"\b(?:" + _alternation([_plain(v) for v in phrasebook.PLACE_VERBS + phrasebook.REMOVE_VERBS]
                                             + ["stack", "continue", "need", "goes", "start with", "begin with",
                                                "create", "build", "make"])
                    + r")\b")


LAST = "lastblock"  # every "the last block" synonym becomes this word before verbs are replaced
_LAST_PHRASES = re.compile(r"\b(?:" + _alternation([_plain(p) for p in phrasebook.LAST_PHRASES if p != "it"])
                           + r"|it(?!'| is| will| should| floats| goes| looks| has| connects| touches| sticks))\b")


def _normalize(text: str) -> str:
    """A line as the grammar reads it: plain, its opener ("next up, ") dropped, "the last block"
    and its synonyms as one word, verb phrases ("put down", "take away") replaced by a stop, so
    their direction-like words never count."""
    text = _plain(text)
    stripped = True
    while stripped:  # "sorry: next up, ..." (a repeated instruction keeps its own opener)
        stripped = False
        for prefix in _PREFIXES:
            if text.startswith(prefix + " ") or text.startswith(prefix + ","):
                text = text[len(prefix):].lstrip(" ,")
                stripped = True
                break
    text = re.sub(r"\b(?:down )?on the (?:ground|floor)\b", "on the ground", text)  # "down" is no direction there
    text = re.sub(r"(?:^|,) ?each one [^,|]*? the one before", "", text)  # restates a run's step
    text = _LAST_PHRASES.sub(LAST, text)
    return _VERBS.sub(VERB.strip(), text)


def talk_lines() -> frozenset:
    """Every line of the simulators' talk banks (no grounded content), as ``_normalize`` gives
    them, with each informal spelling the simulators may use."""
    banks = (phrasebook.ARCHITECT_FEEDBACK, phrasebook.CHECK_ANSWERS, phrasebook.ARCHITECT_TRANSITIONS,
             phrasebook.ARCHITECT_AFTER_CHAT, phrasebook.OPENERS, phrasebook.CLOSINGS, phrasebook.FRAME_NOTES,
             *phrasebook.LOCATION_ANSWERS.values(), phrasebook.CONNECTION_NOTES, *phrasebook.SHAPE_DETAILS.values(),
             [line.replace("left", "right") for line in phrasebook.LOCATION_ANSWERS["side"]])
    swaps = (("that's", "thats"), ("i'm", "im"), ("don't", "dont"), ("let's", "lets"), ("you're", "youre"),
             ("what's", "whats"), ("okay", "k"), ("you", "u"), ("yes", "ya"), ("yeah", "yea"), ("the ", "teh "),
             ("going to", "gonna"), ("kind of", "kinda"), ("i've", "ive"), ("doesn't", "doesnt"))
    lines = set()
    for bank in banks:
        for line in bank:
            lines.add(_normalize(line))
            for a, b in swaps:
                lines.add(_normalize(re.sub(rf"\b{re.escape(a)}", b, line, count=1)))
    return frozenset(_talk_key(line) for line in lines)


def _talk_key(line: str) -> str:
    """A line without the politeness the simulators may add at its end ("..., thanks")."""
    return re.sub(r"(?:,? (?:please|thanks))+$", "", line).strip(" ,")


TALK_LINES = talk_lines()
# remarks beside an instruction (overviews, extents, orientation, start block) name sizes and
# angles, not places: a line with one of these and no verb is not read for directions
NOTE_CUES = re.compile(r"\b(?:levels?|in total|altogether|across|widest|parts|pieces|shapes|parallel|perpendicular"
                       r"|right angle|corner|end|wide|tall|high|deep|long)\b")


def instruction_lines(lines: Sequence[str], world: "World") -> list[str]:
    """The Architect lines that may carry the instruction: not talk, and not a remark (a line
    with a size or angle word but no verb and no reference block)."""
    return [line for line in lines if _talk_key(line) not in TALK_LINES
            and not (";" not in line and NOTE_CUES.search(line) and not references(line, world))]


def _tokens(text: str) -> list[str]:
    return re.findall(r"[a-z]+(?:-[a-z]+)*|\d+|,", text)


def _number(token: str) -> int | None:
    if token.isdigit():
        return int(token)
    return NUMBERS.get(token)


def parse_directions(text: str) -> list[tuple[tuple[int, int, int], int]]:
    """[(unit, count)] stated by a relation or anchor phrase: pieces cut at commas and 'and';
    in a piece, the count is the last number before its first direction word (default 1)."""
    out = []
    for piece in re.split(r",|\band\b", text):
        tokens = _tokens(piece)
        units = [DIRECTIONS[t] for t in tokens if t in DIRECTIONS]
        if not units:
            continue
        first = next(i for i, t in enumerate(tokens) if t in DIRECTIONS)
        numbers = [_number(t) for t in tokens[:first] if _number(t) is not None]
        count = numbers[-1] if numbers else 1
        for unit in dict.fromkeys(units):  # "up ... upwards" once
            out.append((unit, count))
    return out


def offset_of(pieces) -> tuple[int, int, int]:
    total = [0, 0, 0]
    for unit, count in pieces:
        for k in range(3):
            total[k] += unit[k] * count
    return tuple(total)


# ---------------------------------------------------------------------------------------------
# The world of one item


@dataclasses.dataclass
class World:
    structure: dict  # {cell: color} at the start of the item
    yaw: float
    last_cell: tuple | None  # the last block the Builder placed that is still there

    def coords(self, cell) -> tuple:
        return spatial.world_to_builder(cell, self.yaw)

    def most(self, cells: Sequence, extreme: str):
        axis, sign = EXTREME_AXES[extreme]
        values = [sign * self.coords(c)[axis] for c in cells]
        best = max(values)
        winners = [c for c, v in zip(cells, values) if v == best]
        return winners[0] if len(winners) == 1 else None

    def resolve(self, kind: str, match: re.Match):
        """The cell a reference expression names, or None when it names none uniquely."""
        if kind == "last":
            return self.last_cell
        if kind == "color":
            color = grid.color_id(match.group(1))
            cells = [c for c, v in self.structure.items() if v == color]
            return cells[0] if len(cells) == 1 else None
        if kind in ("extreme_color", "extreme_color_post"):
            word, color = (match.group(1), match.group(2)) if kind == "extreme_color" else (match.group(2), match.group(1))
            extreme = (_EXTREME_WORD if kind == "extreme_color" else _EXTREME_POST)[word]
            cells = [c for c, v in self.structure.items() if v == grid.color_id(color)]
            return self.most(cells, extreme) if len(cells) > 1 else None
        extreme = (_EXTREME_WORD if kind == "extreme" else _EXTREME_POST)[match.group(1)]
        cells = list(self.structure)
        return self.most(cells, extreme) if len(cells) > 1 else None


def last_placed(item: BapItem, structure: dict):
    """The last block the Builder placed that is still there (temporary supports are gone)."""
    for event in reversed(item.history):
        if isinstance(event, Action) and event.type == PLACE:
            if structure.get(event.cell) == event.color:
                return event.cell
            if event.cell not in structure:
                continue  # a temporary support, or a block removed since
            return None
    return None


def references(line: str, world: World) -> list[tuple[int, int, tuple]]:
    """(start, end, cell) of every reference expression in a normalized line that resolves."""
    found = []
    for kind, pattern in REFERENCE_PATTERNS:
        for match in pattern.finditer(line):
            if any(s <= match.start() < e for s, e, _ in found):
                continue
            cell = world.resolve(kind, match)
            if cell is not None:
                found.append((match.start(), match.end(), tuple(cell)))
    return sorted(found)


def relation_before(line: str, start: int) -> str:
    """The relation phrase that ends where a reference starts: the words before it that can
    belong to a relation (directions, counts, fillers), read backwards."""
    words = line[:start].split()
    kept = []
    for word in reversed(words):
        token = word.strip(",")
        if token in DIRECTIONS or token in RELATION_FILLERS or _number(token) is not None or word == ",":
            kept.append(word)
        else:
            break
    return " ".join(reversed(kept))


def number_stated(text: str, n: int) -> bool:
    words = set(_tokens(re.sub(r"(\d)x(\d)", r"\1 x \2", text).replace("-", " ")))
    return str(n) in words or (n < len(phrasebook.NUMBER_WORDS) and phrasebook.NUMBER_WORDS[n] in words)


# ---------------------------------------------------------------------------------------------
# One item


@dataclasses.dataclass
class Check:
    item_id: str
    kind: str  # first, place, run, line, shape, remove, correction, mistake, unknown
    parsed: bool
    correct: bool
    reason: str = ""
    text: str = ""
    reference: tuple | None = None  # the reference block the instruction was resolved against


def _segment_turns(item: BapItem) -> list[ChatTurn]:
    turns = []
    for event in reversed(item.history):
        if isinstance(event, Action):
            break
        turns.append(event)
    return list(reversed(turns))


def _net(item: BapItem):
    placed, removed = {}, {}
    for action in grid.net_actions(item.reference_actions):
        (placed if action[0] == PLACE else removed)[(action[2], action[3], action[4])] = action[1]
    return placed, removed


CORRECTION_CUES = ("should be", "meant", "wrong", "instead", "needs to be", "switch", "replace", "make that one",
                   "that block is", "not ")  # read on the plain text (verbs kept)


def check_item(item: BapItem) -> Check:
    structure = grid.as_structure(item.prev_structure)
    world = World(structure, item.builder_pose.yaw, last_placed(item, structure))
    turns = _segment_turns(item)
    lines = [_normalize(t.text) for t in turns if t.speaker == "Architect"]
    said = " | ".join(lines)
    raw = " | ".join(_plain(t.text) for t in turns if t.speaker == "Architect")
    placed, removed = _net(item)

    def result(kind, correct, reason="", reference=None):
        return Check(item.item_id, kind, True, bool(correct), reason, said,
                     None if reference is None else tuple(reference))

    def unparsed(kind, reason):
        return Check(item.item_id, kind, False, False, reason, said)

    colors_said = set(re.findall(COLOR, said))
    # a correction: the last block recolored
    if len(placed) == 1 and removed and set(placed) == set(removed):
        cell = next(iter(placed))
        if not any(cue in raw for cue in CORRECTION_CUES):
            return unparsed("correction", "a recolor without a correction cue")
        right = grid.color_name(placed[cell])
        return result("correction", cell == world.last_cell and right in colors_said,
                      f"recolored {cell} to {right}; last block {world.last_cell}", world.last_cell)
    if removed and not placed:  # a removal: the reference itself, or a block related to it
        if len(removed) != 1:
            return unparsed("remove", "several blocks removed")
        cell = next(iter(removed))
        for line in lines:
            for start, _, ref in references(line, world):
                relation = relation_before(line, start)
                offset = offset_of(parse_directions(relation))
                if offset == (0, 0, 0):
                    if ref == cell:
                        return result("remove", True, "the reference itself", ref)
                    continue
                target = spatial.add(ref, spatial.builder_to_world(offset, world.yaw))
                return result("remove", target == cell, f"words give {target}, removed {cell}", ref)
        return unparsed("remove", "no reference to the removed block")
    if not placed or removed:
        return unparsed("unknown", "places and removes different blocks")
    color_names = {grid.color_name(c) for c in placed.values()}
    if len(color_names) != 1:
        return unparsed("unknown", "several colors placed")
    color = color_names.pop()
    color_ok = color in _colors_outside_references(lines, world)  # "a red block", not "the red one"
    cells = sorted(placed)
    if not structure:  # the first block or shape, on the empty ground
        on_ground = ("ground" in said or "floor" in said) and min(c[1] for c in cells) == grid.Y_MIN
        if len(cells) == 1:
            return result("first", on_ground and color_ok, f"color said: {color_ok}")
        instruction = instruction_lines(lines, world)
        anchor = parse_directions(" , ".join(_anchor_text(line) for line in instruction))
        if not anchor:
            return unparsed("shape", "no direction for the first shape")
        return _check_shape(world, anchor, said, cells, cells, color_ok, on_ground, result)
    # placements relative to a reference block
    instruction = instruction_lines(lines, world)
    found = None  # (reference cell, relation offset, the line with both spans cut out)
    bare_ref = None  # a reference with no relation before it ("from the last one, going up")
    remainders = []
    for line in instruction:
        rest = line
        for start, end, ref in references(line, world):
            relation = relation_before(line, start)
            pieces = parse_directions(relation)
            cut = line[start - len(relation) - 1 if relation else start:end]
            rest = rest.replace(cut, " ; ", 1)
            if pieces and found is None:
                found = (ref, pieces)
            elif not pieces and bare_ref is None:
                bare_ref = ref
        remainders.append(rest)
    anchor = parse_directions(" , ".join(_anchor_text(r) for r in remainders))
    if len(cells) == 1:
        if found is None:
            return unparsed("place", "no reference block with a relation found")
        ref, pieces = found
        target = spatial.add(ref, spatial.builder_to_world(offset_of(pieces), world.yaw))
        return result("place", target == cells[0] and color_ok,
                      f"words give {target} from {ref}, placed {cells[0]}; color said: {color_ok}", ref)
    if found is not None and not anchor:  # a run: the relation is one step, each block one further
        ref, pieces = found
        step = spatial.builder_to_world(offset_of([(u, 1) for u in dict.fromkeys(u for u, _ in pieces)]), world.yaw)
        run = [spatial.add(ref, tuple(k * v for v in step)) for k in range(1, len(cells) + 1)]
        return result("run", sorted(run) == cells and color_ok and number_stated(said, len(cells)),
                      f"a run of {len(cells)} from {ref} by {step}", ref)
    if not anchor:
        return unparsed("shape", "several blocks but no direction for them")
    if found is not None:  # a shape whose first block is at a relation to the reference
        ref, pieces = found
        start = spatial.add(ref, spatial.builder_to_world(offset_of(pieces), world.yaw))
        return _check_shape(world, anchor, said, cells, [start], color_ok, True, result, ref)
    if bare_ref is not None:  # a line from the reference, each block one step further
        step = spatial.builder_to_world(offset_of([(u, 1) for u in dict.fromkeys(u for u, _ in anchor)]), world.yaw)
        run = [spatial.add(bare_ref, tuple(k * v for v in step)) for k in range(1, len(cells) + 1)]
        return result("line", sorted(run) == cells and color_ok and number_stated(said, len(cells)),
                      f"an anchored line of {len(cells)} from {bare_ref} by {step}", bare_ref)
    return unparsed("shape", "several blocks and no reference block")


def _colors_outside_references(lines: Sequence[str], world: "World") -> set[str]:
    """Color words said other than inside a reference expression ("behind the red one")."""
    colors = set()
    for line in lines:
        for start, end, _ in reversed(references(line, world)):
            line = line[:start] + " ; " + line[end:]
        colors.update(re.findall(COLOR, line))
    return colors


def _anchor_text(remainder: str) -> str:
    """What may state a Builder-anchored direction in an instruction line whose reference and
    relation were cut out: the words after the last stop (verb or cut), and anything after a lead
    word ("going", "extending", ...)."""
    lead = re.search(rf"\b(?:{'|'.join(ANCHOR_LEADS)})\b(.*)", remainder)
    if lead:
        return lead.group(1).replace(";", ",")
    return remainder.replace(";", ",")


def _check_shape(world, anchor, said, cells, starts, color_ok, placed_ok, result, reference=None) -> Check:
    """A line or plane from one of ``starts``: a plane has two spanning directions with their
    sizes as counts ("three to your left and two away from you"); a line steps by the sum of
    the listed unit directions ("going up and to the left")."""
    units = list(dict.fromkeys(u for u, _ in anchor))
    counts = {u: n for u, n in anchor}
    if len(units) == 2 and counts[units[0]] * counts[units[1]] == len(cells) > max(counts.values()):
        d1, d2 = (spatial.builder_to_world(u, world.yaw) for u in units)
        n1, n2 = counts[units[0]], counts[units[1]]
        shape = lambda s: sorted(spatial.add(spatial.add(s, tuple(i * v for v in d1)), tuple(j * v for v in d2))
                                 for i in range(n1) for j in range(n2))
        sizes = (n1, n2)
    else:
        step = spatial.builder_to_world(offset_of([(u, 1) for u in units]), world.yaw)
        shape = lambda s: sorted(spatial.add(s, tuple(k * v for v in step)) for k in range(len(cells)))
        sizes = (len(cells),)
    ok = any(shape(s) == cells for s in starts)
    sizes_ok = all(number_stated(said, n) for n in sizes)
    return result("shape", ok and color_ok and placed_ok and sizes_ok,
                  f"anchor {anchor}, sizes {sizes} stated: {sizes_ok}, from {starts if len(starts) < 3 else 'any'}",
                  reference)


# ---------------------------------------------------------------------------------------------
# A corpus


def check_items(items: Sequence[BapItem]) -> list[Check]:
    """Every item checked; an item followed (in its game) by a correction of the block it
    placed is the Builder's mistake: reported as such, not checked."""
    checks = [check_item(item) for item in items]
    by_id = {item.item_id: n for n, item in enumerate(items)}
    for n, item in enumerate(items):
        game, index = item.item_id.rsplit(":", 1)
        following = by_id.get(f"{game}:{int(index) + 1}")
        if following is not None and checks[following].kind == "correction" and checks[following].parsed:
            placed, _ = _net(item)
            corrected = set(_net(items[following])[0])
            if set(placed) == corrected:
                checks[n] = Check(item.item_id, "mistake", False, False, "the Builder's mistake, corrected next",
                                  checks[n].text)
    return checks


def summarize(checks: Sequence[Check]) -> dict:
    """Shares of parsed and correct items, overall and per kind (mistakes are not instructions
    the Builder followed: they are counted apart and left out of the shares)."""
    kinds = collections.defaultdict(lambda: {"items": 0, "parsed": 0, "correct": 0})
    for check in checks:
        k = kinds[check.kind]
        k["items"] += 1
        k["parsed"] += check.parsed
        k["correct"] += check.parsed and check.correct
    counted = [c for c in checks if c.kind != "mistake"]
    parsed = sum(c.parsed for c in counted)
    correct = sum(c.parsed and c.correct for c in counted)
    return {"items": len(counted), "parsed": parsed, "correct": correct,
            "parsed_share": round(parsed / max(len(counted), 1), 4),
            "correct_share_of_parsed": round(correct / max(parsed, 1), 4),
            "mistakes_not_checked": kinds["mistake"]["items"] if "mistake" in kinds else 0,
            "kinds": {k: dict(v) for k, v in sorted(kinds.items())}}


# ---------------------------------------------------------------------------------------------
# CLI

FLAGS = flags.FLAGS


def define_flags() -> None:
    cli.define_item_source_flags("corpus", "items", "split")  # --split defaults to train here (main)
    cli.flag("integer", "examples", 5, "Unparsed and incorrect examples to print (stderr).")


def main(argv: Sequence[str]) -> int:
    if len(argv) > 1:
        raise UserError(f"unexpected arguments: {' '.join(argv[1:])}")
    items = items_from_flags(corpus=FLAGS.corpus, split=(FLAGS.split or "train") if FLAGS.corpus else None,
                             items=FLAGS.items)
    checks = check_items(items)
    summary = summarize(checks)
    print(f"{summary['items']} instructions: parsed {summary['parsed']} ({100 * summary['parsed_share']:.1f}%), "
          f"correct {summary['correct']} of those ({100 * summary['correct_share_of_parsed']:.1f}%); "
          f"{summary['mistakes_not_checked']} Builder mistakes not checked")
    for kind, k in summary["kinds"].items():
        print(f"  {kind:>10}: {k['items']:6d} items, parsed {k['parsed']:6d}, correct {k['correct']:6d}")
    shown = 0
    for check in checks:
        if shown >= FLAGS.examples:
            break
        if check.kind != "mistake" and (not check.parsed or not check.correct):
            state = "unparsed" if not check.parsed else "INCORRECT"
            print(f"{state} {check.item_id} ({check.kind}): {check.reason}\n    {check.text}", file=sys.stderr)
            shown += 1
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    cli.run(main, define_flags)
