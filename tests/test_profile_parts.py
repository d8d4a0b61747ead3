"""benchmarks/profile_parts.py: its parts, run in the step's order, are the once model's teacher forcing."""

import jax
import numpy as np

from bapjax.models import builder
from benchmarks import profile_parts
from tests.test_models import TINY, flat_model, random_batch


def test_the_parts_compose_to_the_models_logits():
    model = flat_model(**TINY, world_encoding="once", world_film=True, length_head=True, step_chunk=4, encode_chunk=2)
    batch = random_batch(np.random.default_rng(0), batch=3, steps=6)
    params = builder.init_params(model, jax.random.PRNGKey(0))
    k = 8
    fns, data = profile_parts.part_functions(model, batch, k)
    inputs, logits = profile_parts.part_inputs(model, params, fns, data)
    expected, pack = model.apply({"params": params}, batch, k)
    np.testing.assert_allclose(np.asarray(logits), np.asarray(expected), rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(np.asarray(data["pack"]["targets"]), np.asarray(pack["targets"]))
    assert set(inputs) == {"text", "decoder", "world CNN", "changes", "heads"}
