"""The Builder's frame (`config.features.builder_frame`): items turned so the Builder looks along +z,
featurized, decoded and turned back to world coordinates; the turn is exact on the MDC and changes
no score."""

import math

import chex
import jax
import numpy as np
import pytest

from bapjax.data import input_pipeline
from bapjax.decoding import decode, kernel
from bapjax.decoding.settings import DecodeSettings
from bapjax.evaluation import evaluator, trivial
from bapjax.models import builder, world_input
from bapjax.text.vocab import Vocabulary
from bapjax.world import grid as G
from bapjax.world import rotation
from bapjax.world.grid import Action
from bapjax.world.items import BuilderPose, ChatTurn
from tests.test_models import flat_model

TINY = dict(embedding_dim=8, text_hidden=16, world_features=8, world_layers=2,
            action_embedding=16, decoder_hidden=16, head_hidden=16)


def _all_items(corpus):
    return [item for split in corpus.items for item in corpus.split(split)]


def _same_pose(a, b):
    assert math.isclose(a.x, b.x, abs_tol=1e-9) and math.isclose(a.z, b.z, abs_tol=1e-9), (a, b)
    assert a.y == b.y and a.pitch == b.pitch, (a, b)
    # A logged yaw slightly outside [-180, 180) comes back normalized: the same direction.
    assert math.isclose((a.yaw - b.yaw + 180.0) % 360.0, 180.0, abs_tol=1e-9), (a, b)


