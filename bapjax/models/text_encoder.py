"""Dialogue encoders: a GRU over GloVe-initialised word embeddings (the baseline)."""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp

from bapjax.models.gru import GRUWeights, gru_states


class GRUTextEncoder(nn.Module):
    """Embeds tokens and runs a GRU over the unpadded prefix.

    Returns (token states [B, L, H], summary [B, H]); the summary is the last real token's state.
    The embedding table has `table_rows` rows (0: `vocab_size`); rows past the vocabulary start at
    zero (the vocabulary's rows are initialised as without them) and no token id reads them. It is set to
    GloVe after init (`bapjax.models.builder.init_params` with the vocabulary's matrix), which keeps
    big arrays out of the module definition.
    """

    vocab_size: int
    embedding_dim: int = 50
    hidden: int = 300
    train_embeddings: bool = True
    table_rows: int = 0
    unroll: int = 1  # GRU steps per loop iteration (`gru_states`)
    dtype: jnp.dtype = jnp.float32  # the compute dtype; the parameters stay float32

    @nn.compact
    def __call__(self, tokens: jax.Array, mask: jax.Array) -> tuple[jax.Array, jax.Array]:
        rows = self.table_rows or self.vocab_size
        if rows < self.vocab_size:
            raise ValueError(f"table_rows={rows} < vocab_size={self.vocab_size}")
        init = nn.initializers.normal(0.1)
        if rows > self.vocab_size:
            init = _zero_rows_past(init, self.vocab_size)
        embed = nn.Embed(rows, self.embedding_dim, embedding_init=init, dtype=self.dtype, name="embed")
        x = embed(tokens)
        if not self.train_embeddings:
            x = jax.lax.stop_gradient(x)
        lengths = jnp.maximum(mask.sum(-1).astype(jnp.int32), 1)
        # the cells' parameters where nn.RNN(nn.GRUCell) kept them, so trees and checkpoints are unchanged
        weights = GRUWeights(self.hidden, name="GRUCell_0")(x.shape[-1])
        return _run(jax.tree_util.tree_map(lambda w: w.astype(self.dtype), weights), x, lengths, self.unroll)


def _zero_rows_past(init, used: int):
    """`init` over the first `used` rows (the values it gives a table of exactly those rows), zeros below."""
    def padded(key, shape, dtype=jnp.float32):
        return jnp.pad(init(key, (used, *shape[1:]), dtype), ((0, shape[0] - used), (0, 0)))
    return padded


def _run(weights: dict, x: jax.Array, lengths: jax.Array, unroll: int = 1) -> tuple[jax.Array, jax.Array]:
    """(states [B, L, H], the state after each row's last real token [B, H])."""
    states = gru_states(weights, x, unroll)
    return states, jnp.take_along_axis(states, (lengths - 1)[:, None, None], axis=1)[:, 0]
