"""The arithmetic of a training run's ETA (`bapjax.training.time_left`, `cli.Progress`), without training:
the evals and saves left, the final evaluation's decoding passes, measured durations replacing the estimates,
compilation left out of the step rate."""

import pytest

from bapjax import cli
from bapjax.training import run_checks, time_left
from configs import cpu_experiment, quickstart


def test_the_evals_left_count_the_multiples_and_the_last_step():
    assert time_left.steps_at(1, 140, 28, 140) == 5  # 28, 56, 84, 112, 140
    assert time_left.steps_at(100, 140, 28, 140) == 2  # 112, 140
    assert time_left.steps_at(112, 140, 28, 140) == 2  # the line of step 112 comes before its eval
    assert time_left.steps_at(6, 12, 5, 12) == 2  # 10, and 12: the last step, not a multiple
    assert time_left.steps_at(13, 12, 5, 12) == 0
    assert time_left.steps_at(100, 6000, 1200, 6000) == 5


def test_the_final_passes_follow_the_eval_config():
    qs = run_checks.with_defaults(quickstart.get_config()).eval
    # 1 argmax + 7 mass thresholds on 120 val items, then 300 test items greedy; no draws
    assert time_left.FinalPasses.of(qs, 120, 300) == time_left.FinalPasses(greedy=8 * 120 + 300, draws=0)
    # a length head adds a pass per quantile
    assert time_left.FinalPasses.of(qs, 120, 300, length_head=True).greedy == 12 * 120 + 300
    assert time_left.FinalPasses.of(qs, 0, 300) == time_left.FinalPasses(greedy=300, draws=0)  # nothing to choose on
    exp = run_checks.with_defaults(cpu_experiment.get_config("agg,0")).eval
    # argmax + 3 mass rules, then the vote's greedy pass and 64 draws, on MDC val; the test splits greedy, and
    # their 64 draws apart (decoded if the vote wins on val)
    assert time_left.FinalPasses.of(exp, 1331, 4886) == time_left.FinalPasses(
        greedy=4 * 1331 + 1331 + 4886, draws=64 * 1331, test_draws=64 * 4886)
    assert time_left.FinalPasses.of(exp, 0, 4886) == time_left.FinalPasses(greedy=4886)  # no choice: the config's own


def plan(**changes) -> time_left.TimeLeft:
    fields = dict(steps_total=140, batch_size=32, eval_every=28, checkpoint_every=28, loss_items=120,
                  decoded_items=0, final=time_left.FinalPasses(greedy=1260))
    return time_left.TimeLeft(**{**fields, **changes})


def test_before_any_eval_the_evals_and_the_final_evaluation_are_estimated_from_the_step_rate():
    clock = plan()
    rate = 0.8  # steps/s: 25.6 items/s, a training item 1/25.6 s
    item = 1 / 25.6
    eval_s = 120 * time_left.LOSS_ITEM * item
    final_s = 1260 * time_left.GREEDY_ITEM * item
    assert clock.eval_estimate(rate) == (pytest.approx(eval_s), False)
    expected = 40 / rate + 2 * eval_s + 2 * time_left.SAVE_SECONDS + final_s
    assert clock.seconds(100, rate) == pytest.approx(expected)
    assert clock.eval_estimate(None) == (None, False)  # no rate and no eval yet: nothing to estimate from


def test_measured_evals_saves_and_decoding_replace_the_estimates():
    clock = plan(decoded_items=200, final=time_left.FinalPasses(greedy=1000, draws=6400, test_draws=3200))
    clock.evaluated(9.0, decoded=200, decode_seconds=4.0)  # 20 ms per item decoded greedily
    clock.saved(1.5)
    greedy = 0.02
    draw = greedy * time_left.DRAW_ITEM / time_left.GREEDY_ITEM
    assert clock.eval_estimate(0.8) == (9.0, True)
    assert clock.final_seconds(0.8) == pytest.approx(1000 * greedy + 6400 * draw)
    assert clock.seconds(140, 0.8) == pytest.approx(9.0 + 1.5 + 1000 * greedy + 6400 * draw)  # the last step's line
    assert clock.if_draws_win(0.8) == pytest.approx(3200 * draw)
    clock.evaluated(5.0)  # an eval that decoded nothing keeps the measured decoding rate
    assert clock.greedy_seconds == greedy and clock.eval_seconds == 5.0


def test_a_time_budget_ends_the_steps_with_one_more_eval_and_save():
    clock = plan(steps_total=6000, eval_every=1200, checkpoint_every=1200, final=time_left.FinalPasses())
    clock.evaluated(10.0)
    clock.saved(2.0)
    # 60 s of budget left at 1 step/s: 60 more steps (no multiple of 1200 among them), then the budget's eval and save
    assert clock.seconds(100, 1.0, budget_left_s=60.0) == pytest.approx(60 + 10.0 + 2.0)
    # a budget longer than the steps changes nothing
    assert clock.seconds(100, 1.0, budget_left_s=1e9) == pytest.approx(clock.seconds(100, 1.0))


def test_the_step_rate_leaves_compilation_and_pauses_out(monkeypatch):
    """10 steps in 30 s of which 20 s compiled a new shape: 1 step/s, not 1/3; after a pause the
    next stretch adds to the ones before it."""
    clock, compiled = [100.0], [0.0]
    monkeypatch.setattr(cli.time, "time", lambda: clock[0])
    monkeypatch.setattr(cli, "compiling_seconds", lambda: compiled[0])
    rule = cli.Progress(1000, "steps")
    assert rule.measure(10) is None  # the first line sets the mark
    clock[0] += 30.0
    compiled[0] += 20.0
    assert rule.measure(20) == (1.0, 980.0)
    clock[0] += 100.0  # an eval: a pause the rate leaves out
    rule.restart(20)
    clock[0] += 2.0  # a short stretch at 2 steps/s: read with the 10 steps before it, not alone
    assert rule.measure(24) == (pytest.approx(14 / 12), pytest.approx(976 * 12 / 14))
    watch = cli.Stopwatch()
    clock[0] += 5.0
    compiled[0] += 7.0  # more compiling than wall time (another thread's): never negative
    assert (watch.seconds(), watch.working()) == (5.0, 0.0)