def _val_items(corpus, count, max_actions=None):
    items = corpus.split("val")
    if max_actions is not None:
        items = [it for it in items if len(it.reference_actions) <= max_actions]
    # items of every turn, spread over the split
    by_turns = {k: [it for it in items if rotation.builder_frame_turns(it.builder_pose.yaw) == k] for k in range(4)}
    assert all(by_turns.values()), {k: len(v) for k, v in by_turns.items()}
    out = []
    while len(out) < count and any(by_turns.values()):
        for k in range(4):
            if by_turns[k] and len(out) < count:
                out.append(by_turns[k].pop(len(by_turns[k]) // 2))
    return out


@pytest.mark.parametrize("yaw", [0.0, 44.9, 45.0, -45.0, -45.1, 90.0, 135.0, -135.0, 179.9, -180.0, 181.0, -183.5])
def test_builder_frame_turns_bring_the_yaw_into_the_front_quadrant(yaw):
    k = rotation.builder_frame_turns(yaw)
    assert k in range(4)
    turned = rotation.rotate_yaw(yaw, k)
    assert -45.0 <= (turned + 180.0) % 360.0 - 180.0 < 45.0
    assert rotation.builder_frame_turns(turned) == 0
    # Minecraft's gaze (-sin yaw, cos yaw) then has its largest component along +z.
    assert math.cos(math.radians(turned)) >= abs(math.sin(math.radians(turned))) - 1e-9


def test_round_trip_is_the_identity_on_every_mdc_item(mdc_corpus):
    items = _all_items(mdc_corpus)
    turns = np.zeros(4, int)
    for item in items:
        framed, k = rotation.to_builder_frame(item)
        turns[k] += 1
        assert rotation.builder_frame_turns(framed.builder_pose.yaw) == 0, item.item_id
        back = (4 - k) % 4
        assert rotation.from_builder_frame(framed.reference_actions, k) == list(item.reference_actions)
        assert tuple(sorted(rotation.rotate_block(b, back) for b in framed.prev_structure)) == item.prev_structure
        assert tuple(sorted(rotation.rotate_block(b, back) for b in framed.next_structure)) == item.next_structure
        assert len(framed.history) == len(item.history)
        for event, original in zip(framed.history, item.history):
            if isinstance(original, ChatTurn):
                assert event is original
            else:
                assert rotation.rotate_action(event, back) == original
        _same_pose(rotation.rotate_pose(framed.builder_pose, back), item.builder_pose)
        # the framed item is a valid item: the structures are the references' consequence
        assert framed.next_structure == G.as_blocks(G.apply_sequence(framed.prev_structure, framed.reference_actions))
        restored = rotation.rotate_item(framed, back)
        assert (restored.history, restored.prev_structure, restored.reference_actions, restored.next_structure) == (
            item.history, item.prev_structure, item.reference_actions, item.next_structure)
        assert (framed.item_id, framed.game_id, framed.split, framed.dataset) == (
            item.item_id, item.game_id, item.split, item.dataset)
    assert turns.sum() == len(items) > 5000 and (turns > 0).all(), turns


def test_scores_do_not_change_when_items_and_predictions_turn(mdc_corpus):
    items = mdc_corpus.split("val")[::4]
    predictions = trivial.perturbed_predictions(items, seed=3)
    predictions.update(trivial.predict("empty", items[:20]))
    base = evaluator.evaluate_predictions(items, predictions)
    for k in (1, 2, 3, None):  # None: each item's own Builder frame
        turns = {it.item_id: rotation.builder_frame_turns(it.builder_pose.yaw) if k is None else k for it in items}
        turned_items = [rotation.rotate_item(it, turns[it.item_id]) for it in items]
        turned = {i: [rotation.rotate_action(a, turns[i]) for a in acts] for i, acts in predictions.items()}
        report = evaluator.evaluate_predictions(turned_items, turned)
        assert report["counts"] == base["counts"]
        assert report["strict_micro"] == pytest.approx(base["strict_micro"], abs=1e-12)
        chex.assert_trees_all_close(report["micro"], base["micro"], atol=1e-12)
        chex.assert_trees_all_close(report["macro"], base["macro"], atol=1e-12)
    assert 0 < base["strict_micro"] < 1


def _rotate_grid(g, k):
    out = np.zeros_like(g)
    for (i, j, kk), color in np.ndenumerate(g):
        if color:
            x, y, z = G.index_to_cell(i, j, kk)
            x, z = rotation.rotate_cell(x, z, k)
            out[G.cell_to_index(x, y, z)] = color
    return out


def _rotate_cells(cells, k):
    out = []
    for cell in np.asarray(cells).tolist():
        if cell < 0:
            out.append(cell)
            continue
        x, y, z = G.index_to_cell(*np.unravel_index(cell, G.GRID_SHAPE))
        assert G.cell_id(x, y, z) == cell
        x, z = rotation.rotate_cell(x, z, k)
        out.append(G.cell_id(x, y, z))
    return np.array(out)


def test_teacher_forcing_in_the_frame_equals_turning_each_world(mdc_corpus):
    items = _val_items(mdc_corpus, 8)
    items = [it for it in items if any(isinstance(e, Action) for e in it.history)] or items
    vocab = Vocabulary.build(items)
    plain = input_pipeline.FeatureConfig(max_text_tokens=64, max_actions=8, recent_window=5)
    framed = input_pipeline.FeatureConfig(max_text_tokens=64, max_actions=8, recent_window=5, builder_frame=True)
    rows = np.arange(len(items))
    batches = [input_pipeline.expand_batch(input_pipeline.featurize_items(items, vocab, fc), rows, fc)
               for fc in (plain, framed)]
    worlds = [jax.device_get(world_input.worlds_before_each_step(world_input.start_world(b), b["actions"]))
              for b in batches]
    slow, fast = worlds
    assert (batches[0]["recent_cells"] >= 0).any()
    for b, item in enumerate(items):
        k = rotation.builder_frame_turns(item.builder_pose.yaw)
        pose = rotation.rotate_pose(BuilderPose(*batches[0]["pose"][b].tolist()), k)
        for t in range(plain.num_action_slots):
            np.testing.assert_array_equal(fast["grid"][b, t], _rotate_grid(slow["grid"][b, t], k))
            np.testing.assert_array_equal(fast["recent_cells"][b, t], _rotate_cells(slow["recent_cells"][b, t], k))
            np.testing.assert_allclose(fast["pose"][b, t], np.array(pose, np.float32), atol=1e-4)
            assert fast["item_actions"][b, t] == slow["item_actions"][b, t]
        assert -45.0 <= (float(fast["pose"][b, 0, 3]) + 180.0) % 360.0 - 180.0 < 45.0


def test_framed_features_decode_back_to_the_references(mdc_corpus):
    items = mdc_corpus.split("val")
    vocab = Vocabulary.build(items)
    longest = max(len(it.reference_actions) for it in items)
    fc = input_pipeline.FeatureConfig(max_text_tokens=64, max_actions=longest, builder_frame=True)
    features = input_pipeline.featurize_items(items, vocab, fc)
    plain = input_pipeline.featurize_items(items, vocab, input_pipeline.FeatureConfig(max_text_tokens=64,
                                                                                      max_actions=longest))
    assert features.truncated_actions == 0
    moved = 0
    for row, item in enumerate(items):
        k = rotation.builder_frame_turns(item.builder_pose.yaw)
        ids = features.actions[row, :features.num_actions[row]]
        actions = decode.ids_to_actions(ids, features.grid[row])
        assert rotation.from_builder_frame(actions, k) == list(item.reference_actions), item.item_id
        if k and any(isinstance(e, Action) for e in item.history[-5:]):
            moved += not np.array_equal(features.text_tokens[row], plain.text_tokens[row])
        if k == 0:
            np.testing.assert_array_equal(features.text_tokens[row], plain.text_tokens[row])
            np.testing.assert_array_equal(features.grid[row], plain.grid[row])
    assert moved > 100  # the history's action coordinates are written in the frame
    assert items[0].builder_pose == mdc_corpus.split("val")[0].builder_pose  # the items stay as they were


def test_fingerprint_and_config():
    off = input_pipeline.FeatureConfig()
    on = input_pipeline.FeatureConfig(builder_frame=True)
    assert "builder_frame" not in off.fingerprint() and on.fingerprint() != off.fingerprint()
    assert input_pipeline.feature_defaults()["builder_frame"] is False
    assert input_pipeline.FeatureConfig.from_config({"builder_frame": True}) == on
    assert input_pipeline.FeatureConfig.from_config({"features": {"builder_frame": True}}).builder_frame


def _tiny_model(vocab):
    return flat_model(**TINY, vocab_size=vocab.size)


def test_predict_items_returns_world_coordinates(mdc_corpus):
    items = _val_items(mdc_corpus, 8, max_actions=6)
    vocab = Vocabulary.build(items)
    fc = input_pipeline.FeatureConfig(max_text_tokens=32, max_actions=6, recent_window=4, builder_frame=True)
    features = input_pipeline.featurize_items(items, vocab, fc)
    model = _tiny_model(vocab)
    params = builder.init_params(model, jax.random.PRNGKey(0))

    settings = DecodeSettings(fc.num_action_slots, 0, 4)

    def teacher(params, batch, mode):  # follows the framed references (one call: rows in order, then padding)
        assert mode == kernel.GREEDY  # what predict_items asks for without lengths or a draw
        n = batch["weight"].shape[0]
        rows = np.concatenate([np.arange(len(items)), np.full(n - len(items), features.padding_row)])
        ids, _ = kernel.decode_pool(model, params, batch, settings, kernel.Mode(teacher=True),
                                    teacher_actions=features.actions[rows])
        return ids

    forced = decode.predict_items(model, params, items, vocab, fc, settings, decode_fn=teacher,
                                  features=features, items_per_call=len(items))
    assert forced == {it.item_id: list(it.reference_actions) for it in items}
    assert any(rotation.builder_frame_turns(it.builder_pose.yaw) for it in items)

    free = decode.predict_items(model, params, items, vocab, fc, DecodeSettings(6, 0, 4))
    assert set(free) == {it.item_id for it in items}
    for item in items:
        walk = G.StructureWalk(item.prev_structure)
        for action in free[item.item_id]:
            assert G.in_region(action.x, action.y, action.z)
            assert walk.step(action), (item.item_id, action)
    report = evaluator.evaluate_predictions(items, free)  # the evaluator accepts them as they are
    assert report["counts"]["dropped_infeasible_actions"] == 0


def test_rotated_augmentation_copies_collapse_to_the_original_in_the_frame(mdc_corpus):
    """The MDC augmentation's rotation turns the Builder's yaw with the world, so in the Builder's
    frame a rotated copy (colors and wording kept) is its original: under the frame the copies
    vary only what the augmentation's color permutation and paraphrase change."""
    from bapjax.corpus import augment

    for item in mdc_corpus.split("train"):
        framed, _ = rotation.to_builder_frame(item)
        for turns in (1, 2, 3):
            copy = augment.transform_item(item, augment.Augmentation(turns, augment.IDENTITY, 0.0, 0), 1)
            again, _ = rotation.to_builder_frame(copy)
            assert (again.history, again.prev_structure, again.reference_actions, again.next_structure) == (
                framed.history, framed.prev_structure, framed.reference_actions, framed.next_structure), item.item_id
            _same_pose(again.builder_pose, framed.builder_pose)


