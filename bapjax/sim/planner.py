"""The low-level Builder: a feasible action sequence from one structure to another.

Like BabyAI's bot, this is the simulated human in the loop: it knows the world rules
(``bapjax.world.grid``: a block goes on the ground or face-next to another block, a removal names the
block's color, at most 20 blocks of each color are in the world) and turns a target ("make the
board look like ``goal``") into concrete actions, including the temporary support blocks a
human puts under a floating block and takes away afterwards.

Algorithm (``plan_actions``; see docs/structures.md for the long form):

1. Diff.  ``recolor`` cells hold a block of the wrong color, ``pure`` removals hold a block the
   goal does not have, ``pending`` cells are goal cells still to fill, ranked by ``order``.
2. Removals.  Recolored cells and pure removals go first, top-down.  In "deferred" mode the
   pure removals that touch a pending cell stay as scaffolding and go at the end (unless their
   color is needed for the goal's inventory).  ``defer_removals=None`` plans both ways and keeps
   the shorter plan (ties: removals first, the more natural order).
3. Placements, one step at a time:
   a. the first pending cell (in preference order) if it is supported (ground or face-neighbour);
   b. else, if a chain of pending cells links it to a supported pending cell, that chain from the
      supported end (no extra actions);
   c. else the earliest supported pending cell (placing goal blocks never hurts: it only adds
      support);
   d. else (every pending cell floats) a 0-1 Dijkstra search from all pending cells over empty
      cells, where stepping into a pending cell costs 0 and into any other cell costs 1 (a
      temporary block), to the nearest cell that is on the ground or face-next to a block.  The
      path is built from that end: its non-goal cells become temporary supports, its goal cells
      get their goal color.  Ties go to the pending cell earliest in ``order``.  Supports stay
      until the end, so later floating blocks reuse them (a column down to the ground, a bridge
      to the nearest block: whichever is shorter).
   Support color: the plan's support color if it has enough inventory left after reserving what
   the goal still needs, else a color the goal does not use, else any color with room (mixed
   if no single color has room).  If the inventory is too tight, all temporary supports and
   deferred removals are taken away first and the search is redone.
4. Clean-up.  Temporary supports are removed in reverse placement order (top-down for a
   column), then the deferred removals.

Every support costs exactly two extra actions (place, remove).  The search is greedy per
floating component (a shortest path each time), not a Steiner-tree optimum; the tests compare
it against brute force on tiny cases.
"""

from __future__ import annotations

import heapq
from typing import Iterable, Mapping, Sequence

import numpy as np

from bapjax.world import grid
from bapjax.world.actions import structure_distance
from bapjax.world.grid import INVENTORY_PER_COLOR, NUM_COLORS, PLACE, REMOVE, Action

Cell = tuple[int, int, int]
Structure = Mapping[Cell, int]

# The face neighbours in the order the searches expand them (below first): this order breaks
# ties between equally short paths, so it shapes the plans (the support rule is grid.supported).
FACE_OFFSETS = ((0, -1, 0), (1, 0, 0), (-1, 0, 0), (0, 0, 1), (0, 0, -1), (0, 1, 0))


REGION_CELLS = frozenset(
    (x, y, z)
    for x in range(grid.X_MIN, grid.X_MAX + 1)
    for y in range(grid.Y_MIN, grid.Y_MAX + 1)
    for z in range(grid.Z_MIN, grid.Z_MAX + 1)
)


class PlanningError(ValueError):
    """The goal cannot be reached under the grid rules (region or inventory)."""


def _check_structure(structure: dict[Cell, int], name: str) -> None:
    counts = [0] * (NUM_COLORS + 1)
    for cell, color in structure.items():
        if not grid.in_region(*cell):
            raise PlanningError(f"{name}: cell {cell} is outside the build region")
        if not 1 <= color <= NUM_COLORS:
            raise PlanningError(f"{name}: cell {cell} has color id {color}, expected 1..{NUM_COLORS}")
        counts[color] += 1
    for color in range(1, NUM_COLORS + 1):
        if counts[color] > INVENTORY_PER_COLOR:
            raise PlanningError(
                f"{name}: {counts[color]} {grid.color_name(color)} blocks, more than the "
                f"inventory of {INVENTORY_PER_COLOR}"
            )


