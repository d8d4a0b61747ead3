"""A one-node SLURM cluster for the tests, made of Debian's `slurm-wlm` and `munge`: a `munged`,
a `slurmctld` and a `slurmd` on this host, each with its own socket, ports, spool and log folders
under one directory, so that nothing of a system SLURM is read or changed. `.ci/run` installs the
packages; `available()` says why a cluster cannot start here when it cannot.

    with SlurmCluster(tmp_path / "slurm") as cluster:
        job = cluster.sbatch(["--ntasks=2", "launch/slurm_multi_node.sbatch", ...])
        cluster.wait_until_done(job, timeout=600)

The node is this host (`hostname -s`) with its CPU count; the ports are free ones; every command
runs with SLURM_CONF pointing at the cluster's own slurm.conf.
"""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import time
from pathlib import Path

DAEMONS = ("munged", "slurmctld", "slurmd", "sbatch", "srun", "scontrol", "scancel")
MUNGE_KEY = Path("/etc/munge/munge.key")
ENDED = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "PREEMPTED", "OUT_OF_MEMORY", "BOOT_FAIL",
         "DEADLINE"}


def available() -> str | None:
    """None when a cluster can start here, else the reason it cannot (to skip with)."""
    missing = [name for name in DAEMONS if shutil.which(name) is None]
    if missing:
        return f"SLURM is not installed ({', '.join(missing)} missing; apt-get install slurm-wlm munge)"
    if os.geteuid() != 0:
        return "the test cluster's slurmd runs jobs as root (SlurmUser=root); not root here"
    if not MUNGE_KEY.exists():
        return f"{MUNGE_KEY} missing (the munge package makes it)"
    return None


def _free_ports(count: int) -> list[int]:
    sockets = [socket.socket() for _ in range(count)]
    try:
        for s in sockets:
            s.bind(("", 0))
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


