"""Greedy (or sampled) decoding as a pool of slots: one compiled `lax.while_loop` over a set of items.

`slots` items decode at once. Each step embeds each slot's previous action, advances the decoder,
encodes the slot's current world (colors and recent-action channel after the actions so far,
`bapjax.models.world_input.advance_world`, the same rule as teacher forcing), masks infeasible
actions (`bapjax.world.grid.feasible_mask_single`: occupancy, support, the 20-per-color inventory),
and picks the next action. With the once architecture (`config.model.name="once"`) the start worlds of all rows of a call
are encoded once before the loop, and a step adds the slot's change features to its item's
encoding (`BuilderModel.changed_world_logits`): no CNN inside the loop. A slot whose item stops
(STOP or `max_actions`) takes the next waiting item at once, so no work is spent on finished items until the queue runs dry; the loop
ends when every item is done. Under a mesh each device runs its own pool over its own items
(`bapjax.training.sharding.per_device`), so devices never wait for each other's longest item.

STOP rules: "argmax" takes the most likely of STOP and every single feasible action; "mass"
stops when p(STOP) >= `stop_threshold` (0.5: STOP more likely than continuing at all, i.e. than
the summed probability of the feasible actions), else takes the most likely action; "length"
(a model with `length_head`) decodes each item's length quantile `stop_threshold` of the length
head's distribution (`length_quantile`, computed once per item before the loop) as `force_length`
does, taking the most likely feasible action at each step. Greedy argmax
over 7,623 actions favours STOP whenever the model is unsure *where* to build, which makes
predictions short; a run chooses its rule on val after training and keeps it in its decode.json
(`bapjax.predict`, where a run's decoding is written and read).
"""

from __future__ import annotations

import dataclasses
import functools
import time
import zlib
from typing import Sequence

import jax
import jax.numpy as jnp
import numpy as np

from bapjax.data import input_pipeline
from bapjax.models import world_input
from bapjax.models.builder import START, BuilderModel
from bapjax.training import sharding
from bapjax.world import grid as G
from bapjax.world import rotation

NEG_INF = -1e9
STOP_RULES = ("argmax", "mass", "length")


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
    """How a run decodes: its length limits, pool size, STOP rule and, with `samples` > 0,
    minimum-Bayes-risk selection among the greedy decoding and `samples` draws at `temperature`
    with `cost` per predicted action (`bapjax.training.mbr`); checked on construction. A run's own settings are
    `bapjax.training.run_eval.run_decode_settings` (config.eval with the rule the run chose on val)."""

    max_actions: int
    min_actions: int
    slots: int
    stop_rule: str = "argmax"
    stop_threshold: float = 0.5
    samples: int = 0
    temperature: float = 1.0
    cost: float = 0.1

    def __post_init__(self):
        check_stop_rule(self.stop_rule, self.stop_threshold)
        if self.max_actions < 1 or not 0 <= self.min_actions <= self.max_actions or self.slots < 1:
            raise ValueError(f"decoding needs max_actions >= 1, 0 <= min_actions <= max_actions and slots >= 1, "
                             f"got {self.max_actions}, {self.min_actions}, {self.slots}")
        check_sampling(self.samples, self.temperature, self.cost)

    @classmethod
    def from_eval_config(cls, eval_config) -> "DecodeSettings":
        """config.eval's settings (a config completed by `run_checks.with_defaults`): greedy, with
        config.eval's STOP rule."""
        return cls(int(eval_config.max_actions), int(eval_config.min_actions), int(eval_config.batch_size),
                   str(eval_config.stop_rule), float(eval_config.stop_threshold))

    def describe(self) -> str:
        """"STOP rule <rule>, threshold <t>" and, with samples, how the decoding chooses among draws."""
        return f"STOP rule {self.stop_rule}, threshold {self.stop_threshold:g}" + describe_sampling(
            self.samples, self.temperature, self.cost)

    def replace(self, **changes) -> "DecodeSettings":
        """A copy with the given fields changed; a None value keeps the field."""
        return dataclasses.replace(self, **{k: v for k, v in changes.items() if v is not None})

    def decode_fn(self, model: BuilderModel, mesh=None):
        """A jitted `(params, batch) -> ids [N, max_actions]`: greedy, or drawn at `temperature`
        for a batch with `sample_keys`. With a `mesh`, the batch's rows are split over its 'data'
        axis and each device decodes its rows with `slots / devices` slots."""
        check_stop_rule(self.stop_rule, self.stop_threshold, model)
        devices = 1 if mesh is None else mesh.size
        fn = functools.partial(decode_pool, model, slots=max(1, self.slots // devices), max_actions=self.max_actions,
                               min_actions=self.min_actions, stop_rule=self.stop_rule,
                               stop_threshold=float(self.stop_threshold), temperature=float(self.temperature))
        if mesh is None:
            return jax.jit(fn)
        return jax.jit(sharding.per_device(fn, mesh, out_specs=sharding.DATA_SPEC))


def describe_sampling(samples: int, temperature: float, cost: float) -> str:
    """", best of greedy and K draws at temperature T (cost C per action)", or "" without draws."""
    return (f", best of greedy and {samples} draws at temperature {temperature:g} (cost {cost:g} per action)"
            if samples else "")


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
                   temperature: float = 1.0) -> jax.Array:
    """Actions [N] drawn from softmax(logits / temperature) over the feasible columns (STOP
    included), row n with the key `fold_in(keys[n], steps[n])` (`keys` [N, 2] uint32)."""
    keys = jax.vmap(jax.random.fold_in)(keys, steps)
    masked = jnp.where(feasible, logits.astype(jnp.float32) / jnp.float32(temperature), NEG_INF)
    return jax.vmap(jax.random.categorical)(keys, masked).astype(jnp.int32)


