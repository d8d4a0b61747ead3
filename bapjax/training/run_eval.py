"""Decoding and scoring a run: its decode settings (config.eval with the STOP rule, and the
minimum-Bayes-risk sampling if any, a cost or a rule per kind of board, it chose on val:
<workdir>/decode.json, written and read only here), the `Evaluator` training scores val and test with, and predictions of a trained model in
the evaluator's JSONL format (the command `python -m bapjax.predict` writes them)."""

from __future__ import annotations

import dataclasses
import json
import sys

import jax

from bapjax import sharding
from bapjax.data import input_pipeline
from bapjax.errors import UserError
from bapjax.evaluation import evaluator
from bapjax.training import checkpoints, decode, ensemble, mbr, run_checks
from bapjax.world import jsonl

DECODE_SETTINGS = "decode.json"  # in a run's workdir: the decoding chosen on val (`Evaluator.choose_decoding`)
CHOICE_FIELDS = ("stop_rule", "stop_threshold")  # what decode.json always keeps of the chosen decoding
SAMPLING_FIELDS = ("samples", "temperature", "cost", "rules")  # and those of these a choice with draws has


def read_decode_choice(run_dir) -> dict | None:
    """<run_dir>/decode.json (the decoding the run chose on val, `Evaluator.choose_decoding`), or
    None where the run has none: the one reader of the file."""
    if not (run_dir / DECODE_SETTINGS).exists():
        return None
    return run_checks.read_run_file(run_dir, DECODE_SETTINGS, CHOICE_FIELDS)  # damage: one line


def write_decode_choice(workdir, choice: dict) -> None:
    """<workdir>/decode.json: `choice` as `Evaluator.choose_decoding` returns it."""
    (workdir / DECODE_SETTINGS).write_text(json.dumps(choice, indent=1))


def use_runs_cpu_devices(paths) -> int:
    """Before JAX runs anything in a command that decodes trained runs: the CPU split into as many XLA
    devices as the most any of them trained on (their `config.cpu_devices`), since decoding over
    several devices is faster on a small CPU as training is (`sharding.set_cpu_devices`). The
    predictions are the same on any count, so a process whose JAX already started keeps its devices,
    and a path that is not a run is left for the loader to name. Returns the count (0: JAX's default)."""
    count = 0
    for path in paths:
        try:
            config = run_checks.read_run_file(checkpoints.find_run_dir(path), "config.json")
        except UserError:
            continue
        count = max(count, int(config.get("cpu_devices", 0) or 0))
    try:
        sharding.set_cpu_devices(count)
    except ValueError:
        pass
    return count


def run_decode_settings(run_dir, config) -> decode.DecodeSettings:
    """How a run decodes: config.eval's settings with the STOP rule (and the sampling, if any:
    `samples`, `temperature`, `cost` or `rules`, and the `sampler` its draws use) of <run_dir>/decode.json if
    the run has chosen them (its final evaluation, `predict_with_run` and the benchmarks); a
    decode.json without sampling: greedy."""
    return decode.DecodeSettings.from_eval_config(config.eval).chosen(read_decode_choice(run_dir))


