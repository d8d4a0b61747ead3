"""Benchmark: synthetic corpus generation speed per simulator, 1 process vs 2 (or more).

From the repository root (this tree's bapjax):

    python -m benchmarks.bench_generate [--items 3000] [--processes 1 2] [--full]

For each simulator (r, bs, ss) and each process count, generates ``--items`` training items
(plus 10% val and test) into a temporary directory and prints items/s, with the ratio of each
process count against the 1-process baseline measured in the same run.  ``--full`` then times
the paper's Table 3 sizes (train + val + test) of all three data sets with every core, the
target being under 5 minutes in all.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

from bapjax.sim import generate


def run(dataset: str, items: int, processes: int, out: Path, seed: int = 0) -> tuple[float, int]:
    small = max(1, items // 10)
    start = time.perf_counter()
    stats = generate.generate_corpus(dataset, out, seed=seed, train_items=items, val_items=small,
                                     test_items=small, processes=processes, progress=False, overwrite=True)
    return time.perf_counter() - start, stats["items"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--items", type=int, default=3000, help="training items per run")
    parser.add_argument("--processes", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--datasets", nargs="+", default=["r", "bs", "ss"])
    parser.add_argument("--full", action="store_true", help="also time all three Table 3 corpora")
    args = parser.parse_args()
    print(f"machine: {os.cpu_count()} cores")
    with tempfile.TemporaryDirectory() as tmp:
        for dataset in args.datasets:
            baseline = None
            for processes in args.processes:
                seconds, items = run(dataset, args.items, processes, Path(tmp) / f"{dataset}-{processes}")
                rate = items / seconds
                baseline = baseline or rate
                print(f"  {dataset:>2}  {processes} process(es): {items:6d} items in {seconds:6.2f} s = "
                      f"{rate:7.1f} items/s  ({rate / baseline:.2f}x the 1-process rate)", flush=True)
        if args.full:
            total_start = time.perf_counter()
            total_items = 0
            for dataset in ("bs", "ss", "r"):
                start = time.perf_counter()
                stats = generate.generate_corpus(dataset, Path(tmp) / f"full-{dataset}", seed=0,
                                                 progress=False, overwrite=True)
                seconds = time.perf_counter() - start
                total_items += stats["items"]
                print(f"  full {dataset:>2}: {stats['items']} items (Table 3 train+val+test) in {seconds:.1f} s "
                      f"with {stats['processes']} processes", flush=True)
            total = time.perf_counter() - total_start
            print(f"  all three Table 3 corpora: {total_items} items in {total:.1f} s "
                  f"({'under' if total < 300 else 'OVER'} the 5-minute target)")


if __name__ == "__main__":
    main()
