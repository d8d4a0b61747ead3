"""Quarter turns of the world about the vertical axis through the build region's center, and the
Builder's frame.

A quarter turn maps cell (x, z) to (-z, x): the build region (x, z in -5..5) onto itself. A
continuous position turns the same way about (0.5, 0.5), the center of the region's cell
centers, so a cell's center turns with its cell. The Builder's yaw increases by 90 degrees per
turn: Minecraft looks along (-sin yaw, cos yaw) in (x, z), which (x, z) -> (-z, x) maps to the
direction of yaw + 90. Heights, colors and chat are unchanged, so every block keeps its place
relative to the Builder.

The Builder's frame of an item (`to_builder_frame`) is the item turned by the k quarter turns
(`builder_frame_turns`) that bring the Builder's yaw into [-45, 45): the Builder then looks
roughly along +z, so "left", "right", "front" and "back" name the same grid directions in every
item. `from_builder_frame` turns actions predicted in that frame back to the world.
"""

from __future__ import annotations

import dataclasses
from typing import Iterable

from bapjax.world.grid import Action, Block
from bapjax.world.items import BapItem, BuilderPose


def rotate_cell(x: int, z: int, quarter_turns: int) -> tuple[int, int]:
    """Cell (x, z) after k quarter turns (x, z) -> (-z, x); maps the build region to itself."""
    for _ in range(quarter_turns % 4):
        x, z = -z, x
    return x, z


def rotate_position(x: float, z: float, quarter_turns: int) -> tuple[float, float]:
    """A continuous position rotated like the cells: about (0.5, 0.5)."""
    for _ in range(quarter_turns % 4):
        x, z = 1.0 - z, x
    return x, z


def rotate_yaw(yaw: float, quarter_turns: int) -> float:
    """Yaw (degrees, in [-180, 180)) turned with the world: +90 per quarter turn.

    Minecraft looks along (-sin yaw, cos yaw) in (x, z); (x, z) -> (-z, x) maps that to the
    direction of yaw + 90. Logged yaws outside [-180, 180) (the MDC's lie in (-360, 360)) are
    normalized when turned, and kept as logged when k = 0.
    """
    if quarter_turns % 4 == 0:
        return yaw
    return (yaw + 90.0 * (quarter_turns % 4) + 180.0) % 360.0 - 180.0


def rotate_block(block: Block, quarter_turns: int) -> Block:
    x, z = rotate_cell(block.x, block.z, quarter_turns)
    return Block(x, block.y, z, block.color)


def rotate_action(action: Action, quarter_turns: int) -> Action:
    x, z = rotate_cell(action.x, action.z, quarter_turns)
    return Action(action.type, action.color, x, action.y, z)


def rotate_pose(pose: BuilderPose, quarter_turns: int) -> BuilderPose:
    x, z = rotate_position(pose.x, pose.z, quarter_turns)
    return BuilderPose(x, pose.y, z, rotate_yaw(pose.yaw, quarter_turns), pose.pitch)


def rotate_item(item: BapItem, quarter_turns: int) -> BapItem:
    """The item turned by k quarter turns: structures (sorted, as the itemizer writes them),
    reference actions, the Builder's earlier actions in the history and the pose; chat turns and
    ids unchanged."""
    if quarter_turns % 4 == 0:
        return item
    history = tuple(rotate_action(e, quarter_turns) if isinstance(e, Action) else e for e in item.history)
    return dataclasses.replace(
        item, history=history,
        prev_structure=tuple(sorted(rotate_block(b, quarter_turns) for b in item.prev_structure)),
        reference_actions=tuple(rotate_action(a, quarter_turns) for a in item.reference_actions),
        next_structure=tuple(sorted(rotate_block(b, quarter_turns) for b in item.next_structure)),
        builder_pose=rotate_pose(item.builder_pose, quarter_turns))


def _in_frame(yaw: float) -> bool:
    return -45.0 <= (yaw + 180.0) % 360.0 - 180.0 < 45.0


def builder_frame_turns(yaw: float) -> int:
    """The k in 0..3 such that `rotate_yaw(yaw, k)` lies in [-45, 45) (read modulo 360, for a
    logged yaw outside [-180, 180) kept as is at k = 0): the Builder then looks along +z, give
    or take 45 degrees."""
    for k in range(4):
        if _in_frame(rotate_yaw(yaw, k)):
            return k
    # Unreachable but for rounding at a boundary: the turn of the nearest quadrant.
    return (4 - int(((yaw + 45.0) % 360.0) // 90.0)) % 4


def to_builder_frame(item: BapItem) -> tuple[BapItem, int]:
    """(the item in its Builder's frame, the quarter turns k that took it there)."""
    k = builder_frame_turns(item.builder_pose.yaw)
    return rotate_item(item, k), k


def from_builder_frame(actions: Iterable[Action], quarter_turns: int) -> list[Action]:
    """Actions of an item's Builder frame (reached by k quarter turns) in world coordinates."""
    back = (4 - quarter_turns) % 4
    return [rotate_action(a, back) for a in actions]

