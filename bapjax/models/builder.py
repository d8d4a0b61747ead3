"""The builder model: dialogue encoder + world CNN + action decoder + per-cell action head.

Action logits come from unit (1x1x1) convolutions over [world features ; decoder state] at every
cell, 7 per cell (slots 0..5 place color 1..6, slot 6 remove), flattened cell-major so index
cell * 7 + slot is exactly `bapjax.world.grid`'s action id; a STOP logit comes from the decoder state
and a max-pool of the world features. Teacher forcing encodes the world after the gold actions
< t for decoder step t (`world_input.worlds_before_each_step`; `world_input` owns everything
the CNN sees); only the (item, step) pairs that carry a target are encoded ("packing"), because the
world CNN dominates the cost. The model works on the rows it is given: under data parallelism
each device calls it on its own rows (`bapjax.training.sharding.per_device`), so each device packs and
encodes only its own pairs. The packed encodings run through the CNN and the head in chunks of
`encode_chunk` (rematerialized in the backward pass): on CPU this keeps the im2col buffers small
and reused instead of gigabytes allocated and faulted in per step. With `world_encoding="once"`
(`bapjax.models.world_changes`) the CNN instead encodes each item's start world once (FiLM on the
text summary) and each packed step adds features of what changed since, so a step costs no CNN.

Construction: the `BuilderModel` field defaults are the model's defaults, given once. A config's
`model` section (`bapjax.training.run_config.paper_model`, `configs/common.py`'s CPU models) starts from
them (`model_defaults`) and overrides by field name; `build_model` is
`BuilderModel(vocab_size=..., **config.model)` and names any unknown field (`ModelConfigError`).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax

from bapjax.errors import UserError
from bapjax.models import world_changes, world_input
from bapjax.models.decoders import GRUActionDecoder, TransformerActionDecoder
from bapjax.models.text_encoder import GRUTextEncoder
from bapjax.models.world_cnn import WorldCNN, conv3d_im2col
from bapjax.text.encoders import GRU_TEXT, text_encoder_features
from bapjax.world import grid as G

START = G.NUM_ACTIONS_WITH_STOP  # 7624: the decoder's input before the first action
ACTION_FEATURES = 13
LENGTH_CLASSES = 20  # the length head's classes: k actions is class k - 1, the last class ">= 20"


def action_features(action_ids: jax.Array) -> jax.Array:
    """Feature vectors [..., 13] for action ids (or START/STOP): start, stop, place, remove,
    one-hot color (6), x/5, (y-5)/4, z/5 of the cell."""
    ids = action_ids.astype(jnp.int32)
    is_start = ids == START
    is_stop = ids == G.STOP
    is_action = (ids >= 0) & (ids < G.NUM_ACTIONS)
    decoded = G.decode_action_array(jnp.where(is_action, ids, 0))  # [..., 5]: type, color, x, y, z
    is_remove = is_action & (decoded[..., 0] == G.REMOVE)
    is_place = is_action & ~is_remove
    color = jax.nn.one_hot(jnp.where(is_place, decoded[..., 1] - 1, -1), G.NUM_COLORS)
    index = decoded[..., 2:] - jnp.array([G.X_MIN, G.Y_MIN, G.Z_MIN], jnp.int32)  # [..., 3] in the grid
    center = jnp.array([(n - 1) // 2 for n in G.GRID_SHAPE], jnp.int32)  # (5, 4, 5)
    coords = (index - center) / center.astype(jnp.float32) * is_action[..., None]
    flags = jnp.stack([is_start, is_stop, is_place, is_remove], -1).astype(jnp.float32)
    return jnp.concatenate([flags, color, coords.astype(jnp.float32)], -1)


class BuilderModel(nn.Module):
    """See the module docstring. These defaults are the model's only defaults: `config.model`
    overrides them by name (`model_defaults`, `build_model`)."""

    vocab_size: int  # from the run's vocabulary, not the config
    embedding_dim: int = 50  # word embeddings: GloVe 6B 50d (the original used 300d glove.42B)
    text_hidden: int = 300  # GRU text encoder width
    bidirectional: bool = False
    world_features: int = 300  # world CNN channels
    world_layers: int = 3  # world CNN layers (the paper model uses 2: run_config.paper_model)
    kernel_size: int = 3
    conv_impl: str = "im2col"  # "im2col" (faster on CPU) or "xla" (nn.Conv; GPU/TPU speed not measured)
    use_perspective: bool = True  # Builder-frame coordinates as 3 more world channels
    use_last_offset: bool = False  # each cell's offset from the newest action as 4 more channels (CPU option)
    world_film: bool = False  # FiLM: every CNN layer scaled/shifted by the decoder state (WorldCNN.film; CPU option)
    action_embedding: int = 300
    decoder: str = "gru"  # or "transformer"
    decoder_hidden: int = 300
    transformer_layers: int = 5  # the transformer_* fields: decoder "transformer" only
    transformer_width: int = 256
    transformer_heads: int = 4
    transformer_mlp: int = 1024
    head_hidden: int = 300
    head_layers: int = 1
    recent_decay: float = 0.5  # weight decay**k of the k-th newest action in the recent-action channel
    perspective_scale: float = 0.1  # scale of the Builder-frame coordinates (world_input)
    encode_chunk: int = 0  # >0: encode packed worlds in chunks of this many (CPU configs: 4); 0: all at once
    chunk_remat: str = "full"  # with encode_chunk, what the backward pass recomputes: "full" (the whole
    # chunk) or "dots" (keep the matmul outputs, recompute only patches and elementwise ops)
    text_encoder: str = "gru"  # "gru": GloVe + GRU over token ids; a frozen encoder's name ("minilm",
    # text.encoders.TEXT_ENCODERS): a projection of its token states, which the features then hold
    world_encoding: str = "per_step"  # "once": the CNN encodes each item's start world once (FiLM on the text
    # summary) and each step adds a convolution of what changed since (world_changes); "per_step": re-encode
    change_kernel: int = 3  # world_encoding "once": kernel of the sparse convolution over changed cells (1: per cell)
    step_chunk: int = 0  # world_encoding "once": >0: the packed steps' change features and head in rematerialized
    # chunks of this many (the head over [steps, 1089, head_hidden] is the step's cost then); 0: all at once
    text_attention: int = 0  # world_encoding "once": >0: each cell of the encoded start world attends to the text's
    # token states (one head, query/key width this; `read_text`), its features plus what it read; 0: off
    length_head: bool = False  # a head predicting each item's action count (LENGTH_CLASSES) for the STOP rule "length"
    length_loss_weight: float = 0.2  # with length_head: objective = action loss + this x length loss
    length_reads_text: bool = False  # with length_head: it also reads an attention pool of the text token states
    mentioned_colors: bool = False  # one more world channel: the cell's color is named in the last Architect turn
    # (world_input.mentioned_cells; the features then write "mentions"); with world_encoding "once" only the start
    # world has it (the change features since are the placed colors, world_changes)
    anchor_heads: int = 0  # world_encoding "once": >0: that many pointers from the text summary over the start world's
    # blocks (or none of them); each cell adds a convolution of where they point (`point_anchors`); 0: off
    anchor_kernel: int = 5  # with anchor_heads: the odd kernel of that convolution (how far from an anchor a cell sees it)

    def setup(self):
        if self.text_encoder == GRU_TEXT:
            self.text_module = GRUTextEncoder(self.vocab_size, self.embedding_dim, self.text_hidden,
                                              self.bidirectional, name="text_encoder")
        else:  # M' (paper 6.3): frozen BERT states -> projection (text_hidden)
            self.text_module = FrozenTextProjection(self.text_hidden, name="text_projection")
        self.world_cnn = WorldCNN(self.world_features, self.world_layers, self.kernel_size,
                                  self.conv_impl, film=self.world_film, name="world_cnn")
        self.action_in = nn.Dense(self.action_embedding, name="action_in")
        self.action_out = nn.Dense(self.action_embedding, name="action_out")
        if self.decoder == "gru":
            self.action_decoder = GRUActionDecoder(self.decoder_hidden, name="decoder")
        elif self.decoder == "transformer":
            self.action_decoder = TransformerActionDecoder(
                self.transformer_layers, self.transformer_width, self.transformer_heads,
                self.transformer_mlp, hidden=self.decoder_hidden, name="decoder")
        else:
            raise ValueError(f"config.model.decoder must be 'gru' or 'transformer', got {self.decoder!r}")
        self.head_world = [nn.Dense(self.head_hidden, name=f"head_world{i}") for i in range(self.head_layers)]
        self.head_state = nn.Dense(self.head_hidden, use_bias=False, name="head_state")
        self.head_out = nn.Dense(G.ACTIONS_PER_CELL, name="head_out")
        self.stop_hidden = nn.Dense(self.head_hidden, name="stop_hidden")
        self.stop_out = nn.Dense(1, name="stop_out")
        if world_changes.check_world_encoding(self.world_encoding) == "once":
            self.change_conv = world_changes.ChangeConv(self.world_features, self.change_kernel, name="world_changes")
        if self.text_attention:
            self.cell_text_attention = nn.MultiHeadDotProductAttention(
                num_heads=1, qkv_features=self.text_attention, out_features=self.world_features,
                name="cell_text_attention")
        if self.anchor_heads:
            self.anchor_query = nn.Dense(self.anchor_heads * self.world_features, name="anchor_query")
            self.anchor_key = nn.Dense(self.anchor_heads * self.world_features, name="anchor_key")
            self.anchor_none = self.param("anchor_none", nn.initializers.zeros, (self.anchor_heads,))
            self.anchor_conv = self.param("anchor_conv", nn.initializers.lecun_normal(),
                                          (self.anchor_kernel,) * 3 + (self.anchor_heads, self.world_features))
        if self.length_head:
            self.length_hidden = nn.Dense(self.head_hidden, name="length_hidden")
            self.length_out = nn.Dense(LENGTH_CLASSES, name="length_out")
            if self.length_reads_text:
                self.length_text_score = nn.Dense(1, name="length_text_score")

    def unchunked(self) -> "BuilderModel":
        """The same model with every chunked loop (`CHUNK_FIELDS`) computed at once: the function is
        the same, and XLA's cost analysis, which counts a loop body once, counts all of it."""
        return self.clone(**{name: 0 for name in CHUNK_FIELDS})

    @property
    def packed_chunk(self) -> int:
        """How many packed (item, step) rows the world part takes at a time (0: all at once):
        `step_chunk` with world_encoding "once", else `encode_chunk` (pack sizes are best multiples)."""
        return self.step_chunk if self.world_encoding == "once" else self.encode_chunk

    # -- pieces (used by teacher forcing and by greedy decoding) --------------------------------
    @property
    def text_key(self) -> str:
        """The batch key of the text input: token ids, or frozen-encoder token states."""
        return "text_tokens" if self.text_encoder == GRU_TEXT else "text_states"

    def encode_text(self, text, mask):
        """(token states [B, L, D], summary [B, D]) of token ids [B, L] or BERT states [B, L, H]."""
        return self.text_module(text, mask)

    def embed_actions(self, action_ids):
        return self.action_out(nn.relu(self.action_in(action_features(action_ids))))

    def init_decoder(self, summary, token_states, token_mask, max_steps: int):
        return self.action_decoder.initial_state(summary, token_states, token_mask, max_steps,
                                                 self.action_embedding)

    def decoder_step(self, state, t, prev_ids, token_states, token_mask):
        return self.action_decoder.step(state, t, self.embed_actions(prev_ids), token_states, token_mask)

    def decoder_sequence(self, state, prev_ids, token_states, token_mask):
        return self.action_decoder.sequence(state, self.embed_actions(prev_ids), token_states, token_mask)

    def encode_world(self, world: dict, dec_out):
        """World features [N, 11, 9, 11, F] of N world states (`world_input`: leaves [N, ...]),
        given the condition `dec_out` [N, H] (the CNN's FiLM condition when it has FiLM: the decoder
        outputs, or with world_encoding "once" the text summaries, `encode_starts`)."""
        channels = world_input.world_channels(
            world, recent_decay=self.recent_decay, perspective_scale=self.perspective_scale,
            use_perspective=self.use_perspective, use_last_offset=self.use_last_offset,
            mentioned_colors=self.mentioned_colors)
        return self.world_cnn(channels, dec_out)

    def world_logits(self, world: dict, dec_out):
        """[N, 7624] logits for N world states and decoder outputs [N, H]; with `encode_chunk`
        the N rows go through the CNN and head in rematerialized chunks of that many."""
        def run(module, w, d):
            return module.action_logits(module.encode_world(w, d), d)

        return self.in_chunks(run, (world, dec_out))

    def encode_starts(self, start: dict, summary, token_states=None, token_mask=None):
        """world_encoding "once": features [N, 11, 9, 11, F] of N items' start worlds, FiLM-conditioned
        (with `world_film`) on their text summaries [N, D]; in chunks of `encode_chunk`. With
        `text_attention`, each cell then reads the text token states [N, L, D] (mask [N, L]): `read_text`;
        with `anchor_heads`, each cell then adds where the summary's pointers land: `point_anchors`."""
        if not (self.text_attention or self.anchor_heads):
            return self.in_chunks(lambda module, w, s: module.encode_world(w, s), (start, summary))
        if self.text_attention and token_states is None:
            raise ValueError("BuilderModel.encode_starts: text_attention needs the token states and mask")
        text = (token_states, token_mask) if self.text_attention else ()

        def run(module, w, s, *text):
            features = module.encode_world(w, s)
            if module.text_attention:
                features = module.read_text(features, *text)
            if module.anchor_heads:
                features = module.point_anchors(features, w["grid"], s)
            return features

        return self.in_chunks(run, (start, summary) + text)

    def read_text(self, features, token_states, token_mask):
        """Per-cell attention to the text: features [N, 11, 9, 11, F] plus, at each cell, one attention
        head's read of the token states [N, L, D] (masked by [N, L]; query: the cell's features)."""
        n = features.shape[0]
        cells = features.reshape(n, -1, features.shape[-1])
        mask = token_mask.astype(bool)[:, None, None, :]  # [N, heads 1, queries (broadcast), L]
        read = self.cell_text_attention(cells, token_states, mask=mask)
        return features + read.reshape(features.shape)

    def anchor_weights(self, features, grid, summary):
        """[N, 11, 9, 11, H] where each of the `anchor_heads` pointers of N items lands: a softmax over
        the item's occupied cells (`grid` [N, 11, 9, 11] > 0) and one "no block" option, of a scaled dot
        product between a query from the text summary [N, D] and a key from each cell's features
        [N, 11, 9, 11, F]; the "no block" share is left out (an empty world gives zeros)."""
        n, f, h = features.shape[0], self.world_features, self.anchor_heads
        keys = self.anchor_key(features.reshape(n, -1, features.shape[-1])).reshape(n, -1, h, f)
        query = self.anchor_query(summary).reshape(n, h, f)
        scores = jnp.einsum("nchf,nhf->nch", keys, query) / np.sqrt(f)
        occupied = grid.reshape(n, -1, 1) > 0
        scores = jnp.where(occupied, scores, -1e9)
        none = jnp.broadcast_to(self.anchor_none, (n, 1, h)).astype(scores.dtype)
        weights = jax.nn.softmax(jnp.concatenate([scores, none], axis=1), axis=1)[:, :-1]
        return weights.reshape((n,) + G.GRID_SHAPE + (h,))

    def point_anchors(self, features, grid, summary):
        """features [N, 11, 9, 11, F] plus a SAME convolution (`anchor_kernel`^3, no bias) of the
        `anchor_weights` maps: each cell learns where it lies against the blocks the instruction
        points at ("left of the blue one", a start 2+ cells from the Builder's last action)."""
        weights = self.anchor_weights(features, grid, summary)
        return features + conv3d_im2col(weights, self.anchor_conv.astype(weights.dtype))

    def length_logits(self, summary, start: dict, encoded=None, token_states=None, token_mask=None):
        """Length-head logits [N, LENGTH_CLASSES] of N items (class k - 1: k actions; the last: >= 20)
        from [text summary ; max-pool over cells of the start-world features], with
        `length_reads_text` also [; `read_length_words`] of the token states [N, L, D] (mask [N, L]).
        `encoded`: the start worlds' `encode_starts` features (world_encoding "once" has them); None:
        encoded here, with world_encoding "per_step" and `world_film` FiLM-conditioned on a zero
        decoder state (that CNN's condition is the decoder output)."""
        if encoded is None:
            per_step_film = self.world_film and self.world_encoding != "once"
            condition = jnp.zeros((summary.shape[0], self.decoder_hidden), summary.dtype) if per_step_film else summary
            encoded = self.encode_starts(start, condition, token_states, token_mask)
        parts = [summary, encoded.max(axis=(1, 2, 3))]
        if self.length_reads_text:
            if token_states is None:
                raise ValueError("BuilderModel.length_logits: length_reads_text needs the token states and mask")
            parts.append(self.read_length_words(token_states, token_mask))
        return self.length_out(nn.relu(self.length_hidden(jnp.concatenate(parts, -1))))

    def read_length_words(self, token_states, token_mask):
        """An attention pool [N, D] of the token states [N, L, D]: softmax over the unmasked tokens
        of a learned linear score of each state (the words that say how many can weigh most)."""
        scores = self.length_text_score(token_states)[..., 0]  # [N, L]
        scores = jnp.where(token_mask.astype(bool), scores, -1e9)
        weights = jax.nn.softmax(scores, axis=-1) * token_mask.astype(token_states.dtype)
        return jnp.einsum("nl,nld->nd", weights, token_states)

    def changed_world_logits(self, encoded, start: dict, world: dict, dec_out, max_changed: int):
        """world_encoding "once": [N, 7624] logits of N world states from their items' start-world
        encodings [N, 11, 9, 11, F] plus the change features of `world` against `start`
        (`world_changes`; at most `max_changed` changed cells per row: the item's actions so far)."""
        def run(module, e, s, w, d):
            changes = world_changes.change_channels(w, s, module.recent_decay)
            return module.action_logits(e + module.change_conv(changes, max_changed), d)

        return self.in_chunks(run, (encoded, start, world, dec_out), self.step_chunk)

    def in_chunks(self, fn, inputs: tuple, chunk: int | None = None):
        """`fn(module, *inputs)` over the leading axis of `inputs` (a tuple of pytrees [n, ...]); with
        `chunk` (default `encode_chunk`) in rematerialized chunks of that many rows (a scan; the
        last chunk padded with copies of row 0)."""
        n = jax.tree_util.tree_leaves(inputs)[0].shape[0]
        chunk = self.encode_chunk if chunk is None else chunk
        if not chunk or n <= chunk:
            return fn(self, *inputs)
        chunks = -(-n // chunk)

        def split(x):  # [n, ...] -> [chunks, chunk, ...], padded with copies of row 0
            if chunks * chunk > n:
                x = jnp.concatenate([x, jnp.broadcast_to(x[:1], (chunks * chunk - n,) + x.shape[1:])])
            return x.reshape((chunks, chunk) + x.shape[1:])

        if self.chunk_remat not in CHUNK_REMAT_POLICIES:
            raise ValueError(f"config.model.chunk_remat must be one of {', '.join(CHUNK_REMAT_POLICIES)}, "
                             f"got {self.chunk_remat!r}")
        body = nn.remat(lambda module, _, xs: (None, fn(module, *xs)), prevent_cse=False,
                        policy=CHUNK_REMAT_POLICIES[self.chunk_remat])
        scan = nn.scan(body, variable_broadcast="params", split_rngs={"params": False})
        _, out = scan(self, None, jax.tree_util.tree_map(split, inputs))
        return out.reshape((chunks * chunk,) + out.shape[2:])[:n]

    def action_logits(self, world_feats, dec_out):
        """[N, 11, 9, 11, C] world features and [N, H] decoder outputs -> [N, 7624] logits."""
        h = world_feats
        for layer in self.head_world[:-1]:
            h = nn.relu(layer(h))
        h = self.head_world[-1](h) + self.head_state(dec_out)[:, None, None, None, :]
        per_cell = self.head_out(nn.relu(h))  # [N, 11, 9, 11, 7], cell-major like the codec
        pooled = world_feats.max(axis=(1, 2, 3))
        stop = self.stop_out(nn.relu(self.stop_hidden(jnp.concatenate([dec_out, pooled], -1))))
        return jnp.concatenate([per_cell.reshape(per_cell.shape[0], -1), stop], -1)

    # -- teacher forcing --------------------------------------------------------------------------
    def __call__(self, batch: dict, num_packed: int):
        """Logits [K, 7624] for the K packed (item, step) pairs, plus the pack (targets, weights);
        with `length_head` the pack also holds the items' length logits [B, LENGTH_CLASSES], their
        target classes (`length_targets`) and weights.

        batch: text_tokens [B, L], text_mask [B, L], grid [B, 11, 9, 11], recent_cells [B, W],
        pose [B, 5], actions [B, T], action_mask [B, T], weight [B].
        """
        batch = {k: jnp.asarray(v) for k, v in batch.items()}
        actions = batch["actions"].astype(jnp.int32)
        bsz, steps = actions.shape
        token_states, summary = self.encode_text(batch[self.text_key], batch["text_mask"])
        prev = jnp.concatenate([jnp.full((bsz, 1), START, jnp.int32), actions[:, :-1]], axis=1)
        state = self.init_decoder(summary, token_states, batch["text_mask"], steps)
        dec_out = self.decoder_sequence(state, prev, token_states, batch["text_mask"])  # [B, T, H]
        worlds = world_input.worlds_before_each_step(world_input.start_world(batch), actions)  # [B, T, ...]
        pack = pack_steps(batch["action_mask"], batch["weight"], num_packed)
        b, t = pack["item"], pack["step"]
        packed_worlds = jax.tree_util.tree_map(lambda x: x[b, t], worlds)
        start = world_input.start_world(batch)
        encoded = None
        if self.world_encoding == "once":  # the CNN runs on the B start worlds, not the K packed ones
            encoded = self.encode_starts(start, summary, token_states, batch["text_mask"])
            logits = self.changed_world_logits(encoded[b], jax.tree_util.tree_map(lambda x: x[b], start),
                                               packed_worlds, dec_out[b, t], max_changed=steps)
        else:
            logits = self.world_logits(packed_worlds, dec_out[b, t])
        out = {"targets": actions[b, t], "weights": pack["weights"], "item": b, "step": t}
        if self.length_head:
            out.update(length_logits=self.length_logits(summary, start, encoded, token_states, batch["text_mask"]),
                       length_targets=length_targets(batch["action_mask"], actions),
                       length_weights=batch["weight"].astype(jnp.float32))
        return logits, out


CHUNK_FIELDS = ("encode_chunk", "step_chunk")  # BuilderModel fields that split work into loops (0: none)
# What a rematerialized chunk keeps for the backward pass (`BuilderModel.chunk_remat`): nothing
# (recompute the chunk), or the outputs of its matmuls (the CNN's patch products and the head's
# Dense layers; the im2col patches and elementwise ops are recomputed, which costs no FLOPs).
CHUNK_REMAT_POLICIES = {"full": None, "dots": jax.checkpoint_policies.dots_with_no_batch_dims_saveable}


class FrozenTextProjection(nn.Module):
    """Frozen BERT token states [B, L, H] -> (a Dense projection [B, L, D], summary [B, D]: tanh of a
    Dense of the masked mean), in the GRU text encoder's output form (paper 6.3: projection 256)."""

    features: int

    @nn.compact
    def __call__(self, states, mask):
        projected = nn.Dense(self.features, name="project")(states.astype(jnp.float32))
        weights = mask.astype(jnp.float32)[..., None]
        mean = (projected * weights).sum(1) / jnp.maximum(weights.sum(1), 1.0)
        return projected, jnp.tanh(nn.Dense(self.features, name="summary")(mean))


def pack_steps(action_mask: jax.Array, weight: jax.Array, num_packed: int) -> dict:
    """Indices of the first `num_packed` (item, step) pairs with a target, in row-major order.

    Slots beyond the real count point at (0, 0) with weight 0. `num_packed` must be >= the
    number of targets (choose it with `packed_size`), otherwise targets are dropped.
    """
    action_mask, weight = jnp.asarray(action_mask), jnp.asarray(weight)
    bsz, steps = action_mask.shape
    flat = (action_mask & (weight[:, None] > 0)).reshape(-1)
    (idx,) = jnp.nonzero(flat, size=num_packed, fill_value=0)
    valid = jnp.arange(num_packed) < flat.sum()
    item, step = idx // steps, idx % steps
    return {"item": item, "step": step, "weights": valid.astype(jnp.float32) * weight[item]}


def targets_per_row(action_mask: np.ndarray, weight: np.ndarray) -> np.ndarray:
    """Host-side: how many (item, step) pairs of each row carry a target."""
    return (np.asarray(action_mask) & (np.asarray(weight)[:, None] > 0)).sum(axis=1)


def packed_size(action_mask: np.ndarray, weight: np.ndarray, multiple: int = 32, shards: int = 1) -> int:
    """Host-side: the pack size per shard for a batch split into `shards` equal row blocks (one
    per device): the largest block's target count rounded up to a multiple of `multiple`, so a
    batch of B rows x T steps compiles at most B*T/(shards*multiple) shapes."""
    counts = targets_per_row(action_mask, weight)
    needed = int(counts.reshape(shards, -1).sum(axis=1).max()) if counts.size else 0
    rows_per_shard = np.asarray(action_mask).size // max(shards, 1)
    size = max(multiple, -(-needed // multiple) * multiple)
    return min(size, max(multiple, -(-rows_per_shard // multiple) * multiple))


def length_targets(action_mask: jax.Array, actions: jax.Array) -> jax.Array:
    """The length head's target class [B] of each row: its reference actions (the `action_mask`
    slots that are not STOP; a truncated item has no STOP slot) minus 1, clipped to
    [0, LENGTH_CLASSES - 1] (the last class: >= 20 actions)."""
    count = (jnp.asarray(action_mask) & (jnp.asarray(actions) != G.STOP)).sum(-1)
    return jnp.clip(count - 1, 0, LENGTH_CLASSES - 1).astype(jnp.int32)


def loss_sums(logits: jax.Array, pack: dict) -> dict:
    """Weighted sums over packed steps (actions + STOP): cross entropy, correct argmax, count.
    Sums (not means) so devices can add theirs up. The feasibility mask is NOT applied:
    references unsupported as recorded stay in the loss and it stays finite. A pack with length
    logits (`length_head`) adds the items' weighted length cross entropy, correct argmax and count."""
    ce = optax.softmax_cross_entropy_with_integer_labels(logits.astype(jnp.float32), pack["targets"])
    w = pack["weights"]
    correct = (jnp.argmax(logits, -1) == pack["targets"]).astype(jnp.float32)
    sums = {"loss_sum": (ce * w).sum(), "correct_sum": (correct * w).sum(), "count": w.sum()}
    if "length_logits" in pack:
        length_logits, targets, lw = pack["length_logits"], pack["length_targets"], pack["length_weights"]
        length_ce = optax.softmax_cross_entropy_with_integer_labels(length_logits.astype(jnp.float32), targets)
        length_correct = (jnp.argmax(length_logits, -1) == targets).astype(jnp.float32)
        sums.update(length_loss_sum=(length_ce * lw).sum(), length_correct_sum=(length_correct * lw).sum(),
                    length_count=lw.sum())
    return sums


def loss_from_sums(sums: dict, length_loss_weight: float = 0.0) -> tuple[jax.Array, dict]:
    """The training objective and metrics from `loss_sums`: the weighted mean action cross entropy
    (metric "loss", with or without a length head), plus `length_loss_weight` x the mean length
    cross entropy when the sums hold one (metrics "length_loss", "length_accuracy")."""
    total = jnp.maximum(sums["count"], 1e-9)
    loss = sums["loss_sum"] / total
    metrics = {"loss": loss, "step_accuracy": sums["correct_sum"] / total, "num_steps": sums["count"]}
    if "length_count" not in sums:
        return loss, metrics
    items = jnp.maximum(sums["length_count"], 1e-9)
    length_loss = sums["length_loss_sum"] / items
    metrics.update(length_loss=length_loss, length_accuracy=sums["length_correct_sum"] / items)
    return loss + length_loss_weight * length_loss, metrics


def loss_from_logits(logits: jax.Array, pack: dict, length_loss_weight: float = 0.0) -> tuple[jax.Array, dict]:
    return loss_from_sums(loss_sums(logits, pack), length_loss_weight)


def objective_length_weight(model) -> float:
    """The length loss's weight in `model`'s training objective (0 without a length head)."""
    return float(model.length_loss_weight) if getattr(model, "length_head", False) else 0.0


# Options that act on the start world's encoding, which only world_encoding "once" has; why, for the error.
ONCE_ONLY_OPTIONS = {"text_attention": "the cells of the start world read the text once",
                     "anchor_heads": "the pointers land on the start world once"}


class ModelConfigError(UserError):
    """A `config.model` field that BuilderModel does not have (named in the message)."""


def _module_fields() -> dict[str, dataclasses.Field]:
    """BuilderModel's configurable fields (all but vocab_size and Flax's parent/name)."""
    return {f.name: f for f in dataclasses.fields(BuilderModel)
            if f.init and f.name not in ("vocab_size", "parent", "name")}


def model_defaults() -> dict[str, Any]:
    """Every BuilderModel field a config's model section sets, at its default."""
    return {name: f.default for name, f in _module_fields().items()}


def model_kwargs(model_config: Mapping) -> dict[str, Any]:
    """BuilderModel's keyword arguments (all but vocab_size) from a model section; fields left out
    keep their defaults. Values are cast to the type of the field's default (JSON and command
    lines give 1 for 1.0). Raises ModelConfigError naming any field BuilderModel does not have,
    or a text encoder that is not one."""
    fields = _module_fields()
    values = dict(model_config)
    unknown = sorted(set(values) - set(fields))
    if unknown:
        raise ModelConfigError(
            f"config.model has no field {', '.join(map(repr, unknown))}: the model fields are "
            f"{', '.join(sorted(fields))}")
    kwargs = {k: type(fields[k].default)(v) for k, v in values.items()}
    value = {name: kwargs.get(name, f.default) for name, f in fields.items()}
    try:
        text_encoder_features(value["text_encoder"])
        world_changes.check_world_encoding(value["world_encoding"])
    except ValueError as err:
        raise ModelConfigError(str(err)) from None
    ranges = [("encode_chunk", value["encode_chunk"] >= 0, ">= 0 (0: no chunks)"),
              ("step_chunk", value["step_chunk"] >= 0, ">= 0 (0: no chunks)"),
              ("change_kernel", value["change_kernel"] >= 1 and value["change_kernel"] % 2 == 1, "an odd number >= 1"),
              ("text_attention", value["text_attention"] >= 0, ">= 0 (0: off)"),
              ("anchor_heads", value["anchor_heads"] >= 0, ">= 0 (0: off)"),
              ("anchor_kernel", value["anchor_kernel"] >= 1 and value["anchor_kernel"] % 2 == 1, "an odd number >= 1")]
    for name, ok, allowed in ranges:
        if not ok:
            raise ModelConfigError(f"--config.model.{name}={value[name]!r} is out of range: it must be {allowed}")
    for name, why in ONCE_ONLY_OPTIONS.items():
        if value[name] and value["world_encoding"] != "once":
            raise ModelConfigError(f"--config.model.{name}={value[name]} needs --config.model.world_encoding=once ({why})")
    return kwargs


def build_model(model_config: Mapping, vocab_size: int) -> BuilderModel:
    """`BuilderModel(vocab_size=vocab_size, **config.model)`; see `model_kwargs`."""
    return BuilderModel(vocab_size=vocab_size, **model_kwargs(model_config))


def dummy_batch(batch_size: int = 2, text_len: int = 8, steps: int = 4, window: int = 4,
                text_dim: int = 384, mentions: bool = False) -> dict[str, Any]:
    """Zero batch with the input pipeline's keys and shapes (for init and tests); `text_states`
    (frozen-encoder states of width `text_dim`) is read only by a frozen text encoder (text_encoder "minilm");
    with `mentions` it also has the key a model with `mentioned_colors` reads."""
    extra = {world_input.MENTION_KEY: np.zeros((batch_size, G.NUM_COLORS + 1), np.float32)} if mentions else {}
    return {
        **extra,
        "text_states": np.zeros((batch_size, text_len, text_dim), np.float32),
        "text_tokens": np.zeros((batch_size, text_len), np.int32),
        "text_mask": np.ones((batch_size, text_len), bool),
        "grid": np.zeros((batch_size,) + G.GRID_SHAPE, np.int8),
        "recent_cells": np.full((batch_size, window), -1, np.int32),
        "pose": np.zeros((batch_size, 5), np.float32),
        "actions": np.full((batch_size, steps), G.STOP, np.int32),
        "action_mask": np.eye(1, steps, dtype=bool).repeat(batch_size, 0),
        "weight": np.ones((batch_size,), np.float32),
    }


def init_params(model: BuilderModel, rng: jax.Array, embedding_matrix: np.ndarray | None = None):
    """Initialise parameters; put the GloVe matrix [V, E] into the word embedding table."""
    params = model.init(rng, dummy_batch(mentions=model.mentioned_colors), 8)["params"]
    if embedding_matrix is not None:
        table = params["text_encoder"]["embed"]["embedding"]
        matrix = np.asarray(embedding_matrix, np.float32)
        if matrix.shape != table.shape:
            raise ValueError(f"embedding matrix shape {matrix.shape} != model's table {table.shape} "
                             "(config.model.embedding_dim must match the vocabulary's vectors)")
        params = jax.tree_util.tree_map(lambda x: x, params)
        params["text_encoder"]["embed"]["embedding"] = jnp.asarray(matrix)
    return params
