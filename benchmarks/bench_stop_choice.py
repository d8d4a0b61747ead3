"""What choosing a run's decoding on val costs (`bapjax.decoding.on_val.choose_decoding`: every STOP
rule and threshold of the run's config.eval, then the draws), and whether another commit's code
chooses the same way: programs compiled, their compile seconds and the wall seconds of the choice
on the MDC val split, for a finished run's checkpoint, in this tree and with `--compare_to` in a
copy of that commit (`git archive`), each in its own process with the persistent compilation
cache off (every program compiled cold, as a run's first evaluation compiles them).

From the repository root (this tree's bapjax):

    python -m benchmarks.bench_stop_choice --run runs/exp/agg-frame-s0 --compare_to 1edaf8d [--rounds 2]
    python -m benchmarks.bench_stop_choice --run runs/exp/agg-frame-s0 --eval samples=0 --baseline_eval samples=32

`--eval FIELD=VALUE` replaces a field of the run's config.eval for this tree's choice (a Python
literal, repeatable); `--baseline_eval FIELD=VALUE` does so for the baseline, which is this tree
again unless `--compare_to` names another commit: two ways of choosing timed side by side. With a
baseline, also whether both decodings are identical: every candidate's val F1 and a hash of its
predictions (each item's actions), candidate by candidate; whether the candidates both tried
(the same settings) are; and whether both choose the same decoding. The rounds alternate the
trees; each figure is the lowest of a tree's rounds. The last line is JSON: {"current": {...},
"baseline": {...}, "identical": bool, "shared_identical": bool, "same_choice": bool, "ratio":
{...}} ({"current": {...}} alone without a baseline).
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

WORKER = r'''
import ast, hashlib, json, sys, time
import jax
from bapjax import cli
from bapjax.corpus import mdc
from bapjax.data import input_pipeline
from bapjax.training import checkpoints
import os, bapjax
# the tree's own layout: an editable install of another tree may still resolve bapjax.decoding
if os.path.isdir(os.path.join(os.path.dirname(bapjax.__file__), "decoding")):  # the decoding package
    from bapjax.decoding import on_val as rules_home  # the vote's rows (config.eval.vote_samples): its score
    from bapjax.decoding.runs import Evaluator
    evaluation = rules_home.evaluator
    def choose(evaluator, *args, **kwargs):
        return rules_home.choose_decoding(evaluator, *args, **kwargs)
else:  # a tree with decoding in bapjax.training
    from bapjax.training import run_eval
    Evaluator, evaluation = run_eval.Evaluator, run_eval.evaluator
    def choose(evaluator, *args, **kwargs):
        return evaluator.choose_decoding(*args, **kwargs)
    try:
        from bapjax.training import ensemble as rules_home
    except ImportError:  # a commit from before ensembles
        rules_home = None

run_dir, corpus, out, overrides = sys.argv[1], sys.argv[2], sys.argv[3], json.loads(sys.argv[4])
tally = cli.compile_tally()
run = checkpoints.load_run(run_dir)
for field, value in overrides.items():
    if field not in run.config.eval:
        sys.exit(f"error: config.eval has no field {field!r}")
    run.config.eval[field] = ast.literal_eval(value)
items = list(mdc.load_corpus(corpus).split("val"))
evaluator = Evaluator(run.model, run.vocab, input_pipeline.FeatureConfig.from_config(run.config))
params = jax.tree_util.tree_map(jax.numpy.asarray, run.params)
hashes = []
score = evaluation.evaluate_predictions


score_rule = rules_home.score if rules_home else None


def digest(predictions):
    text = json.dumps([[item_id, [list(a) for a in actions]] for item_id, actions in sorted(predictions.items())])
    hashes.append(hashlib.sha256(text.encode()).hexdigest()[:16])


def recorded(items, predictions, **kwargs):  # each candidate's predictions, hashed as scored, in the rows' order
    digest(predictions)
    return score(items, predictions, **kwargs)


def recorded_rule(items, predictions):
    digest(predictions)
    return score_rule(items, predictions)


evaluation.evaluate_predictions = recorded
if rules_home:
    rules_home.score = recorded_rule
before = tally.snapshot()
start = time.perf_counter()
choice = choose(evaluator, params, items, run.config.eval, log_fn=lambda *args: None)
wall = time.perf_counter() - start
compiled = tally.since(before)
assert len(hashes) == len(choice["candidates"]), "a candidate scored another way than the two hashed"
candidates = [{**row, "predictions_sha256": h} for row, h in zip(choice["candidates"], hashes)]
json.dump({"wall_seconds": round(wall, 1), "programs": compiled["programs"],
           "compile_seconds": compiled["compile_seconds"], "trace_seconds": compiled["trace_seconds"],
           "costliest": compiled["costliest"], "val_items": len(items), "chosen": {k: choice[k] for k in choice
           if k not in ("candidates",)}, "candidates": candidates}, open(out, "w"))
'''

FIGURES = ("wall_seconds", "programs", "compile_seconds")


def measure(tree: Path, run: str, corpus: str, overrides: dict) -> dict:
    """One process of `tree`'s code choosing the run's decoding on val (`WORKER`), with the
    config.eval fields `overrides` replaced."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "out.json"
        env = {**os.environ, "PYTHONPATH": str(tree), "JAX_ENABLE_COMPILATION_CACHE": "false"}
        done = subprocess.run([sys.executable, "-c", WORKER, run, corpus, str(out), json.dumps(overrides)],
                              cwd=str(tree), env=env, capture_output=True, text=True)
        if done.returncode:
            raise SystemExit(f"error: {tree}: the choice on val failed:\n{done.stderr.strip()[-2000:]}")
        return json.loads(out.read_text())


