"""Builder model pieces against plain references; overfitting a few real items; finite loss on
references that are unsupported as recorded."""

import dataclasses

import chex
import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from bapjax.models import builder, world_input
from bapjax.models.world_cnn import Conv3DIm2Col
from bapjax.world import grid as G

TINY = dict(vocab_size=40, embedding_dim=8, text_hidden=16, world_features=8, world_layers=2,
            action_embedding=16, decoder_hidden=16, head_hidden=16, transformer_layers=2,
            transformer_width=16, transformer_heads=2, transformer_mlp=32)


# `flat_model`'s keywords: the part field each sets ("name": the architecture)
KEYWORDS = {
    "world_encoding": "name", "text_encoder": "text.encoder", "embedding_dim": "text.embedding_dim",
    "text_hidden": "text.hidden", "world_features": "world.features", "world_layers": "world.layers",
    "kernel_size": "world.kernel_size", "conv_impl": "world.conv_impl", "world_film": "world.film",
    "use_perspective": "world.perspective", "perspective_scale": "world.perspective_scale",
    "recent_decay": "world.recent_decay", "encode_chunk": "world.encode_chunk",
    "change_kernel": "world.change_kernel", "step_chunk": "world.step_chunk",
    "decoder": "decoder.kind", "action_embedding": "decoder.action_embedding", "decoder_hidden": "decoder.hidden",
    "transformer_layers": "decoder.layers", "transformer_width": "decoder.width",
    "transformer_heads": "decoder.heads", "transformer_mlp": "decoder.mlp", "head_hidden": "heads.hidden",
    "length_loss_weight": "length.loss_weight",
}


def model_section(**fields) -> dict:
    """A model section from one keyword per part field (`KEYWORDS`, e.g. `world_features=8`,
    `world_encoding="once"`; `length_head=True` adds the length part), every other field at its
    part's default. A field of a part kind the model does not have (e.g. `transformer_layers`
    with the GRU decoder) is left out; an unknown keyword stays at the top, so `build_model` names it."""
    length_head = bool(fields.pop("length_head", False))
    if not length_head:
        fields.pop("length_loss_weight", None)
    section: dict = {"length": {}} if length_head else {}
    for key, value in fields.items():
        part, _, field = KEYWORDS.get(key, key).partition(".")
        if field:
            section.setdefault(part, {})[field] = value
        else:
            section[part] = value
    return builder.complete_section(section)


def flat_model(vocab_size: int, **fields):
    """The model of `model_section(**fields)` (one keyword per part field)."""
    return builder.build_model(model_section(**fields), vocab_size)


def with_world(model, **fields):
    """`model` with these fields of its world part changed (e.g. encode_chunk)."""
    return model.clone(world=dataclasses.replace(model.world, **fields))


def _random_recent_cells(rng, batch, window=4):
    cells = rng.integers(0, G.NUM_CELLS, size=(batch, window)).astype(np.int32)
    cells[rng.random((batch, window)) < 0.3] = -1
    return cells


def random_batch(rng, batch=3, text_len=10, steps=6, vocab=40):
    grids = np.zeros((batch,) + G.GRID_SHAPE, np.int8)
    grids[:, :, 0, :] = rng.integers(0, 3, size=(batch, 11, 11))
    actions = np.full((batch, steps), G.STOP, np.int32)
    mask = np.zeros((batch, steps), bool)
    for b in range(batch):
        n = rng.integers(0, steps)
        actions[b, :n] = rng.integers(0, G.NUM_ACTIONS, size=n)
        mask[b, :n + 1] = True
    return {
        "text_tokens": rng.integers(2, vocab, size=(batch, text_len)).astype(np.int32),
        "text_mask": np.arange(text_len)[None] < rng.integers(1, text_len + 1, size=(batch, 1)),
        "grid": grids, "recent_cells": _random_recent_cells(rng, batch),
        "pose": np.concatenate([rng.uniform(-6, 6, (batch, 3)), rng.uniform(-180, 180, (batch, 1)),
                                rng.uniform(-60, 60, (batch, 1))], 1).astype(np.float32),
        "actions": actions, "action_mask": mask, "weight": np.ones((batch,), np.float32),
    }


