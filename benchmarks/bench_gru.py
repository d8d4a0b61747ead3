"""The text encoder's GRU, forward and backward, two ways: JAX's derivative of `nn.RNN(nn.GRUCell)`
(the straightforward way) and `bapjax.models.gru.gru_states` (the hand-written
backward pass the text encoder uses now), timed alternately in this one process, best of each kept.

From the repository root (this tree's bapjax):

    python -m benchmarks.bench_gru [--batch 32] [--tokens 256] [--hidden 128] [--rounds 3] [--out FILE]

Both compute the same function: before timing, the states and gradients of a fixed loss are
compared (the largest difference relative to the largest value; over 1e-4 stops the script).
The ratio is the reference's time over gru_states' (> 1: faster). The last line is JSON
{"batch", "tokens", "hidden", "flax_fwd_ms", "gru_states_fwd_ms", "flax_fwd_bwd_ms",
"gru_states_fwd_bwd_ms", "fwd_bwd_ratio", "max_rel_diff"}; `--out` also writes it with the command.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import flax.linen as nn
import jax
import jax.numpy as jnp

from bapjax.models import gru

EMBEDDING = 50  # GloVe 6B 50d, the text encoder's input


def timed_ms(fn, *args, repeats: int = 10) -> float:
    """Best mean wall time of `repeats` calls over 3 tries, in ms (compiled before)."""
    jax.block_until_ready(fn(*args))
    best = float("inf")
    for _ in range(3):
        start = time.perf_counter()
        for _ in range(repeats):
            out = fn(*args)
        jax.block_until_ready(out)
        best = min(best, (time.perf_counter() - start) / repeats)
    return best * 1e3


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--tokens", type=int, default=256)
    parser.add_argument("--hidden", type=int, default=128, help="configs/common.py's text.hidden")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--out", help="also write the JSON (with the command) here")
    args = parser.parse_args(argv)

    k_x, k_p, k_r = jax.random.split(jax.random.key(0), 3)
    inputs = jax.random.normal(k_x, (args.batch, args.tokens, EMBEDDING))
    params = nn.GRUCell(args.hidden).init(k_p, jnp.zeros((args.batch, args.hidden)), inputs[:, 0])
    readout = jax.random.normal(k_r, (args.batch, args.tokens, args.hidden))
    flax_rnn = nn.RNN(nn.GRUCell(args.hidden))
    ways = {
        "flax": lambda p, x: flax_rnn.apply({"params": {"cell": p["params"]}}, x),
        "gru_states": lambda p, x: gru.gru_states(gru.GRUWeights(args.hidden).apply(p, x.shape[-1]), x),
    }
    forward = {name: jax.jit(fn) for name, fn in ways.items()}
    backward = {name: jax.jit(jax.value_and_grad(lambda p, x, fn=fn: (jnp.tanh(fn(p, x)) * readout).sum(),
                                                 argnums=(0, 1)))
                for name, fn in ways.items()}
    want = (forward["flax"](params, inputs), backward["flax"](params, inputs))
    got = (forward["gru_states"](params, inputs), backward["gru_states"](params, inputs))
    scale = max(float(jnp.abs(a).max()) for a in jax.tree_util.tree_leaves(want))
    diff = max(float(jnp.abs(a - b).max()) for a, b in zip(jax.tree_util.tree_leaves(want),
                                                            jax.tree_util.tree_leaves(got))) / scale
    if diff > 1e-4:
        raise SystemExit(f"error: gru_states differs from nn.RNN(nn.GRUCell) by {diff:.2e} (relative)")

    best = {}
    for round_index in range(args.rounds):
        for name in ways:
            for kind, fns in (("fwd", forward), ("fwd_bwd", backward)):
                key = f"{name}_{kind}_ms"
                best[key] = min(best.get(key, float("inf")), timed_ms(fns[name], params, inputs))
        print(f"round {round_index + 1}/{args.rounds}: " + ", ".join(f"{k} {v:.1f}" for k, v in best.items()),
              flush=True)
    result = {"batch": args.batch, "tokens": args.tokens, "hidden": args.hidden,
              **{k: round(v, 2) for k, v in best.items()},
              "fwd_bwd_ratio": round(best["flax_fwd_bwd_ms"] / best["gru_states_fwd_bwd_ms"], 3),
              "max_rel_diff": float(f"{diff:.2e}")}
    print(f"forward+backward: nn.RNN(nn.GRUCell) {best['flax_fwd_bwd_ms']:.1f} ms, gru_states "
          f"{best['gru_states_fwd_bwd_ms']:.1f} ms: {result['fwd_bwd_ratio']:.2f}x")
    print(json.dumps(result))
    if args.out:
        Path(args.out).write_text(json.dumps({"command": "python -m benchmarks.bench_gru " + " ".join(
            argv if argv is not None else sys.argv[1:]), **result}, indent=1) + "\n")
    return result


if __name__ == "__main__":
    main()