class _Planner:
    """State of one planning run (one pass; see the module docstring)."""

    def __init__(self, start, goal, ranked_pending, rng, defer_removals):
        self.start = start
        self.goal = goal
        self.rng = rng
        self.walk = grid.StructureWalk(start)  # the world as planned so far (grid rules)
        self.current = self.walk.structure
        self.counts = self.walk.counts
        self.actions: list[Action] = []
        self.pending: list[Cell] = list(ranked_pending)
        self.pending_set = set(self.pending)
        self.rank = {cell: r for r, cell in enumerate(self.pending)}
        self.need = [0] * (NUM_COLORS + 1)
        for cell in self.pending:
            self.need[goal[cell]] += 1
        self.goal_colors = set(goal.values())
        self.temps: list[Cell] = []
        self.deferred: list[Cell] = []
        self.support_color: int | None = None
        self.defer_removals = defer_removals

    # -- primitive actions --------------------------------------------------------------------
    def _place(self, cell: Cell, color: int) -> None:
        action = Action(PLACE, color, *cell)
        self.actions.append(action)
        self.walk.apply(action)

    def _remove(self, cell: Cell) -> None:
        action = Action(REMOVE, self.current[cell], *cell)
        self.actions.append(action)
        self.walk.apply(action)

    def _place_goal(self, cell: Cell) -> None:
        color = self.goal[cell]
        self._place(cell, color)
        self.need[color] -= 1
        self.pending_set.discard(cell)
        self.pending.remove(cell)

    def _supported(self, cell: Cell) -> bool:
        return grid.supported(self.current, *cell)

    @staticmethod
    def _top_down(cells: Iterable[Cell]) -> list[Cell]:
        return sorted(cells, key=lambda c: (-c[1], c[0], c[2]))

    # -- phases -------------------------------------------------------------------------------
    def removals(self) -> None:
        start, goal = self.start, self.goal
        recolor = [c for c, color in start.items() if c in goal and goal[c] != color]
        pure = [c for c in start if c not in goal]
        deferred: set[Cell] = set()
        if self.defer_removals:
            for cell in pure:
                x, y, z = cell
                if any((x + dx, y + dy, z + dz) in self.pending_set for dx, dy, dz in FACE_OFFSETS):
                    deferred.add(cell)
        first = [c for c in recolor] + [c for c in pure if c not in deferred]
        # Inventory: what stays until the end must leave room for the goal's blocks.
        after = list(self.counts)
        for cell in first:
            after[start[cell]] -= 1
        for cell in self._top_down(deferred):
            color = start[cell]
            if after[color] + self.need[color] > INVENTORY_PER_COLOR:
                deferred.discard(cell)
                first.append(cell)
                after[color] -= 1
        for cell in self._top_down(first):
            self._remove(cell)
        self.deferred = self._top_down(deferred)

    def _pending_chain(self, source: Cell) -> list[Cell] | None:
        """Pending cells linking ``source`` to a supported pending cell, supported end first."""
        parent = {source: None}
        frontier = [source]
        while frontier:
            nxt = []
            for cell in frontier:
                x, y, z = cell
                for dx, dy, dz in FACE_OFFSETS:
                    n = (x + dx, y + dy, z + dz)
                    if n in self.pending_set and n not in parent:
                        parent[n] = cell
                        if self._supported(n):
                            chain = [n]
                            while parent[chain[-1]] is not None:
                                chain.append(parent[chain[-1]])
                            return chain
                        nxt.append(n)
            frontier = nxt
        return None

    def _support_path(self) -> tuple[list[Cell], int]:
        """0-1 Dijkstra from all pending cells to the nearest supported empty cell.

        Returns the path from the supported end to the pending source, and its cost (number of
        non-goal cells, i.e. temporary supports).
        """
        heap = []
        best: dict[Cell, tuple[int, int]] = {}
        parent: dict[Cell, Cell | None] = {}
        counter = 0
        rank_of = self.rank
        for cell in self.pending:
            rank = rank_of[cell]
            best[cell] = (0, rank)
            parent[cell] = None
            heap.append((0, rank, counter, cell))
            counter += 1
        heapq.heapify(heap)
        current, pending_set = self.current, self.pending_set
        offsets = FACE_OFFSETS
        if self.rng is not None:  # one random neighbour order per search breaks ties
            offsets = [FACE_OFFSETS[i] for i in self.rng.permutation(len(FACE_OFFSETS))]
        push, pop = heapq.heappush, heapq.heappop
        while heap:
            cost, rank, _, cell = pop(heap)
            if best[cell] != (cost, rank):
                continue
            x, y, z = cell
            if cell not in pending_set:
                if grid.supported(current, x, y, z):
                    path = [cell]
                    while parent[path[-1]] is not None:
                        path.append(parent[path[-1]])
                    return path, cost
            for dx, dy, dz in offsets:
                n = (x + dx, y + dy, z + dz)
                if n in current or n not in REGION_CELLS:
                    continue
                key = (cost if n in pending_set else cost + 1, rank)
                old = best.get(n)
                if old is None or key < old:
                    best[n] = key
                    parent[n] = cell
                    push(heap, (key[0], rank, counter, n))
                    counter += 1
        raise PlanningError("no cell of the build region can support the remaining blocks")

    def _available(self) -> list[int]:
        return [0] + [
            INVENTORY_PER_COLOR - self.counts[c] - self.need[c] for c in range(1, NUM_COLORS + 1)
        ]

    def _support_colors(self, count: int, borrow_for: list[Cell] | None = None) -> list[int] | None:
        """A color for each of ``count`` temporary blocks, or None when the inventory is short.

        Normally the goal's remaining needs are reserved.  With ``borrow_for`` (a support path)
        only the goal blocks on that path are reserved: the caller takes the supports away right
        after the path, before any other goal block needs the borrowed inventory.
        """
        if count == 0:
            return []
        available = self._available()
        if borrow_for is not None:
            on_path = [0] * (NUM_COLORS + 1)
            for cell in borrow_for:
                if cell in self.pending_set:
                    on_path[self.goal[cell]] += 1
            available = [0] + [INVENTORY_PER_COLOR - self.counts[c] - on_path[c]
                               for c in range(1, NUM_COLORS + 1)]
        if self.support_color is not None and available[self.support_color] >= count:
            return [self.support_color] * count
        roomy = [c for c in range(1, NUM_COLORS + 1) if available[c] >= count]
        if roomy:
            unused = [c for c in roomy if c not in self.goal_colors]
            tier = unused or roomy
            if self.rng is not None:
                color = int(tier[self.rng.integers(len(tier))])
            else:
                color = max(tier, key=lambda c: (available[c], -c))
            self.support_color = color
            return [color] * count
        if sum(max(a, 0) for a in available) < count:
            return None
        colors: list[int] = []
        for c in sorted(range(1, NUM_COLORS + 1), key=lambda c: -available[c]):
            take = min(max(available[c], 0), count - len(colors))
            colors.extend([c] * take)
        return colors

    def _flush(self) -> bool:
        """Take away all temporary supports and deferred removals (frees inventory)."""
        if not self.temps and not self.deferred:
            return False
        for cell in reversed(self.temps):
            self._remove(cell)
        self.temps = []
        for cell in self.deferred:
            self._remove(cell)
        self.deferred = []
        return True

    def placements(self) -> None:
        while self.pending:
            first = self.pending[0]
            if self._supported(first):
                self._place_goal(first)
                continue
            chain = self._pending_chain(first)
            if chain is not None:
                for cell in chain:
                    self._place_goal(cell)
                continue
            candidate = next((c for c in self.pending if self._supported(c)), None)
            if candidate is not None:
                self._place_goal(candidate)
                continue
            path, cost = self._support_path()
            colors = self._support_colors(cost)
            borrowed = False
            if colors is None:
                if self._flush():
                    continue  # freed inventory may also change the shortest path
                colors = self._support_colors(cost, borrow_for=path)
                borrowed = True
                if colors is None:
                    raise PlanningError(
                        f"not enough inventory for {cost} temporary support block(s) next to "
                        f"{len(self.current)} blocks in the world"
                    )
            colors_left = iter(colors)
            for cell in path:
                if cell in self.pending_set:
                    self._place_goal(cell)
                else:
                    self._place(cell, next(colors_left))
                    self.temps.append(cell)
            if borrowed:
                self._flush()  # give the borrowed inventory back before other goal blocks

    def cleanup(self) -> None:
        self._flush()


