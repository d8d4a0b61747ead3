"""Featurization (shapes with chex, values against plain references) and the resumable iterator."""

import dataclasses
import json
import math

import chex
import jax.numpy as jnp
import ml_collections
import numpy as np
import pytest

from bapjax.corpus import augment
from bapjax.data import input_pipeline
from bapjax.data.input_pipeline import DataIterator, FeatureConfig
from bapjax.models import world_input
from bapjax.text import tokenizer
from bapjax.text.vocab import Vocabulary
from bapjax.world import grid
from bapjax.world.grid import Action
from bapjax.world.items import BuilderPose

CONFIG = FeatureConfig(max_text_tokens=64, max_actions=6, recent_window=4)
RECENT_DECAY, PERSPECTIVE_SCALE = 0.5, 0.1  # the model's world-input options (BuilderModel fields)


@pytest.fixture(scope="module")
def train(mdc_corpus):
    return mdc_corpus.split("train")[:600]


@pytest.fixture(scope="module")
def vocab(mdc_corpus):
    return Vocabulary.build(mdc_corpus.split("train"), min_count=2)


@pytest.fixture(scope="module")
def features(train, vocab):
    return input_pipeline.featurize_items(train, vocab, CONFIG)


def test_featurize_shapes_and_dtypes(train, vocab):
    out = input_pipeline.featurize(train[10], vocab, CONFIG)
    specs = input_pipeline.feature_specs(CONFIG)
    assert set(out) == set(specs)
    for key, (shape, dtype) in specs.items():
        chex.assert_shape(out[key], shape)
        chex.assert_type(out[key], dtype)
    chex.assert_shape(out["recent_cells"], (CONFIG.recent_window,))
    chex.assert_shape(out["actions"], (CONFIG.max_actions + 1,))


def _reference_recent(item, config, decay=RECENT_DECAY):
    out = np.zeros(grid.GRID_SHAPE, np.float32)
    past = [e for e in item.history if isinstance(e, Action)][::-1][:config.recent_window]
    for age, action in reversed(list(enumerate(past))):
        if grid.in_region(action.x, action.y, action.z):
            out[grid.cell_to_index(action.x, action.y, action.z)] = decay ** age
    return out


def _reference_perspective(pose, x, y, z, scale):
    vx, vy, vz = x + 0.5 - pose.x, y + 0.5 - (pose.y + grid.EYE_HEIGHT), z + 0.5 - pose.z
    yaw, pitch = math.radians(pose.yaw), math.radians(pose.pitch)
    right = math.cos(yaw) * vx + math.sin(yaw) * vz
    forward = -math.sin(yaw) * vx + math.cos(yaw) * vz
    up = math.cos(pitch) * vy + math.sin(pitch) * forward
    depth = -math.sin(pitch) * vy + math.cos(pitch) * forward
    return np.array([right, up, depth]) * scale


def test_featurize_values_match_plain_references(train, vocab):
    rng = np.random.default_rng(0)
    for n in rng.choice(len(train), 40, replace=False):
        item = train[n]
        out = input_pipeline.featurize(item, vocab, CONFIG)
        tokens = tokenizer.truncate_history(tokenizer.history_segments(item.history), CONFIG.max_text_tokens)
        length = len(tokens)
        assert out["text_tokens"][:length].tolist() == vocab.ids(tokens)
        assert out["text_mask"].tolist() == [True] * length + [False] * (CONFIG.max_text_tokens - length)
        assert not out["text_tokens"][length:].any()
        np.testing.assert_array_equal(out["grid"], grid.structure_to_grid(item.prev_structure))
        np.testing.assert_allclose(world_input.recent_weights(jnp.asarray(out["recent_cells"]), RECENT_DECAY),
                                   _reference_recent(item, CONFIG))
        assert out["pose"].tolist() == pytest.approx(list(item.builder_pose))
        perspective = np.asarray(world_input.perspective_coordinates(jnp.asarray(out["pose"]), PERSPECTIVE_SCALE))
        ids = [grid.encode_action(a) for a in item.reference_actions][:CONFIG.max_actions + 1]
        want = ids + [grid.STOP] * (CONFIG.max_actions + 1 - len(ids))
        assert out["actions"].tolist() == want
        assert out["action_mask"].sum() == min(len(item.reference_actions) + 1, CONFIG.max_actions + 1)
        assert out["weight"] == 1.0
        for _ in range(5):
            x, y, z = (int(rng.integers(lo, hi + 1)) for lo, hi in
                       ((grid.X_MIN, grid.X_MAX), (grid.Y_MIN, grid.Y_MAX), (grid.Z_MIN, grid.Z_MAX)))
            np.testing.assert_allclose(perspective[grid.cell_to_index(x, y, z)],
                                       _reference_perspective(item.builder_pose, x, y, z, PERSPECTIVE_SCALE),
                                       rtol=1e-4, atol=1e-5)


