"""How minimum-Bayes-risk decoding (`bapjax.training.mbr`) scores against a run's greedy decoding,
by number of draws, temperature and cost per action: the evidence for config.eval's sampling grid.

    python -m bapjax.analysis.mbr_sweep RUN [RUN ...] [--split val] [--samples 64] \
        [--temperatures 0.3,0.5,0.8] [--costs 0.05,0.075,0.1,0.125,0.15,0.2,0.3] [--draws 16,32,64] \
        [--out results/mbr_sweep]

Per run (its best checkpoint and the STOP rule it chose on val, as `bapjax.predict` decodes it)
and temperature, the greedy decoding and `--samples` draws are decoded once; the selection at
each cost then uses the greedy sequence and the first K draws for each K of `--draws` (draw k has
the same keys whatever K, so K draws here are what a run decoding K draws gets). Scored with the
v2 evaluator: micro Overall (fairer) F1 and predicted net actions against the reference's.
Writes OUT.json and OUT.md; the last line printed is the JSON.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from bapjax import paths
from bapjax.analysis import finish
from bapjax.corpus import mdc
from bapjax.evaluation import evaluator
from bapjax.training import decode, mbr, run_eval


def floats(text: str) -> list[float]:
    return [float(x) for x in text.split(",") if x.strip()]


def sweep_run(run_dir: str, items: list, samples: int, temperatures, costs, draws) -> dict:
    decoder = run_eval.RunDecoder.load(run_dir)
    run, base = decoder.run, decoder.settings.replace(samples=0)

    def score(predictions):
        report = evaluator.evaluate_predictions(items, predictions)
        return {**evaluator.headline_f1(report), **evaluator.net_counts(report)}

    result = {"stop_rule": [base.stop_rule, base.stop_threshold], "greedy": None, "sampled": []}
    for temperature in temperatures:
        settings = base.replace(samples=samples, temperature=temperature)
        passes = decode.candidates(run.model, run.params, items, run.vocab, decoder.feature_config, settings,
                                   decode_fn=settings.decode_fn(run.model))
        if result["greedy"] is None:
            result["greedy"] = score(passes[0])
        for k in draws:
            for cost in costs:
                result["sampled"].append({"temperature": temperature, "draws": k, "cost": cost,
                                          **score(mbr.select(passes[:k + 1], cost))})
    return result


def pct(value) -> str:
    return f"{100 * value:.1f}"


def markdown(results: dict, split: str) -> str:
    lines = [f"MDC {split}: greedy decoding against the best of greedy and K draws (micro Overall F1, %; "
             "predicted / reference net actions)", ""]
    for name, result in results.items():
        greedy = result["greedy"]
        lines += [f"**{name}** (STOP rule {result['stop_rule'][0]} at {result['stop_rule'][1]}): greedy "
                  f"{pct(greedy['micro_overall'])} ({greedy['predicted_net']} / {greedy['reference_net']})", ""]
        costs = sorted({row["cost"] for row in result["sampled"]})
        lines += ["| temperature | draws | " + " | ".join(f"cost {c:g}" for c in costs) + " |",
                  "|---:|---:|" + "---:|" * len(costs)]
        cells: dict = {}
        for row in result["sampled"]:
            cells.setdefault((row["temperature"], row["draws"]), {})[row["cost"]] = row
        for (temperature, k), by_cost in cells.items():
            lines.append(f"| {temperature:g} | {k} | " + " | ".join(
                f"{pct(by_cost[c]['micro_overall'])} ({by_cost[c]['predicted_net']})" for c in costs) + " |")
        lines.append("")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", nargs="+", help="finished training workdirs")
    parser.add_argument("--split", default="val", choices=["val", "test"])
    parser.add_argument("--corpus", default="@mdc")
    parser.add_argument("--samples", type=int, default=64, help="draws decoded per temperature")
    parser.add_argument("--temperatures", type=floats, default=[0.3, 0.5, 0.8])
    parser.add_argument("--costs", type=floats, default=[0.05, 0.075, 0.1, 0.125, 0.15, 0.2, 0.3])
    parser.add_argument("--draws", default="16,32,64", help="numbers of draws the selection uses (each <= --samples)")
    parser.add_argument("--out", default=None, help="output path without extension (OUT.json, OUT.md)")
    args = parser.parse_args()
    draws = [int(k) for k in args.draws.split(",") if k.strip()]
    if args.samples < 2 or not draws or any(not 2 <= k <= args.samples for k in draws):
        parser.error(f"--draws {args.draws}: each must be in [2, --samples={args.samples}]")
    items = mdc.load_corpus(paths.mdc_path(args.corpus)).split(args.split)
    results, start = {}, time.time()
    for run in args.runs:
        results[Path(run).name] = sweep_run(run, items, args.samples, args.temperatures, args.costs, draws)
        print(f"{run}: {len(items)} items, {args.samples} draws at {len(args.temperatures)} temperatures "
              f"({time.time() - start:.0f} s)", file=sys.stderr, flush=True)
    text = markdown(results, args.split)
    summary = {"command": "python -m bapjax.analysis.mbr_sweep " + " ".join(sys.argv[1:]), "split": args.split,
               "runs": results}
    return finish(summary, text, args.out)


if __name__ == "__main__":
    sys.exit(main())
