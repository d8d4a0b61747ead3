"""Decoding trained models over this host's devices: `Evaluator` (a model's params, as a training
run's evals and final evaluation decode and score them, and its decoding chosen on val),
`RunDecoder` (a loaded run with its own decoding settings and compiled decoders, kept for many
calls: `bapjax.predict`, `bapjax.play`, the report; its passes and its own choice among them), and
`Ensemble` (several loaded runs' passes pooled per item, the rules per kind of board chosen on val
or fixed, then applied: `bapjax.ensemble`; a run's own vote is the same choice over one run's pool).
"""

from __future__ import annotations

import dataclasses

import jax

from bapjax import sharding
from bapjax.data import input_pipeline
from bapjax.decoding import decode, mbr, on_val
from bapjax.decoding.settings import Decoder, Decoders, DecodeSettings
from bapjax.evaluation import evaluator
from bapjax.world import grid as G
from bapjax.world import jsonl


class Evaluator:
    """Decoding of items (greedy, or chosen among draws: `bapjax.decoding.decode.predict`) and the
    v2 evaluator's report, on this host only (over its local devices, with a local copy of the
    replicated params), so it also works when the training mesh spans hosts. One compiled
    decoder per `DecodeSettings.program` (a decoding up to its STOP threshold, number of draws and
    selection cost). Its decoding chosen on val: `bapjax.decoding.on_val.choose_decoding(evaluator, ...)`."""

    def __init__(self, model, vocab, feature_config):
        self.model, self.vocab, self.feature_config = model, vocab, feature_config
        self.mesh = sharding.data_mesh(jax.local_devices())
        self.decoders = Decoders(model, self.mesh)

    def local_params(self, params):
        """This host's copy of the replicated `params`, replicated over its local devices."""
        return sharding.replicate(jax.tree_util.tree_map(lambda x: x.addressable_data(0), params), self.mesh)

    def candidates(self, params, items, settings: DecodeSettings) -> list[dict]:
        """`decode.candidates` of `items` (the greedy decoding, then `settings.samples` draws)."""
        return decode.candidates(self.model, self.local_params(params), items, self.vocab, self.feature_config,
                                 settings, decode_fn=self.decoders(settings), mesh=self.mesh)

    def split(self, params, items, settings: DecodeSettings, predictions_path=None) -> dict:
        """The v2 report of `items` decoded with `settings`; with `predictions_path` (a path object
        with `write_text`), the predictions are also written there as predictions JSONL
        (`bapjax.world.jsonl`, what `bapjax.evaluate --predictions` reads)."""
        predictions = decode.predict(self.model, self.local_params(params), items, self.vocab, self.feature_config,
                                     settings, decode_fn=self.decoders(settings), mesh=self.mesh)
        if predictions_path is not None:  # an epath.Path: a run's workdir may be a bucket
            predictions_path.parent.mkdir(parents=True, exist_ok=True)
            predictions_path.write_text(jsonl.predictions_jsonl(predictions))
        return evaluator.evaluate_predictions(items, predictions, drop_infeasible=False)

    def choose(self, params, val_items, eval_config, chosen_on: str = "val", log_fn=None) -> dict:
        """The decoding chosen on `val_items` (`on_val.choose_decoding`), as the run writes it to
        decode.json; `log_fn(message, *args)` hears a line per decoding tried (default: stderr)."""
        kwargs = {} if log_fn is None else {"log_fn": log_fn}
        return on_val.choose_decoding(self, params, val_items, eval_config, chosen_on=chosen_on, **kwargs)


