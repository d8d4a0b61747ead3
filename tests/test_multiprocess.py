"""Multi-host data parallelism as a TPU pod runs it: 2 processes x 4 CPU devices joined with
`jax.distributed` on localhost, each feeding its own rows (DataIterator process_index/count),
give the loss and parameters of the same steps on 1 device."""

import json
import os
import shutil
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[1]

SCRIPT = textwrap.dedent('''
    import json, sys
    import jax, ml_collections, numpy as np
    from bapjax.data import input_pipeline
    from bapjax import sharding
    from bapjax.training import run_checks, loop as train
    from bapjax.training import optimizer as optim
    from bapjax.corpus import mdc
    from bapjax.text.vocab import Vocabulary
    from tests.test_models import flat_model

    corpus, out, process_id, num_processes, port = sys.argv[1:6]
    process_id, num_processes = int(process_id), int(num_processes)
    if num_processes > 1:  # the code path of a pod: config.distributed -> jax.distributed.initialize
        sharding.start_processes(ml_collections.ConfigDict(dict(
            initialize=True, coordinator_address=f"localhost:{port}", num_processes=num_processes,
            process_id=process_id)))
    assert jax.process_count() == num_processes and jax.process_index() == process_id
    items = mdc.load_corpus(corpus).split("train")[:96]
    vocab = Vocabulary.build(items)
    fc = input_pipeline.FeatureConfig(max_text_tokens=32, max_actions=6)
    model = flat_model(vocab_size=vocab.size, embedding_dim=8, text_hidden=16, world_features=8,
                                 world_layers=2, action_embedding=16, decoder_hidden=16, head_hidden=16,
                                 encode_chunk=4)
    optimizer = optim.make_optimizer(run_checks.with_defaults({"train": dict(
        learning_rate=1e-3, weight_decay=0.1, grad_clip=5.0, schedule="cosine", warmup_steps=1)}).train, 3)
    mesh = sharding.data_mesh()
    iterator = input_pipeline.DataIterator(items, vocab, fc, 16, seed=0, process_index=jax.process_index(),
                                           process_count=jax.process_count())
    trainer = train.Trainer(model, optimizer, mesh, pack_multiple=32)
    state = sharding.replicate(train.create_state(model, optimizer, jax.random.PRNGKey(0), None), mesh)
    losses = []
    for _ in range(3):
        state, metrics = trainer.train(state, next(iterator))
        losses.append(float(metrics["loss"]))
    params = jax.tree_util.tree_map(lambda x: np.asarray(x.addressable_data(0)), state["params"])
    if process_id == 0:
        leaves = jax.tree_util.tree_leaves(params)
        np.savez(out + ".npz", *leaves)
        with open(out + ".json", "w") as f:
            json.dump({"losses": losses, "devices": jax.device_count(), "grad_norm": float(metrics["grad_norm"])}, f)
''')


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("localhost", 0))
        return s.getsockname()[1]


