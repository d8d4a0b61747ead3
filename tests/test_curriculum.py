"""Curriculum: metrics, lexicographic order, and the arrangement (stage i = 1/N of buckets 1..i)."""

import dataclasses

import numpy as np
import pytest

from bapjax import sharding
from bapjax.data import curriculum
from bapjax.text import tokenizer
from bapjax.training import run_checks
from bapjax.world.grid import Action
from bapjax.world.items import BapItem, BuilderPose, ChatTurn


def _item(n, dataset, num_actions, words):
    history = (ChatTurn("Architect", " ".join(["w"] * words)),)
    actions = tuple(Action(0, 1, 0, 1, k - 5) for k in range(num_actions))
    return BapItem(f"g{n}:0", f"g{n}", "C1", "train", history, (), actions, (), BuilderPose(0, 1, 0, 0, 0), dataset)


@pytest.fixture(scope="module")
def items():
    rng = np.random.default_rng(0)
    datasets = ["bs", "ss", "r", "mc"]
    return [_item(n, datasets[rng.integers(4)], int(rng.integers(1, 8)), int(rng.integers(0, 30)))
            for n in range(1000)]


def test_parse_metric():
    assert curriculum.parse_metric("D,L_A") == ("D", "L_A")
    assert curriculum.parse_metric("(D, L_I, L_A)") == ("D", "L_I", "L_A")
    with pytest.raises(ValueError, match="unknown part 'L_X'"):
        curriculum.parse_metric("D,L_X")
    with pytest.raises(ValueError, match="repeats"):
        curriculum.parse_metric("D,D")


def test_metric_values(items):
    keys = curriculum.difficulty(items, "D,L_A,L_I")
    rank = {"bs": 0, "ss": 1, "r": 2, "mc": 3}
    for item, (d, la, li) in zip(items, keys):
        assert d == rank[item.dataset]
        assert la == len(item.reference_actions)
        assert li == sum(len(s) for s in tokenizer.history_segments(item.history))
    with pytest.raises(ValueError, match="data set 'zz'"):
        curriculum.difficulty([dataclasses.replace(items[0], dataset="zz")], "D")


def test_order_is_lexicographic_and_ties_are_seeded(items):
    keys = curriculum.difficulty(items, "D,L_A")
    order = curriculum.difficulty_order(keys, seed=3)
    as_tuples = [tuple(keys[i]) for i in order]
    assert as_tuples == sorted(as_tuples)  # plain-Python reference: sorted tuples
    assert sorted(order.tolist()) == list(range(len(items)))
    assert not np.array_equal(order, curriculum.difficulty_order(keys, seed=4))


def _assert_stages_sample_their_buckets(stages, buckets, num_items, samples):
    """Stage i (of N) holds no item twice, only items of buckets 1..i, and `samples`/N of each (at least one)."""
    n = len(buckets)
    bucket_of = np.empty(num_items, int)
    for b, bucket in enumerate(buckets):
        bucket_of[bucket] = b
    for i, stage in enumerate(stages[:-1], 1):
        assert len(np.unique(stage)) == len(stage)
        counts = np.bincount(bucket_of[stage], minlength=n)
        assert counts[i:].sum() == 0  # only buckets 1..i
        for b in range(i):
            assert counts[b] == max(1, round(len(buckets[b]) * samples / n))


@pytest.mark.parametrize("num_buckets", [1, 5, 7, 30])
def test_stage_i_holds_one_nth_of_buckets_1_to_i_and_final_stage_all(items, num_buckets):
    keys = curriculum.difficulty(items, "D,L_I")
    buckets = curriculum.buckets_from_keys(keys, num_buckets, seed=0)
    assert sum(len(b) for b in buckets) == len(items)
    assert max(len(b) for b in buckets) - min(len(b) for b in buckets) <= 1
    for easier, harder in zip(buckets, buckets[1:]):  # buckets are ordered by difficulty
        assert max(tuple(keys[i]) for i in easier) <= min(tuple(keys[i]) for i in harder)
    stages = curriculum.arrange(buckets, seed=0)
    assert len(stages) == num_buckets + 1
    _assert_stages_sample_their_buckets(stages, buckets, len(items), samples=1)
    assert np.array_equal(np.sort(stages[-1]), np.arange(len(items)))


