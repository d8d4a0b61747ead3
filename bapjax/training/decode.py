"""Decoding as a pool of slots: one compiled `lax.while_loop` over a set of items, greedy, with
forced lengths, or sampled, each an explicit argument of `decode_pool`.

`slots` items decode at once. Each step embeds each slot's previous action, advances the decoder,
encodes the slot's current world (colors and recent-action channel after the actions so far,
`bapjax.models.world_input.advance_world`, the same rule as teacher forcing), masks infeasible
actions (`bapjax.world.grid.feasible_mask_single`: occupancy, support, the 20-per-color inventory),
and picks the next action. With the once architecture (`config.model.name="once"`) the start worlds of all rows of a call
are encoded once before the loop, and a step adds the slot's change features to its item's
encoding (`OnceBuilder.changed_world_logits`): no CNN inside the loop. A slot whose item stops
(STOP or `max_actions`) takes the next waiting item at once, so no work is spent on finished
items until the queue runs dry; the loop ends when every item is done. Under a mesh each device runs its own pool over its own items
(`bapjax.sharding.per_device`), so devices never wait for each other's longest item.

STOP rules: "argmax" takes the most likely of STOP and every single feasible action; "mass"
stops when p(STOP) >= `stop_threshold` (0.5: STOP more likely than continuing at all, i.e. than
the summed probability of the feasible actions), else takes the most likely action; "length"
(a model with `length_head`) decodes each item's length quantile `stop_threshold` of the length
head's distribution (`length_quantile`, computed once per item before the loop) as forced
`lengths` do, taking the most likely feasible action at each step. Greedy argmax over 7,623
actions favours STOP whenever the model is unsure *where* to build, which makes predictions short;
a run chooses its rule on val after training and keeps it in its decode.json
(`bapjax.training.run_eval`, where a run's decoding is chosen, written and read).

`DecodeSettings` carries a decoding from config.eval (and a run's decode.json) to the kernel; one
pass over BapItems is `predict_items` (greedy, forced `lengths`, or draw number `sample`),
several draws are `predict_draws` (an item's draws in one pool, its text and start world encoded
once), and `predict` decodes as the settings say: greedy, or with `samples` > 0 the
minimum-Bayes-risk selection (`bapjax.training.mbr`) among the greedy pass and the draws
(`candidates`), or with `rules` a rule per kind of board ("select" or "vote", `mbr.combine`).
"""

from __future__ import annotations

import dataclasses
import zlib
from typing import Sequence

import jax
import jax.numpy as jnp
import numpy as np

from bapjax import cli, sharding
from bapjax.data import input_pipeline
from bapjax.models import world_input
from bapjax.models.builder import START, BuilderModel
from bapjax.training import mbr
from bapjax.world import grid as G
from bapjax.world import rotation

NEG_INF = -1e9
STOP_RULES = ("argmax", "mass", "length")
# How a draw picks each step's action from the softmax of the feasible logits (`sample_actions`):
# "inverse_cdf" (one uniform number per row and step, against the cumulative probabilities) or
# "gumbel" (the Gumbel-max trick: a uniform number per action, 7,624 per row and step, several times
# slower on a CPU). Both draw from the same distribution, with other sequences for the same keys.
SAMPLERS = ("inverse_cdf", "gumbel")
LEGACY_SAMPLER = "gumbel"  # how the draws of a decode.json without a "sampler" field were made


def check_stop_rule(stop_rule: str, stop_threshold: float = 0.5, model: BuilderModel | None = None) -> None:
    """The one check of a STOP rule (`STOP_RULES`) and its threshold (in (0, 1]; for "length" the
    quantile), and, given the `model`, that it has the length head "length" needs: ValueError."""
    if stop_rule not in STOP_RULES:
        raise ValueError(f"the STOP rule must be {', '.join(STOP_RULES[:-1])} or {STOP_RULES[-1]}, got {stop_rule!r}")
    if not 0.0 < float(stop_threshold) <= 1.0:
        raise ValueError(f"the STOP threshold must be in (0, 1], got {stop_threshold!r}")
    if stop_rule == "length" and model is not None and not getattr(model, "length_head", False):
        raise ValueError("the STOP rule 'length' needs a model with a length head (a config.model.length section); "
                         "this model has none")


