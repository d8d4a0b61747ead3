"""Sampled decoding and minimum-Bayes-risk selection: draws are feasible, reproducible and do not
depend on slots or devices; a near-zero temperature is greedy; the selection keeps the candidate
with the highest shared actions with the other draws less a cost per action; a run chooses it on val
only when it scores higher."""

import json
import os
import subprocess
import sys
import textwrap
import types
from pathlib import Path

import numpy as np
import pytest

from bapjax.decoding import decode, kernel, mbr, on_val
from bapjax.decoding.runs import Evaluator
from bapjax.decoding.settings import DecodeSettings
from bapjax.world import grid as G
from tests.test_decode import TINY, _batch, _biased_params, _check_feasible, _grids
from tests.test_models import flat_model

REPO = Path(__file__).resolve().parents[1]


def _model_params_batch(seed=0, rows=8):

    rng = np.random.default_rng(seed)
    model = flat_model(**TINY)
    params = _biased_params(model, seed, 0)
    params["stop_out"]["bias"] = params["stop_out"]["bias"] + 6.0  # a mix of lengths
    batch = _batch((_grids(rng) * 4)[:rows], rng)
    return model, params, batch


def _keys(batch, *samples):
    """The keys [N, K, 2] of draw numbers `samples` for the batch's rows (items "g:0", "g:1", ...)."""
    return np.stack([kernel.sample_keys(sample, [f"g:{i}" for i in range(len(batch["grid"]))]) for sample in samples],
                    axis=1)


ONE_DRAW = kernel.Mode(draws=1)


def test_draws_are_feasible_reproducible_and_independent_of_the_slots():
    model, params, batch = _model_params_batch()
    settings = DecodeSettings(8, 1, 8, temperature=1.0)
    fn = settings.decode_fn(model)
    first = np.asarray(fn(params, batch, ONE_DRAW, sample_keys=_keys(batch, 0)))
    assert first.shape == (8, 1, 8)
    first = first[:, 0]
    np.testing.assert_array_equal(first, np.asarray(fn(params, batch, ONE_DRAW, sample_keys=_keys(batch, 0)))[:, 0])
    for slots in (1, 3):
        few = np.asarray(settings.replace(slots=slots).decode_fn(model)(params, batch, ONE_DRAW,
                                                                        sample_keys=_keys(batch, 0)))
        np.testing.assert_array_equal(few[:, 0], first)
    other = np.asarray(fn(params, batch, ONE_DRAW, sample_keys=_keys(batch, 1)))[:, 0]
    assert (other != first).any()  # another draw number draws other sequences
    greedy = np.asarray(fn(params, batch))
    assert (greedy != first).any()
    for ids in (first, other):
        assert (ids[:, 0] < G.NUM_ACTIONS).all()  # min_actions=1 holds for draws too
        for grid, row in zip(batch["grid"], ids):
            _check_feasible(grid, row)


@pytest.mark.parametrize("fields,stop_rule", [pytest.param({}, "argmax", marks=pytest.mark.slow),  # fast: the shipped model
                                               ({"world_encoding": "once", "world_film": True, "length_head": True},
                                                "length")])
