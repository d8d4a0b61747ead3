"""The length head: it adds only its own parameters and nothing when off; its loss is the cross
entropy of each item's action count; the STOP rule "length" decodes each item's quantile length."""

import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from bapjax.decoding import kernel
from bapjax.decoding.settings import DecodeSettings
from bapjax.models import builder, world_input
from bapjax.world import grid as G
from tests.test_models import flat_model, random_batch

TINY = dict(vocab_size=40, embedding_dim=8, text_hidden=16, world_features=8, world_layers=2,
            action_embedding=16, decoder_hidden=12, head_hidden=16)
ENCODINGS = [dict(world_encoding="once", world_film=True), dict(world_encoding="per_step"),
             dict(world_encoding="per_step", world_film=True)]
# the shipped encoding (once, FiLM) among the fast tests, the others among the slow ones
SHIPPED_FAST = [ENCODINGS[0], *(pytest.param(fields, marks=pytest.mark.slow) for fields in ENCODINGS[1:])]


def _models(**fields):
    return (flat_model(**TINY, **fields, length_head=False),
            flat_model(**TINY, **fields, length_head=True))


def _flat(params):
    return {"/".join(str(getattr(k, "key", k)) for k in path): leaf.shape
            for path, leaf in jax.tree_util.tree_flatten_with_path(params)[0]}


def _without_head(params):
    return {k: v for k, v in params.items() if k not in ("length_hidden", "length_out")}


def _np_ce(logits, targets):
    logits = np.asarray(logits, np.float64)
    top = logits.max(-1, keepdims=True)
    log_z = top[:, 0] + np.log(np.exp(logits - top).sum(-1))
    return log_z - logits[np.arange(len(targets)), targets]


@pytest.mark.parametrize("fields", ENCODINGS)
def test_the_head_adds_only_its_own_parameters(fields):
    off, on = _models(**fields)
    tree_off = _flat(builder.init_params(off, jax.random.PRNGKey(0)))
    tree_on = _flat(builder.init_params(on, jax.random.PRNGKey(0)))
    added = {k: v for k, v in tree_on.items() if k not in tree_off}
    assert {k: tree_on[k] for k in tree_off} == tree_off
    assert added == {"length_hidden/kernel": (TINY["text_hidden"] + TINY["world_features"], TINY["head_hidden"]),
                     "length_hidden/bias": (TINY["head_hidden"],),
                     "length_out/kernel": (TINY["head_hidden"], builder.LENGTH_CLASSES),
                     "length_out/bias": (builder.LENGTH_CLASSES,)}


def _truncated_batch(rng):
    """random_batch rows plus a truncated row (every slot a real action, no STOP) and a padding row."""
    batch = random_batch(rng, batch=5, steps=6)
    batch["actions"][3] = rng.integers(0, G.NUM_ACTIONS, size=6)
    batch["action_mask"][3] = True
    batch["actions"][4], batch["action_mask"][4], batch["weight"][4] = G.STOP, False, 0.0
    batch["action_mask"][0], batch["actions"][0] = False, G.STOP  # a one-action row
    batch["actions"][0, 0], batch["action_mask"][0, :2] = 5, True
    return batch


@pytest.mark.parametrize("fields", SHIPPED_FAST[:2])
def test_with_the_head_off_the_loss_is_the_action_loss_as_before(fields):
    off, on = _models(**fields)
    batch = _truncated_batch(np.random.default_rng(1))
    params = builder.init_params(on, jax.random.PRNGKey(2))
    k = builder.packed_size(batch["action_mask"], batch["weight"])
    logits_off, pack_off = off.apply({"params": _without_head(params)}, batch, k)
    logits_on, pack_on = on.apply({"params": params}, batch, k)
    np.testing.assert_array_equal(np.asarray(logits_off), np.asarray(logits_on))
    assert set(pack_off) == {"targets", "weights", "item", "step"}
    sums_off, sums_on = builder.loss_sums(logits_off, pack_off), builder.loss_sums(logits_on, pack_on)
    assert set(sums_off) == {"loss_sum", "correct_sum", "count"}
    for key in sums_off:
        assert float(sums_off[key]) == float(sums_on[key])
    ce = _np_ce(logits_off, np.asarray(pack_off["targets"]))
    w = np.asarray(pack_off["weights"])
    np.testing.assert_allclose(float(sums_off["loss_sum"]), (ce * w).sum(), rtol=1e-5)
    loss, metrics = builder.loss_from_sums(sums_off, length_loss_weight=0.2)  # no length sums: no length term
    assert float(loss) == float(sums_off["loss_sum"] / sums_off["count"]) and "length_loss" not in metrics
    assert builder.objective_length_weight(off) == 0.0 and builder.objective_length_weight(on) == 0.2


