"""A user's whole path in the fast test run: train a tiny model, then `python -m bapjax.predict`
on its checkpoint and `python -m bapjax.evaluate` on the predictions. The predict CLI decodes as
the run's final evaluation did (`run_eval.run_decode_settings`: the run's config and the STOP rule it
chose on val, decode.json), so the evaluator's figures equal the run's own, to the last digit, and
its predictions equal those the run's final evaluation kept (predictions/<source>_<split>.jsonl)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from bapjax.world import jsonl
from tests.test_train import tiny_config

REPO = Path(__file__).resolve().parents[1]


def tiny_run_config(mdc_path):
    """test_train's tiny run, with the MDC test split decoded at the end and a STOP rule to choose."""
    config = tiny_config("unused")
    mc = config.data.sources.mc
    mc.corpus = str(mdc_path)
    mc.max_train_items = 32
    config.train.update(dict(num_epochs=1, max_steps=4, eval_every_steps=2, log_every_steps=2))
    # the STOP rule is chosen on MDC val (decode.json), then used by the final eval and by predict
    config.eval.update(dict(final_splits=("mc:test",), max_actions=4, stop_thresholds=(0.3,), stop_rule_val="mc"))
    return config


def run_cli(module, *args, env):
    result = subprocess.run([sys.executable, "-m", module, *args], cwd=REPO, env=env, capture_output=True,
                            text=True, timeout=600)
    assert result.returncode == 0, f"{module} failed:\n{result.stdout[-2000:]}\n{result.stderr[-3000:]}"
    return result


