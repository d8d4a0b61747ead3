"""Action-sequence decoders behind one interface: a GRU (baseline) and a Transformer.

Both expose
  initial_state(summary [B, H], token_states [B, L, H], token_mask [B, L], max_steps, input_dim) -> state
  sequence(state, inputs [B, T, D], token_states, token_mask) -> outputs [B, T, H]   (teacher forcing)
  step(state, t [B], inputs_t [B, D], token_states, token_mask) -> (state, output_t [B, H])  (decoding;
      t is each row's step, since decoding slots run at different steps)
so the builder (and a later BERT encoder) can swap them. `sequence` and T calls of `step` give
the same outputs (tested).
"""

from __future__ import annotations

import flax.linen as nn
import jax.numpy as jnp


class GRUActionDecoder(nn.Module):
    """GRU over embedded previous actions; its input also carries the dialogue summary."""

    hidden: int = 300
    unroll: int = 1  # GRU steps per iteration of teacher forcing's loop (`nn.scan`)
    dtype: jnp.dtype = jnp.float32  # the compute dtype; the parameters stay float32

    def setup(self):
        self.cell = nn.GRUCell(self.hidden, dtype=self.dtype, name="cell")
        self.init_proj = nn.Dense(self.hidden, dtype=self.dtype, name="init_proj")

    def initial_state(self, summary, token_states, token_mask, max_steps: int, input_dim: int):
        del token_states, token_mask, max_steps, input_dim
        return {"carry": jnp.tanh(self.init_proj(summary)), "summary": summary}

    def step(self, state, t, inputs_t, token_states, token_mask):
        del t, token_states, token_mask
        x = jnp.concatenate([inputs_t, state["summary"]], axis=-1)
        carry, out = self.cell(state["carry"], x)
        return {"carry": carry, "summary": state["summary"]}, out

    def sequence(self, state, inputs, token_states, token_mask):
        def body(cell, carry, x):
            x = jnp.concatenate([x, state["summary"]], axis=-1)
            return cell(carry, x)

        scan = nn.scan(body, variable_broadcast="params", split_rngs={"params": False},
                       in_axes=1, out_axes=1, unroll=self.unroll)
        _, outs = scan(self.cell, state["carry"], inputs)
        return outs


class _DecoderLayer(nn.Module):
    width: int
    heads: int
    mlp_dim: int
    dropout: float = 0.0
    dtype: jnp.dtype = jnp.float32

    @nn.compact
    def __call__(self, x, self_mask, memory, memory_mask, deterministic=True):
        h = nn.LayerNorm(dtype=self.dtype, name="ln_self")(x)
        h = nn.MultiHeadDotProductAttention(self.heads, dropout_rate=self.dropout, dtype=self.dtype, name="self_attn")(
            h, h, mask=self_mask, deterministic=deterministic)
        x = x + h
        h = nn.LayerNorm(dtype=self.dtype, name="ln_cross")(x)
        h = nn.MultiHeadDotProductAttention(self.heads, dropout_rate=self.dropout, dtype=self.dtype, name="cross_attn")(
            h, memory, mask=memory_mask, deterministic=deterministic)
        x = x + h
        h = nn.LayerNorm(dtype=self.dtype, name="ln_mlp")(x)
        h = nn.Dense(self.mlp_dim, dtype=self.dtype, name="mlp_in")(h)
        h = nn.Dense(self.width, dtype=self.dtype, name="mlp_out")(nn.gelu(h))
        return x + h


class TransformerActionDecoder(nn.Module):
    """Pre-LN causal Transformer decoder over action embeddings, cross-attending to the text.

    `width` is the projection size of the text states (the paper's BERT projection, 256) and the
    decoder width; `layers` the depth (paper: 5). Decoding keeps a fixed buffer of T inputs and
    recomputes the causal stack per step (T <= 21, so this is cheap next to the world CNN).
    """

    layers: int = 5
    width: int = 256
    heads: int = 4
    mlp_dim: int = 1024
    max_len: int = 32
    hidden: int = 256  # output size (a projection of the last layer)
    dtype: jnp.dtype = jnp.float32  # the compute dtype; the parameters stay float32

    def setup(self):
        self.memory_proj = nn.Dense(self.width, dtype=self.dtype, name="memory_proj")
        self.input_proj = nn.Dense(self.width, dtype=self.dtype, name="input_proj")
        self.pos = self.param("pos_embedding", nn.initializers.normal(0.02), (self.max_len, self.width))
        self.blocks = [_DecoderLayer(self.width, self.heads, self.mlp_dim, dtype=self.dtype, name=f"layer{i}")
                       for i in range(self.layers)]
        self.final_ln = nn.LayerNorm(dtype=self.dtype, name="final_ln")
        self.out_proj = nn.Dense(self.hidden, dtype=self.dtype, name="out_proj")

    def _run(self, inputs, token_states, token_mask):
        steps = inputs.shape[1]
        if steps > self.max_len:
            raise ValueError(f"decoder max_len {self.max_len} < {steps} steps")
        x = self.input_proj(inputs) + self.pos[None, :steps].astype(self.dtype)
        memory = self.memory_proj(token_states)
        self_mask = nn.make_causal_mask(jnp.ones(inputs.shape[:2], bool))
        memory_mask = nn.make_attention_mask(jnp.ones(inputs.shape[:2], bool), token_mask)
        for block in self.blocks:
            x = block(x, self_mask, memory, memory_mask)
        return self.out_proj(self.final_ln(x))

    def initial_state(self, summary, token_states, token_mask, max_steps: int, input_dim: int):
        del token_states, token_mask
        return {"buffer": jnp.zeros((summary.shape[0], max_steps, input_dim), summary.dtype)}

    def step(self, state, t, inputs_t, token_states, token_mask):
        t = jnp.broadcast_to(jnp.asarray(t, jnp.int32), inputs_t.shape[:1])
        at_t = (jnp.arange(state["buffer"].shape[1])[None, :] == t[:, None])[..., None]  # [B, T, 1]
        buffer = jnp.where(at_t, inputs_t[:, None].astype(state["buffer"].dtype), state["buffer"])
        outs = self._run(buffer, token_states, token_mask)
        out_t = jnp.take_along_axis(outs, t[:, None, None], axis=1)[:, 0]
        return {"buffer": buffer}, out_t

    def sequence(self, state, inputs, token_states, token_mask):
        del state
        return self._run(inputs, token_states, token_mask)
