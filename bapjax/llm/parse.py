"""Tolerant parsing of an LLM's response into Builder actions, with counts of what went wrong.

One parser reads every layout of `bapjax.llm.formats` (and the usual drift around them):

* ``place red 0 1 0``, ``pick 0 1 0``, ``pick red 0 1 0`` (nebula, rich), with ``put`` and
  ``remove``/``break`` as synonyms, optional filler (``place a red block at (0, 1, 0)``);
* ``place(color='red',x=0,y=1,z=0)``, ``pick(color="red", x=0, y=1, z=0)``, keyword arguments in
  any order or positional ``place('red', 0, 1, 0)`` (code);
* any case and spacing, code fences, numbered or bulleted lists, several actions on one line,
  ``<Builder>`` tags, prose before, between and after the actions.

A line from which no action is read (prose, an echoed ``### AS:``, garbage, ``place red 0 1``)
counts as unparseable; blank lines and fence lines are not counted. Actions outside the
11x9x11 grid and placements whose color is missing or not one of the six are dropped and
counted. `resolve` then walks the parsed actions over S_prev: a pick removes whatever block is
in its cell (its stated color, if any, is not required to match; mismatches are counted), and
an infeasible step (placing into an occupied or unsupported cell, a 21st block of a color,
picking from an empty cell) is dropped and counted, as the evaluator's ``--drop_infeasible``
would. The actions that remain are a feasible sequence for `bapjax.evaluate`.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Iterable, NamedTuple

from bapjax.world import grid
from bapjax.world.grid import PLACE, REMOVE, Action

VERBS = {"place": PLACE, "put": PLACE, "pick": REMOVE, "remove": REMOVE, "break": REMOVE}
FILLER = {"a", "an", "the", "block", "blocks", "cube", "at", "in", "on", "to", "of", "cell", "color",
          "colour", "position", "x", "y", "z"}
_VERB = re.compile(r"\b(place|put|pick|remove|break)\b", re.IGNORECASE)
_FENCE = re.compile(r"^\s*(```|~~~)")
_LIST_MARK = re.compile(r"^\s*(?:[-*\u2022+>]|\(?\d{1,3}[.):])\s+")
_INT = r"[-+]?\d+(?:\.0+)?(?!\.?\d)"  # 3, -2, 1.0; not 0.5 (a trailing "." ends a sentence)
_KWARG = re.compile(r"\b(color|colour|x|y|z)\s*[=:]\s*(?:['\"]?)([-+]?[\w.]+)", re.IGNORECASE)
_TOKEN = re.compile(rf"{_INT}|[-+]?\d+\.\d+|[a-z_]+", re.IGNORECASE)


class ParsedAction(NamedTuple):
    """One action as read: type PLACE/REMOVE, color name as written (None when not given)."""

    type: int
    color: str | None
    x: int
    y: int
    z: int


@dataclasses.dataclass
class ParseCounts:
    """Per-file counts (summed over responses); `as_dict` is the score report's "parse" object."""

    responses: int = 0              # responses read from the file
    items_without_response: int = 0  # items of the split no response names (scored as empty)
    empty_responses: int = 0         # responses with no action at all (after parsing)
    lines: int = 0                   # non-blank lines outside fence markers
    unparseable_lines: int = 0       # such lines that gave no action (prose included)
    actions_read: int = 0            # actions read from the text (before any check)
    out_of_grid: int = 0             # dropped: a cell outside x, z -5..5, y 1..9
    unknown_colors: int = 0          # dropped: a placement without one of the six colors
    pick_color_mismatches: int = 0   # picks whose stated color was not the cell's (kept)
    infeasible_dropped: int = 0      # dropped while walking over S_prev
    actions_scored: int = 0          # what the evaluator received

    def add(self, other: "ParseCounts") -> None:
        for field in dataclasses.fields(self):
            setattr(self, field.name, getattr(self, field.name) + getattr(other, field.name))

    def as_dict(self) -> dict:
        return dataclasses.asdict(self)


def _integer(text: str) -> int | None:
    try:
        value = float(text)
    except ValueError:
        return None
    return int(value) if value == int(value) else None


