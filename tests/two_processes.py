"""Training runs of 2 processes joined by `jax.distributed` on this machine, and the tiny run they
train (tests/test_multiprocess.py, test_faults.py; SMALL_RUN also for test_slurm.py's jobs)."""

import socket
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

SMALL_RUN = [  # the quickstart config, cut to a few steps of a tiny model
    "--config.train.max_steps=3", "--config.train.batch_size=8", "--config.train.log_every_steps=1",
    "--config.eval.val_decode_items=-1", "--config.eval.stop_thresholds=()",
    "--config.train.glove=False", "--config.model.text.embedding_dim=8", "--config.model.text.hidden=16",
    "--config.model.world.features=8", "--config.model.world.layers=1", "--config.model.decoder.hidden=16",
    "--config.model.decoder.action_embedding=16", "--config.model.heads.hidden=16", "--config.features.max_text_tokens=24",
]
# its data: 60 training items per simulator, generated in one process
SMALL_SOURCES = [f"--config.data.sources.{name}.generate.{field}" for name in ("bs", "ss", "r")
                 for field in ("train_items=60", "processes=1")]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("localhost", 0))
        return s.getsockname()[1]


def start_training(tmp_path: Path, port: int, env: dict, max_steps: int, tag: str, *extra: str):
    """Both processes of a small quickstart run into tmp_path/run (60 training items per simulator,
    an eval every 5 steps, no test split), their output in tmp_path/<tag>.<process>.log (files: a
    full pipe would stall a process and so both). Returns (processes, logs)."""
    base = [sys.executable, "-m", "bapjax.train", "--config=configs/quickstart.py", f"--workdir={tmp_path / 'run'}",
            *[a for a in SMALL_RUN if not a.startswith("--config.train.max_steps")],
            "--config.eval.final_splits=()", "--config.train.eval_every_steps=5",
            "--config.distributed.initialize=True", f"--config.distributed.coordinator_address=localhost:{port}",
            "--config.distributed.num_processes=2", *SMALL_SOURCES, *extra]
    logs = [tmp_path / f"{tag}.{p}.log" for p in range(2)]
    procs = [subprocess.Popen([*base, f"--config.distributed.process_id={p}", f"--config.train.max_steps={max_steps}"],
                              cwd=REPO, env=env, stdout=open(logs[p], "w"), stderr=subprocess.STDOUT)
             for p in range(2)]
    return procs, logs