def test_draws_decoded_together_equal_each_draw_decoded_alone(fields, stop_rule):
    """Keys [N, K, 2]: K draws per row in one pool reading the row's one encoding give, draw by
    draw, the sequences of one draw (`Mode(draws=1)`, keys [N, 1, 2]) alone, whatever the slots; the
    padding rows (weight 0, last) are left undecoded; forced lengths hold for every draw."""
    rng = np.random.default_rng(4)
    model = flat_model(**TINY, **fields)
    params = _biased_params(model, 4, 0)
    params["stop_out"]["bias"] = params["stop_out"]["bias"] + 6.0  # a mix of lengths
    batch = _batch((_grids(rng) * 2)[:6], rng)
    batch["weight"] = np.array([1, 1, 1, 1, 1, 0], np.float32)
    keys = _keys(batch, 0, 3, 9)
    settings = DecodeSettings(6, 1, 8, stop_rule, temperature=1.0)
    alone = np.concatenate([np.asarray(settings.decode_fn(model)(params, batch, ONE_DRAW, sample_keys=keys[:, k:k + 1]))
                            for k in range(3)], axis=1)
    assert len({alone[:5, k].tobytes() for k in range(3)}) == 3  # the draws differ
    for slots in (8, 5, 2):
        together = np.asarray(settings.replace(slots=slots).decode_fn(model)(params, batch, kernel.Mode(draws=3),
                                                                             sample_keys=keys))
        assert together.shape == (6, 3, 6)
        np.testing.assert_array_equal(together[:5], alone[:5])
        assert (together[5] == G.STOP).all()
    lengths = np.array([1, 3, 0, 2, 4, 0], np.int32)
    forced = np.asarray(settings.decode_fn(model)(params, batch, kernel.Mode(draws=3, forced=True), lengths=lengths,
                                                  sample_keys=keys))
    for k in range(3):
        np.testing.assert_array_equal(
            forced[:5, k], np.asarray(settings.decode_fn(model)(params, batch, kernel.Mode(draws=1, forced=True),
                                                                lengths=lengths, sample_keys=keys[:, k:k + 1]))[:5, 0])
    with pytest.raises(ValueError, match="takes no draws"):
        kernel.Mode(draws=3, teacher=True)
    with pytest.raises(ValueError, match="takes no teacher_actions"):
        kernel.decode_pool(model, params, batch, settings, kernel.Mode(draws=3), sample_keys=keys,
                           teacher_actions=np.zeros((6, 6), np.int32))


def test_a_near_zero_temperature_draws_the_greedy_argmax_sequence():
    model, params, batch = _model_params_batch(seed=1)
    greedy = np.asarray(DecodeSettings(6, 1, 8).decode_fn(model)(params, batch))
    cold = DecodeSettings(6, 1, 8, temperature=1e-6).decode_fn(model)
    np.testing.assert_array_equal(np.asarray(cold(params, batch, ONE_DRAW, sample_keys=_keys(batch, 5)))[:, 0], greedy)


@pytest.mark.parametrize("sampler", kernel.SAMPLERS)
def test_draws_follow_the_softmax_of_the_feasible_logits(sampler):
    """`sample_actions` on one row, many keys: frequencies within a few standard errors of the
    softmax over the feasible columns at the temperature; masked columns (inside and at the end)
    are never drawn, whatever the uniform number."""
    import jax

    logits = np.array([[1.0, 0.0, 2.0, -1.0, 3.0, 0.5]], np.float32)
    feasible = np.array([[True, True, True, False, True, False]])
    draws = 4000
    keys = np.asarray(jax.vmap(lambda i: jax.random.fold_in(jax.random.PRNGKey(0), i))(np.arange(draws)))
    got = np.asarray(jax.vmap(lambda k: kernel.sample_actions(k[None], np.zeros(1, np.int32), logits, feasible, 2.0,
                                                              sampler))(keys))[:, 0]
    weights = np.where(feasible[0], np.exp(logits[0] / 2.0), 0.0)
    counts = np.bincount(got, minlength=6) / draws
    assert counts[3] == counts[5] == 0
    np.testing.assert_allclose(counts, weights / weights.sum(), atol=4 * np.sqrt(0.25 / draws))


