"""`model.text.vocab_multiple`: the embedding table rounded up to a multiple of rows trains exactly
as the table of the vocabulary's own size (the rows past it stay zero), so runs whose vocabularies
differ by a few tokens build one program."""

import jax
import numpy as np
import pytest

from bapjax import sharding
from bapjax.models import builder
from bapjax.training import loop, run_checks
from bapjax.training import optimizer as optim
from tests.test_models import model_section, random_batch

VOCAB = 30
FIELDS = dict(embedding_dim=8, text_hidden=8, world_features=4, world_layers=1, action_embedding=8,
            decoder_hidden=8, head_hidden=8, world_encoding="once")


def section_with(vocab_multiple: int) -> dict:
    section = model_section(**FIELDS)
    section["text"]["vocab_multiple"] = vocab_multiple
    return section


def table(params):
    return np.asarray(params["text_encoder"]["embed"]["embedding"])


def other_leaves(params) -> list:
    return [leaf for path, leaf in jax.tree_util.tree_leaves_with_path(params)
            if "embed" not in jax.tree_util.keystr(path)]


@pytest.mark.parametrize("glove", [False, True])
def test_a_rounded_table_trains_as_the_vocabularys_own(glove):
    tc = run_checks.with_defaults({"train": dict(learning_rate=3e-3)}).train
    optimizer = optim.make_optimizer(tc)
    mesh = sharding.data_mesh(jax.devices()[:1])
    rng = np.random.default_rng(2)
    matrix = rng.normal(size=(VOCAB, 8)).astype(np.float32) if glove else None
    batches = [random_batch(rng, batch=8, text_len=6, steps=4, vocab=VOCAB) for _ in range(4)]

    def run(vocab_multiple):
        model = builder.build_model(section_with(vocab_multiple), VOCAB)
        trainer = loop.Trainer(model, optimizer, mesh, ema_decay=0.9)
        state = sharding.replicate(loop.create_state(model, optimizer, jax.random.PRNGKey(0), matrix, 0.9), mesh)
        start = jax.device_get(state["params"])
        losses = []
        for batch in batches:
            state, metrics = trainer.train(state, batch)
            losses.append(float(jax.device_get(metrics["loss"])))
        return start, jax.device_get(state), losses

    own_start, own, own_losses = run(1)
    start, rounded, losses = run(16)
    assert table(own_start).shape == (VOCAB, 8) and table(start).shape == (32, 8)
    np.testing.assert_array_equal(table(start)[:VOCAB], table(own_start))  # the same initial vocabulary rows
    assert losses == own_losses
    for key in ("params", "ema_params"):
        np.testing.assert_array_equal(table(rounded[key])[:VOCAB], table(own[key]))
        assert not table(rounded[key])[VOCAB:].any()  # never read, never moved (weight decay of zero included)
        for a, b in zip(other_leaves(rounded[key]), other_leaves(own[key])):
            np.testing.assert_array_equal(a, b)


def test_vocabularies_a_few_tokens_apart_build_the_same_parameter_shapes():
    section = section_with(256)
    shapes = [jax.eval_shape(lambda v=v: builder.init_params(builder.build_model(section, v), jax.random.PRNGKey(0)))
              for v in (1909, 1910)]
    assert jax.tree_util.tree_structure(shapes[0]) == jax.tree_util.tree_structure(shapes[1])
    assert [s.shape for s in jax.tree_util.tree_leaves(shapes[0])] == [s.shape for s in jax.tree_util.tree_leaves(shapes[1])]
    assert shapes[0]["text_encoder"]["embed"]["embedding"].shape == (2048, 8)


def test_vocab_multiple_below_one_is_one_line_naming_it():
    with pytest.raises(builder.ModelConfigError, match="vocab_multiple"):
        builder.build_model(section_with(0), VOCAB)