@dataclasses.dataclass
class RunDecoder:
    """A training run loaded once, with its decoding settings and compiled decoder kept: what
    `bapjax.training.run_eval.predict_with_run` does per call, split so a long-lived process (``bapjax.play``) loads the
    checkpoint and compiles once and decodes many times (`predict`). It decodes over this host's
    devices, as a run's own evals do (`Evaluator`): `mesh`, with `params` replicated on it."""

    run: object  # a loaded run: `bapjax.training.checkpoints.TrainedRun`
    settings: DecodeSettings
    feature_config: input_pipeline.FeatureConfig
    decoders: Decoders  # the run model's, one compiled decoder per `DecodeSettings.program`
    mesh: jax.sharding.Mesh
    params: dict  # run.params, replicated over `mesh`

    @classmethod
    def of_run(cls, run, settings: DecodeSettings, **overrides) -> "RunDecoder":
        """A loaded run (`bapjax.training.checkpoints.load_run`) decoded with `settings` (the run's own:
        `bapjax.training.run_eval.run_decode_settings`); `overrides` are `DecodeSettings` fields
        (`slots`, `max_actions`, `stop_rule`, `samples`, ...) whose value, where not None, replaces
        the run's; a `cost` selects at that cost instead of by the run's rules per board, if it has
        them. ValueError: settings the run's model cannot decode with (e.g. the STOP rule "length"
        without a length head)."""
        mesh = sharding.data_mesh(jax.local_devices())
        decoders = Decoders(run.model, mesh)
        cost = overrides.pop("cost", None)
        settings = settings.replace(**overrides)
        if cost is not None:
            settings = settings.at_cost(cost)
        decoders(settings)
        return cls(run, settings, input_pipeline.FeatureConfig.from_config(run.config), decoders, mesh,
                   sharding.replicate(run.params, mesh))

    @property
    def decode_fn(self) -> Decoder:
        """The decoder of the run's own settings."""
        return self.decoders(self.settings)

    def decode_fn_for(self, settings: DecodeSettings) -> Decoder:
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

    def passes(self, items: list, samples: int | None = None, temperature: float | None = None,
               progress: bool = False, sampler: str | None = None, first_draw: int = 0) -> list[dict]:
        """[greedy, draw f, ..., draw f+K-1] of `items`, decoded with the run's own settings;
        `samples` (K), `temperature` and `sampler` (when not None) replace its number of draws, their
        temperature and how they pick actions; `first_draw` (f) picks another set of draws (draw k
        is the same whatever the others, `decode.candidates`). A run that chose greedy decoding on
        val has no temperature of its own: its draws take the first of its config.eval.temperatures."""
        if temperature is None and self.settings.samples == 0:
            temperature = float(self.run.config.eval.temperatures[0])
        settings = self.settings.replace(samples=samples, temperature=temperature, sampler=sampler)
        run = self.run
        return decode.candidates(run.model, self.params, items, run.vocab, self.feature_config, settings,
                                 decode_fn=self.decode_fn_for(settings), mesh=self.mesh, progress=progress,
                                 first_draw=first_draw)

    def alone(self, passes: list[dict], items: list) -> dict[str, list[G.Action]]:
        """The run's predictions of `items` from its `passes`, as it decodes alone (`decode.select`
        at its own settings; draw k is the same whatever the number of draws, so this is exactly its
        own decoding when the passes hold at least its number of draws, at its temperature)."""
        return decode.select(passes, self.settings, items)


@dataclasses.dataclass
class Ensemble:
    """Loaded runs (`RunDecoder`s) decoded together: each member's greedy pass and draws (`passes`,
    with the draws' settings here: None keeps each member's own) pooled per item (`pool`), the rules
    per kind of board chosen on val or fixed beforehand (`choose`), and applied (`predict`). A run
    is an ensemble of one: its own vote is `choose` over its one pool (`on_val.choose_decoding`)."""

    members: list
    samples: int | None = None
    temperature: float | None = None
    sampler: str | None = None
    first_draw: int = 0

    def pool(self, items: list, log_fn=None) -> mbr.Pool:
        """The `mbr.Pool` of every member's passes of `items` and its own decoding; `log_fn(i,
        passes, score)` after each member: its number of passes and its scores decoded alone
        (`on_val.score`)."""
        passes, own = [], []
        for i, member in enumerate(self.members):
            passes.append(member.passes(items, self.samples, self.temperature, sampler=self.sampler,
                                        first_draw=self.first_draw))
            own.append(member.alone(passes[-1], items))
            if log_fn is not None:
                log_fn(i, len(passes[-1]), on_val.score(items, own[-1]))
        return mbr.pool(passes, own)

    @staticmethod
    def choose(pooled, items: list, costs, thresholds, rules: dict | None = None) -> dict:
        """The rules per kind of board: chosen on `items` (val) among "select" at each of `costs`,
        "vote" at each of `thresholds` and "members" at each m (`on_val.choose_combination`), or
        `rules` fixed beforehand ({"EB": (rule, value), "NEB": ...}), scored on them where `pooled`
        is not None (`on_val.fixed_combination`)."""
        if rules is None:
            return on_val.choose_combination(pooled, items, costs, thresholds)
        return on_val.fixed_combination(pooled, items, rules)

    @staticmethod
    def predict(pooled, choice: dict, items: list) -> dict[str, list[G.Action]]:
        """Predictions of `items` from the pooled passes by the rules `choose` returned."""
        return mbr.combine_chosen(pooled, choice, items)