def _ranked_pending(start, goal, order, rng) -> list[Cell]:
    pending = [c for c, color in goal.items() if start.get(c) != color]
    pending_set = set(pending)
    ranked: list[Cell] = []
    seen: set[Cell] = set()
    for raw in order or ():
        cell = tuple(int(v) for v in raw)
        if cell not in goal:
            raise PlanningError(f"order names cell {cell}, which is not in the goal structure")
        if cell in pending_set and cell not in seen:
            ranked.append(cell)
            seen.add(cell)
    rest = [c for c in pending if c not in seen]
    if rng is not None and order is None:
        rest = [rest[i] for i in rng.permutation(len(rest))]
    else:
        rest.sort(key=lambda c: (c[1], c[0], c[2]))
    return ranked + rest


def plan_actions(
    start: Structure | Iterable,
    goal: Structure | Iterable,
    rng: np.random.Generator | None = None,
    order: Sequence[Cell] | None = None,
    defer_removals: bool | None = None,
) -> list[Action]:
    """A feasible action sequence from ``start`` to ``goal`` ({(x, y, z): color} or blocks).

    ``order``: preferred placement order of the goal's new cells (e.g. the instruction order);
    kept wherever support allows, other new cells follow bottom-up (or shuffled when ``rng`` is
    given and ``order`` is None).  ``rng`` also breaks ties between equally short support paths
    and picks the support color.  ``defer_removals``: False = removals first, True = keep
    removable blocks next to new cells as scaffolding, None = whichever plan is shorter.
    Raises PlanningError when the goal is outside the region or over the inventory.
    """
    start_dict, goal_dict = grid.as_structure(start), grid.as_structure(goal)
    _check_structure(start_dict, "start")
    _check_structure(goal_dict, "goal")
    ranked = _ranked_pending(start_dict, goal_dict, order, rng)
    modes = [False, True] if defer_removals is None else [bool(defer_removals)]
    if defer_removals is None and not any(c not in goal_dict for c in start_dict):
        modes = [False]
    best: list[Action] | None = None
    for mode in modes:
        state = None
        if rng is not None:
            state = rng.bit_generator.state
        planner = _Planner(start_dict, goal_dict, ranked, rng, mode)
        planner.removals()
        planner.placements()
        planner.cleanup()
        if best is None or len(planner.actions) < len(best):
            best = planner.actions
        if state is not None and mode is not modes[-1]:
            rng.bit_generator.state = state  # both passes see the same random draws
    return best


