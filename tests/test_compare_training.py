"""bapjax.analysis.compare_training: its rule for embedding tables of different rows, and (slow) HEAD
trained against its own tree."""

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[1]


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
