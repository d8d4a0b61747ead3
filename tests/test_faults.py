"""Faults: `kill -9` at a random point of a run that simulates or augments data and trains,
then the same command again must succeed (no stuck cache entry, no orphaned worker), and a
killed corpus unpack leaves nothing that blocks the next one. SIGTERM/SIGINT during training
saves that step and exits 75, on one process and agreed by two (`bapjax.training.preemption`). Damaged
cache entries (a file cut in half, a rewrite, a file that does not parse) are moved aside with
one warning and rebuilt; nothing outside the cache is touched. A file-size limit (`ulimit -f`,
RLIMIT_FSIZE: Python gets EFBIG) during a cache build, a checkpoint save or a predictions write
ends with one line naming what could not be written, no partial file, and the same command
succeeds without the limit."""

import hashlib
import json
import os
import random
import re
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from bapjax import paths
from bapjax.data import sources
from bapjax.training import preemption

from .two_processes import SMALL_RUN, SMALL_SOURCES, free_port

REPO = Path(__file__).resolve().parents[1]


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
    target_name = f"corpus-{paths.file_sha256(archive)[:16]}"
    stale = tmp_path / "cache" / f".unpack-{target_name}-dead"
    (stale / "data").mkdir(parents=True)
    root = mdc.resolve_corpus(mdc_path)
    assert root.name == target_name and (root / "data" / "logs" / "splits.json").exists()
    assert not stale.exists()


# ------------------------------------------------------------------------------------------------
# Preemption: SIGTERM / SIGINT during training


def test_a_signal_is_a_stop_request_only_while_watched():
    # what the process had before (SIG_IGN for SIGINT when started in the background by a shell)
    before = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT)}
    watch = preemption.PreemptionWatch().install()
    try:
        assert not watch.should_stop(1)
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(0.05)  # Python runs the handler between bytecodes
        assert watch.should_stop(2) and watch.received == "SIGTERM"
    finally:
        watch.uninstall()
    assert {sig: signal.getsignal(sig) for sig in before} == before  # uninstall restores them


def _blocked_in_c(seconds_hint: float = 2.0) -> None:
    """A call that holds the main thread in C with the GIL released, for seconds, and is not cut
    short by a signal (as an XLA compile or a wait on dispatched steps): Python runs a signal's
    handler only after it returns."""
    hashlib.scrypt(b"bapjax", salt=b"preemption", n=2 ** 14, r=8, p=max(1, int(13 * seconds_hint)), maxmem=2 ** 26)


def test_a_signal_is_answered_at_once_even_while_the_main_thread_is_in_c(capfd):
    """The notice comes from the thread the C-level handler wakes, not from the next bytecode of
    the main thread; a second signal says the save goes on and stops nothing."""
    said = []

    def notice(name):
        said.append(time.time())
        return f"{name} received: the test's notice"

    watch = preemption.PreemptionWatch(notice).install()
    try:
        threading.Timer(0.2, os.kill, (os.getpid(), signal.SIGINT)).start()
        start = time.time()
        _blocked_in_c()
        returned = time.time()
        assert said and said[0] - start < 1.5 and returned - said[0] > 0.3, (start, said, returned)
        assert watch.should_stop(1) and watch.received == "SIGINT"
        os.kill(os.getpid(), signal.SIGINT)
        deadline = time.time() + 5
        while watch.heard < 2 and time.time() < deadline:
            time.sleep(0.02)
        assert watch.heard == 2 and watch.received == "SIGINT"
    finally:
        watch.uninstall()
    err = capfd.readouterr().err.splitlines()
    assert err[0] == "SIGINT received: the test's notice"
    assert err[1].startswith("SIGINT received again: still finishing and saving that step"), err


