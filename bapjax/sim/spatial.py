"""Geometry in the Builder's frame: yaw axes, offsets, relation types, extremes, shape lines, poses.

Minecraft's convention: yaw 0 faces +z and the right hand then points to -x; yaw 90 faces -x.
So at yaw ``t`` (degrees) forward is ``(-sin t, 0, cos t)`` and right is ``(-cos t, 0, -sin t)``.
Spatial language uses the yaw snapped to the nearest multiple of 90 degrees (the simulators
sample poses whose yaw is well inside one quadrant, so the snap is never a coin toss).

Builder-frame offsets are ``(right, up, away)`` integers: ``right > 0`` is to the Builder's
right, ``up > 0`` above, ``away > 0`` farther from the Builder ("behind"), ``away < 0`` toward
it ("in front of").
"""

from __future__ import annotations

import math
from typing import Iterable, Sequence

import numpy as np

from bapjax.world.grid import EYE_HEIGHT
from bapjax.world.items import BuilderPose

Cell = tuple[int, int, int]
Offset = tuple[int, int, int]  # (right, up, away) in the Builder's frame

# Names of the six 1D directions in the Builder's frame and their unit offsets.
DIRECTIONS: dict[str, Offset] = {
    "right": (1, 0, 0),
    "left": (-1, 0, 0),
    "up": (0, 1, 0),
    "down": (0, -1, 0),
    "behind": (0, 0, 1),
    "front": (0, 0, -1),
}
AXIS_NAMES = (("left", "right"), ("down", "up"), ("front", "behind"))  # (negative, positive)
RELATION_TYPES = ("1D", "2D", "3D")


def yaw_quadrant(yaw: float) -> int:
    """0: facing +z, 1: facing -x, 2: facing -z, 3: facing +x (yaw snapped to 90 degrees)."""
    return int(round(float(yaw) / 90.0)) % 4


def quadrant_axes(quadrant: int) -> tuple[tuple[int, int], tuple[int, int]]:
    """World (dx, dz) of the Builder's right hand and of its forward direction."""
    right = ((-1, 0), (0, -1), (1, 0), (0, 1))[quadrant % 4]
    forward = ((0, 1), (-1, 0), (0, -1), (1, 0))[quadrant % 4]
    return right, forward


def world_to_builder(delta: Sequence[int], yaw: float) -> Offset:
    """A world displacement (dx, dy, dz) as (right, up, away) for a Builder at ``yaw``."""
    (rx, rz), (fx, fz) = quadrant_axes(yaw_quadrant(yaw))
    dx, dy, dz = (int(v) for v in delta)
    return (dx * rx + dz * rz, dy, dx * fx + dz * fz)


def builder_to_world(offset: Sequence[int], yaw: float) -> tuple[int, int, int]:
    """Inverse of ``world_to_builder``: (right, up, away) back to world (dx, dy, dz)."""
    (rx, rz), (fx, fz) = quadrant_axes(yaw_quadrant(yaw))
    r, u, a = (int(v) for v in offset)
    return (r * rx + a * fx, u, r * rz + a * fz)


def add(cell: Sequence[int], delta: Sequence[int]) -> Cell:
    return (int(cell[0]) + int(delta[0]), int(cell[1]) + int(delta[1]), int(cell[2]) + int(delta[2]))


def sub(a: Sequence[int], b: Sequence[int]) -> Cell:
    return (int(a[0]) - int(b[0]), int(a[1]) - int(b[1]), int(a[2]) - int(b[2]))


def relation_type(offset: Sequence[int]) -> str | None:
    """'1D', '2D' or '3D' by the number of nonzero components; None for the zero offset."""
    nonzero = sum(1 for v in offset if v != 0)
    return RELATION_TYPES[nonzero - 1] if nonzero else None


def offset_components(offset: Sequence[int]) -> list[tuple[str, int]]:
    """[(direction name, distance)] for the nonzero components, in (right, up, away) order."""
    out = []
    for axis, value in enumerate(offset):
        if value:
            out.append((AXIS_NAMES[axis][1 if value > 0 else 0], abs(int(value))))
    return out


def components_to_offset(components: Iterable[tuple[str, int]]) -> Offset:
    total = [0, 0, 0]
    for name, distance in components:
        unit = DIRECTIONS[name]
        for k in range(3):
            total[k] += unit[k] * int(distance)
    return tuple(total)  # type: ignore[return-value]


def builder_coordinates(cell: Sequence[int], yaw: float) -> Offset:
    """A cell's position along the Builder's (right, up, away) axes (for extremes)."""
    return world_to_builder(cell, yaw)