def decode_pool(model: BuilderModel, params, batch: dict, *, slots: int, max_actions: int = 20,
                min_actions: int = 0, stop_rule: str = "argmax", stop_threshold: float = 0.5,
                teacher_actions: jax.Array | None = None,
                return_logits: bool = False, temperature: float = 1.0):
    """Action ids [N, max_actions] (padded with STOP) for the N rows of `batch` (the pipeline's
    keys; rows with `weight` 0, if given, must come last and are not decoded).

    `min_actions`: STOP is masked for the first steps (every BAP item has at least one action,
    so 1 is sound; `min_actions == max_actions` decodes exactly that many actions). A batch key
    `force_length` [N] (> 0) decodes exactly that many actions for its row (STOP masked before,
    forced at that step; capped at `max_actions`): the length ceiling of a model, decoded with
    each item's reference length (`bapjax.analysis.length_ceiling`). `stop_rule` "length" gives
    every row without such a key its `length_quantile(stop_threshold)` of the model's length head.
    A row that must go on while no action is feasible takes action id 0 (the argmax of a fully
    masked row), as forced lengths always have.
    `teacher_actions` [N, >= max_actions]: follow these ids instead of the model's choice (forced
    decoding, e.g. to score a gold sequence); with `return_logits` also return the per-step
    logits [N, max_actions, 7624] (before masking).
    A batch key `sample_keys` [N, 2] (uint32 PRNG keys, one per row): draw each step's action
    from the softmax of the feasible logits at `temperature` instead of the greedy choice (STOP
    included, so the length is drawn too; the STOP masks of `min_actions` and forced lengths
    hold); row i's draw at step t uses `fold_in(sample_keys[i], t)`, so it depends on neither the
    slots nor the devices (`sample_actions`; `predict_items`' `sample` builds the keys).
    """
    variables = {"params": params}
    M = type(model)  # the architecture's methods (bapjax.models.builder.MODELS)
    batch = {k: jnp.asarray(v) for k, v in batch.items()}
    tokens, text_mask = batch[model.text_key], batch["text_mask"]
    check_stop_rule(stop_rule, stop_threshold, model)
    force_length = batch.get("force_length")
    sample_keys = batch.get("sample_keys")
    n = tokens.shape[0]
    slots = max(1, min(int(slots), n))
    num_items = (batch["weight"] > 0).sum().astype(jnp.int32) if "weight" in batch else jnp.int32(n)
    token_states, summary = model.apply(variables, tokens, text_mask, method=M.encode_text)
    starts = world_input.start_world(batch)
    once = model.world_encoding == "once"
    if once:  # every row's start world encoded once, before the loop (world_changes)
        encoded = model.apply(variables, starts, summary, token_states, text_mask, method=M.encode_starts)
    if stop_rule == "length":  # each row's length, once, before the loop
        length_logits = model.apply(variables, summary, starts, encoded if once else None, token_states, text_mask,
                                    method=M.length_logits)
        predicted = jnp.minimum(length_quantile(length_logits, stop_threshold), max_actions)
        force_length = predicted if force_length is None else jnp.where(force_length > 0, force_length, predicted)

    def fresh(item):
        """Decoder state and world of the items `item` [S] (index -1: a slot with nothing left)."""
        idx = jnp.maximum(item, 0)
        dec = model.apply(variables, summary[idx], token_states[idx], text_mask[idx], max_actions,
                          method=M.init_decoder)
        return dec, jax.tree_util.tree_map(lambda x: x[idx], starts)

    def select(mask, new, old):
        return jax.tree_util.tree_map(
            lambda a, b: jnp.where(mask.reshape(mask.shape + (1,) * (a.ndim - 1)), a, b), new, old)

    first = jnp.arange(slots, dtype=jnp.int32)
    item0 = jnp.where(first < num_items, first, -1)
    dec0, world0 = fresh(item0)
    carry = {"item": item0, "t": jnp.zeros(slots, jnp.int32), "prev": jnp.full(slots, START, jnp.int32),
             "dec": dec0, "world": world0, "next": jnp.minimum(jnp.int32(slots), num_items),
             "out": jnp.full((n + 1, max_actions), G.STOP, jnp.int32)}  # row n: where idle slots write
    if return_logits:
        carry["logits"] = jnp.zeros((n + 1, max_actions, G.NUM_ACTIONS_WITH_STOP), jnp.float32)

    def body(c):
        active = c["item"] >= 0
        idx = jnp.maximum(c["item"], 0)
        dec, dec_out = model.apply(variables, c["dec"], c["t"], c["prev"], token_states[idx], text_mask[idx],
                                   method=M.decoder_step)
        if once:
            start = jax.tree_util.tree_map(lambda x: x[idx], starts)
            logits = model.apply(variables, encoded[idx], start, c["world"], dec_out, max_actions,
                                 method=M.changed_world_logits)
        else:
            logits = model.apply(variables, c["world"], dec_out, method=M.world_logits)
        feasible = jax.vmap(G.feasible_mask_single)(c["world"]["grid"])
        may_stop = c["t"] >= min_actions
        if force_length is not None:
            need = force_length[idx]
            may_stop = jnp.where(need > 0, c["t"] >= need, may_stop)
        feasible = feasible.at[:, G.STOP].set(may_stop)
        if sample_keys is None:
            choice = choose_actions(logits, feasible, stop_rule, stop_threshold)
        else:
            choice = sample_actions(sample_keys[idx], c["t"], logits, feasible, temperature)
        if force_length is not None:
            choice = jnp.where((need > 0) & (c["t"] >= need), G.STOP, choice)
        if teacher_actions is not None:
            choice = jnp.asarray(teacher_actions, jnp.int32)[idx, c["t"]]
        row = jnp.where(active, c["item"], n)
        new = dict(c)
        new["out"] = c["out"].at[row, c["t"]].set(choice)
        if return_logits:
            new["logits"] = c["logits"].at[row, c["t"]].set(logits.astype(jnp.float32))
        world = jax.vmap(world_input.advance_world)(c["world"], choice)
        t = c["t"] + 1
        finished = active & ((choice == G.STOP) | (t >= max_actions))
        # Finished slots take the next waiting items, in slot order.
        waiting = c["next"] + jnp.cumsum(finished) - 1
        item = jnp.where(finished, jnp.where(waiting < num_items, waiting, -1), c["item"])
        dec_new, world_new = fresh(item)
        new.update(item=item, next=jnp.minimum(c["next"] + finished.sum(), num_items),
                   dec=select(finished, dec_new, dec), world=select(finished, world_new, world),
                   t=jnp.where(finished, 0, t), prev=jnp.where(finished, START, choice))
        return new

    final = jax.lax.while_loop(lambda c: jnp.any(c["item"] >= 0), body, carry)
    if return_logits:
        return final["out"][:n], final["logits"][:n]
    return final["out"][:n]