def test_a_third_signal_stops_at_once(tmp_path):
    script = textwrap.dedent('''
        import os, signal, time
        from bapjax.training import preemption
        watch = preemption.PreemptionWatch(lambda name: name + " received: first").install()
        for _ in range(3):
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(0.3)
        time.sleep(30)  # a save that never ends
    ''')
    done = subprocess.run([sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert done.returncode == 128 + signal.SIGINT, done.stderr[-2000:]
    lines = done.stderr.splitlines()
    assert lines[0] == "SIGINT received: first" and "again: still finishing" in lines[1], lines
    assert lines[2].startswith("SIGINT received a third time: stopping now without saving"), lines


def _wait_for_line(proc, pattern: str, lines: list, timeout: float) -> bool:
    deadline = time.time() + timeout
    while time.time() < deadline:
        line = proc.stdout.readline()
        if not line:
            return False
        lines.append(line)
        if re.search(pattern, line):
            return True
    return False


def test_a_ctrl_c_while_the_data_is_built_ends_in_one_line(tmp_path):
    """SIGINT before the training loop watches for it (here while D_bs is simulated): one line on
    stderr that says how to go on, exit 130, no traceback, no checkpoint folder."""
    env = dict(os.environ, BAPJAX_CACHE=str(tmp_path / "cache"))
    command = [sys.executable, "-m", "bapjax.train", "--config=configs/quickstart.py", f"--workdir={tmp_path / 'run'}",
               "--config.train.max_steps=2", "--config.eval.final_splits=()"]
    for source in ("bs", "ss", "r"):
        command += [f"--config.data.sources.{source}.generate.train_items=3000",
                    f"--config.data.sources.{source}.generate.processes=1"]
    # as from a terminal: SIGINT not ignored (a test process may ignore it, as pytest-xdist's workers do, and
    # a child inherits that); a handler here is reset to the default in the child
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        proc = subprocess.Popen(command, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                text=True)
    finally:
        signal.signal(signal.SIGINT, previous)
    lines = []
    assert _wait_for_line(proc, r"^generate bs: ", lines, 300), "".join(lines)[-3000:]  # its progress (stderr)
    proc.send_signal(signal.SIGINT)
    output = "".join(lines) + proc.communicate(timeout=120)[0]
    assert proc.returncode == 130, output[-3000:]
    assert "Traceback" not in output, output[-3000:]
    assert output.strip().splitlines()[-1].startswith("error: interrupted (SIGINT) before it finished; run the same "
                                                      "command again"), output[-3000:]
    assert not (tmp_path / "run" / "checkpoints").exists()


@pytest.mark.slow  # ~2-3 min on a 2-core CPU: two short training runs
@pytest.mark.parametrize("signum,reader", [(signal.SIGTERM, "alive"), (signal.SIGINT, "gone")])
def test_a_signal_saves_the_step_and_the_same_command_resumes_from_it(tmp_path, signum, reader):
    """A signal at step 7 of a small quickstart run: one line on stderr at once names the step
    that will be saved, the run saves it, says so and exits 75, and the same command resumes from
    it. With "gone", stdout's reader closes its end before the signal (`... | tee log` ended by the
    same Ctrl-C): the run's later stdout lines are dropped, and nothing else changes."""
    env = dict(os.environ, BAPJAX_CACHE=str(tmp_path / "cache"))
    name = signal.Signals(signum).name

    def command(max_steps: int) -> list[str]:
        args = [sys.executable, "-m", "bapjax.train", "--config=configs/quickstart.py", f"--workdir={tmp_path / 'run'}",
                *[a for a in SMALL_RUN if not a.startswith("--config.train.max_steps")],
                f"--config.train.max_steps={max_steps}", "--config.train.eval_every_steps=5",
                "--config.eval.final_splits=()", *SMALL_SOURCES]
        return args

    proc = subprocess.Popen(command(400), cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    errors = []  # (when read, line) of stderr
    reader_thread = threading.Thread(target=lambda: errors.extend((time.time(), line) for line in proc.stderr))
    reader_thread.start()
    lines = []
    assert _wait_for_line(proc, r"^step 7/", lines, 900), "".join(lines)[-3000:]
    if reader == "gone":
        proc.stdout.close()
        metrics, deadline = tmp_path / "run" / "metrics.jsonl", time.time() + 300
        # a train row of step 9 follows step 8's progress line: the run has written on the closed pipe
        while not any(json.loads(line).get("step", 0) >= 9 for line in metrics.read_text().splitlines()):
            assert time.time() < deadline and proc.poll() is None, "".join(line for _, line in errors)[-3000:]
            time.sleep(0.2)
    sent = time.time()
    proc.send_signal(signum)
    proc.wait(timeout=300)
    reader_thread.join(timeout=60)
    if reader == "alive":
        lines += proc.stdout.readlines()
    output, stderr = "".join(lines), "".join(line for _, line in errors)
    assert proc.returncode == preemption.EXIT_STATUS, (output + stderr)[-3000:]
    assert "Traceback" not in output + stderr, stderr[-3000:]
    saved = re.search(rf"^\d\d:\d\d:\d\d {name} received: saved the checkpoint of step (\d+)", stderr, re.M)
    assert saved, stderr[-3000:]
    step = int(saved.group(1))
    assert step >= 7, "the signal's checkpoint is newer than the periodic one before it (step 5)"
    assert step in {int(p.name) for p in (tmp_path / "run" / "checkpoints" / "latest").iterdir() if p.name.isdigit()}
    notices = [(n, when, line) for n, (when, line) in enumerate(errors) if line.startswith(f"{name} received: ")]
    assert notices, stderr[-3000:]
    position, when, notice = notices[0]
    assert when - sent < 5.0 and saved.group(0) not in "".join(line for _, line in errors[:position + 1]), (
        when - sent, stderr[-3000:])  # at once, before the save
    assert re.search(rf"\bstep {step}\b", notice) and f"exit {preemption.EXIT_STATUS}" in notice, notice
    if reader == "gone":
        assert "note: stdout's reader is gone (a closed pipe or terminal): its lines are dropped" in stderr, stderr
    record = json.loads((tmp_path / "run" / "runs.jsonl").read_text().splitlines()[-1])
    assert record["finished"] is False and record["last_step"] == step
    rerun = subprocess.run(command(step + 2), cwd=REPO, env=env, capture_output=True, text=True, timeout=900)
    assert rerun.returncode == 0, rerun.stdout[-3000:] + rerun.stderr[-3000:]
    assert f"resumed from step {step}" in rerun.stdout


PREEMPT_SCRIPT = textwrap.dedent('''
    import json, sys, time
    import jax
    from bapjax.training import preemption
    process_id, port, out = int(sys.argv[1]), sys.argv[2], sys.argv[3]
    jax.distributed.initialize(coordinator_address=f"localhost:{port}", num_processes=2, process_id=process_id)
    watch = preemption.PreemptionWatch().install()
    print("ready", flush=True)
    for step in range(1, 100000):
        time.sleep(0.02 * (1 + 2 * process_id))  # the processes run at different speeds
        if watch.should_stop(step):
            break
    json.dump({"step": step, "signal": watch.received}, open(f"{out}.{process_id}.json", "w"))
    jax.distributed.shutdown()
    sys.exit(preemption.EXIT_STATUS)
''')


@pytest.mark.slow  # ~30 s: two processes joined by jax.distributed
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_two_processes_agree_on_the_step_to_save_at(tmp_path, signum):
    """A signal to one process of two stops both at the same step (JAX's preemption sync point)."""
    port = free_port()
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    procs = [subprocess.Popen([sys.executable, "-c", PREEMPT_SCRIPT, str(p), str(port), str(tmp_path / "out")],
                              cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for p in range(2)]
    for proc in procs:
        assert _wait_for_line(proc, "^ready", [], 300)
    time.sleep(2.0)
    procs[1].send_signal(signum)  # the slower one: the faster is further ahead when it hears of it
    outputs = [proc.communicate(timeout=120)[0] for proc in procs]
    for proc, output in zip(procs, outputs):
        assert proc.returncode == preemption.EXIT_STATUS, output[-3000:]
    results = [json.loads((tmp_path / f"out.{p}.json").read_text()) for p in range(2)]
    assert results[0]["step"] == results[1]["step"] > 1, results
    assert results[1]["signal"] == signal.Signals(signum).name


# ------------------------------------------------------------------------------------------------
# Damaged cache entries are moved aside and rebuilt; nothing outside the cache is touched


def test_a_sealed_entry_records_its_files(tmp_path):
    entry = tmp_path / "entry"
    (entry / "data").mkdir(parents=True)
    (entry / "data" / "a.json").write_text('{"a": 1}')
    (entry / "b.txt").write_text("bbbb")
    paths.seal(entry, writer="test")
    assert paths.is_sealed(entry) and paths.seal_problem(entry) is None
    os.utime(entry / "b.txt")  # touched, same bytes: still intact (the checksum says so)
    assert paths.seal_problem(entry) is None
    (entry / "b.txt").write_text("bbbc")  # same size, other bytes
    assert "b.txt changed" in paths.seal_problem(entry)
    (entry / "b.txt").write_text("bbbb")
    (entry / "data" / "a.json").write_text('{"a"')
    assert paths.seal_problem(entry) == "data/a.json has 4 bytes, 8 when the entry was completed"
    (entry / "data" / "a.json").unlink()
    assert paths.seal_problem(entry) == "data/a.json is missing"


def _game_logs(root: Path) -> list[Path]:
    return sorted(root.glob("data/logs/*/logs/*/postprocessed-observations.json"))


def _cut_in_half(path: Path) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


GEN = {"generate": {"dataset": "r", "seed": 4, "train_items": 6, "val_items": 2, "test_items": 2, "processes": 1}}


def test_a_generated_file_cut_in_half_is_set_aside_and_rebuilt(tmp_path, monkeypatch, capfd):
    monkeypatch.setenv("BAPJAX_CACHE", str(tmp_path / "cache"))
    want = {split: [it.item_id for it in items] for split, items in sources.load_source("r", GEN).items()}
    entry = tmp_path / "cache" / "generated" / "r-seed4-6-2-2"
    victim = _game_logs(entry)[0]
    original = victim.read_bytes()
    _cut_in_half(victim)
    capfd.readouterr()
    got = {split: [it.item_id for it in items] for split, items in sources.load_source("r", GEN).items()}
    assert got == want and victim.read_bytes() == original  # rebuilt to the same corpus
    warnings = [line for line in capfd.readouterr().err.splitlines() if line.startswith("warning:")]
    assert len(warnings) == 1 and str(entry) in warnings[0] and "damaged" in warnings[0], warnings
    assert victim.name in warnings[0]
    aside = list((tmp_path / "cache" / paths.DAMAGED).iterdir())
    assert len(aside) == 1 and aside[0].name.startswith("r-seed4-6-2-2-")


def test_a_generated_file_that_no_longer_parses_is_set_aside_and_rebuilt(tmp_path, monkeypatch, capfd):
    """Same size and mtime as recorded (the record's stat check passes): the parse error heals."""
    monkeypatch.setenv("BAPJAX_CACHE", str(tmp_path / "cache"))
    want = len(sources.load_source("r", GEN)["train"])
    entry = tmp_path / "cache" / "generated" / "r-seed4-6-2-2"
    victim = _game_logs(entry)[-1]
    st = victim.stat()
    victim.write_bytes(b"{" * st.st_size)
    os.utime(victim, ns=(st.st_atime_ns, st.st_mtime_ns))
    for cached in (tmp_path / "cache" / "items").iterdir():  # else the itemized copy still serves
        cached.unlink()
    capfd.readouterr()
    assert len(sources.load_source("r", GEN)["train"]) == want
    warnings = [line for line in capfd.readouterr().err.splitlines() if line.startswith("warning:")]
    assert len(warnings) == 1 and "not valid JSON" in warnings[0], warnings
    assert json.loads(victim.read_text())  # the rebuilt file parses


def test_damage_outside_the_cache_is_named_and_left_alone(tmp_path, monkeypatch):
    """A generate.out folder and a corpus the user gave are never moved or rewritten."""
    from bapjax.corpus import mdc

    monkeypatch.setenv("BAPJAX_CACHE", str(tmp_path / "cache"))
    out = tmp_path / "mine"
    source = {"generate": {**GEN["generate"], "out": str(out)}}
    sources.load_source("r", source)
    victim = _game_logs(out)[0]
    _cut_in_half(victim)
    cut = victim.read_bytes()
    with pytest.raises(paths.DamagedOutsideCacheError, match="outside the cache"):
        sources.load_source("r", source)
    assert victim.read_bytes() == cut and not (tmp_path / "cache" / paths.DAMAGED).exists()
    # a corpus given as such (no generate block): the parse error stands, the file stays
    with pytest.raises(mdc.CorpusError, match="postprocessed-observations.json"):
        sources.load_source("mine", {"corpus": str(out)})
    assert victim.read_bytes() == cut


def test_damaged_item_and_feature_caches_are_rebuilt(tmp_path, monkeypatch, capfd, mdc_path):
    from bapjax.corpus import mdc
    from bapjax.data import input_pipeline
    from bapjax.text.vocab import Vocabulary

    monkeypatch.setenv("BAPJAX_CACHE", str(tmp_path / "cache"))
    items = sources.load_source("r", GEN)["train"]
    (pickle_file,) = (tmp_path / "cache" / "items").glob("*.pkl")
    _cut_in_half(pickle_file)
    capfd.readouterr()
    entry = tmp_path / "cache" / "generated" / "r-seed4-6-2-2"
    assert [it.item_id for it in mdc.load_corpus(entry).split("train")] == [it.item_id for it in items]
    err = capfd.readouterr().err
    assert err.count("warning:") == 1 and "the item cache" in err and pickle_file.name in err
    vocab = Vocabulary.build(items)
    config = input_pipeline.FeatureConfig(max_text_tokens=16, max_actions=4)
    first = input_pipeline.featurize_items_cached(items, vocab, config, tmp_path / "cache" / "features")
    (npz,) = (tmp_path / "cache" / "features").glob("*.npz")
    data = bytearray(npz.read_bytes())
    data[len(data) // 3] ^= 0xFF  # one flipped byte: the member's CRC-32 no longer matches
    npz.write_bytes(bytes(data))
    capfd.readouterr()
    again = input_pipeline.featurize_items_cached(items, vocab, config, tmp_path / "cache" / "features")
    err = capfd.readouterr().err
    assert err.count("warning:") == 1 and "the feature cache" in err, err
    for key, value in first.arrays().items():
        np.testing.assert_array_equal(getattr(again, key), value)
    assert input_pipeline.FeaturizedItems.load(npz).item_ids == first.item_ids


def test_a_damaged_turn_state_file_is_encoded_again(tmp_path, capfd, monkeypatch):
    from bapjax.text import bert_states

    monkeypatch.setenv("BAPJAX_CACHE", str(tmp_path / "cache"))

    class Encoder:
        dim = 4
        calls = 0

        def token_states(self, sentences):
            Encoder.calls += len(sentences)
            states = np.stack([np.full((3, 4), len(s), np.float32) for s in sentences])
            return states, np.ones((len(sentences), 3), bool)

    store = bert_states.TurnStateStore(Encoder(), "fake", tmp_path / "cache" / "text_states" / "fake")
    store.states(["Architect: hi", "Builder: ok"])
    path = store._path(store.key("Architect: hi"))
    _cut_in_half(path)
    capfd.readouterr()
    fresh = bert_states.TurnStateStore(Encoder(), "fake", tmp_path / "cache" / "text_states" / "fake")
    states = fresh.states(["Architect: hi", "Builder: ok"])
    assert Encoder.calls == 3 and states[0].shape == (3, 4) and float(states[0][0, 0]) == len("Architect: hi")
    err = capfd.readouterr().err
    assert err.count("warning:") == 1 and path.name in err
    assert np.load(path).shape == (3, 4)


# ------------------------------------------------------------------------------------------------
# A full disk (simulated with a file-size limit: writes past it fail with EFBIG)


def _limited(limit_bytes: int, command: list) -> list:
    """`command` under a file-size limit (bash's `ulimit -f`, in KiB), set in the child: a
    `preexec_fn` would fork this multithreaded test process, which JAX warns of."""
    assert limit_bytes % 1024 == 0
    return ["bash", "-c", f'ulimit -f {limit_bytes // 1024} && exec "$@"', "limited", *map(str, command)]


def _one_error_line(done) -> str:
    assert done.returncode == 2, done.stdout[-2000:] + done.stderr[-3000:]
    assert "Traceback" not in done.stderr, done.stderr[-3000:]
    errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, done.stderr[-3000:]
    return errors[0]


def test_a_predictions_write_past_the_limit_leaves_no_partial_file(tmp_path, mdc_corpus):
    from bapjax.world import jsonl

    items = tmp_path / "items.jsonl"
    jsonl.write_items(items, mdc_corpus.split("test")[:300])
    out = tmp_path / "preds.jsonl"
    out.write_text("old\n")  # a previous complete file stays as it was
    command = [sys.executable, "-m", "bapjax.predictors", "oracle", "--items", str(items), "--out", str(out)]
    done = subprocess.run(_limited(16 * 1024, command), cwd=REPO, capture_output=True, text=True, timeout=600)
    line = _one_error_line(done)
    assert str(out) in line and "file-size limit" in line, line
    assert out.read_text() == "old\n" and sorted(p.name for p in tmp_path.iterdir()) == ["items.jsonl", "preds.jsonl"]
    assert subprocess.run(command, cwd=REPO, capture_output=True, timeout=600).returncode == 0
    assert len(out.read_text().splitlines()) == 300


def test_an_unpack_into_the_cache_past_the_limit_ends_with_one_line(tmp_path, mdc_path):
    env = dict(os.environ, BAPJAX_CACHE=str(tmp_path / "cache"))
    command = [sys.executable, "-m", "bapjax.corpus.mdc", "stats", "--corpus", str(mdc_path)]
    done = subprocess.run(_limited(256 * 1024, command), cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=600)
    line = _one_error_line(done)
    assert "corpus-" in line and "could not write the unpacked corpus archive" in line, line
    assert not list((tmp_path / "cache").glob("corpus-*")) and not list((tmp_path / "cache").glob(".unpack-*"))
    done = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0 and '"train": {"items": 3709' in done.stdout, done.stderr[-2000:]


CHECKPOINT_SCRIPT = textwrap.dedent('''
    import resource, sys
    import jax, jax.numpy as jnp
    from etils import epath
    from bapjax import paths
    from bapjax import sharding
    from bapjax.training import checkpoints
    workdir, limit = epath.Path(sys.argv[1]), int(sys.argv[2])
    mesh = sharding.data_mesh()
    state = sharding.replicate({"step": jnp.int32(7), "params": {"w": jax.random.normal(jax.random.PRNGKey(0), (512, 1024))}}, mesh)
    ckpts = checkpoints.Checkpoints(workdir)
    if limit:
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, resource.RLIM_INFINITY))
    try:
        ckpts.save(ckpts.latest, state, {"note": "x"})
    except paths.NoSpaceError as err:
        print("error:", err)
    print("steps", ckpts.latest.all_steps())
    restored, meta = ckpts.restore(ckpts.latest, checkpoints.abstract_like(state, mesh))
    print("restored", None if restored is None else int(restored["step"]))
''')


def test_a_checkpoint_save_past_the_limit_is_never_taken_for_complete(tmp_path):
    run = [sys.executable, "-c", CHECKPOINT_SCRIPT, str(tmp_path / "run")]
    done = subprocess.run([*run, str(512 * 1024)], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "could not write the checkpoint of step 7" in done.stdout and "file-size limit" in done.stdout
    assert "steps []" in done.stdout and "restored None" in done.stdout, done.stdout
    assert not [p for p in (tmp_path / "run" / "checkpoints" / "latest").iterdir() if "tmp" in p.name]
    done = subprocess.run([*run, "0"], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert "steps [7]" in done.stdout and "restored 7" in done.stdout, done.stdout + done.stderr[-3000:]


@pytest.mark.slow  # ~2-4 min: a data build of 3,000 D_r items, then the run with room
def test_a_quickstart_whose_data_build_meets_the_limit_ends_with_one_line(tmp_path):
    env = dict(os.environ, BAPJAX_CACHE=str(tmp_path / "cache"))
    command = [sys.executable, "-m", "bapjax.train", "--config=configs/quickstart.py", f"--workdir={tmp_path / 'run'}",
               *SMALL_RUN, "--config.eval.final_splits=()", "--config.data.sources.r.generate.train_items=3000"]
    done = subprocess.run(_limited(4096 * 1024, command), cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=900)
    line = _one_error_line(done)
    assert "could not write" in line and "file-size limit" in line, line
    for entry in (tmp_path / "cache" / "generated").iterdir():  # no half entry stands
        assert entry.name.startswith(".") or paths.is_sealed(entry), entry
    done = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]


# --------------------------------------------------------------------------------------------
# A damaged file of a training run (config.json, vocab.json, decode.json): one line naming it and
# the way back


def _finished_run_files(run: Path) -> None:
    """The files of a run that commands read (no checkpoint): its config, vocabulary, decoding and log."""
    from bapjax import cli

    run.mkdir()
    (run / "config.json").write_text(cli.load_config("quickstart").to_json_best_effort(indent=1))
    (run / "vocab.json").write_text(json.dumps({"tokens": ["<pad>", "<unk>", "red"]}))
    (run / "decode.json").write_text(json.dumps({"stop_rule": "mass", "stop_threshold": 0.4}, indent=1))
    (run / "runs.jsonl").write_text(json.dumps({"argv": ["/x/bapjax/train.py", "--config=quickstart", "--workdir",
                                                         "elsewhere"], "finished": True}) + "\n")


@pytest.mark.parametrize("damage, wrong", [
    (lambda text: text[: len(text) // 3], "not valid JSON: "),
    (lambda text: "", "empty"),
    (lambda text: "\udcff", "not UTF-8 text"),
    (lambda text: "[1, 2]", "not a JSON object"),
    (lambda text: '{"stop_rule": "mass"}', "no field 'stop_threshold'"),
])
def test_a_damaged_decode_json_names_the_file_and_the_command_that_rebuilds_it(tmp_path, damage, wrong):
    from bapjax.training import run_checks, run_eval

    run = tmp_path / "run"
    _finished_run_files(run)
    config = run_checks.with_defaults(json.loads((run / "config.json").read_text()))
    assert run_eval.run_decode_settings(run, config).stop_rule == "mass"  # intact: read
    path = run / "decode.json"
    path.write_bytes(damage(path.read_text()).encode("utf-8", "surrogateescape"))
    with pytest.raises(run_checks.DamagedRunFileError) as raised:
        run_eval.run_decode_settings(run, config)
    message = str(raised.value)
    assert message.startswith(f"{path}: damaged ({wrong}") and "\n" not in message
    assert message.endswith(f"`python -m bapjax.train --config=quickstart --workdir={run} --redo_final_eval` "
                            "chooses it again (and evaluates the test splits again)")


@pytest.mark.parametrize("name, remedy", [
    ("config.json", "the run cannot be read without it (its model, features and data come from it)"),
    ("vocab.json", "the run cannot be read without it (its token ids are the model's)"),
])
def test_predict_on_a_run_with_a_damaged_config_or_vocabulary_is_one_line(tmp_path, name, remedy, mdc_corpus):
    items = tmp_path / "x.jsonl"
    items.write_text("".join(json.dumps(item.to_json()) + "\n" for item in mdc_corpus.split("test")[:2]))
    run = tmp_path / "run"
    _finished_run_files(run)
    text = (run / name).read_text()
    (run / name).write_text(text[: len(text) // 2])
    done = subprocess.run([sys.executable, "-m", "bapjax.predict", "--checkpoint", str(run), "--items", str(items),
                           "--out", str(tmp_path / "p.jsonl")], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert done.returncode == 2, done.stderr[-2000:]
    assert done.stderr.count("\n") == 1 and done.stderr.startswith(f"error: {run / name}: damaged (not valid JSON: ")
    assert remedy in done.stderr and not (tmp_path / "p.jsonl").exists()
