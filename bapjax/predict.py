"""Decoding and scoring a run: its decode settings (config.eval with the STOP rule it chose on val,
<workdir>/decode.json, written and read only here), the `Evaluator` training scores val and test
with, and greedy predictions of a trained model in the evaluator's JSONL format.

    python -m bapjax.predict --checkpoint runs/cpu --corpus ../shared/mdc --split test --out preds.jsonl
    python -m bapjax.predict --checkpoint runs/cl --store data/store --split test --dataset bs --out bs.jsonl
    python -m bapjax.predict --checkpoint runs/cpu --items items.jsonl --out preds.jsonl --evaluate

`--checkpoint` is a training workdir (it holds config.json, vocab.json and checkpoints/best|latest)
or a checkpoints/best or /latest directory inside one; `--split` defaults to test. Then score with
`python -m bapjax.evaluate --predictions preds.jsonl --corpus ... --split ...` (or `--evaluate`).
"""

from __future__ import annotations

import dataclasses
import json
import sys
import time

import jax
from absl import flags

from bapjax import checkpoints, cli, decode, evaluate, formats, input_pipeline, sharding
from bapjax.corpus import load
from bapjax.errors import UserError

DECODE_SETTINGS = "decode.json"  # in a run's workdir: the STOP rule chosen on val (`Evaluator.tune_stop_rule`)


def run_decode_settings(run_dir, config) -> decode.DecodeSettings:
    """How a run decodes: config.eval's settings with the STOP rule of <run_dir>/decode.json if
    the run has chosen one (its final evaluation, `predict_with_run` and the benchmarks)."""
    settings = decode.DecodeSettings.from_eval_config(config.eval)
    path = run_dir / DECODE_SETTINGS
    if path.exists():
        chosen = json.loads(path.read_text())
        settings = settings.replace(stop_rule=chosen["stop_rule"], stop_threshold=float(chosen["stop_threshold"]))
    return settings


class Evaluator:
    """Greedy decoding of items and the v2 evaluator's report, on this host only (over its local
    devices, with a local copy of the replicated params), so it also works when the training
    mesh spans hosts. One compiled decoder per `DecodeSettings`."""

    def __init__(self, model, vocab, feature_config):
        self.model, self.vocab, self.feature_config = model, vocab, feature_config
        self.mesh = sharding.data_mesh(jax.local_devices())
        self._decode_fns = {}

    def decode_fn(self, settings: decode.DecodeSettings):
        if settings not in self._decode_fns:
            self._decode_fns[settings] = settings.decode_fn(self.model, self.mesh)
        return self._decode_fns[settings]

    def split(self, params, items, settings: decode.DecodeSettings, predictions_path=None) -> dict:
        """The v2 report of `items` decoded with `settings`; with `predictions_path` (a path object
        with `write_text`), the predictions are also written there as predictions JSONL
        (`bapjax.formats`, what `bapjax.evaluate --predictions` reads)."""
        local = sharding.replicate(jax.tree_util.tree_map(lambda x: x.addressable_data(0), params), self.mesh)
        predictions = decode.predict_items(self.model, local, items, self.vocab, self.feature_config,
                                           batch_size=settings.slots, max_actions=settings.max_actions,
                                           decode_fn=self.decode_fn(settings), mesh=self.mesh)
        if predictions_path is not None:  # an epath.Path: a run's workdir may be a bucket
            predictions_path.parent.mkdir(parents=True, exist_ok=True)
            predictions_path.write_text(formats.predictions_jsonl(predictions))
        return evaluate.evaluate_predictions(items, predictions, drop_infeasible=False)

    def tune_stop_rule(self, params, val_items, eval_config, workdir, chosen_on: str = "val",
                       log_fn=lambda message, *args: print(message % args, file=sys.stderr)) -> dict:
        """Pick the STOP rule on val: "argmax" and "mass" at each of `config.eval.stop_thresholds`,
        the highest val micro Overall (fairer) F1 wins; written to <workdir>/decode.json.
        `chosen_on` names the items ("val": every source's val; "mc:val": one source's)."""
        base = decode.DecodeSettings.from_eval_config(eval_config)
        candidates = [("argmax", 0.5)] + [("mass", float(t)) for t in eval_config.stop_thresholds]
        rows = []
        for rule, threshold in candidates:
            report = self.split(params, val_items, base.replace(stop_rule=rule, stop_threshold=threshold))
            rows.append({"stop_rule": rule, "stop_threshold": threshold,
                         "val_overall_micro_f1": float(report["micro"]["Overall"]["overall"]),
                         "mean_predicted_net_actions": report["counts"]["predicted_net_actions"] / max(report["counts"]["items"], 1)})
            log_fn("val with stop rule %s (threshold %.2f): micro Overall F1 %.4f, %.2f net actions per item",
                   rule, threshold, rows[-1]["val_overall_micro_f1"], rows[-1]["mean_predicted_net_actions"])
        best = max(rows, key=lambda r: r["val_overall_micro_f1"])
        settings = {"stop_rule": best["stop_rule"], "stop_threshold": best["stop_threshold"], "chosen_on": chosen_on,
                    "val_items": len(val_items), "candidates": rows}
        (workdir / DECODE_SETTINGS).write_text(json.dumps(settings, indent=1))
        return settings


FLAGS = flags.FLAGS


