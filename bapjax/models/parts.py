"""The parts a builder model is made of, each with its own fields: a text encoder, a world
encoder, an action decoder, the heads, and optionally the length head.

A part is a frozen dataclass: its fields and their defaults (the model's only defaults), the
check of their values (`check`), and the Flax modules it contributes. A config's model section
holds one sub-section per part (`config.model.text`, `.world`, `.decoder`, `.heads`, and
`.length` where the model has one); `bapjax.models.builder.parts_of` reads them. Where a part
has kinds, one field names the kind and the kind's class has exactly the fields that apply to it:

* text (`encoder`): `GRUText` ("gru": GloVe word embeddings + a GRU over token ids) or
  `FrozenText` (a frozen encoder's name, e.g. "minilm": a projection of its cached token states);
* decoder (`kind`): `GRUDecoder` or `TransformerDecoder` (bapjax.models.decoders);
* world: `WorldCNN` (the world CNN and its input channels, re-run on every packed step:
  bapjax.models.per_step) or `OnceWorld` (that CNN over each item's start world once, plus the
  sparse convolution of what changed since: bapjax.models.once); the architecture picks it.
"""

from __future__ import annotations

import dataclasses

import flax.linen as nn
import jax.numpy as jnp

from bapjax.models.decoders import GRUActionDecoder, TransformerActionDecoder
from bapjax.models.text_encoder import GRUTextEncoder
from bapjax.models.world_cnn import WorldCNN as WorldCNNModule
from bapjax.text.encoders import GRU_TEXT, text_encoder_features

CONV_IMPLS = ("im2col", "xla")


def _require(part: str, name: str, ok: bool, allowed: str, value) -> None:
    if not ok:
        raise ValueError(f"--config.model.{part}.{name}={value!r} is out of range: it must be {allowed}")