def test_the_inverse_cdf_sampler_agrees_with_a_plain_rule():
    """"inverse_cdf" against plain NumPy: the first feasible column whose cumulative weight
    exceeds u times the total, u the key's uniform number; no feasible column: action 0."""
    import jax

    rng = np.random.default_rng(5)
    logits = rng.normal(size=(40, 50)).astype(np.float32) * 3
    feasible = rng.random((40, 50)) < 0.2
    feasible[7] = False
    keys = np.asarray(jax.vmap(lambda i: jax.random.fold_in(jax.random.PRNGKey(3), i))(np.arange(40)))
    steps = rng.integers(0, 5, 40).astype(np.int32)
    got = np.asarray(kernel.sample_actions(keys, steps, logits, feasible, 0.7, "inverse_cdf"))
    for row in range(40):
        key = jax.random.fold_in(keys[row], steps[row])
        u = float(jax.random.uniform(key, (), np.float32))
        if not feasible[row].any():
            assert got[row] == 0
            continue
        scaled = np.where(feasible[row], logits[row].astype(np.float64) / 0.7, -np.inf)
        cumulative = np.cumsum(np.exp(scaled - scaled.max()))
        want = int(np.searchsorted(cumulative, u * cumulative[-1], side="right"))
        assert feasible[row, got[row]]
        assert abs(got[row] - want) <= 1 and (got[row] == want or np.isclose(cumulative[want - 1] / cumulative[-1], u))


def _a(x, color=1, kind=G.PLACE):
    return G.Action(kind, color, x, 1, 0)


def test_choose_weighs_shared_actions_against_a_cost_per_action():
    greedy = [_a(0)]
    draws = [[_a(1), _a(2)], [_a(1), _a(2), _a(3)], [_a(1)], [_a(4)]]
    # mean shared net actions with the other draws: greedy 0; draw 0 (2 + 1 + 0) / 3 = 1;
    # draw 1 (2 + 1 + 0) / 3 = 1; draw 2 (1 + 1 + 0) / 3; draw 3: 0. Utility: that - cost * size.
    assert mbr.choose([greedy] + draws, cost=0.1) == 1  # 1 - 0.2 beats draw 1's 1 - 0.3
    assert mbr.choose([greedy] + draws, cost=0.0) == 1  # a tie with draw 1: the earlier
    assert mbr.choose([greedy] + draws, cost=0.5) == 3  # 2/3 - 0.5 beats 1 - 1.0
    assert mbr.choose([[_a(1), _a(2)]] + draws, cost=0.1) == 0  # the greedy candidate wins its ties
    assert mbr.choose([greedy, draws[0]], cost=0.1) == 0  # one draw weighs nothing
    # net actions are compared: a placement undone inside a sequence is no action
    undone = [_a(5), G.Action(G.REMOVE, 1, 5, 1, 0), _a(1), _a(2)]
    assert G.net_actions(undone) == G.net_actions(draws[0])
    assert mbr.utility(G.net_actions(undone), [G.net_actions(d) for d in draws], 0.25) == (2 + 2 + 1) / 4 - 0.5


def _plain_choice(candidates, cost):
    """The rule written out once more: argmax over candidates of mean shared net actions with the
    other draws minus cost per net action, first index on ties."""
    nets = [set(G.net_actions(c)) for c in candidates]
    values = []
    for i, net in enumerate(nets):
        others = [nets[j] for j in range(1, len(nets)) if j != i]
        values.append(sum(len(net & o) for o in others) / len(others) - cost * len(net))
    return values.index(max(values))


def test_choose_agrees_with_a_plain_rule_on_random_candidates():
    rng = np.random.default_rng(0)
    for _ in range(200):
        candidates = [[_a(int(x)) for x in rng.choice(6, size=rng.integers(0, 5), replace=False)]
                      for _ in range(rng.integers(3, 7))]
        cost = float(rng.choice([0.0, 0.1, 0.3, 0.6]))
        assert mbr.choose(candidates, cost) == _plain_choice(candidates, cost), (candidates, cost)


