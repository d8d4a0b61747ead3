"""The six elementary shapes of the shape-based target structures (paper section 5.3.1).

Every shape is a set of cells of one color, listed in its *natural build order* (the order an
Architect would describe it block by block and a Builder would place it).  A shape lives on a
line (row, diagonal) or in a plane spanned by two perpendicular axis-aligned unit vectors
``u`` and ``v`` (T, L, U, plane); its cells are ``origin + a*u + b*v``.  Definitions (also in
docs/structures.md):

* ``row``: ``n`` blocks in a straight line along one axis: ``origin + i*d``, i = 0..n-1, ``d`` a
  unit vector along x or z (horizontal row) or y (vertical row, a "tower"/"column").
* ``diagonal``: ``n`` blocks ``origin + i*(u + v)``: each block shares only an edge with the
  next.  ``u, v`` perpendicular unit vectors: a vertical diagonal (one of them is +-y: a
  "staircase") or a horizontal one (x and z).
* ``T``: a bar of odd length ``w`` along ``u`` centred on the origin, plus a stem of ``h`` blocks
  from the bar's middle along ``v``: cells (a, 0) for |a| <= (w-1)/2 and (0, b) for b = 1..h.
* ``L``: two arms meeting at a corner: (a, 0) for a = 0..p-1 and (0, b) for b = 1..q-1
  (arm lengths p, q >= 2 counting the corner).
* ``U``: a base (a, 0), a = 0..w-1 (w >= 3), and two arms (0, b) and (w-1, b), b = 1..h.
* ``plane``: a filled rectangle (a, b), a = 0..p-1, b = 0..q-1 (p, q >= 2); horizontal
  (u, v = x, z) or vertical (one of u, v is y).

T, L, U and plane are planar: ``plane_kind`` says "horizontal" (the x-z plane) or
"vertical" (x-y or z-y).  Orientation = the signed ``u``, ``v`` (all 4 rotations and the mirror
images in each plane).  Sizes come from ``size_bounds`` ({kind: {param: (min, max)}}).

Natural build order: path-like shapes (row, diagonal, L, U) are walked from one end to the
other, starting at the lower end (a U opening upwards: the base, then each arm bottom-up); a T
is built bar-first unless its stem hangs down from the bar (then the stem tip up, then the bar
from its middle outwards); a plane is built row by row, bottom row first for a vertical plane,
snaking.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping

import numpy as np

from bapjax.world import grid

Cell = tuple[int, int, int]

SHAPE_TYPES = ("row", "diagonal", "T", "L", "U", "plane")

DEFAULT_SIZE_BOUNDS: dict[str, dict[str, tuple[int, int]]] = {
    "row": {"length": (2, 6)},
    "diagonal": {"length": (2, 5)},
    "T": {"bar": (3, 5), "stem": (1, 3)},
    "L": {"arm1": (2, 4), "arm2": (2, 4)},
    "U": {"base": (3, 5), "arm": (1, 3)},
    "plane": {"width": (2, 4), "depth": (2, 4)},
}

UNIT_VECTORS: tuple[Cell, ...] = ((1, 0, 0), (-1, 0, 0), (0, 1, 0), (0, -1, 0), (0, 0, 1), (0, 0, -1))
UP = (0, 1, 0)


@dataclasses.dataclass(frozen=True)
class Shape:
    """One shape instance: kind, color id (1..6), cells in natural build order, parameters.

    ``params`` always has ``origin`` (the cell the geometry is anchored at), the orientation
    (``direction`` for a row, ``u`` and ``v`` otherwise, ``plane_kind`` / ``vertical``) and the
    sizes of the kind (``length``; ``bar``/``stem``; ``arm1``/``arm2``; ``base``/``arm``;
    ``width``/``depth``).
    """

    kind: str
    color: int
    cells: tuple[Cell, ...]
    params: Mapping[str, Any]

    def __post_init__(self):
        if self.kind not in SHAPE_TYPES:
            raise ValueError(f"unknown shape kind {self.kind!r}; expected one of {SHAPE_TYPES}")

    @property
    def size(self) -> int:
        return len(self.cells)

    @property
    def first_cell(self) -> Cell:
        return self.cells[0]

    @property
    def last_cell(self) -> Cell:
        return self.cells[-1]

    def blocks(self) -> dict[Cell, int]:
        return {cell: self.color for cell in self.cells}

    def translated(self, offset: Cell) -> "Shape":
        dx, dy, dz = (int(v) for v in offset)
        cells = tuple((x + dx, y + dy, z + dz) for x, y, z in self.cells)
        ox, oy, oz = self.params["origin"]
        params = dict(self.params, origin=(ox + dx, oy + dy, oz + dz))
        return Shape(self.kind, self.color, cells, params)

    def to_json(self) -> dict:
        params = {k: list(v) if isinstance(v, tuple) else v for k, v in self.params.items()}
        return {"kind": self.kind, "color": grid.color_name(self.color),
                "cells": [list(c) for c in self.cells], "params": params}

    @classmethod
    def from_json(cls, record: Mapping[str, Any], where: str = "shape") -> "Shape":
        try:
            params = {k: tuple(v) if isinstance(v, list) else v for k, v in record["params"].items()}
            return cls(record["kind"], grid.color_id(record["color"]),
                       tuple(tuple(int(v) for v in c) for c in record["cells"]), params)
        except (KeyError, TypeError, ValueError) as err:
            raise ValueError(f"{where}: bad shape record ({err})") from None


def _add(a: Cell, b: Cell, scale_a: int = 1, scale_b: int = 1) -> Cell:
    return (a[0] * scale_a + b[0] * scale_b, a[1] * scale_a + b[1] * scale_b,
            a[2] * scale_a + b[2] * scale_b)


def _planar(u: Cell, v: Cell, coords) -> list[Cell]:
    return [(a * u[0] + b * v[0], a * u[1] + b * v[1], a * u[2] + b * v[2]) for a, b in coords]


def _lower_end_first(cells: list[Cell]) -> list[Cell]:
    return cells[::-1] if cells[-1][1] < cells[0][1] else cells


def shape_geometry(kind: str, params: Mapping[str, Any]) -> list[Cell]:
    """Cells relative to the origin, in natural build order, for a kind and its parameters."""
    if kind == "row":
        d, n = params["direction"], params["length"]
        return _lower_end_first([(d[0] * i, d[1] * i, d[2] * i) for i in range(n)])
    u, v = params["u"], params["v"]
    if kind == "diagonal":
        n = params["length"]
        d = _add(u, v)
        return _lower_end_first([(d[0] * i, d[1] * i, d[2] * i) for i in range(n)])
    if kind == "T":
        w, h = params["bar"], params["stem"]
        half = (w - 1) // 2
        bar = _planar(u, v, [(a, 0) for a in range(-half, half + 1)])
        stem = _planar(u, v, [(0, b) for b in range(1, h + 1)])
        if v[1] < 0:  # stem hangs below the bar: from its tip up, then the bar from the middle out
            middle = _planar(u, v, [(0, 0)])
            right = _planar(u, v, [(a, 0) for a in range(1, half + 1)])
            left = _planar(u, v, [(-a, 0) for a in range(1, half + 1)])
            return stem[::-1] + middle + right + left
        return bar + stem
    if kind == "L":
        p, q = params["arm1"], params["arm2"]
        arm1 = _planar(u, v, [(a, 0) for a in range(p - 1, -1, -1)])
        arm2 = _planar(u, v, [(0, b) for b in range(1, q)])
        return _lower_end_first(arm1 + arm2)
    if kind == "U":
        w, h = params["base"], params["arm"]
        if v[1] > 0:  # opening upwards: the base, then each arm bottom-up
            coords = [(a, 0) for a in range(w)] + [(0, b) for b in range(1, h + 1)]
            coords += [(w - 1, b) for b in range(1, h + 1)]
            return _planar(u, v, coords)
        coords = [(0, b) for b in range(h, 0, -1)] + [(a, 0) for a in range(w)]
        coords += [(w - 1, b) for b in range(1, h + 1)]
        return _lower_end_first(_planar(u, v, coords))
    if kind == "plane":
        p, q = params["width"], params["depth"]
        # Rows run along the horizontal in-plane axis; rows are stacked along the other.
        if u[1] != 0:  # u vertical: rows along v, stacked along u
            row_axis, stack_axis, n_row, n_stack = v, u, q, p
        else:
            row_axis, stack_axis, n_row, n_stack = u, v, p, q
        stacks = range(n_stack)
        if stack_axis[1] < 0:  # stacking downwards: start at the bottom row instead
            stacks = range(n_stack - 1, -1, -1)
        cells = []
        for r, s in enumerate(stacks):
            along = range(n_row) if r % 2 == 0 else range(n_row - 1, -1, -1)
            cells.extend(_add(row_axis, stack_axis, a, s) for a in along)
        return cells
    raise ValueError(f"unknown shape kind {kind!r}; expected one of {SHAPE_TYPES}")


def _bounds(size_bounds, kind: str, name: str) -> tuple[int, int]:
    bounds = (size_bounds or {}).get(kind, {}).get(name, DEFAULT_SIZE_BOUNDS[kind][name])
    lo, hi = int(bounds[0]), int(bounds[1])
    if lo > hi or lo < 1:
        raise ValueError(f"size bounds for {kind}.{name} are {bounds}; need 1 <= min <= max")
    return lo, hi


def _perpendicular_pair(rng: np.random.Generator, plane_kind: str | None) -> tuple[Cell, Cell, str]:
    """Signed perpendicular unit vectors u, v spanning a horizontal or vertical plane."""
    if plane_kind is None:
        plane_kind = "horizontal" if rng.random() < 1 / 3 else "vertical"
    if plane_kind == "horizontal":
        axes = [0, 2]
    elif plane_kind == "vertical":
        axes = [int(rng.choice([0, 2])), 1]
    else:
        raise ValueError(f"plane_kind {plane_kind!r}; expected 'horizontal', 'vertical' or None")
    if rng.random() < 0.5:
        axes = axes[::-1]
    vectors = []
    for axis in axes:
        vec = [0, 0, 0]
        vec[axis] = 1 if rng.random() < 0.5 else -1
        vectors.append(tuple(vec))
    return vectors[0], vectors[1], plane_kind


def sample_params(rng: np.random.Generator, kind: str, size_bounds=None,
                  plane_kind: str | None = None) -> dict[str, Any]:
    """Random size and orientation of one shape kind (origin not included)."""
    if kind == "row":
        lo, hi = _bounds(size_bounds, kind, "length")
        if plane_kind == "horizontal":
            choices = [d for d in UNIT_VECTORS if d[1] == 0]
        elif plane_kind == "vertical":
            choices = [UP]
        else:
            choices = list(UNIT_VECTORS)
        direction = choices[int(rng.integers(len(choices)))]
        if direction[1] < 0:
            direction = UP  # a downward column is the same set of cells as an upward one
        return {"length": int(rng.integers(lo, hi + 1)), "direction": direction,
                "vertical": direction[1] != 0}
    u, v, plane = _perpendicular_pair(rng, plane_kind)
    params: dict[str, Any] = {"u": u, "v": v, "plane_kind": plane}
    if kind == "diagonal":
        lo, hi = _bounds(size_bounds, kind, "length")
        params["length"] = int(rng.integers(lo, hi + 1))
    elif kind == "T":
        lo, hi = _bounds(size_bounds, kind, "bar")
        odd = [w for w in range(max(lo, 3), hi + 1) if w % 2 == 1]
        if not odd:
            raise ValueError(f"T bar bounds {lo}..{hi} contain no odd length >= 3")
        params["bar"] = int(odd[int(rng.integers(len(odd)))])
        lo, hi = _bounds(size_bounds, kind, "stem")
        params["stem"] = int(rng.integers(lo, hi + 1))
    elif kind == "L":
        for name in ("arm1", "arm2"):
            lo, hi = _bounds(size_bounds, kind, name)
            params[name] = int(rng.integers(max(lo, 2), max(hi, 2) + 1))
    elif kind == "U":
        lo, hi = _bounds(size_bounds, kind, "base")
        params["base"] = int(rng.integers(max(lo, 3), max(hi, 3) + 1))
        lo, hi = _bounds(size_bounds, kind, "arm")
        params["arm"] = int(rng.integers(lo, hi + 1))
    elif kind == "plane":
        for name in ("width", "depth"):
            lo, hi = _bounds(size_bounds, kind, name)
            params[name] = int(rng.integers(max(lo, 2), max(hi, 2) + 1))
    else:
        raise ValueError(f"unknown shape kind {kind!r}; expected one of {SHAPE_TYPES}")
    return params


def make_shape(kind: str, color: int, params: Mapping[str, Any], origin: Cell = (0, 0, 0)) -> Shape:
    """The shape of ``kind`` with ``params`` anchored at ``origin``."""
    ox, oy, oz = origin
    cells = tuple((x + ox, y + oy, z + oz) for x, y, z in shape_geometry(kind, params))
    return Shape(kind, int(color), cells, dict(params, origin=(ox, oy, oz)))


def sample_shape(rng: np.random.Generator, kind: str | None = None, color: int | None = None,
                 size_bounds=None, plane_kind: str | None = None,
                 on_ground: bool = True) -> Shape:
    """A random shape placed inside the build region (resting on the ground by default).

    ``kind`` None picks one of SHAPE_TYPES; ``color`` None picks a color; ``plane_kind``
    forces "horizontal" or "vertical" orientation.
    """
    if kind is None:
        kind = SHAPE_TYPES[int(rng.integers(len(SHAPE_TYPES)))]
    if color is None:
        color = int(rng.integers(1, grid.NUM_COLORS + 1))
    params = sample_params(rng, kind, size_bounds, plane_kind)
    rel = np.array(shape_geometry(kind, params))
    lo, hi = rel.min(0), rel.max(0)
    region_lo = np.array([grid.X_MIN, grid.Y_MIN, grid.Z_MIN])
    region_hi = np.array([grid.X_MAX, grid.Y_MAX, grid.Z_MAX])
    if np.any(hi - lo > region_hi - region_lo):
        raise ValueError(f"{kind} with {params} does not fit in the build region")
    offset_lo, offset_hi = region_lo - lo, region_hi - hi
    origin = [int(rng.integers(offset_lo[d], offset_hi[d] + 1)) for d in range(3)]
    if on_ground:
        origin[1] = int(grid.Y_MIN - lo[1])
    return make_shape(kind, color, params, tuple(origin))
