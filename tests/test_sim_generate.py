"""generate_corpus / the CLI: determinism across process counts, exact sizes, statistics."""

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from bapjax.corpus import mdc
from bapjax.sim import generate
from bapjax.world.items import SPLITS, TABLE3


def tree_digest(root: Path) -> dict:
    """{relative path: sha256} of every file under root/data except the metadata file."""
    out = {}
    for path in sorted((root / "data").rglob("*")):
        if path.is_file():
            out[str(path.relative_to(root))] = hashlib.sha256(path.read_bytes()).hexdigest()
    return out


@pytest.mark.parametrize("dataset", ["r", "bs", "ss"])
def test_same_seed_same_corpus_for_any_process_count(dataset, tmp_path):
    sizes = dict(train_items=57, val_items=13, test_items=11)
    one = generate.generate_corpus(dataset, tmp_path / "one", seed=3, processes=1, progress=False, **sizes)
    two = generate.generate_corpus(dataset, tmp_path / "two", seed=3, processes=2, progress=False, **sizes)
    digest_one, digest_two = tree_digest(tmp_path / "one"), tree_digest(tmp_path / "two")
    assert digest_one == digest_two
    assert one["splits"] == two["splits"]
    other = generate.generate_corpus(dataset, tmp_path / "other", seed=4, processes=2, progress=False, **sizes)
    assert tree_digest(tmp_path / "other") != digest_one
    assert other["splits"]["train"]["items"] == 57


def test_statistics_and_truncation(tmp_path):
    stats = generate.generate_corpus("r", tmp_path, seed=0, train_items=101, val_items=1, test_items=0,
                                     processes=1, progress=False)
    assert stats["splits"]["train"]["items"] == 101
    assert stats["splits"]["val"] == {"items": 1, "games": 1, "mean_actions": stats["splits"]["val"]["mean_actions"],
                                      "empty_board_share": 1.0, "truncated_games": 1}
    assert stats["splits"]["test"]["items"] == 0
    corpus = mdc.load_corpus(tmp_path, use_cache=False)
    assert len(corpus.split("train")) == 101 and len(corpus.split("val")) == 1
    eb = sum(i.is_empty_board for i in corpus.split("train"))
    assert stats["splits"]["train"]["empty_board_share"] == round(eb / 101, 4)
    mean = sum(len(i.reference_actions) for i in corpus.split("train")) / 101
    assert abs(stats["splits"]["train"]["mean_actions"] - mean) < 1e-3
    assert set(stats["relation_types"]) <= {"1D", "2D", "3D", "none"}
    assert sum(stats["relation_types"].values()) == 102
    assert stats["vocabulary_size"] > 50
    with pytest.raises(FileExistsError):
        generate.generate_corpus("r", tmp_path, seed=0, train_items=1, val_items=0, test_items=0, progress=False)
    with pytest.raises(ValueError):
        generate.generate_corpus("x", tmp_path / "x", seed=0)


def test_cli_prints_statistics_last_line_json(tmp_path):
    out = tmp_path / "ss"
    result = subprocess.run(
        [sys.executable, "-m", "bapjax.sim.generate", "--dataset", "ss", "--out", str(out), "--seed", "5",
         "--train_items", "40", "--val_items", "6", "--test_items", "6", "--processes", "2"],
        capture_output=True, text=True, timeout=300, env=dict(os.environ, BAPJAX_CACHE=str(tmp_path / "c")))
    assert result.returncode == 0, result.stderr
    lines = result.stdout.strip().splitlines()
    stats = json.loads(lines[-1])
    assert stats["dataset"] == "ss" and stats["items"] == 52
    assert set(stats["shape_types"]) <= {"row", "diagonal", "plane"}
    assert "vocabulary size" in result.stdout
    progress = [line for line in result.stderr.splitlines() if line.startswith("generate ss: ")]
    assert "items/s" in result.stderr and progress[-1].startswith("generate ss: 52/52 items in ")
    assert "next line" not in progress[-1]
    assert json.loads((out / "data" / "dataset.json").read_text())["name"] == "ss"


def test_cli_refuses_bad_values_and_foreign_folders_before_writing(tmp_path):
    """Out-of-range flags and --overwrite of a corpus bapjax did not write: one line, exit 2,
    nothing written or deleted; a generated corpus (owner marker) can be overwritten."""
    def cli(*args):
        return subprocess.run([sys.executable, "-m", "bapjax.sim.generate", "--dataset", "r", *args],
                              capture_output=True, text=True, timeout=300,
                              env=dict(os.environ, BAPJAX_CACHE=str(tmp_path / "c")))

    for args, flag in ((("--processes", "-2"), "--processes"), (("--seed", "-1"), "--seed"),
                       (("--train_items", "-3"), "--train_items")):
        result = cli("--out", str(tmp_path / "new"), *args)
        assert result.returncode == 2 and flag in result.stderr, result.stderr
        assert len(result.stderr.strip().splitlines()) == 1
        assert not (tmp_path / "new").exists()
    foreign = tmp_path / "copy_of_mdc"
    (foreign / "data" / "logs").mkdir(parents=True)
    (foreign / "data" / "logs" / "splits.json").write_text("{}")
    result = cli("--out", str(foreign), "--overwrite", "--train_items", "2", "--val_items", "0", "--test_items", "0")
    assert result.returncode == 2 and "refusing to replace" in result.stderr, result.stderr
    assert (foreign / "data" / "logs" / "splits.json").read_text() == "{}"
    ours = tmp_path / "ours"
    for _ in range(2):
        result = cli("--out", str(ours), "--overwrite", "--train_items", "2", "--val_items", "0",
                     "--test_items", "0", "--progress=false")
        assert result.returncode == 0, result.stderr
    assert json.loads((ours / "data" / "dataset.json").read_text())["requested_items"]["train"] == 2
    result = cli("--out", str(ours), "--train_items", "2", "--val_items", "0", "--test_items", "0")
    assert (result.returncode, result.stderr) == (2, f"error: {ours / 'data'} exists; --overwrite replaces it\n")


@pytest.mark.slow
@pytest.mark.parametrize("dataset", ["r", "bs", "ss"])
def test_full_size_generation(dataset, tmp_path):
    """Table 3 sizes: exact counts through the reader, and every item grounded and feasible."""
    from tests import test_sim_dialogs as checks

    stats = generate.generate_corpus(dataset, tmp_path, seed=0, progress=False)
    corpus = mdc.load_corpus(tmp_path, use_cache=False)
    for split, n in zip(SPLITS, TABLE3[dataset]):
        assert stats["splits"][split]["items"] == n
        assert len(corpus.split(split)) == n
    # every item of the full corpus through the same checks as the small ones
    generated = (dataset, tmp_path, stats, corpus)
    checks.test_every_instruction_is_grounded(generated)
    checks.test_games_feasible_end_at_target_and_poses_recorded(generated)
    checks.test_splits_disjoint_by_target(generated)