def plan_problem(start: Structure | Iterable, goal: Structure | Iterable,
                 actions: Iterable[Action | tuple]) -> str | None:
    """Why ``actions`` is not a feasible plan from ``start`` to ``goal``, or None if it is."""
    walk = grid.StructureWalk(start)
    goal_dict = grid.as_structure(goal)
    for step, action in enumerate(actions):
        reason = walk.reason(action)
        if reason is not None:
            return f"step {step} {tuple(int(v) for v in action)}: {reason}"
        walk.apply(action)
    current = walk.structure
    if current != goal_dict:
        missing = sorted(set(goal_dict.items()) - set(current.items()))
        extra = sorted(set(current.items()) - set(goal_dict.items()))
        return f"plan ends off the goal: missing {missing[:5]}, extra {extra[:5]}"
    return None


def plan_is_valid(start: Structure | Iterable, goal: Structure | Iterable,
                  actions: Iterable[Action | tuple]) -> bool:
    """True when every action is feasible in turn and the result equals ``goal`` exactly."""
    return plan_problem(start, goal, actions) is None


def extra_actions(start: Structure | Iterable, goal: Structure | Iterable,
                  actions: Sequence[Action]) -> int:
    """Actions beyond the net difference (2 per temporary support block)."""
    return len(actions) - structure_distance(start, goal)
