"""bapjax.analysis.compare_decoding without trained runs: its flag mistakes (one line, exit 2), the sha256
comparison of prediction files (plain and gzip), the table and the JSON line."""

import gzip
import json
import subprocess
import sys
from pathlib import Path

import pytest

from bapjax.analysis import compare_decoding as cd

REPO = Path(__file__).resolve().parents[1]


def lines(*records) -> bytes:
    return b"".join(json.dumps(record).encode() + b"\n" for record in records)


A = {"item_id": "a", "actions": [{"type": "place", "color": "red", "x": 1, "y": 2, "z": 3}]}
B = {"item_id": "b", "actions": []}


def test_identical_files_and_their_gzip_twins_compare_equal(tmp_path):
    plain, packed = tmp_path / "p.jsonl", tmp_path / "q.jsonl.gz"
    plain.write_bytes(lines(A, B))
    packed.write_bytes(gzip.compress(lines(A, B), mtime=1))  # the gzip header differs, the predictions not
    row = cd.compare("ensemble", 4, plain, packed)
    assert row["identical"] and row["old_sha256"] == row["new_sha256"] and row["predictions"] == 2
    assert "difference" not in row


def test_a_difference_names_its_lines_and_first_item(tmp_path):
    old, new = tmp_path / "old.jsonl", tmp_path / "new.jsonl"
    old.write_bytes(lines(A, B, A))
    new.write_bytes(lines(A, {"item_id": "b", "actions": [{"type": "place", "color": "blue", "x": 0, "y": 1, "z": 0}]}))
    row = cd.compare("argmax", 1, old, new)
    assert not row["identical"]
    assert row["difference"] == {"lines_differ": 2, "old_lines": 3, "new_lines": 2, "first_line": 2,
                                 "first_item": "b"}
    assert cd.differences([row]) == ["differs: argmax on 1 device(s): 2 line(s) of 3 (old) / 2 (new), "
                                     "first line 2 (item b)"]


def test_table_and_json(tmp_path):
    same = {"mode": "mass", "devices": 1, "old_sha256": "0123456789abcdef", "new_sha256": "0123456789abcdef",
            "identical": True}
    other = {**same, "devices": 4, "new_sha256": "fedcba9876543210", "identical": False}
    assert cd.table([same, other]).splitlines() == [
        "| mode | devices | old sha256[:12] | new sha256[:12] | identical |", "|---|---|---|---|---|",
        "| mass | 1 | 0123456789ab | 0123456789ab | yes |", "| mass | 4 | 0123456789ab | fedcba987654 | NO |"]
    assert cd.summary("68e43b4", [same]) == {"commit": "68e43b4", "identical": True, "rows": [same]}
    assert json.loads(json.dumps(cd.summary("68e43b4", [same, other])))["identical"] is False


def test_the_plan_decodes_the_first_run_own_decoding_of_each_and_the_pair(tmp_path):
    runs = [tmp_path / "r0", tmp_path / "r1"]
    rows = cd.plan(list(cd.MODES), runs, "@mdc", 50)
    assert [name for name, *_ in rows] == ["argmax", "mass", "length", "select", "own r0", "own r1", "ensemble"]
    assert len({file for *_, file in rows}) == len(rows)
    name, module, flags, _ = rows[-1]
    assert module == "bapjax.ensemble" and flags[:2] == ["--runs", f"{runs[0]},{runs[1]}"] and "--noval" in flags
    assert all("--limit" in flags and "50" in flags for _, _, flags, _ in rows)


def test_a_child_gets_the_device_count_asked(tmp_path, monkeypatch):
    monkeypatch.setenv("XLA_FLAGS", "--xla_force_host_platform_device_count=8 --xla_cpu_foo=1")
    env = cd.child_env(tmp_path, 4)
    assert env["JAX_NUM_CPU_DEVICES"] == "4" and env["JAX_PLATFORMS"] == "cpu" and env["PYTHONPATH"] == str(tmp_path)
    assert env["XLA_FLAGS"] == "--xla_cpu_foo=1"


def test_a_run_that_fixes_its_cpu_devices_is_refused_on_another_count(tmp_path):
    run = tmp_path / "run"
    (run / "checkpoints" / "latest").mkdir(parents=True)
    (run / "config.json").write_text(json.dumps({"cpu_devices": 4, "model": {"name": "once"}}))
    cd.check_runs([run / "checkpoints" / "latest"], ["argmax"], [4])
    with pytest.raises(cd.Mistake, match="config.cpu_devices is 4.*--devices 1 cannot"):
        cd.check_runs([run], ["argmax"], [1, 4])
    with pytest.raises(cd.Mistake, match="no length head"):
        cd.check_runs([run], ["length"], [4])


@pytest.mark.parametrize("args, message", [
    (["--runs", "x"], "error: the following arguments are required: --commit"),
    (["--commit", "HEAD", "--runs", "x", "--bogus"], "error: unrecognized arguments: --bogus"),
    (["--commit", "HEAD", "--runs", "{tmp}/none"], "error: --runs {tmp}/none: no such run (not a file or folder)"),
    (["--commit", "no-such-commit-xyz", "--runs", "{tmp}"], "error: --commit no-such-commit-xyz: no such commit in"),
    (["--commit", "HEAD", "--runs", "{tmp}", "--modes", "greedy"], "error: --modes: unknown greedy"),
    (["--commit", "HEAD", "--runs", "{tmp}", "--modes", "ensemble"], "error: --modes ensemble needs two runs"),
    (["--commit", "HEAD", "--runs", "{tmp}", "--devices", "1,0"], "error: --devices 1,0: '0' is not a device count"),
    (["--commit", "HEAD", "--runs", "{tmp}", "--limit", "-1"], "error: --limit is -1"),
])
def test_mistakes_are_one_line_and_exit_2(tmp_path, args, message):
    args = [arg.replace("{tmp}", str(tmp_path)) for arg in args]
    done = subprocess.run([sys.executable, "-m", "bapjax.analysis.compare_decoding", *args, "--repo", str(REPO)],
                          cwd=REPO, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and done.stdout == ""
    assert len(done.stderr.splitlines()) == 1 and done.stderr.startswith(message.replace("{tmp}", str(tmp_path)))
