"""Pointers to the blocks the instruction names (`BuilderModel.anchor_heads`): the pointer weights
and their convolution against plain-NumPy loops, an empty world adding nothing, the model's
teacher-forced logits against a slow path that encodes each item alone, gradients, and the
option's config check."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from bapjax.models import builder
from bapjax.world import grid as G
from tests.test_decode import randomize_film
from tests.test_models import TINY, assert_option_trains_and_adds_only, random_batch
from tests.test_world_changes import _batch_with_removals, assert_once_logits_equal_the_slow_path

ANCHORS = dict(world_encoding="once", world_film=True, anchor_heads=2, anchor_kernel=3)


def _reference_anchor(params, features, grid, summary, kernel_size):
    """features [N, X, Y, Z, F] plus, per cell, the kernel-weighted pointer weights of the cells around
    it, in NumPy loops over items, heads, cells and kernel offsets."""
    p = jax.tree_util.tree_map(lambda x: np.asarray(x, np.float64),
                               {k: params[k] for k in ("anchor_key", "anchor_query", "anchor_none", "anchor_conv")})
    features, summary = np.asarray(features, np.float64), np.asarray(summary, np.float64)
    n, f = features.shape[0], features.shape[-1]
    heads = p["anchor_none"].shape[0]
    cells = np.stack(np.unravel_index(np.arange(G.NUM_CELLS), G.GRID_SHAPE), -1)
    out = features.copy()
    r = kernel_size // 2
    for b in range(n):
        flat = features[b].reshape(-1, f)
        keys = (flat @ p["anchor_key"]["kernel"] + p["anchor_key"]["bias"]).reshape(-1, heads, f)
        query = (summary[b] @ p["anchor_query"]["kernel"] + p["anchor_query"]["bias"]).reshape(heads, f)
        occupied = np.flatnonzero(np.asarray(grid[b]).reshape(-1) > 0)
        weights = np.zeros((G.NUM_CELLS, heads))
        for h in range(heads):
            scores = [keys[c, h] @ query[h] / np.sqrt(f) for c in occupied] + [p["anchor_none"][h]]
            e = np.exp(np.array(scores) - max(scores))
            weights[occupied, h] = (e / e.sum())[:-1]
        for c, (i, j, k) in enumerate(cells):
            for di, dj, dk in np.ndindex(p["anchor_conv"].shape[:3]):
                u = (i + di - r, j + dj - r, k + dk - r)
                if all(0 <= u[a] < G.GRID_SHAPE[a] for a in range(3)):
                    src = np.ravel_multi_index(u, G.GRID_SHAPE)
                    out[b, i, j, k] += weights[src] @ p["anchor_conv"][di, dj, dk]
    return out


def _model_and_params(seed=0, **options):
    model = builder.BuilderModel(**TINY, **{**ANCHORS, **options})
    return model, randomize_film(builder.init_params(model, jax.random.PRNGKey(seed)))


def _inputs(rng, n=2):
    features = jnp.asarray(rng.normal(size=(n, 11, 9, 11, TINY["world_features"])), jnp.float32)
    grid = np.zeros((n,) + G.GRID_SHAPE, np.int8)
    grid[:, :, 0, :] = rng.integers(0, 2, size=(n, 11, 11))
    grid[:, 4, 1:4, 5] = 3  # a tower in the middle of each world
    summary = jnp.asarray(rng.normal(size=(n, TINY["text_hidden"])), jnp.float32)
    return features, jnp.asarray(grid), summary


@pytest.mark.parametrize("kernel_size", [3, 5])
def test_point_anchors_matches_a_plain_reference(kernel_size):
    model, params = _model_and_params(anchor_kernel=kernel_size)
    params = {**params, "anchor_none": jnp.asarray([0.5, -1.0])}  # "no block" has a say
    features, grid, summary = _inputs(np.random.default_rng(0))
    got = model.apply({"params": params}, features, grid, summary, method=builder.BuilderModel.point_anchors)
    want = _reference_anchor(params, features, grid, summary, kernel_size)
    np.testing.assert_allclose(np.asarray(got), want, rtol=1e-4, atol=1e-4)
    assert not np.allclose(np.asarray(got), np.asarray(features))
    weights = np.asarray(model.apply({"params": params}, features, grid, summary,
                                     method=builder.BuilderModel.anchor_weights))
    assert (weights[np.asarray(grid) == 0] == 0).all()  # pointers land on blocks only
    assert ((weights.sum(axis=(1, 2, 3)) > 0) & (weights.sum(axis=(1, 2, 3)) < 1)).all()  # the rest: no block


def test_an_empty_world_adds_nothing():
    model, params = _model_and_params(1)
    features, grid, summary = _inputs(np.random.default_rng(1))
    empty = jnp.zeros_like(grid)
    got = model.apply({"params": params}, features, empty, summary, method=builder.BuilderModel.point_anchors)
    np.testing.assert_array_equal(np.asarray(got), np.asarray(features))


@pytest.mark.parametrize("options", [{}, {"text_attention": 8}])
def test_logits_equal_a_slow_path_that_encodes_each_item_alone(options):
    """Teacher-forced logits (start worlds encoded in chunks of 3, then the pointers) equal, step by
    step, one item's start world encoded and pointed at alone plus the dense change convolution."""
    batch = _batch_with_removals(6, batch=4, steps=6)
    model, _ = _model_and_params(**options)
    model = model.clone(encode_chunk=3)
    params = randomize_film(builder.init_params(model, jax.random.PRNGKey(3)))
    assert_once_logits_equal_the_slow_path(model, params, batch)


def test_the_pointers_train_and_add_only_their_parameters():
    model, params = _model_and_params(2)
    assert_option_trains_and_adds_only(model, params, random_batch(np.random.default_rng(2)), "anchor_heads",
                                       {"anchor_query", "anchor_key", "anchor_none", "anchor_conv"})


def test_anchor_options_are_checked():
    with pytest.raises(builder.ModelConfigError, match="anchor_heads=2 needs --config.model.world_encoding=once"):
        builder.model_kwargs({"anchor_heads": 2})
    with pytest.raises(builder.ModelConfigError, match="anchor_heads=-1 is out of range"):
        builder.model_kwargs({"anchor_heads": -1, "world_encoding": "once"})
    with pytest.raises(builder.ModelConfigError, match="anchor_kernel=4 is out of range"):
        builder.model_kwargs({"anchor_heads": 2, "anchor_kernel": 4, "world_encoding": "once"})
    assert builder.model_kwargs({"anchor_heads": 2, "world_encoding": "once"})["anchor_heads"] == 2
