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


@dataclasses.dataclass(frozen=True)
class DecodeSettings:
    """How a run decodes, from config.eval (`from_eval_config`) to the kernel (`decode_pool`): its
    length limits, pool size, STOP rule and, with `samples` > 0, minimum-Bayes-risk selection among
    the greedy decoding and `samples` draws at `temperature` with `cost` per predicted action
    (`bapjax.decoding.mbr`), or, with `rules`, one rule per kind of board (`mbr.BOARDS` order:
    (rule, value) pairs of `mbr.combine_item`, "select" at a cost or "vote" at a share of the draws);
    checked on construction. A run's own settings are
    `bapjax.training.run_eval.run_decode_settings` (config.eval with the decoding the run chose on
    val, `chosen`)."""

    max_actions: int
    min_actions: int
    slots: int
    stop_rule: str = "argmax"
    stop_threshold: float = 0.5
    samples: int = 0
    temperature: float = 1.0
    cost: float = 0.1
    sampler: str = SAMPLERS[0]
    rules: tuple = ()  # ((rule, value) for the items on an empty board, (rule, value) for the others) or ()

    def __post_init__(self):
        check_stop_rule(self.stop_rule, self.stop_threshold)
        if self.max_actions < 1 or not 0 <= self.min_actions <= self.max_actions or self.slots < 1:
            raise ValueError(f"decoding needs max_actions >= 1, 0 <= min_actions <= max_actions and slots >= 1, "
                             f"got {self.max_actions}, {self.min_actions}, {self.slots}")
        check_sampling(self.samples, self.temperature, self.cost)
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
            self.samples, self.temperature, self.cost, self.rules)

    def replace(self, **changes) -> "DecodeSettings":
        """A copy with the given fields changed; a None value keeps the field."""
        return dataclasses.replace(self, **{k: v for k, v in changes.items() if v is not None})

    def program(self) -> "DecodeSettings":
        """These settings less what the compiled decoder takes as an argument (the STOP threshold) or
        does not depend on (the number of draws, the selection cost): settings with equal programs
        share one `compiled_decoder`, so choosing a threshold on val compiles one decoder per STOP rule."""
        return dataclasses.replace(self, stop_threshold=DecodeSettings.stop_threshold, samples=0,
                                   cost=DecodeSettings.cost, rules=())

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
        and, if it chose sampling, `samples`, `temperature` and `cost`, or `rules` {"EB": {"rule",
        "value"}, "NEB": {...}} instead of the cost; without them: greedy; its `sampler`, or
        `LEGACY_SAMPLER` for a file written before it was recorded, so a run's draws stay the ones
        it chose with); None: unchanged."""
        if choice is None:
            return self
        rules = choice.get("rules")
        return dataclasses.replace(
            self, stop_rule=choice["stop_rule"], stop_threshold=float(choice["stop_threshold"]),
            samples=int(choice.get("samples", 0)), temperature=float(choice.get("temperature", self.temperature)),
            cost=float(choice.get("cost", self.cost)), sampler=str(choice.get("sampler", LEGACY_SAMPLER)),
            rules=rules_from_json(rules) if rules else ())

    def rules_json(self) -> dict:
        """`rules` as decode.json keeps them: {"EB": {"rule", "value"}, "NEB": {...}}."""
        return {kind: {"rule": rule, "value": value} for kind, (rule, value) in zip(mbr.BOARDS, self.rules)}


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


def describe_sampling(samples: int, temperature: float, cost: float, rules: tuple = ()) -> str:
    """", best of greedy and K draws at temperature T (cost C per action)", with `rules` ", greedy
    and K draws at temperature T, EB <rule> <value>, NEB <rule> <value>", or "" without draws."""
    if not samples:
        return ""
    if rules:
        return f", greedy and {samples} draws at temperature {temperature:g}, " + ", ".join(
            f"{kind} {rule} {value:g}" for kind, (rule, value) in zip(mbr.BOARDS, rules))
    return f", best of greedy and {samples} draws at temperature {temperature:g} (cost {cost:g} per action)"


def rules_from_json(rules: dict) -> tuple:
    """decode.json's {"EB": {"rule", "value"}, "NEB": {...}} as `DecodeSettings.rules`."""
    return tuple((str(rules[kind]["rule"]), float(rules[kind]["value"])) for kind in mbr.BOARDS)


def check_rules(rules: tuple) -> None:
    """The one check of `DecodeSettings.rules`: empty, or a (rule, value) per kind of board
    (`mbr.BOARDS`), each `mbr.check_rule`'s: ValueError. (Without draws they are not used.)"""
    if rules and (len(rules) != len(mbr.BOARDS) or any(len(pair) != 2 for pair in rules)):
        raise ValueError(f"the rules per board must be one (rule, value) per kind of board "
                         f"({', '.join(mbr.BOARDS)}), got {rules!r}")
    for rule, value in rules:
        mbr.check_rule(rule, value)


def check_sampling(samples: int, temperature: float, cost: float | None = None) -> None:
    """The one check of the sampled decoding's settings: `samples` >= 0 draws per item (0: greedy
    only) at a `temperature` > 0, a `cost` per predicted action in [0, 1) (None: not checked): ValueError."""
    if int(samples) != samples or samples < 0:
        raise ValueError(f"the number of samples must be an integer >= 0 (0: greedy only), got {samples!r}")
    if not float(temperature) > 0.0:
        raise ValueError(f"the sampling temperature must be > 0, got {temperature!r}")
    if cost is not None and not 0.0 <= float(cost) < 1.0:
        raise ValueError(f"the cost per predicted action must be in [0, 1), got {cost!r}")


def check_sampling_flags(samples: int | None = None, temperature: float | None = None,
                         cost: float | None = None) -> None:
    """A command's `--samples`, `--temperature` and `--cost` (None: not given, the run's own):
    `check_sampling`'s rule, broken as one UserError naming the flag that breaks it."""
    for name, value, args in (("samples", samples, (samples, 1.0)), ("temperature", temperature, (0, temperature)),
                              ("cost", cost, (0, 1.0, cost))):
        if value is not None:
            try:
                check_sampling(*args)
            except ValueError as err:
                raise UserError(f"--{name}: {err}") from None