@dataclasses.dataclass(frozen=True)
class GRUText:
    """GloVe 6B 50d word embeddings (the original used 300d glove.42B) and a GRU over them."""

    encoder: str = GRU_TEXT
    embedding_dim: int = 50
    hidden: int = 300  # the GRU's width: token states and summary
    # the embedding table's rows: the vocabulary's size rounded up to a multiple of this (the rows past
    # the vocabulary start at zero and are never read, so training is unchanged); runs whose vocabularies
    # differ by a few tokens (the seeds of the simulated data) then build the same programs and reuse
    # each other's from the persistent compilation cache
    vocab_multiple: int = 1
    unroll: int = 1  # the GRU's steps per iteration of its loops (forward and backward): the same function

    @property
    def text_key(self) -> str:
        return "text_tokens"

    def check(self) -> None:
        _require("text", "hidden", self.hidden >= 1, ">= 1", self.hidden)
        _require("text", "embedding_dim", self.embedding_dim >= 1, ">= 1", self.embedding_dim)
        _require("text", "vocab_multiple", self.vocab_multiple >= 1, ">= 1", self.vocab_multiple)
        _require("text", "unroll", self.unroll >= 1, ">= 1", self.unroll)

    def module(self, vocab_size: int, dtype=jnp.float32) -> nn.Module:
        rows = -(-vocab_size // self.vocab_multiple) * self.vocab_multiple
        return GRUTextEncoder(vocab_size, self.embedding_dim, self.hidden, table_rows=rows, unroll=self.unroll,
                              dtype=dtype, name="text_encoder")


@dataclasses.dataclass(frozen=True)
class FrozenText:
    """A frozen encoder's token states (`text.encoders.TEXT_ENCODERS`, cached by the features),
    projected to `hidden` (paper 6.3: the BERT projection, 256)."""

    encoder: str = "minilm"
    hidden: int = 256

    @property
    def text_key(self) -> str:
        return "text_states"

    def check(self) -> None:
        text_encoder_features(self.encoder)
        _require("text", "hidden", self.hidden >= 1, ">= 1", self.hidden)

    def module(self, vocab_size: int, dtype=jnp.float32) -> nn.Module:
        del vocab_size
        return FrozenTextProjection(self.hidden, dtype=dtype, name="text_projection")


class FrozenTextProjection(nn.Module):
    """Frozen token states [B, L, H] -> (a Dense projection [B, L, D], summary [B, D]: tanh of a
    Dense of the masked mean), in the GRU text encoder's output form."""

    features: int
    dtype: jnp.dtype = jnp.float32  # the compute dtype; the parameters stay float32

    @nn.compact
    def __call__(self, states, mask):
        projected = nn.Dense(self.features, dtype=self.dtype, name="project")(states.astype(self.dtype))
        weights = mask.astype(self.dtype)[..., None]
        mean = (projected * weights).sum(1) / jnp.maximum(weights.sum(1), 1.0)
        return projected, jnp.tanh(nn.Dense(self.features, dtype=self.dtype, name="summary")(mean))


@dataclasses.dataclass(frozen=True)
class WorldCNN:
    """The world CNN (bapjax.models.world_cnn) and its input channels (bapjax.models.world_input)."""

    features: int = 300  # channels of every layer
    layers: int = 3  # the paper's model uses 2 (run_config.paper_model)
    kernel_size: int = 3
    conv_impl: str = "im2col"  # "im2col" (faster on CPU) or "xla" (nn.Conv; GPU/TPU speed not measured)
    film: bool = False  # every layer scaled/shifted by its condition (WorldCNN.film; the CPU models)
    perspective: bool = True  # Builder-frame coordinates as 3 more input channels
    perspective_scale: float = 0.1  # their scale
    recent_decay: float = 0.5  # weight decay**k of the k-th newest action in the recent-action channel
    encode_chunk: int = 0  # >0: the CNN encodes worlds in rematerialized chunks of this many (CPU: 2); 0: all at once

    def check(self) -> None:
        _require("world", "features", self.features >= 1, ">= 1", self.features)
        _require("world", "layers", self.layers >= 1, ">= 1", self.layers)
        _require("world", "kernel_size", self.kernel_size >= 1 and self.kernel_size % 2 == 1,
                 "an odd number >= 1", self.kernel_size)
        _require("world", "conv_impl", self.conv_impl in CONV_IMPLS, " or ".join(map(repr, CONV_IMPLS)),
                 self.conv_impl)
        _require("world", "encode_chunk", self.encode_chunk >= 0, ">= 0 (0: no chunks)", self.encode_chunk)

    def module(self, dtype=jnp.float32) -> nn.Module:
        return WorldCNNModule(self.features, self.layers, self.kernel_size, self.conv_impl, film=self.film,
                              dtype=dtype, name="world_cnn")


@dataclasses.dataclass(frozen=True)
class OnceWorld(WorldCNN):
    """`WorldCNN` over each item's start world (FiLM on the text summary), plus per step a sparse
    convolution of the changes since (bapjax.models.world_changes)."""

    change_kernel: int = 3  # kernel of the sparse convolution over changed cells (1: per cell)
    step_chunk: int = 0  # >0: the packed steps' change features and head in rematerialized chunks of
    # this many (the head over [steps, 1089, heads.hidden] is a step's cost then; CPU: 8); 0: all at once

    def check(self) -> None:
        super().check()
        _require("world", "change_kernel", self.change_kernel >= 1 and self.change_kernel % 2 == 1,
                 "an odd number >= 1", self.change_kernel)
        _require("world", "step_chunk", self.step_chunk >= 0, ">= 0 (0: no chunks)", self.step_chunk)


@dataclasses.dataclass(frozen=True)
class GRUDecoder:
    """A GRU over the embedded previous actions and the text summary."""

    kind: str = "gru"
    action_embedding: int = 300  # width of the previous action's embedding
    hidden: int = 300
    unroll: int = 1  # the GRU's steps per iteration of teacher forcing's loop: the same function

    def check(self) -> None:
        _require("decoder", "hidden", self.hidden >= 1, ">= 1", self.hidden)
        _require("decoder", "unroll", self.unroll >= 1, ">= 1", self.unroll)

    def module(self, dtype=jnp.float32) -> nn.Module:
        return GRUActionDecoder(self.hidden, unroll=self.unroll, dtype=dtype, name="decoder")


@dataclasses.dataclass(frozen=True)
class TransformerDecoder:
    """A pre-LN causal Transformer over the embedded previous actions, cross-attending to the text
    (the paper's M': 5 layers of width 256)."""

    kind: str = "transformer"
    action_embedding: int = 300
    hidden: int = 300  # output width (a projection of the last layer)
    layers: int = 5
    width: int = 256
    heads: int = 4
    mlp: int = 1024

    def check(self) -> None:
        _require("decoder", "width", self.width >= 1 and self.width % max(self.heads, 1) == 0,
                 f"a multiple of decoder.heads ({self.heads})", self.width)

    def module(self, dtype=jnp.float32) -> nn.Module:
        return TransformerActionDecoder(self.layers, self.width, self.heads, self.mlp, hidden=self.hidden,
                                        dtype=dtype, name="decoder")


@dataclasses.dataclass(frozen=True)
class Heads:
    """The per-cell action head (a unit convolution over [world features ; decoder state]) and the
    STOP head (over the decoder state and a max-pool of the world features)."""

    hidden: int = 300

    def check(self) -> None:
        _require("heads", "hidden", self.hidden >= 1, ">= 1", self.hidden)


@dataclasses.dataclass(frozen=True)
class LengthHead:
    """A head predicting each item's action count (`LENGTH_CLASSES`) from [text summary ; max-pool
    of the start world's features], for the STOP rule "length"; width `heads.hidden`."""

    loss_weight: float = 0.2  # objective = action loss + this x length loss

    def check(self) -> None:
        _require("length", "loss_weight", self.loss_weight >= 0, ">= 0", self.loss_weight)


TEXT_KINDS = {GRU_TEXT: GRUText}  # any other encoder name: FrozenText
DECODER_KINDS = {"gru": GRUDecoder, "transformer": TransformerDecoder}


def text_part_class(encoder: str):
    return TEXT_KINDS.get(encoder, FrozenText)


def decoder_part_class(kind: str):
    if kind not in DECODER_KINDS:
        raise ValueError(f"--config.model.decoder.kind must be one of {', '.join(DECODER_KINDS)}, got {kind!r}")
    return DECODER_KINDS[kind]
