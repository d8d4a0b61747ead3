"""bapjax/analysis/bootstrap.py: the two-level (seeds x items) bootstrap against its plain-Python
oracle on the same draws, and the cases whose answer is known without it."""

import numpy as np
import pytest

from bapjax.analysis import bootstrap
from bapjax.evaluation import metrics


def _counts(rng, n, quality=1):
    n_ref = rng.integers(0, 6, n)
    n_pred = rng.integers(0, 6, n)
    tp = np.minimum(rng.integers(0, 2 + quality, n), np.minimum(n_pred, n_ref))
    return {"tp": tp, "n_pred": n_pred, "n_ref": n_ref}


def _variants(seed, n, sizes):
    rng = np.random.default_rng(seed)
    return {name: [_counts(rng, n, quality) for _ in range(k)] for quality, (name, k) in enumerate(sizes.items())}


@pytest.mark.parametrize("seed, n, sizes", [(0, 7, {"a": 2, "b": 3}), (1, 12, {"mc": 1, "agg": 4, "cl": 2}),
                                            (2, 3, {"x": 3})])
def test_numpy_replicates_agree_with_the_plain_python_oracle(seed, n, sizes):
    runs = _variants(seed, n, sizes)
    draws = bootstrap.draw(n, {v: len(c) for v, c in runs.items()}, samples=40, seed=seed)
    fast = bootstrap.replicates(runs, draws)
    slow = bootstrap.replicates_reference(runs, draws)
    for variant in runs:
        np.testing.assert_allclose(fast[variant], slow[variant], rtol=0, atol=1e-12)
        for q in bootstrap.INTERVAL:
            assert np.percentile(fast[variant], q) == pytest.approx(bootstrap.percentile_reference(slow[variant], q),
                                                                   abs=1e-12)


def test_the_draws_are_paired_over_items_and_resample_seeds_per_variant():
    draws = bootstrap.draw(50, {"a": 3, "b": 4}, samples=200, seed=0)
    assert draws.items.shape == (200, 50) and draws.items.max() < 50
    assert draws.seeds["a"].shape == (200, 3) and draws.seeds["b"].shape == (200, 4)
    assert set(np.unique(draws.seeds["b"])) == {0, 1, 2, 3}
    # a replicate that draws one seed for every slot exists, and one that draws several
    assert (draws.seeds["b"] == draws.seeds["b"][:, :1]).all(axis=1).any()
    assert not (draws.seeds["b"] == draws.seeds["b"][:, :1]).all()


def test_paired_variants_share_their_seed_draws_and_the_others_draw_as_before():
    sizes = {"a": 3, "b": 4, "c": 3, "d": 2}
    plain = bootstrap.draw(50, sizes, samples=100, seed=3)
    paired = bootstrap.draw(50, sizes, samples=100, seed=3, paired=[("a", "c")])
    np.testing.assert_array_equal(paired.items, plain.items)
    np.testing.assert_array_equal(paired.seeds["a"], plain.seeds["a"])
    np.testing.assert_array_equal(paired.seeds["c"], paired.seeds["a"])
    np.testing.assert_array_equal(paired.seeds["b"], plain.seeds["b"])
    assert not np.array_equal(plain.seeds["c"], plain.seeds["a"])  # unpaired, "c" draws its own seeds
    with pytest.raises(ValueError, match="different numbers of runs"):
        bootstrap.draw(50, sizes, samples=10, paired=[("a", "b")])
    with pytest.raises(ValueError, match="not among"):
        bootstrap.draw(50, sizes, samples=10, paired=[("a", "z")])
    with pytest.raises(ValueError, match="two paired groups"):
        bootstrap.draw(50, {**sizes, "e": 3}, samples=10, paired=[("a", "c"), ("c", "e")])


def test_a_paired_difference_is_resampled_seed_by_seed():
    """One set of models decoded two ways, one way scoring exactly one item better on every model:
    paired, the difference's every replicate is that one item's effect on the same models; unpaired
    it also carries the models' spread, which is much wider."""
    rng = np.random.default_rng(6)
    models = [_counts(rng, 200, quality=q) for q in (0, 3, 0, 3)]  # models that differ a lot overall
    better = [{**m, "tp": np.where(np.arange(200) == 0, np.minimum(m["n_pred"], m["n_ref"]), m["tp"])} for m in models]
    runs = {"one": models, "two": better}
    both = {name: bootstrap.two_level(runs, [("two", "one")], samples=400, seed=1, paired=paired)
            for name, paired in (("paired", [("one", "two")]), ("unpaired", []))}
    gain = lambda boot: boot["differences"]["two - one"]  # noqa: E731
    assert gain(both["paired"])["mean"] == gain(both["unpaired"])["mean"] >= 0
    assert gain(both["paired"])["interval"][0] >= 0  # every replicate compares the same models
    assert gain(both["unpaired"])["interval"][0] < 0
    width = {name: gain(boot)["interval"][1] - gain(boot)["interval"][0] for name, boot in both.items()}
    assert width["unpaired"] > 5 * width["paired"]
    draws = bootstrap.draw(200, {"one": 4, "two": 4}, samples=30, seed=2, paired=[("one", "two")])
    slow = bootstrap.replicates_reference(runs, draws)  # the oracle sees the shared draws too
    for variant, fast in bootstrap.replicates(runs, draws).items():
        np.testing.assert_allclose(fast, slow[variant], rtol=0, atol=1e-12)


