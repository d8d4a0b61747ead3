"""Faults: `kill -9` at a random point of a run that simulates or augments data and trains,
then the same command again must succeed (no stuck cache entry, no orphaned worker), and a
killed corpus unpack leaves nothing that blocks the next one."""

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SMALL_RUN = [  # the quickstart config, cut to a few steps of a tiny model
    "--config.train.max_steps=3", "--config.train.batch_size=8", "--config.train.log_every_steps=1",
    "--config.eval.val_decode_items=-1", "--config.eval.stop_thresholds=()",
    "--config.model.glove=False", "--config.model.embedding_dim=8", "--config.model.text_hidden=16",
    "--config.model.world_features=8", "--config.model.world_layers=1", "--config.model.decoder_hidden=16",
    "--config.model.action_embedding=16", "--config.model.head_hidden=16", "--config.features.max_text_tokens=24",
]


def _processes_with(marker: str) -> list[int]:
    """Pids (other than ours) whose environment holds `marker` (a run's unique cache path)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            if marker.encode() in (entry / "environ").read_bytes():
                found.append(int(entry.name))
        except OSError:
            continue
    return found


def _kill_at_random_point(command, env, low, high, seed):
    delay = random.Random(seed).uniform(low, high)
    proc = subprocess.Popen(command, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            start_new_session=True)
    time.sleep(delay)
    proc.send_signal(signal.SIGKILL)  # the process only: its workers must not outlive it
    proc.communicate()
    return delay


@pytest.mark.slow
@pytest.mark.parametrize("seed", [0, 1])
def test_kill_during_generation_or_training_then_rerun_succeeds(tmp_path, seed):
    cache = str(tmp_path / "cache")
    env = dict(os.environ, BAPJAX_CACHE=cache)
    command = [sys.executable, "-m", "bapjax.train", "--config=configs/quickstart.py",
               f"--workdir={tmp_path / 'run'}", *SMALL_RUN]
    for name in ("bs", "ss", "r"):
        command += [f"--config.data.sources.{name}.generate.train_items=120",
                    f"--config.data.sources.{name}.generate.processes=2"]
    _kill_at_random_point(command, env, 2.0, 12.0, seed)
    deadline = time.time() + 20
    while _processes_with(cache) and time.time() < deadline:
        time.sleep(0.5)
    assert not _processes_with(cache), "worker processes outlived the killed run"
    done = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    for name in ("bs", "ss", "r"):
        entries = list((tmp_path / "cache" / "generated").glob(f"{name}-seed1-*"))
        assert len(entries) == 1 and (entries[0] / ".bapjax-complete").exists()


@pytest.mark.slow
def test_kill_during_augmentation_then_rerun_succeeds(tmp_path):
    cache = str(tmp_path / "cache")
    env = dict(os.environ, BAPJAX_CACHE=cache)
    command = [sys.executable, "-m", "bapjax.train", "--config=configs/cpu.py", f"--workdir={tmp_path / 'run'}",
               *SMALL_RUN, "--config.data.sources.mc.max_val_items=16", "--config.eval.final_splits=()"]
    _kill_at_random_point(command, env, 8.0, 20.0, 0)
    deadline = time.time() + 20
    while _processes_with(cache) and time.time() < deadline:
        time.sleep(0.5)
    assert not _processes_with(cache), "augmentation workers outlived the killed run"
    done = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=1200)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    entries = list((tmp_path / "cache" / "augmented").glob("mc-seed0-*"))
    assert len(entries) == 1 and (entries[0] / ".bapjax-complete").exists()


def test_a_killed_unpack_leaves_nothing_that_blocks_the_next(mdc_path, tmp_path, monkeypatch):
    """Staging folders of an unpack that was killed are removed by the next unpack."""
    from bapjax.corpus import mdc

    monkeypatch.setenv("BAPJAX_CACHE", str(tmp_path / "cache"))
    archive = Path(mdc_path) if Path(mdc_path).is_file() else sorted(Path(mdc_path).glob("*.tar.xz"))[0]
    target_name = f"corpus-{mdc.file_sha256(archive)[:16]}"
    stale = tmp_path / "cache" / f".unpack-{target_name}-dead"
    (stale / "data").mkdir(parents=True)
    root = mdc.resolve_corpus(mdc_path)
    assert root.name == target_name and (root / "data" / "logs" / "splits.json").exists()
    assert not stale.exists()
