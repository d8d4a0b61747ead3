"""Target-structure simulator: shape compositions (D_bs, D_ss) and random growth (D_r).

Constraints (paper 5.2 and 5.3.1), checked by ``constraint_violations``:

1. at least one block on the ground (y = 1);
2. the structure is connected when blocks sharing a face or an edge are neighbours
   (18-neighbourhood), so in particular every block touches another one;
3. with shapes: every shape shares a face or an edge with another shape (when there are two or
   more), shapes do not overlap, and the shapes' cells are exactly the structure;
4. everything inside the build region, and at most 20 blocks of each color (the inventory).

Shape structures are built shape by shape: the first shape rests on the ground at a random
place; each further shape is put at a random translation, among all translations where it
touches (face or edge) the blocks so far without overlapping them and stays in the region.
Those translations are found at once with NumPy (per shape cell, one shifted slice of the
occupancy grid and of its face-or-edge neighbourhood), so a structure takes a fraction of a
millisecond.

Random structures grow one block at a time: the first on the ground, each next one in a random
empty cell that shares a face (weight ``face_weight``) or an edge (weight ``edge_weight``) with
a block so far, with weights shrinking with height so the structures stay low like MDC targets.
"""

from __future__ import annotations

import bisect
import dataclasses
import itertools
from typing import Iterable, Mapping, Sequence

import numpy as np

from bapjax.sim.shapes import SHAPE_TYPES, Shape, make_shape, sample_params, sample_shape, shape_geometry
from bapjax.world import grid
from bapjax.world.grid import INVENTORY_PER_COLOR, NUM_COLORS, Block

Cell = tuple[int, int, int]

FACE_OFFSETS = np.array([(1, 0, 0), (-1, 0, 0), (0, 1, 0), (0, -1, 0), (0, 0, 1), (0, 0, -1)])
EDGE_OFFSETS = np.array(
    [(dx, dy, dz) for dx in (-1, 0, 1) for dy in (-1, 0, 1) for dz in (-1, 0, 1)
     if abs(dx) + abs(dy) + abs(dz) == 2]
)
TOUCH_OFFSETS = np.concatenate([FACE_OFFSETS, EDGE_OFFSETS])  # the 18-neighbourhood
_TOUCH_LIST = [tuple(int(v) for v in o) for o in TOUCH_OFFSETS]
_REGION_LO = np.array([grid.X_MIN, grid.Y_MIN, grid.Z_MIN])
_REGION_HI = np.array([grid.X_MAX, grid.Y_MAX, grid.Z_MAX])
_GRID_SIZE = np.array(grid.GRID_SHAPE)
_REGION_CELLS = frozenset(
    (x, y, z) for x in range(grid.X_MIN, grid.X_MAX + 1) for y in range(grid.Y_MIN, grid.Y_MAX + 1)
    for z in range(grid.Z_MIN, grid.Z_MAX + 1)
)


class StructureError(RuntimeError):
    """The sampler could not meet the constraints within its number of tries."""


@dataclasses.dataclass(frozen=True)
class ShapeStructure:
    """A target structure made of shapes: the shapes in composition order and all blocks."""

    shapes: tuple[Shape, ...]
    blocks: Mapping[Cell, int]

    def as_blocks(self) -> tuple[Block, ...]:
        return tuple(Block(*cell, color) for cell, color in self.blocks.items())


def touches(cells_a: Iterable[Cell], cells_b: Iterable[Cell]) -> bool:
    """True when a cell of ``a`` shares a face or an edge with a cell of ``b``."""
    set_b = set(cells_b)
    for x, y, z in cells_a:
        for dx, dy, dz in _TOUCH_LIST:
            if (x + dx, y + dy, z + dz) in set_b:
                return True
    return False


def connected_components(cells: Iterable[Cell]) -> list[set[Cell]]:
    """Components under face-or-edge adjacency (18-neighbourhood)."""
    remaining = set(cells)
    components = []
    while remaining:
        seed = remaining.pop()
        component = {seed}
        stack = [seed]
        while stack:
            x, y, z = stack.pop()
            for dx, dy, dz in _TOUCH_LIST:
                n = (x + dx, y + dy, z + dz)
                if n in remaining:
                    remaining.discard(n)
                    component.add(n)
                    stack.append(n)
        components.append(component)
    return components