class Evaluator:
    """Decoding of items (greedy, or chosen among draws: `bapjax.training.decode.predict`) and the
    v2 evaluator's report, on this host only (over its local devices, with a local copy of the
    replicated params), so it also works when the training mesh spans hosts. One compiled
    decoder per `DecodeSettings.program` (a decoding up to its STOP threshold, number of draws and
    selection cost)."""

    def __init__(self, model, vocab, feature_config):
        self.model, self.vocab, self.feature_config = model, vocab, feature_config
        self.mesh = sharding.data_mesh(jax.local_devices())
        self.decoders = decode.Decoders(model, self.mesh)

    def local_params(self, params):
        """This host's copy of the replicated `params`, replicated over its local devices."""
        return sharding.replicate(jax.tree_util.tree_map(lambda x: x.addressable_data(0), params), self.mesh)

    def candidates(self, params, items, settings: decode.DecodeSettings) -> list[dict]:
        """`decode.candidates` of `items` (the greedy decoding, then `settings.samples` draws)."""
        return decode.candidates(self.model, self.local_params(params), items, self.vocab, self.feature_config,
                                 settings, decode_fn=self.decoders(settings), mesh=self.mesh)

    def split(self, params, items, settings: decode.DecodeSettings, predictions_path=None) -> dict:
        """The v2 report of `items` decoded with `settings`; with `predictions_path` (a path object
        with `write_text`), the predictions are also written there as predictions JSONL
        (`bapjax.world.jsonl`, what `bapjax.evaluate --predictions` reads)."""
        predictions = decode.predict(self.model, self.local_params(params), items, self.vocab, self.feature_config,
                                     settings, decode_fn=self.decoders(settings), mesh=self.mesh)
        if predictions_path is not None:  # an epath.Path: a run's workdir may be a bucket
            predictions_path.parent.mkdir(parents=True, exist_ok=True)
            predictions_path.write_text(jsonl.predictions_jsonl(predictions))
        return evaluator.evaluate_predictions(items, predictions, drop_infeasible=False)

    def choose_decoding(self, params, val_items, eval_config, chosen_on: str = "val",
                        log_fn=lambda message, *args: print(message % args, file=sys.stderr)) -> dict:
        """The decoding chosen on val, as decode.json keeps it (`write_decode_choice`; read back by
        `DecodeSettings.chosen`): "argmax", "mass" at each of `config.eval.stop_thresholds` and,
        for a model with a length head, "length" at each of `config.eval.length_quantiles`; then,
        with `config.eval.samples` > 0, the winning rule with minimum-Bayes-risk selection among
        the greedy decoding and that many draws (`bapjax.training.mbr`) at each of
        `config.eval.temperatures` (drawn once per temperature) and each of `config.eval.costs`;
        then, with `config.eval.vote_samples` > 0, the winning rule with that many draws at
        `config.eval.vote_temperature`, combined by one rule for the items on an empty board and one
        for the others ("rules": "select" at each of `ensemble.COSTS`, "vote" at each of
        `ensemble.THRESHOLDS`; `ensemble.choose_combination` over the run as its one member), or
        by the two rules `config.eval.vote_rules` fixes (only scored).
        The highest val micro Overall (fairer) F1 wins (ties: the first tried, greedy before
        sampled, one rule for every item before a rule per board). `chosen_on` names the items
        ("val": every source's val; "mc:val": one source's); "candidates" lists every decoding
        tried with its val F1."""
        base = decode.DecodeSettings.from_eval_config(eval_config)
        rules = [("argmax", 0.5)] + [("mass", float(t)) for t in eval_config.stop_thresholds]
        if getattr(self.model, "length_head", False):
            rules += [("length", float(q)) for q in eval_config.length_quantiles]
        rows = []

        def score(settings: decode.DecodeSettings, predictions: dict):
            rows.append(_val_row(settings, evaluator.headline(evaluator.evaluate_predictions(
                val_items, predictions, drop_infeasible=False))))
            log_fn("val with %s: micro Overall F1 %.4f, %.2f net actions per item", settings.describe(),
                   rows[-1]["val_overall_micro_f1"], rows[-1]["mean_predicted_net_actions"])

        for rule, threshold in rules:
            settings = base.replace(stop_rule=rule, stop_threshold=threshold)
            score(settings, self.candidates(params, val_items, settings)[0])
        greedy_best = max(rows, key=lambda r: r["val_overall_micro_f1"])
        for temperature in (eval_config.temperatures if int(eval_config.samples) else ()):
            sampled = base.replace(stop_rule=greedy_best["stop_rule"], stop_threshold=greedy_best["stop_threshold"],
                                   samples=int(eval_config.samples), temperature=float(temperature))
            passes = self.candidates(params, val_items, sampled)
            for cost in eval_config.costs:
                settings = sampled.replace(cost=float(cost))
                score(settings, decode.select(passes, settings))
        if int(eval_config.vote_samples):
            voted = base.replace(stop_rule=greedy_best["stop_rule"], stop_threshold=greedy_best["stop_threshold"],
                                 samples=int(eval_config.vote_samples), temperature=float(eval_config.vote_temperature))
            passes = self.candidates(params, val_items, voted)
            pair = ensemble.run_vote_rules(eval_config.vote_rules)  # fixed beforehand, or None: chosen here
            if pair is None:
                choice = ensemble.choose_combination(ensemble.pool([passes]), val_items, ensemble.COSTS,
                                                     ensemble.THRESHOLDS)
                for row in choice["candidates"]:  # one rule for every item, scored by choose_combination
                    settings = voted.replace(rules=((row["rule"], row["value"]),) * len(mbr.BOARDS))
                    rows.append(_val_row(settings, row))
                    log_fn("val with %s: micro Overall F1 %.4f, %.2f net actions per item", settings.describe(),
                           row["micro_overall"], row["mean_predicted_net_actions"])
                pair = {kind: (choice[kind]["rule"], choice[kind]["value"]) for kind in mbr.BOARDS}
            settings = voted.replace(rules=tuple(pair[kind] for kind in mbr.BOARDS))
            score(settings, decode.select(passes, settings, val_items))
        best = max(rows, key=lambda r: r["val_overall_micro_f1"])  # ties: the first
        fields = CHOICE_FIELDS + (tuple(key for key in SAMPLING_FIELDS if key in best) if best["samples"] else ())
        return {**{key: best[key] for key in fields}, "sampler": base.sampler, "chosen_on": chosen_on,
                "val_items": len(val_items), "candidates": rows}


