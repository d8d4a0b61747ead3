"""The SLURM launcher under a real scheduler: a one-node cluster (`tests/slurm.py`; Debian's slurm-wlm
and munge, which `.ci/run` installs) runs `launch/slurm_multi_node.sbatch` as docs/training.md says,
two tasks on the one node joined by jax.distributed's SLURM detection:

- the job trains to its end and writes the final evaluation, every task ending with its line;
- the best checkpoint is chosen by a decoded val F1, which process 0 alone decodes;
- SIGTERM as SLURM delivers it (`scancel --signal=TERM`, what `#SBATCH --signal` sends before the time
  limit) makes both tasks save the same step and exit 75; the requeued job resumes from that step and
  ends with the parameters of the uninterrupted job, bit for bit;
- a task killed with SIGKILL ends its peer within 60 s in one line naming it; the requeued job resumes.
"""

import os
import re
import shutil
import signal
import time
from pathlib import Path

import jax
import numpy as np
import pytest

from tests import slurm
from tests.two_processes import SMALL_RUN, SMALL_SOURCES

REPO = Path(__file__).resolve().parents[1]
LAUNCHER = "launch/slurm_multi_node.sbatch"
STEPS = 12

pytestmark = pytest.mark.skipif(slurm.available() is not None, reason=str(slurm.available()))


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    root = tmp_path_factory.mktemp("slurm")
    with slurm.SlurmCluster(root) as running:
        running.env["BAPJAX_CACHE"] = str(root / "cache")  # shared by the jobs: data and compiled programs
        running.env["JAX_PLATFORMS"] = "cpu"
        yield running


def job_args(workdir: Path, *extra: str) -> list[str]:
    """sbatch arguments: two tasks on the one node, the launcher, a tiny quickstart of STEPS steps."""
    args = ["--nodes=1", "--ntasks-per-node=2", f"--output={workdir}.out", LAUNCHER, "configs/quickstart.py",
            str(workdir), *[a for a in SMALL_RUN if not a.startswith("--config.train.max_steps")],
            f"--config.train.max_steps={STEPS}", "--config.train.eval_every_steps=4",
            # the best checkpoint by a decoded val F1, which only process 0 decodes: every task takes its decision
            "--config.train.select_by=r_val_overall_micro_f1", "--config.eval.val_decode_items=4",
            "--config.eval.final_splits=('r:test',)", "--config.model.world.conv_impl=im2col", *SMALL_SOURCES, *extra]
    return args


def output(workdir: Path) -> str:
    path = Path(f"{workdir}.out")
    return path.read_text(errors="replace") if path.exists() else ""


def wait_for_step(cluster, job: int, workdir: Path, step: int, timeout: float = 600) -> None:
    deadline = time.monotonic() + timeout
    while not re.search(rf"^step {step}/", output(workdir), re.M):
        state = cluster.job(job).get("JobState")
        assert state in ("PENDING", "RUNNING", "CONFIGURING") and time.monotonic() < deadline, (
            f"waited for step {step} of job {job} ({state}): {output(workdir)[-3000:]}")
        time.sleep(0.5)


def requeue_and_finish(cluster, job: int, workdir: Path) -> dict:
    """`scontrol requeue` (released at once, not after SLURM's requeue delay), then wait for its end."""
    cluster.scontrol("requeue", str(job))
    cluster.scontrol("update", f"JobId={job}", "StartTime=now")
    cluster.wait_until_running(job, timeout=300)
    return cluster.wait_until_done(job, timeout=900)


def latest_params(workdir: Path):
    from bapjax.training import checkpoints
    params, step = checkpoints.load_params(workdir / "checkpoints" / "latest")
    return step, [np.asarray(leaf) for leaf in jax.tree_util.tree_leaves(params)]


@pytest.fixture(scope="module")
def uninterrupted(cluster, tmp_path_factory):
    workdir = tmp_path_factory.mktemp("jobs") / "whole"
    job = cluster.sbatch(job_args(workdir), cwd=REPO)
    return workdir, cluster.wait_until_done(job, timeout=900)