def constraint_violations(blocks, shapes: Sequence[Shape] | None = None) -> list[str]:
    """Every broken constraint, as readable sentences (empty list: the structure is valid)."""
    structure = grid.as_structure(blocks)
    problems: list[str] = []
    if not structure:
        return ["the structure is empty (no block on the ground)"]
    outside = [c for c in structure if not grid.in_region(*c)]
    if outside:
        problems.append(f"{len(outside)} block(s) outside the build region, e.g. {outside[0]}")
    bad_colors = [c for c, v in structure.items() if not 1 <= v <= NUM_COLORS]
    if bad_colors:
        problems.append(f"block {bad_colors[0]} has color id {structure[bad_colors[0]]}")
    counts = np.bincount([v for v in structure.values() if 0 <= v <= NUM_COLORS],
                         minlength=NUM_COLORS + 1)
    for color in range(1, NUM_COLORS + 1):
        if counts[color] > INVENTORY_PER_COLOR:
            problems.append(f"{counts[color]} {grid.color_name(color)} blocks, more than "
                            f"the inventory of {INVENTORY_PER_COLOR}")
    if not any(c[1] == grid.Y_MIN for c in structure):
        problems.append("no block on the ground (y = 1)")
    components = connected_components(structure)
    if len(components) > 1:
        sizes = sorted((len(c) for c in components), reverse=True)
        problems.append(f"not connected by faces or edges: {len(components)} parts of sizes {sizes}")
    if shapes is not None:
        seen: dict[Cell, int] = {}
        for index, shape in enumerate(shapes):
            for cell in shape.cells:
                if cell in seen:
                    problems.append(f"shapes {seen[cell]} and {index} overlap in cell {cell}")
                    break
                seen[cell] = index
                if structure.get(cell) != shape.color:
                    problems.append(f"shape {index} ({shape.kind}) cell {cell} is not a "
                                    f"{grid.color_name(shape.color)} block of the structure")
                    break
        if set(seen) != set(structure):
            problems.append(f"{len(set(structure) - set(seen))} block(s) belong to no shape")
        if len(shapes) > 1:
            for index, shape in enumerate(shapes):
                others = [c for j, s in enumerate(shapes) if j != index for c in s.cells]
                if not touches(shape.cells, others):
                    problems.append(f"shape {index} ({shape.kind}) touches no other shape")
    return problems


def _occupancy(structure: Mapping[Cell, int]) -> np.ndarray:
    occupied = np.zeros(grid.GRID_SHAPE, bool)
    for x, y, z in structure:
        occupied[x - grid.X_MIN, y - grid.Y_MIN, z - grid.Z_MIN] = True
    return occupied


def touch_zone(structure: Mapping[Cell, int]) -> np.ndarray:
    """Bool grid of the cells that share a face or an edge with a block of ``structure``."""
    zone = np.zeros(grid.GRID_SHAPE, bool)
    if not structure:
        return zone
    cells = np.array(list(structure), dtype=np.int64).reshape(-1, 3) - _REGION_LO
    neighbours = (cells[:, None, :] + TOUCH_OFFSETS[None, :, :]).reshape(-1, 3)
    inside = np.all((neighbours >= 0) & (neighbours < _GRID_SIZE), axis=1)
    neighbours = neighbours[inside]
    zone[neighbours[:, 0], neighbours[:, 1], neighbours[:, 2]] = True
    return zone


def touching_translations(relative_cells: np.ndarray, structure: Mapping[Cell, int],
                          grids: tuple[np.ndarray, np.ndarray] | None = None) -> np.ndarray:
    """All offsets t [N, 3] such that ``relative_cells + t`` is in the region, overlaps no block
    of ``structure`` and touches (face or edge) at least one of them.

    One pass over the grid per shape cell: for cell r, the slice of the grid at ``t + r`` for
    every admissible t; AND of "empty" over the cells, OR of "touching" over the cells.
    ``grids``: (occupancy, touch zone) of ``structure`` when the caller keeps them already.
    """
    rel = np.asarray(relative_cells, dtype=np.int64).reshape(-1, 3)
    rmin, rmax = rel.min(0), rel.max(0)
    size = (_REGION_HI - _REGION_LO) - (rmax - rmin) + 1
    if np.any(size <= 0):
        return np.zeros((0, 3), np.int64)
    occupied, zone = grids if grids is not None else (_occupancy(structure), touch_zone(structure))
    sx, sy, sz = (int(v) for v in size)
    free = np.ones((sx, sy, sz), bool)
    touching = np.zeros((sx, sy, sz), bool)
    for ox, oy, oz in (rel - rmin).tolist():
        free &= ~occupied[ox:ox + sx, oy:oy + sy, oz:oz + sz]
        touching |= zone[ox:ox + sx, oy:oy + sy, oz:oz + sz]
    return np.argwhere(free & touching) + (_REGION_LO - rmin)


def _pick_colors(rng: np.random.Generator, num_shapes: int, colors: Sequence[int] | None,
                 distinct_colors: bool) -> list[int]:
    palette = list(colors) if colors else list(range(1, NUM_COLORS + 1))
    if distinct_colors and num_shapes <= len(palette):
        return [int(c) for c in rng.permutation(palette)[:num_shapes]]
    return [int(palette[int(rng.integers(len(palette)))]) for _ in range(num_shapes)]