def make_decode_fn(model: BuilderModel, max_actions: int = 20, min_actions: int = 0, *, slots: int = 64,
                   stop_rule: str = "argmax", stop_threshold: float = 0.5, mesh=None, temperature: float = 1.0):
    """`DecodeSettings(...).decode_fn(model, mesh)`: a jitted `(params, batch) -> ids [N, max_actions]`."""
    return DecodeSettings(int(max_actions), int(min_actions), int(slots), stop_rule, float(stop_threshold),
                          temperature=float(temperature)).decode_fn(model, mesh)


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


def predict_items(model: BuilderModel, params, items: list, vocab, feature_config, batch_size: int = 32,
                  max_actions: int = 20, decode_fn=None, progress: bool = False,
                  features=None, min_actions: int = 0, *, stop_rule: str = "argmax", stop_threshold: float = 0.5,
                  mesh=None, items_per_call: int = 0, lengths: dict[str, int] | None = None,
                  sample: int | None = None, temperature: float = 1.0) -> dict[str, list[G.Action]]:
    """Greedy predictions {item_id: [Action]} for BapItems, or with `sample` (a draw number) each
    item's draw at `temperature` (`sample_keys`; a given `decode_fn` carries its own temperature).

    `batch_size` items decode at once (the pool's slots); each compiled call takes up to
    `items_per_call` items (default 16 x batch_size); the last call is padded only up to a
    multiple of `batch_size` (padding rows still pay for text encoding), so a split compiles at
    most two shapes. `decode_fn` (from `make_decode_fn`, with the same mesh) replaces the one
    built from the other arguments. `lengths` {item_id: k}: decode exactly k actions for those
    items (`decode_pool`'s `force_length`). With `feature_config.builder_frame` the items are
    decoded in their Builder's frame and the predictions turned back: they are always in the
    items' (world) coordinates.
    """
    devices = 1 if mesh is None else mesh.size
    builder_frame = feature_config.builder_frame
    decode_fn = decode_fn or make_decode_fn(model, max_actions, min_actions, slots=batch_size, stop_rule=stop_rule,
                                            stop_threshold=stop_threshold, mesh=mesh, temperature=temperature)
    keys = None if sample is None else sample_keys(sample, [item.item_id for item in items])
    if features is None:
        features = input_pipeline.featurize_items(items, vocab, feature_config)
    unit = batch_size * devices  # call sizes are multiples of this (equal rows per device)
    full_call = -(-(items_per_call or 16 * batch_size) // unit) * unit
    predictions: dict[str, list[G.Action]] = {}
    start = time.time()
    for lo in range(0, len(items), full_call):
        rows = np.arange(lo, min(lo + full_call, len(items)))
        call_size = min(full_call, -(-len(rows) // unit) * unit)
        per_device = call_size // devices
        positions = call_layout(len(rows), devices, per_device)
        table_rows = np.full(call_size, features.padding_row)
        table_rows[positions] = rows
        expanded = input_pipeline.expand_batch(features, table_rows, feature_config)
        batch = {k: expanded[k] for k in decode_keys(model)}
        if lengths is not None:
            force = np.zeros(call_size, np.int32)
            force[positions] = [int(lengths.get(items[row].item_id, 0)) for row in rows]
            batch["force_length"] = force
        if keys is not None:
            call_keys = np.zeros((call_size, 2), np.uint32)
            call_keys[positions] = keys[rows]
            batch["sample_keys"] = call_keys
        if mesh is not None:
            batch = sharding.host_batch_to_global(batch, mesh)
        ids = np.asarray(decode_fn(params, batch))
        for row, position in zip(rows, positions):
            actions = ids_to_actions(ids[position], expanded["grid"][position])
            if builder_frame:  # decoded on the item's turned grid: back to world coordinates
                actions = rotation.from_builder_frame(actions, rotation.builder_frame_turns(items[row].builder_pose.yaw))
            predictions[items[row].item_id] = actions
        if progress:
            done = int(rows[-1]) + 1
            rate = done / max(time.time() - start, 1e-9)
            print(f"decode {done}/{len(items)} items, {rate:.1f} items/s, "
                  f"ETA {(len(items) - done) / max(rate, 1e-9):.0f} s", flush=True)
    return predictions