def test_choose_counts_each_action_once_and_agrees_with_the_utility_pair_by_pair():
    """The counted form against `mbr.choose_pairwise` (`mbr.utility` over the other draws, pair by pair), with
    several greedy passes before the draws and many ties (few distinct actions)."""
    rng = np.random.default_rng(2)
    for _ in range(300):
        candidates = [[_a(int(x), color=int(c)) for x, c in zip(rng.choice(5, size=rng.integers(0, 4), replace=False),
                                                                 rng.integers(1, 3, size=4))]
                      for _ in range(rng.integers(2, 12))]
        draws_from = int(rng.integers(0, min(4, len(candidates))))
        cost = float(rng.choice([0.0, 0.075, 0.25, 0.5]))
        if len(candidates) - draws_from < 2:
            assert mbr.choose(candidates, cost, draws_from) == 0
            continue
        want = mbr.choose_pairwise(candidates, cost, draws_from)
        assert mbr.choose(candidates, cost, draws_from) == want, (candidates, cost, draws_from)


def test_select_is_greedy_without_samples_and_the_choice_among_the_first_draws_with_them():
    rng = np.random.default_rng(1)
    passes = [{"x": [_a(int(v)) for v in rng.choice(6, size=rng.integers(0, 5), replace=False)]} for _ in range(9)]
    items = [types.SimpleNamespace(item_id="x", is_empty_board=False, prev_structure=())]
    greedy = DecodeSettings(max_actions=5, min_actions=0, slots=4)
    assert decode.select(passes, greedy, items) is passes[0]
    for samples in (1, 4, 8):
        settings = greedy.replace(samples=samples).at_cost(0.15)
        candidates = [one["x"] for one in passes[:samples + 1]]
        assert decode.select(passes, settings, items) == {"x": candidates[mbr.choose(candidates, 0.15)]}
        assert decode.select(passes[:1], settings, items) is passes[0]


def test_predictions_are_greedy_without_samples_and_the_chosen_candidate_with_them(mdc_corpus):
    from bapjax.data import input_pipeline
    from bapjax.text.vocab import Vocabulary

    items = mdc_corpus.split("val")[:10]
    vocab = Vocabulary.build(items)
    fc = input_pipeline.FeatureConfig(max_text_tokens=32, max_actions=5, recent_window=4, builder_frame=True)
    model = flat_model(**dict(TINY, vocab_size=vocab.size))
    params = _biased_params(model, 3, 0)
    params["stop_out"]["bias"] = params["stop_out"]["bias"] + 6.0
    settings = DecodeSettings(5, 1, 4, temperature=1.0).at_cost(0.05)
    greedy = decode.predict_items(model, params, items, vocab, fc, settings)
    assert decode.predict(model, params, items, vocab, fc, settings) == greedy
    chosen = decode.predict(model, params, items, vocab, fc, settings.replace(samples=4))
    draws = [decode.predict_items(model, params, items, vocab, fc, settings, sample=k) for k in range(4)]
    assert any(chosen[i.item_id] != greedy[i.item_id] for i in items)
    for item in items:
        candidates = [greedy[item.item_id]] + [d[item.item_id] for d in draws]
        assert chosen[item.item_id] == candidates[_plain_choice(candidates, 0.05)]
    some = items[3:7][::-1]  # an item's draws, and so its choice, do not depend on the items beside it
    alone = decode.predict(model, params, some, vocab, fc, settings.replace(samples=4))
    assert alone == {item.item_id: chosen[item.item_id] for item in some}


