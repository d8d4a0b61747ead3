"""Greedy decoding: one compiled `lax.while_loop` over a batch of items.

Each step embeds the previous action, advances the decoder, re-encodes the current voxel world
with the CNN, masks infeasible actions (`bapjax.grid.feasible_mask_single`: occupancy, support,
the 20-per-color inventory), takes the argmax, applies it to the world, and stops an item at
STOP or after `max_actions` actions; the loop ends when every item has stopped.
"""

from __future__ import annotations

import functools
import time
import jax
import jax.numpy as jnp
import numpy as np

from bapjax import grid as G
from bapjax.models.builder import START, BuilderModel

NEG_INF = -1e9


def greedy_decode(model: BuilderModel, params, batch: dict, max_actions: int = 20,
                  min_actions: int = 0) -> jax.Array:
    """Action ids [B, max_actions] (padded with STOP) for a batch with the pipeline's keys.

    `min_actions`: STOP is masked for the first steps (a BAP item always has at least one
    action, so 1 is a sound constraint; 0 leaves STOP to the model).
    """
    variables = {"params": params}
    tokens, text_mask = batch["text_tokens"], batch["text_mask"]
    bsz = tokens.shape[0]
    token_states, summary = model.apply(variables, tokens, text_mask, method=BuilderModel.encode_text)
    dec_state = model.apply(variables, summary, token_states, text_mask, max_actions,
                            method=BuilderModel.init_decoder)

    def cond(carry):
        t, _, _, _, done, _ = carry
        return (t < max_actions) & ~jnp.all(done)

    def body(carry):
        t, dec_state, world, prev, done, out = carry
        dec_state, dec_out = model.apply(variables, dec_state, t, prev, token_states, text_mask,
                                         method=BuilderModel.decoder_step)
        feats = model.apply(variables, world, batch["recent"], batch["perspective"],
                            method=BuilderModel.encode_world)
        logits = model.apply(variables, feats, dec_out, method=BuilderModel.action_logits)
        feasible = jax.vmap(G.feasible_mask_single)(world)
        feasible = feasible.at[:, G.STOP].set(t >= min_actions)
        choice = jnp.argmax(jnp.where(feasible, logits, NEG_INF), axis=-1).astype(jnp.int32)
        choice = jnp.where(done, G.STOP, choice)
        world = jax.vmap(G.apply_action)(world, choice)
        out = out.at[:, t].set(choice)
        return t + 1, dec_state, world, choice, done | (choice == G.STOP), out

    init = (jnp.int32(0), dec_state, batch["grid"].astype(jnp.int8), jnp.full((bsz,), START, jnp.int32),
            jnp.zeros((bsz,), bool), jnp.full((bsz, max_actions), G.STOP, jnp.int32))
    return jax.lax.while_loop(cond, body, init)[-1]


def make_decode_fn(model: BuilderModel, max_actions: int = 20, min_actions: int = 0):
    """A jitted `(params, batch) -> ids [B, max_actions]`."""
    return jax.jit(functools.partial(greedy_decode, model, max_actions=max_actions, min_actions=min_actions))


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


_DECODE_KEYS = ("text_tokens", "text_mask", "grid", "recent", "perspective")


def predict_items(model: BuilderModel, params, items: list, vocab, feature_config, batch_size: int = 32,
                  max_actions: int = 20, decode_fn=None, progress: bool = False,
                  features=None, min_actions: int = 0) -> dict[str, list[G.Action]]:
    """Greedy predictions {item_id: [Action]} for BapItems, decoded in fixed-size batches (the
    last one filled with padding rows, so one compiled shape serves every batch)."""
    from bapjax import input_pipeline  # sibling module; imported lazily to keep decode light

    decode_fn = decode_fn or make_decode_fn(model, max_actions, min_actions)
    if features is None:
        features = input_pipeline.featurize_items(items, vocab, feature_config)
    predictions: dict[str, list[G.Action]] = {}
    start = time.time()
    for lo in range(0, len(items), batch_size):
        rows = np.arange(lo, min(lo + batch_size, len(items)))
        padded = np.concatenate([rows, np.full(batch_size - len(rows), features.padding_row)])
        expanded = input_pipeline.expand_batch(features, padded, feature_config)
        ids = np.asarray(decode_fn(params, {k: expanded[k] for k in _DECODE_KEYS}))
        for offset, (row, ids_row) in enumerate(zip(rows, ids)):
            predictions[items[row].item_id] = ids_to_actions(ids_row, expanded["grid"][offset])
        if progress:
            done = int(rows[-1]) + 1
            rate = done / max(time.time() - start, 1e-9)
            print(f"decode {done}/{len(items)} items, {rate:.1f} items/s, "
                  f"ETA {(len(items) - done) / max(rate, 1e-9):.0f} s", flush=True)
    return predictions
