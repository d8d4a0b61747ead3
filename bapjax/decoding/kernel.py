"""The decoding kernel: a pool of slots, one compiled `lax.while_loop` over a set of items, in the
`Mode` that `decode_pool` is given: one field per mode (K draws per item or the STOP rule, forced
lengths, teacher forcing; `GREEDY`: none), static under jit; `Mode.check` checks that the arrays
passed are the mode's.

`slots` items decode at once. Each step embeds each slot's previous action, advances the decoder,
encodes the slot's current world (colors and recent-action channel after the actions so far,
`bapjax.models.world_input.advance_world`, the same rule as teacher forcing), masks infeasible
actions (`bapjax.world.grid.feasible_mask_single`: occupancy, support, the 20-per-color inventory),
and picks the next action. Every architecture decodes through the same two methods of
`BuilderModel`: `decoding_starts` (what it computes once per item before the loop; the once
architecture encodes the start worlds there, so no CNN runs inside the loop) and `step_logits` (a
step's logits from those rows, the start and current worlds and the decoder's output). A slot whose item stops
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
a run chooses its rule on val after training (`bapjax.decoding.on_val`) and keeps it in its decode.json.

A draw's keys are `sample_keys` (draw number and item id); `bapjax.decoding.settings` carries a
decoding from config.eval to this kernel (its compiled decoders take the `Mode` as a static
argument), `bapjax.decoding.decode` runs it over BapItems.
"""

from __future__ import annotations

import dataclasses
import functools
import zlib
from typing import TYPE_CHECKING, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from bapjax.models import world_input
from bapjax.models.builder import START, BuilderModel
from bapjax.world import grid as G

if TYPE_CHECKING:
    from bapjax.decoding.settings import DecodeSettings

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


@dataclasses.dataclass(frozen=True)
class Mode:
    """How `decode_pool` decodes (hashable: a static argument of a jitted decoder).

    - `draws` 0: each step's action chosen by the STOP rule; K >= 1: K sequences drawn per batch
      row, `sample_keys` [N, K, 2] given, ids [N, K, max_actions] (K = 1 too).
    - `forced`: `lengths` [N] (int) given, row i decoding exactly `lengths[i]` actions (0: the STOP
      rule's length).
    - `teacher`: `teacher_actions` [N, >= max_actions] followed, and the per-step logits returned
      with the ids; not with draws.
    """

    draws: int = 0
    forced: bool = False
    teacher: bool = False

    def __post_init__(self):
        if isinstance(self.draws, bool) or not isinstance(self.draws, int) or self.draws < 0:
            raise ValueError(f"Mode.draws must be an int >= 0 (0: no draws), got {self.draws!r}")
        if not isinstance(self.forced, bool) or not isinstance(self.teacher, bool):
            raise ValueError(f"Mode.forced and Mode.teacher must be bools, got {self.forced!r}, {self.teacher!r}")
        if self.teacher and self.draws:
            raise ValueError(f"a teacher-forced decoding takes no draws, got Mode(draws={self.draws}, teacher=True)")

    def describe(self) -> str:
        """The pass in words, for its progress line: "greedy", "64 draws", "greedy (forced lengths)"."""
        what = f"{self.draws} draw{'s' if self.draws != 1 else ''}" if self.draws else "greedy"
        return what + (" (forced lengths)" if self.forced else "") + (" (teacher-forced)" if self.teacher else "")

    @property
    def per_row(self) -> int:
        """The pool rows each batch row decodes: its draws, else 1."""
        return max(1, self.draws)

    def check(self, rows: int, max_actions: int, lengths, sample_keys, teacher_actions) -> None:
        """That the arrays passed to `decode_pool` for `rows` batch rows are this mode's: each
        given exactly when its field says so, `lengths` [rows], `sample_keys` [rows, draws, 2],
        `teacher_actions` [rows, >= max_actions]; else ValueError naming the argument."""
        wanted = (("lengths", lengths, self.forced, lambda s: s == (rows,), f"[{rows}]"),
                  ("sample_keys", sample_keys, self.draws > 0, lambda s: s == (rows, self.draws, 2),
                   f"[{rows}, {self.draws}, 2]"),
                  ("teacher_actions", teacher_actions, self.teacher,
                   lambda s: len(s) == 2 and s[0] == rows and s[1] >= max_actions, f"[{rows}, >= {max_actions}]"))
        for name, array, needed, fits, shape in wanted:
            given = array is not None
            if given != needed:
                raise ValueError(f"decode_pool: {self} {'needs' if needed else 'takes no'} {name}")
            if given and not fits(tuple(jnp.shape(array))):
                raise ValueError(f"decode_pool: {name} must be {shape} for {self}, got shape {tuple(jnp.shape(array))}")


