"""Predictions of a trained run, in the evaluator's JSONL format (decoded as the run's own
final evaluation does: `bapjax.training.run_eval`).

    python -m bapjax.predict --checkpoint runs/cpu --corpus @mdc --split test --out preds.jsonl
    python -m bapjax.predict --checkpoint runs/cl --store data/store --split test --dataset bs --out bs.jsonl
    python -m bapjax.predict --checkpoint runs/cpu --items items.jsonl --out preds.jsonl --evaluate
    python -m bapjax.predict --checkpoint pretrained --corpus @mdc --split test --evaluate

`--checkpoint` is a training workdir (it holds config.json, vocab.json and checkpoints/best|latest),
a checkpoints/best or /latest directory inside one, one kept step (checkpoints/latest/STEP), or
`pretrained`, the builder bapjax ships (bapjax/pretrained/README.md); `--split` defaults to test. Then score with
`python -m bapjax.evaluate --predictions preds.jsonl --corpus ... --split ...`, or pass `--evaluate`
(then `--out` is optional).
"""

from __future__ import annotations

import json
import sys
import time

from absl import flags

from bapjax import cli, paths
from bapjax.corpus import load
from bapjax.decoding import SAMPLERS, DecodeSettings
from bapjax.errors import UserError
from bapjax.evaluation import evaluator
from bapjax.training import run_eval
from bapjax.training.run_eval import predict_with_run
from bapjax.world import jsonl

FLAGS = flags.FLAGS


def define_flags() -> None:
    cli.flag("string", "checkpoint", None, "Training workdir (or its checkpoints/best or /latest, or one step: "
             "checkpoints/latest/STEP), or `pretrained`: the builder bapjax ships.")
    cli.define_item_source_flags()  # --split defaults to test here (main)
    cli.flag("string", "out", None, "Output predictions JSONL.")
    cli.flag("integer", "batch_size", None, "Items decoded at once (default: the run's config.eval.batch_size).")
    cli.flag("integer", "max_actions", None, "Greedy decoding length (default: the run's config.eval.max_actions).")
    cli.flag("integer", "min_actions", None, "STOP is masked before this many actions (default: the run's "
             "config.eval.min_actions).")
    cli.flag("string", "stop_rule", None, "argmax, mass or length (a model with a length head) (default: the "
             "run's decode.json, tuned on val; else config.eval.stop_rule).")
    cli.flag("float", "stop_threshold", None, "p(STOP) threshold of the mass rule, quantile of the length rule "
             "(default: the run's decode.json, else config.eval.stop_threshold).")
    cli.flag("integer", "samples", None, "Draws per item for minimum-Bayes-risk selection with the greedy decoding "
             "(0: greedy only; default: the run's decode.json, chosen on val; else 0).")
    cli.flag("float", "temperature", None, "Sampling temperature of those draws (default: the run's decode.json).")
    cli.flag("float", "cost", None, "Cost per predicted action in the selection among them (default: the run's "
             "decode.json; given, it replaces a run's rules per board).")
    cli.flag("enum", "sampler", None, "How the draws pick each action (default: the run's decode.json).",
             enum_values=list(SAMPLERS))
    cli.flag("integer", "limit", 0, load.LIMIT_HELP)
    cli.flag("bool", "evaluate", False, "Also print the v2 tables and the report JSON (with --limit: marked "
             "partial, as evaluate --limit marks them).")


def check_flags() -> None:
    """Flag values checked before the model is loaded or anything is written."""
    cli.require_flags("checkpoint")
    if not FLAGS.out and not FLAGS.evaluate:
        raise UserError("--out is required (or --evaluate, to print the scores without writing predictions)")
    paths.check_output_file(FLAGS.out, "--out")
    if FLAGS.batch_size is not None and FLAGS.batch_size < 1:
        raise UserError(f"--batch_size is {FLAGS.batch_size}; expected an integer >= 1")
    if FLAGS.max_actions is not None and FLAGS.max_actions < 1:
        raise UserError(f"--max_actions is {FLAGS.max_actions}; expected an integer >= 1")
    if FLAGS.min_actions is not None and FLAGS.min_actions < 0:
        raise UserError(f"--min_actions is {FLAGS.min_actions}; expected an integer >= 0")
    load.check_limit(FLAGS.limit)
    DecodeSettings.check_flags(FLAGS.samples, FLAGS.temperature, FLAGS.cost, FLAGS.stop_rule, FLAGS.stop_threshold)


def main(argv) -> int:
    if len(argv) > 1:
        raise UserError(f"unexpected arguments: {' '.join(argv[1:])}")
    check_flags()
    run_eval.use_runs_cpu_devices([FLAGS.checkpoint])
    every = load.items_from_flags(FLAGS.corpus, FLAGS.split or "test", FLAGS.items, FLAGS.store, FLAGS.dataset)
    items = load.first_items(every, FLAGS.limit)
    start = time.time()
    predictions, _ = predict_with_run(FLAGS.checkpoint, items, slots=FLAGS.batch_size, max_actions=FLAGS.max_actions,
                                      min_actions=FLAGS.min_actions, stop_rule=FLAGS.stop_rule,
                                      stop_threshold=FLAGS.stop_threshold, samples=FLAGS.samples,
                                      temperature=FLAGS.temperature, cost=FLAGS.cost, sampler=FLAGS.sampler)
    elapsed = time.time() - start
    if FLAGS.out:
        jsonl.write_predictions(FLAGS.out, predictions)
    print(f"{f'wrote {len(predictions)} predictions to {FLAGS.out}' if FLAGS.out else f'predicted {len(predictions)} items'}"
          f" in {elapsed:.0f} s ({len(items) / elapsed:.1f} items/s, every decoding pass included)", file=sys.stderr)
    if FLAGS.evaluate:
        report = evaluator.evaluate_predictions(items, predictions)
        if FLAGS.limit:
            evaluator.mark_partial(report, len(items), len(every))
        print(evaluator.format_report(report, fmt="text"))
        print(json.dumps(report))
    return 0


if __name__ == "__main__":
    cli.run(main, define_flags)
