"""3D CNN over the voxel world (the baseline's world-state encoder).

Input: per-cell channels from `bapjax.models.world_input.world_channels`. Output: per-cell features.
"""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp


def patches(x: jax.Array, k: int) -> jax.Array:
    """[N, X, Y, Z, C] -> [N, X, Y, Z, k^3 * C]: each cell's k x k x k neighbourhood (zero-padded),
    offsets in (dx, dy, dz) row-major order, channels fastest.

    Built one axis at a time (`yz_patches`, then the k x-shifts side by side): 3k slices instead
    of k^3, the same matrix."""
    r = k // 2
    p = jnp.pad(x, ((0, 0), (r, r), (r, r), (r, r), (0, 0)))
    p = yz_patches(p, k, x.shape[2], x.shape[3])
    return jnp.concatenate([p[:, i:i + x.shape[1]] for i in range(k)], axis=-1)


def yz_patches(padded: jax.Array, k: int, ny: int, nz: int) -> jax.Array:
    """[N, X', Y + 2r, Z + 2r, C] (padded in y and z) -> [N, X', Y, Z, k^2 * C]: the k z-shifts side
    by side, then k y-shifts of that (offsets (dy, dz) row-major, channels fastest)."""
    p = jnp.concatenate([padded[:, :, :, l:l + nz] for l in range(k)], axis=-1)
    return jnp.concatenate([p[:, :, j:j + ny] for j in range(k)], axis=-1)


def patches_reference(x: jax.Array, k: int) -> jax.Array:
    """`patches` as k^3 slices of the padded input, one per offset (the plain statement)."""
    r = k // 2
    p = jnp.pad(x, ((0, 0), (r, r), (r, r), (r, r), (0, 0)))
    nx, ny, nz = x.shape[1:4]
    return jnp.concatenate([p[:, i:i + nx, j:j + ny, l:l + nz] for i in range(k) for j in range(k)
                            for l in range(k)], axis=-1)


def conv3d_im2col(x: jax.Array, kernel: jax.Array) -> jax.Array:
    """SAME 3D convolution [N, X, Y, Z, C] * [k, k, k, C, F] -> [N, X, Y, Z, F] (no bias), the same
    function as one GEMM of the k^3 * C patch matrix (`patches` @ kernel) with the sum over the k
    x-offsets taken after the GEMM instead of inside it: the patches over (y, z) only of the input
    padded along x, [N * (X + 2r) * Y * Z, k^2 * C], times the kernel's k x-slices side by side,
    [k^2 * C, k * F], then out[x] = sum over i of that product's slice i at row x + i. The patch
    matrix is k times smaller, and at these widths its copies cost more than the GEMM: the CPU
    frame model's train step ran 1.30x the items/s of the one-GEMM form (one process, both steps
    alternately, 2-core host). The result differs from the one-GEMM form by float rounding only
    (each output adds the same k^3 * C products, grouped by x-offset)."""
    k, c, f = kernel.shape[0], kernel.shape[3], kernel.shape[-1]
    r = k // 2
    nx, ny, nz = x.shape[1:4]
    p = yz_patches(jnp.pad(x, ((0, 0), (r, r), (r, r), (r, r), (0, 0))), k, ny, nz)  # [N, X + 2r, Y, Z, k^2 C]
    w = kernel.reshape(k, k * k * c, f).transpose(1, 0, 2).reshape(k * k * c, k * f)
    per_offset = (p.reshape(-1, k * k * c) @ w).reshape(p.shape[:4] + (k, f))
    out = per_offset[:, :nx, :, :, 0]
    for i in range(1, k):
        out = out + per_offset[:, i:i + nx, :, :, i]
    return out


class Conv3DIm2Col(nn.Module):
    """A SAME 3D convolution computed as patches @ kernel: the same function as `nn.Conv`
    (kernel [k, k, k, C, F] flattened); XLA's 3D convolution measured ~10x slower on the 2-core CPU."""

    features: int
    kernel_size: int = 3
    dtype: jnp.dtype = jnp.float32

    @nn.compact
    def __call__(self, x):
        k, cin = self.kernel_size, x.shape[-1]
        kernel = self.param("kernel", nn.initializers.lecun_normal(), (k, k, k, cin, self.features))
        bias = self.param("bias", nn.initializers.zeros, (self.features,))
        out = conv3d_im2col(x.astype(self.dtype), kernel.astype(self.dtype))
        # the bias added in its own dtype (float32; a no-op cast when the compute dtype is too): its gradient,
        # a sum over every cell of the batch, then adds float32 terms (in bfloat16 that sum lost most of its
        # digits: tests/test_precision.py)
        return (out.astype(bias.dtype) + bias).astype(self.dtype)


class WorldCNN(nn.Module):
    """`num_layers` SAME-padded 3D convolutions with ReLU; keeps the 11x9x11 grid resolution.

    `impl`: "im2col" (patches @ kernel; the faster one on CPU) or "xla" (`nn.Conv`; which is faster
    on GPU/TPU has not been measured).
    Both hold a kernel [k, k, k, C, F] and a bias per layer, so checkpoints are interchangeable.

    `film`: FiLM (Perez et al. 2018; BabyAI's strongest models) scales and shifts every layer's
    pre-activation per feature by the `condition` [N, D], `conv * (1 + gamma) + beta` with
    (gamma, beta) a Dense of the condition (zero-initialized, so training starts from the
    unconditioned CNN). The builder passes its decoder state, so what the CNN computes at each
    cell depends on the instruction and the actions so far; without `film` the condition is not
    read and no FiLM parameters exist (the paper's models keep their parameter trees).
    """

    features: int = 300
    num_layers: int = 3
    kernel_size: int = 3
    impl: str = "im2col"
    film: bool = False
    dtype: jnp.dtype = jnp.float32

    @nn.compact
    def __call__(self, channels: jax.Array, condition: jax.Array | None = None) -> jax.Array:
        x = channels.astype(self.dtype)
        k = self.kernel_size
        for layer in range(self.num_layers):
            if self.impl == "im2col":
                x = Conv3DIm2Col(self.features, k, self.dtype, name=f"conv{layer}")(x)
            elif self.impl == "xla":
                x = nn.Conv(self.features, (k, k, k), padding="SAME", dtype=self.dtype, name=f"conv{layer}")(x)
            else:
                raise ValueError(f"config.model.world.conv_impl must be 'im2col' or 'xla', got {self.impl!r}")
            if self.film:
                film = nn.Dense(2 * self.features, kernel_init=nn.initializers.zeros, dtype=self.dtype,
                                name=f"film{layer}")(condition)
                gamma, beta = jnp.split(film.astype(self.dtype)[:, None, None, None, :], 2, axis=-1)
                x = x * (1 + gamma) + beta
            x = nn.relu(x)
        return x
