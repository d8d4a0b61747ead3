"""The instruction's colors as a world channel (`BuilderModel.mentioned_colors`): the featurizer's
colors against the chat, the channel against a plain-NumPy loop over cells, the option's plumbing
(feature config, cache key, decode keys) and that the model reads it."""

import dataclasses

import jax
import numpy as np

from bapjax.corpus import augment
from bapjax.data import input_pipeline
from bapjax.data.input_pipeline import FeatureConfig
from bapjax.models import builder, world_input
from bapjax.training import decode
from bapjax.world import grid as G
from bapjax.world.items import ChatTurn, last_architect_turn
from tests.test_models import TINY, random_batch


def test_colors_named_reads_the_last_architect_turn(mdc_corpus):
    item = mdc_corpus.split("val")[5]
    history = (ChatTurn("Architect", "start with a yellow row"), ChatTurn("Builder", "which red one?"),
               ChatTurn("Architect", "Put two Reds and a blue block on it"), ChatTurn("Builder", "green?"))
    named = input_pipeline.colors_named(dataclasses.replace(item, history=history))
    assert named.tolist() == [0, 1, 0, 0, 0, 1, 0]  # red, blue: the last Architect turn only
    assert input_pipeline.colors_named(dataclasses.replace(item, history=())).tolist() == [0] * 7


def test_featurized_mentions_match_the_chat(mdc_corpus):
    from bapjax.text.vocab import Vocabulary

    items = mdc_corpus.split("val")[:200]
    vocab = Vocabulary.build(items)
    on = FeatureConfig(max_text_tokens=32, max_actions=6, recent_window=4, mentioned_colors=True)
    features = input_pipeline.featurize_items(items, vocab, on)
    for row, item in enumerate(items):
        want = np.zeros(7, np.uint8)
        for color in augment.color_words(last_architect_turn(item)):
            want[color] = 1
        np.testing.assert_array_equal(features.mentions[row], want)
    assert features.mentions[:len(items)].any() and not features.mentions[-1].any()  # padding row: none
    batch = input_pipeline.expand_batch(features, np.array([0, 1, len(items)]), on)
    assert batch["mentions"].dtype == np.float32 and batch["mentions"].shape == (3, 7)
    off = dataclasses.replace(on, mentioned_colors=False)
    assert "mentions" not in input_pipeline.expand_batch(input_pipeline.featurize_items(items[:3], vocab, off),
                                                         np.arange(3), off)
    assert set(input_pipeline.feature_specs(on)) - set(input_pipeline.feature_specs(off)) == {"mentions"}


def test_the_option_follows_the_model_and_keeps_the_cache_key_when_off():
    import ml_collections

    config = ml_collections.ConfigDict({"model": {"text_encoder": "gru", "mentioned_colors": True},
                                        "features": {"max_text_tokens": 16}})
    assert FeatureConfig.from_config(config).mentioned_colors
    config.model.mentioned_colors = False
    assert not FeatureConfig.from_config(config).mentioned_colors
    assert "mentioned_colors" not in FeatureConfig().fingerprint()
    assert "mentioned_colors" in FeatureConfig(mentioned_colors=True).fingerprint()
    assert "mentioned_colors" not in input_pipeline.feature_defaults()  # a model field, not a features field
    model = builder.BuilderModel(**TINY, mentioned_colors=True)
    assert decode.decode_keys(model)[-1] == "mentions" and "mentions" not in decode.decode_keys(model.clone(
        mentioned_colors=False))


def test_mentioned_cells_match_a_plain_loop():
    rng = np.random.default_rng(3)
    grids = rng.integers(0, 7, size=(3,) + G.GRID_SHAPE).astype(np.int8)
    mentions = (rng.random((3, 7)) < 0.4).astype(np.float32)
    mentions[:, 0] = 0
    world = world_input.start_world({"grid": grids, "recent_cells": np.full((3, 4), -1, np.int32),
                                     "pose": np.zeros((3, 5), np.float32), "mentions": mentions})
    channels = np.asarray(world_input.world_channels(world, recent_decay=0.5, perspective_scale=0.1,
                                                     mentioned_colors=True))
    plain = np.asarray(world_input.world_channels(world, recent_decay=0.5, perspective_scale=0.1))
    np.testing.assert_array_equal(channels[..., :-1], plain)
    for b in range(3):
        for i, j, k in np.ndindex(*G.GRID_SHAPE):
            color = grids[b, i, j, k]
            assert channels[b, i, j, k, -1] == (1.0 if color and mentions[b, color] else 0.0)


def test_the_model_reads_the_mentions():
    rng = np.random.default_rng(0)
    batch = random_batch(rng)
    batch["grid"][:, :, 0, :] = 2  # an orange floor
    model = builder.BuilderModel(**TINY, mentioned_colors=True)
    params = builder.init_params(model, jax.random.PRNGKey(0))
    shapes = lambda p: [leaf.shape for leaf in jax.tree_util.tree_leaves(p["world_cnn"])]  # noqa: E731
    without = builder.init_params(model.clone(mentioned_colors=False), jax.random.PRNGKey(0))
    assert shapes(params) != shapes(without)  # the first layer has one more input channel
    k = int(batch["action_mask"].sum())
    named = np.zeros((3, 7), np.float32)
    none = model.apply({"params": params}, {**batch, "mentions": named}, k)[0]
    named[:, 2] = 1  # "orange"
    orange = model.apply({"params": params}, {**batch, "mentions": named}, k)[0]
    assert not np.allclose(np.asarray(none), np.asarray(orange))
