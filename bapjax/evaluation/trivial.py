"""Trivial reference predictors for sanity checks of the evaluator and of result tables (their
command: `python -m bapjax.predictors`).

``empty`` predicts no action for every item (F1 0 wherever the reference is non-empty).
``perturbed`` (``--seed``) is a model-like wrong answer for demos and benchmarks: the reference
shifted and/or turned, recolored, thinned or padded with extra ground blocks (one perturbation
per item), with the steps that became infeasible left out.
``oracle`` predicts the reference itself, so it scores 1.0 on every metric. It copies the
reference as recorded wherever that is a feasible sequence; a few MDC references are not (a
placement logged without a supporting neighbour: 1 action in the test split, 3 in val). There
the oracle performs the same net actions feasibly: before an unsupported placement it places a
chain of temporary support blocks from the nearest supported cell, and removes them right after
(support blocks cancel out of the net actions). The evaluator itself never rejects references.
"""

from __future__ import annotations

import collections
from typing import Sequence

import numpy as np

from bapjax.world import grid
from bapjax.world.grid import PLACE, REMOVE, Action
from bapjax.world.items import BapItem


def empty_prediction(item: BapItem) -> list[Action]:
    return []


def support_chain(structure: dict, cell) -> list[tuple[int, int, int]] | None:
    """Empty cells to fill, in placement order, so that ``cell`` becomes supported (shortest
    chain, found breadth-first from ``cell``); None when no chain exists."""
    previous = {cell: None}
    queue = collections.deque([cell])
    while queue:
        current = queue.popleft()
        if current != cell and grid.supported(structure, *current):
            chain = []
            while current != cell:
                chain.append(current)
                current = previous[current]
            return chain  # from the supported end towards ``cell``
        x, y, z = current
        for a, b, c in grid.FACE_OFFSETS:
            nxt = (x + a, y + b, z + c)
            if nxt not in previous and grid.in_region(*nxt) and nxt not in structure:
                previous[nxt] = current
                queue.append(nxt)
    return None


def feasible_equivalent(prev_structure, actions: Sequence[Action]) -> list[Action]:
    """``actions`` with temporary supports added around unsupported placements (same net actions).

    Other infeasible steps (which the MDC does not have) are kept as recorded."""
    walk = grid.StructureWalk(prev_structure)
    structure = walk.structure
    out: list[Action] = []
    for action in actions:
        cell = action.cell
        needs_support = (action.type == PLACE and cell not in structure
                         and not grid.supported(structure, *cell))
        chain = support_chain(structure, cell) if needs_support else None
        temporary = []
        if chain:
            counts = list(walk.counts)
            for support in chain:
                color = next((c for c in range(1, grid.NUM_COLORS + 1)
                              if counts[c] + (c == action.color) < grid.INVENTORY_PER_COLOR), None)
                if color is None:
                    temporary = None
                    break
                temporary.append(Action(PLACE, color, *support))
                counts[color] += 1
        temporary = temporary or []
        steps = temporary + [action] + [Action(REMOVE, t.color, *t.cell) for t in reversed(temporary)]
        for step in steps:
            walk.apply(step)
        out.extend(steps)
    return out


def oracle_prediction(item: BapItem) -> list[Action]:
    return feasible_equivalent(item.prev_structure, item.reference_actions)


def perturb_actions(rng: np.random.Generator, actions: Sequence[Action]) -> list[Action]:
    """One random perturbation of an action sequence (may become infeasible)."""
    actions = list(actions)
    kind = rng.integers(5)
    if kind == 0 and actions:  # shifted and maybe turned copy
        rotation, dx, dz = int(rng.integers(4)), int(rng.integers(-2, 3)), int(rng.integers(-2, 3))
        moved = []
        for a in actions:
            x, z = a.x, a.z
            for _ in range(rotation):
                x, z = -z, x
            moved.append(Action(a.type, a.color, max(-5, min(5, x + dx)), a.y, max(-5, min(5, z + dz))))
        actions = moved
    elif kind == 1:  # color swap
        perm = rng.permutation(grid.NUM_COLORS) + 1
        actions = [Action(a.type, int(perm[a.color - 1]), a.x, a.y, a.z) for a in actions]
    elif kind == 2:  # drop some
        actions = [a for a in actions if rng.random() < 0.6]
    elif kind == 3:  # extra ground blocks
        actions = actions + [Action(PLACE, int(rng.integers(1, 7)), int(rng.integers(-5, 6)), 1,
                                    int(rng.integers(-5, 6))) for _ in range(int(rng.integers(1, 4)))]
    return actions  # kind 4: exact copy


def feasible_steps(prev_structure, actions: Sequence[Action]) -> list[Action]:
    """The steps of ``actions`` that are feasible when infeasible ones are skipped."""
    walk = grid.StructureWalk(prev_structure)
    return [action for action in actions if walk.step(action)]


def perturbed_predictions(items: Sequence[BapItem], seed: int = 0) -> dict[str, list[Action]]:
    rng = np.random.default_rng(seed)
    return {item.item_id: feasible_steps(item.prev_structure, perturb_actions(rng, item.reference_actions))
            for item in items}


PREDICTORS = {"empty": empty_prediction, "oracle": oracle_prediction, "perturbed": None}


def predict(name: str, items: Sequence[BapItem], seed: int = 0) -> dict[str, list[Action]]:
    """{item_id: actions} of a named trivial predictor."""
    if name not in PREDICTORS:
        raise ValueError(f"unknown predictor {name!r}; expected one of {', '.join(PREDICTORS)}")
    if name == "perturbed":
        return perturbed_predictions(items, seed)
    return {item.item_id: PREDICTORS[name](item) for item in items}