def test_a_run_keeps_sampling_only_when_val_scores_higher(tmp_path, monkeypatch):
    """`choose_decoding`: the STOP rules first, then the best rule with draws (decoded once per
    temperature) at each cost; the highest val F1 wins (greedy on ties); written as decode.json,
    `run_decode_settings` reads it back; a decode.json without sampling reads as greedy."""
    from bapjax.decoding import kernel
    from bapjax.training import run_checks, run_eval

    config = run_checks.with_defaults({})
    config.eval.update(dict(stop_thresholds=(0.3,), samples=3, temperatures=(0.5, 1.0), costs=(0.1, 0.2)))
    evaluator = Evaluator.__new__(Evaluator)
    evaluator.model = None
    decoded = []
    # the predictions stand for the decoding that made them; the fake report scores them
    scores = {("argmax", 0, 0): 0.20, ("mass", 0, 0): 0.22, ("mass", 0.5, 0.1): 0.21, ("mass", 0.5, 0.2): 0.25,
              ("mass", 1.0, 0.1): 0.19, ("mass", 1.0, 0.2): 0.23}

    def fake_candidates(params, items, settings):
        decoded.append((settings.stop_rule, settings.samples, settings.temperature))
        return [{"greedy": (settings.stop_rule, 0, 0)}] + [{"draw": k} for k in range(settings.samples)]

    def fake_select(passes, settings, items):
        assert settings.rules[0] == settings.rules[1] and settings.rules[0][0] == "select"
        return {"chosen": (passes[0]["greedy"][0], settings.temperature, settings.rules[0][1])}

    def fake_report(items, predictions, drop_infeasible):
        return {"micro": {"Overall": {"overall": scores[next(iter(predictions.values()))]}}, "strict_micro": 0.0,
                "counts": {"predicted_net_actions": 4, "items": 2}}

    monkeypatch.setattr(evaluator, "candidates", fake_candidates)
    monkeypatch.setattr(on_val.decode, "select", fake_select)
    monkeypatch.setattr(on_val.evaluator, "evaluate_predictions", fake_report)
    chosen = on_val.choose_decoding(evaluator, None, [1, 2], config.eval, log_fn=lambda *a: None)
    assert not (tmp_path / "decode.json").exists()  # the caller writes it
    run_eval.write_decode_choice(tmp_path, chosen)
    assert json.loads((tmp_path / "decode.json").read_text()) == chosen
    assert chosen["sampler"] == kernel.SAMPLERS[0]  # recorded, so the run's draws stay the ones it chose with
    assert decoded == [("argmax", 0, 1.0), ("mass", 0, 1.0), ("mass", 3, 0.5), ("mass", 3, 1.0)]
    select = {"rule": "select", "value": 0.2}
    assert {k: chosen[k] for k in ("stop_rule", "samples", "temperature", "rules")} == {
        "stop_rule": "mass", "samples": 3, "temperature": 0.5, "rules": {"EB": select, "NEB": select}}
    assert "cost" not in chosen and len(chosen["candidates"]) == 6
    settings = run_eval.run_decode_settings(tmp_path, config)
    assert (settings.stop_rule, settings.stop_threshold, settings.samples, settings.temperature, settings.rules,
            settings.sampler) == ("mass", 0.3, 3, 0.5, (("select", 0.2), ("select", 0.2)), kernel.SAMPLERS[0])
    assert "greedy and 3 draws at temperature 0.5, EB select 0.2, NEB select 0.2" in settings.describe()
    # a decode.json written before rules per board keeps a cost: "select" at it on every board
    old = {"stop_rule": "mass", "stop_threshold": 0.3, "samples": 3, "temperature": 0.5, "cost": 0.15}
    (tmp_path / "decode.json").write_text(json.dumps(old))
    assert run_eval.run_decode_settings(tmp_path, config).rules == (("select", 0.15), ("select", 0.15))
    run_eval.write_decode_choice(tmp_path, chosen)
    scores[("mass", 0.5, 0.2)] = scores[("mass", 1.0, 0.2)] = 0.22  # a tie with greedy: greedy
    chosen = on_val.choose_decoding(evaluator, None, [1, 2], config.eval, log_fn=lambda *a: None)
    run_eval.write_decode_choice(tmp_path, chosen)
    assert "samples" not in chosen and run_eval.run_decode_settings(tmp_path, config).samples == 0
    (tmp_path / "decode.json").write_text(json.dumps({"stop_rule": "mass", "stop_threshold": 0.2}))
    assert run_eval.run_decode_settings(tmp_path, config).samples == 0
    # a decode.json from before the sampler was recorded: its draws were Gumbel-max ones
    assert run_eval.run_decode_settings(tmp_path, config).sampler == kernel.LEGACY_SAMPLER == "gumbel"


