"""Data parallelism: a training step on 8 (forced host) devices equals the 1-device step (for the
paper's per-step world encoding and for world_encoding "once", whose devices each encode only
their own items' start worlds)."""

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

SCRIPT = textwrap.dedent('''
    import jax, numpy as np
    assert jax.device_count() == 8, jax.devices()
    from bapjax import sharding
    from bapjax.training import loop as train
    from bapjax.training import optimizer as optim, run_checks
    from tests.test_models import flat_model

    tc = run_checks.with_defaults({"train": dict(learning_rate=1e-3, weight_decay=0.1, grad_clip=5.0)}).train
    model = flat_model(vocab_size=30, embedding_dim=8, text_hidden=16, world_features=8,
                                 world_layers=2, action_embedding=16, decoder_hidden=16, head_hidden=16,
                                 **MODEL_OPTIONS)
    optimizer = optim.make_optimizer(tc)
    rng = np.random.default_rng(0)
    B, T = 16, 5
    batches = []
    for _ in range(2):
        actions = np.full((B, T), 7623, np.int32)
        mask = np.zeros((B, T), bool)
        for b in range(B):
            n = rng.integers(0, T)
            actions[b, :n] = rng.integers(0, 7623, size=n)
            mask[b, :n + 1] = True
        batches.append({
            "text_tokens": rng.integers(2, 30, size=(B, 7)).astype(np.int32),
            "text_mask": np.ones((B, 7), bool),
            "grid": rng.integers(0, 2, size=(B, 11, 9, 11)).astype(np.int8),
            "recent_cells": rng.integers(-1, 1089, size=(B, 4)).astype(np.int32),
            "pose": rng.normal(size=(B, 5)).astype(np.float32),
            "actions": actions, "action_mask": mask,
            "weight": (np.arange(B) < B - 2).astype(np.float32),  # two padding rows
        })

    def run(devices):
        mesh = sharding.data_mesh(devices)
        trainer = train.Trainer(model, optimizer, mesh)
        state = sharding.replicate(train.create_state(model, optimizer, jax.random.PRNGKey(0), None), mesh)
        for batch in batches:
            state, metrics = trainer.train(state, batch)
        return jax.device_get(state["params"]), float(metrics["loss"]), state, float(metrics["grad_norm"])

    params1, loss1, _, norm1 = run(jax.devices()[:1])
    params8, loss8, state8, norm8 = run(jax.devices())
    assert abs(norm1 - norm8) < 1e-5 * max(1.0, norm1), (norm1, norm8)  # gradients summed once
    leaf = jax.tree_util.tree_leaves(state8["params"])[0]
    assert len(leaf.sharding.device_set) == 8 and leaf.sharding.is_fully_replicated
    diffs = jax.tree_util.tree_map(lambda a, b: float(np.max(np.abs(a - b))), params1, params8)
    worst = max(jax.tree_util.tree_leaves(diffs))
    print("max param diff", worst, "losses", loss1, loss8)
    assert abs(loss1 - loss8) < 1e-5, (loss1, loss8)
    assert worst < 1e-5, diffs
    try:
        sharding.check_batch_size(12, sharding.data_mesh())
        raise SystemExit("a batch of 12 over 8 devices was accepted")
    except ValueError:
        pass
    print("OK")
''')


@pytest.mark.parametrize("options", [pytest.param({}, marks=pytest.mark.slow),  # fast: the shipped model's
                                     {"world_encoding": "once", "world_film": True, "encode_chunk": 2,
                                      "step_chunk": 4}])
def test_eight_devices_match_one_device(options):
    env = dict(os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=8", JAX_PLATFORMS="cpu")
    script = f"MODEL_OPTIONS = {options!r}\n" + SCRIPT
    result = subprocess.run([sys.executable, "-c", script], cwd=REPO, env=env, capture_output=True,
                            text=True, timeout=900)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "OK" in result.stdout



CPU_DEVICES = textwrap.dedent('''
    import jax, pytest
    from bapjax import sharding
    sharding.set_cpu_devices(0)  # leaves JAX's default: nothing is set, JAX has not started
    sharding.set_cpu_devices(3)
    assert jax.device_count() == 3 and len(sharding.data_mesh().devices) == 3, jax.devices()
    sharding.set_cpu_devices(3)  # started with this many: nothing to do
    with pytest.raises(ValueError, match="already started with 3 CPU device"):
        sharding.set_cpu_devices(2)
    print("OK")
''')


def test_cpu_devices_split_the_host_before_jax_starts_and_refuse_a_late_change():
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"} | {"JAX_PLATFORMS": "cpu"}
    result = subprocess.run([sys.executable, "-c", CPU_DEVICES], cwd=REPO, env=env, capture_output=True, text=True,
                            timeout=300)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "OK" in result.stdout


def test_the_train_command_refuses_a_negative_cpu_device_count_in_one_line(tmp_path):
    """`python -m bapjax.train` applies config.cpu_devices before JAX starts; a negative count is a config error."""
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    result = subprocess.run([sys.executable, "-m", "bapjax.train", "--config=quickstart", "--config.cpu_devices=-1",
                             f"--workdir={tmp_path / 'run'}"], cwd=REPO, env=env, capture_output=True, text=True,
                            timeout=600)
    assert result.returncode == 2, result.stdout[-2000:] + result.stderr[-2000:]
    assert "--config.cpu_devices=-1 is out of range" in result.stderr
    assert "Traceback" not in result.stderr and not (tmp_path / "run").exists()


RUNS_CPU_DEVICES = textwrap.dedent('''
    import json, pathlib, sys, jax
    from bapjax.training import run_eval
    root = pathlib.Path(sys.argv[1])
    for name, count in (("a", 2), ("b", 3), ("c", None)):
        (root / name).mkdir()
        (root / name / "config.json").write_text(json.dumps({} if count is None else {"cpu_devices": count}))
        (root / name / "vocab.json").write_text("{}")
    paths = [str(root / "a"), str(root / "b" / "checkpoints" / "best"), str(root / "c"), str(root / "nosuch")]
    assert run_eval.use_runs_cpu_devices(paths) == 3  # the most any run trained on; a non-run is left alone
    assert jax.device_count() == 3, jax.devices()
    assert run_eval.use_runs_cpu_devices([str(root / "a")]) == 2  # JAX started: its devices stay, no error
    assert jax.device_count() == 3
    print("OK")
''')


def test_commands_that_decode_runs_split_the_cpu_as_the_runs_were_trained(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"} | {"JAX_PLATFORMS": "cpu"}
    result = subprocess.run([sys.executable, "-c", RUNS_CPU_DEVICES, str(tmp_path)], cwd=REPO, env=env,
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "OK" in result.stdout