def _segment_action(verb: str, rest: str) -> ParsedAction | None:
    """The action of one verb and the text after it (up to the next verb), or None."""
    kind = VERBS[verb.lower()]
    stripped = rest.lstrip()
    if stripped.startswith("("):  # code style: keyword or positional arguments
        inside = stripped[1:stripped.find(")")] if ")" in stripped else stripped[1:]
        named = {k.lower().replace("colour", "color"): v for k, v in _KWARG.findall(inside)}
        if all(k in named for k in "xyz"):
            coords = [_integer(named[k]) for k in "xyz"]
            color = named.get("color")
        else:
            args = [a.strip().strip("'\"") for a in inside.split(",") if a.strip()]
            ints = [_integer(a) for a in args]
            if len(args) == 4 and None not in ints[1:]:
                color, coords = args[0], ints[1:]
            elif len(args) == 3 and None not in ints:
                color, coords = None, ints
            else:
                return None
        if None in coords:
            return None
        return ParsedAction(kind, color.lower() if color else None, *coords)
    color, coords = None, []
    for token in _TOKEN.findall(rest):
        if token[0].isalpha() or token[0] == "_":
            if coords:  # a word after the first number ends the action, unless it names an axis
                if token.lower() in ("x", "y", "z"):
                    continue
                break
            if color is None and token.lower() not in FILLER:
                color = token.lower()
            continue
        value = _integer(token)
        if value is None:
            return None
        coords.append(value)
        if len(coords) == 3:
            return ParsedAction(kind, color, *coords)
    return None


def parse_line(line: str) -> list[ParsedAction]:
    """Every action on one line (empty when the line holds none)."""
    line = line.replace("\u2212", "-")  # a typographic minus
    line = _LIST_MARK.sub("", line)
    matches = list(_VERB.finditer(line))
    actions = []
    for n, match in enumerate(matches):
        end = matches[n + 1].start() if n + 1 < len(matches) else len(line)
        action = _segment_action(match.group(1), line[match.end():end])
        if action is not None:
            actions.append(action)
    return actions


def parse_text(text: str | None, counts: ParseCounts | None = None) -> list[ParsedAction]:
    """The actions of a whole response, in order; line counts go into `counts`."""
    counts = counts if counts is not None else ParseCounts()
    actions: list[ParsedAction] = []
    for raw in (text or "").splitlines():
        if not raw.strip() or _FENCE.match(raw):
            continue
        counts.lines += 1
        found = parse_line(raw)
        if not found:
            counts.unparseable_lines += 1
        actions.extend(found)
    counts.actions_read += len(actions)
    return actions


def resolve(prev_structure, parsed: Iterable[ParsedAction], counts: ParseCounts | None = None) -> list[Action]:
    """The feasible action sequence of parsed actions over S_prev (see the module docstring)."""
    counts = counts if counts is not None else ParseCounts()
    walk = grid.StructureWalk(prev_structure)
    out: list[Action] = []
    for action in parsed:
        cell = (action.x, action.y, action.z)
        if not grid.in_region(*cell):
            counts.out_of_grid += 1
            continue
        if action.type == PLACE:
            color = grid.COLOR_TO_ID.get(action.color) if action.color else None
            if color is None:
                counts.unknown_colors += 1
                continue
        else:
            color = walk.structure.get(cell)
            if color is None:  # nothing there to pick
                counts.infeasible_dropped += 1
                continue
            if action.color is not None and grid.COLOR_TO_ID.get(action.color) != color:
                counts.pick_color_mismatches += 1
        resolved = Action(action.type, color, *cell)
        if walk.step(resolved):
            out.append(resolved)
        else:
            counts.infeasible_dropped += 1
    counts.actions_scored += len(out)
    return out


def parse_response(text: str | None, prev_structure, counts: ParseCounts | None = None) -> list[Action]:
    """`parse_text` then `resolve`: a response's feasible actions over S_prev."""
    counts = counts if counts is not None else ParseCounts()
    actions = resolve(prev_structure, parse_text(text, counts), counts)
    if not actions:
        counts.empty_responses += 1
    return actions