def test_micro_f1_is_recomputed_from_summed_counts_not_averaged_per_item():
    # item 0: 1 of 1 right (F1 1), item 1: 0 of 9 right (F1 0); micro F1 = 2 / 20, the mean per-item F1 would be 0.5
    counts = {"tp": np.array([1, 0]), "n_pred": np.array([1, 9]), "n_ref": np.array([1, 9])}
    every_item = np.array([[0, 1]])
    assert bootstrap.resampled_micro_f1(counts, every_item)[0] == 0.1 == metrics.micro_f1(**counts)
    assert bootstrap.resampled_micro_f1(counts, np.array([[1, 1]]))[0] == 0.0
    empty = {"tp": np.zeros(2, int), "n_pred": np.zeros(2, int), "n_ref": np.zeros(2, int)}
    assert bootstrap.resampled_micro_f1(empty, every_item)[0] == 1.0  # metrics.micro_f1's rule


def test_identical_seeds_reduce_to_the_items_only_bootstrap():
    rng = np.random.default_rng(4)
    run = _counts(rng, 80)
    boot = bootstrap.two_level({"same": [run, run, run], "other": [_counts(rng, 80)]}, [], samples=300, seed=9)
    items_only = bootstrap.paired_bootstrap({"same": run}, samples=300, seed=9)
    assert boot["variants"]["same"]["sd"] == 0.0
    np.testing.assert_allclose(boot["variants"]["same"]["interval"], items_only["runs"]["same"], rtol=0, atol=1e-15)
    picks = np.random.default_rng(9).integers(0, 80, (300, 80))  # the items-only bootstrap's draws, by hand
    assert items_only["runs"]["same"] == list(np.percentile(bootstrap.resampled_micro_f1(run, picks), (2.5, 97.5)))


def test_seed_variance_widens_the_interval():
    rng = np.random.default_rng(5)
    base = _counts(rng, 300)
    runs = {"agree": [base] * 4,
            "disagree": [{**base, "tp": np.minimum(base["tp"] + k % 2, np.minimum(base["n_pred"], base["n_ref"]))}
                         for k in range(4)]}
    boot = bootstrap.two_level(runs, [], samples=500, seed=0)
    width = {v: b["interval"][1] - b["interval"][0] for v, b in boot["variants"].items()}
    assert boot["variants"]["disagree"]["sd"] > 0.05
    assert width["disagree"] > width["agree"] + 0.03


def test_one_item_repeated_gives_a_point_interval():
    rng = np.random.default_rng(6)
    counts = [{k: np.repeat(v[:1], 20) for k, v in _counts(rng, 5).items()} for _ in range(3)]
    counts = [counts[0]] * 3  # every seed scores the one item alike
    boot = bootstrap.two_level({"v": counts}, [("v", "v")], samples=100, seed=1)
    lo, hi = boot["variants"]["v"]["interval"]
    assert lo == hi == boot["variants"]["v"]["mean"] == metrics.micro_f1(**counts[0])


def test_a_variant_minus_itself_is_exactly_zero_and_a_better_one_is_above_zero():
    runs = _variants(7, 200, {"weak": 3, "strong": 2})
    runs["strong"] = [{**c, "tp": np.minimum(c["n_pred"], c["n_ref"])} for c in runs["weak"][:2]]  # every match right
    boot = bootstrap.two_level({**runs, "weak again": runs["weak"]}, [("weak", "weak"), ("strong", "weak")],
                               samples=300, seed=2)
    same = boot["differences"]["weak - weak"]
    assert same == {"mean": 0.0, "interval": [0.0, 0.0], "share_above_0": 0.0}
    better = boot["differences"]["strong - weak"]
    assert better["share_above_0"] == 1.0 and better["interval"][0] > 0
    means = {v: b["mean"] for v, b in boot["variants"].items()}
    assert better["mean"] == means["strong"] - means["weak"]
    assert means["weak"] == pytest.approx(np.mean([metrics.micro_f1(**c) for c in runs["weak"]]))
    # the seed draws are independent per variant: the same runs under another name get other draws
    assert boot["variants"]["weak again"]["interval"] != boot["variants"]["weak"]["interval"]


