"""Where a command writes is checked before it does any work: an output it cannot create or write
(here: a path under a regular file, which no one can create, root included) is one line on
stderr naming the flag, the path and why, exit status 2, and nothing is written. The inputs the
commands are given here do not exist, so a check that came after reading them would fail
differently."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from bapjax import paths

REPO = Path(__file__).resolve().parents[1]

# (command and arguments, the flag named): {bad} is a path under a regular file, {tmp} a folder.
COMMANDS = [
    ("bapjax.predictors empty --items {tmp}/none.jsonl --out {bad}/p.jsonl", "--out"),
    ("bapjax.sim.generate --dataset bs --out {bad}/g", "--out"),
    ("bapjax.llm export --format nebula --items {tmp}/none.jsonl --out {bad}/p.jsonl", "--out"),
    ("bapjax.llm score --format nebula --items {tmp}/none.jsonl --responses {tmp}/none.jsonl --out {bad}/p.jsonl",
     "--out"),
    ("bapjax.evaluate --items {tmp}/none.jsonl --predictions {tmp}/none.jsonl --per_item {bad}/p.jsonl",
     "--per_item"),
    ("bapjax.corpus.mdc fetch --out {bad}/mdc --url file://{tmp}/none.tar.xz", "--out"),
    ("bapjax.corpus.mdc export --corpus {tmp}/none --split test --out {bad}/i.jsonl", "--out"),
    ("bapjax.corpus.v2_clean template --items {tmp}/none.jsonl --out {bad}/t.jsonl", "--out"),
    ("bapjax.corpus.augment --corpus {tmp}/none --out {bad}/a", "--out"),
    ("bapjax.train --config=quickstart --workdir {bad}/run", "--workdir"),
    ("bapjax.predict --checkpoint {tmp}/none --items {tmp}/none.jsonl --out {bad}/p.jsonl", "--out"),
    ("bapjax.report --predictions {tmp}/none.jsonl --items {tmp}/none.jsonl --out {bad}/r", "--out"),
    ("bapjax.play --checkpoint {tmp}/none --port 0 --out {bad}/games", "--out"),
    ("bapjax.ensemble --runs {tmp}/none,{tmp}/none2 --out {bad}/e", "--out"),
    ("bapjax.distil --runs {tmp}/none,{tmp}/none2 --out {bad}/t", "--out"),
    ("bapjax.viz sample --out {bad}/s.png", "--out"),
    ("bapjax.viz sim-items --out {bad}/pictures", "--out"),
    ("bapjax.build --mdc {tmp}/none --out {bad}/store", "--out"),
    ("bapjax.build --mdc {tmp}/none --work_dir {bad}/work --out {tmp}/store", "--work_dir"),
    ("bapjax.analysis.error_analysis {tmp}/none --corpus {tmp}/none --out {bad}/errors", "--out"),
    ("bapjax.analysis.collect_experiment {tmp}/run --out {bad}/results", "--out"),
    ("bapjax.analysis.selection --chosen {tmp}/none --against {tmp}/none --out {bad}/selection", "--out"),
]


def run_command(line: str, tmp: Path, **env) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", *line.format(bad=tmp / "afile", tmp=tmp).split()], cwd=tmp,
                          capture_output=True, text=True, timeout=300,
                          env={**os.environ, "BAPJAX_CACHE": str(tmp / "cache"), **env})


def command_id(line: str, flag: str) -> str:
    words = [w for w in line.split()[:2] if not w.startswith(("-", "{"))]
    return " ".join(words) + " " + flag


@pytest.mark.parametrize("line, flag", COMMANDS, ids=[command_id(*c) for c in COMMANDS])
def test_an_output_under_a_file_is_one_line_before_any_work(line, flag, tmp_path):
    (tmp_path / "afile").write_text("a file where a folder must be\n")
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "runs.jsonl").write_text("")  # collect_experiment checks its runs first
    before = sorted(p.name for p in tmp_path.iterdir())
    done = run_command(line, tmp_path)
    afile = tmp_path / "afile"
    assert done.returncode == 2, done.stderr[-2000:]
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr, done.stderr
    assert done.stderr.startswith(f"error: {flag} {afile}/")
    assert f"({afile} is a file, not a folder)" in done.stderr or f"cannot write in {afile} (a file, not a folder)" \
        in done.stderr, done.stderr
    assert sorted(p.name for p in tmp_path.iterdir() if p.name != "cache") == [n for n in before if n != "cache"]
    if "--work_dir" in line:
        assert not (tmp_path / "store").exists()  # the other outputs are made only after every check


def test_build_refuses_an_existing_store_before_any_work(tmp_path):
    (tmp_path / "store").mkdir()
    (tmp_path / "store" / "manifest.json").write_text("{}")
    done = run_command("bapjax.build --mdc {tmp}/none --out {tmp}/store", tmp_path)
    assert (done.returncode, done.stderr) == (
        2, f"error: {tmp_path}/store holds a store (manifest.json); --overwrite replaces it\n")


@pytest.mark.parametrize("line", ["bapjax.train --config=quickstart --workdir {tmp}/run",
                                  "bapjax.evaluate --corpus {tmp}/corpus.tar.xz --split test --predictions {tmp}/p.jsonl"])
def test_a_cache_that_cannot_be_written_is_one_line(line, tmp_path):
    """A command that must write the cache (training's features; an archive unpacked) names it
    and $BAPJAX_CACHE before any work."""
    (tmp_path / "afile").write_text("")
    (tmp_path / "corpus.tar.xz").write_bytes(b"not read")
    done = run_command(line, tmp_path, BAPJAX_CACHE=str(tmp_path / "afile" / "cache"))
    assert (done.returncode, done.stderr) == (
        2, f"error: the cache ($BAPJAX_CACHE) {tmp_path}/afile/cache: cannot write there "
           f"({tmp_path}/afile is a file, not a folder)\n")
    assert not (tmp_path / "run").exists()


def test_check_writable_dir_makes_the_folder_or_says_why(tmp_path):
    made = paths.check_writable_dir(tmp_path / "a" / "b", "--out")
    assert made.is_dir() and list(made.iterdir()) == []  # the probe is gone
    (tmp_path / "f").write_text("")
    with pytest.raises(paths.UnwritableError, match=rf"^--out {tmp_path}/f: cannot write there \(a file, not a folder\)$"):
        paths.check_writable_dir(tmp_path / "f", "--out")
    with pytest.raises(paths.UnwritableError, match=rf"^--out {tmp_path}/f/x/y: cannot write there "
                                                    rf"\({tmp_path}/f is a file, not a folder\)$"):
        paths.check_writable_dir(tmp_path / "f" / "x" / "y", "--out")


def test_check_writable_dir_removes_the_folders_it_made_when_the_probe_fails(tmp_path, monkeypatch):
    import errno
    import tempfile

    def full(**_):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(tempfile, "mkstemp", full)
    with pytest.raises(paths.UnwritableError, match=r"cannot write there \(No space left on device\)$"):
        paths.check_writable_dir(tmp_path / "new" / "deeper", "--out")
    assert list(tmp_path.iterdir()) == []


def test_check_output_file(tmp_path):
    paths.check_output_file(tmp_path / "p.jsonl", "--out")
    for passing in (None, "", "-", "gs://bucket/p.jsonl"):
        paths.check_output_file(passing, "--out")
    assert list(tmp_path.iterdir()) == []
    with pytest.raises(paths.UnwritableError, match=rf"^--out {tmp_path}: a folder, not a file$"):
        paths.check_output_file(tmp_path, "--out")
    paths.check_output_file(tmp_path / "made" / "deeper" / "p.png", "--out")  # a missing folder is made, as --workdir is
    assert (tmp_path / "made" / "deeper").is_dir()
    (tmp_path / "f").write_text("")
    with pytest.raises(paths.UnwritableError, match=rf"^--out {tmp_path}/f/x/p.jsonl: cannot write in {tmp_path}/f/x "
                                                    rf"\({tmp_path}/f is a file, not a folder\)$"):
        paths.check_output_file(tmp_path / "f" / "x" / "p.jsonl", "--out")
