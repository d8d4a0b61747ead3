"""The analysis tools without tests of their own: the STOP statistics of `bapjax.analysis.stop_rule`
on a tiny model, the language measures of `bapjax.analysis.sim_language_stats` on hand-made and
real items, the table and argument checks of `bapjax.analysis.mbr_sweep`, `compare_training`'s rule for
tables of different rows, and (slow) `bapjax.analysis.compare_training` of HEAD against its own tree."""

import json
import subprocess
import sys
from pathlib import Path

import jax
import numpy as np
import pytest

from bapjax.analysis import sim_language_stats, stop_rule
from bapjax.data import input_pipeline
from bapjax.models import builder
from bapjax.text.vocab import Vocabulary
from bapjax.world.grid import PLACE, Action, Block
from bapjax.world.items import BapItem, BuilderPose, ChatTurn
from tests.test_models import flat_model

REPO = Path(__file__).resolve().parents[1]
TINY = dict(embedding_dim=8, text_hidden=16, world_features=8, world_layers=1, action_embedding=16,
            decoder_hidden=16, head_hidden=16)


@pytest.mark.parametrize("stop_bias", [-1e4, 1e4])
def test_gold_path_stop_stats_count_every_gold_step(mdc_corpus, stop_bias):
    """Every gold action step and every gold STOP step is counted once; a model that never stops
    stops early nowhere, one that always stops stops early at every gold action."""
    items = mdc_corpus.split("val")[:12]
    vocab = Vocabulary.build(items)
    fc = input_pipeline.FeatureConfig(max_text_tokens=24, max_actions=4, recent_window=4)
    model = flat_model(vocab_size=vocab.size, **TINY)
    params = builder.init_params(model, jax.random.PRNGKey(0))
    params["stop_out"]["bias"] = params["stop_out"]["bias"] + stop_bias
    stats = stop_rule.gold_path_stop_stats(model, params, items, vocab, fc, batch_size=8)
    # a reference longer than max_actions fills all max_actions + 1 slots with actions (cut, no STOP)
    assert stats["gold_action_steps"] == sum(min(len(it.reference_actions), fc.num_action_slots) for it in items)
    assert stats["gold_stop_steps"] == sum(len(it.reference_actions) <= fc.max_actions for it in items)
    early = stats["gold_action_steps"] if stop_bias > 0 else 0
    assert stats["argmax_stops_early"] == stats["mass_stops_early"] == early
    at_stop = stats["gold_stop_steps"] if stop_bias > 0 else 0
    assert stats["argmax_stops_at_gold_stop"] == stats["mass_stops_at_gold_stop"] == at_stop


def _item(k, chat, yaw):
    return BapItem(item_id=f"g:{k}", game_id="g", target_id="C1", split="train", history=tuple(chat),
                   prev_structure=(Block(0, 1, 0, 1),), reference_actions=(Action(PLACE, 2, 1, 1, 0),),
                   next_structure=(), builder_pose=BuilderPose(0.0, 1.0, -5.0, yaw, 0.0))


def test_language_measures_on_hand_made_items():
    first = [ChatTurn("Architect", "Mission has started."), ChatTurn("Architect", "put a red block")]
    items = [_item(1, first, 0.0), _item(2, [*first, ChatTurn("Builder", "done"),
                                             ChatTurn("Architect", "now a blue block")], 40.0)]
    stats = sim_language_stats.measure(items)
    assert stats["games"] == 1 and stats["items"] == 2
    assert stats["_types"] == {"put", "a", "red", "block", "done", "now", "blue"}
    assert stats["builder_word_types"] == 1 and stats["lines_per_game"] == 3.0
    assert stats["mean_architect_line_words"] == 4.0
    assert stats["yaw_off_axis_over_30_share"] == 0.5  # yaw 40 is 40 degrees off its nearest axis


def test_language_measures_on_real_items(mdc_corpus):
    items = mdc_corpus.split("val")
    stats = sim_language_stats.measure(items)
    assert stats["games"] == len({it.game_id for it in items}) and stats["items"] == len(items)
    assert 0 < stats["builder_word_types"] <= stats["word_types"]
    off = sum(abs((it.builder_pose.yaw + 45.0) % 90.0 - 45.0) > 30.0 for it in items) / len(items)
    assert stats["yaw_off_axis_over_30_share"] == round(off, 4)


