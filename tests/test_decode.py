"""Greedy decoding: never infeasible, stops at STOP/max length, equals a plain step-by-step loop."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from bapjax.decoding import decode, kernel
from bapjax.decoding.settings import DecodeSettings
from bapjax.errors import UserError
from bapjax.models import builder
from bapjax.world import grid as G
from tests.test_models import flat_model

TINY = dict(vocab_size=30, embedding_dim=8, text_hidden=16, world_features=8, world_layers=2,
            action_embedding=16, decoder_hidden=16, head_hidden=16)


def _batch(grids, rng):
    n = len(grids)
    return {
        "text_tokens": rng.integers(2, 30, size=(n, 6)).astype(np.int32),
        "text_mask": np.ones((n, 6), bool),
        "grid": np.stack(grids).astype(np.int8),
        "recent_cells": np.full((n, 4), -1, np.int32),
        "pose": np.concatenate([rng.uniform(-6, 6, (n, 3)), rng.uniform(-180, 180, (n, 2))], 1).astype(np.float32),
        "weight": np.ones(n, np.float32),
    }


def _grids(rng):
    empty = np.zeros(G.GRID_SHAPE, np.int8)
    # all 20 red blocks on the ground: red placements are out of inventory
    red_full = empty.copy()
    cells = [(i, k) for i in range(11) for k in range(11)][:20]
    for i, k in cells:
        red_full[i, 0, k] = 1
    random_tower = empty.copy()
    random_tower[3:7, 0:3, 4:6] = rng.integers(1, 7, size=(4, 3, 2))
    return [empty, red_full, random_tower, red_full.copy()]


def _biased_params(model, seed, slot_bias):
    """Random params with the per-cell head biased to one slot (e.g. removal or red), so the
    unmasked argmax would often be infeasible."""
    params = builder.init_params(model, jax.random.PRNGKey(seed))
    params = jax.tree_util.tree_map(lambda x: x, params)
    bias = np.zeros(G.ACTIONS_PER_CELL, np.float32)
    bias[slot_bias] = 5.0
    params["head_out"]["bias"] = params["head_out"]["bias"] + bias
    params["stop_out"]["bias"] = params["stop_out"]["bias"] - 5.0  # keep decoding long
    return params


def _check_feasible(grid, ids):
    """Plain-Python feasibility of every step (`bapjax.world.grid.is_feasible` on structure dicts)."""
    structure = {G.index_to_cell(i, j, k): int(c) for (i, j, k), c in np.ndenumerate(grid) if c}
    stopped = False
    for action_id in ids:
        if stopped:
            assert action_id == G.STOP, "an action after STOP"
            continue
        if action_id == G.STOP:
            stopped = True
            continue
        action = G.decode_action(int(action_id))
        if action.type == G.REMOVE:  # a removal removes whatever is there
            action = action._replace(color=structure.get((action.x, action.y, action.z), 0))
        assert action.color != 0 and G.is_feasible(structure, action), (
            action, G.infeasibility_reason(structure, action))
        structure = G.apply_to_structure(structure, action)


@pytest.mark.parametrize("slot_bias", [G.REMOVE_SLOT, 0])
def test_decoding_never_emits_an_infeasible_action(slot_bias):
    rng = np.random.default_rng(slot_bias)
    model = flat_model(**TINY)
    fn = DecodeSettings(12, 0, 64).decode_fn(model)
    batch = _batch(_grids(rng), rng)
    for seed in range(3):
        ids = np.asarray(fn(_biased_params(model, seed, slot_bias), batch))
        assert ids.shape == (4, 12)
        for grid, row in zip(batch["grid"], ids):
            _check_feasible(grid, row)


def test_stops_at_max_length_and_at_stop():
    rng = np.random.default_rng(7)
    model = flat_model(**TINY)
    batch = _batch(_grids(rng)[:2], rng)
    params = _biased_params(model, 0, 0)
    ids = np.asarray(DecodeSettings(5, 0, 64).decode_fn(model)(params, batch))
    assert ids.shape == (2, 5) and (ids < G.NUM_ACTIONS).all()  # STOP strongly disfavoured
    params["stop_out"]["bias"] = params["stop_out"]["bias"] + 1e4  # STOP always wins
    ids = np.asarray(DecodeSettings(5, 0, 64).decode_fn(model)(params, batch))
    assert (ids == G.STOP).all()
    ids = np.asarray(DecodeSettings(5, 1, 64).decode_fn(model)(params, batch))
    assert (ids[:, 0] < G.NUM_ACTIONS).all() and (ids[:, 1:] == G.STOP).all()
    assert decode.ids_to_actions(np.array([5, G.STOP, 7])) == [G.decode_action(5)]
    grid = np.zeros(G.GRID_SHAPE, np.int8)
    place = G.encode_action(G.Action(G.PLACE, 3, 0, 1, 0))
    remove = G.encode_action(G.Action(G.REMOVE, 3, 0, 1, 0))
    assert decode.ids_to_actions(np.array([place, remove, G.STOP]), grid) == [
        G.Action(G.PLACE, 3, 0, 1, 0), G.Action(G.REMOVE, 3, 0, 1, 0)]


def test_a_forced_length_decodes_exactly_that_many_actions():
    """Forced `lengths` k > 0: STOP masked before step k and taken at it, even where the model would
    stop at once or never; 0 leaves the row to the STOP rule; longer than max_actions is capped."""
    rng = np.random.default_rng(3)
    model = flat_model(**TINY)
    batch = _batch(_grids(rng), rng)
    lengths = np.array([1, 3, 0, 9], np.int32)
    fn = DecodeSettings(6, 0, 64).decode_fn(model)
    for stop_bias in (-1e4, 1e4):  # the model never stops / always stops
        params = _biased_params(model, 0, 0)
        params["stop_out"]["bias"] = params["stop_out"]["bias"] + stop_bias + 5.0
        ids = np.asarray(fn(params, batch, kernel.Mode(forced=True), lengths=lengths))
        decoded = [int((row < G.NUM_ACTIONS).sum()) for row in ids]
        unforced = 6 if stop_bias < 0 else 0
        assert decoded == [1, 3, unforced, 6], (stop_bias, decoded)
        for grid, row in zip(batch["grid"], ids):
            _check_feasible(grid, row)


def test_the_arrays_passed_must_be_the_modes():
    """`decode_pool` (and a compiled decoder) takes each optional array exactly when its `Mode`
    says so, in the mode's shape (keys [N, K, 2] with K the draws), else a ValueError names it; a
    teacher-forced mode takes no draws; the batch's `weight` is required."""
    rng = np.random.default_rng(5)
    model = flat_model(**TINY)
    params = builder.init_params(model, jax.random.PRNGKey(0))
    batch = _batch(_grids(rng), rng)  # 4 rows
    settings = DecodeSettings(3, 0, 4)
    fn = settings.decode_fn(model)
    keys, lengths = np.zeros((4, 3, 2), np.uint32), np.ones(4, np.int32)
    for mode, arrays, name in [(kernel.Mode(draws=2), {"sample_keys": keys}, "sample_keys must be"),
                               (kernel.Mode(draws=1), {"sample_keys": keys[:, 0]}, "sample_keys must be"),
                               (kernel.Mode(draws=3), {}, "needs sample_keys"),
                               (kernel.GREEDY, {"sample_keys": keys}, "takes no sample_keys"),
                               (kernel.Mode(forced=True), {}, "needs lengths"),
                               (kernel.Mode(forced=True), {"lengths": lengths[:3]}, "lengths must be"),
                               (kernel.GREEDY, {"lengths": lengths}, "takes no lengths")]:
        with pytest.raises(ValueError, match=name):
            fn(params, batch, mode, **arrays)
        with pytest.raises(ValueError, match=name):
            kernel.decode_pool(model, params, batch, settings, mode, **arrays)
    with pytest.raises(ValueError, match="teacher_actions must be"):  # shorter than max_actions
        kernel.decode_pool(model, params, batch, settings, kernel.Mode(teacher=True),
                           teacher_actions=np.zeros((4, 2), np.int32))
    with pytest.raises(ValueError, match="takes no teacher_actions"):
        kernel.decode_pool(model, params, batch, settings, teacher_actions=np.zeros((4, 3), np.int32))
    with pytest.raises(ValueError, match="needs teacher_actions"):
        fn(params, batch, kernel.Mode(teacher=True))
    with pytest.raises(ValueError, match="takes no draws"):
        kernel.Mode(draws=1, teacher=True)
    with pytest.raises(ValueError, match="int >= 0"):
        kernel.Mode(draws=-1)
    with pytest.raises(KeyError, match="weight"):
        fn(params, {k: v for k, v in batch.items() if k != "weight"})