@pytest.mark.parametrize("fields", SHIPPED_FAST)
def test_the_length_loss_is_the_cross_entropy_of_each_items_action_count(fields):
    _, on = _models(**fields)
    batch = _truncated_batch(np.random.default_rng(3))
    params = builder.init_params(on, jax.random.PRNGKey(4))
    k = builder.packed_size(batch["action_mask"], batch["weight"])
    logits, pack = on.apply({"params": params}, batch, k)
    length_logits = np.asarray(pack["length_logits"])
    assert length_logits.shape == (5, builder.LENGTH_CLASSES)
    counts = [int(((a != G.STOP) & m).sum()) for a, m in zip(batch["actions"], batch["action_mask"])]
    assert counts[0] == 1 and counts[3] == 6 and counts[4] == 0
    targets = np.clip(np.array(counts) - 1, 0, builder.LENGTH_CLASSES - 1)
    np.testing.assert_array_equal(np.asarray(pack["length_targets"]), targets)
    w = batch["weight"]
    ce = _np_ce(length_logits, targets)
    sums = builder.loss_sums(logits, pack)
    np.testing.assert_allclose(float(sums["length_loss_sum"]), (ce * w).sum(), rtol=1e-5)
    assert float(sums["length_count"]) == w.sum()
    assert float(sums["length_correct_sum"]) == ((length_logits.argmax(-1) == targets) * w).sum()
    loss, metrics = builder.loss_from_logits(logits, pack, builder.objective_length_weight(on))
    action_loss = float(sums["loss_sum"] / sums["count"])
    np.testing.assert_allclose(float(metrics["loss"]), action_loss, rtol=1e-6)
    np.testing.assert_allclose(float(loss), action_loss + 0.2 * (ce * w).sum() / w.sum(), rtol=1e-5)
    # the head's logits are `length_logits` of the items' start worlds (one method for training and decoding)
    tokens = jnp.asarray(batch["text_tokens"])
    _, summary = on.apply({"params": params}, tokens, jnp.asarray(batch["text_mask"]), method=on.encode_text)
    start = world_input.start_world({k: jnp.asarray(v) for k, v in batch.items()})
    direct = on.apply({"params": params}, summary, start, method=on.length_logits)
    np.testing.assert_allclose(np.asarray(direct), length_logits, rtol=1e-5, atol=1e-5)
    # the head trains: its gradient is not zero
    grads = jax.jit(jax.grad(lambda p: builder.loss_from_logits(*on.apply({"params": p}, batch, k), 0.2)[0]))(params)
    assert float(jnp.abs(grads["length_out"]["kernel"]).sum()) > 0


def _python_quantile(logits, q):
    """The smallest length k (1..20) whose cumulative probability is >= q, in float64."""
    p = np.exp(logits - logits.max())
    p = p / p.sum()
    total = 0.0
    for k, pk in enumerate(p, start=1):
        total += pk
        if total >= q:
            return k
    return len(p)


def _decode_batch(n, rng):
    return {"text_tokens": rng.integers(2, 40, size=(n, 6)).astype(np.int32),
            "text_mask": np.ones((n, 6), bool), "grid": np.zeros((n,) + G.GRID_SHAPE, np.int8),
            "recent_cells": np.full((n, 4), -1, np.int32),
            "pose": np.concatenate([rng.uniform(-6, 6, (n, 3)), rng.uniform(-180, 180, (n, 2))], 1).astype(np.float32),
            "weight": np.ones((n,), np.float32)}


def _length_params(model, seed, length_bias):
    params = jax.tree_util.tree_map(lambda x: x, builder.init_params(model, jax.random.PRNGKey(seed)))
    params["stop_out"]["bias"] = params["stop_out"]["bias"] + 20.0  # argmax alone would stop at once
    params["length_out"]["bias"] = jnp.asarray(length_bias, jnp.float32)
    return params