class SlurmCluster:
    """Start with `start()` (or `with`), stop with `stop()`; `env` is the environment its commands need."""

    def __init__(self, root: Path, cpus: int | None = None):
        self.root = Path(root)
        self.node = socket.gethostname().split(".")[0]
        self.cpus = cpus or os.cpu_count() or 1
        self.conf = self.root / "slurm.conf"
        self.env = {**os.environ, "SLURM_CONF": str(self.conf)}
        for name in list(self.env):  # a test run inside a SLURM job must not pass that job's variables on
            if name.startswith("SLURM_") and name != "SLURM_CONF":
                del self.env[name]

    def __enter__(self) -> "SlurmCluster":
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def start(self, timeout: float = 60) -> None:
        root = self.root
        for folder in ("spool/ctld", "spool/d", "log"):
            (root / folder).mkdir(parents=True, exist_ok=True)
        root.chmod(0o700)
        ctld_port, d_port = _free_ports(2)
        self.conf.write_text("\n".join([
            "ClusterName=bapjaxtest", f"SlurmctldHost={self.node}", "SlurmUser=root", "SlurmdUser=root",
            "AuthType=auth/munge", f"AuthInfo=socket={root / 'munge.sock'}", "CryptoType=crypto/munge",
            "ProctrackType=proctrack/linuxproc", "TaskPlugin=task/none", "MpiDefault=none",
            "SchedulerType=sched/builtin", "SelectType=select/cons_tres", "SelectTypeParameters=CR_CPU",
            f"SlurmctldPort={ctld_port}", f"SlurmdPort={d_port}",
            f"StateSaveLocation={root / 'spool/ctld'}", f"SlurmdSpoolDir={root / 'spool/d'}",
            f"SlurmctldPidFile={root / 'slurmctld.pid'}", f"SlurmdPidFile={root / 'slurmd.pid'}",
            f"SlurmctldLogFile={root / 'log/slurmctld.log'}", f"SlurmdLogFile={root / 'log/slurmd.log'}",
            "ReturnToService=2", "JobRequeue=1", "KillWait=30", "MinJobAge=3600", "InactiveLimit=0",
            f"NodeName={self.node} CPUs={self.cpus} State=UNKNOWN",
            f"PartitionName=test Nodes={self.node} Default=YES MaxTime=INFINITE State=UP", ""]))
        self._run(["munged", "--force", f"--socket={root / 'munge.sock'}", f"--key-file={MUNGE_KEY}",
                   f"--log-file={root / 'log/munged.log'}", f"--pid-file={root / 'munged.pid'}",
                   f"--seed-file={root / 'munged.seed'}"])
        self._run(["slurmctld", "-c", "-f", str(self.conf)])  # -c: no state from an earlier cluster
        self._run(["slurmd", "-f", str(self.conf), "-N", self.node])
        deadline = time.monotonic() + timeout
        while True:
            state = subprocess.run(["sinfo", "-h", "-o", "%T"], env=self.env, capture_output=True, text=True,
                                   timeout=30).stdout.strip()
            if state.startswith("idle"):
                return
            if time.monotonic() > deadline:
                raise AssertionError(f"waited {timeout:g} s for the node to be idle; sinfo says {state!r}; "
                                     f"{self.logs()}")
            time.sleep(0.5)

    def stop(self) -> None:
        """Cancel every job, then stop the daemons (each by its pid file) and wait for them to end."""
        subprocess.run(["scancel", "--full", "-u", "root"], env=self.env, capture_output=True, timeout=30)
        for name in ("slurmd", "slurmctld", "munged"):
            pid_file = self.root / f"{name}.pid"
            try:
                pid = int(pid_file.read_text().strip())
                os.kill(pid, 15)
            except (OSError, ValueError):
                continue
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline and Path(f"/proc/{pid}").exists():
                time.sleep(0.2)

    def _run(self, command: list[str]) -> None:
        done = subprocess.run(command, env=self.env, capture_output=True, text=True, timeout=60)
        if done.returncode:
            raise AssertionError(f"{command[0]} exited {done.returncode}: {done.stderr.strip()[-800:]}; {self.logs()}")

    def logs(self) -> str:
        """The daemons' last log lines, for a failure's message."""
        parts = []
        for log in sorted((self.root / "log").glob("*.log")):
            parts.append(f"{log.name}: {' | '.join(log.read_text(errors='replace').splitlines()[-5:])}")
        return "; ".join(parts)

    # -- jobs -------------------------------------------------------------------------------------
    def sbatch(self, args: list[str], cwd: Path) -> int:
        """Submit a batch job (`sbatch --parsable ARGS`) from `cwd`; its job id."""
        done = subprocess.run(["sbatch", "--parsable", *args], cwd=cwd, env=self.env, capture_output=True, text=True,
                              timeout=60)
        assert done.returncode == 0, f"sbatch {' '.join(args)}: {done.stderr.strip()}"
        return int(done.stdout.strip().split(";")[0])

    def job(self, job_id: int) -> dict[str, str]:
        """`scontrol show job` as a dict (JobState, ExitCode, Restarts, ...)."""
        text = subprocess.run(["scontrol", "show", "job", str(job_id)], env=self.env, capture_output=True, text=True,
                              timeout=30).stdout
        return dict(re.findall(r"(\w+)=(\S*)", text))

    def wait_until_done(self, job_id: int, timeout: float) -> dict[str, str]:
        """Wait for the job to end; its `job()` record. AssertionError after `timeout` seconds."""
        deadline = time.monotonic() + timeout
        while True:
            record = self.job(job_id)
            if record.get("JobState") in ENDED:
                return record
            if time.monotonic() > deadline:
                raise AssertionError(f"waited {timeout:g} s for job {job_id} to end; it is {record.get('JobState')} "
                                     f"({record.get('Reason')}); {self.logs()}")
            time.sleep(1)

    def wait_until_running(self, job_id: int, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while (record := self.job(job_id)).get("JobState") != "RUNNING":
            if time.monotonic() > deadline:
                raise AssertionError(f"waited {timeout:g} s for job {job_id} to run; it is {record.get('JobState')} "
                                     f"({record.get('Reason')}); {self.logs()}")
            time.sleep(0.5)

    def scontrol(self, *args: str) -> None:
        done = subprocess.run(["scontrol", *args], env=self.env, capture_output=True, text=True, timeout=30)
        assert done.returncode == 0, f"scontrol {' '.join(args)}: {done.stderr.strip()}"

    def scancel(self, *args: str) -> None:
        done = subprocess.run(["scancel", *args], env=self.env, capture_output=True, text=True, timeout=30)
        assert done.returncode == 0, f"scancel {' '.join(args)}: {done.stderr.strip()}"

    def task_pids(self, job_id: int) -> dict[int, int]:
        """{task rank: pid} of a running job's `python -m bapjax.train` tasks on this node (read from /proc)."""
        found = {}
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                environ = dict(v.split("=", 1) for v in (entry / "environ").read_bytes().decode(errors="replace")
                               .split("\0") if "=" in v)
                command = (entry / "cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if environ.get("SLURM_JOB_ID") == str(job_id) and b"bapjax.train" in command and "SLURM_PROCID" in environ:
                found[int(environ["SLURM_PROCID"])] = int(entry.name)
        return found
