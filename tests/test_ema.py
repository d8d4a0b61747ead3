"""`train.ema_decay`: the weights' moving average against a plain-Python loop, through the jitted
train step, and as the weights a checkpoint is evaluated and predicted with."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from bapjax import sharding
from bapjax.training import checkpoints, loop, run_checks
from bapjax.training import optimizer as optim
from tests.test_models import flat_model, random_batch


def reference_ema(initial, trained_sequence, decay):
    """The average as the docstrings state it, in float64: d_t = min(decay, (1 + t) / (10 + t))."""
    ema = np.asarray(initial, np.float64)
    for t, params in enumerate(trained_sequence):
        d = min(decay, (1.0 + t) / (optim.EMA_WARMUP + t))
        ema = d * ema + (1.0 - d) * np.asarray(params, np.float64)
    return ema


def test_update_ema_matches_a_python_loop():
    rng = np.random.default_rng(0)
    initial = rng.normal(size=(3, 4)).astype(np.float32)
    sequence = [rng.normal(size=(3, 4)).astype(np.float32) for _ in range(40)]
    for decay in (0.5, 0.9, 0.999):
        ema = {"w": initial}
        for t, params in enumerate(sequence):
            ema = optim.update_ema(ema, {"w": params}, np.int32(t), decay)
        np.testing.assert_allclose(np.asarray(ema["w"]), reference_ema(initial, sequence, decay), rtol=1e-5, atol=1e-6)
    assert float(optim.ema_decay_at(0, 0.999)) == pytest.approx(0.1)  # the first update mostly takes the new weights
    assert float(optim.ema_decay_at(100_000, 0.999)) == pytest.approx(0.999)


@pytest.mark.slow  # compiles two training programs, ~2 min: -m slow
def test_train_step_keeps_the_moving_average_and_trains_the_same_weights(tmp_path):
    """The jitted step's "ema_params" equal the Python loop over the weights each step produced;
    the weights themselves are those of a run without the average; a checkpoint of such a state
    predicts with the average (`checkpoints.load_params`)."""
    tc = run_checks.with_defaults({"train": dict(learning_rate=3e-3)}).train
    model = flat_model(vocab_size=30, embedding_dim=8, text_hidden=8, world_features=4, world_layers=1,
                                 action_embedding=8, decoder_hidden=8, head_hidden=8, world_encoding="once")
    optimizer = optim.make_optimizer(tc)
    mesh = sharding.data_mesh(jax.devices()[:1])
    rng = np.random.default_rng(1)
    batches = [random_batch(rng, batch=8, text_len=6, steps=4, vocab=30) for _ in range(4)]
    decay = 0.6

    def run(ema_decay):
        trainer = loop.Trainer(model, optimizer, mesh, ema_decay=ema_decay)
        state = loop.create_state(model, optimizer, jax.random.PRNGKey(0), None, ema_decay)
        state = sharding.replicate(state, mesh)
        trained = [jax.device_get(state["params"])]
        for batch in batches:
            state, _ = trainer.train(state, batch)
            trained.append(jax.device_get(state["params"]))
        return state, trained

    state, trained = run(decay)
    plain, plain_trained = run(0.0)
    assert "ema_params" not in plain  # off: the state (and its checkpoints) as before the option existed
    flat = [jax.tree_util.tree_leaves(p) for p in trained]
    for i, (ema_leaf, plain_leaf) in enumerate(zip(jax.tree_util.tree_leaves(jax.device_get(state["ema_params"])),
                                                   jax.tree_util.tree_leaves(plain_trained[-1]))):
        expected = reference_ema(flat[0][i], [f[i] for f in flat[1:]], decay)
        np.testing.assert_allclose(np.asarray(ema_leaf), expected, rtol=1e-4, atol=1e-6)
        np.testing.assert_array_equal(np.asarray(flat[-1][i]), np.asarray(plain_leaf))
    assert any(not np.array_equal(a, b) for a, b in zip(jax.tree_util.tree_leaves(state["ema_params"]), flat[-1]))
    assert checkpoints.evaluation_params(state) is state["ema_params"]
    assert checkpoints.evaluation_params(plain) is plain["params"]

    ckpts = checkpoints.Checkpoints(tmp_path)
    ckpts.save(ckpts.best, state, {"iterator": {}})
    ckpts.close()
    loaded, step = checkpoints.load_params(tmp_path)
    assert step == len(batches)
    for a, b in zip(jax.tree_util.tree_leaves(loaded), jax.tree_util.tree_leaves(state["ema_params"])):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))

    with pytest.raises(ValueError, match="ema_decay"):  # a state and a step built from different settings
        loop.Trainer(model, optimizer, mesh, ema_decay=0.0).train(
            sharding.replicate(loop.create_state(model, optimizer, jax.random.PRNGKey(0), None, decay), mesh),
            batches[0])


def test_load_params_reads_the_named_step(tmp_path):
    """A step directory of a manager (checkpoints/latest/<step>) loads that step, not the newest;
    the run directory loads its best; a damaged step is an error naming it, not another step."""
    ckpts = checkpoints.Checkpoints(tmp_path)
    for step in (4, 8):
        state = {"step": jnp.int32(step), "params": {"w": jnp.full((3,), float(step))},
                 "ema_params": {"w": jnp.full((3,), step + 0.5)}}
        ckpts.save(ckpts.latest, state, {"iterator": {}})
        if step == 4:
            ckpts.save(ckpts.best, state, {"iterator": {}})
    ckpts.close()
    for path, step in ((tmp_path, 4), (tmp_path / "checkpoints" / "latest", 8),
                       (tmp_path / "checkpoints" / "latest" / "4", 4), (tmp_path / "checkpoints" / "latest" / "8", 8)):
        params, loaded = checkpoints.load_params(path)
        assert loaded == step, path
        np.testing.assert_array_equal(np.asarray(params["w"]), np.full((3,), step + 0.5))  # the moving average
    for array in (tmp_path / "checkpoints" / "latest" / "8" / "state").rglob("*"):
        if array.is_file() and array.stat().st_size > 0:
            array.write_bytes(b"damaged")
    with pytest.raises(checkpoints.CheckpointError, match="latest/8: this checkpoint step does not restore"):
        checkpoints.load_params(tmp_path / "checkpoints" / "latest" / "8")


def test_load_params_restores_a_checkpoint_saved_on_more_devices(tmp_path):
    """A run trained on 4 CPU devices (its state replicated over a 4-device mesh) loads in a
    process with fewer devices (analysis tools, a notebook): the target comes from the checkpoint's
    metadata, replicated over this process's devices, not from the saved topology."""
    import os
    import subprocess
    import sys
    saver = f"""
import jax, jax.numpy as jnp
from etils import epath
from bapjax import sharding
from bapjax.training import checkpoints
mesh = sharding.data_mesh()
assert mesh.size == 4, mesh
state = sharding.replicate({{"step": jnp.int32(6), "params": {{"w": jnp.arange(3.0)}},
                            "ema_params": {{"w": jnp.arange(3.0) + 0.25}}}}, mesh)
ckpts = checkpoints.Checkpoints(epath.Path({str(tmp_path)!r}))
ckpts.save(ckpts.best, state, {{"iterator": {{}}}})
ckpts.close()
"""
    env = dict(os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=4", JAX_PLATFORMS="cpu")
    saved = subprocess.run([sys.executable, "-c", saver], env=env, capture_output=True, text=True)
    assert saved.returncode == 0, saved.stderr[-2000:]
    params, step = checkpoints.load_params(tmp_path)
    assert step == 6 and len(jax.local_devices()) != 4
    np.testing.assert_array_equal(np.asarray(params["w"]), np.arange(3.0) + 0.25)
    assert params["w"].sharding.is_fully_replicated