def length_quantile(length_logits: jax.Array, quantile: float) -> jax.Array:
    """Lengths [N] (int32, 1..LENGTH_CLASSES) from length-head logits [N, LENGTH_CLASSES]: per row the
    smallest length whose cumulative predicted probability is >= `quantile` (0.5: the median)."""
    cdf = jnp.cumsum(jax.nn.softmax(length_logits.astype(jnp.float32), axis=-1), axis=-1)
    below = (cdf < jnp.float32(quantile)).sum(-1)  # a row whose rounded cdf stays below 1 gets the last class
    return jnp.minimum(below + 1, length_logits.shape[-1]).astype(jnp.int32)


@dataclasses.dataclass(frozen=True)
class DecodeSettings:
    """How a run decodes, from config.eval (`from_eval_config`) to the kernel (`decode_pool`): its
    length limits, pool size, STOP rule and, with `samples` > 0, minimum-Bayes-risk selection among
    the greedy decoding and `samples` draws at `temperature` with `cost` per predicted action
    (`bapjax.training.mbr`), or, with `rules`, one rule per kind of board (`mbr.BOARDS` order:
    (rule, value) pairs of `mbr.combine`, "select" at a cost or "vote" at a share of the draws);
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
        """The jitted `(params, batch, lengths, sample_keys, stop_threshold) -> ids` of these
        settings' `program()`: `decode_pool` with the STOP threshold a float32 scalar argument. The
        comparisons are those of a threshold written into the program, except that "mass" takes the
        threshold's log at run time instead of at compile time: the same float32 for every threshold
        of config.eval's grids (`tests/test_decode.py`), one unit in the last place apart for a few
        others (0.45). With a
        `mesh`, the rows (of the batch, lengths and keys) are split over its 'data' axis and each
        device decodes its rows with `slots / devices` slots."""
        check_stop_rule(self.stop_rule, self.stop_threshold, model)
        devices = 1 if mesh is None else mesh.size
        per_device = self.replace(slots=max(1, self.slots // devices))

        def rows_fn(shared, rows):  # shared: what every device reads whole (params, threshold)
            params, stop_threshold = shared
            return decode_pool(model, params, rows["batch"], per_device, lengths=rows["lengths"],
                               sample_keys=rows["sample_keys"], stop_threshold=stop_threshold)

        if mesh is not None:
            rows_fn = sharding.per_device(rows_fn, mesh, out_specs=sharding.DATA_SPEC)
        return jax.jit(lambda params, batch, lengths, sample_keys, stop_threshold: rows_fn(
            (params, stop_threshold), {"batch": batch, "lengths": lengths, "sample_keys": sample_keys}))

    def decode_fn(self, model: BuilderModel, mesh=None, compiled=None) -> "Decoder":
        """A `(params, batch, lengths=None, sample_keys=None) -> ids [N, max_actions]`: `decode_pool`
        with these settings (greedy; forced `lengths`; drawn with `sample_keys` [N, 2] at
        `temperature`, or K draws per row with `sample_keys` [N, K, 2]: ids [N, K, max_actions]),
        `compiled`'s programs with this STOP threshold. `compiled`: the `compiled_decoder` of
        settings with the same `program()` and mesh (e.g. another threshold), whose compiled
        programs this shares; default: a new one."""
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
    called as `(params, batch, lengths=None, sample_keys=None) -> ids`; `lower` takes the same."""

    compiled: object  # the jitted function; it keeps its compiled programs between calls
    stop_threshold: np.float32

    def __call__(self, params, batch, lengths=None, sample_keys=None):
        return self.compiled(params, batch, lengths, sample_keys, self.stop_threshold)

    def lower(self, params, batch, lengths=None, sample_keys=None):
        return self.compiled.lower(params, batch, lengths, sample_keys, self.stop_threshold)


