"""Benchmark: the HTML report of a whole split (bapjax.report): page weight and open time in Chromium.

    python benchmarks/bench_report.py [--corpus ../shared/mdc] [--split test] [--repeats 5] [--out DIR]

Predictions: the perturbed predictor (seed 0), as `python -m bapjax.predictors perturbed ... --seed 0`
writes them. Open time is what the page itself measures (`performance.now()` when the table is
built and the first item's 3D view is drawn, from navigation start) in headless Chromium, which
draws WebGL with SwiftShader (software GL, the CPU); it is reported per phase (script start,
data parsed, WebGL renderer made, table built, first item drawn), median over `--repeats` fresh
browser starts. The last line is JSON. Run from the repository root.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from pathlib import Path

from bapjax import browser, predictors, report
from bapjax.corpus import mdc


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--corpus", default="../shared/mdc")
    parser.add_argument("--split", default="test")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--out", default=None, help="folder for index.html (default: a temporary one)")
    args = parser.parse_args()
    if browser.find_chromium() is None:
        raise SystemExit("error: no Chromium found (apt-get install -y chromium, or set BAPJAX_CHROMIUM)")
    items = mdc.load_corpus(args.corpus).split(args.split)
    predictions = predictors.perturbed_predictions(items, seed=0)
    start = time.perf_counter()
    data = report.report_data(items, predictions, title=f"bench {args.split}", split=args.split,
                              items_source=f"--corpus {args.corpus} --split {args.split}",
                              predictions_source="perturbed, seed 0")
    out = Path(args.out or tempfile.mkdtemp(prefix="bapjax-report-"))
    page = report.write_report(out, data)
    made = time.perf_counter() - start
    size = page.stat().st_size
    runs = []
    for _ in range(args.repeats):
        result = report.selftest(page, "red")
        runs.append(result["times"])
        print(f"  ready {result['times']['item']:.0f} ms: " + ", ".join(
            f"{k} {v:.0f}" for k, v in result["times"].items()), flush=True)
    median = {key: statistics.median(run[key] for run in runs) for key in runs[0]}
    load = os.getloadavg()
    print(f"{len(items)} items: {size / 1e6:.2f} MB ({size / len(items) / 1e3:.2f} kB per item, three.js "
          f"{(report.ASSETS / f'three-{report.THREE_VERSION}.min.js').stat().st_size / 1e6:.2f} MB), made in {made:.1f} s; "
          f"open (median of {len(runs)}): data parsed {median['data']:.0f} ms, table {median['table']:.0f} ms, "
          f"first item drawn {median['item']:.0f} ms; load average {load[0]:.1f} on {os.cpu_count()} CPUs")
    print(json.dumps({"items": len(items), "bytes": size, "made_s": round(made, 2), "median_ms": median,
                      "runs_ms": runs, "loadavg_1min": load[0], "cpus": os.cpu_count()}))


if __name__ == "__main__":
    main()