def _run(args, devices):
    env = dict(os.environ, XLA_FLAGS=f"--xla_force_host_platform_device_count={devices}", JAX_PLATFORMS="cpu")
    return subprocess.Popen([sys.executable, "-c", SCRIPT, *map(str, args)], cwd=REPO, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


@pytest.mark.slow  # ~1-2 min on a 2-core CPU: three processes compile the model
def test_two_processes_of_four_devices_match_one_device(tmp_path, mdc_path):
    port = _free_port()
    pods = [_run([mdc_path, tmp_path / "pod", p, 2, port], devices=4) for p in range(2)]
    single = _run([mdc_path, tmp_path / "one", 0, 1, port], devices=1)
    for proc in (*pods, single):
        output, _ = proc.communicate(timeout=900)
        assert proc.returncode == 0, output[-4000:]
    pod = json.loads((tmp_path / "pod.json").read_text())
    one = json.loads((tmp_path / "one.json").read_text())
    assert pod["devices"] == 8 and one["devices"] == 1
    np.testing.assert_allclose(pod["losses"], one["losses"], rtol=1e-5)
    np.testing.assert_allclose(pod["grad_norm"], one["grad_norm"], rtol=1e-5)
    with np.load(tmp_path / "pod.npz") as a, np.load(tmp_path / "one.npz") as b:
        assert a.files == b.files
        for name in a.files:
            np.testing.assert_allclose(a[name], b[name], atol=1e-5)


def test_two_processes_of_the_train_command_train_save_and_finish(tmp_path):
    """The pod path as a user starts it: two `python -m bapjax.train` processes joined by
    `--config.distributed.*` on localhost train a tiny quickstart, save a checkpoint, and each
    ends with its own final line (process 0 the summary, process 1 its line); no traceback."""
    from tests.two_processes import free_port, start_training
    env = dict(os.environ, BAPJAX_CACHE=str(tmp_path / "cache"), JAX_PLATFORMS="cpu")
    procs, logs = start_training(tmp_path, free_port(), env, 2, "run")
    for proc, log in zip(procs, logs):
        try:
            proc.wait(timeout=240)
        except subprocess.TimeoutExpired:
            for p in procs:
                p.kill()
            pytest.fail(f"waited 240 s for both processes to finish; {log.name} ends: {log.read_text()[-2000:]}")
    outputs = [log.read_text() for log in logs]
    for proc, output in zip(procs, outputs):
        assert proc.returncode == 0 and "Traceback" not in output, output[-3000:]
    assert "run finished:" in outputs[0] and "batch 8 over 2 devices" in outputs[0], outputs[0][-3000:]
    assert outputs[1].strip().splitlines()[-1].startswith("process 1 of 2: finished"), outputs[1][-3000:]
    saved = {p.name for p in (tmp_path / "run" / "checkpoints" / "latest").iterdir()}
    assert "2" in saved, saved


def test_a_process_that_cannot_reach_its_coordinator_says_so_in_one_line(tmp_path):
    """Process 1 of a job whose coordinator never answers ends in one line naming itself, the
    address and the wait, with the exit status of a lost process, before it asks JAX anything."""
    port = _free_port()  # nothing listens there
    result = subprocess.run(
        [sys.executable, "-m", "bapjax.train", "--config=configs/quickstart.py", f"--workdir={tmp_path / 'run'}",
         "--config.distributed.initialize=True", f"--config.distributed.coordinator_address=localhost:{port}",
         "--config.distributed.num_processes=2", "--config.distributed.process_id=1",
         "--config.distributed.initialization_timeout=2"],
        cwd=REPO, env=dict(os.environ, BAPJAX_CACHE=str(tmp_path / "cache"), JAX_PLATFORMS="cpu"),
        capture_output=True, text=True, timeout=120)
    from bapjax.errors import ProcessesNotJoined
    assert result.returncode == ProcessesNotJoined.exit_status, result.stderr[-2000:]
    lines = (result.stdout + result.stderr).strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: process 1 of 2 could not join"), lines
    assert f"localhost:{port}" in lines[0] and "initialization_timeout" in lines[0]
    assert not (tmp_path / "run").exists()


@pytest.mark.slow  # ~3 min on a 2-core CPU: a two-process run, then two one-process resumes
def test_a_run_of_two_processes_of_two_devices_resumes_on_one_device_and_on_four(tmp_path):
    """Elastic resume: a run saved by 2 processes x 2 CPU devices goes on from its saved step on
    1 process of 1 device and on 1 process of 4 devices. The data order is the same global batches
    whatever the process and device counts (`DataIterator`), so both resumes take the same step's
    batch and their first losses agree to float rounding (the rows are packed per device)."""
    from tests.two_processes import SMALL_RUN, SMALL_SOURCES, free_port, start_training
    env = dict(os.environ, BAPJAX_CACHE=str(tmp_path / "cache"), JAX_PLATFORMS="cpu")
    procs, logs = start_training(tmp_path, free_port(), env, 3, "pair", "--config.cpu_devices=2")
    for proc, log in zip(procs, logs):
        proc.wait(timeout=600)
        assert proc.returncode == 0, log.read_text()[-3000:]
    assert "batch 8 over 4 devices" in logs[0].read_text()
    saved = tmp_path / "saved"
    shutil.copytree(tmp_path / "run", saved)
    losses = {}
    for devices in (1, 4):
        workdir = tmp_path / f"resumed{devices}"
        shutil.copytree(saved, workdir)
        command = [sys.executable, "-m", "bapjax.train", "--config=configs/quickstart.py", f"--workdir={workdir}",
                   *[a for a in SMALL_RUN if not a.startswith("--config.train.max_steps")],
                   "--config.eval.final_splits=()", "--config.train.eval_every_steps=5", "--config.train.max_steps=5",
                   f"--config.cpu_devices={devices}", *SMALL_SOURCES]
        done = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
        assert "resumed from step 3" in done.stdout and f"over {devices} devices" in done.stdout, done.stdout[-2000:]
        rows = [json.loads(line) for line in (workdir / "metrics.jsonl").read_text().splitlines()]
        losses[devices] = {row["step"]: row["loss"] for row in rows if row.get("kind") == "train"}
        assert {3, 4, 5} <= set(losses[devices]), losses[devices]
    assert losses[1][3] == losses[4][3]  # the saved run's own record, carried over
    np.testing.assert_allclose(losses[1][4], losses[4][4], rtol=1e-5)
