"""Benchmark: bapjax.text.minilm.encode throughput (sentences/s) on MDC-like instructions.

From the repository root (this tree's bapjax):

    python -m benchmarks.bench_minilm [--n 1024] [--batch_size 64] [--repeats 3]

Sentences are Architect-style instructions from templates (5-40 WordPiece tokens, mostly in the
16 and 32 length buckets). The first pass compiles one program per (rows, length) bucket and is
reported separately; the figure is the best of `--repeats` timed passes over all sentences
(tokenization included). The last line is JSON.
"""

from __future__ import annotations

import argparse
import json
import time

import jax
import numpy as np

from bapjax.text import minilm

COLORS = ["red", "orange", "yellow", "green", "blue", "purple"]
PLACES = ["on top of", "to the left of", "to the right of", "in front of", "behind", "next to"]


def sentences(n: int, seed: int = 0) -> list[str]:
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        a, b = rng.choice(COLORS, 2)
        parts = [f"place {rng.integers(1, 5)} {a} blocks {rng.choice(PLACES)} the {b} one"]
        for _ in range(rng.integers(0, 4)):
            c, d = rng.choice(COLORS, 2)
            parts.append(f"then remove the {c} block {rng.choice(PLACES)} the {d} tower")
        out.append(", ".join(parts))
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, default=1024)
    parser.add_argument("--batch_size", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    texts = sentences(args.n)
    start = time.perf_counter()
    encoder = minilm.load()
    encoder.batch_size = args.batch_size
    load_s = time.perf_counter() - start
    lengths = [len(ids) for ids in encoder.token_ids(texts)]
    start = time.perf_counter()
    encoder.encode(texts)
    first_s = time.perf_counter() - start
    times = []
    for _ in range(args.repeats):
        start = time.perf_counter()
        encoder.encode(texts)
        times.append(time.perf_counter() - start)
    best = min(times)
    start = time.perf_counter()
    encoder.token_ids(texts)
    tokenize_s = time.perf_counter() - start
    print(f"load {load_s:.2f} s; first pass (compiles) {first_s:.2f} s; "
          f"tokens/sentence mean {np.mean(lengths):.1f} (max {max(lengths)})")
    print(f"encode: {args.n / best:,.0f} sentences/s (best of {args.repeats}: {best:.3f} s for "
          f"{args.n}; tokenization {tokenize_s * 1e3:.1f} ms of it), batch {args.batch_size}, "
          f"{jax.devices()[0].platform}")
    print(json.dumps({"sentences_per_s": round(args.n / best, 1), "n": args.n,
                      "batch_size": args.batch_size, "mean_tokens": round(float(np.mean(lengths)), 1),
                      "first_pass_s": round(first_s, 2), "load_s": round(load_s, 2),
                      "tokenize_ms": round(tokenize_s * 1e3, 1), "platform": jax.devices()[0].platform,
                      "device": str(jax.devices()[0].device_kind)}))


if __name__ == "__main__":
    main()