def test_long_reference_keeps_a_prefix_without_stop(train, vocab):
    item = max(train, key=lambda i: len(i.reference_actions))
    assert len(item.reference_actions) > CONFIG.max_actions + 1
    out = input_pipeline.featurize(item, vocab, CONFIG)
    assert out["action_mask"].all() and grid.STOP not in out["actions"].tolist()


def test_perspective_is_invariant_under_the_augmentation_rotation(train):
    poses = np.array([item.builder_pose for item in train[:20]], np.float32)
    base = np.asarray(world_input.perspective_coordinates(jnp.asarray(poses), 0.1))
    for k in (1, 2, 3):
        aug = augment.Augmentation(k, augment.IDENTITY, 0.0, 0)
        rotated = np.array([augment.transform_pose(BuilderPose(*p), aug) for p in poses], np.float32)
        turned = np.asarray(world_input.perspective_coordinates(jnp.asarray(rotated), 0.1))
        for x in range(grid.X_MIN, grid.X_MAX + 1, 3):
            for z in range(grid.Z_MIN, grid.Z_MAX + 1, 2):
                rx, rz = augment.rotate_cell(x, z, k)
                np.testing.assert_allclose(turned[(slice(None), *grid.cell_to_index(rx, 2, rz))],
                                           base[(slice(None), *grid.cell_to_index(x, 2, z))], atol=1e-4)


def test_batches_have_static_shapes(features):
    it = DataIterator(features, None, CONFIG, batch_size=16, seed=0)
    batch = next(it)
    for key, (shape, dtype) in input_pipeline.feature_specs(CONFIG).items():
        chex.assert_shape(batch[key], (16, *shape))
        chex.assert_type(batch[key], dtype)


def _rows(it, count):
    return [it.next_rows().tolist() for _ in range(count)]


def test_iterator_resumes_exactly(features):
    it = DataIterator(features, None, CONFIG, batch_size=32, seed=5)
    per_pass = it.batches_in_pass(0)
    _rows(it, per_pass - 3)  # stop 3 batches before a pass boundary
    state = json.loads(json.dumps(it.get_state()))
    expected = [next(it) for _ in range(8)]
    resumed = DataIterator(features, None, CONFIG, batch_size=32, seed=5)
    resumed.set_state(state)
    for want in expected:
        got = next(resumed)
        for key in want:
            np.testing.assert_array_equal(got[key], want[key])
    with pytest.raises(ValueError, match="seed"):
        DataIterator(features, None, CONFIG, batch_size=32, seed=6).set_state(state)


def test_passes_are_seeded_permutations(features):
    it = DataIterator(features, None, CONFIG, batch_size=50, seed=1)
    n = len(features)
    first = np.concatenate(_rows(it, it.batches_in_pass(0)))
    second = np.concatenate(_rows(it, it.batches_in_pass(1)))
    assert len(set(first.tolist())) == len(first) == n // 50 * 50
    assert not np.array_equal(first, second)
    other = DataIterator(features, None, CONFIG, batch_size=50, seed=2)
    assert not np.array_equal(first, np.concatenate(_rows(other, other.batches_in_pass(0))))


