"""One training run per workdir (`bapjax.training.workdir_claim`): a second run on a claimed workdir is
refused with one line naming the holder and writes nothing, `--wait` waits for the claim, a claim
left by a killed process is taken over with one warning, one left by another host is described
with the file to remove, and the processes of one `jax.distributed` job share one claim."""

import hashlib
import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from etils import epath

from bapjax.training import checkpoints, run_checks, workdir_claim
from tests.lines import LineReader

REPO = Path(__file__).resolve().parents[1]

HOLD_SCRIPT = textwrap.dedent('''
    import sys, time
    from etils import epath
    from bapjax.training import workdir_claim
    with workdir_claim.claimed(epath.Path(sys.argv[1])):
        print("claimed", flush=True)
        time.sleep(float(sys.argv[2]))
''')


def _hold(workdir, seconds=300.0) -> subprocess.Popen:
    """A process holding the claim on `workdir` (for `seconds`), once it says so."""
    proc = subprocess.Popen([sys.executable, "-c", HOLD_SCRIPT, str(workdir), str(seconds)], cwd=REPO,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    assert proc.stdout.readline().strip() == "claimed", proc.communicate()[0]
    return proc


def _snapshot(directory: Path) -> dict:
    return {str(p.relative_to(directory)): p.read_bytes() for p in sorted(directory.rglob("*")) if p.is_file()}


def test_a_second_claim_is_refused_naming_the_holder_and_writes_nothing(tmp_path):
    workdir = tmp_path / "run"
    holder = _hold(workdir)
    try:
        (workdir / "metrics.jsonl").write_text('{"step": 1}\n')
        before = _snapshot(workdir)
        with pytest.raises(workdir_claim.WorkdirClaimedError) as err:
            with workdir_claim.claimed(epath.Path(workdir)):
                pytest.fail("entered a claimed workdir")
        message = str(err.value)
        assert "\n" not in message and str(workdir) in message
        assert f"pid {holder.pid} on host {socket.gethostname()}" in message and "--wait" in message
        assert "HOLD_SCRIPT" not in message and "claimed(epath.Path(sys.argv[1]))" in message  # the command
        assert _snapshot(workdir) == before
    finally:
        holder.kill()
        holder.wait()


def test_a_claim_is_released_at_the_end_and_then_taken_again(tmp_path, capfd):
    workdir = epath.Path(tmp_path / "run")
    with workdir_claim.claimed(workdir):
        described = json.loads((workdir / workdir_claim.CLAIM_FILE).read_text())
        assert described["pid"] == os.getpid() and described["host"] == socket.gethostname()
        assert described["process_start"] == workdir_claim.process_start(os.getpid())
    assert not (workdir / workdir_claim.CLAIM_FILE).exists()
    with pytest.raises(RuntimeError):
        with workdir_claim.claimed(workdir):
            raise RuntimeError("the run failed")
    assert not (workdir / workdir_claim.CLAIM_FILE).exists()  # released however the run ends
    with workdir_claim.claimed(workdir):
        pass
    assert "warning" not in capfd.readouterr().err


def test_a_claim_left_by_a_killed_process_is_taken_over_with_one_warning(tmp_path, capfd):
    workdir = tmp_path / "run"
    holder = _hold(workdir)
    holder.send_signal(signal.SIGKILL)
    holder.wait()
    left = json.loads((workdir / workdir_claim.CLAIM_FILE).read_text())
    assert left["pid"] == holder.pid
    capfd.readouterr()
    with workdir_claim.claimed(epath.Path(workdir)):
        assert json.loads((workdir / workdir_claim.CLAIM_FILE).read_text())["pid"] == os.getpid()
    err = capfd.readouterr().err
    assert err.count("warning:") == 1 and f"pid {holder.pid}" in err and "no longer running" in err, err


def test_a_described_holder_that_still_runs_keeps_the_claim_without_its_lock(tmp_path):
    """Where locks are not honoured (the description is all there is), a holder on this host is
    alive only as the same process: its pid with its start time (a reused pid is not it)."""
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"])
    try:
        workdir = tmp_path / "run"
        workdir.mkdir()
        holder = {**workdir_claim.describe_this_process(), "pid": sleeper.pid,
                  "process_start": workdir_claim.process_start(sleeper.pid)}
        (workdir / workdir_claim.CLAIM_FILE).write_text(json.dumps(holder))
        assert workdir_claim.holder_state(holder) == "running"
        with pytest.raises(workdir_claim.WorkdirClaimedError, match=f"pid {sleeper.pid} on host"):
            with workdir_claim.claimed(epath.Path(workdir)):
                pass
        reused = {**holder, "process_start": holder["process_start"] - 1}  # the pid, another process
        assert workdir_claim.holder_state(reused) == "gone"
        rebooted = {**holder, "boot_id": "another-boot"}
        assert workdir_claim.holder_state(rebooted) == "gone"
    finally:
        sleeper.kill()
        sleeper.wait()
    assert workdir_claim.holder_state(holder) == "gone"


def test_a_claim_from_another_host_is_described_with_the_file_to_remove(tmp_path):
    workdir = tmp_path / "run"
    workdir.mkdir()
    claim_file = workdir / workdir_claim.CLAIM_FILE
    claim_file.write_text(json.dumps({**workdir_claim.describe_this_process(2), "host": "node-17", "pid": 4242}))
    before = _snapshot(workdir)
    with pytest.raises(workdir_claim.WorkdirClaimedError) as err:
        with workdir_claim.claimed(epath.Path(workdir)):
            pass
    message = str(err.value)
    assert "pid 4242 on host node-17, process 0 of 2" in message and f"remove {claim_file}" in message, message
    assert _snapshot(workdir) == before
    claim_file.unlink()  # what the message says to do once that run is gone
    with workdir_claim.claimed(epath.Path(workdir)):
        pass


def test_wait_takes_the_claim_when_its_holder_ends(tmp_path, capsys):
    workdir = tmp_path / "run"
    holder = subprocess.Popen([sys.executable, "-c", HOLD_SCRIPT, str(workdir), "2"], cwd=REPO,
                              stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline().strip() == "claimed"
    started = time.time()
    with workdir_claim.claimed(epath.Path(workdir), wait=True, poll_seconds=0.1):
        assert json.loads((workdir / workdir_claim.CLAIM_FILE).read_text())["pid"] == os.getpid()
        assert time.time() - started > 1.0  # it waited for the holder's 2 s
    assert holder.wait(timeout=60) == 0
    out = capsys.readouterr().out
    assert out.count("waiting for") == 1 and f"pid {holder.pid}" in out, out


def test_a_remote_claim_is_a_description_object(tmp_path, monkeypatch, capfd):
    """gs:// workdirs get `RemoteClaim` (exercised here on a local path): a description written,
    read back, and removed at the end; refused while it stands; a dead holder's taken over."""
    monkeypatch.setattr(workdir_claim, "READ_BACK_SECONDS", 0.01)
    workdir = epath.Path(tmp_path / "run")
    claim = workdir_claim.RemoteClaim(workdir)
    claim.try_take()
    assert json.loads((workdir / workdir_claim.CLAIM_FILE).read_text())["pid"] == os.getpid()
    with pytest.raises(workdir_claim._Held) as held:
        workdir_claim.RemoteClaim(workdir).try_take()
    assert held.value.state == "running" and held.value.holder["pid"] == os.getpid()
    claim.release()
    assert not (workdir / workdir_claim.CLAIM_FILE).exists()
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    (workdir / workdir_claim.CLAIM_FILE).write_text(json.dumps(
        {**workdir_claim.describe_this_process(), "pid": int(dead.stdout), "process_start": 1}))
    capfd.readouterr()
    claim = workdir_claim.RemoteClaim(workdir)
    claim.try_take()
    assert capfd.readouterr().err.count("warning:") == 1
    claim.release()
    assert workdir_claim.is_remote("gs://bucket/run") and not workdir_claim.is_remote(str(tmp_path))


JOB_SCRIPT = textwrap.dedent('''
    import sys, time
    import jax
    from etils import epath
    from bapjax.training import workdir_claim
    workdir, port, process_id, hold, wait = sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4]), sys.argv[5]
    jax.distributed.initialize(coordinator_address=f"localhost:{port}", num_processes=2, process_id=process_id)
    try:
        with workdir_claim.claimed(epath.Path(workdir), wait=wait == "wait", poll_seconds=0.2):
            print("claimed", flush=True)
            time.sleep(hold)
    except workdir_claim.WorkdirClaimedError as err:
        print("refused:", err, flush=True)
        sys.exit(2)
''')


def _job(workdir, hold: float, wait: bool = False):
    with socket.socket() as s:
        s.bind(("localhost", 0))
        port = s.getsockname()[1]
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    return [subprocess.Popen([sys.executable, "-c", JOB_SCRIPT, str(workdir), str(port), str(p), str(hold),
                              "wait" if wait else "no"],
                             cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            for p in range(2)]


def _wait_for(proc, text: str) -> list[str]:
    lines = []
    while not lines or not (lines[-1].startswith(text) or lines[-1] == ""):  # (Gloo prints a line first)
        lines.append(proc.stdout.readline())
    assert lines[-1].startswith(text), "".join(lines)[-3000:]
    return lines


def test_the_processes_of_one_job_share_the_claim_and_a_second_job_is_refused(tmp_path):
    """Process 0 claims, process 1 joins; a second job is refused in both its processes; a third
    with --wait waits in step and takes the claim over when the first job dies."""
    workdir = tmp_path / "run"
    first = _job(workdir, hold=300)
    for proc in first:
        _wait_for(proc, "claimed")
    described = json.loads((workdir / workdir_claim.CLAIM_FILE).read_text())
    assert described["pid"] == first[0].pid and described["processes"] == 2
    second = _job(workdir, hold=0)
    outputs = [proc.communicate(timeout=300)[0] for proc in second]
    for proc, output in zip(second, outputs):
        assert proc.returncode == 2 and "refused:" in output, output[-3000:]
    assert f"pid {first[0].pid} on host" in outputs[0] and "process 0 of 2" in outputs[0]
    assert "process 0 of this job" in outputs[1]
    third = _job(workdir, hold=0, wait=True)
    assert f"pid {first[0].pid}" in _wait_for(third[0], "waiting for")[-1]
    for proc in first:
        proc.kill()
        proc.wait()
    outputs = [proc.communicate(timeout=300)[0] for proc in third]
    for proc, output in zip(third, outputs):
        assert proc.returncode == 0 and "claimed" in output, output[-3000:]


# ------------------------------------------------------------------------------------------------
# The training CLI: the double launch of the issue, --wait, kill -9


TINY_CONFIG = textwrap.dedent('''
    """tests/test_train.py's tiny config on the real MDC, with the test's train settings."""
    from tests.test_train import tiny_config


    def get_config():
        config = tiny_config("unused")
        config.data.sources.mc.corpus = {corpus!r}
        config.train.update({train!r})
        config.eval.stop_thresholds = ()
        return config
''')


def _tiny_run_args(workdir, mdc_path, **train) -> list[str]:
    """`python -m bapjax.train` with tests/test_train.py's tiny config (a config file beside the
    workdir: run from the repository, it imports the tests' config)."""
    train = dict(log_every_steps=1, **train)
    config_file = Path(workdir).parent / f"tiny_{hashlib.sha256(repr(sorted(train.items())).encode()).hexdigest()[:8]}.py"
    config_file.write_text(TINY_CONFIG.format(corpus=str(mdc_path), train=train))
    return [sys.executable, "-m", "bapjax.train", f"--config={config_file}", f"--workdir={workdir}"]


def _start(command) -> subprocess.Popen:
    return subprocess.Popen(command, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _stopped_once_claimed(proc, workdir: Path, timeout: float = 300) -> None:
    """SIGSTOP `proc` as soon as it holds the claim (a stopped process keeps it): what comes
    next happens while the first run is in the middle of its work, on any machine."""
    claim_file = workdir / workdir_claim.CLAIM_FILE
    deadline = time.time() + timeout
    while True:
        try:
            if json.loads(claim_file.read_text())["pid"] == proc.pid:
                break
        except (OSError, ValueError, KeyError):
            pass
        if time.time() > deadline or proc.poll() is not None:
            proc.kill()
            pytest.fail("the run never claimed its workdir: " + "".join(proc.communicate())[-3000:])
        time.sleep(0.05)
    proc.send_signal(signal.SIGSTOP)


def _train_steps(workdir: Path) -> list[int]:
    rows = [json.loads(line) for line in (workdir / "metrics.jsonl").read_text().splitlines()]
    return [r["step"] for r in rows if r["kind"] == "train"]


def test_a_second_training_on_a_workdir_in_use_exits_2_and_the_first_finishes(tmp_path, mdc_path):
    workdir = tmp_path / "run"
    command = _tiny_run_args(workdir, mdc_path)
    first = _start(command)
    _stopped_once_claimed(first, workdir)
    try:
        before = _snapshot(workdir)
        second = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=300)
        assert _snapshot(workdir) == before  # the second run wrote nothing
    finally:
        first.send_signal(signal.SIGCONT)
    assert second.returncode == 2, second.stdout[-2000:] + second.stderr[-3000:]
    assert "Traceback" not in second.stderr and second.stdout == f"workdir: {workdir}\n"  # its first line only
    (line,) = [line for line in second.stderr.splitlines() if line.startswith("error:")]
    assert f"pid {first.pid} on host {socket.gethostname()}" in line and "bapjax.train" in line, line
    out, err = first.communicate(timeout=600)
    assert first.returncode == 0, out[-2000:] + err[-3000:]
    assert _train_steps(workdir) == [1, 2, 3, 4, 5, 6]  # every step logged once
    assert len((workdir / run_checks.RUN_LOG).read_text().splitlines()) == 1  # one run on record
    assert not (workdir / workdir_claim.CLAIM_FILE).exists()
    # readers of a run never look at the claim: a claimed run still loads (predict, viz report)
    with workdir_claim.claimed(epath.Path(workdir)):
        run = checkpoints.load_run(workdir)
        assert run.step == 6


@pytest.mark.slow  # ~1-2 min on a 2-core CPU: two tiny training runs one after the other
def test_wait_starts_after_the_first_run_ends_and_resumes_from_its_checkpoint(tmp_path, mdc_path):
    workdir = tmp_path / "run"
    command = _tiny_run_args(workdir, mdc_path)
    first = _start(command)
    _stopped_once_claimed(first, workdir)
    second = _start([*command, "--wait"])
    waiting, errors = LineReader(second.stdout), LineReader(second.stderr)
    try:  # its first lines: the workdir, then what it waits for (a deadline: the first run is stopped meanwhile)
        line = waiting.wait_for(r"^waiting for", timeout=300)
        assert f"pid {first.pid}" in line, line
    finally:
        first.send_signal(signal.SIGCONT)
    out, err = first.communicate(timeout=600)
    assert first.returncode == 0, out[-2000:] + err[-3000:]
    second.wait(timeout=600)
    out, err = waiting.rest(), errors.rest()
    assert second.returncode == 0, out[-2000:] + err[-3000:]
    assert "resumed from step 6" in out
    assert _train_steps(workdir) == [1, 2, 3, 4, 5, 6]
    invocations = [json.loads(line) for line in (workdir / run_checks.RUN_LOG).read_text().splitlines()]
    assert [(r["first_step"], r["last_step"]) for r in invocations] == [(0, 6), (6, 6)]


@pytest.mark.slow  # ~1-2 min on a 2-core CPU: a tiny run killed at step 4, then resumed
def test_a_run_killed_with_sigkill_is_taken_over_and_resumed(tmp_path, mdc_path):
    workdir = tmp_path / "run"
    first = _start(_tiny_run_args(workdir, mdc_path, max_steps=400, num_epochs=400, checkpoint_every_steps=2))
    deadline = time.time() + 600
    for line in first.stdout:
        if line.startswith("step 4/"):
            break
        assert time.time() < deadline
    first.send_signal(signal.SIGKILL)
    first.wait()
    assert json.loads((workdir / workdir_claim.CLAIM_FILE).read_text())["pid"] == first.pid
    saved = max(int(p.name) for p in (workdir / "checkpoints" / "latest").iterdir() if p.name.isdigit())
    rerun = subprocess.run(_tiny_run_args(workdir, mdc_path, max_steps=saved + 2, num_epochs=400,
                                          checkpoint_every_steps=2),
                           cwd=REPO, capture_output=True, text=True, timeout=600)
    assert rerun.returncode == 0, rerun.stdout[-2000:] + rerun.stderr[-3000:]
    warnings = [line for line in rerun.stderr.splitlines() if line.startswith("warning:")]
    assert len(warnings) == 1 and f"pid {first.pid}" in warnings[0] and "taking the claim over" in warnings[0]
    assert f"resumed from step {saved}" in rerun.stdout
    assert not (workdir / workdir_claim.CLAIM_FILE).exists()


def test_a_filesystem_without_locks_gets_the_description_claim_with_one_warning(tmp_path, monkeypatch, capfd):
    import errno

    def no_locks(fd, operation):
        raise OSError(errno.ENOLCK, "No locks available")

    monkeypatch.setattr(workdir_claim, "READ_BACK_SECONDS", 0.01)
    monkeypatch.setattr(workdir_claim.fcntl, "flock", no_locks)
    workdir = epath.Path(tmp_path / "run")
    with workdir_claim.claimed(workdir):
        assert json.loads((workdir / workdir_claim.CLAIM_FILE).read_text())["pid"] == os.getpid()
        with pytest.raises(workdir_claim.WorkdirClaimedError, match=f"pid {os.getpid()} on host"):
            with workdir_claim.claimed(workdir):
                pass
    assert not (workdir / workdir_claim.CLAIM_FILE).exists()
    err = capfd.readouterr().err
    assert err.count("warning:") == 2 and "no file locks" in err  # one per claim attempt
