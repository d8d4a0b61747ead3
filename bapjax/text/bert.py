"""A BERT-family encoder in Flax and the loader of its pretrained weights (safetensors, offline).

`BertEncoder` is the standard post-LN BERT encoder (Devlin et al. 2019): word + position + token
type embeddings with LayerNorm, then N layers of masked multi-head self-attention and a GELU MLP,
each followed by a residual add and LayerNorm. Its sizes come from a Hugging Face `config.json`
(`BertConfig.from_json`), so MiniLM-L6-H384 and BERT-base load through the same path:

    config, params = load_bert(model_dir)          # config.json + model.safetensors
    states = BertEncoder(config).apply({"params": params}, ids, mask)   # [B, L, hidden]

`load_bert_params` maps the checkpoint's tensor names (`embeddings.word_embeddings.weight`,
`encoder.layer.3.attention.self.query.weight`, ...; an optional `bert.` prefix and the old
`LayerNorm.gamma/beta` spelling are accepted) onto the module's parameter tree, transposing
PyTorch Linear weights ([out, in] -> Flax [in, out]); the pooler and any task heads are ignored.
No PyTorch is needed. The M' builder (paper section 6.3) uses the module frozen, with a projection
on top; `bapjax.text.minilm` wraps it with the tokenizer and sentence pooling.
"""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from bapjax.errors import UserError


class BertCheckpointError(UserError):
    """A BERT checkpoint directory is missing a file, or its config or tensors do not fit."""


_ACTIVATIONS = {"gelu": False, "gelu_new": True, "gelu_pytorch_tanh": True}  # approximate?


@dataclasses.dataclass(frozen=True)
class BertConfig:
    """The sizes of a BERT checkpoint (the fields of its Hugging Face `config.json`)."""

    vocab_size: int = 30522
    hidden_size: int = 768
    num_hidden_layers: int = 12
    num_attention_heads: int = 12
    intermediate_size: int = 3072
    max_position_embeddings: int = 512
    type_vocab_size: int = 2
    layer_norm_eps: float = 1e-12
    hidden_act: str = "gelu"
    hidden_dropout_prob: float = 0.1
    attention_probs_dropout_prob: float = 0.1
    pad_token_id: int = 0

    @classmethod
    def from_dict(cls, raw: dict, source: str = "config") -> "BertConfig":
        if raw.get("model_type", "bert") != "bert":
            raise BertCheckpointError(f"{source}: model_type is {raw.get('model_type')!r}, not 'bert'")
        if raw.get("position_embedding_type", "absolute") != "absolute":
            raise BertCheckpointError(f"{source}: only absolute position embeddings are supported "
                                      f"(got {raw['position_embedding_type']!r})")
        if raw.get("hidden_act", "gelu") not in _ACTIVATIONS:
            raise BertCheckpointError(f"{source}: hidden_act {raw['hidden_act']!r} is not one of "
                                      f"{sorted(_ACTIVATIONS)}")
        names = {f.name for f in dataclasses.fields(cls)}
        config = cls(**{k: v for k, v in raw.items() if k in names})
        if config.hidden_size % config.num_attention_heads:
            raise BertCheckpointError(f"{source}: hidden_size {config.hidden_size} is not a multiple "
                                      f"of num_attention_heads {config.num_attention_heads}")
        return config

    @classmethod
    def from_json(cls, path: str | Path) -> "BertConfig":
        path = Path(path)
        try:
            raw = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError as err:
            raise BertCheckpointError(f"{path}: no such file (a BERT checkpoint needs config.json)") from err
        except (OSError, ValueError) as err:
            raise BertCheckpointError(f"{path}: not a readable JSON config ({err})") from err
        return cls.from_dict(raw, str(path))


