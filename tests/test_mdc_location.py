"""Where bapjax finds the MDC: one resolution (bapjax.paths.mdc_path) for every CLI, config and
test, and the one-line instructions when there is none (as in a fresh clone elsewhere)."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import configs
from bapjax import paths
from bapjax.corpus import load, mdc
from bapjax.data import sources
from tests.conftest import REPO


def test_the_order_value_then_env_then_shared_then_instructions(tmp_path, monkeypatch):
    monkeypatch.delenv(paths.MDC_ENV, raising=False)
    given = tmp_path / "given"
    given.mkdir()
    assert paths.mdc_path(given) == given
    assert paths.mdc_path(str(given)) == given
    env = tmp_path / "env.tar.xz"
    env.write_bytes(b"")
    monkeypatch.setenv(paths.MDC_ENV, str(env))
    assert paths.mdc_path() == env and paths.mdc_path(paths.MDC) == env and paths.mdc_path("") == env
    assert paths.mdc_path(given) == given  # a flag or config value wins over the environment
    assert paths.resolve_path(paths.MDC) == env
    monkeypatch.setenv(paths.MDC_ENV, str(tmp_path / "absent"))
    with pytest.raises(paths.MdcNotFoundError, match=r"\$BAPJAX_MDC=.*absent: no such file or folder"):
        paths.mdc_path()
    monkeypatch.delenv(paths.MDC_ENV)
    monkeypatch.setattr(paths, "REPO_ROOT", tmp_path / "clone")  # a repository at tmp_path/clone
    shared = tmp_path / "shared" / "mdc"
    shared.mkdir(parents=True)
    assert paths.mdc_path() == paths.shared_mdc() == shared
    shared.rmdir()
    with pytest.raises(paths.MdcNotFoundError) as err:
        paths.mdc_path()
    message = str(err.value)
    assert "\n" not in message and str(tmp_path / "shared" / "mdc") in message
    for needed in ("$BAPJAX_MDC is unset", "python -m bapjax.corpus.mdc fetch --out DIR", paths.MDC_REPOSITORY,
                   "export BAPJAX_MDC=DIR", "--corpus DIR"):
        assert needed in message, needed


def test_configs_and_sources_use_the_resolution(mdc_path, mdc_corpus, monkeypatch):
    """The configs name the MDC as "@mdc", resolved when the data is loaded."""
    config = configs.load("cpu")
    assert config.data.sources.mc.corpus == paths.MDC
    monkeypatch.setenv(paths.MDC_ENV, str(mdc_path))
    val = [i.item_id for i in load.load_split(paths.MDC, "val")]
    assert val == [i.item_id for i in mdc_corpus.split("val")]
    assert mdc.resolve_corpus(paths.MDC) == mdc.resolve_corpus(mdc_path)
    split = sources.load_source("mc", {"corpus": paths.MDC, "splits": ("test",)})
    assert len(split["test"]) == 1616 and split["train"] == []
    monkeypatch.setenv(paths.MDC_ENV, "/nonexistent/mdc")
    with pytest.raises(paths.MdcNotFoundError, match="BAPJAX_MDC=/nonexistent/mdc"):
        sources.load_source("mc", {"corpus": paths.MDC})


def _fresh_clone(tmp_path: Path) -> Path:
    """bapjax and configs copied where no ../shared is beside them (as a clone elsewhere)."""
    clone = tmp_path / "elsewhere" / "bapjax-clone"
    for part in ("bapjax", "configs"):
        shutil.copytree(REPO / part, clone / part, ignore=shutil.ignore_patterns("__pycache__"))
    return clone


def test_a_fresh_clone_elsewhere_says_how_to_get_the_corpus(mdc_path, tmp_path):
    clone = _fresh_clone(tmp_path)
    env = {k: v for k, v in os.environ.items() if k != paths.MDC_ENV}
    env["PYTHONPATH"] = str(clone)
    command = [sys.executable, "-m", "bapjax.corpus.mdc", "stats"]
    done = subprocess.run(command, cwd=clone, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 2 and done.stdout == "", done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: no Minecraft Dialogue Corpus"), done.stderr
    assert str(clone.parent / "shared" / "mdc") in lines[0] and "bapjax.corpus.mdc fetch" in lines[0]
    done = subprocess.run(command, cwd=clone, env={**env, paths.MDC_ENV: str(mdc_path)},
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    stats = json.loads(done.stdout.strip().splitlines()[-1])
    assert {s: stats[s]["items"] for s in ("train", "val", "test")} == {"train": 3709, "val": 1331, "test": 1616}
