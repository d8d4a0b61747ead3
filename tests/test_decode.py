"""Greedy decoding: never infeasible, stops at STOP/max length, equals a plain step-by-step loop."""

import jax
import numpy as np
import pytest

from bapjax import decode
from bapjax import grid as G
from bapjax.models import builder

TINY = dict(vocab_size=30, embedding_dim=8, text_hidden=16, world_features=8, world_layers=2,
            action_embedding=16, decoder_hidden=16, head_hidden=16)


def _batch(grids, rng):
    n = len(grids)
    return {
        "text_tokens": rng.integers(2, 30, size=(n, 6)).astype(np.int32),
        "text_mask": np.ones((n, 6), bool),
        "grid": np.stack(grids).astype(np.int8),
        "recent": np.zeros((n,) + G.GRID_SHAPE, np.float32),
        "perspective": rng.normal(size=(n,) + G.GRID_SHAPE + (3,)).astype(np.float32),
    }


def _grids(rng):
    empty = np.zeros(G.GRID_SHAPE, np.int8)
    # all 20 red blocks on the ground: red placements are out of inventory
    red_full = empty.copy()
    cells = [(i, k) for i in range(11) for k in range(11)][:20]
    for i, k in cells:
        red_full[i, 0, k] = 1
    random_tower = empty.copy()
    random_tower[3:7, 0:3, 4:6] = rng.integers(1, 7, size=(4, 3, 2))
    return [empty, red_full, random_tower, red_full.copy()]


def _biased_params(model, seed, slot_bias):
    """Random params with the per-cell head biased to one slot (e.g. removal or red), so the
    unmasked argmax would often be infeasible."""
    params = builder.init_params(model, jax.random.PRNGKey(seed))
    params = jax.tree_util.tree_map(lambda x: x, params)
    bias = np.zeros(G.ACTIONS_PER_CELL, np.float32)
    bias[slot_bias] = 5.0
    params["head_out"]["bias"] = params["head_out"]["bias"] + bias
    params["stop_out"]["bias"] = params["stop_out"]["bias"] - 5.0  # keep decoding long
    return params


def _check_feasible(grid, ids):
    """Plain-Python feasibility of every step (`bapjax.grid.is_feasible` on structure dicts)."""
    structure = {G.index_to_cell(i, j, k): int(c) for (i, j, k), c in np.ndenumerate(grid) if c}
    stopped = False
    for action_id in ids:
        if stopped:
            assert action_id == G.STOP, "an action after STOP"
            continue
        if action_id == G.STOP:
            stopped = True
            continue
        action = G.decode_action(int(action_id))
        if action.type == G.REMOVE:  # a removal removes whatever is there
            action = action._replace(color=structure.get((action.x, action.y, action.z), 0))
        assert action.color != 0 and G.is_feasible(structure, action), (
            action, G.infeasibility_reason(structure, action))
        structure = G.apply_to_structure(structure, action)


@pytest.mark.parametrize("slot_bias", [G.REMOVE_SLOT, 0])
def test_decoding_never_emits_an_infeasible_action(slot_bias):
    rng = np.random.default_rng(slot_bias)
    model = builder.BuilderModel(**TINY)
    fn = decode.make_decode_fn(model, max_actions=12)
    batch = _batch(_grids(rng), rng)
    for seed in range(3):
        ids = np.asarray(fn(_biased_params(model, seed, slot_bias), batch))
        assert ids.shape == (4, 12)
        for grid, row in zip(batch["grid"], ids):
            _check_feasible(grid, row)


def test_stops_at_max_length_and_at_stop():
    rng = np.random.default_rng(7)
    model = builder.BuilderModel(**TINY)
    batch = _batch(_grids(rng)[:2], rng)
    params = _biased_params(model, 0, 0)
    ids = np.asarray(decode.make_decode_fn(model, max_actions=5)(params, batch))
    assert ids.shape == (2, 5) and (ids < G.NUM_ACTIONS).all()  # STOP strongly disfavoured
    params["stop_out"]["bias"] = params["stop_out"]["bias"] + 1e4  # STOP always wins
    ids = np.asarray(decode.make_decode_fn(model, max_actions=5)(params, batch))
    assert (ids == G.STOP).all()
    ids = np.asarray(decode.make_decode_fn(model, max_actions=5, min_actions=1)(params, batch))
    assert (ids[:, 0] < G.NUM_ACTIONS).all() and (ids[:, 1:] == G.STOP).all()
    assert decode.ids_to_actions(np.array([5, G.STOP, 7])) == [G.decode_action(5)]
    grid = np.zeros(G.GRID_SHAPE, np.int8)
    place = G.encode_action(G.Action(G.PLACE, 3, 0, 1, 0))
    remove = G.encode_action(G.Action(G.REMOVE, 3, 0, 1, 0))
    assert decode.ids_to_actions(np.array([place, remove, G.STOP]), grid) == [
        G.Action(G.PLACE, 3, 0, 1, 0), G.Action(G.REMOVE, 3, 0, 1, 0)]


def test_compiled_decoding_equals_a_plain_python_loop():
    """The reference: call the model's pieces step by step, mask with Python `is_feasible`."""
    rng = np.random.default_rng(3)
    model = builder.BuilderModel(**TINY)
    params = _biased_params(model, 1, G.REMOVE_SLOT)
    params["stop_out"]["bias"] = params["stop_out"]["bias"] + 4.5  # some items stop early
    batch = _batch(_grids(rng)[2:], rng)
    max_actions = 4
    ids = np.asarray(decode.make_decode_fn(model, max_actions)(params, batch))

    v, M = {"params": params}, builder.BuilderModel
    token_states, summary = model.apply(v, batch["text_tokens"], batch["text_mask"], method=M.encode_text)
    for b in range(len(batch["grid"])):
        sl = slice(b, b + 1)
        state = model.apply(v, summary[sl], token_states[sl], batch["text_mask"][sl], max_actions,
                            method=M.init_decoder)
        grid = batch["grid"][b].copy()
        structure = {G.index_to_cell(i, j, k): int(c) for (i, j, k), c in np.ndenumerate(grid) if c}
        prev, expected = builder.START, []
        for t in range(max_actions):
            state, out = model.apply(v, state, t, np.array([prev]), token_states[sl], batch["text_mask"][sl],
                                     method=M.decoder_step)
            feats = model.apply(v, grid[None], batch["recent"][sl], batch["perspective"][sl], method=M.encode_world)
            logits = np.asarray(model.apply(v, feats, out, method=M.action_logits))[0]
            order = np.argsort(-logits, kind="stable")
            choice = next(int(a) for a in order
                          if a == G.STOP or G.is_feasible(structure, G.decode_action(int(a), grid)))
            expected.append(choice)
            if choice == G.STOP:
                break
            action = G.decode_action(choice)
            structure = G.apply_to_structure(structure, action)
            i, j, k = G.cell_to_index(action.x, action.y, action.z)
            grid[i, j, k] = 0 if action.type == G.REMOVE else action.color
            prev = choice
        expected += [G.STOP] * (max_actions - len(expected))
        assert ids[b].tolist() == expected
