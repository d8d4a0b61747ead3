"""The best-of-k simulation (`bapjax.analysis.selection`): its NumPy computation against the
plain-Python reference on the same draws, and the properties the comparison rests on."""

from __future__ import annotations

import numpy as np
import pytest

from bapjax.analysis import selection


def _runs(rng, n_runs: int, n_items: int, skill: float = 0.3) -> list[dict]:
    runs = []
    for _ in range(n_runs):
        n_ref = rng.integers(1, 6, n_items)
        n_pred = rng.integers(0, 6, n_items)
        tp = np.minimum(rng.binomial(np.minimum(n_pred, n_ref), skill + rng.uniform(0, 0.2)), n_pred)
        runs.append({"tp": tp, "n_pred": n_pred, "n_ref": n_ref})
    return runs


def test_numpy_agrees_with_the_plain_python_reference():
    rng = np.random.default_rng(3)
    chosen, against = _runs(rng, 5, 40), _runs(rng, 3, 40)
    val = list(rng.uniform(0.2, 0.3, 5))
    val[2] = val[4] = max(val)  # a tie on val: the first of the best is taken
    draws = selection.selection_draws(40, 5, 3, [1, 2, 7], samples=25, seed=1)
    fast = selection.simulate(chosen, val, against, draws)
    slow = selection.simulate_reference(chosen, val, against, draws)
    for k in (1, 2, 7):
        for name in ("on_test", "on_val", "normal"):
            np.testing.assert_allclose(fast[k][name], slow[k][name], rtol=0, atol=1e-12, err_msg=f"{k} {name}")


def test_choosing_on_test_is_never_below_choosing_on_val_and_one_run_is_both():
    rng = np.random.default_rng(4)
    chosen, against = _runs(rng, 6, 60), _runs(rng, 4, 60)
    val = list(rng.uniform(0.2, 0.3, 6))
    draws = selection.selection_draws(60, 6, 4, [1, 3, 42], samples=200, seed=2)
    out = selection.simulate(chosen, val, against, draws)
    np.testing.assert_array_equal(out[1]["on_test"], out[1]["on_val"])
    for k in (3, 42):
        assert (out[k]["on_test"] >= out[k]["on_val"]).all()
    assert out[42]["on_test"].mean() > out[3]["on_test"].mean() > out[1]["on_test"].mean()


def test_identical_runs_gain_nothing_from_choosing():
    rng = np.random.default_rng(5)
    (run,) = _runs(rng, 1, 50)
    draws = selection.selection_draws(50, 4, 2, [1, 10], samples=50, seed=3)
    out = selection.simulate([run] * 4, [0.25] * 4, [run] * 2, draws)
    for k in (1, 10):
        for name in ("on_test", "on_val", "normal"):
            np.testing.assert_allclose(out[k][name], 0.0, atol=1e-12)


@pytest.mark.parametrize("k", [1, 2, 5, 42])
def test_expected_max_of_normals_matches_a_monte_carlo(k):
    draws = np.random.default_rng(k).standard_normal((200_000, k)).max(axis=1)
    assert selection.expected_max_normal(k) == pytest.approx(draws.mean(), abs=0.01)