def test_im2col_conv_equals_flax_conv():
    x = np.random.default_rng(0).normal(size=(2, 11, 9, 11, 5)).astype(np.float32)
    layer = Conv3DIm2Col(4)
    params = layer.init(jax.random.PRNGKey(0), x)
    ref = nn.Conv(4, (3, 3, 3), padding="SAME").apply(params, x)
    np.testing.assert_allclose(layer.apply(params, x), ref, atol=1e-5)
    from bapjax.models import world_cnn
    for k in (1, 3, 5):  # the patch matrix built axis by axis equals the one slice per offset
        np.testing.assert_array_equal(world_cnn.patches(jnp.asarray(x), k), world_cnn.patches_reference(jnp.asarray(x), k))
        # the convolution (x-offsets summed after the GEMM) equals the one-GEMM form over the whole patch matrix
        kernel = np.random.default_rng(k).normal(size=(k, k, k, 5, 4)).astype(np.float32)
        one_gemm = world_cnn.patches_reference(jnp.asarray(x), k).reshape(-1, k ** 3 * 5) @ kernel.reshape(-1, 4)
        np.testing.assert_allclose(world_cnn.conv3d_im2col(jnp.asarray(x), jnp.asarray(kernel)),
                                   np.asarray(one_gemm).reshape(x.shape[:4] + (4,)), rtol=1e-5, atol=1e-4)


def test_action_features_match_plain_reference():
    ids = np.array([0, 6, 7 * 500 + 3, G.NUM_ACTIONS - 1, G.STOP, builder.START])
    feats = np.asarray(builder.action_features(jnp.asarray(ids)))
    for row, action_id in zip(feats, ids):
        expected = np.zeros(13, np.float32)
        if action_id == builder.START:
            expected[0] = 1
        elif action_id == G.STOP:
            expected[1] = 1
        else:
            action = G.decode_action(int(action_id))
            expected[2 if action.type == G.PLACE else 3] = 1
            if action.type == G.PLACE:
                expected[4 + action.color - 1] = 1
            expected[10:] = [action.x / 5, (action.y - 5) / 4, action.z / 5]
        np.testing.assert_allclose(row, expected, atol=1e-6)


