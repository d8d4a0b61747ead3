"""world_encoding "once": the change features against a plain-Python walk, the sparse change
convolution against the dense one, and the model's logits against a slow path that encodes each
step's item from scratch."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from bapjax.models import builder, world_changes, world_input
from bapjax.world import grid as G
from tests.test_decode import randomize_film
from tests.test_models import TINY, flat_model, random_batch, with_world


def _reference_changes(grid0, grid, own_recent, decay):
    """Plain loops: placed color one-hot and removed flag where `grid` differs from `grid0`, and
    the recency weight decay**k of the k-th newest of the item's own actions (`own_recent`)."""
    out = np.zeros(G.GRID_SHAPE + (world_changes.CHANGE_CHANNELS,), np.float32)
    for (i, j, k), color in np.ndenumerate(grid):
        start = int(grid0[i, j, k])
        if int(color) != start:
            if color > 0:
                out[i, j, k, int(color) - 1] = 1.0
            if start > 0:
                out[i, j, k, G.NUM_COLORS] = 1.0
    for age, cell in enumerate(own_recent):
        i, j, k = np.unravel_index(cell, G.GRID_SHAPE)
        out[i, j, k, -1] = max(out[i, j, k, -1], decay ** age)
    return out


def _walk(batch, decay):
    """(b, t) -> reference change channels before step t, by applying the actions one by one."""
    expected = {}
    window = batch["recent_cells"].shape[1]
    for b in range(len(batch["grid"])):
        grid0 = batch["grid"][b]
        grid, own = grid0.copy(), []
        for t, action_id in enumerate(batch["actions"][b]):
            expected[b, t] = _reference_changes(grid0, grid, own[:window], decay)
            if action_id < G.NUM_ACTIONS:
                a = G.decode_action(int(action_id))
                i, j, k = G.cell_to_index(a.x, a.y, a.z)
                grid[i, j, k] = 0 if a.type == G.REMOVE else a.color
                own = [int(action_id) // G.ACTIONS_PER_CELL] + own
    return expected


def _batch_with_removals(seed, batch=4, steps=8):
    """random_batch with some actions removing or recoloring start blocks and repeating cells."""
    rng = np.random.default_rng(seed)
    data = random_batch(rng, batch=batch, steps=steps)
    for b in range(batch):
        n = int(data["action_mask"][b].sum()) - 1
        for t in range(n):
            if rng.random() < 0.4:  # act on an occupied start cell (remove or recolor)
                i, k = rng.integers(0, 11, size=2)
                slot = G.REMOVE_SLOT if rng.random() < 0.5 else int(rng.integers(0, G.NUM_COLORS))
                data["actions"][b, t] = np.ravel_multi_index((i, 0, k), G.GRID_SHAPE) * G.ACTIONS_PER_CELL + slot
            elif t and rng.random() < 0.3:  # the cell of the previous action again
                cell = data["actions"][b, t - 1] // G.ACTIONS_PER_CELL
                data["actions"][b, t] = cell * G.ACTIONS_PER_CELL + int(rng.integers(0, G.ACTIONS_PER_CELL))
    return data


def test_change_channels_match_a_plain_walk():
    batch = _batch_with_removals(1, batch=5, steps=14)  # more actions than the recent window (4)
    worlds = world_input.worlds_before_each_step(world_input.start_world(batch), jnp.asarray(batch["actions"]))
    start = world_input.start_world(batch)
    start_bt = jax.tree_util.tree_map(lambda x: jnp.broadcast_to(x[:, None], worlds["grid"].shape[:2] + x.shape[1:]),
                                      start)
    got = np.asarray(world_changes.change_channels(worlds, start_bt, 0.5))
    expected = _walk(batch, 0.5)
    assert any(e[..., G.NUM_COLORS].any() for e in expected.values())  # removals happen
    for (b, t), want in expected.items():
        np.testing.assert_allclose(got[b, t], want, err_msg=f"item {b} step {t}")
    assert not got[:, 0].any()  # nothing changed before the first action


@pytest.mark.parametrize("kernel_size", [1, 3])
def test_sparse_change_conv_equals_the_dense_convolution(kernel_size):
    rng = np.random.default_rng(kernel_size)
    changes = np.zeros((6,) + G.GRID_SHAPE + (world_changes.CHANGE_CHANNELS,), np.float32)
    corners = [(0, 0, 0), (10, 8, 10), (0, 8, 5), (10, 0, 0)]
    for row in range(6):
        cells = corners if row == 0 else [tuple(rng.integers(0, n) for n in G.GRID_SHAPE) for _ in range(row * 3)]
        for cell in cells:
            changes[(row,) + cell] = rng.normal(size=world_changes.CHANGE_CHANNELS)
    changes[5] = 0  # a row with nothing changed
    kernel = jnp.asarray(rng.normal(size=(kernel_size,) * 3 + (world_changes.CHANGE_CHANNELS, 5)), jnp.float32)
    dense = np.asarray(world_changes.dense_change_conv(jnp.asarray(changes), kernel))
    sparse = np.asarray(world_changes.sparse_change_conv(jnp.asarray(changes), kernel, max_changed=16))
    np.testing.assert_allclose(sparse, dense, rtol=1e-5, atol=1e-5)
    assert not sparse[5].any()
    # the kernel's gradient too (what training uses)
    weights = jnp.asarray(rng.normal(size=dense.shape), jnp.float32)
    grads = [jax.grad(lambda w, f=f: (f(w) * weights).sum())(kernel) for f in (
        lambda w: world_changes.dense_change_conv(jnp.asarray(changes), w),
        lambda w: world_changes.sparse_change_conv(jnp.asarray(changes), w, 16))]
    np.testing.assert_allclose(grads[1], grads[0], rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("film", [False, True])
def test_once_logits_equal_a_slow_path_per_step(film):
    """The model's teacher-forced logits (chunked CNN over start worlds, sparse change conv) equal,
    step by step, a slow path: the item's start world encoded alone (FiLM on its text summary),
    plus the dense convolution of the plain-Python change channels, through the head."""
    batch = _batch_with_removals(2, batch=4, steps=7)
    model = flat_model(**TINY, world_encoding="once", world_film=film, encode_chunk=3)
    params = randomize_film(builder.init_params(model, jax.random.PRNGKey(5)))
    assert_once_logits_equal_the_slow_path(model, params, batch)


def assert_once_logits_equal_the_slow_path(model, params, batch):
    """The slow path of `test_once_logits_equal_a_slow_path_per_step`, per packed (item, step): the
    item's start world encoded alone, plus the dense convolution of the plain-Python change
    channels, through the head."""
    k = int(batch["action_mask"].sum())
    logits, pack = model.apply({"params": params}, batch, k)
    v, M = {"params": params}, type(model)
    token_states, summary, dec_out = _decoder_outputs(model, v, batch)  # the decoder itself is tested elsewhere
    expected = _walk(batch, model.world.recent_decay)
    kernel = params["world_changes"]["kernel"]
    whole = with_world(model, encode_chunk=0)
    for row, (b, t) in enumerate(zip(np.asarray(pack["item"]), np.asarray(pack["step"]))):
        start = jax.tree_util.tree_map(lambda x: x[b:b + 1], world_input.start_world(batch))
        encoded = whole.apply(v, start, summary[b:b + 1], method=M.encode_world)
        changes = world_changes.dense_change_conv(jnp.asarray(expected[b, t])[None], kernel)
        want = whole.apply(v, encoded + changes, dec_out[b, t][None], method=M.action_logits)[0]
        np.testing.assert_allclose(np.asarray(logits[row]), np.asarray(want), rtol=2e-4, atol=2e-4)


def _decoder_outputs(model, v, batch):
    M = type(model)
    actions = jnp.asarray(batch["actions"], jnp.int32)
    token_states, summary = model.apply(v, batch["text_tokens"], batch["text_mask"], method=M.encode_text)
    prev = jnp.concatenate([jnp.full((actions.shape[0], 1), builder.START, jnp.int32), actions[:, :-1]], 1)
    state = model.apply(v, summary, token_states, batch["text_mask"], actions.shape[1], method=M.init_decoder)
    return token_states, summary, model.apply(v, state, prev, token_states, batch["text_mask"],
                                              method=M.decoder_sequence)


def test_once_gradients_do_not_depend_on_the_chunking():
    batch = _batch_with_removals(3, batch=4, steps=6)
    whole = flat_model(**TINY, world_encoding="once", world_film=True)
    params = randomize_film(builder.init_params(whole, jax.random.PRNGKey(1)))
    grads = [jax.jit(jax.grad(lambda p, m=m: builder.loss_from_logits(*m.apply({"params": p}, batch, 24))[0]))(params)
             for m in (whole, with_world(whole, encode_chunk=3))]  # each one compiled program
    for a, b in zip(*(jax.tree_util.tree_leaves(g) for g in grads)):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6)
    assert float(jnp.abs(grads[0]["world_changes"]["kernel"]).sum()) > 0


def test_model_names_are_checked():
    with pytest.raises(builder.ModelConfigError, match="config.model.name='twice': the models are per_step, once"):
        flat_model(**TINY, world_encoding="twice")