# --------------------------------------------------------------------------------------------
# Extremes ("the bottom-most red block")

EXTREMES: dict[str, tuple[int, int]] = {  # name -> (axis in (right, up, away), sign of "most")
    "left": (0, -1),
    "right": (0, 1),
    "top": (1, 1),
    "bottom": (1, -1),
    "front": (2, -1),  # closest to the Builder
    "back": (2, 1),  # farthest from the Builder
}


def unique_extreme(cells: Iterable[Cell], target: Cell, extreme: str, yaw: float) -> bool:
    """Whether ``target`` is the single most-``extreme`` cell of ``cells`` (Builder frame)."""
    axis, sign = EXTREMES[extreme]
    values = [(sign * builder_coordinates(c, yaw)[axis], c) for c in cells]
    best = max(v for v, _ in values)
    winners = [c for v, c in values if v == best]
    return len(winners) == 1 and winners[0] == tuple(target)


# --------------------------------------------------------------------------------------------
# Lines and planes of shapes (derived from the cells, so any shape sampler works)


def sign(v: int) -> int:
    return (v > 0) - (v < 0)


def line_geometry(cells: Sequence[Cell]) -> tuple[Cell, Cell, Cell] | None:
    """(first end, other end, world unit step) when the cells form a straight line of unit steps.

    Works for rows (one axis) and diagonals (two or three axes change by one per block).
    """
    cells = [tuple(c) for c in cells]
    if len(cells) < 2:
        return None
    ordered = sorted(cells)
    step = tuple(sign(b - a) for a, b in zip(ordered[0], ordered[1]))
    if step == (0, 0, 0):
        return None
    start = ordered[0]
    expected = {add(start, tuple(k * s for s in step)) for k in range(len(cells))}
    if expected != set(cells):
        return None
    end = add(start, tuple((len(cells) - 1) * s for s in step))
    return start, end, step


def plane_geometry(cells: Sequence[Cell]) -> tuple[Cell, tuple[int, int, int], tuple[int, int, int]] | None:
    """(min corner, (axis a, size a), (axis b, size b)) when the cells fill an axis-aligned rectangle
    with exactly one constant coordinate; axes are 0 (x), 1 (y), 2 (z)."""
    arr = np.asarray(cells, dtype=int)
    if arr.ndim != 2 or len(arr) < 4:
        return None
    lo, hi = arr.min(0), arr.max(0)
    extent = hi - lo + 1
    flat = [k for k in range(3) if extent[k] == 1]
    if len(flat) != 1:
        return None
    a, b = [k for k in range(3) if k != flat[0]]
    if extent[a] * extent[b] != len(set(map(tuple, arr.tolist()))) or len(arr) != extent[a] * extent[b]:
        return None
    return tuple(int(v) for v in lo), (a, int(extent[a]), 0), (b, int(extent[b]), 0)


def plane_corners(cells: Sequence[Cell]) -> list[tuple[Cell, Cell, int, Cell, int]]:
    """For each corner of a rectangular plane: (corner, world unit dir 1, size 1, world unit dir 2, size 2)."""
    geometry = plane_geometry(cells)
    if geometry is None:
        return []
    lo, (a, size_a, _), (b, size_b, _) = geometry
    corners = []
    for end_a in (0, size_a - 1):
        for end_b in (0, size_b - 1):
            corner = list(lo)
            corner[a] += end_a
            corner[b] += end_b
            dir_a = [0, 0, 0]
            dir_a[a] = 1 if end_a == 0 else -1
            dir_b = [0, 0, 0]
            dir_b[b] = 1 if end_b == 0 else -1
            corners.append((tuple(corner), tuple(dir_a), size_a, tuple(dir_b), size_b))
    return corners


# --------------------------------------------------------------------------------------------
# Builder poses

MAX_YAW_DEVIATION = 42.0  # degrees from the quadrant's axis; below the 45 of an ambiguous snap
# The MDC's Builders look off-axis often (yaw deviation: median 5, 75th percentile 19, 90th 34
# degrees): a share of poses turn away from the target direction by a larger angle.
OFF_AXIS_SHARE = 0.25
OFF_AXIS_TURN = (18.0, 40.0)  # degrees added (either side) for those poses
STAND_DISTANCE = (0.8, 3.5)  # blocks in front of the nearest built or planned cell (MDC: eye-to-target median 4.1)
AMONG_BLOCKS_SHARE = 0.08  # poses right against a front-row block (its cell is next to the Builder's feet cell)
AMONG_BLOCKS_DISTANCE = (0.05, 0.45)  # then: the feet cell is the one just in front of the front row, never in it