def same_form(row: dict) -> dict:
    """A candidate row with a cost ("select" at it on every board, as files before rules per board
    write it) written as rules per board, so rows of either form compare."""
    if "cost" not in row:
        return row
    select = {"rule": "select", "value": row["cost"]}
    return {**{k: v for k, v in row.items() if k != "cost"}, "rules": {"EB": select, "NEB": dict(select)}}


def shared_identical(mine: list[dict], theirs: list[dict]) -> bool:
    """Whether the candidates both choices tried (the same settings) scored the same and predicted
    the same (each row's hash)."""
    mine, theirs = [same_form(row) for row in mine], [same_form(row) for row in theirs]

    def settings(row):
        return json.dumps({k: v for k, v in row.items() if k not in ("val_overall_micro_f1",
                           "mean_predicted_net_actions", "predictions_sha256")}, sort_keys=True)

    theirs_by = {settings(row): row for row in theirs}
    return all(row == theirs_by[settings(row)] for row in mine if settings(row) in theirs_by)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run", required=True, help="a finished training run's workdir (its best checkpoint)")
    parser.add_argument("--compare_to", default="", help="also measure this git commit, alternately with this tree")
    parser.add_argument("--rounds", type=int, default=1, help="rounds (each tree once per round)")
    parser.add_argument("--corpus", default="@mdc", help="the MDC corpus whose val split is decoded")
    parser.add_argument("--eval", action="append", default=[], metavar="FIELD=VALUE",
                        help="a config.eval field replaced for this tree's choice (repeatable)")
    parser.add_argument("--baseline_eval", action="append", default=[], metavar="FIELD=VALUE",
                        help="a config.eval field replaced for the baseline's choice (repeatable); without "
                             "--compare_to the baseline is this tree")
    args = parser.parse_args()
    overrides = {}
    for flag in ("eval", "baseline_eval"):
        overrides[flag] = {}
        for text in getattr(args, flag):
            field, sep, value = text.partition("=")
            try:
                ast.literal_eval(value)
            except (ValueError, SyntaxError):
                sep = ""
            if not sep or not field:
                parser.error(f"--{flag} {text}: expected FIELD=VALUE with a Python literal, e.g. samples=0")
            overrides[flag][field] = value
    if not (Path(args.run) / "config.json").is_file():
        parser.error(f"--run {args.run}: no config.json there (a training run's workdir)")
    if args.rounds < 1:
        parser.error(f"--rounds must be >= 1, got {args.rounds}")
    run = str(Path(args.run).resolve())
    with tempfile.TemporaryDirectory() as tmp:
        trees = {"current": REPO}
        if args.baseline_eval and not args.compare_to:
            trees["baseline"] = REPO
        if args.compare_to:
            archive = subprocess.run(["git", "-C", str(REPO), "archive", args.compare_to], capture_output=True)
            if archive.returncode:
                parser.error(f"--compare_to {args.compare_to}: {archive.stderr.decode().strip()}")
            subprocess.run(["tar", "-x", "-C", tmp], input=archive.stdout, check=True)
            trees["baseline"] = Path(tmp)
        results: dict[str, list[dict]] = {name: [] for name in trees}
        for round_ in range(args.rounds):
            for name, tree in trees.items():
                result = measure(tree, run, args.corpus, overrides["eval" if name == "current" else "baseline_eval"])
                results[name].append(result)
                print(f"round {round_ + 1} {name}: {result['programs']} programs, {result['compile_seconds']:.1f} s "
                      f"compiling, {result['wall_seconds']:.1f} s in all; costliest {result['costliest'][:3]}",
                      flush=True)
    best = {name: {**min(rs, key=lambda r: r["wall_seconds"]),
                   **{k: min(r[k] for r in rs) for k in FIGURES}} for name, rs in results.items()}
    out = {"command": " ".join(["python", "-m", "benchmarks.bench_stop_choice", *sys.argv[1:]]), "run": args.run,
           "rounds": args.rounds, "eval": overrides["eval"], "current": best["current"]}
    if "baseline" in best:
        mine, theirs = best["current"]["candidates"], best["baseline"]["candidates"]
        where = f"at {args.compare_to}" if args.compare_to else "in this tree"
        out.update(baseline=best["baseline"], baseline_commit=args.compare_to or None,
                   baseline_eval=overrides["baseline_eval"],
                   identical=[same_form(r) for r in mine] == [same_form(r) for r in theirs],
                   shared_identical=shared_identical(mine, theirs),
                   same_choice=same_form(best["current"]["chosen"]) == same_form(best["baseline"]["chosen"]),
                   ratio={k: round(best["baseline"][k] / best["current"][k], 3) for k in FIGURES})
        for k in FIGURES:
            print(f"{k}: {best['current'][k]} vs {best['baseline'][k]} {where} "
                  f"(baseline / this: {out['ratio'][k]:.2f}x)")
        print(f"every candidate's val F1 and predictions identical: {out['identical']} "
              f"({len(mine)} candidates against {len(theirs)}); those both tried identical: "
              f"{out['shared_identical']}; the same decoding chosen: {out['same_choice']}")
    print(json.dumps(out))


if __name__ == "__main__":
    main()
