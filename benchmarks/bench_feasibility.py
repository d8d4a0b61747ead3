"""Benchmark: batched jitted feasibility mask vs the plain-Python reference, and corpus load times.

From the repository root (this tree's bapjax; the plain-Python reference and the random structures
are the tests', `tests.test_grid`):

    python -m benchmarks.bench_feasibility [--grids 2048] [--reference_grids 100] [--corpus ../shared/mdc]

Prints grids/s for both in the same run and their ratio, then a cold (reparse every game, no
cache) and a cached load of the whole MDC.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time

import jax
import numpy as np

from bapjax import paths
from bapjax.corpus import mdc
from bapjax.world import grid
from tests.test_grid import oracle_mask, random_structure


def bench_mask(num_grids: int, num_reference: int, batch: int) -> None:
    rng = np.random.default_rng(0)
    structures = [random_structure(rng, int(n), gravity=True) for n in rng.integers(0, 120, num_grids)]
    dense = grid.structures_to_grids([[(*c, v) for c, v in s.items()] for s in structures])
    batches = [jax.device_put(dense[i:i + batch]) for i in range(0, num_grids, batch)]

    start = time.perf_counter()
    grid.feasible_mask(batches[0]).block_until_ready()
    compile_s = time.perf_counter() - start
    best = float("inf")
    for _ in range(3):
        start = time.perf_counter()
        for b in batches:
            out = grid.feasible_mask(b)
        out.block_until_ready()
        best = min(best, time.perf_counter() - start)
    jax_rate = num_grids / best

    start = time.perf_counter()
    for s in structures[:num_reference]:
        oracle_mask(s)
    ref_rate = num_reference / (time.perf_counter() - start)
    print(f"feasibility mask over all 7624 actions, batch {batch}, {jax.devices()[0].platform}:")
    print(f"  jitted + vmapped : {jax_rate:12,.0f} grids/s  (first call incl. compile {compile_s:.2f} s)")
    print(f"  plain Python     : {ref_rate:12,.1f} grids/s  ({num_reference} grids)")
    print(f"  ratio            : {jax_rate / ref_rate:12,.0f}x")


def bench_corpus(corpus: str) -> None:
    with tempfile.TemporaryDirectory() as cache:
        os.environ["BAPJAX_CACHE"] = cache
        start = time.perf_counter()
        loaded = mdc.load_corpus(corpus)  # unpack archive + parse + itemize + write cache
        cold = time.perf_counter() - start
        start = time.perf_counter()
        mdc.load_corpus(corpus, use_cache=False)  # parse + itemize (archive already unpacked)
        parse = time.perf_counter() - start
        start = time.perf_counter()
        again = mdc.load_corpus(corpus)
        cached = time.perf_counter() - start
    n = sum(len(v) for v in loaded.items.values())
    assert n == sum(len(v) for v in again.items.values())
    print(f"corpus load of {n} items:")
    print(f"  cold (unpack + parse + itemize): {cold:6.2f} s")
    print(f"  parse + itemize (no cache)     : {parse:6.2f} s")
    print(f"  cached                         : {cached:6.2f} s  ({parse / cached:.1f}x faster than reparsing)")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--grids", type=int, default=2048)
    parser.add_argument("--reference_grids", type=int, default=100)
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--corpus", default=paths.MDC, help="the MDC (default: found by bapjax.paths.mdc_path)")
    args = parser.parse_args()
    bench_mask(args.grids, args.reference_grids, args.batch)
    bench_corpus(args.corpus)


if __name__ == "__main__":
    main()
