"""The launchers' train commands are real train commands: each script is run with its starter
(`gcloud` for the TPU pod, `srun` for SLURM) replaced by a stub on PATH, and the command it would
start on every host is run here with `--print_config`, which refuses any flag or config field the
train command does not have. (The SLURM launcher also runs under a real scheduler: test_slurm.py.)"""

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
EXTRA = "--config.train.batch_size=16"


def _stub(folder: Path, name: str, body: str) -> None:
    folder.mkdir(exist_ok=True)
    path = folder / name
    path.write_text(f"#!/usr/bin/env bash\n{body}\n")
    path.chmod(0o755)


def _train_args(command: str) -> list[str]:
    words = shlex.split(command)
    start = words.index("bapjax.train") + 1
    return words[start:]


def _check(args: list[str], tmp_path: Path) -> dict:
    done = subprocess.run([sys.executable, "-m", "bapjax.train", *args, "--print_config"], cwd=REPO,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout)


def test_the_tpu_pod_launcher_starts_the_train_command_on_every_worker(tmp_path):
    stubs, record = tmp_path / "bin", tmp_path / "gcloud.args"
    _stub(stubs, "gcloud", f'printf "%s\\n" "$@" > {record}')
    env = {**os.environ, "PATH": f"{stubs}:{os.environ['PATH']}", "TPU_NAME": "pod", "ZONE": "zone"}
    done = subprocess.run(["bash", "launch/run_tpu_pod.sh", "configs/quickstart.py", "gs://bucket/run", EXTRA],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    lines = record.read_text().splitlines()
    assert "--worker=all" in lines and "pod" in lines
    remote = "\n".join(lines[lines.index("--command") + 1:])
    args = _train_args(remote.replace("\\$HOME", "$HOME"))
    assert args[:2] == ["--config=configs/quickstart.py", "--workdir=gs://bucket/run"] and args[-1] == EXTRA
    config = _check([args[0], *args[2:]], tmp_path)
    assert config["distributed"]["initialize"] is True and config["train"]["batch_size"] == 16


def test_the_slurm_launcher_starts_one_train_command_per_task(tmp_path):
    stubs, record = tmp_path / "bin", tmp_path / "srun.args"
    _stub(stubs, "srun", f'printf "%s\\n" "$@" > {record}')
    env = {**os.environ, "PATH": f"{stubs}:{os.environ['PATH']}"}
    done = subprocess.run(["bash", "launch/slurm_multi_node.sbatch", "configs/quickstart.py", str(tmp_path / "run"),
                           EXTRA], cwd=REPO, env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    words = record.read_text().splitlines()
    assert words[:4] == ["--kill-on-bad-exit=0", "python", "-m", "bapjax.train"], words
    args = words[4:]
    assert args[1] == f"--workdir={tmp_path / 'run'}" and args[-1] == EXTRA
    config = _check([args[0], *args[2:]], tmp_path)
    assert config["distributed"]["initialize"] is True and config["distributed"]["coordinator_address"] == ""
    script = (REPO / "launch" / "slurm_multi_node.sbatch").read_text()
    for directive in ("--requeue", "--signal=TERM@", "--open-mode=append"):
        assert f"#SBATCH {directive}" in script