@pytest.mark.slow  # ~3 min on a 2-core CPU: two tiny trainings
def test_compare_training_finds_head_identical_to_its_own_tree(tmp_path):
    """In a checkout without changes the tree is HEAD: the two trainings must agree bit for bit."""
    dirty = subprocess.run(["git", "-C", str(REPO), "status", "--porcelain", "--untracked-files=no"],
                           capture_output=True, text=True)
    if dirty.returncode or dirty.stdout.strip():
        pytest.skip("not a clean git checkout")
    done = subprocess.run([sys.executable, "-m", "bapjax.analysis.compare_training", "--commit", "HEAD",
                           "--config", "cpu_experiment:mc", "--steps", "3", "--repo", str(REPO)], cwd=tmp_path, capture_output=True,
                          text=True, timeout=1200)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["bit_identical_params"] is True and result["max_param_diff"] == 0.0
    assert np.isfinite(result["current"]["micro_overall"])


def test_compare_training_compares_a_rounded_embedding_table_on_its_vocabulary_rows():
    from bapjax.analysis.compare_training import common_rows

    table = np.arange(12, dtype=np.float32).reshape(6, 2)
    rounded = np.concatenate([table, np.zeros((2, 2), np.float32)])
    for old, new in ((table, rounded), (rounded, table)):
        a, b = common_rows(old, new)
        np.testing.assert_array_equal(a, b)
    moved = rounded.copy()
    moved[-1, 0] = 1e-7  # a row past the vocabulary that trained: not the same model
    assert common_rows(table, moved) is None
    assert common_rows(table, table.T) is None and common_rows(np.float32(1), table) is None
    a, b = common_rows(table, table + 1)  # same shape: compared as they are
    assert float(np.abs(a - b).max()) == 1.0


def test_the_mbr_sweep_table_has_a_row_per_temperature_and_draws_and_a_column_per_cost():
    from bapjax.analysis import mbr_sweep

    def row(t, k, c, f1):
        return {"temperature": t, "draws": k, "cost": c, "micro_overall": f1, "strict": 0.1, "predicted_net": 10,
                "reference_net": 12}

    results = {"run-a": {"stop_rule": ["argmax", 0.5],
                         "greedy": {"micro_overall": 0.2, "strict": 0.1, "predicted_net": 8, "reference_net": 12},
                         "sampled": [row(0.5, 2, 0.1, 0.25), row(0.5, 2, 0.2, 0.3), row(0.5, 4, 0.1, 0.255),
                                     row(0.5, 4, 0.2, 0.31)]}}
    text = mbr_sweep.markdown(results, "val")
    assert "greedy 20.0 (8 / 12)" in text
    assert "| temperature | draws | cost 0.1 | cost 0.2 |" in text
    assert "| 0.5 | 2 | 25.0 (10) | 30.0 (10) |" in text and "| 0.5 | 4 | 25.5 (10) | 31.0 (10) |" in text


def test_the_mbr_sweep_refuses_more_draws_than_it_decodes(tmp_path):
    done = subprocess.run([sys.executable, "-m", "bapjax.analysis.mbr_sweep", str(tmp_path), "--samples", "8",
                           "--draws", "4,16"], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and "--draws 4,16" in done.stderr, done.stderr[-1000:]


@pytest.mark.slow  # ~1 min on a 2-core CPU: a tiny training
def test_decode_noise_set_0_is_the_runs_own_decoding_and_the_sets_differ_only_by_their_draws(tmp_path, mdc_path,
                                                                                          monkeypatch):
    from bapjax.analysis import decode_noise
    from bapjax.corpus import mdc
    from bapjax.training import loop, mbr, run_eval
    from tests.test_end_to_end import tiny_run_config

    monkeypatch.setenv("BAPJAX_CACHE", str(tmp_path / "cache"))
    run = tmp_path / "run"
    loop.train_and_evaluate(tiny_run_config(mdc_path), run)
    items = list(mdc.load_corpus(mdc_path).split("test"))[:8]
    decoder = run_eval.RunDecoder.load(str(run), samples=3, temperature=5.0)  # hot draws: the sets differ
    sets = decode_noise.draw_sets(decoder, items, sets=2)
    assert sets[0] == decoder.predict(items)  # set 0: draws 0..2, as the run decodes with 3 draws
    assert sets[1] == mbr.select([decoder.predict_items(items)] + [
        decoder.predict_items(items, sample=k) for k in (3, 4, 5)], decoder.settings.cost)
    out = tmp_path / "noise"
    code = decode_noise.main([str(run), "--sets", "2", "--samples", "2", "--corpus", str(mdc_path), "--limit", "8",
                              "--bootstrap", "50", "--out", str(out)])
    record = json.loads(out.with_suffix(".json").read_text())
    result = record["runs"]["run"]
    assert code == 0 and len(result["sets"]) == 2 and result["samples"] == 2
    assert set(result["spread"]) == {"seed_sd", "interaction_sd", "model_sd"}
    assert out.with_suffix(".md").read_text().startswith(f"`{record['command']}`")
    with pytest.raises(SystemExit) as exit_status:
        decode_noise.main([str(run), "--sets", "1"])
    assert exit_status.value.code == 2