def test_compiled_decoding_equals_a_plain_python_loop():
    """The reference: call the model's pieces step by step, mask with Python `is_feasible`."""
    rng = np.random.default_rng(3)
    model = flat_model(**TINY)
    params = _biased_params(model, 1, G.REMOVE_SLOT)
    params["stop_out"]["bias"] = params["stop_out"]["bias"] + 4.5  # some items stop early
    batch = _batch(_grids(rng)[2:], rng)
    max_actions = 4
    ids = np.asarray(DecodeSettings(max_actions, 0, 64).decode_fn(model)(params, batch))

    v, M = {"params": params}, builder.BuilderModel
    token_states, summary = model.apply(v, batch["text_tokens"], batch["text_mask"], method=M.encode_text)
    for b in range(len(batch["grid"])):
        sl = slice(b, b + 1)
        state = model.apply(v, summary[sl], token_states[sl], batch["text_mask"][sl], max_actions,
                            method=M.init_decoder)
        grid = batch["grid"][b].copy()
        structure = {G.index_to_cell(i, j, k): int(c) for (i, j, k), c in np.ndenumerate(grid) if c}
        prev, expected = builder.START, []
        recent = list(batch["recent_cells"][b])
        for t in range(max_actions):
            state, out = model.apply(v, state, np.array([t]), np.array([prev]), token_states[sl], batch["text_mask"][sl],
                                     method=M.decoder_step)
            world = {"grid": grid[None], "recent_cells": np.array([recent]), "pose": batch["pose"][sl]}
            feats = model.apply(v, world, out, method=M.encode_world)
            logits = np.asarray(model.apply(v, feats, out, method=M.action_logits))[0]
            order = np.argsort(-logits, kind="stable")
            choice = next(int(a) for a in order
                          if a == G.STOP or G.is_feasible(structure, G.decode_action(int(a), grid)))
            expected.append(choice)
            if choice == G.STOP:
                break
            action = G.decode_action(choice)
            structure = G.apply_to_structure(structure, action)
            i, j, k = G.cell_to_index(action.x, action.y, action.z)
            grid[i, j, k] = 0 if action.type == G.REMOVE else action.color
            prev = choice
            recent = [choice // G.ACTIONS_PER_CELL] + recent[:-1]
        expected += [G.STOP] * (max_actions - len(expected))
        assert ids[b].tolist() == expected


def test_a_pool_with_few_slots_decodes_like_all_items_at_once():
    """Slots refilled as items finish give each item the same sequence as a batch of all items,
    and rows of weight 0 at the end are not decoded."""
    rng = np.random.default_rng(11)
    model = flat_model(**TINY, encode_chunk=2)
    params = _biased_params(model, 2, 0)
    params["stop_out"]["bias"] = params["stop_out"]["bias"] + 7.0  # a mix of lengths
    grids = (_grids(rng) * 3)[:10]
    batch = _batch(grids, rng)
    all_at_once = np.asarray(DecodeSettings(7, 0, 10).decode_fn(model)(params, batch))
    lengths = (all_at_once < G.NUM_ACTIONS).sum(1)
    assert lengths.min() < lengths.max()
    for slots in (1, 3, 4):
        np.testing.assert_array_equal(np.asarray(DecodeSettings(7, 0, slots).decode_fn(model)(params, batch)),
                                      all_at_once)
    batch["weight"] = (np.arange(10) < 7).astype(np.float32)
    ids = np.asarray(DecodeSettings(7, 0, 3).decode_fn(model)(params, batch))
    np.testing.assert_array_equal(ids[:7], all_at_once[:7])
    assert (ids[7:] == G.STOP).all()


def randomize_film(params, seed=0):
    """FiLM layers start at zero (no effect); give them weights so a test can see them."""
    rng = np.random.default_rng(seed)
    cnn = dict(params["world_cnn"])
    for name in [n for n in cnn if n.startswith("film")]:
        cnn[name] = {k: jnp.asarray(rng.normal(0, 0.3, v.shape), jnp.float32) for k, v in cnn[name].items()}
    return {**params, "world_cnn": cnn}


# among the fast tests: the shipped model (once, FiLM) and the other decoder; the rest with -m slow
@pytest.mark.parametrize("decoder,options", [pytest.param("gru", {}, marks=pytest.mark.slow), ("transformer", {}),
                                             pytest.param("gru", {"world_film": True}, marks=pytest.mark.slow),
                                             ("gru", {"world_film": True, "world_encoding": "once"})])
def test_decoding_sees_the_same_inputs_as_teacher_forcing(decoder, options, mdc_corpus):
    """Forced decoding of the gold actions gives, step by step, the teacher-forcing logits: the
    world (colors and recent-action channel after the actions so far), pose channels and decoder
    state that decoding feeds the model are exactly teacher forcing's (world_encoding "once": the
    start-world encodings and the change features since)."""
    from bapjax.data import input_pipeline
    from bapjax.text.vocab import Vocabulary

    items = [it for it in mdc_corpus.split("val") if len(it.reference_actions) >= 3][:5]
    vocab = Vocabulary.build(items)
    fc = input_pipeline.FeatureConfig(max_text_tokens=32, max_actions=6, recent_window=4)
    batch = input_pipeline.expand_batch(input_pipeline.featurize_items(items, vocab, fc), np.arange(5), fc)
    assert (batch["recent_cells"] >= 0).any()
    model = flat_model(**{**TINY, "vocab_size": vocab.size}, decoder=decoder, encode_chunk=4,
                                 transformer_layers=2, transformer_width=16, transformer_heads=2, transformer_mlp=32,
                                 **options)
    params = randomize_film(builder.init_params(model, jax.random.PRNGKey(4)))
    steps = fc.num_action_slots
    k = int(batch["action_mask"].sum())
    tf_logits, pack = model.apply({"params": params}, batch, k)
    keys = ("text_tokens", "text_mask", "grid", "recent_cells", "pose", "weight")
    ids, step_logits = kernel.decode_pool(model, params, {key: batch[key] for key in keys}, DecodeSettings(steps, 0, 2),
                                          kernel.Mode(teacher=True), teacher_actions=batch["actions"])
    np.testing.assert_array_equal(np.asarray(ids)[batch["action_mask"]], batch["actions"][batch["action_mask"]])
    for row, (b, t) in enumerate(zip(np.asarray(pack["item"]), np.asarray(pack["step"]))):
        np.testing.assert_allclose(np.asarray(step_logits)[b, t], np.asarray(tf_logits)[row], rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("threshold", [0.5, 0.2])
def test_mass_stop_rule_matches_a_plain_reference(threshold):
    rng = np.random.default_rng(12)
    logits = rng.normal(size=(40, G.NUM_ACTIONS_WITH_STOP)).astype(np.float32)
    logits[:, G.STOP] += rng.uniform(0, 12, size=40)
    feasible = rng.random((40, G.NUM_ACTIONS_WITH_STOP)) < 0.05
    feasible[:10, G.STOP] = False
    got = np.asarray(kernel.choose_actions(jnp.asarray(logits), jnp.asarray(feasible), "mass", threshold))
    for row in range(40):
        actions = [a for a in range(G.NUM_ACTIONS) if feasible[row, a]]
        p_actions = sum(np.exp(float(logits[row, a])) for a in actions)
        p_stop = np.exp(float(logits[row, G.STOP]))
        stop = feasible[row, G.STOP] and p_stop / (p_stop + p_actions) >= threshold
        want = G.STOP if stop else max(actions, key=lambda a: logits[row, a])
        assert got[row] == want
    assert (got == G.STOP).any() and (got != G.STOP).any()


def test_the_thresholds_of_one_stop_rule_share_one_compiled_program():
    """Decoders of one STOP rule at other thresholds share a `compiled_decoder` (one program per
    call shape) and decode what the threshold written into the program decodes; the thresholds
    matter here (the STOP logit biased so that they give other lengths)."""
    rng = np.random.default_rng(3)
    model = flat_model(**TINY)
    batch = _batch(_grids(rng), rng)
    params = builder.init_params(model, jax.random.PRNGKey(2))
    params["stop_out"]["bias"] = params["stop_out"]["bias"] + 5.5
    base = DecodeSettings(12, 1, 3, "mass")
    compiled = base.compiled_decoder(model)
    lengths = set()
    for threshold in (0.1, 0.2, 0.3, 0.4, 0.5):
        settings = base.replace(stop_threshold=threshold)
        assert settings.program() == base.program()
        shared = np.asarray(settings.decode_fn(model, compiled=compiled)(params, batch))
        written = np.asarray(jax.jit(lambda p, b: kernel.decode_pool(model, p, b, settings))(params, batch))
        np.testing.assert_array_equal(shared, written, err_msg=str(threshold))
        lengths.add(tuple((shared == G.STOP).argmax(-1)))
    assert len(lengths) > 2
    assert compiled._cache_size() == 1
    assert base.replace(stop_rule="argmax").program() != base.program()


@pytest.mark.parametrize("name", ["quickstart", "cpu", "cpu_experiment:agg,0", "cl"])
def test_the_configs_mass_thresholds_have_the_same_log_at_run_time(name):
    """The compiled decoder takes the mass rule's log(threshold) at run time (`choose_actions` with
    a traced threshold); for every threshold a config tries it equals the log XLA folds at compile
    time, so the thresholds decode as when each was written into its own program."""
    from bapjax.cli import load_config
    from bapjax.training import run_checks

    config = run_checks.with_defaults(load_config(name))
    thresholds = {float(t) for t in config.eval.stop_thresholds} | {float(config.eval.stop_threshold)}
    run_time = jax.jit(jnp.log)
    for t in sorted(thresholds):
        folded = jax.jit(lambda: jnp.log(jnp.float32(t)))()
        assert np.asarray(folded).view(np.int32) == np.asarray(run_time(np.float32(t))).view(np.int32), t


@pytest.mark.parametrize("flags, message", [
    ({"samples": -1}, "--samples: the number of samples must be an integer >= 0 (0: greedy only), got -1"),
    ({"samples": 4, "temperature": 0.0}, "--temperature: the sampling temperature must be > 0, got 0.0"),
    ({"cost": 1.0}, "--cost: the rule select's cost or share must be in [0, 1), got 1.0"),
    ({"stop_rule": "median"}, "--stop_rule/--stop_threshold: the STOP rule must be argmax, mass or length, "
                              "got 'median'"),
    ({"stop_threshold": 1.5}, "--stop_rule/--stop_threshold: the STOP threshold must be in (0, 1], got 1.5"),
])
def test_decoding_flags_are_checked_by_one_rule_naming_the_flag_at_fault(flags, message):
    DecodeSettings.check_flags(8, 0.8, 0.1, "mass", 0.3)
    DecodeSettings.check_flags()  # nothing given: the run's own
    with pytest.raises(UserError) as err:
        DecodeSettings.check_flags(**flags)
    assert str(err.value) == message
