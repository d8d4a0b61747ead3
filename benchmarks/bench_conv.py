"""The world CNN's convolution computed seven ways (`world_cnn`'s im2col, im2col with its patch
matrix built one slice per offset (the earlier way), and five without the full patch matrix,
XLA's own convolution among them), timed against each other as a training step runs the CNN:
`--layers` SAME 3x3x3 layers with ReLU over `--rows` packed worlds (11 x 9 x 11 cells), forward
and backward, in rematerialized chunks of `--chunk` rows
(`config.model.world.encode_chunk`; 0: all rows at once).

    python benchmarks/bench_conv.py [--rows 192] [--chunk 4] [--features 16] [--in_channels 10]
                                    [--rounds 3] [--impls im2col,shift_in,...] [--out FILE]

Why: `profile_train.py` shows a layer's im2col (forming the 27 x C patch matrix) taking 11x its
GEMM, so the ways below that never build that matrix were candidates for `world_cnn`.
All compute the same function; each is checked against im2col before timing (max abs difference
over the loss and gradients, relative to their largest value; over 1e-4 stops the script).
`--chunk 2,4` times every implementation at each chunk size. Everything is timed alternately,
round after round, in this one process (best of each kept); ratios are im2col's time (at the
first chunk size) over each one's: > 1 is faster. The last line is JSON
{"rows", ..., "<impl>@<chunk>_ms", "<impl>@<chunk>_vs_im2col", "<impl>@<chunk>_max_rel_diff"};
`--out` also writes it, with the command and the printed lines.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

from bapjax.models import world_cnn


def conv3d_shift_in(x: jax.Array, kernel: jax.Array) -> jax.Array:
    """The same convolution as k^3 GEMMs, one per offset: the sum of (x shifted by the offset) @
    kernel[offset]; no patch matrix, but k^3 GEMMs with K = C."""
    k = kernel.shape[0]
    r = k // 2
    p = jnp.pad(x, ((0, 0), (r, r), (r, r), (r, r), (0, 0)))
    nx, ny, nz = x.shape[1:4]
    out = None
    for i in range(k):
        for j in range(k):
            for l in range(k):
                term = p[:, i:i + nx, j:j + ny, l:l + nz] @ kernel[i, j, l]
                out = term if out is None else out + term
    return out


def conv3d_shift_out(x: jax.Array, kernel: jax.Array) -> jax.Array:
    """The same convolution as one GEMM x @ [C, k^3 * F] (every offset's contribution of every cell),
    then the sum over offsets of that offset's F columns shifted into place."""
    k, c, f = kernel.shape[0], kernel.shape[3], kernel.shape[4]
    r = k // 2
    y = x @ jnp.moveaxis(kernel, 3, 0).reshape(c, k ** 3 * f)
    p = jnp.pad(y, ((0, 0), (r, r), (r, r), (r, r), (0, 0)))
    nx, ny, nz = x.shape[1:4]
    out = None
    for o, (i, j, l) in enumerate((i, j, l) for i in range(k) for j in range(k) for l in range(k)):
        term = p[:, i:i + nx, j:j + ny, l:l + nz, o * f:(o + 1) * f]
        out = term if out is None else out + term
    return out


def conv3d_zpatch_out(x: jax.Array, kernel: jax.Array) -> jax.Array:
    """The same convolution with a patch matrix along z only ([.., k * C]) times [k * C, k^2 * F]
    (one GEMM), then the sum over the k^2 (x, y) offsets of their F columns shifted into place."""
    k, c, f = kernel.shape[0], kernel.shape[3], kernel.shape[4]
    r = k // 2
    nx, ny, nz = x.shape[1:4]
    pz = jnp.pad(x, ((0, 0), (0, 0), (0, 0), (r, r), (0, 0)))
    zpatch = jnp.concatenate([pz[:, :, :, l:l + nz] for l in range(k)], axis=-1)  # [N, X, Y, Z, k*C]
    w = jnp.transpose(kernel, (2, 3, 0, 1, 4)).reshape(k * c, k * k * f)  # (l, c) x (i, j, f)
    y = zpatch @ w
    p = jnp.pad(y, ((0, 0), (r, r), (r, r), (0, 0), (0, 0)))
    out = None
    for o, (i, j) in enumerate((i, j) for i in range(k) for j in range(k)):
        term = p[:, i:i + nx, j:j + ny, :, o * f:(o + 1) * f]
        out = term if out is None else out + term
    return out


def conv3d_zband_out(x: jax.Array, kernel: jax.Array) -> jax.Array:
    """The same convolution with each (x, y) column of Z cells as one row of Z * C values: one GEMM
    with the banded [Z * C, k^2 * Z * F] matrix that applies every (x, y) offset's z-convolution,
    then the sum over the k^2 offsets of their Z * F columns shifted into place. k/Z of the band's
    FLOPs multiply zeros; in exchange nothing the size of a patch matrix is built."""
    k, c, f = kernel.shape[0], kernel.shape[3], kernel.shape[4]
    r = k // 2
    n, nx, ny, nz = x.shape[:4]
    # band[l, a, b] = 1 where input z a feeds output z b through kernel z-offset l (a = b + l - r)
    band = np.zeros((k, nz, nz), np.float32)
    for l in range(k):
        for b in range(nz):
            if 0 <= b + l - r < nz:
                band[l, b + l - r, b] = 1.0
    t = jnp.einsum("lab,ijlcf->acijbf", band.astype(kernel.dtype), kernel).reshape(nz * c, k * k * nz * f)
    y = x.reshape(n, nx, ny, nz * c) @ t
    p = jnp.pad(y, ((0, 0), (r, r), (r, r), (0, 0)))
    out = None
    for o, (i, j) in enumerate((i, j) for i in range(k) for j in range(k)):
        term = p[:, i:i + nx, j:j + ny, o * nz * f:(o + 1) * nz * f]
        out = term if out is None else out + term
    return out.reshape(n, nx, ny, nz, f)


def conv3d_xla(x: jax.Array, kernel: jax.Array) -> jax.Array:
    """XLA's own 3D convolution (what `nn.Conv` and `conv_impl="xla"` run)."""
    return jax.lax.conv_general_dilated(x, kernel, (1, 1, 1), "SAME",
                                        dimension_numbers=("NDHWC", "DHWIO", "NDHWC"))


def conv3d_im2col_offsets(x: jax.Array, kernel: jax.Array) -> jax.Array:
    """im2col with the patch matrix built as one slice per offset (`world_cnn.patches_reference`,
    what `world_cnn` ran before it built the same matrix one axis at a time), the same GEMM."""
    return world_cnn.patch_gemm(world_cnn.patches_reference(x, kernel.shape[0]), kernel)


CONV_IMPLS = {"im2col": world_cnn.conv3d_im2col, "im2col_offsets": conv3d_im2col_offsets,
              "shift_in": conv3d_shift_in, "shift_out": conv3d_shift_out,
              "zpatch_out": conv3d_zpatch_out, "zband_out": conv3d_zband_out, "xla": conv3d_xla}


def cnn_loss(conv, chunk: int):
    """Sum of the CNN's output over rows, in rematerialized chunks as `BuilderModel.world_logits`."""
    def cnn(kernels, x):
        for kernel in kernels:
            x = jax.nn.relu(conv(x, kernel))
        return x.sum()

    def loss(kernels, x):
        if not chunk or x.shape[0] <= chunk:
            return cnn(kernels, x)
        xs = x.reshape((-1, chunk) + x.shape[1:])
        body = jax.checkpoint(lambda total, xc: (total + cnn(kernels, xc), None), prevent_cse=False)
        return jax.lax.scan(body, jnp.zeros((), x.dtype), xs)[0]

    return jax.jit(jax.value_and_grad(loss, argnums=(0, 1)))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=192, help="packed worlds per step (configs/cpu.py: ~192)")
    parser.add_argument("--chunk", default="4", help="rows per rematerialized chunk, comma-separated (0: all at once)")
    parser.add_argument("--features", type=int, default=16)
    parser.add_argument("--in_channels", type=int, default=10)
    parser.add_argument("--layers", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--impls", default=",".join(CONV_IMPLS))
    parser.add_argument("--out", default="", help="also write the results here (JSON)")
    args = parser.parse_args()
    try:
        chunks = [int(c) for c in args.chunk.split(",")]
    except ValueError:
        parser.error(f"--chunk {args.chunk!r}: expected comma-separated integers")
    for chunk in chunks:
        if chunk < 0 or (chunk and args.rows % chunk):
            parser.error(f"--chunk {chunk}: must be 0 or divide --rows {args.rows}")
    unknown = [name for name in args.impls.split(",") if name not in CONV_IMPLS]
    if unknown:
        parser.error(f"--impls: unknown {', '.join(unknown)} (known: {', '.join(CONV_IMPLS)})")

    rng = np.random.default_rng(0)
    x = jnp.asarray(rng.normal(size=(args.rows, 11, 9, 11, args.in_channels)).astype(np.float32))
    shapes = [(3, 3, 3, args.in_channels if i == 0 else args.features, args.features) for i in range(args.layers)]
    kernels = [jnp.asarray(rng.normal(size=s).astype(np.float32) / np.sqrt(27 * s[3])) for s in shapes]

    fns = {f"{name}@{chunk}": cnn_loss(CONV_IMPLS[name], chunk)
           for chunk in chunks for name in args.impls.split(",")}
    reference = fns.get(f"im2col@{chunks[0]}") or cnn_loss(world_cnn.conv3d_im2col, chunks[0])
    want = jax.tree.leaves(jax.block_until_ready(reference(kernels, x)))
    scale = max(float(jnp.abs(w).max()) for w in want)
    out = {"rows": args.rows, "chunks": chunks, "features": args.features, "in_channels": args.in_channels,
           "layers": args.layers, "rounds": args.rounds}
    for key, fn in fns.items():
        got = jax.tree.leaves(jax.block_until_ready(fn(kernels, x)))  # also compiles
        out[f"{key}_max_rel_diff"] = max(float(jnp.abs(g - w).max()) for g, w in zip(got, want)) / scale
        if out[f"{key}_max_rel_diff"] > 1e-4:
            sys.exit(f"bench_conv: {key} differs from im2col by {out[f'{key}_max_rel_diff']:.1e} (relative)")
    best = {key: float("inf") for key in fns}
    for _ in range(args.rounds):
        for key, fn in fns.items():
            start = time.perf_counter()
            jax.block_until_ready(fn(kernels, x))
            best[key] = min(best[key], time.perf_counter() - start)
    baseline = best.get(f"im2col@{chunks[0]}")
    printed = []
    for key, seconds in best.items():
        out[f"{key}_ms"] = round(1e3 * seconds, 1)
        line = f"{key:>14}: {1e3 * seconds:8.1f} ms fwd+bwd"
        if baseline:
            out[f"{key}_vs_im2col"] = round(baseline / seconds, 2)
            line += f"  {baseline / seconds:5.2f}x im2col@{chunks[0]}"
        line += f"  max rel diff {out[f'{key}_max_rel_diff']:.1e}"
        printed.append(line)
        print(line)
    print(json.dumps(out))
    if args.out:
        record = {"command": "python benchmarks/bench_conv.py " + " ".join(sys.argv[1:]), "printed": printed, **out}
        Path(args.out).write_text(json.dumps(record, indent=1) + "\n")


if __name__ == "__main__":
    main()