def test_action_logits_follow_the_codec_order():
    """Logit cell*7+slot must be the unit-conv output at that cell (plain NumPy head)."""
    model = flat_model(**TINY)
    params = builder.init_params(model, jax.random.PRNGKey(1))
    rng = np.random.default_rng(1)
    feats = rng.normal(size=(2,) + G.GRID_SHAPE + (8,)).astype(np.float32)
    state = rng.normal(size=(2, 16)).astype(np.float32)
    logits = np.asarray(model.apply({"params": params}, feats, state, method=type(model).action_logits))
    chex.assert_shape(logits, (2, G.NUM_ACTIONS_WITH_STOP))
    p = jax.tree_util.tree_map(np.asarray, params)
    for trial in range(20):
        b, action_id = trial % 2, int(rng.integers(0, G.NUM_ACTIONS))
        action = G.decode_action(action_id)
        i, j, k = G.cell_to_index(action.x, action.y, action.z)
        slot = G.REMOVE_SLOT if action.type == G.REMOVE else action.color - 1
        h = feats[b, i, j, k] @ p["head_world0"]["kernel"] + p["head_world0"]["bias"]
        h = h + state[b] @ p["head_state"]["kernel"]
        out = np.maximum(h, 0) @ p["head_out"]["kernel"] + p["head_out"]["bias"]
        np.testing.assert_allclose(logits[b, action_id], out[slot], rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("decoder", ["gru", "transformer"])
def test_decoder_sequence_equals_step_by_step(decoder):
    model = flat_model(**TINY, decoder=decoder)
    params = builder.init_params(model, jax.random.PRNGKey(2))
    batch = random_batch(np.random.default_rng(2))
    v = {"params": params}
    M = type(model)
    token_states, summary = model.apply(v, batch["text_tokens"], batch["text_mask"], method=M.encode_text)
    steps = batch["actions"].shape[1]
    prev = np.concatenate([np.full((3, 1), builder.START), batch["actions"][:, :-1]], 1)
    state = model.apply(v, summary, token_states, batch["text_mask"], steps, method=M.init_decoder)
    seq = model.apply(v, state, prev, token_states, batch["text_mask"], method=M.decoder_sequence)
    outs = []
    for t in range(steps):
        state, out = model.apply(v, state, t, prev[:, t], token_states, batch["text_mask"], method=M.decoder_step)
        outs.append(out)
    np.testing.assert_allclose(np.stack(outs, 1), seq, rtol=1e-4, atol=1e-5)


def _reference_recent(cells, decay):
    """Plain Python: decay**k on the cell of the k-th newest action, the newest weight winning."""
    out = np.zeros(G.NUM_CELLS, np.float32)
    for age in range(len(cells) - 1, -1, -1):
        if cells[age] >= 0:
            out[cells[age]] = decay ** age
    return out.reshape(G.GRID_SHAPE)


def test_worlds_before_each_step_match_python():
    """Colors and the recent-action cells before each step, against a plain loop that applies
    each action and pushes its cell in front of the recent list."""
    rng = np.random.default_rng(3)
    batch = random_batch(rng)
    worlds = world_input.worlds_before_each_step(world_input.start_world(batch), jnp.asarray(batch["actions"]))
    grids, recents = np.asarray(worlds["grid"]), np.asarray(worlds["recent_cells"])
    for b in range(3):
        current, cells = batch["grid"][b].copy(), list(batch["recent_cells"][b])
        for t, action_id in enumerate(batch["actions"][b]):
            np.testing.assert_array_equal(grids[b, t], current)
            assert recents[b, t].tolist() == cells
            np.testing.assert_allclose(np.asarray(world_input.recent_weights(jnp.asarray(recents[b, t]), 0.5)),
                                       _reference_recent(cells, 0.5))
            if action_id < G.NUM_ACTIONS:
                a = G.decode_action(int(action_id))
                i, j, k = G.cell_to_index(a.x, a.y, a.z)
                current[i, j, k] = 0 if a.type == G.REMOVE else a.color
                cells = [int(action_id) // G.ACTIONS_PER_CELL] + cells[:-1]


def test_chunked_world_encoding_equals_one_pack():
    """encode_chunk only changes how the packed worlds are computed, not the logits or gradients."""
    batch = random_batch(np.random.default_rng(8), batch=4, steps=6)
    whole = flat_model(**TINY)
    params = builder.init_params(whole, jax.random.PRNGKey(3))
    k = 24

    def logits_and_grads(model):  # each compiled as one program (faster than op by op)
        logits = jax.jit(lambda p: model.apply({"params": p}, batch, k)[0])(params)
        grads = jax.jit(jax.grad(lambda p: builder.loss_from_logits(*model.apply({"params": p}, batch, k))[0]))(params)
        return logits, grads

    whole_logits, whole_grads = logits_and_grads(whole)
    for chunk in (4, 5):  # 5 does not divide the pack: padded internally
        logits, grads = logits_and_grads(flat_model(**TINY, encode_chunk=chunk))
        np.testing.assert_allclose(logits, whole_logits, rtol=1e-5, atol=1e-5)
        for a, b in zip(*(jax.tree_util.tree_leaves(g) for g in (whole_grads, grads))):
            np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6)


def test_pack_steps_matches_python_and_packed_size_covers_targets():
    rng = np.random.default_rng(4)
    for _ in range(10):
        mask = rng.random((6, 7)) < 0.4
        weight = (rng.random(6) < 0.8).astype(np.float32)
        k = builder.packed_size(mask, weight, multiple=4)
        pack = builder.pack_steps(jnp.asarray(mask), jnp.asarray(weight), k)
        expected = [(b, t) for b in range(6) for t in range(7) if mask[b, t] and weight[b] > 0]
        assert k >= len(expected) and k % 4 == 0
        got = [(int(b), int(t)) for b, t, w in zip(pack["item"], pack["step"], pack["weights"]) if w > 0]
        assert got == expected
        for shards in (2, 3):  # per-device packs: each block of 6 / shards rows fits
            k = builder.packed_size(mask, weight, multiple=4, shards=shards)
            blocks = (mask & (weight[:, None] > 0)).sum(1).reshape(shards, -1).sum(1)
            assert k == max(4, -(-int(blocks.max()) // 4) * 4)


def test_power_of_two_packs_are_the_smallest_bucket_that_holds_the_targets():
    rng = np.random.default_rng(5)
    sizes = {"multiple": set(), "power_of_two": set()}
    for _ in range(200):
        mask = rng.random((16, 12)) < rng.random()
        weight = (rng.random(16) < 0.9).astype(np.float32)
        needed = int((mask & (weight[:, None] > 0)).sum())
        buckets = [4 * 2 ** k for k in range(8)]  # the plain statement: 4, 8, 16, ..., capped at the 192 rows
        expected = min(next(b for b in buckets if b >= max(needed, 1)), 192)
        k = builder.packed_size(mask, weight, multiple=4, rounding="power_of_two")
        assert k == expected and k >= needed
        sizes["power_of_two"].add(k)
        sizes["multiple"].add(builder.packed_size(mask, weight, multiple=4))
    assert sizes["power_of_two"] <= {4, 8, 16, 32, 64, 128, 192}
    assert len(sizes["power_of_two"]) < len(sizes["multiple"])
    with pytest.raises(ValueError, match="pack rounding 'pow2'"):
        builder.packed_size(mask, weight, multiple=4, rounding="pow2")


@pytest.mark.parametrize("setting, platform, expected", [
    ("auto", "cpu", "multiple"), ("auto", "gpu", "power_of_two"), ("auto", "tpu", "power_of_two"),
    ("multiple", "gpu", "multiple"), ("power_of_two", "cpu", "power_of_two")])
def test_auto_pack_rounding_pads_on_accelerators_only(setting, platform, expected):
    assert builder.resolve_pack_rounding(setting, platform) == expected


def test_a_cpu_trainer_packs_auto_as_multiple():
    from bapjax import sharding
    from bapjax.training import loop, run_checks
    from bapjax.training import optimizer as optim

    config = run_checks.with_defaults({"train": {}})
    model = builder.build_model(config.model, 30)
    mesh = sharding.data_mesh(jax.devices()[:1])
    trainer = loop.Trainer(model, optim.make_optimizer(config.train), mesh)
    assert trainer.pack_rounding == "multiple"
    with pytest.raises(ValueError, match="pack rounding 'pow2'"):
        builder.resolve_pack_rounding("pow2", "cpu")


def test_balanced_order_evens_out_the_device_blocks():
    from bapjax import sharding

    rng = np.random.default_rng(9)
    for _ in range(20):
        costs = rng.integers(0, 22, size=32)
        order = sharding.balanced_order(costs, 8)
        assert sorted(order.tolist()) == list(range(32))
        loads = costs[order].reshape(8, 4).sum(1)
        assert loads.max() - loads.min() <= costs.max()
        assert loads.max() <= costs.reshape(8, 4).sum(1).max()


def test_transformer_and_gru_share_the_interface_in_teacher_forcing():
    batch = random_batch(np.random.default_rng(5))
    for decoder in ("gru", "transformer"):
        model = flat_model(**TINY, decoder=decoder)
        params = builder.init_params(model, jax.random.PRNGKey(0))
        logits, pack = model.apply({"params": params}, batch, 32)
        chex.assert_shape(logits, (32, G.NUM_ACTIONS_WITH_STOP))
        loss, _ = builder.loss_from_logits(logits, pack)
        assert np.isfinite(float(loss))


# ---------------------------------------------------------------------------------------------
# Real MDC items


def _unsupported_reference_items(items):
    """Items whose reference has a step infeasible on the world it meets (as recorded)."""
    from bapjax.world.grid import as_structure

    found = []
    for item in items:
        structure = dict(as_structure(item.prev_structure))
        bad = []
        for step, action in enumerate(item.reference_actions):
            if not G.is_feasible(structure, action):
                bad.append(step)
            structure = G.apply_to_structure(structure, action)
        if bad:
            found.append((item, bad))
    return found


def test_loss_is_finite_on_references_unsupported_as_recorded(mdc_corpus):
    from bapjax.data import input_pipeline
    from bapjax.text.vocab import Vocabulary

    all_items = [it for split in ("train", "val", "test") for it in mdc_corpus.split(split)]
    found = _unsupported_reference_items(all_items)
    assert len(found) >= 1 and sum(len(bad) for _, bad in found) >= 1
    items = [it for it, _ in found]
    vocab = Vocabulary.build(items)
    fc = input_pipeline.FeatureConfig(max_text_tokens=64)
    table = input_pipeline.featurize_items(items, vocab, fc)
    batch = input_pipeline.expand_batch(table, np.arange(len(items)), fc)
    model = flat_model(**{**TINY, "vocab_size": vocab.size, "embedding_dim": 8})
    params = builder.init_params(model, jax.random.PRNGKey(0))
    k = builder.packed_size(batch["action_mask"], batch["weight"])
    logits, pack = jax.jit(lambda p: model.apply({"params": p}, batch, k))(params)  # one compiled program
    loss, _ = builder.loss_from_logits(logits, pack)
    assert np.isfinite(float(loss))
    # the infeasible reference actions are targets with weight (never masked out of the loss)
    targets = {(int(b), int(t)) for b, t, w in zip(pack["item"], pack["step"], pack["weights"]) if w > 0}
    for row, (_, bad) in enumerate(found):
        for step in bad:
            if step < fc.num_action_slots:
                assert (row, step) in targets
    grads = jax.jit(jax.grad(lambda p: builder.loss_from_logits(*model.apply({"params": p}, batch, k))[0]))(params)
    assert all(np.isfinite(np.asarray(g)).all() for g in jax.tree_util.tree_leaves(grads))


@pytest.mark.slow  # ~1 min on an idle 2-core CPU (compiles + up to 300 steps)
def test_model_overfits_a_few_items_to_exact_predictions(mdc_corpus):
    """Strict F1 = 1.0 on four short real items after training on them alone."""
    import optax

    from bapjax.data import input_pipeline
    from bapjax.decoding import decode
    from bapjax.decoding.settings import DecodeSettings
    from bapjax.evaluation import evaluator
    from bapjax.text.vocab import Vocabulary

    items = [it for it in mdc_corpus.split("train") if 1 <= len(it.reference_actions) <= 3][:4]
    vocab = Vocabulary.build(items)
    fc = input_pipeline.FeatureConfig(max_text_tokens=48, max_actions=4)
    table = input_pipeline.featurize_items(items, vocab, fc)
    batch = input_pipeline.expand_batch(table, np.arange(len(items)), fc)
    model = flat_model(**{**TINY, "vocab_size": vocab.size, "world_features": 12,
                                    "text_hidden": 32, "decoder_hidden": 32, "head_hidden": 32})
    params = builder.init_params(model, jax.random.PRNGKey(0))
    optimizer = optax.adam(3e-3)
    opt_state = optimizer.init(params)
    k = builder.packed_size(batch["action_mask"], batch["weight"])

    @jax.jit
    def step(params, opt_state):
        loss, grads = jax.value_and_grad(
            lambda p: builder.loss_from_logits(*model.apply({"params": p}, batch, k))[0])(params)
        updates, opt_state = optimizer.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss

    for _ in range(300):
        params, opt_state, loss = step(params, opt_state)
        if float(loss) < 0.01:
            break
    predictions = decode.predict_items(model, params, items, vocab, fc, DecodeSettings(6, 0, 4))
    report = evaluator.evaluate_predictions(items, predictions)
    assert report["strict_micro"] == pytest.approx(1.0), (float(loss), predictions)


def test_film_scales_and_shifts_each_layer_as_written():
    """WorldCNN with `film` = conv, then x * (1 + gamma) + beta with (gamma, beta) a Dense of the
    condition, then ReLU, layer by layer; zero-initialized FiLM leaves the CNN unconditioned, and
    without `film` the condition is not read."""
    from bapjax.models.world_cnn import WorldCNN

    rng = np.random.default_rng(6)
    x = jnp.asarray(rng.normal(size=(3,) + G.GRID_SHAPE + (5,)), jnp.float32)
    cond = jnp.asarray(rng.normal(size=(3, 7)), jnp.float32)
    cnn = WorldCNN(features=4, num_layers=2, film=True)
    params = cnn.init(jax.random.PRNGKey(0), x, cond)["params"]
    plain = WorldCNN(features=4, num_layers=2)
    unconditioned = {k: v for k, v in params.items() if not k.startswith("film")}
    assert set(plain.init(jax.random.PRNGKey(0), x, cond)["params"]) == set(unconditioned)
    np.testing.assert_allclose(cnn.apply({"params": params}, x, cond),
                               plain.apply({"params": unconditioned}, x, cond), rtol=1e-6, atol=1e-6)
    params = jax.tree_util.tree_map(lambda p: p + jnp.asarray(rng.normal(0, 0.5, p.shape), p.dtype), params)
    want = x
    for layer in range(2):
        conv = Conv3DIm2Col(4).apply({"params": params[f"conv{layer}"]}, want)
        film = cond @ params[f"film{layer}"]["kernel"] + params[f"film{layer}"]["bias"]
        gamma, beta = np.split(np.asarray(film), 2, axis=-1)
        want = jnp.maximum(conv * (1 + gamma[:, None, None, None]) + beta[:, None, None, None], 0)
    np.testing.assert_allclose(cnn.apply({"params": params}, x, cond), want, rtol=1e-5, atol=1e-5)
