"""The model's compute dtype (`config.model.dtype`) and its GRU scans' `unroll`: bfloat16 keeps float32
parameters, gradients and logits and stays within a stated tolerance of float32; unrolled scans are
the same function."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from bapjax.decoding.settings import DecodeSettings
from bapjax.models import builder
from bapjax.models.gru import GRUWeights, gru_states
from tests.test_models import TINY, model_section, random_batch

# bfloat16 keeps 8 bits of mantissa (relative rounding 2^-9 = 0.2%). On these tiny models (seeds 0-2) the
# loss moved by at most 1.2e-4 of itself and the whole gradient kept a cosine of at least 0.984 with
# float32's (0.979 before the world CNN's bias gradient summed in float32): the bounds leave margin
LOSS_RTOL = 1e-3
GRAD_COSINE = 0.975

ARCHITECTURES = {
    "per_step gru": dict(world_encoding="per_step"),
    "per_step film transformer": dict(world_encoding="per_step", world_film=True, decoder="transformer"),
    "once length head": dict(world_encoding="once", world_film=True, length_head=True, step_chunk=4, encode_chunk=2),
}


def _tiny(architecture: str, **fields):
    values = {k: v for k, v in TINY.items() if k != "vocab_size"}
    if ARCHITECTURES[architecture].get("decoder") != "transformer":
        values = {k: v for k, v in values.items() if not k.startswith("transformer")}
    section = model_section(**values, **ARCHITECTURES[architecture])
    section.update(fields.pop("top", {}))
    for part, more in fields.items():
        section[part].update(more)
    return builder.build_model(section, TINY["vocab_size"])


def _loss_and_grads(model, params, batch):
    def loss(p):
        logits, pack = model.apply({"params": p}, batch, 16)
        return builder.loss_from_logits(logits, pack, builder.objective_length_weight(model))[0], logits

    (value, logits), grads = jax.value_and_grad(loss, has_aux=True)(params)
    return value, grads, logits


def _flat(tree):
    return np.concatenate([np.asarray(x, np.float64).ravel() for x in jax.tree_util.tree_leaves(tree)])


# bfloat16 compiles slowly on the CPU (~30-50 s a model): the Transformer's cases run with -m slow
CASES = [pytest.param(a, marks=pytest.mark.slow) if "transformer" in a else a for a in ARCHITECTURES]


@pytest.mark.parametrize("architecture", CASES)
@pytest.mark.parametrize("seed", [0])  # the seed of the lowest cosines measured
def test_bfloat16_keeps_float32_parameters_and_is_within_tolerance(architecture, seed):
    fp32, bf16 = _tiny(architecture), _tiny(architecture, top={"dtype": "bfloat16"})
    batch = random_batch(np.random.default_rng(seed), batch=4, steps=6, vocab=TINY["vocab_size"])
    params = builder.init_params(fp32, jax.random.PRNGKey(seed))
    assert jax.tree_util.tree_structure(builder.init_params(bf16, jax.random.PRNGKey(seed))) == \
        jax.tree_util.tree_structure(params)  # the same parameter tree: checkpoints are interchangeable
    assert {x.dtype for x in jax.tree_util.tree_leaves(builder.init_params(bf16, jax.random.PRNGKey(seed)))} == \
        {jnp.dtype(jnp.float32)}
    loss32, grads32, logits32 = _loss_and_grads(fp32, params, batch)
    loss16, grads16, logits16 = _loss_and_grads(bf16, params, batch)
    assert logits16.dtype == jnp.float32 and logits32.dtype == jnp.float32
    assert {x.dtype for x in jax.tree_util.tree_leaves(grads16)} == {jnp.dtype(jnp.float32)}
    assert np.isfinite(float(loss16))
    assert float(loss16) == pytest.approx(float(loss32), rel=LOSS_RTOL)
    g32, g16 = _flat(grads32), _flat(grads16)
    cosine = g32 @ g16 / (np.linalg.norm(g32) * np.linalg.norm(g16))
    assert cosine >= GRAD_COSINE, cosine
    assert not np.array_equal(np.asarray(logits16), np.asarray(logits32))  # bfloat16 did run


@pytest.mark.parametrize("architecture", CASES)
def test_bfloat16_decodes(architecture):
    model = _tiny(architecture, top={"dtype": "bfloat16"})
    params = builder.init_params(model, jax.random.PRNGKey(0))
    batch = random_batch(np.random.default_rng(0), batch=3, steps=6, vocab=TINY["vocab_size"])
    batch = {k: v for k, v in batch.items() if k not in ("actions", "action_mask")}
    ids = np.asarray(DecodeSettings(5, 0, 64).decode_fn(model)(params, batch))
    assert ids.shape == (3, 5) and ids.dtype.kind == "i"


def test_float32_is_the_default_and_other_dtypes_are_refused():
    assert builder.model_section()["dtype"] == "float32"
    assert _tiny("per_step gru").dtype == "float32"
    with pytest.raises(builder.ModelConfigError, match="model.dtype='float16'.*float32, bfloat16"):
        _tiny("per_step gru", top={"dtype": "float16"})
    for part in ("text", "decoder"):
        with pytest.raises(builder.ModelConfigError, match=f"model.{part}.unroll=0"):
            _tiny("per_step gru", **{part: {"unroll": 0}})


def test_unrolled_text_gru_is_the_same_function():
    rng = np.random.default_rng(0)
    x = jnp.asarray(rng.normal(size=(3, 10, 8)).astype(np.float32))
    weights = GRUWeights(16).apply(GRUWeights(16).init(jax.random.PRNGKey(0), 8), 8)

    def run(unroll):
        return jax.value_and_grad(lambda w, xs: (gru_states(w, xs, unroll) ** 2).sum(), argnums=(0, 1))(weights, x)

    (value1, grads1) = run(1)
    for unroll in (3, 10):  # 3 does not divide the 10 steps
        value, grads = run(unroll)
        np.testing.assert_allclose(value, value1, rtol=1e-6)
        np.testing.assert_allclose(_flat(grads), _flat(grads1), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("architecture", ["per_step gru", "once length head"])
def test_unrolled_scans_train_the_same_model(architecture):
    base = _tiny(architecture)
    unrolled = _tiny(architecture, text={"unroll": 4}, decoder={"unroll": 4})
    batch = random_batch(np.random.default_rng(1), batch=4, steps=6, vocab=TINY["vocab_size"])
    params = builder.init_params(base, jax.random.PRNGKey(1))
    loss1, grads1, _ = _loss_and_grads(base, params, batch)
    loss4, grads4, _ = _loss_and_grads(unrolled, params, batch)
    np.testing.assert_allclose(float(loss4), float(loss1), rtol=1e-6)
    np.testing.assert_allclose(_flat(grads4), _flat(grads1), rtol=1e-4, atol=1e-6)