def _passes_near_the_references(items, draws, seed):
    """[greedy, draw 0, ...] of `items`: the greedy pass empty, each draw a prefix of the item's
    reference actions (so buildable) of random length, so a vote over the draws is near the references."""
    rng = np.random.default_rng(seed)
    passes = [{item.item_id: [] for item in items}]
    for _ in range(draws):
        passes.append({item.item_id: list(item.reference_actions[:rng.integers(0, len(item.reference_actions) + 1)])
                       for item in items})
    return passes


def test_rules_per_board_combine_each_item_by_its_boards_rule(mdc_corpus):
    """`DecodeSettings.rules`: each item is "select"ed or "vote"d by the rule of its kind of board
    (`mbr.combine` among the greedy pass and the first `samples` draws), as an ensemble of one member
    combines its pool; decode.json's form reads back; the compiled program ignores them."""
    from bapjax.decoding import decode, mbr
    from bapjax.decoding.settings import DecodeSettings

    items = list(mdc_corpus.split("val"))[:40]
    assert {mbr.board(item) for item in items} == set(mbr.BOARDS)
    passes = _passes_near_the_references(items, 6, 0)
    settings = DecodeSettings(5, 1, 4, samples=4, temperature=0.8, rules=(("select", 0.1), ("vote", 0.3)))
    chosen = decode.select(passes, settings, items)
    for item in items:
        candidates = [one[item.item_id] for one in passes[:5]]
        rule = ("select", 0.1) if item.is_empty_board else ("vote", 0.3)
        assert chosen[item.item_id] == mbr.combine_item(candidates, *rule, item.prev_structure)
    choice = {"EB": {"rule": "select", "value": 0.1}, "NEB": {"rule": "vote", "value": 0.3}}
    assert chosen == mbr.combine_chosen(mbr.pool([passes[:5]]), choice, items)
    assert any(chosen[item.item_id] != passes[0][item.item_id] for item in items)
    assert decode.select(passes, settings.replace(samples=0), items) is passes[0]
    with pytest.raises(ValueError, match="needs the items"):
        decode.select(passes, settings, [])
    assert settings.rules_json() == choice
    back = DecodeSettings(5, 1, 4).chosen({"stop_rule": "argmax", "stop_threshold": 0.5, "samples": 4,
                                                  "temperature": 0.8, "rules": choice, "sampler": "inverse_cdf"})
    assert back == settings and back.program() == settings.at_cost(0.3).replace(samples=4 + 4).program()
    assert "EB select 0.1, NEB vote 0.3" in settings.describe()
    for rules, message in (((("vote", 1.0), ("vote", 0.1)), r"in \[0, 1\)"), ((("average", 0.1),) * 2, "one of"),
                           ((("vote", 0.1),), "one \\(rule, value\\) per kind of board")):
        with pytest.raises(ValueError, match=message):
            settings.replace(rules=rules)


