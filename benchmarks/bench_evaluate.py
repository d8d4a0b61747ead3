"""Benchmark: the batched v2 evaluator against the plain-Python oracle, and its cost growth.

From the repository root (this tree's bapjax):

    python -m benchmarks.bench_evaluate [--corpus ../shared/mdc] [--sizes 1000,10000,100000]

1. The MDC test split (1616 items) with perturbed predictions (shifted / turned copies of the
   reference, color swaps, dropped and extra actions; infeasible steps dropped): the full
   evaluation (``evaluate_predictions``: feasibility, net sets, alignment search, tables) timed
   with compilation (first call in a fresh process, no persistent cache) and after it (best and
   median of repeats), against the plain-Python reference ``bapjax.evaluation.metrics_reference`` on the same
   items in the same run (best of ``--oracle_repeats``). The two reports must agree to 1e-9.
   The ratio uses best times on both sides: on a shared machine the best of several runs is
   the least disturbed one.
2. The batched evaluator on synthetic item sets sampled from the test items (each copy with
   its own perturbation) of growing size, to show how the cost grows.
The last printed line is JSON with every figure.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]

from bapjax import paths
from bapjax.evaluation import evaluator, metrics
from bapjax.evaluation.metrics_reference import tables as oracle_tables
from bapjax.evaluation.metrics_reference import tables_agree
from bapjax.evaluation.trivial import perturb_actions as perturb
from bapjax.world import grid


def timed(fn, repeats=1):
    times, result = [], None
    for _ in range(repeats):
        start = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - start)
    return result, times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", default=paths.MDC, help="the MDC (default: found by bapjax.paths.mdc_path)")
    parser.add_argument("--sizes", default="1000,10000,100000")
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--oracle_repeats", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    from bapjax.corpus import mdc

    items = mdc.load_corpus(args.corpus).split("test")
    rng = np.random.default_rng(args.seed)
    predictions = {item.item_id: perturb(rng, item.reference_actions) for item in items}
    out = {"items": len(items), "device": None}
    import jax

    out["device"] = str(jax.devices()[0])

    run = lambda: evaluator.evaluate_predictions(items, predictions, drop_infeasible=True)  # noqa: E731
    report, (first,) = timed(run)
    cases = [(grid.as_structure(i.prev_structure), predictions[i.item_id], list(i.reference_actions),
              i.is_empty_board, i.is_empty_board) for i in items]
    # Batched repeats before, between and after the oracle runs: on a shared machine the load
    # changes over the oracle's tens of seconds, and best-of on both sides over the same window
    # compares the least disturbed runs.
    batched_times, oracle_times = [], []
    for round_ in range(args.oracle_repeats):
        batched_times += timed(run, args.repeats)[1]
        (want, _), (oracle_once,) = timed(lambda: oracle_tables(cases))
        oracle_times.append(oracle_once)
        if not tables_agree(report, want):
            raise SystemExit("the batched evaluator and bapjax.evaluation.metrics_reference disagree")
    batched_times += timed(run, args.repeats)[1]
    out["batched_first_call_s"] = first
    out["batched_s"] = min(batched_times)
    out["batched_median_s"] = statistics.median(batched_times)
    oracle_s = out["oracle_s"] = min(oracle_times)
    out["oracle_median_s"] = statistics.median(oracle_times)
    print(f"batched evaluator, {len(items)} items: {first:.3f} s with compilation, "
          f"{out['batched_s']:.3f} s after (best of {len(batched_times)}; median "
          f"{out['batched_median_s']:.3f} s)", flush=True)
    out["speedup_after_compilation"] = oracle_s / out["batched_s"]
    out["speedup_median"] = out["oracle_median_s"] / out["batched_median_s"]
    out["speedup_with_compilation"] = oracle_s / first
    print(f"plain-Python oracle: {oracle_s:.2f} s (best of {len(oracle_times)}); reports agree to "
          f"1e-9; speed-up {out['speedup_after_compilation']:.0f}x after compilation (medians: "
          f"{out['speedup_median']:.0f}x), {out['speedup_with_compilation']:.1f}x including it",
          flush=True)

    growth = []
    for size in (int(s) for s in args.sizes.split(",") if s):
        picks = rng.integers(len(items), size=size)
        synthetic, synthetic_predictions = [], {}
        for n, pick in enumerate(picks):
            item = dataclasses.replace(items[pick], item_id=f"{items[pick].item_id}#{n}")
            synthetic.append(item)
            synthetic_predictions[item.item_id] = perturb(rng, item.reference_actions)
        fn = lambda: evaluator.evaluate_items(synthetic, synthetic_predictions, drop_infeasible=True)  # noqa: E731
        _, (first_s,) = timed(fn)
        _, times = timed(fn, 3)
        # the device part alone: the same sets through score_items
        _, _, details = evaluator.evaluate_items(synthetic, synthetic_predictions, drop_infeasible=True)
        _, device_times = timed(lambda: metrics.score_items(details["pred_sets"], details["ref_sets"]), 2)
        row = {"items": size, "first_s": first_s, "s": min(times), "score_items_s": min(device_times),
               "us_per_item": 1e6 * min(times) / size}
        growth.append(row)
        print(f"{size:>7} items: {row['s']:.2f} s full evaluation ({row['us_per_item']:.1f} us/item; "
              f"first call {first_s:.2f} s), of which alignment + counts (score_items) "
              f"{row['score_items_s']:.2f} s", flush=True)
    out["growth"] = growth
    print(json.dumps(out))


if __name__ == "__main__":
    main()
