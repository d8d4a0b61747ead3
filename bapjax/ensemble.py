"""An ensemble of trained runs: every member's passes pooled per item and combined by the rule that
scores best on val (`bapjax.decoding.Ensemble`), then the test split decoded once with it.

    python -m bapjax.ensemble --runs runs/exp/agg-frame-s0,runs/exp/agg-frame-s1 --out runs/ens/agg-s0s1
    python -m bapjax.ensemble --runs runs/a,runs/b,runs/c --samples 8 --corpus @mdc --out runs/ens/abc

Each `--runs` entry is a finished training workdir (its best checkpoint and its decode.json, as
`bapjax.predict` decodes it; `--samples` and `--temperature` replace every member's number of
draws, their temperature and `--sampler` how they pick each action; `--first_draw F` takes draws
F .. F+K-1 instead of 0 .. K-1, another set of the same distribution; every member draws with the
same draw numbers, so the same random numbers). An entry may also name one kept step of a run, `<workdir>/checkpoints/latest/<step>` (its
decode.json is the run's): members that share a run count its minutes once. `--corpus` is the MDC
(`@mdc`) unless given. The val split chooses among "select" at each of `--costs`, "vote" at each of `--thresholds` and "members" (the net
actions at least m members' own decodings predict) at each m, one rule for the items on an empty
board and one for the others (`--rules`: two rules fixed beforehand, e.g. the best on the pooled val
of earlier ensembles, `bapjax.decoding.on_val.pooled_choice` of their ensemble.json choices; val only
scores them, `--noval`: not at all, its decoding saved); the test split is decoded once (`--notest`: not at all). `--out`
receives ensemble.json (each member's provenance and minutes, and those of the runs its weights
started from, `train.init_from`; the choice and every rule's val scores, each member's scores
decoded alone as its own run decodes, the minutes of each part, and `wall_minutes`: every run
behind the members, each once, and the ensemble's decoding, the whole compute of the result),
final_eval.json (the evaluator's report of the test split, as a training run writes it) and
predictions/mc_test.jsonl.gz.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

from absl import flags

from bapjax import cli, paths
from bapjax.corpus import load
from bapjax.decoding import BOARDS, COSTS, SAMPLERS, THRESHOLDS, DecodeSettings, Ensemble
from bapjax.errors import UserError
from bapjax.evaluation import evaluator
from bapjax.training import checkpoints, run_checks, run_eval
from bapjax.world import jsonl

FLAGS = flags.FLAGS


def define_flags() -> None:
    cli.flag("list", "runs", None, "Finished training workdirs, comma-separated: the members.")
    cli.flag("string", "out", None, "Output folder (ensemble.json, final_eval.json, predictions/).")
    cli.define_item_source_flags("corpus")  # the val and test splits' corpus; @mdc when not given (main)
    cli.flag("integer", "samples", None, "Draws per member (default: each member's decode.json).")
    cli.flag("float", "temperature", None, "Temperature of the draws (default: each member's decode.json, or "
             "the first of its config.eval.temperatures where it chose greedy decoding).")
    cli.flag("enum", "sampler", None, "How the draws pick each action (default: each member's decode.json).",
             enum_values=list(SAMPLERS))
    cli.flag("integer", "first_draw", 0, "The first draw's index: another set of draws, e.g. --samples 32 "
             "--first_draw 32 for draws 32..63: disjoint sets of draws show how much of a score is the draws' luck.")
    cli.flag("list", "rules", None, "Two rules fixed beforehand, RULE:VALUE for the items on an empty board, then "
             "for the others (e.g. select:0.075,vote:0.15, the best on the pooled val of earlier ensembles, "
             "bapjax.decoding.on_val.pooled_choice): no choice on val, where they are only scored.")
    cli.flag("list", "costs", [f"{v:g}" for v in COSTS], "Costs per action tried for the rule 'select'.")
    cli.flag("list", "thresholds", [f"{v:g}" for v in THRESHOLDS], "Shares of the draws tried for the rule 'vote'.")
    cli.flag("integer", "limit", 0, load.LIMIT_HELP)
    cli.flag("bool", "test", True, "Decode the test split with the rule chosen on val; --notest: stop after the "
             "choice (ensemble.json only), to compare ensembles on val with the test split untouched.")
    cli.flag("bool", "val", True, "Decode the val split (to choose the rules, or with --rules to score them); "
             "--noval, with --rules only: the test split alone, the fixed rules unscored on val.")


def floats(name: str) -> list[float]:
    try:
        values = [float(v) for v in getattr(FLAGS, name)]
    except ValueError:
        raise UserError(f"--{name} {','.join(getattr(FLAGS, name))}: expected numbers") from None
    if any(not 0.0 <= v < 1.0 for v in values):
        raise UserError(f"--{name}: each value must be in [0, 1)")
    return values


def provenance(run_dir, what: str) -> dict:
    """A finished training run's command, commit, training items and minutes (training and its own
    decoding), from the runs.jsonl of its workdir `run_dir`, or for a builder directory
    (`bapjax.export`, e.g. `pretrained`) from its builder.json, the run it was made of; `what` names
    it in an error."""
    runs = run_checks.invocations(run_dir)
    if not runs and (run_dir / checkpoints.BUILDER_RECORD).exists():
        built = json.loads((run_dir / checkpoints.BUILDER_RECORD).read_text())
        return {"command": built["command"], "commit": built["commit"], "items_trained": int(built["train_items_seen"]),
                "wall_minutes": float(built["wall_minutes"])}
    if not runs or not runs[-1].get("finished"):
        raise UserError(f"{what}: the run has not finished (its runs.jsonl)")
    commits = sorted({str(r.get("commit")) for r in runs})
    return {"command": "python -m bapjax.train " + " ".join(runs[0]["argv"][1:]),
            "commit": commits[0] if len(commits) == 1 else commits,
            "items_trained": sum(int(r["items_trained"]) for r in runs),
            "wall_minutes": round(sum(float(r["wall_seconds"]) for r in runs) / 60, 2)}


def member_record(path: str, decoder) -> dict:
    """What ensemble.json keeps of a member, so the ensemble's cost and provenance need no other
    file: its checkpoint step and seed, its `provenance`, and under "init_from" that of the run its
    weights started from (`train.init_from`), and of that run's, nearest first."""
    record = {"run": path, "step": decoder.run.step, "seed": int(decoder.run.config.seed),
              **provenance(decoder.run.run_dir, f"--runs {path}"), "init_from": []}
    config = decoder.run.config
    while config.train.get("init_from"):
        trunk = config.train.init_from
        what = f"--runs {path}: the run its weights started from ({trunk}, train.init_from)"
        try:
            run_dir = checkpoints.find_run_dir(trunk)
        except checkpoints.CheckpointError:
            raise UserError(f"{what} is not found, so its minutes cannot be counted; run from the folder it was "
                            "trained in") from None
        record["init_from"].append({"run": trunk, **provenance(run_dir, what)})
        config = run_checks.with_defaults(run_checks.read_run_file(run_dir, "config.json"))
    return record