def test_a_run_keeps_a_rule_per_board_when_it_scores_higher_on_val(tmp_path, monkeypatch, mdc_corpus):
    """`choose_decoding` with `eval.vote_samples`: the winning STOP rule's draws at
    `eval.vote_temperature`, every rule of `ensemble.COSTS` and `THRESHOLDS` for every item, then the
    pair per kind of board `on_val.choose_combination` picks over the run as its one member; it wins
    here (its draws are near the references), so decode.json keeps its rules and no cost, and the
    run decodes with them."""
    from bapjax.decoding import decode, mbr
    from bapjax.training import run_checks, run_eval

    items = list(mdc_corpus.split("val"))[:40]
    config = run_checks.with_defaults({})
    config.eval.update(dict(stop_thresholds=(0.3,), samples=2, vote_samples=6, vote_temperature=0.9))
    evaluator = Evaluator.__new__(Evaluator)
    evaluator.model = None
    decoded = []
    near, poor = _passes_near_the_references(items, 6, 1), _passes_near_the_references(items, 2, 2)
    for one in poor[1:]:
        one.update({item.item_id: one[item.item_id][:1] for item in items})

    def fake_candidates(params, val_items, settings):
        decoded.append((settings.stop_rule, settings.samples, settings.temperature))
        return near if settings.samples == 6 else poor[:settings.samples + 1]

    monkeypatch.setattr(evaluator, "candidates", fake_candidates)
    chosen = on_val.choose_decoding(evaluator, None, items, config.eval, log_fn=lambda *a: None)
    assert decoded[-1] == (decoded[-2][0], 6, 0.9)  # the vote's draws: the rule the greedy choice kept
    pair = on_val.choose_combination(mbr.pool([near]), items, on_val.COSTS, on_val.THRESHOLDS)
    rules = {kind: {"rule": pair[kind]["rule"], "value": pair[kind]["value"]} for kind in mbr.BOARDS}
    assert chosen["rules"] == rules and "cost" not in chosen and chosen["samples"] == 6
    assert chosen["temperature"] == 0.9
    rows = chosen["candidates"]
    assert len(rows) == 2 + 4 + len(on_val.COSTS) + len(on_val.THRESHOLDS) + 1
    assert rows[-1]["rules"] == rules and rows[-1]["val_overall_micro_f1"] == pytest.approx(pair["micro_overall"])
    assert rows[-1]["val_overall_micro_f1"] == max(r["val_overall_micro_f1"] for r in rows)
    run_eval.write_decode_choice(tmp_path, chosen)
    settings = run_eval.run_decode_settings(tmp_path, config)
    assert settings.rules == tuple((rules[k]["rule"], rules[k]["value"]) for k in mbr.BOARDS)
    assert decode.select(near, settings, items) == mbr.combine_chosen(mbr.pool([near]), pair, items)


def test_a_run_with_vote_rules_fixed_only_scores_them_on_val(tmp_path, monkeypatch, mdc_corpus):
    """`eval.vote_rules` fixes the vote's two rules: val scores that pair alone (no other rule's row),
    its score is `ensemble.fixed_combination`'s, and it competes with the greedy rows as a chosen pair
    does; decode.json keeps the fixed rules and the run decodes with them."""
    from bapjax.decoding import mbr
    from bapjax.training import run_checks, run_eval

    items = list(mdc_corpus.split("val"))[:40]
    config = run_checks.with_defaults({})
    config.eval.update(dict(stop_thresholds=(0.3,), samples=0, vote_samples=6, vote_rules="select:0.15, vote:0.5"))
    evaluator = Evaluator.__new__(Evaluator)
    evaluator.model = None
    near = _passes_near_the_references(items, 6, 1)
    empty = [{item.item_id: [] for item in items}]
    monkeypatch.setattr(evaluator, "candidates",
                        lambda params, val_items, settings: near if settings.samples == 6 else empty)
    chosen = on_val.choose_decoding(evaluator, None, items, config.eval, log_fn=lambda *a: None)
    fixed = {"EB": ("select", 0.15), "NEB": ("vote", 0.5)}
    assert chosen["rules"] == {kind: {"rule": rule, "value": value} for kind, (rule, value) in fixed.items()}
    rows = chosen["candidates"]
    assert len(rows) == 2 + 1 and [row["samples"] for row in rows] == [0, 0, 6]
    expected = on_val.fixed_combination(mbr.pool([near]), items, fixed)["micro_overall"]
    assert rows[-1]["val_overall_micro_f1"] == pytest.approx(expected)
    run_eval.write_decode_choice(tmp_path, chosen)
    settings = run_eval.run_decode_settings(tmp_path, config)
    assert settings.rules == (("select", 0.15), ("vote", 0.5))
    # draws no better than the greedy pass: the fixed pair ties and the earlier, greedy, is kept
    monkeypatch.setattr(evaluator, "candidates", lambda params, val_items, settings: empty * (settings.samples + 1))
    chosen = on_val.choose_decoding(evaluator, None, items, config.eval, log_fn=lambda *a: None)
    assert chosen["stop_rule"] == "argmax" and "rules" not in chosen and "samples" not in chosen
    assert len(chosen["candidates"]) == 3


