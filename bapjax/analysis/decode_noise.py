"""How much of a run's score is the luck of its draws: one checkpoint decoded with disjoint sets of
draws, their spread split as seeds' is (`bapjax.analysis.bootstrap.spread`).

    python -m bapjax.analysis.decode_noise RUN [RUN ...] [--sets 3] [--samples K] [--split test] \
        [--corpus @mdc] [--limit N] [--bootstrap 1000] [--seed 0] [--out results/decode_noise]

Each run decodes as `bapjax.predict` does (its best checkpoint, the STOP rule, temperature and cost
its decode.json chose on val), with K draws per item (`--samples`, default the run's own): set s
selects among the greedy decoding and draws s*K .. s*K + K - 1 (`decode.sample_keys`), so set 0 is
exactly the run's own decoding. The sets differ only in their draws, so their spread is what
sampling adds to a seed's score; against the spread between seeds (`collect_experiment`'s
seed_spread) it says how much of that comes from decoding rather than from training. Scored with
the v2 evaluator on the whole split: micro Overall (fairer) F1 and strict F1 per set. Writes
OUT.json and OUT.md; the last line printed is the JSON.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

from bapjax import paths
from bapjax.analysis import add_spread_flags, bootstrap, finish
from bapjax.corpus import load, mdc
from bapjax.errors import UserError
from bapjax.evaluation import evaluator
from bapjax.training import run_eval


def draw_sets(decoder: run_eval.RunDecoder, items: list, sets: int) -> list[dict]:
    """The run's predictions of `items` with each of `sets` disjoint sets of its K draws
    (`decoder.settings.samples`): set s chooses (the run's own rule, `decode.select`) among the greedy
    pass and draws s*K .. s*K + K - 1; set 0 is the run's own decoding."""
    samples = decoder.settings.samples
    return [decoder.predict(items, first_draw=s * samples) for s in range(sets)]


def noise_of_run(run_dir: str, items: list, sets: int, samples: int | None, replicates: int, seed: int) -> dict:
    decoder = run_eval.RunDecoder.load(run_dir, samples=samples)
    samples = decoder.settings.samples
    if samples < 1:
        raise UserError(f"{run_dir}: the run decodes greedily (decode.json samples 0): give --samples K >= 1")
    counts, per_set = [], []
    for predictions in draw_sets(decoder, items, sets):
        report, scores, _ = evaluator.evaluate_items(items, predictions)
        counts.append({"tp": scores.fair_tp, "n_pred": scores.n_pred, "n_ref": scores.n_ref})
        per_set.append(evaluator.headline_f1(report))
    draws = bootstrap.draw(len(items), {}, replicates, seed)
    settings = decoder.settings
    return {"stop_rule": [settings.stop_rule, settings.stop_threshold], "samples": samples,
            "temperature": settings.temperature, "cost": settings.cost, "sets": per_set,
            "spread": bootstrap.spread(counts, draws.items)}


def markdown(results: dict, split: str, sets: int) -> str:
    pct = lambda v: f"{100 * v:.2f}"  # noqa: E731
    lines = [f"MDC {split}, micro Overall fairer F1 (%) of {sets} disjoint sets of draws per run; SD over the sets, "
             "split into item x set (which items each set gets right) and the rest (`bootstrap.spread`)", "",
             "| run | draws per set, temperature, cost | per set (strict) | SD | item x set | rest |",
             "|---|---|---|---:|---:|---:|"]
    for name, r in results.items():
        per_set = ", ".join(f"{pct(s['micro_overall'])} ({pct(s['strict'])})" for s in r["sets"])
        spread = r["spread"]
        lines.append(f"| {name} | {r['samples']}, {r['temperature']:g}, {r['cost']:g} | {per_set} | "
                     f"{pct(spread['seed_sd'])} | {pct(spread['interaction_sd'])} | {pct(spread['model_sd'])} |")
    if len(results) > 1:
        sds = [r["spread"]["seed_sd"] for r in results.values()]
        lines += ["", f"Root mean square of the runs' SD: {pct(statistics.fmean(v * v for v in sds) ** 0.5)}."]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", nargs="+", help="finished training workdirs")
    parser.add_argument("--sets", type=int, default=3, help="disjoint sets of draws per run (>= 2)")
    parser.add_argument("--samples", type=int, default=None, help="draws per set (default: the run's decode.json)")
    parser.add_argument("--split", default="test", choices=["val", "test"])
    add_spread_flags(parser)
    args = parser.parse_args(argv)
    if args.sets < 2:
        parser.error(f"--sets {args.sets}: the spread needs at least 2 sets of draws")
    if args.bootstrap < 1 or (args.samples is not None and args.samples < 1) or args.limit < 0:
        parser.error("--bootstrap and --samples must be >= 1, --limit >= 0")
    for run in args.runs:
        if not (Path(run) / "config.json").is_file():
            parser.error(f"{run}: not a training workdir (no config.json)")
    command = "python -m bapjax.analysis.decode_noise " + " ".join(sys.argv[1:] if argv is None else argv)
    try:
        items = load.first_items(mdc.load_corpus(paths.mdc_path(args.corpus)).split(args.split), args.limit)
        results, start = {}, time.time()
        for run in args.runs:
            results[Path(run).name] = noise_of_run(run, items, args.sets, args.samples, args.bootstrap, args.seed)
            print(f"{run}: {args.sets} sets of draws over {len(items)} items ({time.time() - start:.0f} s)",
                  file=sys.stderr, flush=True)
    except UserError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    summary = {"command": command, "split": args.split, "bootstrap": args.bootstrap, "seed": args.seed, "runs": results}
    return finish(summary, markdown(results, args.split, args.sets), args.out)


if __name__ == "__main__":
    sys.exit(main())
