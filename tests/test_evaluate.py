"""The evaluator on the real MDC test split, its files, its errors, and its CLI."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from bapjax.evaluation import evaluator, metrics, trivial
from bapjax.evaluation.evaluator import EvaluationError
from bapjax.world import jsonl
from bapjax.world.grid import PLACE, REMOVE, Action

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def test_items(mdc_corpus):
    return mdc_corpus.split("test")


def test_oracle_scores_one_everywhere(test_items):
    predictions = trivial.predict("oracle", test_items)
    report, scores, _ = evaluator.evaluate_items(test_items, predictions)
    for kind in ("micro", "macro"):
        for group in ("EB", "NEB", "Overall"):
            assert report[kind][group] == {m: 1.0 for m in metrics.METRIC_NAMES}, (kind, group)
    assert report["strict_micro"] == 1.0
    assert report["counts"]["items"] == 1616
    assert report["counts"]["EB"] + report["counts"]["NEB"] == 1616
    assert report["counts"]["multiple"] == report["counts"]["EB"]  # no annotations: M = EB
    for values in scores.per_item().values():
        assert np.all(values == 1.0)


def test_oracle_adds_supports_only_where_the_reference_is_infeasible(test_items):
    changed = [i for i in test_items if trivial.oracle_prediction(i) != list(i.reference_actions)]
    assert [i.item_id for i in changed] == ["B35-A15-C152-1524246905435:16"]
    with pytest.raises(EvaluationError, match="B35-A15-C152-1524246905435:16: step 1 of 1"):
        evaluator.evaluate_predictions(changed, {changed[0].item_id: list(changed[0].reference_actions)})


def test_empty_scores_zero_where_reference_nonempty(test_items):
    predictions = trivial.predict("empty", test_items)
    report, scores, details = evaluator.evaluate_items(test_items, predictions)
    nonempty = scores.n_ref > 0
    assert nonempty.sum() > 1500
    for metric, values in scores.per_item().items():
        assert np.all(values[nonempty] == 0.0), metric
        assert np.all(values[~nonempty] == 1.0), metric
    for group in ("EB", "NEB", "Overall"):
        assert all(v == 0.0 for v in report["micro"][group].values())
    assert report["strict_micro"] == 0.0


def test_perturbed_predictions_ordering(test_items):
    """Every predicted action shifted one column (+x, clamped at the region's edge): EB items
    score higher than NEB ones (the fairer alignment searches offsets on an empty board), shape
    F1 is at least the overall F1, infeasible shifted actions are dropped, and every score stays
    in [0, 1]."""
    predictions = {}
    for item in test_items:
        moved = [Action(a.type, a.color, min(5, a.x + 1), a.y, a.z) for a in item.reference_actions]
        predictions[item.item_id] = moved
    report = evaluator.evaluate_predictions(test_items, predictions, drop_infeasible=True)
    assert report["micro"]["EB"]["overall"] > report["micro"]["NEB"]["overall"]
    assert report["micro"]["Overall"]["shape"] >= report["micro"]["Overall"]["overall"]
    assert report["counts"]["dropped_infeasible_actions"] > 0
    for kind in ("micro", "macro"):
        for group in ("EB", "NEB", "Overall"):
            assert all(0.0 <= v <= 1.0 for v in report[kind][group].values())


def test_missing_and_unknown_items(test_items):
    items = test_items[:5]
    predictions = {i.item_id: list(i.reference_actions) for i in items[1:]}
    with pytest.raises(EvaluationError, match=f"item {items[0].item_id} has no prediction"):
        evaluator.evaluate_predictions(items, predictions)
    report = evaluator.evaluate_predictions(items, predictions, allow_missing=True)
    assert report["counts"]["missing"] == 1
    predictions["nope:1"] = []
    with pytest.raises(EvaluationError, match="'nope:1'"):
        evaluator.evaluate_predictions(items, predictions, allow_missing=True)


def test_infeasible_prediction_names_item_and_step(test_items):
    item = next(i for i in test_items if not i.is_empty_board)
    occupied = item.prev_structure[0]
    bad = [Action(PLACE, 1, 0, 9, 0) if (0, 9, 0) not in {(b.x, b.y, b.z) for b in item.prev_structure}
           else Action(PLACE, occupied.color, occupied.x, occupied.y, occupied.z)]
    predictions = {item.item_id: list(item.reference_actions) + bad}
    step = len(item.reference_actions) + 1
    with pytest.raises(EvaluationError, match=f"item {item.item_id}: step {step} of {step}"):
        evaluator.evaluate_predictions([item], predictions)
    report = evaluator.evaluate_predictions([item], predictions, drop_infeasible=True)
    assert report["counts"]["dropped_infeasible_actions"] == 1
    assert report["counts"]["items_with_dropped_actions"] == 1


def test_prediction_file_round_trip_and_errors(tmp_path):
    path = tmp_path / "p.jsonl"
    want = {"a:0": [Action(PLACE, 2, 0, 1, 0), Action(REMOVE, 2, 0, 1, 0)], "a:1": []}
    jsonl.write_predictions(path, want)
    assert jsonl.read_predictions(path) == want

    def bad(text, pattern):
        path.write_text(text)
        with pytest.raises(jsonl.FormatError, match=pattern):
            jsonl.read_predictions(path)

    good = '{"item_id": "a:0", "actions": []}\n'
    bad(good + "{not json\n", r"p.jsonl:2: not valid JSON")
    bad(good + '{"actions": []}\n', r":2: missing field 'item_id'")
    bad(good + '{"item_id": "b"}\n', r":2: item b: missing field 'actions'")
    bad(good + good, r":2: item a:0 is predicted twice")
    bad('{"item_id": "a", "actions": [{"type": "place", "color": "pink", "x": 0, "y": 1, "z": 0}]}\n',
        r":1: item a: actions\[0\]: field 'color'")
    bad('{"item_id": "a", "actions": [{"type": "put", "color": "red", "x": 0, "y": 1, "z": 0}]}\n',
        r":1: item a: actions\[0\]: field 'type'")
    bad('{"item_id": "a", "actions": [{"type": "place", "color": "red", "x": 6, "y": 1, "z": 0}]}\n',
        r":1: item a: actions\[0\]: cell \(6, 1, 0\) is outside the build region")
    bad('{"item_id": "a", "actions": [{"type": "place", "color": "red", "x": 0, "y": 1}]}\n',
        r":1: item a: actions\[0\]: missing field\(s\) z")


def test_format_report_shapes(test_items):
    report = evaluator.evaluate_predictions(test_items[:50], trivial.predict("oracle", test_items[:50]))
    text = evaluator.format_report(report, "text")
    assert "Micro F1" in text and "Macro F1" in text and "Legacy strict micro F1" in text
    markdown = evaluator.format_report(report, "markdown")
    assert "| EB |" in markdown and "|---|---:|" in markdown
    assert json.loads(evaluator.format_report(report, "json")) == report


def _cli(*args, env_extra=None):
    env = dict(os.environ, PYTHONPATH=str(REPO))
    return subprocess.run([sys.executable, *args], cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=300)


def test_cli_json_last_line_and_bad_input(test_items, tmp_path):
    items_file = tmp_path / "items.jsonl"
    jsonl.write_items(items_file, test_items[:40])
    predictions_file = tmp_path / "oracle.jsonl"
    done = _cli("-m", "bapjax.predictors", "oracle", "--items", str(items_file), "--out", str(predictions_file))
    assert done.returncode == 0, done.stderr
    done = _cli("-m", "bapjax.evaluate", "--items", str(items_file), "--predictions",
                str(predictions_file), "--format", "json", "--nocompilation_cache")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert set(report) == {"micro", "macro", "strict_micro", "counts"}
    assert report["micro"]["Overall"]["overall"] == 1.0 and report["counts"]["items"] == 40
    with open(predictions_file, "a") as out:
        out.write('{"item_id": "x:1", "actions": [{"type": "place", "color": "red", "x": 0, "y": 12, "z": 0}]}\n')
    done = _cli("-m", "bapjax.evaluate", "--items", str(items_file), "--predictions", str(predictions_file))
    assert done.returncode == 2
    assert "oracle.jsonl:41: item x:1: actions[0]: cell (0, 12, 0) is outside the build region" in done.stderr


def test_cli_limit_scores_the_first_n_items(test_items, tmp_path, mdc_path):
    """`predict --limit 20` then `evaluate --limit 20`: predictions of the split's first 20 items
    (the oracle's, written by `predictors --limit 20` in predict's order) score exactly those 20
    items; without --limit they stay the missing-prediction error, which names the --limit; a
    whole split's predictions read with --limit too (the later ones ignored and counted)."""
    source = ("--corpus", str(mdc_path), "--split", "test")
    first = tmp_path / "first20.jsonl"
    done = _cli("-m", "bapjax.predictors", "oracle", *source, "--limit", "20", "--out", str(first))
    assert done.returncode == 0, done.stderr
    assert list(jsonl.read_predictions(first)) == [item.item_id for item in test_items[:20]]
    done = _cli("-m", "bapjax.evaluate", *source, "--limit", "20", "--predictions", str(first),
                "--format", "json", "--nocompilation_cache")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert set(report) == {"micro", "macro", "strict_micro", "counts", "limit"}
    assert report["counts"]["items"] == 20 and report["counts"]["missing"] == 0
    assert report["limit"] == {"first": 20, "of": len(test_items), "ignored_predictions": 0}
    assert report["micro"]["Overall"]["overall"] == 1.0
    assert f"evaluated 20 items (--limit 20: the first 20 of {len(test_items)} items" in done.stderr
    done = _cli("-m", "bapjax.evaluate", *source, "--predictions", str(first), "--nocompilation_cache")
    assert done.returncode == 2 and done.stderr.strip().splitlines() == [
        f"error: item {test_items[20].item_id} has no prediction: the 20 predictions are of the first 20 of the "
        f"{len(test_items)} items (--limit 20 scores those; --allow_missing scores the rest as empty predictions)"]
    whole = tmp_path / "all.jsonl"
    jsonl.write_predictions(whole, trivial.predict("oracle", test_items))
    done = _cli("-m", "bapjax.evaluate", *source, "--limit", "20", "--predictions", str(whole), "--nocompilation_cache")
    assert done.returncode == 0, done.stderr
    ignored = len(test_items) - 20
    assert f"{ignored} prediction(s) of later items ignored" in done.stderr
    assert done.stdout.strip().splitlines()[-1] == f"partial: the first 20 of {len(test_items)} items (--limit)"
    done = _cli("-m", "bapjax.evaluate", *source, "--limit", "-1", "--predictions", str(whole))
    assert done.returncode == 2 and done.stderr == "error: --limit is -1; expected an integer >= 0 (0: all)\n"


def test_group_without_items_is_null(test_items):
    items = [i for i in test_items if not i.is_empty_board][:10]
    report = evaluator.evaluate_predictions(items, {i.item_id: [] for i in items})
    assert all(v is None for v in report["micro"]["EB"].values())
    assert all(v is None for v in report["macro"]["EB"].values())
    assert report["counts"]["EB"] == 0 and report["counts"]["multiple"] == 0
    assert "EB               -" in evaluator.format_report(report, "text")



def test_headline_reads_micro_overall_strict_and_predicted_actions_per_item(test_items):
    items = test_items[:20]
    oracle = trivial.predict("oracle", items)
    whole = evaluator.headline(evaluator.evaluate_predictions(items, oracle))
    assert whole["micro_overall"] == whole["strict"] == 1.0
    one_empty = {**oracle, items[0].item_id: []}
    report = evaluator.evaluate_predictions(items, one_empty)
    headline = evaluator.headline(report)
    assert headline["micro_overall"] == report["micro"]["Overall"]["overall"] < 1.0
    assert headline["strict"] == report["strict_micro"] < 1.0
    assert headline["mean_predicted_net_actions"] == report["counts"]["predicted_net_actions"] / 20 \
        < whole["mean_predicted_net_actions"]