def test_hosts_get_disjoint_shards_of_each_global_batch(features):
    single = DataIterator(features, None, CONFIG, batch_size=24, seed=3)
    hosts = [DataIterator(features, None, CONFIG, batch_size=24, seed=3, process_index=p, process_count=3)
             for p in range(3)]
    for _ in range(30):
        global_rows = single.next_rows()
        local = [h.next_rows() for h in hosts]
        assert all(len(r) == 8 for r in local)
        np.testing.assert_array_equal(np.concatenate(local), global_rows)
    with pytest.raises(ValueError, match="divisible"):
        DataIterator(features, None, CONFIG, batch_size=25, seed=3, process_count=2)


def test_schedule_stages_then_last_stage_repeats(features):
    n = len(features)
    schedule = [np.arange(0, 100), np.arange(0, 300), np.arange(n)]
    it = DataIterator(features, None, CONFIG, batch_size=20, seed=0, schedule=schedule)
    for p, stage in enumerate([schedule[0], schedule[1], schedule[2], schedule[2]]):
        rows = np.concatenate(_rows(it, it.batches_in_pass(p)))
        assert set(rows.tolist()) <= set(stage.tolist())
        assert len(rows) == len(stage) // 20 * 20
    assert it.get_state()["pass"] == 3


def test_single_padded_pass_covers_every_item_once(features):
    it = DataIterator(features, None, CONFIG, batch_size=64, seed=0, shuffle=False, drop_remainder=False,
                      num_epochs=1)
    weights = []
    for batch in it:
        weights.append(batch["weight"])
        assert not batch["action_mask"][batch["weight"] == 0].any()
    total = np.concatenate(weights)
    assert total.sum() == len(features) and len(total) % 64 == 0


def test_feature_config_from_config():
    cfg = ml_collections.ConfigDict({"features": {"max_text_tokens": 128, "recent_decay": 1}})
    config = FeatureConfig.from_config(cfg)
    assert config.max_text_tokens == 128 and config.max_actions == 20
    assert not hasattr(config, "recent_decay")  # a model option: featurization never reads it
    # so changing a model option keeps the cached features (their key is the fingerprint)
    other = FeatureConfig.from_config(ml_collections.ConfigDict({"max_text_tokens": 128, "recent_decay": 0.2,
                                                                 "perspective_scale": 2.0}))
    assert other.fingerprint() == config.fingerprint()
    assert FeatureConfig.from_config(ml_collections.ConfigDict({"max_actions": 10})).max_actions == 10


def test_cached_features_round_trip(train, vocab, tmp_path):
    first = input_pipeline.featurize_items_cached(train[:50], vocab, CONFIG, tmp_path)
    assert len(list(tmp_path.glob("features-*.npz"))) == 1
    again = input_pipeline.featurize_items_cached(train[:50], vocab, CONFIG, tmp_path)
    for key, value in first.arrays().items():
        np.testing.assert_array_equal(again.arrays()[key], value)
    assert again.item_ids == first.item_ids


def test_too_small_last_stage_is_an_error(features):
    with pytest.raises(ValueError, match="last schedule stage"):
        DataIterator(features, None, CONFIG, batch_size=64, seed=0, schedule=[np.arange(100), np.arange(10)])


def test_items_digest_sees_every_field(train):
    from bapjax.world.items import ChatTurn

    base = input_pipeline.items_digest(train[:80])
    assert input_pipeline.items_digest(list(train[:80])) == base
    # Change an early chat turn of one item's history (its neighbours share the prefix).
    item = train[40]
    k = next(n for n, e in enumerate(item.history) if isinstance(e, ChatTurn))
    history = item.history[:k] + (item.history[k]._replace(text=item.history[k].text + "!"),) + item.history[k + 1:]
    changed = list(train[:80])
    changed[40] = dataclasses.replace(item, history=history)
    assert input_pipeline.items_digest(changed) != base
    changed = list(train[:80])
    changed[40] = dataclasses.replace(item, dataset="bs")
    assert input_pipeline.items_digest(changed) != base
