"""Benchmark: the HTML report of a whole split (bapjax.report): page weight and open time in Chromium.

From the repository root (this tree's bapjax):

    python -m benchmarks.bench_report [--corpus ../shared/mdc] [--split test] [--repeats 5] [--out DIR]
                                      [--compare_to COMMIT]

Predictions: the perturbed predictor (seed 0), as `python -m bapjax.predictors perturbed ... --seed 0`
writes them. Each repeat starts a fresh headless Chromium (WebGL on SwiftShader, software GL: the
CPU), lets it paint about:blank, then opens the page, as a person opens a file in a running
browser, and reads the page's own clock (`performance.now()`, ms from navigation start) through
the DevTools protocol (`bapjax.pages.browser.Browser`) once the 3D view is drawn. Phases (median over
`--repeats`):

* `data`: the embedded JSON parsed (the script starts after HTML and three.js are parsed),
* `open`: the table built and the first item's header, dialogue and action lists shown, the
  time the page is usable ("opens", docs/report.md),
* `fcp`: Chromium's first contentful paint (the first frame on screen),
* `renderer`: the WebGL renderer created (context creation: the slow part without a GPU),
* `frame`: the first item's 3D view drawn (shader programs compiled, first frame rendered).

`--compare_to COMMIT` also writes the same data with the page (report.py's template and
report_assets/) of COMMIT and opens the two pages alternately, so load on the machine hits both
alike; a page without these phases (before the 3D view was made lazily) gives `open` = `frame` =
its "opened in" time. The last line is JSON.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

from bapjax.corpus import mdc
from bapjax.evaluation import trivial
from bapjax.pages import browser, report_page

REPO = Path(__file__).resolve().parents[1]
PHASES = ("script", "data", "open", "fcp", "renderer", "frame")

# Run in the page once it is drawn: its phases, whichever version of the page it is.
READ_TIMES = """new Promise((resolve) => {
  const read = (paint) => {
    const r = window.bapjaxReport;
    const t = r ? Object.assign({}, r.times) : {};
    if (!r) {  // the page before the lazy 3D view: "opened in N ms" once the first item was drawn
      const m = /opened in (\\d+) ms/.exec(document.getElementById("opened").textContent);
      t.open = t.frame = m ? Number(m[1]) : null;
    }
    t.fcp = paint ? paint.startTime : null;
    resolve(t);
  };
  // first-contentful-paint: reported once the frame is presented, which can be after the 3D view
  new PerformanceObserver((list) => {
    const paint = list.getEntriesByName("first-contentful-paint")[0];
    if (paint) read(paint);
  }).observe({ type: "paint", buffered: true });
  setTimeout(() => read(null), 30000);
})"""
DRAWN = (f"window.bapjaxReport ? ({report_page.VIEW_DRAWN}) "
         ": /opened in/.test(document.getElementById('opened').textContent)")


def page_of_commit(commit: str, data: dict, out: Path) -> Path:
    """``data`` rendered by the report page module and its assets as they were at ``commit``
    (``bapjax/pages/report_page.py``, or ``bapjax/report.py`` in trees before the package layout)."""
    module_dir = out / "report_module"
    (module_dir / "report_assets").mkdir(parents=True, exist_ok=True)

    def show(*paths):
        for path in paths:
            done = subprocess.run(["git", "show", f"{commit}:{path}"], cwd=REPO, capture_output=True)
            if done.returncode == 0:
                return done.stdout
        raise SystemExit(f"error: commit {commit} has none of {', '.join(paths)}")

    (module_dir / "report.py").write_bytes(show("bapjax/pages/report_page.py", "bapjax/report.py"))
    spec = importlib.util.spec_from_file_location(f"report_at_{commit}", module_dir / "report.py")
    old = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(old)
    for name in old.ASSET_FILES:
        (module_dir / "report_assets" / name).write_bytes(
            show(f"bapjax/pages/report_assets/{name}", f"bapjax/report_assets/{name}"))
    return old.write_report(out / "page", data)


def open_times(page: Path) -> dict:
    with browser.Browser() as chromium:
        chromium.wait_for("new Promise((r) => requestAnimationFrame(() => r(true)))")  # about:blank painted
        chromium.open(browser.file_url(page))
        chromium.wait_for(DRAWN)
        return chromium.evaluate(READ_TIMES)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--corpus", default="../shared/mdc")
    parser.add_argument("--split", default="test")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--out", default=None, help="folder for index.html (default: a temporary one)")
    parser.add_argument("--compare_to", default=None, help="a commit whose page is opened alternately with this one")
    args = parser.parse_args()
    if browser.find_chromium() is None:
        raise SystemExit("error: no Chromium found (apt-get install -y chromium, or set BAPJAX_CHROMIUM)")
    items = mdc.load_corpus(args.corpus).split(args.split)
    predictions = trivial.perturbed_predictions(items, seed=0)
    start = time.perf_counter()
    data = report_page.report_data(items, predictions, title=f"bench {args.split}", split=args.split,
                              items_source=f"--corpus {args.corpus} --split {args.split}",
                              predictions_source="perturbed, seed 0")
    out = Path(args.out or tempfile.mkdtemp(prefix="bapjax-report-"))
    pages = {"this": report_page.write_report(out, data)}
    made = time.perf_counter() - start
    if args.compare_to:
        pages[args.compare_to] = page_of_commit(args.compare_to, data, out / "compare")
    runs = {name: [] for name in pages}
    for repeat in range(args.repeats):
        for name, page in pages.items():
            times = open_times(page)
            runs[name].append(times)
            print(f"  {name} #{repeat + 1}: " + ", ".join(
                f"{k} {times[k]:.0f}" for k in PHASES if times.get(k) is not None) + " ms", flush=True)
    load = os.getloadavg()
    medians = {name: {k: statistics.median(t[k] for t in got) for k in PHASES if all(t.get(k) is not None for t in got)}
               for name, got in runs.items()}
    size = pages["this"].stat().st_size
    print(f"{len(items)} items: {size / 1e6:.2f} MB ({size / len(items) / 1e3:.2f} kB per item, three.js "
          f"{(report_page.ASSETS / f'three-{report_page.THREE_VERSION}.min.js').stat().st_size / 1e6:.2f} MB), made in {made:.1f} s; "
          f"load average {load[0]:.1f} on {os.cpu_count()} CPUs")
    for name, median in medians.items():
        print(f"{name}: median of {len(runs[name])}: " + ", ".join(f"{k} {v:.0f} ms" for k, v in median.items()))
    ratios = {}
    if args.compare_to:
        ratios = {k: round(medians[args.compare_to][k] / medians["this"][k], 2)
                  for k in ("open", "fcp", "frame") if k in medians["this"] and k in medians[args.compare_to]}
        print(f"{args.compare_to} / this (median): " + ", ".join(f"{k} {v}x" for k, v in ratios.items()))
    print(json.dumps({"items": len(items), "bytes": size, "made_s": round(made, 2), "median_ms": medians,
                      "ratio_compared_over_this": ratios, "runs_ms": runs, "loadavg_1min": load[0],
                      "cpus": os.cpu_count()}))


if __name__ == "__main__":
    main()