def test_runs_of_different_items_are_refused():
    rng = np.random.default_rng(8)
    with pytest.raises(ValueError, match="same items"):
        bootstrap.two_level({"a": [_counts(rng, 5)], "b": [_counts(rng, 6)]}, [], samples=10)


@pytest.mark.parametrize("seed, n, runs", [(0, 9, 2), (1, 15, 4), (3, 4, 3)])
def test_spread_agrees_with_the_plain_python_oracle(seed, n, runs):
    rng = np.random.default_rng(seed)
    counts = [_counts(rng, n, quality=k) for k in range(runs)]
    items = rng.integers(0, n, (30, n))
    fast, slow = bootstrap.spread(counts, items), bootstrap.spread_reference(counts, items)
    assert fast.keys() == slow.keys()
    for key in fast:
        assert fast[key] == pytest.approx(slow[key], abs=1e-12)


def test_spread_of_seeds_that_differ_only_item_by_item_is_the_interaction():
    rng = np.random.default_rng(7)
    n = 4000
    n_ref = rng.integers(1, 6, n)
    n_pred = n_ref.copy()
    # every seed gets each item right with the same probability, independently: no seed is better overall
    runs = [{"tp": rng.binomial(n_ref, 0.3), "n_pred": n_pred, "n_ref": n_ref} for _ in range(12)]
    result = bootstrap.spread(runs, rng.integers(0, n, (400, n)))
    assert result["interaction_sd"] == pytest.approx(result["seed_sd"], rel=0.35)
    # a seed better on every item adds spread beyond the interaction
    better = [{**run, "tp": np.minimum(run["tp"] + (k % 2) * rng.binomial(1, 0.5, n), n_ref)}
              for k, run in enumerate(runs)]
    shifted = bootstrap.spread(better, rng.integers(0, n, (400, n)))
    assert shifted["model_sd"] > 3 * shifted["interaction_sd"] > 0


def test_identical_seeds_have_no_spread_and_one_run_has_none_to_split():
    rng = np.random.default_rng(2)
    run = _counts(rng, 50)
    assert bootstrap.spread([run, run], rng.integers(0, 50, (20, 50))) == {
        "seed_sd": 0.0, "interaction_sd": 0.0, "model_sd": 0.0}
    with pytest.raises(ValueError, match="at least 2 runs"):
        bootstrap.spread([run], rng.integers(0, 50, (20, 50)))
    boot = bootstrap.two_level({"one": [run], "two": [run, _counts(rng, 50)]}, [], samples=50)
    assert "spread" not in boot["variants"]["one"] and boot["variants"]["two"]["spread"]["seed_sd"] > 0


def test_two_level_is_replicates_and_spread_on_its_draws():
    rng = np.random.default_rng(4)
    runs = {"a": [_counts(rng, 40) for _ in range(3)], "b": [_counts(rng, 40) for _ in range(2)]}
    boot = bootstrap.two_level(runs, [("a", "b")], samples=120, seed=6)
    draws = bootstrap.draw(40, {"a": 3, "b": 2}, 120, 6)
    values = bootstrap.replicates(runs, draws)
    for variant, counts in runs.items():
        assert boot["variants"][variant]["interval"] == bootstrap.interval(values[variant])
        assert boot["variants"][variant]["spread"] == bootstrap.spread(counts, draws.items)
    assert boot["differences"]["a - b"]["interval"] == bootstrap.interval(values["a"] - values["b"])


@pytest.mark.parametrize("seed, sizes", [(0, [7, 9, 4]), (1, [12]), (2, [3, 3])])
def test_own_items_agrees_with_the_plain_python_oracle(seed, sizes):
    """Runs scored on test sets of their own (different sizes): each resampled within its set."""
    rng = np.random.default_rng(seed)
    counts = [_counts(rng, n) for n in sizes]
    got = bootstrap.own_items(counts, samples=50, seed=seed)
    slow = bootstrap.own_items_reference(counts, samples=50, seed=seed)
    assert got["interval"] == pytest.approx([bootstrap.percentile_reference(slow, q) for q in bootstrap.INTERVAL],
                                            abs=1e-12)
    assert got["per_run"] == [metrics.micro_f1(c["tp"], c["n_pred"], c["n_ref"]) for c in counts]
    assert got["mean"] == pytest.approx(sum(got["per_run"]) / len(sizes))
    assert (got["sd"] is None) == (len(sizes) == 1)


def test_own_items_of_identical_runs_with_one_outcome_has_no_width():
    perfect = {"tp": np.full(5, 2), "n_pred": np.full(5, 2), "n_ref": np.full(5, 2)}
    assert bootstrap.own_items([perfect, perfect], samples=20)["interval"] == [1.0, 1.0]
