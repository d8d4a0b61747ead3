"""Net actions, structure diffs, distances and inverses (host side, plain Python).

Structures here are ``{(x, y, z): color}`` dicts (or any iterable of ``Block``); actions are
``grid.Action`` tuples. The metrics compare *net* action sets, so this is where "place then
remove the same block" becomes nothing.
"""

from __future__ import annotations

from typing import Iterable, Mapping, Sequence

from bapjax.grid import PLACE, REMOVE, Action, Block

Structure = Mapping[tuple[int, int, int], int]


def as_structure(blocks: Iterable[Block | tuple] | Structure) -> dict[tuple[int, int, int], int]:
    """{cell: color} from blocks or from an existing dict."""
    if isinstance(blocks, Mapping):
        return dict(blocks)
    return {(int(b[0]), int(b[1]), int(b[2])): int(b[3]) for b in blocks}


def as_blocks(structure: Structure) -> tuple[Block, ...]:
    """Blocks of a structure dict, sorted by (x, y, z)."""
    return tuple(Block(x, y, z, c) for (x, y, z), c in sorted(structure.items()))


def net_actions(actions: Iterable[Action | tuple]) -> frozenset[Action]:
    """Net action set: each action cancels against a later inverse (same cell and color)."""
    balance: dict[tuple[int, int, int, int], int] = {}
    for action in actions:
        type_, color, x, y, z = (int(v) for v in action)
        key = (color, x, y, z)
        balance[key] = balance.get(key, 0) + (1 if type_ == PLACE else -1)
    return frozenset(
        Action(PLACE if count > 0 else REMOVE, color, x, y, z)
        for (color, x, y, z), count in balance.items()
        if count != 0
    )


def structure_diff(start: Structure | Iterable, goal: Structure | Iterable) -> frozenset[Action]:
    """The net actions that turn ``start`` into ``goal`` (a recolored cell: remove + place)."""
    start, goal = as_structure(start), as_structure(goal)
    diff = set()
    for cell, color in start.items():
        if goal.get(cell) != color:
            diff.add(Action(REMOVE, color, *cell))
    for cell, color in goal.items():
        if start.get(cell) != color:
            diff.add(Action(PLACE, color, *cell))
    return frozenset(diff)


def structure_distance(a: Structure | Iterable, b: Structure | Iterable) -> int:
    """Number of net actions between two structures (a recolored cell costs 2)."""
    return len(structure_diff(a, b))


def inverse_action(action: Action | tuple) -> Action:
    type_, color, x, y, z = (int(v) for v in action)
    return Action(REMOVE if type_ == PLACE else PLACE, color, x, y, z)


def inverse_sequence(actions: Sequence[Action | tuple]) -> list[Action]:
    """The sequence that undoes ``actions``: inverses in reverse order."""
    return [inverse_action(a) for a in reversed(actions)]


def apply_sequence(structure: Structure | Iterable, actions: Iterable[Action | tuple]) -> dict:
    """Structure after a sequence (no feasibility check; a removal empties the cell)."""
    result = as_structure(structure)
    for action in actions:
        type_, color, x, y, z = (int(v) for v in action)
        if type_ == PLACE:
            result[(x, y, z)] = color
        else:
            result.pop((x, y, z), None)
    return result


def sort_actions(actions: Iterable[Action]) -> list[Action]:
    """A canonical order for a net action set: by type, then cell, then color."""
    return sorted(actions, key=lambda a: (a.type, a.x, a.y, a.z, a.color))