def whole_minutes(recorded: list[dict]) -> float:
    """The training and decoding minutes of every run behind the members: each member's and each run
    its weights started from, a run counted once however many members share it (e.g. one trunk)."""
    runs = {}
    for member in recorded:
        for run in [member, *member["init_from"]]:
            runs.setdefault(os.path.abspath(str(checkpoints.find_run_dir(run["run"]))), run["wall_minutes"])
    return sum(runs.values())


def chosen_text(choice: dict) -> str:
    """"EB <rule> at <value>, NEB <rule> at <value>": the rules chosen on val."""
    return ", ".join(f"{kind} {choice[kind]['rule']} at {choice[kind]['value']:g}" for kind in BOARDS)


def main(argv) -> int:
    if len(argv) > 1:
        raise UserError(f"unexpected arguments: {' '.join(argv[1:])}")
    cli.require_flags("runs", "out")
    costs, thresholds = floats("costs"), floats("thresholds")
    if not costs and not thresholds:
        raise UserError("--costs and --thresholds are both empty: no rule to choose")
    DecodeSettings.check_flags(FLAGS.samples, FLAGS.temperature)
    if FLAGS.first_draw < 0:
        raise UserError(f"--first_draw is {FLAGS.first_draw}; expected an integer >= 0")
    load.check_limit(FLAGS.limit)
    rules = None if FLAGS.rules is None else DecodeSettings.parse_rules(FLAGS.rules, len(FLAGS.runs))
    if not FLAGS.val and rules is None:
        raise UserError("--noval needs --rules: without rules fixed beforehand the val split chooses them")
    if not FLAGS.val and not FLAGS.test:
        raise UserError("--noval with --notest: neither split would be decoded")
    out = Path(FLAGS.out)
    if (out / "ensemble.json").exists():
        raise UserError(f"--out {out}: holds a finished ensemble (ensemble.json); choose another folder")
    paths.check_writable_dir(out, "--out")
    run_eval.use_runs_cpu_devices(FLAGS.runs)
    start, commit = time.time(), run_checks.code_version()
    members = [run_eval.load_decoder(run) for run in FLAGS.runs]
    recorded = [member_record(path, member) for path, member in zip(FLAGS.runs, members)]
    ensemble = Ensemble(members, FLAGS.samples, FLAGS.temperature, FLAGS.sampler, FLAGS.first_draw)
    corpus = FLAGS.corpus or paths.MDC
    splits = {split: load.first_items(load.load_split(corpus, split), FLAGS.limit)
              for split in ("val",) * FLAGS.val + ("test",) * FLAGS.test}
    minutes = {"load": (time.time() - start) / 60}

    alone: dict = {}  # each member decoded as it decodes alone: its scores on each split

    def pooled(split: str):
        began = time.time()

        def log(i, passes, score):
            alone.setdefault(FLAGS.runs[i], {})[split] = score
            print(f"{split}: member {i + 1}/{len(members)} decoded ({FLAGS.runs[i]}, {passes} passes of "
                  f"{len(splits[split])} items, alone {100 * score['micro_overall']:.2f}; "
                  f"{time.time() - began:.0f} s)", file=sys.stderr, flush=True)

        pool = ensemble.pool(splits[split], log_fn=log)
        minutes[f"{split}_decode"] = (time.time() - began) / 60
        return pool

    val_pool = pooled("val") if FLAGS.val else None
    began = time.time()
    choice = ensemble.choose(val_pool, splits.get("val", []), costs, thresholds, rules)
    how = "fixed" if rules else "chosen on val"
    minutes["val_choice"] = (time.time() - began) / 60
    for row in choice["candidates"]:
        print(f"val {row['rule']} at {row['value']:g}: micro Overall {100 * row['micro_overall']:.2f}, "
              f"{row['mean_predicted_net_actions']:.2f} net actions per item", file=sys.stderr)
    scored = "val not decoded" if val_pool is None else f"val micro Overall {100 * choice['micro_overall']:.2f}"
    print(f"{how}: {chosen_text(choice)} ({scored})", file=sys.stderr, flush=True)
    report = None
    out.mkdir(parents=True, exist_ok=True)
    if FLAGS.test:
        predictions = ensemble.predict(pooled("test"), choice, splits["test"])
        report = evaluator.evaluate_predictions(splits["test"], predictions, drop_infeasible=False)
        (out / "predictions").mkdir(exist_ok=True)
        jsonl.write_predictions(str(out / "predictions" / "mc_test.jsonl.gz"), predictions)
        (out / "final_eval.json").write_text(json.dumps({"mc_test": report}))
    minutes["total"] = (time.time() - start) / 60
    record = {"command": "python -m bapjax.ensemble " + " ".join(sys.argv[1:]), "commit": commit,
              "members": recorded, "samples": FLAGS.samples, "temperature": FLAGS.temperature,
              "sampler": FLAGS.sampler, "first_draw": FLAGS.first_draw, "alone": alone,
              "val_items": len(splits.get("val", ())), "test_items": len(splits.get("test", ())), "choice": choice,
              "test": None if report is None else evaluator.headline_f1(report),
              "minutes": {k: round(v, 2) for k, v in minutes.items()},
              "wall_minutes": round(minutes["total"] + whole_minutes(recorded), 2)}
    (out / "ensemble.json").write_text(json.dumps(record, indent=1) + "\n")
    if report is None:
        print(f"{len(members)} members, {chosen_text(choice)}: MDC val micro Overall {100 * choice['micro_overall']:.1f} "
              f"(the test split not decoded); {minutes['total']:.1f} min here, {record['wall_minutes']:.1f} min with "
              f"the runs behind the members; wrote {out}", file=sys.stderr)
        return 0
    print(evaluator.format_report(report, fmt="text"))
    print(f"{len(members)} members, {chosen_text(choice)} ({how}): MDC test micro Overall "
          f"{100 * record['test']['micro_overall']:.1f}, strict {100 * record['test']['strict']:.1f}; "
          f"{minutes['total']:.1f} min here, {record['wall_minutes']:.1f} min with the runs behind the members; "
          f"wrote {out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    cli.run(main, define_flags)