def test_train_then_predict_then_evaluate(tmp_path, mdc_path, mdc_corpus, monkeypatch):
    from bapjax.training import loop

    monkeypatch.setenv("BAPJAX_CACHE", str(tmp_path / "cache"))
    run = tmp_path / "run"
    final = loop.train_and_evaluate(tiny_run_config(mdc_path), run)
    decode_json = json.loads((run / "decode.json").read_text())
    assert decode_json["chosen_on"] == "mc:val" and decode_json["val_items"] == 8
    assert (run / "checkpoints" / "best").is_dir() and (run / "final_eval.json").exists()

    items = list(mdc_corpus.split("test"))[:8]  # the run's mc:test (max_test_items keeps the first 8)
    jsonl.write_items(tmp_path / "items.jsonl", items)
    env = {**os.environ, "BAPJAX_CACHE": str(tmp_path / "cache")}
    predicted = run_cli("bapjax.predict", f"--checkpoint={run / 'checkpoints' / 'best'}",
                        f"--items={tmp_path / 'items.jsonl'}", f"--out={tmp_path / 'predictions.jsonl'}", env=env)
    assert "wrote 8 predictions" in predicted.stderr
    assert set(jsonl.read_predictions(tmp_path / "predictions.jsonl")) == {it.item_id for it in items}
    # the run kept its final decode's predictions: the same as predict's, item for item
    assert (jsonl.read_predictions(run / "predictions" / "mc_test.jsonl")
            == jsonl.read_predictions(tmp_path / "predictions.jsonl"))
    # the run as a builder directory (what bapjax ships as `pretrained`): the same predictions
    exported = run_cli("bapjax.export", f"--checkpoint={run}", f"--corpus={mdc_path}", "--slice_items=8",
                       f"--out={tmp_path / 'builder'}", env=env)
    assert "first 8 items" in exported.stderr
    builder = json.loads((tmp_path / "builder" / "builder.json").read_text())
    assert builder["mdc_test_slice"]["items"] == 8 and set(builder["test_micro_overall"]) == {"mc"}
    assert not (tmp_path / "builder" / "checkpoints" / "latest").exists()
    run_cli("bapjax.predict", f"--checkpoint={tmp_path / 'builder'}", f"--items={tmp_path / 'items.jsonl'}",
            f"--out={tmp_path / 'from_builder.jsonl'}", env=env)
    assert (jsonl.read_predictions(tmp_path / "from_builder.jsonl")
            == jsonl.read_predictions(tmp_path / "predictions.jsonl"))
    evaluated = run_cli("bapjax.evaluate", f"--items={tmp_path / 'items.jsonl'}",
                        f"--predictions={tmp_path / 'predictions.jsonl'}", "--format=json", env=env)
    report = json.loads(evaluated.stdout.strip().splitlines()[-1])
    expected = json.loads((run / "final_eval.json").read_text())["mc_test"]
    assert expected == json.loads(json.dumps(final["mc_test"]))
    for key in ("counts", "micro", "macro", "strict_micro"):
        assert report[key] == expected[key], key
    # --limit with --evaluate: the scores are marked partial, as evaluate --limit marks them
    partial = run_cli("bapjax.predict", f"--checkpoint={run}", f"--items={tmp_path / 'items.jsonl'}", "--limit=3",
                      f"--out={tmp_path / 'first3.jsonl'}", "--evaluate", env=env)
    lines = partial.stdout.strip().splitlines()
    assert lines[-2] == "partial: the first 3 of 8 items (--limit)"
    assert json.loads(lines[-1])["limit"] == {"first": 3, "of": 8}
    refused = subprocess.run([sys.executable, "-m", "bapjax.predict", f"--checkpoint={run}", "--stop_rule=length",
                              f"--items={tmp_path / 'items.jsonl'}", f"--out={tmp_path / 'length.jsonl'}"],
                             cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert refused.returncode == 2 and "Traceback" not in refused.stderr
    assert refused.stderr.strip().splitlines()[-1].startswith("error: ") and "length head" in refused.stderr
    # a damaged decode.json: one line naming it and the command that chooses it again
    (run / "decode.json").write_text((run / "decode.json").read_text()[:3])
    damaged = subprocess.run([sys.executable, "-m", "bapjax.predict", f"--checkpoint={run}",
                              f"--items={tmp_path / 'items.jsonl'}", f"--out={tmp_path / 'damaged.jsonl'}"],
                             cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert damaged.returncode == 2 and damaged.stderr.strip().splitlines()[-1].startswith(
        f"error: {run / 'decode.json'}: damaged (not valid JSON: ")
    assert "--redo_final_eval` chooses it again" in damaged.stderr and not (tmp_path / "damaged.jsonl").exists()
    # the way back: what `python -m bapjax.train ... --redo_final_eval` runs chooses it again
    loop.train_and_evaluate(tiny_run_config(mdc_path), run)
    assert json.loads((run / "decode.json").read_text())["stop_rule"] == decode_json["stop_rule"]


@pytest.mark.slow  # a second whole training run (the once model), ~3 min: -m slow
def test_a_once_encoding_run_predicts_reports_and_is_analysed(tmp_path, mdc_path, mdc_corpus, monkeypatch):
    """A tiny run of world_encoding "once" with every CPU model option (the Builder's frame, the
    length head and its STOP rule, cells reading the text, the instruction's colors) through the user's tools: `python -m
    bapjax.predict` (predictions in world coordinates, equal to the run's own), the long-lived
    decoder `bapjax.play` uses, the report of its checkpoint, and bapjax/analysis/error_analysis.py;
    then the same with a decode.json that keeps a rule per kind of board (`eval.vote_samples`), which
    decodes as the run alone in an ensemble of one member does."""
    from bapjax.analysis import error_analysis
    from bapjax.decoding import mbr, on_val
    from bapjax.decoding.settings import rules_from_json
    from bapjax.evaluation import evaluator
    from bapjax.pages import report_page
    from bapjax.training import loop, run_eval
    from configs import common

    monkeypatch.setenv("BAPJAX_CACHE", str(tmp_path / "cache"))
    config = tiny_config("unused")
    config.data.sources.mc.corpus = str(mdc_path)
    once = common.cpu_frame_model()
    once.text, once.world.features, once.world.layers = config.model.text, 8, 1
    once.decoder, once.heads, once.world.step_chunk = config.model.decoder, config.model.heads, 4
    config.model = once
    config.features.builder_frame = True
    config.train.update(dict(max_steps=2, eval_every_steps=2))
    config.eval.update(dict(stop_thresholds=(0.5,), length_quantiles=(0.5,), final_splits=("mc:test",),
                            max_actions=4, vote_samples=3))
    run = tmp_path / "run"
    loop.train_and_evaluate(config, run)
    assert json.loads((run / "config.json").read_text())["model"]["name"] == "once"
    candidates = json.loads((run / "decode.json").read_text())["candidates"]
    votes = [c for c in candidates if "rules" in c]
    assert [c["stop_rule"] for c in candidates[:3]] == ["argmax", "mass", "length"]
    assert len(votes) == len(candidates) - 3 == len(on_val.COSTS) + len(on_val.THRESHOLDS) + 1

    items = list(mdc_corpus.split("test"))[:8]
    jsonl.write_items(tmp_path / "items.jsonl", items)
    env = {**os.environ, "BAPJAX_CACHE": str(tmp_path / "cache")}
    for rule in ("", "--stop_rule=length"):
        run_cli("bapjax.predict", f"--checkpoint={run}", f"--items={tmp_path / 'items.jsonl'}",
                f"--out={tmp_path / 'predictions.jsonl'}", *([rule] if rule else []), env=env)
        predictions = jsonl.read_predictions(tmp_path / "predictions.jsonl")
        assert set(predictions) == {it.item_id for it in items}
        report = evaluator.evaluate_predictions(items, predictions, drop_infeasible=True)
        assert report["counts"]["dropped_infeasible_actions"] == 0  # world coordinates: feasible as written
    assert jsonl.read_predictions(run / "predictions" / "mc_test.jsonl") == run_eval.load_decoder(
        str(run)).predict(items) != {}  # bapjax.play's decoder: the run's own final predictions
    # the pair of rules chosen per board, as decode.json keeps a winning one: the run alone in an ensemble
    pair = votes[-1]
    assert pair["samples"] == 3 and pair["temperature"] == 0.8 and set(pair["rules"]) == set(mbr.BOARDS)
    run_eval.write_decode_choice(run, {**{k: pair[k] for k in ("stop_rule", "stop_threshold", "samples",
                                                                  "temperature", "rules")}, "sampler": "inverse_cdf"})
    decoder = run_eval.load_decoder(str(run))
    assert decoder.settings.rules == rules_from_json(pair["rules"]) and decoder.settings.samples == 3
    assert run_eval.load_decoder(str(run), cost=0.1).settings.rules == (("select", 0.1),) * 2  # a cost: select at it
    val = list(mdc_corpus.split("val"))[:8]
    alone = on_val.choose_combination(mbr.pool([decoder.passes(val)]), val,
                                        on_val.COSTS, on_val.THRESHOLDS)
    assert alone["micro_overall"] == pytest.approx(pair["val_overall_micro_f1"], abs=1e-12)
    voted = mbr.combine_chosen(mbr.pool([decoder.passes(items)]), pair["rules"], items)
    run_cli("bapjax.predict", f"--checkpoint={run}", f"--items={tmp_path / 'items.jsonl'}",
            f"--out={tmp_path / 'voted.jsonl'}", env=env)
    assert jsonl.read_predictions(tmp_path / "voted.jsonl") == decoder.predict(items) == voted
    page = report_page.make_report(out=str(tmp_path / "r"), checkpoint=str(run), corpus=str(mdc_path), split="val",
                              limit=8, batch_size=8)
    assert len(report_page.read_embedded_data(page.read_text(encoding="utf-8"))["items"]) == 8
    analysis = error_analysis.analyze_run(str(run), items, batch_size=8)
    assert analysis["counts"]["items"] == 8 and analysis["stop_rule"][0] in ("argmax", "mass")