class BertSelfAttention(nn.Module):
    config: BertConfig
    dtype: jnp.dtype = jnp.float32

    @nn.compact
    def __call__(self, x: jax.Array, bias: jax.Array, deterministic: bool) -> jax.Array:
        cfg = self.config
        heads, head_dim = cfg.num_attention_heads, cfg.hidden_size // cfg.num_attention_heads

        def project(name):
            y = nn.Dense(cfg.hidden_size, dtype=self.dtype, name=name)(x)
            return y.reshape(*y.shape[:-1], heads, head_dim)

        q, k, v = project("query"), project("key"), project("value")
        scores = jnp.einsum("bqhd,bkhd->bhqk", q, k) / np.sqrt(head_dim).astype(np.float32)
        weights = jax.nn.softmax(scores.astype(jnp.float32) + bias, axis=-1).astype(self.dtype)
        weights = nn.Dropout(cfg.attention_probs_dropout_prob)(weights, deterministic=deterministic)
        out = jnp.einsum("bhqk,bkhd->bqhd", weights, v)
        return out.reshape(*out.shape[:-2], cfg.hidden_size)


class BertLayer(nn.Module):
    config: BertConfig
    dtype: jnp.dtype = jnp.float32

    @nn.compact
    def __call__(self, x: jax.Array, bias: jax.Array, deterministic: bool) -> jax.Array:
        cfg = self.config
        norm = lambda name: nn.LayerNorm(epsilon=cfg.layer_norm_eps, dtype=self.dtype, name=name)  # noqa: E731
        drop = nn.Dropout(cfg.hidden_dropout_prob)
        attended = BertSelfAttention(cfg, self.dtype, name="attention")(x, bias, deterministic)
        attended = nn.Dense(cfg.hidden_size, dtype=self.dtype, name="attention_output")(attended)
        x = norm("attention_norm")(x + drop(attended, deterministic=deterministic))
        hidden = nn.Dense(cfg.intermediate_size, dtype=self.dtype, name="intermediate")(x)
        hidden = nn.gelu(hidden, approximate=_ACTIVATIONS[cfg.hidden_act])
        hidden = nn.Dense(cfg.hidden_size, dtype=self.dtype, name="output")(hidden)
        return norm("output_norm")(x + drop(hidden, deterministic=deterministic))


class BertEncoder(nn.Module):
    """Token ids [B, L] and attention mask [B, L] (1 = real token) -> hidden states [B, L, H].

    `token_type_ids` default to zeros (single-segment input). Padded positions get states too
    (they attend to the real tokens); callers pool with the mask.
    """

    config: BertConfig
    dtype: jnp.dtype = jnp.float32

    @nn.compact
    def __call__(self, input_ids: jax.Array, attention_mask: jax.Array,
                 token_type_ids: jax.Array | None = None, deterministic: bool = True) -> jax.Array:
        cfg = self.config
        length = input_ids.shape[-1]
        if length > cfg.max_position_embeddings:
            raise ValueError(f"sequence length {length} > max_position_embeddings "
                             f"{cfg.max_position_embeddings}")
        if token_type_ids is None:
            token_type_ids = jnp.zeros_like(input_ids)
        embed = lambda n, size: nn.Embed(size, cfg.hidden_size, dtype=self.dtype, name=n)  # noqa: E731
        x = (embed("word_embeddings", cfg.vocab_size)(input_ids)
             + embed("position_embeddings", cfg.max_position_embeddings)(jnp.arange(length))[None]
             + embed("token_type_embeddings", cfg.type_vocab_size)(token_type_ids))
        x = nn.LayerNorm(epsilon=cfg.layer_norm_eps, dtype=self.dtype, name="embeddings_norm")(x)
        x = nn.Dropout(cfg.hidden_dropout_prob)(x, deterministic=deterministic)
        # Additive key mask [B, 1, 1, L]: padded keys get a large negative score (as Hugging Face's
        # finfo.min); a finite value keeps all-padding rows NaN-free.
        bias = jnp.where(attention_mask[:, None, None, :] > 0, 0.0, jnp.finfo(jnp.float32).min)
        for i in range(cfg.num_hidden_layers):
            x = BertLayer(cfg, self.dtype, name=f"layer_{i}")(x, bias, deterministic)
        return x


# --- the loader --------------------------------------------------------------------------------