def _val_row(settings: decode.DecodeSettings, headline: dict) -> dict:
    """A decoding tried on val, as decode.json's "candidates" list it: its settings and scores
    (`headline`: `evaluator.headline` of its val report)."""
    sampled = {}
    if settings.samples:
        sampled = ({"temperature": settings.temperature, "rules": settings.rules_json()} if settings.rules
                   else {"temperature": settings.temperature, "cost": settings.cost})
    return {"stop_rule": settings.stop_rule, "stop_threshold": settings.stop_threshold,
            "samples": settings.samples, **sampled,
            "val_overall_micro_f1": headline["micro_overall"],
            "mean_predicted_net_actions": headline["mean_predicted_net_actions"]}


@dataclasses.dataclass
class RunDecoder:
    """A training run loaded once, with its decoding settings and compiled decoder kept: what
    `predict_with_run` does per call, split so a long-lived process (``bapjax.play``) loads the
    checkpoint and compiles once and decodes many times (`predict`). It decodes over this host's
    devices, as a run's own evals do (`Evaluator`): `mesh`, with `params` replicated on it."""

    run: checkpoints.TrainedRun
    settings: decode.DecodeSettings
    feature_config: input_pipeline.FeatureConfig
    decoders: decode.Decoders  # the run model's, one compiled decoder per `DecodeSettings.program`
    mesh: jax.sharding.Mesh
    params: dict  # run.params, replicated over `mesh`

    @classmethod
    def load(cls, checkpoint, **overrides) -> "RunDecoder":
        """The run's best (else latest) checkpoint with `run_decode_settings` (its config.eval
        with the decoding it chose on val); `overrides` are `DecodeSettings` fields (`slots`,
        `max_actions`, `stop_rule`, `samples`, ...) whose value, where not None, replaces the run's;
        a `cost` selects at that cost instead of by the run's rules per board, if it has them."""
        run = checkpoints.load_run(checkpoint)
        settings = run_decode_settings(run.run_dir, run.config)  # a damaged decode.json names itself
        mesh = sharding.data_mesh(jax.local_devices())
        decoders = decode.Decoders(run.model, mesh)
        if overrides.get("cost") is not None:
            overrides["rules"] = ()
        try:
            settings = settings.replace(**overrides)
            decoders(settings)  # e.g. the STOP rule "length" of a model without a length head
        except ValueError as err:
            raise UserError(f"{checkpoint}: {err}") from None
        return cls(run, settings, input_pipeline.FeatureConfig.from_config(run.config), decoders, mesh,
                   sharding.replicate(run.params, mesh))

    @property
    def decode_fn(self) -> decode.Decoder:
        """The decoder of the run's own settings."""
        return self.decoders(self.settings)

    def decode_fn_for(self, settings: decode.DecodeSettings) -> decode.Decoder:
        """The decoder of `settings`: the run's compiled programs where they compile to its program
        (`DecodeSettings.program`: e.g. only the number of draws or the STOP threshold differs),
        else programs compiled for them once (another temperature, STOP rule, ...)."""
        return self.decoders(settings)

    def predict(self, items: list, progress: bool = False, first_draw: int = 0) -> dict:
        """Predictions {item_id: [Action]} of `items` as the run decodes (`decode.predict`: greedy,
        or chosen among draws, from draw `first_draw` on)."""
        run = self.run
        return decode.predict(run.model, self.params, items, run.vocab, self.feature_config, self.settings,
                              decode_fn=self.decode_fn, mesh=self.mesh, progress=progress, first_draw=first_draw)

    def predict_items(self, items: list, *, lengths: dict[str, int] | None = None,
                      sample: int | None = None) -> dict:
        """One decoding pass of `items` with the run's settings (`decode.predict_items`): greedy,
        forced `lengths` {item_id: k}, or draw number `sample`."""
        run = self.run
        return decode.predict_items(run.model, self.params, items, run.vocab, self.feature_config, self.settings,
                                    lengths=lengths, sample=sample, decode_fn=self.decode_fn, mesh=self.mesh)


def predict_with_run(checkpoint, items: list, progress: bool = True, **overrides):
    """Predictions {item_id: [Action]} of a training run's best (else latest) checkpoint,
    decoded as the run's own final evaluation does (`run_decode_settings`: its config.eval
    with the decoding it chose on val); `overrides` as `RunDecoder.load` takes them.
    Returns (predictions, the DecodeSettings used). `RunDecoder` keeps the loaded run for more calls."""
    decoder = RunDecoder.load(checkpoint, **overrides)
    return decoder.predict(items, progress=progress), decoder.settings
