"""Algebra on actions and structures (host side, plain Python): diffs, distances, inverses, order.

Structures are ``{(x, y, z): color}`` dicts (or any iterable of ``Block``); actions are
``grid.Action`` tuples. Walking actions over a structure (feasibility, apply, net actions) is
``bapjax.world.grid``'s (``StructureWalk``, ``apply_sequence``, ``net_actions``).
"""

from __future__ import annotations

from typing import Iterable, Sequence

from bapjax.world.grid import PLACE, REMOVE, Action, Structure, as_structure


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


def sort_actions(actions: Iterable[Action]) -> list[Action]:
    """A canonical order for a net action set: by type, then cell, then color."""
    return sorted(actions, key=lambda a: (a.type, a.x, a.y, a.z, a.color))