def test_stages_from_config_and_seed(items):
    config = run_checks.with_defaults({"curriculum": {"metric": "D,L_A", "num_buckets": 5}})
    stages = curriculum.schedule_from_config(items, config, seed=1)
    again = curriculum.curriculum_stages(items, "D,L_A", 5, seed=1)
    assert all(np.array_equal(a, b) for a, b in zip(stages, again))
    config.curriculum.metric = ""
    assert curriculum.schedule_from_config(items, config, seed=1) is None
    # With 4 buckets of D, stage 1 holds (about) the easiest data set and never the hardest.
    first = curriculum.curriculum_stages(items, "D", 4, seed=0)[0]
    datasets = [items[i].dataset for i in first]
    assert "mc" not in datasets and datasets.count("bs") > len(datasets) / 2


def test_every_stage_keeps_a_data_set_at_its_share_of_every_stage(items):
    n = 5
    stages = curriculum.curriculum_stages(items, "D", n, seed=0, every_stage=("mc",))
    plain_others = curriculum.curriculum_stages([it for it in items if it.dataset != "mc"], "D", n, seed=0)
    mc = np.array([it.dataset == "mc" for it in items])
    others = np.flatnonzero(~mc)
    assert len(stages) == n + 1
    for i, stage in enumerate(stages[:-1], 1):
        assert len(np.unique(stage)) == len(stage)
        # the other items are staged exactly as a curriculum over them alone
        assert np.array_equal(np.sort(stage[~mc[stage]]), np.sort(others[plain_others[i - 1]]))
        assert mc[stage].sum() == round(mc.sum() * i / n ** 2)  # i/N^2 of the MDC items
    assert np.array_equal(stages[-1], np.arange(len(items)))
    config = run_checks.with_defaults({"curriculum": {"metric": "D", "num_buckets": n, "every_stage": ("mc",)}})
    again = curriculum.schedule_from_config(items, config, seed=0)
    assert all(np.array_equal(a, b) for a, b in zip(stages, again))
    with pytest.raises(ValueError, match="every_stage"):
        curriculum.curriculum_stages([it for it in items if it.dataset == "mc"], "D", n, 0, every_stage=("mc",))




def test_stage_samples_give_each_stage_that_many_disjoint_samples(items):
    """`stage_samples` S: stage i holds S/N of each of buckets 1..i, no item twice, S times the
    paper's stage (S = 1: the same stages, draw for draw); the MDC kept in every stage scales alike;
    out of range (0, above N) is one error naming the field, before a run reads data."""
    n, samples = 7, 3
    buckets = curriculum.buckets_from_keys(curriculum.difficulty(items, "L_A"), n, seed=2)
    one = curriculum.arrange(buckets, seed=2)
    assert all(np.array_equal(a, b) for a, b in zip(one, curriculum.arrange(buckets, seed=2, stage_samples=1)))
    three = curriculum.arrange(buckets, seed=2, stage_samples=samples)
    assert min(round(len(bucket) * samples / n) for bucket in buckets) >= 1  # S/N of each bucket, not the floor of 1
    _assert_stages_sample_their_buckets(three, buckets, len(items), samples)
    assert np.array_equal(three[-1], one[-1])
    staged = curriculum.curriculum_stages(items, "D", 5, seed=0, every_stage=("mc",), stage_samples=2)
    mc = np.array([it.dataset == "mc" for it in items])
    for i, stage in enumerate(staged[:-1], 1):
        assert mc[stage].sum() == round(mc.sum() * i * 2 / 25)
    config = run_checks.with_defaults({"curriculum": {"metric": "L_A", "num_buckets": n, "stage_samples": samples}})
    assert all(np.array_equal(a, b) for a, b in zip(curriculum.schedule_from_config(items, config, seed=2), three))
    for bad in (0, n + 1):
        config.curriculum.stage_samples = bad
        with pytest.raises(run_checks.ConfigError, match=r"--config.curriculum: curriculum stage_samples must be an "
                                                         r"integer from 1 to num_buckets \(7\)"):
            run_checks.validate_config(config, sharding.data_mesh())
