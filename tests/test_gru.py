"""bapjax.models.gru against Flax's GRUCell (the reference): parameters, states and gradients."""

import chex
import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from bapjax.models import gru
from bapjax.models.text_encoder import GRUTextEncoder

HIDDEN = 12


def test_weights_are_the_flax_cells_parameters_and_initial_values():
    key = jax.random.key(3)
    reference = nn.GRUCell(HIDDEN).init(key, jnp.zeros((2, HIDDEN)), jnp.zeros((2, 7)))
    chex.assert_trees_all_equal(gru.GRUWeights(HIDDEN).init(key, 7), reference)


def _python_loop(cell_params, inputs):
    """nn.GRUCell stepped token by token from a zero state: [B, L, D] -> [B, L, H]."""
    state, states = jnp.zeros((inputs.shape[0], HIDDEN)), []
    for t in range(inputs.shape[1]):
        state, _ = nn.GRUCell(HIDDEN).apply(cell_params, state, inputs[:, t])
        states.append(state)
    return jnp.stack(states, 1)


def test_states_and_gradients_equal_the_flax_cell_step_by_step():
    k1, k2, k3 = jax.random.split(jax.random.key(0), 3)
    inputs = jax.random.normal(k1, (3, 9, 7))
    params = nn.GRUCell(HIDDEN).init(k2, jnp.zeros((3, HIDDEN)), inputs[:, 0])
    params = jax.tree_util.tree_map(lambda p: p + 0.1, params)  # nonzero biases
    readout = jax.random.normal(k3, (3, 9, HIDDEN))

    def loss(fn):
        return lambda p, x: (jnp.tanh(fn(p, x)) * readout).sum()

    ours = lambda p, x: gru.gru_states(gru.GRUWeights(HIDDEN).apply(p, x.shape[-1]), x)  # noqa: E731
    chex.assert_trees_all_close(ours(params, inputs), _python_loop(params, inputs), atol=1e-5, rtol=1e-5)
    got = jax.jit(jax.grad(loss(ours), argnums=(0, 1)))(params, inputs)
    want = jax.grad(loss(_python_loop), argnums=(0, 1))(params, inputs)
    chex.assert_trees_all_close(got, want, atol=1e-4, rtol=1e-4)
    assert min(float(jnp.abs(g).max()) for g in jax.tree_util.tree_leaves(want)) > 1e-3  # every gradient is live


class _FlaxRNNTextEncoder(nn.Module):
    """The text encoder as written with nn.RNN(nn.GRUCell) before bapjax.models.gru: the reference."""

    vocab_size: int
    hidden: int

    @nn.compact
    def __call__(self, tokens, mask):
        x = nn.Embed(self.vocab_size, 50, embedding_init=nn.initializers.normal(0.1), name="embed")(tokens)
        lengths = jnp.maximum(mask.sum(-1).astype(jnp.int32), 1)
        fwd_carry, fwd = nn.RNN(nn.GRUCell(self.hidden), return_carry=True)(x, seq_lengths=lengths)
        return fwd, fwd_carry


def test_text_encoder_equals_flax_rnn_in_values_and_gradients():
    tokens = jax.random.randint(jax.random.key(1), (4, 11), 0, 40)
    lengths = jnp.array([11, 6, 1, 0])  # full, partial, one token, empty (the encoder reads one)
    mask = jnp.arange(11)[None] < lengths[:, None]
    ours = GRUTextEncoder(vocab_size=40, embedding_dim=50, hidden=HIDDEN)
    reference = _FlaxRNNTextEncoder(40, HIDDEN)
    params = ours.init(jax.random.key(2), tokens, mask)
    chex.assert_trees_all_equal(params, reference.init(jax.random.key(2), tokens, mask))
    real = mask[..., None]  # padded positions' states are never read downstream

    def loss(module):
        def fn(p):
            states, summary = module.apply(p, tokens, mask)
            return (jnp.sin(jnp.where(real, states, 0.0)).sum() + jnp.cos(summary).sum()), (states, summary)
        return fn

    (_, (got_states, got_summary)), got_grads = jax.value_and_grad(loss(ours), has_aux=True)(params)
    (_, (want_states, want_summary)), want_grads = jax.value_and_grad(loss(reference), has_aux=True)(params)
    chex.assert_trees_all_close(got_summary, want_summary, atol=1e-5, rtol=1e-5)
    keep = np.asarray(mask)
    chex.assert_trees_all_close(np.asarray(got_states)[keep], np.asarray(want_states)[keep], atol=1e-5, rtol=1e-5)
    chex.assert_trees_all_close(got_grads, want_grads, atol=1e-5, rtol=1e-4)


def test_bench_gru_runs_and_checks_agreement(tmp_path):
    from benchmarks import bench_gru

    result = bench_gru.main(["--batch", "2", "--tokens", "5", "--hidden", "4", "--rounds", "1",
                             "--out", str(tmp_path / "gru.json")])
    assert result["max_rel_diff"] < 1e-4 and result["fwd_bwd_ratio"] > 0
    assert (tmp_path / "gru.json").exists()
