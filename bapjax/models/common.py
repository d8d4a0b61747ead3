"""What every builder architecture shares: `BuilderModel`, the base of `per_step.PerStepBuilder`
(the paper's M and M', the CPU models film) and `once.OnceBuilder` (the CPU models once, frame).

A builder reads the text (its `text` part), decodes actions (its `decoder` part: the previous
action's features embedded by `action_in`/`action_out`, then the decoder), and scores every
action from [world features ; decoder state] with its `heads`: unit (1x1x1) convolutions at
every cell, 7 per cell (slots 0..5 place color 1..6, slot 6 remove), flattened cell-major so
index cell * 7 + slot is exactly `bapjax.world.grid`'s action id, and a STOP logit from the
decoder state and a max-pool of the world features. How the world features of a step come about
is the architecture's (its `world` part and `packed_logits`). With a `length` part, a length head
predicts each item's action count from [text summary ; pooled start-world features].

Teacher forcing (`__call__`) packs the (item, step) pairs that carry a target (`pack_steps`),
because the world part dominates the cost; the model works on the rows it is given, so under
data parallelism each device packs its own (`bapjax.sharding.per_device`). Flax
parameter paths are the submodules' names (text_encoder or text_projection, world_cnn,
action_in, action_out, decoder, head_world0, head_state, head_out, stop_hidden, stop_out,
length_hidden, length_out, and the once architecture's world_changes): they set the
initialization, so they stay as they are.

`dtype` (`config.model.dtype`, one of `DTYPES`) is the compute dtype of every part: "bfloat16"
runs the matmuls, convolutions and scans in bfloat16 while the parameters (so the optimizer's
state and the moving average) stay float32, and the logits are cast to float32 before the loss
and decoding read them; "float32" (the default) is the model as it always was.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import ClassVar

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from bapjax.models import parts, world_input
from bapjax.world import grid as G

START = G.NUM_ACTIONS_WITH_STOP  # 7624: the decoder's input before the first action
ACTION_FEATURES = 13
LENGTH_CLASSES = 20  # the length head's classes: k actions is class k - 1, the last class ">= 20"
CHUNK_FIELDS = ("encode_chunk", "step_chunk")  # world-part fields that split work into loops (0: none)
DTYPES = ("float32", "bfloat16")  # config.model.dtype, the compute dtype; the first is the default


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
    """The shared layers of the builder architectures (see the module docstring); a model is one of
    its subclasses with its parts (`bapjax.models.builder.build_model`)."""

    vocab_size: int  # from the run's vocabulary, not the config
    text: parts.GRUText | parts.FrozenText = parts.GRUText()
    world: parts.WorldCNN = parts.WorldCNN()
    decoder: parts.GRUDecoder | parts.TransformerDecoder = parts.GRUDecoder()
    heads: parts.Heads = parts.Heads()
    length: parts.LengthHead | None = None  # None: no length head
    dtype: str = DTYPES[0]  # the compute dtype (module docstring)

    world_encoding: ClassVar[str] = ""  # the architecture's name (bapjax.models.builder.MODELS)

    @property
    def compute_dtype(self) -> jnp.dtype:
        return jnp.dtype(self.dtype)

    def setup(self):
        dtype = self.compute_dtype
        dense = functools.partial(nn.Dense, dtype=dtype)
        self.text_module = self.text.module(self.vocab_size, dtype)
        self.world_cnn = self.world.module(dtype)
        self.action_in = dense(self.decoder.action_embedding, name="action_in")
        self.action_out = dense(self.decoder.action_embedding, name="action_out")
        self.action_decoder = self.decoder.module(dtype)
        self.head_world = dense(self.heads.hidden, name="head_world0")
        self.head_state = dense(self.heads.hidden, use_bias=False, name="head_state")
        self.head_out = dense(G.ACTIONS_PER_CELL, name="head_out")
        self.stop_hidden = dense(self.heads.hidden, name="stop_hidden")
        self.stop_out = dense(1, name="stop_out")
        if self.length is not None:
            self.length_hidden = dense(self.heads.hidden, name="length_hidden")
            self.length_out = dense(LENGTH_CLASSES, name="length_out")

    @property
    def length_head(self) -> bool:
        return self.length is not None

    def unchunked(self) -> "BuilderModel":
        """The same model with every chunked loop (`CHUNK_FIELDS`) computed at once: the function is
        the same, and XLA's cost analysis, which counts a loop body once, counts all of it."""
        return self.clone(world=dataclasses.replace(
            self.world, **{f: 0 for f in CHUNK_FIELDS if hasattr(self.world, f)}))

    @property
    def packed_chunk(self) -> int:
        """How many packed (item, step) rows the world part takes at a time (0: all at once; pack
        sizes are best multiples of it)."""
        raise NotImplementedError

    # -- pieces (used by teacher forcing and by decoding) -----------------------------------------
    @property
    def text_key(self) -> str:
        """The batch key of the text input: token ids, or frozen-encoder token states."""
        return self.text.text_key

    def encode_text(self, text, mask):
        """(token states [B, L, D], summary [B, D]) of token ids [B, L] or frozen states [B, L, H]."""
        return self.text_module(text, mask)

    def embed_actions(self, action_ids):
        return self.action_out(nn.relu(self.action_in(action_features(action_ids))))

    def init_decoder(self, summary, token_states, token_mask, max_steps: int):
        return self.action_decoder.initial_state(summary, token_states, token_mask, max_steps,
                                                 self.decoder.action_embedding)

    def decoder_step(self, state, t, prev_ids, token_states, token_mask):
        return self.action_decoder.step(state, t, self.embed_actions(prev_ids), token_states, token_mask)

    def decoder_sequence(self, state, prev_ids, token_states, token_mask):
        return self.action_decoder.sequence(state, self.embed_actions(prev_ids), token_states, token_mask)

    def encode_world(self, world: dict, condition):
        """World features [N, 11, 9, 11, F] of N world states (`world_input`: leaves [N, ...]) given
        the CNN's FiLM condition [N, D] (read only with `world.film`)."""
        w = self.world
        channels = world_input.world_channels(world, recent_decay=w.recent_decay, perspective_scale=w.perspective_scale,
                                              use_perspective=w.perspective)
        return self.world_cnn(channels, condition)

    def encode_worlds(self, worlds: dict, condition):
        """`encode_world` of N world states in chunks of `world.encode_chunk`."""
        return self.in_chunks(lambda module, w, c: module.encode_world(w, c), (worlds, condition))

    def action_logits(self, world_feats, dec_out):
        """[N, 11, 9, 11, C] world features and [N, H] decoder outputs -> [N, 7624] logits. The unit
        convolutions run as 2-D matmuls over the N x 1089 cells, the same function as over the 5-D
        array, whose kernels' gradients XLA's CPU backend computes through transposed copies."""
        n, f = world_feats.shape[0], world_feats.shape[-1]
        h = self.head_world(world_feats.reshape(-1, f)).reshape(n, -1, self.heads.hidden)
        h = nn.relu(h + self.head_state(dec_out)[:, None, :])
        per_cell = self.head_out(h.reshape(-1, h.shape[-1]))  # [N * cells, 7], cell-major like the codec
        pooled = world_feats.max(axis=(1, 2, 3))
        stop = self.stop_out(nn.relu(self.stop_hidden(jnp.concatenate([dec_out, pooled], -1))))
        return jnp.concatenate([per_cell.reshape(n, -1), stop], -1).astype(jnp.float32)

    def in_chunks(self, fn, inputs: tuple, chunk: int | None = None):
        """`fn(module, *inputs)` over the leading axis of `inputs` (a tuple of pytrees [n, ...]); with
        `chunk` (default `world.encode_chunk`) in rematerialized chunks of that many rows (a scan;
        the last chunk padded with copies of row 0; the backward pass recomputes each chunk)."""
        n = jax.tree_util.tree_leaves(inputs)[0].shape[0]
        chunk = self.world.encode_chunk if chunk is None else chunk
        if not chunk or n <= chunk:
            return fn(self, *inputs)
        chunks = -(-n // chunk)

        def split(x):  # [n, ...] -> [chunks, chunk, ...], padded with copies of row 0
            if chunks * chunk > n:
                x = jnp.concatenate([x, jnp.broadcast_to(x[:1], (chunks * chunk - n,) + x.shape[1:])])
            return x.reshape((chunks, chunk) + x.shape[1:])

        body = nn.remat(lambda module, _, xs: (None, fn(module, *xs)), prevent_cse=False, policy=None)
        scan = nn.scan(body, variable_broadcast="params", split_rngs={"params": False})
        _, out = scan(self, None, jax.tree_util.tree_map(split, inputs))
        return out.reshape((chunks * chunk,) + out.shape[2:])[:n]

    def length_logits(self, summary, start: dict, encoded=None):
        """Length-head logits [N, LENGTH_CLASSES] of N items (class k - 1: k actions; the last: >= 20)
        from [text summary ; max-pool over cells of the start-world features]. `encoded`: those
        features where the architecture has them (`OnceBuilder.encode_starts`); None: encoded here
        (`start_features`)."""
        if encoded is None:
            encoded = self.start_features(start, summary)
        parts_ = [summary, encoded.max(axis=(1, 2, 3))]
        return self.length_out(nn.relu(self.length_hidden(jnp.concatenate(parts_, -1)))).astype(jnp.float32)

    def start_features(self, start: dict, summary):
        """The length head's start-world features [N, 11, 9, 11, F] of N items."""
        raise NotImplementedError

    def packed_logits(self, start: dict, packed: dict, summary, dec_out, steps: int):
        """(logits [K, 7624] of the K packed steps, the start worlds' features for the length head
        or None); `packed`: their item and step indices ("item", "step") and worlds ("worlds")."""
        raise NotImplementedError

    # -- decoding's interface: every architecture decodes through these two (bapjax.decoding.kernel) --
    def decoding_starts(self, start: dict, summary):
        """What decoding computes once per item, before its steps, from N start worlds and their text
        summaries [N, D]: a pytree of [N, ...] leaves, or None (nothing); `step_logits` reads its rows."""
        raise NotImplementedError

    def step_logits(self, starts_encoded, start: dict, world: dict, dec_out, max_changed: int):
        """[N, 7624] action logits of N slots: their items' rows of `decoding_starts` and start worlds,
        their current worlds, decoder outputs [N, H], and at most `max_changed` actions so far."""
        raise NotImplementedError

    # -- teacher forcing --------------------------------------------------------------------------
    def __call__(self, batch: dict, num_packed: int):
        """Logits [K, 7624] for the K packed (item, step) pairs, plus the pack (targets, weights);
        with a length head the pack also holds the items' length logits [B, LENGTH_CLASSES], their
        target classes (`length_targets`) and weights.

        batch: text_tokens [B, L] (or text_states [B, L, H]), text_mask [B, L], grid [B, 11, 9, 11],
        recent_cells [B, W], pose [B, 5], actions [B, T], action_mask [B, T], weight [B].
        """
        batch = {k: jnp.asarray(v) for k, v in batch.items()}
        actions = batch["actions"].astype(jnp.int32)
        bsz, steps = actions.shape
        token_states, summary = self.encode_text(batch[self.text_key], batch["text_mask"])
        prev = jnp.concatenate([jnp.full((bsz, 1), START, jnp.int32), actions[:, :-1]], axis=1)
        state = self.init_decoder(summary, token_states, batch["text_mask"], steps)
        dec_out = self.decoder_sequence(state, prev, token_states, batch["text_mask"])  # [B, T, H]
        start = world_input.start_world(batch)
        worlds = world_input.worlds_before_each_step(start, actions)  # [B, T, ...]
        pack = pack_steps(batch["action_mask"], batch["weight"], num_packed)
        b, t = pack["item"], pack["step"]
        packed = {"item": b, "step": t, "worlds": jax.tree_util.tree_map(lambda x: x[b, t], worlds)}
        logits, encoded = self.packed_logits(start, packed, summary, dec_out, steps)
        out = {"targets": actions[b, t], "weights": pack["weights"], "item": b, "step": t}
        if self.length is not None:
            out.update(length_logits=self.length_logits(summary, start, encoded),
                       length_targets=length_targets(batch["action_mask"], actions),
                       length_weights=batch["weight"].astype(jnp.float32))
        return logits, out


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


PACK_ROUNDINGS = ("multiple", "power_of_two")
PACK_ROUNDING_SETTINGS = ("auto", *PACK_ROUNDINGS)


def resolve_pack_rounding(setting: str, platform: str) -> str:
    """The pack rounding that `train.pack_rounding` = `setting` means on devices of `platform`
    (``jax.Device.platform``): "auto" is "multiple" on CPU, where every padded row costs the cores,
    and "power_of_two" on an accelerator, where compiling a step shape costs more than its padding
    (one H200, the wide frame model cold: train and eval steps compiled in 60.7 s instead of 136.8,
    600 steps in 147 s instead of 223, MDC val 19.22 against 19.16, one run each; results/gpu/README.md)."""
    if setting not in PACK_ROUNDING_SETTINGS:
        raise ValueError(f"pack rounding {setting!r}: expected one of {', '.join(PACK_ROUNDING_SETTINGS)}")
    if setting != "auto":
        return setting
    return "multiple" if platform == "cpu" else "power_of_two"


def packed_size(action_mask: np.ndarray, weight: np.ndarray, multiple: int = 32, shards: int = 1,
                rounding: str = "multiple") -> int:
    """Host-side: the pack size per shard for a batch split into `shards` equal row blocks (one
    per device): the largest block's target count rounded up to a multiple of `multiple`
    (`rounding` "multiple": a batch of B rows x T steps compiles at most B*T/(shards*multiple)
    shapes) or to `multiple` x a power of two ("power_of_two": at most log2 of that plus one
    shapes, each pack less than twice its targets), never above the block's rows rounded up to
    `multiple`."""
    if rounding not in PACK_ROUNDINGS:
        raise ValueError(f"pack rounding {rounding!r}: expected one of {', '.join(PACK_ROUNDINGS)}")
    counts = targets_per_row(action_mask, weight)
    needed = int(counts.reshape(shards, -1).sum(axis=1).max()) if counts.size else 0
    rows_per_shard = np.asarray(action_mask).size // max(shards, 1)
    units = max(1, -(-needed // multiple))
    if rounding == "power_of_two":
        units = 1 << (units - 1).bit_length()
    return min(units * multiple, max(multiple, -(-rows_per_shard // multiple) * multiple))


def length_targets(action_mask: jax.Array, actions: jax.Array) -> jax.Array:
    """The length head's target class [B] of each row: its reference actions (the `action_mask`
    slots that are not STOP; a truncated item has no STOP slot) minus 1, clipped to
    [0, LENGTH_CLASSES - 1] (the last class: >= 20 actions)."""
    count = (jnp.asarray(action_mask) & (jnp.asarray(actions) != G.STOP)).sum(-1)
    return jnp.clip(count - 1, 0, LENGTH_CLASSES - 1).astype(jnp.int32)
