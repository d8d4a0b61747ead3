"""Builder models by name, built from a config's model section; the training objective.

A model is a named composition of parts (`bapjax.models.parts`): `MODELS` maps the architecture
name (`config.model.name`) to its class, one file per architecture over the shared layers of
`bapjax.models.common`:

* "per_step" (`per_step.PerStepBuilder`): the world CNN re-encodes every step's world. The
  paper's M (`run_config.paper_model`: GRU text, 2-layer CNN, GRU decoder), M' (configs/bert.py:
  frozen MiniLM states, Transformer decoder) and the CPU models "cpu" and "film"
  (configs/common.py) are this architecture with other parts.
* "once" (`once.OnceBuilder`): the start world encoded once, plus the changes since per step
  (the CPU models "once" and "frame", the latter with a length head).

A config's model section is `name`, `dtype` (the compute dtype, `common.DTYPES`) and one sub-section per part: `text` (its `encoder` names
the kind), `world`, `decoder` (its `kind`), `heads`, and `length` where the model has a length
head; each holds exactly the fields of its part (`model_section` writes them at their defaults,
`complete_section` fills what a section leaves out). `build_model` builds the model and names any
unknown field or out-of-range value in one line (`ModelConfigError`). Run configs written with
the flat model section of earlier versions are refused (`bapjax.training.run_config.old_layout`).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping

import jax
import jax.numpy as jnp
import numpy as np
import optax

from bapjax.errors import UserError
from bapjax.models import parts
from bapjax.models.common import (  # noqa: F401
    ACTION_FEATURES,
    CHUNK_FIELDS,
    DTYPES,
    LENGTH_CLASSES,
    PACK_ROUNDING_SETTINGS,
    PACK_ROUNDINGS,
    START,
    BuilderModel,
    action_features,
    length_targets,
    pack_steps,
    packed_size,
    resolve_pack_rounding,
    targets_per_row,
)
from bapjax.models.once import OnceBuilder
from bapjax.models.per_step import PerStepBuilder
from bapjax.text.encoders import GRU_TEXT
from bapjax.world import grid as G

MODELS = {"per_step": PerStepBuilder, "once": OnceBuilder}  # config.model.name -> architecture
WORLD_PARTS = {"per_step": parts.WorldCNN, "once": parts.OnceWorld}
DEFAULT_MODEL = "per_step"
SECTIONS = ("text", "world", "decoder", "heads", "length")  # the parts' sub-sections ("length": optional)
MODEL_FIELDS = {"name": DEFAULT_MODEL, "dtype": DTYPES[0]}  # a model section's fields besides its parts, with defaults


class ModelConfigError(UserError):
    """A `config.model` field that the model's parts do not have, or a value out of range (named in
    the message)."""


def _part_classes(values: Mapping) -> dict[str, type]:
    """The part class of each sub-section the model of `values` (a model section) has."""
    name = values.get("name", DEFAULT_MODEL)
    if name not in MODELS:
        raise ModelConfigError(f"--config.model.name={name!r}: the models are {', '.join(MODELS)}")
    text, decoder = dict(values.get("text") or {}), dict(values.get("decoder") or {})
    try:
        decoder_class = parts.decoder_part_class(decoder.get("kind", "gru"))
    except ValueError as err:
        raise ModelConfigError(str(err)) from None
    classes = {"text": parts.text_part_class(text.get("encoder", GRU_TEXT)), "world": WORLD_PARTS[name],
               "decoder": decoder_class, "heads": parts.Heads}
    if values.get("length") is not None:
        classes["length"] = parts.LengthHead
    return classes


def _fields(cls) -> dict[str, dataclasses.Field]:
    return {f.name: f for f in dataclasses.fields(cls)}


def _other_kinds(section: str) -> set[str]:
    """The fields the other kinds of a part have (`complete_section` drops them on a change of kind)."""
    kinds = {"text": [parts.GRUText, parts.FrozenText], "world": list(WORLD_PARTS.values()),
             "decoder": list(parts.DECODER_KINDS.values())}.get(section, [])
    return {name for cls in kinds for name in _fields(cls)}


def model_section(name: str = DEFAULT_MODEL, *, text_encoder: str = GRU_TEXT, decoder: str = "gru",
                  length_head: bool = False) -> dict[str, Any]:
    """The model section of the architecture `name` with these kinds of parts, every field at its
    part's default (the model's only defaults)."""
    values = {"name": name, "text": {"encoder": text_encoder}, "decoder": {"kind": decoder}}
    if length_head:
        values["length"] = {}
    return complete_section(values)


def complete_section(values: Mapping) -> dict[str, Any]:
    """A model section (a copy) with every field of its parts that it lacks at the part's default;
    a field of another kind of the same part (left by a change of kind, e.g. `text.embedding_dim`
    after `text.encoder` became "minilm") is dropped; any other unknown field is kept, so
    `build_model` names it."""
    values = {key: dict(value) if isinstance(value, Mapping) else value for key, value in values.items()}
    for field, default in MODEL_FIELDS.items():
        values.setdefault(field, default)
    for section, cls in _part_classes(values).items():
        given = dict(values.get(section) or {})
        own = _fields(cls)
        given = {k: v for k, v in given.items() if k in own or k not in _other_kinds(section)}
        values[section] = {**{name: f.default for name, f in own.items()}, **given}
    return values


def parts_of(model_config: Mapping) -> dict[str, Any]:
    """The part instances of a model section (fields left out at their defaults; values cast to
    the type of the field's default, as JSON and command lines give 1 for 1.0). Raises
    ModelConfigError naming an unknown field or an out-of-range value."""
    values = {key: (value.to_dict() if hasattr(value, "to_dict") else value) for key, value in dict(model_config).items()}
    unknown = sorted(set(values) - {*MODEL_FIELDS, *SECTIONS})
    if unknown:
        raise ModelConfigError(f"config.model has no field {', '.join(map(repr, unknown))}: a model section has "
                               f"{', '.join(MODEL_FIELDS)} and the parts {', '.join(SECTIONS)}")
    dtype = values.get("dtype", MODEL_FIELDS["dtype"])
    if dtype not in DTYPES:
        raise ModelConfigError(f"--config.model.dtype={dtype!r}: the compute dtypes are {', '.join(DTYPES)}")
    built = {}
    for section, cls in _part_classes(values).items():
        given = dict(values.get(section) or {})
        own = _fields(cls)
        wrong = sorted(set(given) - set(own))
        if wrong:
            raise ModelConfigError(
                f"config.model.{section} has no field {', '.join(map(repr, wrong))}: "
                f"{cls.__name__}'s fields are {', '.join(own)}")
        try:
            part = cls(**{k: type(own[k].default)(v) for k, v in given.items()})
            part.check()
        except ValueError as err:
            raise ModelConfigError(str(err)) from None
        built[section] = part
    return built


def build_model(model_config: Mapping, vocab_size: int) -> BuilderModel:
    """The model `config.model` names, with its parts (`parts_of`)."""
    values = {**MODEL_FIELDS, **dict(model_config)}
    return MODELS[values["name"]](vocab_size=vocab_size, dtype=values["dtype"], **parts_of(model_config))


def model_defaults(name: str = DEFAULT_MODEL) -> dict[str, Any]:
    """The model section of the architecture `name` with GRU text and decoder at their defaults."""
    return model_section(name)


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
    length = getattr(model, "length", None)
    return float(length.loss_weight) if length is not None else 0.0


def dummy_batch(batch_size: int = 2, text_len: int = 8, steps: int = 4, window: int = 4,
                text_dim: int = 384) -> dict[str, Any]:
    """Zero batch with the input pipeline's keys and shapes (for init and tests); `text_states`
    (frozen-encoder states of width `text_dim`) is read only by a frozen text encoder."""
    return {
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
    """Initialise parameters; put the GloVe matrix [V, E] into the word embedding table's first V
    rows (the table's rows past the vocabulary, `text.vocab_multiple`, stay zero)."""
    params = model.init(rng, dummy_batch(), 8)["params"]
    if embedding_matrix is not None:
        table = params["text_encoder"]["embed"]["embedding"]
        matrix = np.asarray(embedding_matrix, np.float32)
        if matrix.shape[1:] != table.shape[1:] or matrix.shape[0] > table.shape[0]:
            raise ValueError(f"embedding matrix shape {matrix.shape} does not fit the model's table {table.shape} "
                             "(config.model.text.embedding_dim must match the vocabulary's vectors)")
        params = jax.tree_util.tree_map(lambda x: x, params)
        params["text_encoder"]["embed"]["embedding"] = table.at[:matrix.shape[0]].set(matrix)
    return params
