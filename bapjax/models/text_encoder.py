"""Dialogue encoders: a GRU over GloVe-initialised word embeddings (the baseline)."""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp


class GRUTextEncoder(nn.Module):
    """Embeds tokens and runs a (optionally bidirectional) GRU over the unpadded prefix.

    Returns (token states [B, L, H], summary [B, H]); the summary is the last real token's state
    (both directions' finals projected to H when bidirectional). The embedding table is set to
    GloVe after init (`bapjax.models.builder.init_params` with the vocabulary's matrix), which keeps
    big arrays out of the module definition.
    """

    vocab_size: int
    embedding_dim: int = 50
    hidden: int = 300
    bidirectional: bool = False
    train_embeddings: bool = True

    @nn.compact
    def __call__(self, tokens: jax.Array, mask: jax.Array) -> tuple[jax.Array, jax.Array]:
        embed = nn.Embed(self.vocab_size, self.embedding_dim,
                         embedding_init=nn.initializers.normal(0.1), name="embed")
        x = embed(tokens)
        if not self.train_embeddings:
            x = jax.lax.stop_gradient(x)
        lengths = jnp.maximum(mask.sum(-1).astype(jnp.int32), 1)
        fwd_carry, fwd = nn.RNN(nn.GRUCell(self.hidden), return_carry=True, name="gru_fwd")(
            x, seq_lengths=lengths)
        if not self.bidirectional:
            return fwd, fwd_carry
        bwd_carry, bwd = nn.RNN(nn.GRUCell(self.hidden), return_carry=True, reverse=True,
                                keep_order=True, name="gru_bwd")(x, seq_lengths=lengths)
        states = nn.Dense(self.hidden, name="merge_states")(jnp.concatenate([fwd, bwd], -1))
        summary = nn.Dense(self.hidden, name="merge_summary")(jnp.concatenate([fwd_carry, bwd_carry], -1))
        return states, summary