def sample_shape_structure(
    rng: np.random.Generator,
    num_shapes: int,
    kinds: Sequence[str] = SHAPE_TYPES,
    colors: Sequence[int] | None = None,
    size_bounds=None,
    distinct_colors: bool = True,
    plane_kinds: Sequence[str | None] | None = None,
    max_tries: int = 50,
) -> ShapeStructure:
    """``num_shapes`` random shapes (kinds drawn with replacement from ``kinds``) composed into
    one structure meeting the constraints of this module.

    ``colors``: the color ids to draw from (default all six); ``distinct_colors``: different
    colors per shape when there are enough; ``plane_kinds``: per shape "horizontal",
    "vertical" or None (random); ``size_bounds``: {kind: {param: (min, max)}}.
    """
    if num_shapes < 1:
        raise ValueError(f"num_shapes is {num_shapes}; need at least 1")
    kinds = list(kinds)
    unknown = [k for k in kinds if k not in SHAPE_TYPES]
    if unknown or not kinds:
        raise ValueError(f"kinds {kinds}: expected a non-empty subset of {SHAPE_TYPES}")
    if plane_kinds is not None and len(plane_kinds) != num_shapes:
        raise ValueError(f"plane_kinds has {len(plane_kinds)} entries for {num_shapes} shapes")
    for _ in range(max_tries):
        shape_colors = _pick_colors(rng, num_shapes, colors, distinct_colors)
        plane_kind = plane_kinds[0] if plane_kinds else None
        first = sample_shape(rng, kinds[int(rng.integers(len(kinds)))], shape_colors[0],
                             size_bounds, plane_kind, on_ground=True)
        shapes = [first]
        structure = first.blocks()
        occupied, zone = _occupancy(structure), touch_zone(structure)
        counts = np.zeros(NUM_COLORS + 1, int)
        counts[first.color] += first.size
        for index in range(1, num_shapes):
            placed = None
            for _ in range(max_tries):
                kind = kinds[int(rng.integers(len(kinds)))]
                params = sample_params(rng, kind, size_bounds,
                                       plane_kinds[index] if plane_kinds else None)
                rel = np.array(shape_geometry(kind, params))
                color = shape_colors[index]
                if counts[color] + len(rel) > INVENTORY_PER_COLOR:
                    continue
                offsets = touching_translations(rel, structure, (occupied, zone))
                if len(offsets) == 0:
                    continue
                offset = offsets[int(rng.integers(len(offsets)))]
                placed = make_shape(kind, color, params, tuple(int(v) for v in offset))
                break
            if placed is None:
                break
            shapes.append(placed)
            structure.update(placed.blocks())
            added = placed.blocks()
            occupied |= _occupancy(added)
            zone |= touch_zone(added)
            counts[placed.color] += placed.size
        if len(shapes) == num_shapes:
            return ShapeStructure(tuple(shapes), structure)
    raise StructureError(f"could not compose {num_shapes} shapes of kinds {kinds} in {max_tries} tries")


def grow_random_structure(
    rng: np.random.Generator,
    num_blocks: int,
    colors: Sequence[int] | None = None,
    face_weight: float = 1.0,
    edge_weight: float = 0.25,
    height_decay: float = 0.6,
    start: Mapping[Cell, int] | None = None,
) -> list[Block]:
    """Grow a random structure one block at a time; returns the new blocks in growth order.

    Every prefix of the growth (with ``start``, if given) meets the constraints: on the ground,
    connected by faces or edges, in the region, <= 20 per color.  A cell's weight is
    ``face_weight`` (shares a face with a block) or ``edge_weight`` (only an edge), times
    ``height_decay ** (y - 1)``.
    """
    palette = list(colors) if colors else list(range(1, NUM_COLORS + 1))
    structure: dict[Cell, int] = grid.as_structure(start) if start else {}
    counts = np.zeros(NUM_COLORS + 1, int)
    for color in structure.values():
        counts[color] += 1
    capacity = sum(INVENTORY_PER_COLOR - counts[c] for c in palette)
    if num_blocks > capacity:
        raise ValueError(f"num_blocks {num_blocks} exceeds the inventory left ({capacity})")
    weights: dict[Cell, float] = {}  # frontier: empty cell -> weight (max over its neighbours)
    face_weights = [face_weight * height_decay ** j for j in range(grid.GRID_SHAPE[1])]
    edge_weights = [edge_weight * height_decay ** j for j in range(grid.GRID_SHAPE[1])]

    def add_frontier(cell: Cell) -> None:
        x, y, z = cell
        for k, (dx, dy, dz) in enumerate(_TOUCH_LIST):
            n = (x + dx, y + dy, z + dz)
            if n in structure or n not in _REGION_CELLS:
                continue
            w = (face_weights if k < 6 else edge_weights)[n[1] - grid.Y_MIN]
            if w > weights.get(n, 0.0):
                weights[n] = w

    for cell in structure:
        add_frontier(cell)
    grown: list[Block] = []
    for _ in range(num_blocks):
        if not structure:
            cell = (int(rng.integers(grid.X_MIN, grid.X_MAX + 1)), grid.Y_MIN,
                    int(rng.integers(grid.Z_MIN, grid.Z_MAX + 1)))
        else:
            cells = list(weights)
            cumulative = list(itertools.accumulate(weights.values()))
            index = bisect.bisect_right(cumulative, rng.random() * cumulative[-1])
            cell = cells[min(index, len(cells) - 1)]
        room = [c for c in palette if counts[c] < INVENTORY_PER_COLOR]
        color = int(room[int(rng.integers(len(room)))])
        structure[cell] = color
        counts[color] += 1
        weights.pop(cell, None)
        add_frontier(cell)
        grown.append(Block(*cell, color))
    return grown
