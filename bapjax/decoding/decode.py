"""Decoding passes over BapItems, {item_id: [Action]} in the items' world coordinates: one pass
(`predict_items`: greedy, forced `lengths`, or draw number `sample`), several draws decoded together
(`predict_draws`: each item's text and start world encoded once), the greedy pass and K draws
(`candidates`), and what `DecodeSettings` say to predict from them (`predict`, `select`: the greedy
pass, the minimum-Bayes-risk selection at a cost, or a rule per kind of board, `bapjax.decoding.mbr`).
"""

from __future__ import annotations

import sys
from typing import Sequence

import numpy as np

from bapjax import cli, sharding
from bapjax.data import input_pipeline
from bapjax.decoding import mbr
from bapjax.decoding.kernel import Mode, sample_keys
from bapjax.decoding.settings import DecodeSettings
from bapjax.models import world_input
from bapjax.models.builder import BuilderModel
from bapjax.world import grid as G
from bapjax.world import rotation


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
    `decode_fn` (`settings.decode_fn(model, mesh)`, with the same mesh; called as
    `(params, batch, mode, lengths=, sample_keys=)`, `settings.Decoder`) saves compiling it again.
    With `feature_config.builder_frame` the items are decoded in their Builder's frame and the
    predictions turned back: they are always in the items' (world) coordinates.
    """
    draws = [] if sample is None else [sample]
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
            lengths: dict[str, int] | None, draws: list[int], decode_fn, mesh, features, items_per_call: int,
            progress: bool) -> list[dict[str, list[G.Action]]]:
    """`predict_items` (no `draws`: the STOP rule, or forced `lengths`, one pass; one draw number:
    that draw) and `predict_draws` (several): one pass per draw, decoded in the `Mode` of
    K = len(draws) draws (K >= 1: keys [N, K, 2], ids [N, K, max_actions]), forced where `lengths`
    are given."""
    devices = 1 if mesh is None else mesh.size
    decode_fn = decode_fn or settings.decode_fn(model, mesh)
    mode = Mode(draws=len(draws), forced=lengths is not None)
    if mode.draws:
        ids = [item.item_id for item in items]
        keys = np.stack([sample_keys(k, ids) for k in draws], axis=1)  # [items, K, 2]
    if features is None:
        features = input_pipeline.featurize_items(items, vocab, feature_config)
    unit = settings.slots * devices  # call sizes are multiples of this (equal rows per device)
    full_call = -(-(items_per_call or 16 * settings.slots) // unit) * unit
    passes: list[dict[str, list[G.Action]]] = [{} for _ in range(mode.per_row)]
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
        if mode.forced:
            call["lengths"] = np.zeros(call_size, np.int32)
            call["lengths"][positions] = [int(lengths.get(items[row].item_id, 0)) for row in rows]
        if mode.draws:
            call["sample_keys"] = np.zeros((call_size,) + keys.shape[1:], np.uint32)
            call["sample_keys"][positions] = keys[rows]
        if mesh is not None:
            batch, call = sharding.host_batch_to_global(batch, mesh), sharding.host_batch_to_global(call, mesh)
        ids = np.asarray(decode_fn(params, batch, mode, **call))
        if not mode.draws:  # [N, max_actions]: the one pass
            ids = ids[:, None]
        for row, position in zip(rows, positions):
            for one, sequence in zip(passes, ids[position]):
                one[items[row].item_id] = _world_actions(items[row], sequence, expanded["grid"][position],
                                                         feature_config.builder_frame)
        if progress:  # stderr, as every progress line: stdout keeps the tables and JSON a command prints
            print(f"decode {mode.describe()}: {rule.line(int(rows[-1]) + 1)}", file=sys.stderr, flush=True)
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


def select(passes: list[dict], settings: DecodeSettings, items: Sequence) -> dict[str, list[G.Action]]:
    """What `predict` returns for `items` (BapItems) from their [greedy, draw 1, ...] (`candidates`,
    at `settings`' STOP rule and temperature): the greedy pass when `settings.samples` is 0 (or
    only it was decoded), else among the greedy pass and the first `settings.samples` draws each
    item's board's rule (`settings.rules`, `mbr.combine_item`: "select" at a cost, the
    minimum-Bayes-risk selection, or "vote" at a share, built from the item's start structure)."""
    if settings.samples == 0 or len(passes) == 1:
        return passes[0]
    passes = passes[:settings.samples + 1]
    if not items:
        raise ValueError("choosing among draws needs the items (their board and start structure)")
    rules = dict(zip(mbr.BOARDS, settings.rules))
    return {item.item_id: mbr.combine_item([one[item.item_id] for one in passes], *rules[mbr.board(item)],
                                      item.prev_structure) for item in items}