def _decoded_lengths(ids):
    return [int(np.argmax(row == G.STOP)) if (row == G.STOP).any() else len(row) for row in np.asarray(ids)]


@pytest.mark.parametrize("fields", SHIPPED_FAST)
def test_the_length_rule_decodes_each_items_quantile_length(fields):
    _, model = _models(**fields)
    rng = np.random.default_rng(5)
    batch = _decode_batch(6, rng)
    params = _length_params(model, 6, rng.normal(0, 1.5, builder.LENGTH_CLASSES) - 0.25 * np.arange(20))
    variables = {"params": params}
    _, summary = model.apply(variables, jnp.asarray(batch["text_tokens"]), jnp.asarray(batch["text_mask"]),
                             method=model.encode_text)
    start = world_input.start_world({k: jnp.asarray(v) for k, v in batch.items()})
    length_logits = np.asarray(model.apply(variables, summary, start, method=model.length_logits), np.float64)
    max_actions = 12
    for q in (0.3, 0.5, 0.9, 1.0):
        expected = [min(_python_quantile(row, q), max_actions) for row in length_logits]
        np.testing.assert_array_equal(np.asarray(kernel.length_quantile(jnp.asarray(length_logits), q)),
                                      [_python_quantile(row, q) for row in length_logits])
        fn = DecodeSettings(max_actions, 1, 4, "length", q).decode_fn(model)
        ids = fn(params, batch)
        assert _decoded_lengths(ids) == expected, q
        if q == 0.5:
            assert len(set(expected)) > 1  # the items' lengths differ: each row gets its own


def test_length_rule_lengths_are_capped_at_max_actions():
    _, model = _models(world_encoding="once")
    batch = _decode_batch(3, np.random.default_rng(7))
    bias = np.full(builder.LENGTH_CLASSES, -30.0)
    bias[-1] = 30.0  # ">= 20" for every item
    params = _length_params(model, 8, bias)
    ids = DecodeSettings(5, 0, 2, "length", 0.5).decode_fn(model)(params, batch)
    assert np.asarray(ids).shape == (3, 5) and _decoded_lengths(ids) == [5, 5, 5]
    assert (np.asarray(ids) < G.NUM_ACTIONS).all()


def test_the_length_rule_without_a_length_head_is_refused():
    model, _ = _models(world_encoding="once")
    params = builder.init_params(model, jax.random.PRNGKey(0))
    with pytest.raises(ValueError, match="length head"):
        DecodeSettings(5, 0, 64, "length", 0.5).decode_fn(model)
    with pytest.raises(ValueError, match="length head"):
        kernel.decode_pool(model, params, _decode_batch(2, np.random.default_rng(0)), DecodeSettings(20, 0, 2, "length"))
    with pytest.raises(ValueError, match="in \\(0, 1\\]"):
        kernel.check_stop_rule("length", 0.0)
    DecodeSettings(5, 1, 2, "length", 0.5)  # the rule itself is valid without a model


@pytest.mark.slow  # a short training run with compilation and the STOP-rule choice on val
def test_a_tiny_run_with_the_length_head_trains_and_tunes_length_rules(tmp_path, mdc_path, monkeypatch):
    from bapjax.training import loop
    from tests.test_train import tiny_config

    monkeypatch.setenv("BAPJAX_CACHE", str(tmp_path / "cache"))
    config = tiny_config("unused")
    config.data.sources.mc.corpus = str(mdc_path)
    config.model.length = {"loss_weight": 0.2}  # a length head on the per-step model
    config.eval.stop_thresholds = (0.3,)
    loop.train_and_evaluate(config, tmp_path / "run")
    chosen = json.loads((tmp_path / "run" / "decode.json").read_text())
    rules = [(row["stop_rule"], row["stop_threshold"]) for row in chosen["candidates"]]
    assert rules == [("argmax", 0.5), ("mass", 0.3)] + [("length", q) for q in (0.5, 0.6, 0.7, 0.8)]
    best = max(chosen["candidates"], key=lambda row: row["val_overall_micro_f1"])
    assert (chosen["stop_rule"], chosen["stop_threshold"]) == (best["stop_rule"], best["stop_threshold"])
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert any("length_loss" in row and row["kind"] == "train" for row in rows)
    assert any("length_accuracy" in row and row["kind"] == "val" for row in rows)