@pytest.mark.slow  # ~1-2 min: one job of two tasks
def test_the_launcher_runs_two_tasks_to_the_end_and_writes_the_final_evaluation(uninterrupted):
    workdir, record = uninterrupted
    text = output(workdir)
    assert record["JobState"] == "COMPLETED" and record["ExitCode"] == "0:0", text[-3000:]
    assert "batch 8 over 2 devices" in text and "Traceback" not in text, text[-3000:]
    assert re.search(r"^process 1 of 2: finished", text, re.M) and "run finished:" in text, text[-3000:]
    assert (workdir / "final_eval.json").exists()
    assert any(p.name.isdigit() for p in (workdir / "checkpoints" / "best").iterdir())


@pytest.mark.slow  # ~3-4 min: a job stopped by SIGTERM, then requeued
def test_sigterm_saves_one_step_on_every_task_and_the_requeued_job_ends_with_the_same_parameters(
        cluster, uninterrupted, tmp_path):
    workdir = tmp_path / "preempted"
    job = cluster.sbatch(job_args(workdir), cwd=REPO)
    wait_for_step(cluster, job, workdir, 4)
    cluster.scancel("--signal=TERM", str(job))  # to the tasks, as #SBATCH --signal does before the time limit
    record = cluster.wait_until_done(job, timeout=300)
    text = output(workdir)
    assert record["ExitCode"] == "75:0", text[-3000:]
    exited = re.findall(r"tasks? ([\d,-]+): Exited with exit code 75", text)  # srun: "tasks 0-1", or one line a task
    assert sorted(exited) in (["0-1"], ["0", "1"]), text[-3000:]
    saved = re.search(r"SIGTERM received: saved the checkpoint of step (\d+)", text)
    assert saved and 4 <= int(saved.group(1)) < STEPS, text[-3000:]
    step = int(saved.group(1))
    record = requeue_and_finish(cluster, job, workdir)
    text = output(workdir)
    assert record["JobState"] == "COMPLETED" and record["Restarts"] == "1", text[-3000:]
    assert f"resumed from step {step}" in text, text[-3000:]
    whole_step, whole = latest_params(uninterrupted[0])
    resumed_step, resumed = latest_params(workdir)
    assert whole_step == resumed_step == STEPS
    for a, b in zip(whole, resumed, strict=True):
        np.testing.assert_array_equal(a, b)


@pytest.mark.slow  # ~2-3 min: a job whose task 1 is killed, then requeued
def test_a_killed_task_ends_its_peer_in_one_line_and_the_requeued_job_resumes(cluster, tmp_path):
    workdir = tmp_path / "killed"
    job = cluster.sbatch(job_args(workdir, "--config.train.checkpoint_every_steps=2"), cwd=REPO)
    wait_for_step(cluster, job, workdir, 5)
    pids = cluster.task_pids(job)
    assert set(pids) == {0, 1}, pids
    killed_at = time.monotonic()
    os.kill(pids[1], signal.SIGKILL)
    record = cluster.wait_until_done(job, timeout=120)
    assert time.monotonic() - killed_at < 60, record
    text = output(workdir)
    errors = [line for line in text.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and errors[0].startswith("error: process 0 of 2: process 1 of the job ended"), text[-3000:]
    assert "Traceback" not in text and re.search(r"task 0: Exited with exit code 4", text), text[-3000:]
    kept = re.search(r"the last checkpoint is step (\d+)", errors[0])
    assert kept, errors[0]
    record = requeue_and_finish(cluster, job, workdir)
    text = output(workdir)
    assert record["JobState"] == "COMPLETED", text[-3000:]
    resumed = re.search(r"resumed from step (\d+)", text)  # the named step, or one whose save was finishing then
    assert resumed and int(resumed.group(1)) >= int(kept.group(1)), text[-3000:]
    assert (workdir / "final_eval.json").exists(), text[-3000:]
    shutil.rmtree(workdir, ignore_errors=True)
