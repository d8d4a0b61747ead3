"""The builder bapjax ships (bapjax/pretrained, `--checkpoint=pretrained`): small, self-describing,
loaded without any training data, and decoding the first MDC test items to exactly the score its
builder.json records (that of its run's own final predictions of those items)."""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from bapjax.training import checkpoints
from bapjax.world import jsonl

BUILDER = Path(checkpoints.PRETRAINED_DIR)
MAX_BYTES = 10 * 1024 * 1024

# predict's main with the corpus lookup and the GloVe loader made to fail: the builder needs neither
NO_TRAINING_DATA = """
import sys
def unavailable(*args, **kwargs):
    raise SystemExit("the shipped builder asked for training data")
import bapjax.paths, bapjax.text.glove
bapjax.paths.mdc_path = bapjax.paths.shared_mdc = unavailable
bapjax.text.glove.load_glove_50d = bapjax.text.glove.load_glove_matrix = unavailable
from bapjax import cli, predict
cli.run(predict.main, predict.define_flags)
"""


def test_the_shipped_builder_is_small_and_says_what_it_is():
    files = [path for path in BUILDER.rglob("*") if path.is_file()]
    assert sum(path.stat().st_size for path in files) <= MAX_BYTES
    record = json.loads((BUILDER / "builder.json").read_text())
    assert record["command"].startswith("python -m bapjax.train --config=configs/cpu_experiment.py:cl_la,")
    assert set(record["test_micro_overall"]) == {"mc", "bs", "ss", "r"}
    assert record["decoding"]["samples"] == 64 and record["decoding"]["chosen_on"] == "mc:val"
    card = (BUILDER / "README.md").read_text()
    assert "NCSA" in card and "PDDL" in card and f"**{record['test_micro_overall']['mc']}**" in card
    # only the evaluation weights: one step, one item ("state") holding one tree ("params")
    steps = [path for path in (BUILDER / "checkpoints" / "best").iterdir() if path.name.isdigit()]
    assert [int(path.name) for path in steps] == [record["step"]]
    tree = json.loads((steps[0] / "state" / "_METADATA").read_text())["tree_metadata"]
    assert {entry["key_metadata"][0]["key"] for entry in tree.values()} == {"params"}


def test_the_name_resolves_from_any_directory_and_a_local_folder_is_a_path(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert Path(checkpoints.find_run_dir(checkpoints.PRETRAINED)) == BUILDER
    (tmp_path / "pretrained").mkdir()
    with pytest.raises(checkpoints.CheckpointError, match="no config.json"):
        checkpoints.find_run_dir("./pretrained")


def test_it_predicts_its_recorded_slice_without_training_data(tmp_path, mdc_corpus):
    record = json.loads((BUILDER / "builder.json").read_text())
    first = record["mdc_test_slice"]
    items = list(mdc_corpus.split("test"))[:first["items"]]
    assert (items[0].item_id, items[-1].item_id) == (first["first_item"], first["last_item"])
    jsonl.write_items(tmp_path / "items.jsonl", items)
    env = {**os.environ, "BAPJAX_CACHE": str(tmp_path / "cache"), "BAPJAX_MDC": str(tmp_path / "no-mdc")}
    result = subprocess.run([sys.executable, "-c", NO_TRAINING_DATA, "--checkpoint=pretrained",
                             f"--items={tmp_path / 'items.jsonl'}", "--evaluate"],
                            cwd=tmp_path, env=env, capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert round(report["micro"]["Overall"]["overall"] * 100, 4) == first["micro_overall"]
    # stdout is the tables and the JSON line; each pass's progress goes to stderr, named
    assert result.stdout.startswith("Micro F1 (%)") and "decode" not in result.stdout, result.stdout[:500]
    samples = json.loads((BUILDER / "decode.json").read_text()).get("samples", 0)
    assert re.search(rf"^decode greedy: {len(items)}/{len(items)} items", result.stderr, re.M), result.stderr
    if samples:
        assert re.search(rf"^decode {samples} draws: {len(items)}/{len(items)} items", result.stderr, re.M), result.stderr
    assert re.search(rf"^predicted {len(items)} items in \d+ s \(.* items/s, every decoding pass included\)$",
                     result.stderr, re.M), result.stderr


def test_play_serves_it_with_no_training_run(tmp_path):
    """`python -m bapjax.play --checkpoint=pretrained`'s server, asked as the page asks it: an
    instruction gets built (the builder places a red block where it is told to put one)."""
    from bapjax.pages import play_server

    server = play_server.PlayServer(checkpoints.PRETRAINED, tmp_path / "games", "test")
    game = server.handle("POST", "/api/games", {})
    pose = {"x": 0, "y": 1, "z": -7, "yaw": 0, "pitch": 30}
    answer = server.handle("POST", f"/api/games/{game['game_id']}/instruction",
                           {"version": 0, "text": "put a red block in the middle", "pose": pose})
    assert answer["predicted"] and answer["predicted"][0]["type"] == "place" and answer["predicted"][0]["color"] == "red"
    assert server.info()["step"] == json.loads((BUILDER / "builder.json").read_text())["step"]