@pytest.mark.parametrize("text, message", [("vote:0.15", "expected two rules"),
                                           ("members:1,vote:0.15", "a run's own vote takes select or vote"),
                                           ("select:0.1,vote:high", "expected RULE:VALUE with a number"),
                                           ("select:0.1,vote:1.5", r"in \[0, 1\)")])
def test_bad_vote_rules_name_the_field(text, message):
    from bapjax import sharding
    from bapjax.training import run_checks

    config = run_checks.with_defaults({})
    config.eval.vote_rules = text
    with pytest.raises(run_checks.ConfigError, match=rf"eval\.vote_rules: .*{message}"):
        run_checks.validate_config(config, sharding.data_mesh())


@pytest.mark.parametrize("field, value", [("samples", -1), ("temperatures", (0.0,)), ("costs", (1.0,))])
def test_bad_sampling_settings_name_their_field(field, value):
    from bapjax import sharding
    from bapjax.training import run_checks

    config = run_checks.with_defaults({})
    config.eval.samples = 2
    config.eval[field] = value
    with pytest.raises(run_checks.ConfigError, match=rf"eval\.{field}"):
        run_checks.validate_config(config, sharding.data_mesh())


def test_predict_refuses_a_negative_sample_count(tmp_path):
    result = subprocess.run([sys.executable, "-m", "bapjax.predict", "--checkpoint", str(tmp_path), "--out",
                             str(tmp_path / "p.jsonl"), "--samples", "-2"], cwd=REPO, capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 2, result.stderr[-2000:]
    assert result.stderr == "error: --samples: the number of samples must be an integer >= 0 (0: greedy only), got -2\n"


def test_draws_on_four_devices_equal_one_device():
    script = textwrap.dedent('''
        import jax, numpy as np
        assert jax.device_count() == 4
        from bapjax import sharding
        from bapjax.decoding import decode, kernel, mbr, on_val
        from bapjax.decoding.runs import Evaluator
        from bapjax.decoding.settings import DecodeSettings
        from tests.test_mbr import ONE_DRAW, _model_params_batch, _keys
        model, params, batch = _model_params_batch(seed=2, rows=8)
        settings = DecodeSettings(6, 1, 8, temperature=1.0)
        one = np.asarray(settings.decode_fn(model)(params, batch, ONE_DRAW, sample_keys=_keys(batch, 7)))
        mesh = sharding.data_mesh()
        rows = sharding.host_batch_to_global(dict(batch, keys=_keys(batch, 7)), mesh)
        keys = rows.pop("keys")
        four = np.asarray(settings.decode_fn(model, mesh)(sharding.replicate(params, mesh), rows, ONE_DRAW,
                                                          sample_keys=keys))
        np.testing.assert_array_equal(one, four)
        keys3 = _keys(batch, 7, 8)  # two draws per row, decoded together
        two = kernel.Mode(draws=2)
        one3 = np.asarray(settings.decode_fn(model)(params, batch, two, sample_keys=keys3))
        four3 = settings.decode_fn(model, mesh)(sharding.replicate(params, mesh), rows, two,
                                                 sample_keys=sharding.host_batch_to_global({"k": keys3}, mesh)["k"])
        np.testing.assert_array_equal(one3, np.asarray(four3))
        np.testing.assert_array_equal(one3[:, :1], one)
        print("OK")
    ''')
    env = dict(os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=4", JAX_PLATFORMS="cpu")
    result = subprocess.run([sys.executable, "-c", script], cwd=REPO, env=env, capture_output=True, text=True,
                            timeout=600)
    assert result.returncode == 0 and "OK" in result.stdout, result.stdout[-2000:] + result.stderr[-3000:]
