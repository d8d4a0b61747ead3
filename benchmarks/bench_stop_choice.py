"""What choosing a run's decoding on val costs (`run_eval.Evaluator.choose_decoding`: every STOP
rule and threshold of the run's config.eval, then the draws), and whether another commit's code
chooses the same way: programs compiled, their compile seconds and the wall seconds of the choice
on the MDC val split, for a finished run's checkpoint, in this tree and with `--compare_to` in a
copy of that commit (`git archive`), each in its own process with the persistent compilation
cache off (every program compiled cold, as a run's first evaluation compiles them).

    python benchmarks/bench_stop_choice.py --run runs/exp/agg-frame-s0 --compare_to 1edaf8d [--rounds 2]

With `--compare_to`, also whether both trees' decodings are identical: every candidate's val F1
and a hash of its predictions (each item's actions), candidate by candidate. The rounds alternate
the trees; each figure is the lowest of a tree's rounds. The last line is JSON: {"current": {...},
"baseline": {...}, "identical": bool, "ratio": {...}} ({"current": {...}} alone without
`--compare_to`).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

WORKER = r'''
import hashlib, json, sys, time
import jax
from bapjax import cli
from bapjax.corpus import mdc
from bapjax.data import input_pipeline
from bapjax.training import checkpoints, run_eval

run_dir, corpus, out = sys.argv[1], sys.argv[2], sys.argv[3]
tally = cli.compile_tally()
run = checkpoints.load_run(run_dir)
items = list(mdc.load_corpus(corpus).split("val"))
evaluator = run_eval.Evaluator(run.model, run.vocab, input_pipeline.FeatureConfig.from_config(run.config))
params = jax.tree_util.tree_map(jax.numpy.asarray, run.params)
hashes = []
score = run_eval.evaluator.evaluate_predictions


def recorded(items, predictions, **kwargs):  # each candidate's predictions, hashed as scored
    text = json.dumps([[item_id, [list(a) for a in actions]] for item_id, actions in sorted(predictions.items())])
    hashes.append(hashlib.sha256(text.encode()).hexdigest()[:16])
    return score(items, predictions, **kwargs)


run_eval.evaluator.evaluate_predictions = recorded
before = tally.snapshot()
start = time.perf_counter()
choice = evaluator.choose_decoding(params, items, run.config.eval, log_fn=lambda *args: None)
wall = time.perf_counter() - start
compiled = tally.since(before)
candidates = [{**row, "predictions_sha256": h} for row, h in zip(choice["candidates"], hashes)]
json.dump({"wall_seconds": round(wall, 1), "programs": compiled["programs"],
           "compile_seconds": compiled["compile_seconds"], "trace_seconds": compiled["trace_seconds"],
           "costliest": compiled["costliest"], "val_items": len(items), "chosen": {k: choice[k] for k in choice
           if k not in ("candidates",)}, "candidates": candidates}, open(out, "w"))
'''

FIGURES = ("wall_seconds", "programs", "compile_seconds")


def measure(tree: Path, run: str, corpus: str) -> dict:
    """One process of `tree`'s code choosing the run's decoding on val (`WORKER`)."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "out.json"
        env = {**os.environ, "PYTHONPATH": str(tree), "JAX_ENABLE_COMPILATION_CACHE": "false"}
        done = subprocess.run([sys.executable, "-c", WORKER, run, corpus, str(out)], cwd=str(tree), env=env,
                              capture_output=True, text=True)
        if done.returncode:
            raise SystemExit(f"error: {tree}: the choice on val failed:\n{done.stderr.strip()[-2000:]}")
        return json.loads(out.read_text())


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run", required=True, help="a finished training run's workdir (its best checkpoint)")
    parser.add_argument("--compare_to", default="", help="also measure this git commit, alternately with this tree")
    parser.add_argument("--rounds", type=int, default=1, help="rounds (each tree once per round)")
    parser.add_argument("--corpus", default="@mdc", help="the MDC corpus whose val split is decoded")
    args = parser.parse_args()
    if not (Path(args.run) / "config.json").is_file():
        parser.error(f"--run {args.run}: no config.json there (a training run's workdir)")
    if args.rounds < 1:
        parser.error(f"--rounds must be >= 1, got {args.rounds}")
    run = str(Path(args.run).resolve())
    with tempfile.TemporaryDirectory() as tmp:
        trees = {"current": REPO}
        if args.compare_to:
            archive = subprocess.run(["git", "-C", str(REPO), "archive", args.compare_to], capture_output=True)
            if archive.returncode:
                parser.error(f"--compare_to {args.compare_to}: {archive.stderr.decode().strip()}")
            subprocess.run(["tar", "-x", "-C", tmp], input=archive.stdout, check=True)
            trees["baseline"] = Path(tmp)
        results: dict[str, list[dict]] = {name: [] for name in trees}
        for round_ in range(args.rounds):
            for name, tree in trees.items():
                result = measure(tree, run, args.corpus)
                results[name].append(result)
                print(f"round {round_ + 1} {name}: {result['programs']} programs, {result['compile_seconds']:.1f} s "
                      f"compiling, {result['wall_seconds']:.1f} s in all; costliest {result['costliest'][:3]}",
                      flush=True)
    best = {name: {**min(rs, key=lambda r: r["wall_seconds"]),
                   **{k: min(r[k] for r in rs) for k in FIGURES}} for name, rs in results.items()}
    out = {"command": " ".join(["python", "benchmarks/bench_stop_choice.py", *sys.argv[1:]]), "run": args.run,
           "rounds": args.rounds, "current": best["current"]}
    if args.compare_to:
        mine, theirs = best["current"]["candidates"], best["baseline"]["candidates"]
        out.update(baseline=best["baseline"], baseline_commit=args.compare_to, identical=mine == theirs,
                   ratio={k: round(best["baseline"][k] / best["current"][k], 3) for k in FIGURES})
        for k in FIGURES:
            print(f"{k}: {best['current'][k]} vs {best['baseline'][k]} at {args.compare_to} "
                  f"(baseline / this tree: {out['ratio'][k]:.2f}x)")
        print(f"every candidate's val F1 and predictions identical: {out['identical']} "
              f"({len(mine)} candidates against {len(theirs)})")
    print(json.dumps(out))


if __name__ == "__main__":
    main()
