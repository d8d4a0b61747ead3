"""Decoding and scoring a run: its decode settings (config.eval with the STOP rule, and the
minimum-Bayes-risk sampling if any, it chose on val: <workdir>/decode.json, written and read only
here), the `Evaluator` training scores val and test with, and predictions of a trained model in
the evaluator's JSONL format (the command `python -m bapjax.predict` writes them)."""

from __future__ import annotations

import dataclasses
import json
import sys

import jax

from bapjax.data import input_pipeline
from bapjax.errors import UserError
from bapjax.evaluation import evaluator
from bapjax.training import checkpoints, decode, mbr, run_checks, sharding
from bapjax.world import jsonl

DECODE_SETTINGS = "decode.json"  # in a run's workdir: the decoding chosen on val (`Evaluator.tune_stop_rule`)


def run_decode_settings(run_dir, config) -> decode.DecodeSettings:
    """How a run decodes: config.eval's settings with the STOP rule (and the sampling, if any:
    `samples`, `temperature`, `cost`) of <run_dir>/decode.json if the run has chosen them (its final
    evaluation, `predict_with_run` and the benchmarks); a decode.json without sampling: greedy."""
    settings = decode.DecodeSettings.from_eval_config(config.eval)
    path = run_dir / DECODE_SETTINGS
    if path.exists():
        chosen = run_checks.read_run_file(run_dir, DECODE_SETTINGS, ("stop_rule", "stop_threshold"))
        settings = settings.replace(stop_rule=chosen["stop_rule"], stop_threshold=float(chosen["stop_threshold"]),
                                    samples=int(chosen.get("samples", 0)),
                                    temperature=float(chosen.get("temperature", settings.temperature)),
                                    cost=float(chosen.get("cost", settings.cost)))
    return settings