def define_flags() -> None:
    cli.flag("string", "checkpoint", None, "Training workdir (or its checkpoints/best or /latest).")
    cli.define_item_source_flags()  # --split defaults to test here (main)
    cli.flag("string", "out", None, "Output predictions JSONL.")
    cli.flag("integer", "batch_size", None, "Items decoded at once (default: the run's config.eval.batch_size).")
    cli.flag("integer", "max_actions", None, "Greedy decoding length (default: the run's config.eval.max_actions).")
    cli.flag("integer", "min_actions", None, "STOP is masked before this many actions (default: the run's "
             "config.eval.min_actions).")
    cli.flag("string", "stop_rule", None, "argmax or mass (default: the run's decode.json, tuned on val; "
             "else config.eval.stop_rule).")
    cli.flag("float", "stop_threshold", None, "p(STOP) threshold of the mass rule (default: the run's "
             "decode.json, else config.eval.stop_threshold).")
    cli.flag("integer", "limit", 0, "Predict only the first N items (0: all).")
    cli.flag("bool", "evaluate", False, "Also print the v2 tables and the report JSON.")


def check_flags() -> None:
    """Flag values checked before the model is loaded or anything is written."""
    if not FLAGS.checkpoint or not FLAGS.out:
        raise UserError("--checkpoint and --out are required")
    cli.check_output_file("out", FLAGS.out)
    if FLAGS.batch_size is not None and FLAGS.batch_size < 1:
        raise UserError(f"--batch_size is {FLAGS.batch_size}; expected an integer >= 1")
    if FLAGS.max_actions is not None and FLAGS.max_actions < 1:
        raise UserError(f"--max_actions is {FLAGS.max_actions}; expected an integer >= 1")
    if FLAGS.min_actions is not None and FLAGS.min_actions < 0:
        raise UserError(f"--min_actions is {FLAGS.min_actions}; expected an integer >= 0")
    if FLAGS.limit < 0:
        raise UserError(f"--limit is {FLAGS.limit}; expected an integer >= 0 (0: all)")
    try:
        decode.check_stop_rule(FLAGS.stop_rule or "argmax", 0.5 if FLAGS.stop_threshold is None else FLAGS.stop_threshold)
    except ValueError as err:
        raise UserError(f"--stop_rule/--stop_threshold: {err}") from None


@dataclasses.dataclass
class RunDecoder:
    """A training run loaded once, with its decoding settings and compiled decoder kept: what
    `predict_with_run` does per call, split so a long-lived process (``bapjax.play``) loads the
    checkpoint and compiles once and decodes many times (`predict`)."""

    run: checkpoints.TrainedRun
    settings: decode.DecodeSettings
    feature_config: input_pipeline.FeatureConfig
    decode_fn: object  # the jitted decoder; it keeps its compiled programs between calls

    @classmethod
    def load(cls, checkpoint, batch_size: int | None = None, *, max_actions: int | None = None,
             min_actions: int | None = None, stop_rule: str | None = None,
             stop_threshold: float | None = None) -> "RunDecoder":
        """The run's best (else latest) checkpoint with `run_decode_settings` (its config.eval
        with the STOP rule it chose on val); a value given here (not None) replaces the run's."""
        run = checkpoints.load_run(checkpoint)
        settings = run_decode_settings(run.run_dir, run.config).replace(
            slots=batch_size, max_actions=max_actions, min_actions=min_actions, stop_rule=stop_rule,
            stop_threshold=stop_threshold)
        return cls(run, settings, input_pipeline.FeatureConfig.from_config(run.config),
                   settings.decode_fn(run.model))

    def predict(self, items: list, progress: bool = False) -> dict:
        """Greedy predictions {item_id: [Action]} of `items`."""
        run, settings = self.run, self.settings
        return decode.predict_items(run.model, run.params, items, run.vocab, self.feature_config, settings.slots,
                                    settings.max_actions, decode_fn=self.decode_fn, progress=progress)


def predict_with_run(checkpoint, items: list, batch_size: int | None = None, *, max_actions: int | None = None,
                     min_actions: int | None = None, stop_rule: str | None = None,
                     stop_threshold: float | None = None, progress: bool = True):
    """Greedy predictions {item_id: [Action]} of a training run's best (else latest) checkpoint,
    decoded as the run's own final evaluation does (`run_decode_settings`: its config.eval
    with the STOP rule it chose on val); a value given here (not None) replaces the run's.
    Returns (predictions, the DecodeSettings used). `RunDecoder` keeps the loaded run for more calls."""
    decoder = RunDecoder.load(checkpoint, batch_size, max_actions=max_actions, min_actions=min_actions,
                              stop_rule=stop_rule, stop_threshold=stop_threshold)
    return decoder.predict(items, progress=progress), decoder.settings


def main(argv) -> int:
    if len(argv) > 1:
        raise UserError(f"unexpected arguments: {' '.join(argv[1:])}")
    check_flags()
    items = load.items_from_flags(FLAGS.corpus, FLAGS.split or "test", FLAGS.items, FLAGS.store, FLAGS.dataset)
    if FLAGS.limit:
        items = items[:FLAGS.limit]
    start = time.time()
    predictions, _ = predict_with_run(FLAGS.checkpoint, items, FLAGS.batch_size, max_actions=FLAGS.max_actions,
                                      min_actions=FLAGS.min_actions, stop_rule=FLAGS.stop_rule,
                                      stop_threshold=FLAGS.stop_threshold)
    elapsed = time.time() - start
    formats.write_predictions(FLAGS.out, predictions)
    print(f"wrote {len(predictions)} predictions to {FLAGS.out} ({len(items) / elapsed:.1f} items/s)",
          file=sys.stderr)
    if FLAGS.evaluate:
        report = evaluate.evaluate_predictions(items, predictions)
        print(evaluate.format_report(report, fmt="text"))
        print(json.dumps(report))
    return 0


if __name__ == "__main__":
    cli.run(main, define_flags)
