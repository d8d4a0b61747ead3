"""3D CNN over the voxel world (the baseline's world-state encoder).

Input channels per cell: one-hot colors with the empty channel (7), the recent-action weighting
(1) and optionally the cell's coordinates in the Builder's frame (3). Output: per-cell features.
"""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp

from bapjax import grid as G


def world_channels(grids: jax.Array, recent: jax.Array, perspective: jax.Array | None) -> jax.Array:
    """Stack the CNN's input channels: [..., 11, 9, 11] int grid -> [..., 11, 9, 11, 8 or 11]."""
    one_hot = jax.nn.one_hot(grids.astype(jnp.int32), G.NUM_COLORS + 1, dtype=jnp.float32)
    parts = [one_hot, recent[..., None].astype(jnp.float32)]
    if perspective is not None:
        parts.append(perspective.astype(jnp.float32))
    return jnp.concatenate(parts, axis=-1)


class WorldCNN(nn.Module):
    """`num_layers` SAME-padded 3D convolutions with ReLU; keeps the 11x9x11 grid resolution."""

    features: int = 300
    num_layers: int = 3
    kernel_size: int = 3
    dtype: jnp.dtype = jnp.float32

    @nn.compact
    def __call__(self, channels: jax.Array) -> jax.Array:
        x = channels.astype(self.dtype)
        k = self.kernel_size
        for layer in range(self.num_layers):
            x = nn.Conv(self.features, (k, k, k), padding="SAME", dtype=self.dtype, name=f"conv{layer}")(x)
            x = nn.relu(x)
        return x
