"""One world encoding per item (the "once" architecture, `bapjax.models.once`): what changed since the start.

Re-running the world CNN after every action costs ~5.5 encodings per item at batch 32, ~95% of
a CPU step. The once architecture encodes each item's *start* world once, and each decoder step
adds to those features a cheap encoding of what its actions changed since:

  `change_channels` (per cell, 8 channels): one-hot of the color placed where the cell's color
  differs from the start (6), a removed flag where the start's block is gone or recolored (1),
  and the recency weight of the actions made within the item so far (1; `recent_decay**k` for
  the k-th newest of them, the start's own recent actions are already in the encoding);

  `ChangeConv`: a k x k x k convolution of those channels (no bias: no change adds nothing),
  computed sparsely: only cells that changed contribute, each to its k^3 neighbours, so a step
  costs a gather and a scatter of (changed cells x k^3 x features) rather than a CNN. It equals
  the dense SAME convolution of the channels (`dense_change_conv`, tested).

The world state carries `item_actions` (the actions applied since the item's start), kept by
`world_input.advance_world`, the one rule both teacher forcing and decoding apply, so both feed
identical change features for the same sequence.
"""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from bapjax.models import world_input
from bapjax.models.world_cnn import conv3d_im2col
from bapjax.world import grid as G

CHANGE_CHANNELS = G.NUM_COLORS + 2  # placed color (6), removed (1), recency within the item (1)


def change_channels(world: dict, start: dict, recent_decay: float) -> jax.Array:
    """float32 [..., 11, 9, 11, 8] of world states and their items' start states (same leading
    shape): placed color one-hot (6), removed (1), recency of the item's own actions (1)."""
    grid = world["grid"].astype(jnp.int32)
    grid0 = start["grid"].astype(jnp.int32)
    differs = grid != grid0
    placed = jax.nn.one_hot(jnp.where(differs & (grid > 0), grid - 1, -1), G.NUM_COLORS, dtype=jnp.float32)
    removed = (differs & (grid0 > 0)).astype(jnp.float32)[..., None]
    cells = world["recent_cells"]
    window = cells.shape[-1]
    new = jnp.minimum(world["item_actions"] - start["item_actions"], window)  # the item's actions in the window
    own = jnp.where(jnp.arange(window) < new[..., None], cells, -1)
    recency = world_input.recent_weights(own, recent_decay)[..., None]
    return jnp.concatenate([placed, removed, recency], axis=-1)


def neighbour_table(kernel_size: int) -> np.ndarray:
    """int32 [NUM_CELLS + 1, k^3]: the flat cell that cell u's value reaches through kernel offset o
    of a SAME convolution (`world_cnn.patches` order: out[c] takes in[c + o - r] with kernel[o],
    so u reaches c = u - (o - r)); NUM_CELLS where that is off the grid, and for the extra row
    NUM_CELLS (a dummy cell that absorbs padding)."""
    r = kernel_size // 2
    shape = np.array(G.GRID_SHAPE)
    cells = np.stack(np.unravel_index(np.arange(G.NUM_CELLS), G.GRID_SHAPE), -1)  # [C, 3]
    offsets = np.stack(np.meshgrid(*[np.arange(kernel_size) - r] * 3, indexing="ij"), -1).reshape(-1, 3)
    target = cells[:, None, :] - offsets[None]  # [C, k^3, 3]
    inside = ((target >= 0) & (target < shape)).all(-1)
    flat = np.ravel_multi_index(tuple(np.clip(target, 0, shape - 1).transpose(2, 0, 1)), G.GRID_SHAPE)
    table = np.where(inside, flat, G.NUM_CELLS)
    return np.concatenate([table, np.full((1, kernel_size ** 3), G.NUM_CELLS)]).astype(np.int32)


def sparse_change_conv(changes: jax.Array, kernel: jax.Array, max_changed: int) -> jax.Array:
    """SAME convolution [N, 11, 9, 11, C] * [k, k, k, C, F] -> [N, 11, 9, 11, F] of change channels
    that are zero but at <= `max_changed` cells per row (cells beyond that many are dropped:
    the caller bounds it by the actions an item can have made): each changed cell scatters its
    kernel-weighted channels to its k^3 neighbours."""
    n, c, k, f = changes.shape[0], changes.shape[-1], kernel.shape[0], kernel.shape[-1]
    flat = changes.reshape(n, G.NUM_CELLS, c)
    size = max(1, min(int(max_changed), G.NUM_CELLS))
    idx = jax.vmap(lambda row: jnp.nonzero(jnp.any(row != 0, -1), size=size, fill_value=G.NUM_CELLS)[0])(flat)
    values = jnp.take_along_axis(jnp.pad(flat, ((0, 0), (0, 1), (0, 0))), idx[..., None], axis=1)  # [N, A, C]
    contrib = jnp.einsum("nac,ocf->naof", values, kernel.reshape(k ** 3, c, f))  # [N, A, k^3, F]
    target = jnp.asarray(neighbour_table(k))[idx]  # [N, A, k^3]
    rows = jnp.arange(n)[:, None, None]
    out = jnp.zeros((n, G.NUM_CELLS + 1, f), contrib.dtype).at[rows, target].add(contrib)
    return out[:, :G.NUM_CELLS].reshape((n,) + G.GRID_SHAPE + (f,))


def dense_change_conv(changes: jax.Array, kernel: jax.Array) -> jax.Array:
    """The same convolution over every cell (`world_cnn.conv3d_im2col`): the slow-path reference."""
    return conv3d_im2col(changes, kernel)


class ChangeConv(nn.Module):
    """Change channels [N, 11, 9, 11, C] -> features [N, 11, 9, 11, F] to add to the start
    world's encoding: `sparse_change_conv` with a learned kernel [k, k, k, C, F], no bias."""

    features: int
    kernel_size: int = 3
    dtype: jnp.dtype = jnp.float32  # the compute dtype; the kernel stays float32

    @nn.compact
    def __call__(self, changes: jax.Array, max_changed: int, dense: bool = False) -> jax.Array:
        k = self.kernel_size
        if k < 1 or k % 2 == 0:
            raise ValueError(f"config.model.world.change_kernel must be an odd number >= 1, got {k}")
        kernel = self.param("kernel", nn.initializers.lecun_normal(), (k, k, k, changes.shape[-1], self.features))
        changes, kernel = changes.astype(self.dtype), kernel.astype(self.dtype)
        if dense:
            return dense_change_conv(changes, kernel)
        return sparse_change_conv(changes, kernel, max_changed)