GREEDY = Mode()


def decode_pool(model: BuilderModel, params, batch: dict, settings: DecodeSettings, mode: Mode = GREEDY, *,
                lengths: jax.Array | None = None, sample_keys: jax.Array | None = None,
                teacher_actions: jax.Array | None = None, stop_threshold: jax.Array | None = None):
    """Action ids [N, settings.max_actions] (padded with STOP; with draws [N, K, max_actions]) for
    the N rows of `batch` (the pipeline's keys, `decode_keys`, `weight` included: rows of weight 0
    come last and are not decoded), with `settings.slots` slots, as `mode` says (`Mode`; the arrays
    it names are checked by `Mode.check`). `stop_threshold` (a float32 scalar, e.g. traced) replaces
    `settings.stop_threshold` (None: that one).

    - STOP rule (draws 0): each step's action by `settings.stop_rule` (`choose_actions`); STOP is
      masked for the first `settings.min_actions` steps (every BAP item has at least one action, so
      1 is sound; `min_actions == max_actions` decodes exactly that many actions). The rule
      "length" gives each row its `length_quantile(stop_threshold)` of the model's length head.
    - forced: `lengths[i]` > 0 decodes exactly that many actions for row i (STOP masked before,
      forced at that step; capped at `max_actions`; 0 leaves the row to the STOP rule): with each
      item's reference length, the length ceiling of a model (what a perfect length head allows).
    - draws K: each step's action drawn from the softmax of the feasible logits at
      `settings.temperature` (STOP included, so the length is drawn too; the STOP masks of
      `min_actions` and forced lengths hold). Draw k of row i is pool row i * K + k, at step t keyed
      `fold_in(sample_keys[i, k], t)`, so it depends on neither the slots, the devices nor the
      other draws (`sample_actions`; `sample_keys(sample, item_ids)`: the keys of draw number
      `sample`); each row's text and start world are encoded once for all K.
    - teacher: `teacher_actions` are followed instead of the model's choice (e.g. to score a gold
      sequence); returns (ids, per-step logits [N, max_actions, 7624] before masking).

    A row that must go on while no action is feasible takes action id 0 (the argmax of a fully
    masked row), as forced lengths always have.
    """
    check_stop_rule(settings.stop_rule, settings.stop_threshold, model)
    mode.check(jnp.shape(batch[model.text_key])[0], settings.max_actions, lengths, sample_keys, teacher_actions)
    pool = _Pool(model, params, batch, settings, mode,
                 settings.stop_threshold if stop_threshold is None else stop_threshold)
    row_lengths, row_keys = pool.stop_lengths(lengths), pool.row_keys(sample_keys)

    def body(c):
        dec, logits = pool.step_logits(c)
        feasible = jax.vmap(G.feasible_mask_single)(c["world"]["grid"])
        choice = pool.choose(c, logits, feasible, row_lengths, row_keys)
        if mode.teacher:
            choice = jnp.asarray(teacher_actions, jnp.int32)[pool.row_item(c), c["t"]]
        return pool.advance(c, dec, logits, choice)

    final = jax.lax.while_loop(lambda c: jnp.any(c["item"] >= 0), body, pool.first_carry())
    out = final["out"][:pool.n]
    if mode.teacher:
        return out, final["logits"][:pool.n]
    return out.reshape(pool.n // mode.draws, mode.draws, -1) if mode.draws else out


class _Pool:
    """One `decode_pool` call: its rows' inputs encoded once before the loop, and the parts of a
    step (the slots' logits, the choice of their actions, their advance and refill). With draws
    K >= 1 the pool decodes K rows per batch row (row i * K + k: draw k of batch row i), all K
    reading that batch row's one encoding (`source`)."""

    def __init__(self, model: BuilderModel, params, batch: dict, settings: DecodeSettings, mode: Mode,
                 stop_threshold):
        self.model, self.variables, self.settings, self.mode = model, {"params": params}, settings, mode
        self.stop_threshold = stop_threshold  # the settings' or a traced float32 scalar
        self.M = type(model)  # the architecture's methods (bapjax.models.builder.MODELS)
        batch = {k: jnp.asarray(v) for k, v in batch.items()}
        self.per_row = mode.per_row
        self.forces = mode.forced or settings.stop_rule == "length"  # rows may have a forced length
        self.text_mask = batch["text_mask"]
        self.n = batch[model.text_key].shape[0] * self.per_row  # the pool's rows
        self.slots = max(1, min(int(settings.slots), self.n))
        self.num_items = (batch["weight"] > 0).sum().astype(jnp.int32) * self.per_row  # rows to decode: the first
        self.token_states, self.summary = self.apply(batch[model.text_key], self.text_mask, method=self.M.encode_text)
        self.starts = world_input.start_world(batch)
        self.encoded = self.apply(self.starts, self.summary, method=self.M.decoding_starts)  # before the loop

    def apply(self, *args, method):
        return self.model.apply(self.variables, *args, method=method)

    def source(self, row: jax.Array) -> jax.Array:
        """The batch rows [S] whose encoding the pool rows `row` [S] read."""
        return row if self.per_row == 1 else row // self.per_row

    def stop_lengths(self, lengths: jax.Array | None) -> jax.Array | None:
        """The pool rows' forced lengths [n] (0: none) when `forces`: the batch rows' `lengths` [N]
        (forced mode), with the STOP rule "length"'s quantile of the length head (computed once
        per batch row) for every row without one; else the `lengths` given (none)."""
        s = self.settings
        if self.mode.forced:
            lengths = jnp.asarray(lengths)
        if s.stop_rule == "length":
            length_logits = self.apply(self.summary, self.starts, self.encoded, method=self.M.length_logits)
            predicted = jnp.minimum(length_quantile(length_logits, self.stop_threshold), s.max_actions)
            lengths = jnp.where(lengths > 0, lengths, predicted) if self.mode.forced else predicted
        return jnp.repeat(lengths, self.per_row) if self.forces and self.per_row > 1 else lengths

    def row_keys(self, sample_keys: jax.Array | None) -> jax.Array | None:
        """The pool rows' keys [n, 2] from `sample_keys` [N, K, 2] (row i * K + k: key [i, k]) in
        draws mode; else the keys given (none)."""
        return jnp.asarray(sample_keys).reshape(-1, 2) if self.mode.draws else sample_keys

    def fresh(self, item):
        """Decoder state and world of the pool rows `item` [S] (index -1: a slot with nothing left)."""
        idx = self.source(jnp.maximum(item, 0))
        dec = self.apply(self.summary[idx], self.token_states[idx], self.text_mask[idx], self.settings.max_actions,
                         method=self.M.init_decoder)
        return dec, jax.tree_util.tree_map(lambda x: x[idx], self.starts)

    def first_carry(self) -> dict:
        n, slots, max_actions = self.n, self.slots, self.settings.max_actions
        first = jnp.arange(slots, dtype=jnp.int32)
        item0 = jnp.where(first < self.num_items, first, -1)
        dec0, world0 = self.fresh(item0)
        carry = {"item": item0, "t": jnp.zeros(slots, jnp.int32), "prev": jnp.full(slots, START, jnp.int32),
                 "dec": dec0, "world": world0, "next": jnp.minimum(jnp.int32(slots), self.num_items),
                 "out": jnp.full((n + 1, max_actions), G.STOP, jnp.int32)}  # row n: where idle slots write
        if self.mode.teacher:
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
        rows = functools.partial(jax.tree_util.tree_map, lambda x: x[idx])
        logits = self.apply(rows(self.encoded), rows(self.starts), c["world"], dec_out, self.settings.max_actions,
                            method=self.M.step_logits)
        return dec, logits

    def choose(self, c: dict, logits, feasible, lengths, keys) -> jax.Array:
        """The slots' actions [S]: by the STOP rule, or drawn with the pool rows' `keys` [n, 2];
        STOP masked before `min_actions` and before a forced length (`lengths` [n], `forces`),
        taken at it."""
        s, idx = self.settings, self.row_item(c)
        may_stop = c["t"] >= s.min_actions
        if self.forces:
            need = lengths[idx]
            may_stop = jnp.where(need > 0, c["t"] >= need, may_stop)
        feasible = feasible.at[:, G.STOP].set(may_stop)
        if self.mode.draws:
            choice = sample_actions(keys[idx], c["t"], logits, feasible, s.temperature, s.sampler)
        else:
            choice = choose_actions(logits, feasible, s.stop_rule, self.stop_threshold)
        if self.forces:
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
        if self.mode.teacher:
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