def _checkpoint_name(flax_path: tuple[str, ...]) -> str:
    """The safetensors name (Hugging Face BertModel layout) of one Flax parameter."""
    *module, leaf = flax_path
    linear = {"kernel": "weight", "bias": "bias"}
    norm = {"scale": "weight", "bias": "bias"}
    if module == ["word_embeddings"] or module == ["position_embeddings"] or module == ["token_type_embeddings"]:
        return f"embeddings.{module[0]}.weight"
    if module == ["embeddings_norm"]:
        return f"embeddings.LayerNorm.{norm[leaf]}"
    layer = int(module[0].removeprefix("layer_"))
    prefix = f"encoder.layer.{layer}"
    rest = module[1:]
    if rest[0] == "attention":
        return f"{prefix}.attention.self.{rest[1]}.{linear[leaf]}"
    return {
        "attention_output": f"{prefix}.attention.output.dense.{linear.get(leaf)}",
        "attention_norm": f"{prefix}.attention.output.LayerNorm.{norm.get(leaf)}",
        "intermediate": f"{prefix}.intermediate.dense.{linear.get(leaf)}",
        "output": f"{prefix}.output.dense.{linear.get(leaf)}",
        "output_norm": f"{prefix}.output.LayerNorm.{norm.get(leaf)}",
    }[rest[0]]


def _normalize_name(name: str) -> str:
    """Accept the `bert.` prefix of pretraining checkpoints and the old gamma/beta LayerNorm names."""
    name = name.removeprefix("bert.")
    name = re.sub(r"LayerNorm\.gamma$", "LayerNorm.weight", name)
    return re.sub(r"LayerNorm\.beta$", "LayerNorm.bias", name)


def read_safetensors(path: str | Path) -> dict[str, np.ndarray]:
    """All tensors of a safetensors file as NumPy arrays (names normalized), no PyTorch."""
    from safetensors.numpy import load_file  # bapjax needs safetensors only to read checkpoints

    path = Path(path)
    if not path.exists():
        raise BertCheckpointError(f"{path}: no such file (a BERT checkpoint needs model.safetensors)")
    try:
        tensors = load_file(str(path))
    except Exception as err:  # safetensors raises its own error types for damaged files
        raise BertCheckpointError(f"{path}: not a readable safetensors file ({err})") from err
    return {_normalize_name(k): v for k, v in tensors.items()}


def load_bert_params(config: BertConfig, tensors: dict[str, np.ndarray], source: str = "checkpoint"):
    """The `BertEncoder(config)` parameter tree filled from checkpoint tensors (float32 NumPy).

    Every parameter must be present with the expected shape (the error names the tensor);
    tensors the encoder does not use (pooler, position_ids, task heads) are ignored.
    """
    model = BertEncoder(config)
    ids = jnp.zeros((1, 2), jnp.int32)
    abstract = jax.eval_shape(lambda: model.init(jax.random.key(0), ids, jnp.ones_like(ids)))["params"]

    def fill(path, leaf):
        keys = tuple(p.key for p in path)
        name = _checkpoint_name(keys)
        if name not in tensors:
            raise BertCheckpointError(f"{source}: tensor {name} is missing (needed for {'/'.join(keys)})")
        value = np.asarray(tensors[name], dtype=np.float32)
        if keys[-1] == "kernel":
            value = value.T  # PyTorch Linear stores [out, in]
        if value.shape != leaf.shape:
            raise BertCheckpointError(f"{source}: tensor {name} has shape {tuple(tensors[name].shape)}, "
                                      f"config.json implies {leaf.shape if keys[-1] != 'kernel' else leaf.shape[::-1]}")
        return value

    return jax.tree_util.tree_map_with_path(fill, abstract)


def load_bert(model_dir: str | Path) -> tuple[BertConfig, dict]:
    """(config, params) of the BERT checkpoint in `model_dir` (config.json + model.safetensors)."""
    model_dir = Path(model_dir)
    config = BertConfig.from_json(model_dir / "config.json")
    tensors = read_safetensors(model_dir / "model.safetensors")
    return config, load_bert_params(config, tensors, str(model_dir / "model.safetensors"))
