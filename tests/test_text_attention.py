"""Cells that read the instruction (`BuilderModel.text_attention`): the attention against a
plain-NumPy statement, padding tokens unread, the model's teacher-forced logits against a slow
path that encodes each item alone, and the option's config check."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from bapjax.models import builder
from tests.test_decode import randomize_film
from tests.test_models import TINY, assert_option_trains_and_adds_only, random_batch
from tests.test_world_changes import _batch_with_removals, assert_once_logits_equal_the_slow_path

ATTENTION = dict(world_encoding="once", world_film=True, text_attention=8)


def _reference_read(params, features, states, mask):
    """features [N, X, Y, Z, F] plus one attention head's read of states [N, L, D], in NumPy loops
    over items and cells."""
    p = {k: {n: np.asarray(v, np.float64) for n, v in layer.items()} for k, layer in params.items()}
    features, states = np.asarray(features, np.float64), np.asarray(states, np.float64)
    n, f = features.shape[0], features.shape[-1]
    out = features.copy().reshape(n, -1, f)
    for b in range(n):
        keys = np.einsum("ld,dhk->lk", states[b], p["key"]["kernel"]) + p["key"]["bias"][0]
        values = np.einsum("ld,dhk->lk", states[b], p["value"]["kernel"]) + p["value"]["bias"][0]
        real = np.flatnonzero(mask[b])
        for c in range(out.shape[1]):
            query = np.einsum("d,dhk->k", features[b].reshape(-1, f)[c], p["query"]["kernel"]) + p["query"]["bias"][0]
            scores = keys[real] @ query / np.sqrt(query.shape[0])
            weights = np.exp(scores - scores.max())
            weights /= weights.sum()
            read = weights @ values[real]
            out[b, c] += np.einsum("k,hkf->f", read, p["out"]["kernel"]) + p["out"]["bias"]
    return out.reshape(features.shape)


def _model_and_params(seed=0):
    model = builder.BuilderModel(**TINY, **ATTENTION)
    return model, randomize_film(builder.init_params(model, jax.random.PRNGKey(seed)))


def test_read_text_matches_a_plain_reference_and_ignores_padding():
    model, params = _model_and_params()
    rng = np.random.default_rng(0)
    features = jnp.asarray(rng.normal(size=(2, 11, 9, 11, TINY["world_features"])), jnp.float32)
    states = jnp.asarray(rng.normal(size=(2, 5, TINY["text_hidden"])), jnp.float32)
    mask = np.array([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]], bool)
    got = model.apply({"params": params}, features, states, mask, method=builder.BuilderModel.read_text)
    want = _reference_read(params["cell_text_attention"], features, states, mask)
    np.testing.assert_allclose(np.asarray(got), want, rtol=1e-4, atol=1e-4)
    assert not np.allclose(np.asarray(got), np.asarray(features))  # the read changes the features
    padded = states.at[0, 3:].set(100.0)  # what padding holds is never read
    again = model.apply({"params": params}, features, padded, mask, method=builder.BuilderModel.read_text)
    np.testing.assert_allclose(np.asarray(again), np.asarray(got), rtol=1e-6, atol=1e-6)


def test_logits_equal_a_slow_path_that_encodes_each_item_alone():
    """Teacher-forced logits (start worlds encoded in chunks of 3, each cell reading its own item's
    text) equal, step by step, one item's start world encoded and read alone plus the dense change
    convolution of the plain-Python change channels, through the head."""
    batch = _batch_with_removals(4, batch=4, steps=6)
    model = builder.BuilderModel(**TINY, **ATTENTION, encode_chunk=3)
    params = randomize_film(builder.init_params(model, jax.random.PRNGKey(2)))
    assert_once_logits_equal_the_slow_path(model, params, batch)


def test_the_attention_trains_and_adds_only_its_parameters():
    """Every parameter of the attention gets a gradient, and the option adds no other parameter."""
    model, params = _model_and_params(1)
    assert_option_trains_and_adds_only(model, params, random_batch(np.random.default_rng(1)), "text_attention",
                                       {"cell_text_attention"})


def test_text_attention_needs_the_once_encoding():
    with pytest.raises(builder.ModelConfigError, match="text_attention=8 needs --config.model.world_encoding=once"):
        builder.model_kwargs({"text_attention": 8})
    with pytest.raises(builder.ModelConfigError, match="text_attention=-1 is out of range"):
        builder.model_kwargs({"text_attention": -1, "world_encoding": "once"})
    assert builder.model_kwargs({"text_attention": 8, "world_encoding": "once"})["text_attention"] == 8