class Decoders:
    """The decoders of one model (and mesh), one `compiled_decoder` per `DecodeSettings.program`
    shared by every settings with that program (e.g. all thresholds of one STOP rule):
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


def choose_actions(logits: jax.Array, feasible: jax.Array, stop_rule: str, stop_threshold: float = 0.5) -> jax.Array:
    """Greedy choice [N] from logits [N, 7624] and a feasibility mask (STOP column included);
    `stop_rule` "argmax" or "length" (whose STOP the feasibility mask decides: `decode_pool`), else
    "mass" (names checked by `check_stop_rule`)."""
    masked = jnp.where(feasible, logits, NEG_INF)
    if stop_rule in ("argmax", "length"):
        return jnp.argmax(masked, axis=-1).astype(jnp.int32)
    best_action = jnp.argmax(masked[:, :G.STOP], axis=-1).astype(jnp.int32)
    log_p_stop = masked[:, G.STOP] - jax.nn.logsumexp(masked, axis=-1)
    stop = feasible[:, G.STOP] & (log_p_stop >= jnp.log(jnp.float32(stop_threshold)))
    return jnp.where(stop, G.STOP, best_action)


def sample_actions(keys: jax.Array, steps: jax.Array, logits: jax.Array, feasible: jax.Array,
                   temperature: float = 1.0, sampler: str = SAMPLERS[0]) -> jax.Array:
    """Actions [N] drawn from softmax(logits / temperature) over the feasible columns (STOP
    included), row n with the key `fold_in(keys[n], steps[n])` (`keys` [N, 2] uint32), by
    `sampler` (`SAMPLERS`). "inverse_cdf": the first column whose cumulative unnormalized
    probability exceeds a uniform fraction of their sum (a column of probability 0 never is; a row
    with no feasible column takes 0); "gumbel": `jax.random.categorical`."""
    keys = jax.vmap(jax.random.fold_in)(keys, steps)
    masked = jnp.where(feasible, logits.astype(jnp.float32) / jnp.float32(temperature), NEG_INF)
    if sampler == "gumbel":
        return jax.vmap(jax.random.categorical)(keys, masked).astype(jnp.int32)
    weights = jnp.where(feasible, jnp.exp(masked - masked.max(-1, keepdims=True)), 0.0)
    cumulative = jnp.cumsum(weights, axis=-1)
    total = cumulative[:, -1]
    u = jax.vmap(lambda key: jax.random.uniform(key, (), jnp.float32))(keys) * total
    index = (cumulative <= u[:, None]).sum(-1)
    last = weights.shape[-1] - 1 - jnp.argmax(feasible[:, ::-1], axis=-1)  # u rounded up to the total
    return jnp.where(total > 0, jnp.minimum(index, last), 0).astype(jnp.int32)


def decode_pool(model: BuilderModel, params, batch: dict, settings: DecodeSettings, *,
                lengths: jax.Array | None = None, sample_keys: jax.Array | None = None,
                teacher_actions: jax.Array | None = None, return_logits: bool = False,
                stop_threshold: jax.Array | None = None):
    """Action ids [N, settings.max_actions] (padded with STOP) for the N rows of `batch` (the
    pipeline's keys, `decode_keys`; rows with `weight` 0, if given, must come last and are not
    decoded), with `settings.slots` slots. `stop_threshold` (a float32 scalar, e.g. traced) replaces
    `settings.stop_threshold` (None: that one). Each row decodes in one of these modes:

    - greedy (the default): each step's action by `settings.stop_rule` (`choose_actions`); STOP is
      masked for the first `settings.min_actions` steps (every BAP item has at least one action, so
      1 is sound; `min_actions == max_actions` decodes exactly that many actions). The rule
      "length" gives each row its `length_quantile(stop_threshold)` of the model's length head.
    - forced length: `lengths` [N] (int, > 0) decodes exactly that many actions for its row (STOP
      masked before, forced at that step; capped at `max_actions`; 0 leaves the row to the STOP
      rule): with each item's reference length, the length ceiling of a model (what a perfect length
      head would allow it).
    - sampled: `sample_keys` [N, 2] (uint32 PRNG keys, one per row) draws each step's action from
      the softmax of the feasible logits at `settings.temperature` (STOP included, so the length
      is drawn too; the STOP masks of `min_actions` and forced lengths hold); row i's draw at step t
      uses `fold_in(sample_keys[i], t)`, so it depends on neither the slots nor the devices
      (`sample_actions`; `sample_keys(sample, item_ids)` builds the keys of draw number `sample`).
      `sample_keys` [N, K, 2] draws K sequences per row in one pool, each row's text and start
      world encoded once for all K (ids [N, K, max_actions]); draw k of row i is the sequence
      `sample_keys[i, k]` alone would give.
    - teacher forced: `teacher_actions` [N, >= max_actions] ids are followed instead of the
      model's choice (e.g. to score a gold sequence); with `return_logits` also return the
      per-step logits [N, max_actions, 7624] (before masking).

    A row that must go on while no action is feasible takes action id 0 (the argmax of a fully
    masked row), as forced lengths always have.
    """
    check_stop_rule(settings.stop_rule, settings.stop_threshold, model)
    draws = 1
    if sample_keys is not None:
        sample_keys = jnp.asarray(sample_keys)
        if sample_keys.ndim == 3:  # K draws per row: rows i * K + k of the pool
            draws = sample_keys.shape[1]
            sample_keys = sample_keys.reshape(-1, 2)
    if draws > 1 and (teacher_actions is not None or return_logits):
        raise ValueError("decode_pool: several draws per row (sample_keys [N, K, 2]) take no teacher_actions "
                         "and return no logits")
    pool = _Pool(model, params, batch, settings, draws,
                 settings.stop_threshold if stop_threshold is None else stop_threshold)
    lengths = pool.stop_lengths(lengths)
    carry = pool.first_carry(return_logits)

    def body(c):
        dec, logits = pool.step_logits(c)
        feasible = jax.vmap(G.feasible_mask_single)(c["world"]["grid"])
        choice = pool.choose(c, logits, feasible, lengths, sample_keys)
        if teacher_actions is not None:
            choice = jnp.asarray(teacher_actions, jnp.int32)[pool.row_item(c), c["t"]]
        return pool.advance(c, dec, logits, choice)

    final = jax.lax.while_loop(lambda c: jnp.any(c["item"] >= 0), body, carry)
    if return_logits:
        return final["out"][:pool.n], final["logits"][:pool.n]
    out = final["out"][:pool.n]
    return out if draws == 1 else out.reshape(pool.n // draws, draws, -1)


class _Pool:
    """One `decode_pool` call: its rows' inputs encoded once before the loop, and the parts of a
    step (the slots' logits, the choice of their actions, their advance and refill). With `draws`
    K > 1 the pool decodes K rows per batch row (row i * K + k: draw k of batch row i), all K
    reading that batch row's one encoding (`source`)."""

    def __init__(self, model: BuilderModel, params, batch: dict, settings: DecodeSettings, draws: int,
                 stop_threshold):
        self.model, self.variables, self.settings = model, {"params": params}, settings
        self.stop_threshold = stop_threshold  # the settings' or a traced float32 scalar
        self.M = type(model)  # the architecture's methods (bapjax.models.builder.MODELS)
        batch = {k: jnp.asarray(v) for k, v in batch.items()}
        self.draws = draws
        self.text_mask = batch["text_mask"]
        self.n = batch[model.text_key].shape[0] * draws  # the pool's rows
        self.slots = max(1, min(int(settings.slots), self.n))
        self.num_items = ((batch["weight"] > 0).sum().astype(jnp.int32) if "weight" in batch
                          else jnp.int32(self.n // draws)) * draws  # rows to decode: the first ones
        self.token_states, self.summary = self.apply(batch[model.text_key], self.text_mask, method=self.M.encode_text)
        self.starts = world_input.start_world(batch)
        self.encoded = None
        if model.world_encoding == "once":  # every row's start world encoded once, before the loop (world_changes)
            self.encoded = self.apply(self.starts, self.summary, method=self.M.encode_starts)

    def apply(self, *args, method):
        return self.model.apply(self.variables, *args, method=method)

    def source(self, row: jax.Array) -> jax.Array:
        """The batch rows [S] whose encoding the pool rows `row` [S] read."""
        return row if self.draws == 1 else row // self.draws

    def stop_lengths(self, lengths: jax.Array | None) -> jax.Array | None:
        """The pool rows' forced lengths (0: none) from the batch rows' `lengths` [N], with the
        STOP rule "length"'s quantile of the length head (computed once per batch row) for every
        row without one; None: no row has one."""
        s = self.settings
        if lengths is not None:
            lengths = jnp.asarray(lengths)
        if s.stop_rule == "length":
            length_logits = self.apply(self.summary, self.starts, self.encoded, method=self.M.length_logits)
            predicted = jnp.minimum(length_quantile(length_logits, self.stop_threshold), s.max_actions)
            lengths = predicted if lengths is None else jnp.where(lengths > 0, lengths, predicted)
        return lengths if lengths is None or self.draws == 1 else jnp.repeat(lengths, self.draws)

    def fresh(self, item):
        """Decoder state and world of the pool rows `item` [S] (index -1: a slot with nothing left)."""
        idx = self.source(jnp.maximum(item, 0))
        dec = self.apply(self.summary[idx], self.token_states[idx], self.text_mask[idx], self.settings.max_actions,
                         method=self.M.init_decoder)
        return dec, jax.tree_util.tree_map(lambda x: x[idx], self.starts)

    def first_carry(self, return_logits: bool) -> dict:
        n, slots, max_actions = self.n, self.slots, self.settings.max_actions
        first = jnp.arange(slots, dtype=jnp.int32)
        item0 = jnp.where(first < self.num_items, first, -1)
        dec0, world0 = self.fresh(item0)
        carry = {"item": item0, "t": jnp.zeros(slots, jnp.int32), "prev": jnp.full(slots, START, jnp.int32),
                 "dec": dec0, "world": world0, "next": jnp.minimum(jnp.int32(slots), self.num_items),
                 "out": jnp.full((n + 1, max_actions), G.STOP, jnp.int32)}  # row n: where idle slots write
        if return_logits:
            carry["logits"] = jnp.zeros((n + 1, max_actions, G.NUM_ACTIONS_WITH_STOP), jnp.float32)
        return carry

    @staticmethod
    def row_item(c: dict) -> jax.Array:
        return jnp.maximum(c["item"], 0)

    def step_logits(self, c: dict):
        """The slots' decoder step and their action logits [S, 7624] on their current worlds."""
        idx = self.source(self.row_item(c))
        dec, dec_out = self.apply(c["dec"], c["t"], c["prev"], self.token_states[idx], self.text_mask[idx],
                                  method=self.M.decoder_step)
        if self.encoded is not None:
            start = jax.tree_util.tree_map(lambda x: x[idx], self.starts)
            logits = self.apply(self.encoded[idx], start, c["world"], dec_out, self.settings.max_actions,
                                method=self.M.changed_world_logits)
        else:
            logits = self.apply(c["world"], dec_out, method=self.M.world_logits)
        return dec, logits

    def choose(self, c: dict, logits, feasible, lengths, sample_keys) -> jax.Array:
        """The slots' actions [S]: greedy by the STOP rule, or drawn; STOP masked before
        `min_actions` and before a forced length, taken at it."""
        s, idx = self.settings, self.row_item(c)
        may_stop = c["t"] >= s.min_actions
        if lengths is not None:
            need = lengths[idx]
            may_stop = jnp.where(need > 0, c["t"] >= need, may_stop)
        feasible = feasible.at[:, G.STOP].set(may_stop)
        if sample_keys is None:
            choice = choose_actions(logits, feasible, s.stop_rule, self.stop_threshold)
        else:
            choice = sample_actions(jnp.asarray(sample_keys)[idx], c["t"], logits, feasible, s.temperature, s.sampler)
        if lengths is not None:
            choice = jnp.where((need > 0) & (c["t"] >= need), G.STOP, choice)
        return choice

    def advance(self, c: dict, dec, logits, choice) -> dict:
        """The carry after the slots take `choice`: written out, worlds advanced, and each slot
        whose item stopped (STOP or `max_actions`) given the next waiting item, in slot order."""
        n, max_actions = self.n, self.settings.max_actions
        active = c["item"] >= 0
        row = jnp.where(active, c["item"], n)
        new = dict(c)
        new["out"] = c["out"].at[row, c["t"]].set(choice)
        if "logits" in c:
            new["logits"] = c["logits"].at[row, c["t"]].set(logits.astype(jnp.float32))
        world = jax.vmap(world_input.advance_world)(c["world"], choice)
        t = c["t"] + 1
        finished = active & ((choice == G.STOP) | (t >= max_actions))
        waiting = c["next"] + jnp.cumsum(finished) - 1
        item = jnp.where(finished, jnp.where(waiting < self.num_items, waiting, -1), c["item"])
        dec_new, world_new = self.fresh(item)
        new.update(item=item, next=jnp.minimum(c["next"] + finished.sum(), self.num_items),
                   dec=_select(finished, dec_new, dec), world=_select(finished, world_new, world),
                   t=jnp.where(finished, 0, t), prev=jnp.where(finished, START, choice))
        return new


def _select(mask, new, old):
    """Per slot (`mask` [S]): the leaves of `new` where set, else of `old`."""
    return jax.tree_util.tree_map(
        lambda a, b: jnp.where(mask.reshape(mask.shape + (1,) * (a.ndim - 1)), a, b), new, old)


def sample_keys(sample: int, item_ids: Sequence[str]) -> np.ndarray:
    """PRNG keys [len(item_ids), 2] uint32 of draw number `sample`: an item's is
    `fold_in(PRNGKey(sample), crc32(item_id))`, whatever the other items, batch, slots or devices
    that decode it with."""
    base = jax.random.PRNGKey(int(sample))
    data = np.array([zlib.crc32(str(item_id).encode()) for item_id in item_ids], np.uint32)
    return np.asarray(jax.vmap(lambda d: jax.random.fold_in(base, d))(data)).reshape(len(data), 2)


def ids_to_actions(ids: np.ndarray, grid: np.ndarray | None = None) -> list[G.Action]:
    """One row of decoded ids -> Actions up to the first STOP. A removal's color is the color of
    the block it removes, so pass the start grid [11, 9, 11] when removals can occur (it is
    updated along the sequence)."""
    actions = []
    current = None if grid is None else np.array(grid, copy=True)
    for action_id in np.asarray(ids).tolist():
        if action_id >= G.NUM_ACTIONS:
            break
        action = G.decode_action(int(action_id), current)
        if current is not None:
            i, j, k = G.cell_to_index(action.x, action.y, action.z)
            current[i, j, k] = 0 if action.type == G.REMOVE else action.color
        elif action.type == G.REMOVE:
            raise ValueError("ids_to_actions needs the start grid to name a removal's color")
        actions.append(action)
    return actions


DECODE_KEYS = ("text_tokens", "text_mask", *world_input.WORLD_KEYS, "weight")  # the batch keys decoding reads


def decode_keys(model: BuilderModel) -> tuple[str, ...]:
    """DECODE_KEYS with the model's text input (token ids, or frozen-encoder token states)."""
    return (model.text_key,) + DECODE_KEYS[1:]


def call_layout(count: int, devices: int, per_device: int) -> np.ndarray:
    """Positions [count] in a call of `devices * per_device` rows for `count` items: device d's
    rows hold a contiguous, equal share of the items first, then padding (decode_pool skips
    rows of weight 0 at the end of each device's rows)."""
    share = -(-count // devices)
    index = np.arange(count)
    return (index // share) * per_device + index % share


def predict_items(model: BuilderModel, params, items: list, vocab, feature_config, settings: DecodeSettings, *,
                  lengths: dict[str, int] | None = None, sample: int | None = None, decode_fn=None, mesh=None,
                  features=None, items_per_call: int = 0, progress: bool = False) -> dict[str, list[G.Action]]:
    """One decoding pass of BapItems, {item_id: [Action]}: greedy with `settings`' STOP rule; with
    `lengths` {item_id: k}, exactly k actions for those items (`decode_pool`'s forced lengths);
    with `sample` (a draw number), each item's draw at `settings.temperature` (`sample_keys`).
    `settings.samples` plays no part here (`predict` chooses among draws; `predict_draws` decodes
    several draws in one pass over the items).

    `settings.slots` items decode at once (the pool's slots); each compiled call takes up to
    `items_per_call` items (default 16 x slots); the last call is padded only up to a multiple of
    the slots (padding rows still pay for text encoding), so a split compiles at most two shapes.
    `decode_fn` (`settings.decode_fn(model, mesh)`, with the same mesh) saves compiling it again.
    With `feature_config.builder_frame` the items are decoded in their Builder's frame and the
    predictions turned back: they are always in the items' (world) coordinates.
    """
    draws = None if sample is None else [sample]
    passes = _decode(model, params, items, vocab, feature_config, settings, lengths=lengths, draws=draws,
                     decode_fn=decode_fn, mesh=mesh, features=features, items_per_call=items_per_call,
                     progress=progress)
    return passes[0]


def predict_draws(model: BuilderModel, params, items: list, vocab, feature_config, settings: DecodeSettings,
                  draws: Sequence[int], *, decode_fn=None, mesh=None, features=None, items_per_call: int = 0,
                  progress: bool = False) -> list[dict[str, list[G.Action]]]:
    """The passes of draw numbers `draws`, [{item_id: [Action]}] in that order: each what
    `predict_items(..., sample=k)` gives, decoded together, each item's text and start world
    encoded once for all its draws (`decode_pool` with keys [N, K, 2]). `items_per_call` (default
    16 x slots / K, at least one slot's worth) bounds the items of one compiled call, so a call
    decodes about as many sequences as a single pass's."""
    draws = [int(k) for k in draws]
    if not draws:
        return []
    per_call = items_per_call or max(settings.slots, 16 * settings.slots // len(draws))
    return _decode(model, params, items, vocab, feature_config, settings, lengths=None, draws=draws,
                   decode_fn=decode_fn, mesh=mesh, features=features, items_per_call=per_call, progress=progress)


def _decode(model: BuilderModel, params, items: list, vocab, feature_config, settings: DecodeSettings, *,
            lengths: dict[str, int] | None, draws: list[int] | None, decode_fn, mesh, features, items_per_call: int,
            progress: bool) -> list[dict[str, list[G.Action]]]:
    """`predict_items` (`draws` None: greedy or forced lengths, one pass; one draw number: that
    draw, keys [N, 2]) and `predict_draws` (several: keys [N, K, 2]): one pass per draw."""
    devices = 1 if mesh is None else mesh.size
    decode_fn = decode_fn or settings.decode_fn(model, mesh)
    keys = None
    if draws is not None:
        ids = [item.item_id for item in items]
        keys = np.stack([sample_keys(k, ids) for k in draws], axis=1)  # [items, K, 2]
        if len(draws) == 1:
            keys = keys[:, 0]
    if features is None:
        features = input_pipeline.featurize_items(items, vocab, feature_config)
    unit = settings.slots * devices  # call sizes are multiples of this (equal rows per device)
    full_call = -(-(items_per_call or 16 * settings.slots) // unit) * unit
    passes: list[dict[str, list[G.Action]]] = [{} for _ in range(len(draws) if draws else 1)]
    rule = cli.Progress(len(items))
    for lo in range(0, len(items), full_call):
        rows = np.arange(lo, min(lo + full_call, len(items)))
        call_size = min(full_call, -(-len(rows) // unit) * unit)
        positions = call_layout(len(rows), devices, call_size // devices)
        table_rows = np.full(call_size, features.padding_row)
        table_rows[positions] = rows
        expanded = input_pipeline.expand_batch(features, table_rows, feature_config)
        batch = {k: expanded[k] for k in decode_keys(model)}
        call = {}
        if lengths is not None:
            call["lengths"] = np.zeros(call_size, np.int32)
            call["lengths"][positions] = [int(lengths.get(items[row].item_id, 0)) for row in rows]
        if keys is not None:
            call["sample_keys"] = np.zeros((call_size,) + keys.shape[1:], np.uint32)
            call["sample_keys"][positions] = keys[rows]
        if mesh is not None:
            batch, call = sharding.host_batch_to_global(batch, mesh), sharding.host_batch_to_global(call, mesh)
        ids = np.asarray(decode_fn(params, batch, **call))
        if ids.ndim == 2:
            ids = ids[:, None]
        for row, position in zip(rows, positions):
            for one, sequence in zip(passes, ids[position]):
                one[items[row].item_id] = _world_actions(items[row], sequence, expanded["grid"][position],
                                                         feature_config.builder_frame)
        if progress:
            print(f"decode {rule.line(int(rows[-1]) + 1)}", flush=True)
    return passes


def _world_actions(item, ids: np.ndarray, grid: np.ndarray, builder_frame: bool) -> list[G.Action]:
    """An item's decoded ids as Actions in its world coordinates (decoded on its turned grid with
    `builder_frame`)."""
    actions = ids_to_actions(ids, grid)
    if builder_frame:
        actions = rotation.from_builder_frame(actions, rotation.builder_frame_turns(item.builder_pose.yaw))
    return actions


def candidates(model: BuilderModel, params, items: list, vocab, feature_config, settings: DecodeSettings, *,
               decode_fn=None, mesh=None, features=None, progress: bool = False, first_draw: int = 0) -> list[dict]:
    """[greedy, draw f, ..., draw f+K-1] (f = `first_draw`, K = `settings.samples`), each {item_id:
    [Action]}: the greedy decoding with the settings' STOP rule, then draw k with the keys of
    `sample_keys(k, item ids)` at `settings.temperature`, so every item's draws are reproducible and
    the same whichever items are decoded with it (another `first_draw`: another set of draws)."""
    decode_fn = decode_fn or settings.decode_fn(model, mesh)
    if features is None:
        features = input_pipeline.featurize_items(items, vocab, feature_config)
    greedy = predict_items(model, params, items, vocab, feature_config, settings, decode_fn=decode_fn, mesh=mesh,
                           features=features, progress=progress)
    if progress and settings.samples:
        print(f"decode: {settings.samples} draws of {len(items)} items", flush=True)
    draws = predict_draws(model, params, items, vocab, feature_config, settings,
                          range(first_draw, first_draw + settings.samples), decode_fn=decode_fn, mesh=mesh,
                          features=features, progress=progress)
    return [greedy] + draws


def predict(model: BuilderModel, params, items: list, vocab, feature_config, settings: DecodeSettings, *,
            decode_fn=None, mesh=None, features=None, progress: bool = False,
            first_draw: int = 0) -> dict[str, list[G.Action]]:
    """Predictions {item_id: [Action]} decoded as `settings` say: greedy (`predict_items`) when
    `settings.samples` is 0, else `select` among the greedy decoding and the draws from
    `first_draw` on (`candidates`)."""
    if settings.samples == 0:
        return predict_items(model, params, items, vocab, feature_config, settings, decode_fn=decode_fn, mesh=mesh,
                             features=features, progress=progress)
    passes = candidates(model, params, items, vocab, feature_config, settings, decode_fn=decode_fn, mesh=mesh,
                        features=features, progress=progress, first_draw=first_draw)
    return select(passes, settings, items)


def select(passes: list[dict], settings: DecodeSettings, items: Sequence = ()) -> dict[str, list[G.Action]]:
    """What `predict` returns from [greedy, draw 1, ...] (`candidates`, at `settings`' STOP rule and
    temperature): the greedy pass when `settings.samples` is 0 (or only it was decoded), else
    among the greedy pass and the first `settings.samples` draws the minimum-Bayes-risk selection
    at `settings.cost` (`mbr.select`), or with `settings.rules` each item's board's rule
    (`mbr.combine`; votes built from the item's start structure, so the BapItems `items` are needed)."""
    if settings.samples == 0 or len(passes) == 1:
        return passes[0]
    passes = passes[:settings.samples + 1]
    if not settings.rules:
        return mbr.select(passes, settings.cost)
    if not items:
        raise ValueError("rules per board need the items (their board and start structure)")
    rules = dict(zip(mbr.BOARDS, settings.rules))
    return {item.item_id: mbr.combine([one[item.item_id] for one in passes], *rules[mbr.board(item)],
                                      item.prev_structure) for item in items}