class Evaluator:
    """Decoding of items (greedy, or chosen among draws: `bapjax.training.mbr`) and the v2
    evaluator's report, on this host only (over its local devices, with a local copy of the
    replicated params), so it also works when the training mesh spans hosts. One compiled
    decoder per decoding (`DecodeSettings` up to its selection cost)."""

    def __init__(self, model, vocab, feature_config):
        self.model, self.vocab, self.feature_config = model, vocab, feature_config
        self.mesh = sharding.data_mesh(jax.local_devices())
        self._decode_fns = {}

    def decode_fn(self, settings: decode.DecodeSettings):
        key = dataclasses.replace(settings, samples=0, cost=decode.DecodeSettings.cost)  # what the program depends on
        if key not in self._decode_fns:
            self._decode_fns[key] = settings.decode_fn(self.model, self.mesh)
        return self._decode_fns[key]

    def local_params(self, params):
        """This host's copy of the replicated `params`, replicated over its local devices."""
        return sharding.replicate(jax.tree_util.tree_map(lambda x: x.addressable_data(0), params), self.mesh)

    def candidates(self, params, items, settings: decode.DecodeSettings) -> list[dict]:
        """`mbr.candidates` of `items` (the greedy decoding, then `settings.samples` draws)."""
        return mbr.candidates(self.model, self.local_params(params), items, self.vocab, self.feature_config,
                              settings, decode_fn=self.decode_fn(settings), mesh=self.mesh)

    def split(self, params, items, settings: decode.DecodeSettings, predictions_path=None) -> dict:
        """The v2 report of `items` decoded with `settings`; with `predictions_path` (a path object
        with `write_text`), the predictions are also written there as predictions JSONL
        (`bapjax.world.jsonl`, what `bapjax.evaluate --predictions` reads)."""
        predictions = mbr.predict_items(self.model, self.local_params(params), items, self.vocab, self.feature_config,
                                        settings, decode_fn=self.decode_fn(settings), mesh=self.mesh)
        if predictions_path is not None:  # an epath.Path: a run's workdir may be a bucket
            predictions_path.parent.mkdir(parents=True, exist_ok=True)
            predictions_path.write_text(jsonl.predictions_jsonl(predictions))
        return evaluator.evaluate_predictions(items, predictions, drop_infeasible=False)

    def tune_stop_rule(self, params, val_items, eval_config, workdir, chosen_on: str = "val",
                       log_fn=lambda message, *args: print(message % args, file=sys.stderr)) -> dict:
        """Pick the decoding on val: "argmax", "mass" at each of `config.eval.stop_thresholds` and,
        for a model with a length head, "length" at each of `config.eval.length_quantiles`; then,
        with `config.eval.mbr_samples` > 0, the winning rule with minimum-Bayes-risk selection
        among the greedy decoding and that many draws (`bapjax.training.mbr`) at each of
        `config.eval.mbr_temperatures` (drawn once per temperature) and each of
        `config.eval.mbr_costs`. The highest val micro Overall (fairer) F1 wins (ties: the first
        tried, greedy before sampled); written to <workdir>/decode.json. `chosen_on` names the
        items ("val": every source's val; "mc:val": one source's)."""
        base = decode.DecodeSettings.from_eval_config(eval_config)
        rules = [("argmax", 0.5)] + [("mass", float(t)) for t in eval_config.stop_thresholds]
        if getattr(self.model, "length_head", False):
            rules += [("length", float(q)) for q in eval_config.length_quantiles]
        rows = []

        def score(settings: decode.DecodeSettings, predictions: dict):
            report = evaluator.evaluate_predictions(val_items, predictions, drop_infeasible=False)
            sampled = {"temperature": settings.temperature, "cost": settings.cost} if settings.samples else {}
            rows.append({"stop_rule": settings.stop_rule, "stop_threshold": settings.stop_threshold,
                         "samples": settings.samples, **sampled,
                         "val_overall_micro_f1": float(report["micro"]["Overall"]["overall"]),
                         "mean_predicted_net_actions": report["counts"]["predicted_net_actions"] / max(report["counts"]["items"], 1)})
            log_fn("val with %s: micro Overall F1 %.4f, %.2f net actions per item", settings.describe(),
                   rows[-1]["val_overall_micro_f1"], rows[-1]["mean_predicted_net_actions"])

        for rule, threshold in rules:
            settings = base.replace(stop_rule=rule, stop_threshold=threshold)
            score(settings, self.candidates(params, val_items, settings)[0])
        greedy_best = max(rows, key=lambda r: r["val_overall_micro_f1"])
        for temperature in (eval_config.mbr_temperatures if int(eval_config.mbr_samples) else ()):
            sampled = base.replace(stop_rule=greedy_best["stop_rule"], stop_threshold=greedy_best["stop_threshold"],
                                   samples=int(eval_config.mbr_samples), temperature=float(temperature))
            passes = self.candidates(params, val_items, sampled)
            for cost in eval_config.mbr_costs:
                settings = sampled.replace(cost=float(cost))
                score(settings, mbr.select(passes, settings.cost))
        best = max(rows, key=lambda r: r["val_overall_micro_f1"])  # ties: the first
        chosen = {key: best[key] for key in ("stop_rule", "stop_threshold")}
        if best["samples"]:
            chosen.update({key: best[key] for key in ("samples", "temperature", "cost")})
        settings = {**chosen, "chosen_on": chosen_on, "val_items": len(val_items), "candidates": rows}
        (workdir / DECODE_SETTINGS).write_text(json.dumps(settings, indent=1))
        return settings


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
             stop_threshold: float | None = None, samples: int | None = None,
             temperature: float | None = None, cost: float | None = None) -> "RunDecoder":
        """The run's best (else latest) checkpoint with `run_decode_settings` (its config.eval
        with the decoding it chose on val); a value given here (not None) replaces the run's."""
        run = checkpoints.load_run(checkpoint)
        settings = run_decode_settings(run.run_dir, run.config)  # a damaged decode.json names itself
        try:
            settings = settings.replace(
                slots=batch_size, max_actions=max_actions, min_actions=min_actions, stop_rule=stop_rule,
                stop_threshold=stop_threshold, samples=samples, temperature=temperature, cost=cost)
        except ValueError as err:
            raise UserError(f"{checkpoint}: {err}") from None
        try:
            decode_fn = settings.decode_fn(run.model)
        except ValueError as err:  # e.g. the STOP rule "length" asked of a model without a length head
            raise UserError(f"{checkpoint}: {err}") from None
        return cls(run, settings, input_pipeline.FeatureConfig.from_config(run.config), decode_fn)

    def predict(self, items: list, progress: bool = False) -> dict:
        """Predictions {item_id: [Action]} of `items` (greedy, or chosen among draws: `mbr`)."""
        run = self.run
        return mbr.predict_items(run.model, run.params, items, run.vocab, self.feature_config, self.settings,
                                 decode_fn=self.decode_fn, progress=progress)


def predict_with_run(checkpoint, items: list, batch_size: int | None = None, *, max_actions: int | None = None,
                     min_actions: int | None = None, stop_rule: str | None = None,
                     stop_threshold: float | None = None, samples: int | None = None,
                     temperature: float | None = None, cost: float | None = None, progress: bool = True):
    """Predictions {item_id: [Action]} of a training run's best (else latest) checkpoint,
    decoded as the run's own final evaluation does (`run_decode_settings`: its config.eval
    with the decoding it chose on val); a value given here (not None) replaces the run's.
    Returns (predictions, the DecodeSettings used). `RunDecoder` keeps the loaded run for more calls."""
    decoder = RunDecoder.load(checkpoint, batch_size, max_actions=max_actions, min_actions=min_actions,
                              stop_rule=stop_rule, stop_threshold=stop_threshold, samples=samples,
                              temperature=temperature, cost=cost)
    return decoder.predict(items, progress=progress), decoder.settings
