"""Dialogue encoders: a GRU over GloVe-initialised word embeddings (the baseline)."""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp

from bapjax.models.gru import GRUWeights, gru_states


class GRUTextEncoder(nn.Module):
    """Embeds tokens and runs a GRU over the unpadded prefix.

    Returns (token states [B, L, H], summary [B, H]); the summary is the last real token's state.
    The embedding table is set to
    GloVe after init (`bapjax.models.builder.init_params` with the vocabulary's matrix), which keeps
    big arrays out of the module definition.
    """

    vocab_size: int
    embedding_dim: int = 50
    hidden: int = 300
    train_embeddings: bool = True

    @nn.compact
    def __call__(self, tokens: jax.Array, mask: jax.Array) -> tuple[jax.Array, jax.Array]:
        embed = nn.Embed(self.vocab_size, self.embedding_dim,
                         embedding_init=nn.initializers.normal(0.1), name="embed")
        x = embed(tokens)
        if not self.train_embeddings:
            x = jax.lax.stop_gradient(x)
        lengths = jnp.maximum(mask.sum(-1).astype(jnp.int32), 1)
        # the cells' parameters where nn.RNN(nn.GRUCell) kept them, so trees and checkpoints are unchanged
        return _run(GRUWeights(self.hidden, name="GRUCell_0")(x.shape[-1]), x, lengths)


def _run(weights: dict, x: jax.Array, lengths: jax.Array) -> tuple[jax.Array, jax.Array]:
    """(states [B, L, H], the state after each row's last real token [B, H])."""
    states = gru_states(weights, x)
    return states, jnp.take_along_axis(states, (lengths - 1)[:, None, None], axis=1)[:, 0]
