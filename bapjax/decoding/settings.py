"""A decoding from config.eval (and a run's decode.json) to the kernel: `DecodeSettings` (its length
limits, pool size, STOP rule, draws and how one prediction is picked from them), the one check of
each part (`check_sampling`, `check_rules`, and `kernel.check_stop_rule`), and the compiled
decoders of a model (`Decoders`: one jitted function per `DecodeSettings.program`, its STOP
threshold an argument and its `kernel.Mode` a static one).
"""

from __future__ import annotations

import dataclasses

import jax
import numpy as np

from bapjax import sharding
from bapjax.decoding import mbr
from bapjax.decoding.kernel import GREEDY, LEGACY_SAMPLER, SAMPLERS, Mode, check_stop_rule, decode_pool
from bapjax.errors import UserError
from bapjax.models.builder import BuilderModel

DEFAULT_COST = 0.1  # "select"'s cost per predicted action where nothing chose one


@dataclasses.dataclass(frozen=True)
class DecodeSettings:
    """How a run decodes, from config.eval (`from_eval_config`) to the kernel (`decode_pool`), in
    two visible parts, checked on construction. What to decode: its length limits, pool size and
    STOP rule, and the greedy pass alone (`samples` 0) or with `samples` draws at `temperature`
    picked by `sampler`. How one prediction is picked from the greedy pass and its draws: `rules`,
    one (rule, value) per kind of board (`mbr.BOARDS` order, `mbr.combine_item`'s rules: "select"
    at a cost per predicted action, the minimum-Bayes-risk selection, or "vote" at a share of the
    draws; `select_at(cost)`: "select" at one cost on every board); without draws the greedy pass
    is the prediction. A run's own settings are
    `bapjax.training.run_eval.run_decode_settings` (config.eval with the decoding the run chose on
    val, `chosen`)."""

    max_actions: int
    min_actions: int
    slots: int
    stop_rule: str = "argmax"
    stop_threshold: float = 0.5
    samples: int = 0
    temperature: float = 1.0
    sampler: str = SAMPLERS[0]
    rules: tuple = (("select", DEFAULT_COST),) * len(mbr.BOARDS)  # (rule, value) for EB items, then NEB

    def __post_init__(self):
        check_stop_rule(self.stop_rule, self.stop_threshold)
        if self.max_actions < 1 or not 0 <= self.min_actions <= self.max_actions or self.slots < 1:
            raise ValueError(f"decoding needs max_actions >= 1, 0 <= min_actions <= max_actions and slots >= 1, "
                             f"got {self.max_actions}, {self.min_actions}, {self.slots}")
        check_sampling(self.samples, self.temperature)
        if self.sampler not in SAMPLERS:
            raise ValueError(f"the sampler must be one of {', '.join(SAMPLERS)}, got {self.sampler!r}")
        check_rules(self.rules)

    @classmethod
    def from_eval_config(cls, eval_config) -> "DecodeSettings":
        """config.eval's settings (a config completed by `run_checks.with_defaults`): greedy, with
        config.eval's STOP rule."""
        return cls(int(eval_config.max_actions), int(eval_config.min_actions), int(eval_config.batch_size),
                   str(eval_config.stop_rule), float(eval_config.stop_threshold))

    def describe(self) -> str:
        """"STOP rule <rule>, threshold <t>" and, with samples, how the decoding chooses among draws."""
        return f"STOP rule {self.stop_rule}, threshold {self.stop_threshold:g}" + describe_sampling(
            self.samples, self.temperature, self.rules)

    def replace(self, **changes) -> "DecodeSettings":
        """A copy with the given fields changed; a None value keeps the field."""
        return dataclasses.replace(self, **{k: v for k, v in changes.items() if v is not None})

    def program(self) -> "DecodeSettings":
        """These settings less what the compiled decoder takes as an argument (the STOP threshold) or
        does not depend on (the number of draws, the selection cost): settings with equal programs
        share one `compiled_decoder`, so choosing a threshold on val compiles one decoder per STOP rule."""
        return dataclasses.replace(self, stop_threshold=DecodeSettings.stop_threshold, samples=0,
                                   rules=DecodeSettings.rules)

    def compiled_decoder(self, model: BuilderModel, mesh=None):
        """The jitted `(params, batch, lengths, sample_keys, stop_threshold, mode) -> ids` of these
        settings' `program()`: `decode_pool` in `mode` (a `kernel.Mode`, static: one program per mode
        and call shape) with the STOP threshold a float32 scalar argument. The comparisons are those
        of a threshold written into the program, except that "mass" takes the threshold's log at run
        time instead of at compile time: the same float32 for every threshold of config.eval's grids
        (`tests/test_decode.py`), one unit in the last place apart for a few others (0.45). With a
        `mesh`, the rows (of the batch, lengths and keys) are split over its 'data' axis and each
        device decodes its rows with `slots / devices` slots."""
        check_stop_rule(self.stop_rule, self.stop_threshold, model)
        devices = 1 if mesh is None else mesh.size
        per_device = self.replace(slots=max(1, self.slots // devices))

        def decode(params, batch, lengths, sample_keys, stop_threshold, mode: Mode):
            def rows_fn(shared, rows):  # shared: what every device reads whole (params, threshold)
                params, stop_threshold = shared
                return decode_pool(model, params, rows["batch"], per_device, mode, lengths=rows["lengths"],
                                   sample_keys=rows["sample_keys"], stop_threshold=stop_threshold)

            if mesh is not None:
                rows_fn = sharding.per_device(rows_fn, mesh, out_specs=sharding.DATA_SPEC)
            return rows_fn((params, stop_threshold), {"batch": batch, "lengths": lengths, "sample_keys": sample_keys})

        return jax.jit(decode, static_argnames="mode")

    def decode_fn(self, model: BuilderModel, mesh=None, compiled=None) -> "Decoder":
        """A `(params, batch, mode=GREEDY, lengths=None, sample_keys=None) -> ids`: `decode_pool`
        with these settings in `mode` (`kernel.Mode`: by the STOP rule, [N, max_actions]; forced
        `lengths` [N]; `Mode(draws=K)`: K draws per row at `temperature` with `sample_keys`
        [N, K, 2], ids [N, K, max_actions]), `compiled`'s programs with this STOP threshold.
        `compiled`: the `compiled_decoder` of settings with the same `program()` and mesh (e.g.
        another threshold), whose compiled programs (one per mode) this shares; default: a new one."""
        check_stop_rule(self.stop_rule, self.stop_threshold, model)
        return Decoder(compiled or self.compiled_decoder(model, mesh), np.float32(self.stop_threshold))

    def chosen(self, choice: dict | None) -> "DecodeSettings":
        """These settings with a run's choice on val (decode.json's `stop_rule`, `stop_threshold`
        and, if it chose sampling, `samples`, `temperature` and `rules` {"EB": {"rule", "value"},
        "NEB": {...}}, or in a file written before rules per board, `cost`: "select" at it on every
        board; without them: greedy; its `sampler`, or `LEGACY_SAMPLER` for a file written before
        it was recorded, so a run's draws stay the ones it chose with); None: unchanged."""
        if choice is None:
            return self
        return dataclasses.replace(
            self, stop_rule=choice["stop_rule"], stop_threshold=float(choice["stop_threshold"]),
            samples=int(choice.get("samples", 0)), temperature=float(choice.get("temperature", self.temperature)),
            sampler=str(choice.get("sampler", LEGACY_SAMPLER)), rules=choice_rules(choice, self.rules))

    def at_cost(self, cost: float) -> "DecodeSettings":
        """A copy picking by "select" at `cost` per predicted action on every kind of board."""
        return dataclasses.replace(self, rules=select_at(cost))

    def rules_json(self) -> dict:
        """`rules` as decode.json keeps them: {"EB": {"rule", "value"}, "NEB": {...}}."""
        return {kind: {"rule": rule, "value": value} for kind, (rule, value) in zip(mbr.BOARDS, self.rules)}

    @staticmethod
    def describe_choice(choice: dict) -> str:
        """"<STOP rule> at <threshold>" and, with draws, how one prediction is picked from them: a
        decode.json (`bapjax.decoding.on_val.choose_decoding`'s result, old files included) in words."""
        sampled = describe_sampling(choice.get("samples", 0), choice.get("temperature"),
                                    choice_rules(choice, DecodeSettings.rules))
        return f"{choice['stop_rule']} at {choice['stop_threshold']}{sampled}"

    @staticmethod
    def check_flags(samples: int | None = None, temperature: float | None = None, cost: float | None = None,
                    stop_rule: str | None = None, stop_threshold: float | None = None) -> None:
        """A command's decoding flags (None: not given, the run's own): `--samples` and `--temperature`
        by `check_sampling`'s rule, `--cost` by the rule "select"'s (`mbr.check_rule`),
        `--stop_rule`/`--stop_threshold` by `kernel.check_stop_rule`'s; a broken rule is one
        UserError naming the flag at fault."""
        for name, value, check in (("samples", samples, lambda: check_sampling(samples, 1.0)),
                                   ("temperature", temperature, lambda: check_sampling(0, temperature)),
                                   ("cost", cost, lambda: mbr.check_rule("select", cost))):
            if value is not None:
                try:
                    check()
                except ValueError as err:
                    raise UserError(f"--{name}: {err}") from None
        if stop_rule is not None or stop_threshold is not None:
            try:
                check_stop_rule(stop_rule or "argmax", 0.5 if stop_threshold is None else stop_threshold)
            except ValueError as err:
                raise UserError(f"--stop_rule/--stop_threshold: {err}") from None

    @staticmethod
    def eval_checks(eval_config, build_model=lambda: None) -> list:
        """config.eval's decoding fields, each with the check that owns it: [(field, thunk)], a thunk
        raising ValueError for a value out of its range (`build_model()`: the run's model, built in
        the STOP rule's thunk, for the rule "length"'s length head). The training config's
        validation runs them and names the field."""
        ec = eval_config
        return [
            ("eval", lambda: DecodeSettings.from_eval_config(ec)),
            ("eval.stop_rule", lambda: check_stop_rule(ec.stop_rule, ec.stop_threshold, build_model())),
            ("eval.stop_thresholds", lambda: [check_stop_rule("mass", t) for t in ec.stop_thresholds]),
            ("eval.length_quantiles", lambda: [check_stop_rule("length", q) for q in ec.length_quantiles]),
            ("eval.samples", lambda: check_sampling(ec.samples, 1.0)),
            ("eval.temperatures", lambda: [check_sampling(0, t) for t in ec.temperatures]),
            ("eval.costs", lambda: [mbr.check_rule("select", c) for c in ec.costs]),
            ("eval.vote_samples", lambda: check_sampling(ec.vote_samples, 1.0)),
            ("eval.vote_temperature", lambda: check_sampling(0, ec.vote_temperature)),
            ("eval.vote_rules", lambda: mbr.run_vote_rules(ec.vote_rules)),
        ]

    @staticmethod
    def parse_rules(texts, members: int | None = None) -> dict:
        """Two rules written RULE:VALUE (`--rules`), for the items on an empty board and then for the
        others, as {"EB": (rule, value), "NEB": (rule, value)} (`mbr.parse_rules`: checked against
        an ensemble of `members` runs; None: a run's own draws); UserError naming the text at fault."""
        try:
            return mbr.parse_rules(texts, members)
        except ValueError as err:
            raise UserError(f"--rules {err}") from None


@dataclasses.dataclass(frozen=True)
class Decoder:
    """A compiled decoder (`DecodeSettings.compiled_decoder`) with its STOP threshold bound:
    called as `(params, batch, mode=GREEDY, lengths=None, sample_keys=None) -> ids` (`decode_fn`;
    the arrays `mode` names, checked by `kernel.Mode.check`); `lower` takes the same."""

    compiled: object  # the jitted function; it keeps its compiled programs between calls
    stop_threshold: np.float32

    def __call__(self, params, batch, mode: Mode = GREEDY, lengths=None, sample_keys=None):
        return self.compiled(params, batch, lengths, sample_keys, self.stop_threshold, mode=mode)

    def lower(self, params, batch, mode: Mode = GREEDY, lengths=None, sample_keys=None):
        return self.compiled.lower(params, batch, lengths, sample_keys, self.stop_threshold, mode=mode)


class Decoders:
    """The decoders of one model (and mesh), one `compiled_decoder` per `DecodeSettings.program`
    shared by every settings with that program (e.g. all thresholds of one STOP rule) and every mode:
    `decoders(settings)` is `settings.decode_fn` over that compiled decoder, compiled on first use."""

    def __init__(self, model: BuilderModel, mesh=None):
        self.model, self.mesh = model, mesh
        self._compiled = {}

    def __call__(self, settings: DecodeSettings) -> Decoder:
        key = settings.program()
        if key not in self._compiled:
            self._compiled[key] = settings.compiled_decoder(self.model, self.mesh)
        return settings.decode_fn(self.model, self.mesh, compiled=self._compiled[key])


def describe_sampling(samples: int, temperature: float, rules: tuple) -> str:
    """", greedy and K draws at temperature T, EB <rule> <value>, NEB <rule> <value>", or "" without draws."""
    if not samples:
        return ""
    return f", greedy and {samples} draws at temperature {temperature:g}, " + ", ".join(
        f"{kind} {rule} {value:g}" for kind, (rule, value) in zip(mbr.BOARDS, rules))


def select_at(cost: float) -> tuple:
    """The rules per board of "select" at `cost` per predicted action on every kind of board."""
    return (("select", float(cost)),) * len(mbr.BOARDS)


def choice_rules(choice: dict, default: tuple) -> tuple:
    """The rules per board of a decode.json choice (or candidate row): its "rules", or in a file
    written before rules per board, "select" at its "cost"; `default` where it has neither (greedy)."""
    if choice.get("rules"):
        return rules_from_json(choice["rules"])
    return select_at(choice["cost"]) if "cost" in choice else default


def rules_from_json(rules: dict) -> tuple:
    """decode.json's {"EB": {"rule", "value"}, "NEB": {...}} as `DecodeSettings.rules`."""
    return tuple((str(rules[kind]["rule"]), float(rules[kind]["value"])) for kind in mbr.BOARDS)


def check_rules(rules: tuple) -> None:
    """The one check of `DecodeSettings.rules`: a (rule, value) per kind of board (`mbr.BOARDS`),
    each `mbr.check_rule`'s: ValueError. (Without draws they are not used.)"""
    if len(rules) != len(mbr.BOARDS) or any(len(pair) != 2 for pair in rules):
        raise ValueError(f"the rules per board must be one (rule, value) per kind of board "
                         f"({', '.join(mbr.BOARDS)}), got {rules!r}")
    for rule, value in rules:
        mbr.check_rule(rule, value)


def check_sampling(samples: int, temperature: float) -> None:
    """The one check of the sampled decoding's settings: `samples` >= 0 draws per item (0: greedy
    only) at a `temperature` > 0: ValueError. (A cost per predicted action is the rule "select"'s
    value: `mbr.check_rule`.)"""
    if int(samples) != samples or samples < 0:
        raise ValueError(f"the number of samples must be an integer >= 0 (0: greedy only), got {samples!r}")
    if not float(temperature) > 0.0:
        raise ValueError(f"the sampling temperature must be > 0, got {temperature!r}")
