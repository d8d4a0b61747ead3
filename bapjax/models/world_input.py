"""The world CNN's input, in one place: what it sees of the voxel world, how that changes with
each action, and which batch keys it comes from.

The world state of one item at a decoder step is a dict of arrays:
  ``grid``          int8 [11, 9, 11]: colors (0 empty) after the actions so far,
  ``recent_cells``  int32 [W]: flat cell index of the k-th newest Builder action (k = 0 newest),
                    -1 where there is none; the item's earlier actions come first from the
                    featurizer, and every action of the sequence pushes its cell in front,
  ``pose``          float32 [5]: the Builder's x, y, z, yaw, pitch; it stays fixed within an item
                    (the logs give it at the last utterance),
  ``item_actions``  int32 []: how many actions the item has applied since its start (0 at the
                    start; what `world_changes` tells the item's own recent actions by).
`WORLD_KEYS` are the batch keys it is read from (`start_world`); the featurizer
(`bapjax.data.input_pipeline`) writes them, decoding passes them on (`bapjax.decoding.decode.DECODE_KEYS`).

`advance_world` is the single rule for "the world after one more action"; teacher forcing scans
it over the gold actions (`worlds_before_each_step`) and decoding applies it to the chosen action,
so both feed the CNN identical inputs for the same sequence (tested). `world_channels` is the one
place the CNN's input channels are built from a world state (`BuilderModel.encode_world`, used by
both). Its options (`use_perspective`, `recent_decay`, `perspective_scale`) are fields of the
model's world part (`config.model.world`: `perspective`, `recent_decay`, `perspective_scale`).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from bapjax.world import grid as G

_CELL_CENTERS = np.stack(np.meshgrid(
    np.arange(G.X_MIN, G.X_MAX + 1), np.arange(G.Y_MIN, G.Y_MAX + 1),
    np.arange(G.Z_MIN, G.Z_MAX + 1), indexing="ij"), axis=-1).reshape(-1, 3).astype(np.float32) + 0.5


WORLD_KEYS = ("grid", "recent_cells", "pose")  # the batch keys a world state is read from


def start_world(batch: dict) -> dict:
    """The world state at the start of each item of a batch (its `WORLD_KEYS`; on device)."""
    grid = jnp.asarray(batch["grid"]).astype(jnp.int8)
    world = {"grid": grid,
             "recent_cells": jnp.asarray(batch["recent_cells"]).astype(jnp.int32),
             "pose": jnp.asarray(batch["pose"]).astype(jnp.float32),
             "item_actions": jnp.zeros(grid.shape[:-3], jnp.int32)}
    return world


def advance_world(world: dict, action_id: jax.Array) -> dict:
    """One item's world state after `action_id` (STOP/START and padding leave it unchanged; the
    pose never changes)."""
    action_id = jnp.asarray(action_id, jnp.int32)
    is_action = (action_id >= 0) & (action_id < G.NUM_ACTIONS)
    cell = jnp.where(is_action, action_id // G.ACTIONS_PER_CELL, -1).astype(world["recent_cells"].dtype)
    cells = world["recent_cells"]
    pushed = jnp.concatenate([cell[None], cells[:-1]])
    return {**world, "grid": G.apply_action(world["grid"], action_id),
            "recent_cells": jnp.where(is_action, pushed, cells),
            "item_actions": world["item_actions"] + is_action.astype(jnp.int32)}


def worlds_before_each_step(world: dict, actions: jax.Array) -> dict:
    """Batched start states {grid [B, ...], recent_cells [B, W], pose [B, 5], item_actions [B]} and
    gold ids [B, T] -> the state before each step, {grid [B, T, 11, 9, 11], recent_cells [B, T, W],
    pose [B, T, 5], item_actions [B, T]}."""

    def one(start, ids):
        def body(current, action_id):
            return advance_world(current, action_id), current

        return jax.lax.scan(body, start, ids)[1]

    return jax.vmap(one)(world, actions)


def recent_weights(recent_cells: jax.Array, decay: float) -> jax.Array:
    """[..., W] cells -> float32 [..., 11, 9, 11]: decay**k on the cell of the k-th newest action
    (the newest, i.e. largest, weight where a cell was hit several times)."""
    window = recent_cells.shape[-1]
    weights = jnp.power(jnp.float32(decay), jnp.arange(window, dtype=jnp.float32))
    hits = jnp.asarray(recent_cells, jnp.int32)[..., None] == jnp.arange(G.NUM_CELLS, dtype=jnp.int32)  # [..., W, C]
    dense = jnp.max(jnp.where(hits, weights[:, None], 0.0), axis=-2)
    return dense.reshape(recent_cells.shape[:-1] + G.GRID_SHAPE)


def perspective_coordinates(pose: jax.Array, scale: float) -> jax.Array:
    """[..., 5] poses (x, y, z, yaw, pitch) -> float32 [..., 11, 9, 11, 3]: each cell's center in
    the Builder's view frame, times `scale`.

    Minecraft's frame: yaw 0 looks along +z, yaw 90 along -x; positive pitch looks down. The
    frame is translated to the Builder's eye and rotated by yaw then pitch, so the third
    coordinate is the distance along the gaze (as the logs' PerspectiveCoordinates).
    """
    pose = jnp.asarray(pose, jnp.float32)
    eye = pose[..., None, :3] + jnp.array([0.0, G.EYE_HEIGHT, 0.0], jnp.float32)
    v = jnp.asarray(_CELL_CENTERS) - eye  # [..., C, 3]
    yaw = jnp.radians(pose[..., 3])[..., None]
    pitch = jnp.radians(pose[..., 4])[..., None]
    cy, sy, cp, sp = jnp.cos(yaw), jnp.sin(yaw), jnp.cos(pitch), jnp.sin(pitch)
    x = cy * v[..., 0] + sy * v[..., 2]
    z = -sy * v[..., 0] + cy * v[..., 2]
    y = v[..., 1]
    out = jnp.stack([x, cp * y + sp * z, -sp * y + cp * z], axis=-1) * jnp.float32(scale)
    return out.reshape(pose.shape[:-1] + G.GRID_SHAPE + (3,))


def world_channels(world: dict, *, recent_decay: float, perspective_scale: float,
                   use_perspective: bool = True) -> jax.Array:
    """The CNN's input channels [..., 11, 9, 11, 8 (+ 3)] of world states (leaves [..., ...]):
    one-hot colors with the empty channel (7), the recent-action weights (1), and with
    `use_perspective` the Builder-frame coordinates of each cell (3)."""
    one_hot = jax.nn.one_hot(world["grid"].astype(jnp.int32), G.NUM_COLORS + 1, dtype=jnp.float32)
    parts = [one_hot, recent_weights(world["recent_cells"], recent_decay)[..., None]]
    if use_perspective:
        parts.append(perspective_coordinates(world["pose"], perspective_scale))
    return jnp.concatenate(parts, axis=-1)