def sample_pose(rng: np.random.Generator, structure_cells: Iterable[Cell], focus_cells: Iterable[Cell],
                quadrant: int | None = None) -> BuilderPose:
    """A valid Builder pose: outside the structure, STAND_DISTANCE blocks in front of it, facing
    the focus cells.

    The Builder stands on the near side of everything built or about to be built (seen along its
    forward axis), at ground level or flying a little above, and looks at the focus cells' centre,
    turned away from it by a larger angle in OFF_AXIS_SHARE of poses (as MDC Builders often are);
    its yaw stays within MAX_YAW_DEVIATION of the quadrant's axis, and spatial language uses that
    quadrant's frame (the yaw snapped to 90 degrees), so left/right stay unambiguous.
    """
    occupied = [tuple(c) for c in structure_cells]
    focus = [tuple(c) for c in focus_cells] or occupied or [(0, 1, 0)]
    every = occupied + focus
    if quadrant is None:
        quadrant = int(rng.integers(4))
    (rx, rz), (fx, fz) = quadrant_axes(quadrant)
    forward_proj = [c[0] * fx + c[2] * fz for c in every]
    focus_arr = np.asarray(focus, dtype=float)
    centre = focus_arr.mean(0)
    centre_right = centre[0] * rx + centre[2] * rz
    top = max(c[1] for c in every)
    front_row = [c for c, f in zip(every, forward_proj) if f == min(forward_proj)]
    front_row = [c for c in front_row if c in occupied] or front_row  # a built block if there is one
    if rng.random() < AMONG_BLOCKS_SHARE:  # right against a block of the front row (MDC Builders often are)
        block = front_row[int(rng.integers(len(front_row)))]
        stand_forward = min(forward_proj) - 0.5 - float(rng.uniform(*AMONG_BLOCKS_DISTANCE))
        stand_right = block[0] * rx + block[2] * rz + float(rng.uniform(-0.4, 0.4))
        y = float(block[1])
    else:
        stand_forward = min(forward_proj) - 0.5 - float(rng.uniform(*STAND_DISTANCE))
        stand_right = centre_right + float(rng.uniform(-1.0, 1.0))
        y = 1.0 if rng.random() < 0.5 else float(rng.uniform(1.0, max(1.0, top + 1.5)))
    x = stand_right * rx + stand_forward * fx
    z = stand_right * rz + stand_forward * fz
    dx, dz = centre[0] - x, centre[2] - z
    yaw_to_focus = math.degrees(math.atan2(-dx, dz))
    axis_yaw = 90.0 * quadrant
    deviation = (yaw_to_focus - axis_yaw + 180.0) % 360.0 - 180.0
    deviation += rng.normal(0.0, 4.0)
    if rng.random() < OFF_AXIS_SHARE:
        deviation += float(rng.choice((-1.0, 1.0))) * float(rng.uniform(*OFF_AXIS_TURN))
    deviation = float(np.clip(deviation, -MAX_YAW_DEVIATION, MAX_YAW_DEVIATION))
    yaw = axis_yaw + deviation
    if yaw > 180.0:
        yaw -= 360.0
    horizontal = math.hypot(dx, dz)
    pitch = math.degrees(math.atan2(y + EYE_HEIGHT - centre[1], max(horizontal, 0.5)))
    pitch = float(np.clip(pitch + rng.normal(0.0, 3.0), -60.0, 85.0))
    return BuilderPose(round(float(x), 3), round(float(y), 3), round(float(z), 3), round(float(yaw), 2),
                round(float(pitch), 2))


def pose_is_valid(pose: BuilderPose | Sequence[float], structure_cells: Iterable[Cell],
                  max_distance: float = 12.0) -> bool:
    """Outside every block (feet and head cells), within ``max_distance`` of the nearest block,
    and with a yaw far from a quadrant boundary."""
    x, y, z, yaw = (float(v) for v in list(pose)[:4])
    cells = [tuple(c) for c in structure_cells]
    feet = (math.floor(x + 0.5), math.floor(y + 0.5), math.floor(z + 0.5))
    if feet in cells or add(feet, (0, 1, 0)) in cells:
        return False
    if cells:
        nearest = min(math.dist((x, y, z), c) for c in cells)
        if nearest > max_distance:
            return False
    deviation = abs((yaw - 90.0 * yaw_quadrant(yaw) + 180.0) % 360.0 - 180.0)
    return deviation <= MAX_YAW_DEVIATION + 1e-6
