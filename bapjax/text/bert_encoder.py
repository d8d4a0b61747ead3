"""A BERT checkpoint directory as a text encoder: WordPiece tokenizer + Flax `BertEncoder`.

`BertTextEncoder(model_dir)` reads `config.json`, `model.safetensors` and `tokenizer.json` (the
Hugging Face layout; `sentence_bert_config.json`, when present, sets the maximum length as
sentence-transformers does) and gives

- `tokenize(sentences, pad_to=None)` -> `Batch` (ids, mask as int32 NumPy [N, L]): [CLS] ... [SEP],
  truncated to `max_length`, padded to a static length bucket (16, 32, 64, ... max_length) so
  the jitted forward compiles once per bucket;
- `token_states(sentences)` -> (float32 [N, L, H] states, int32 [N, L] mask);
- `encode(sentences)` -> float32 [N, H]: the mask-weighted mean of the token states,
  L2-normalized (the sentence-transformers recipe of all-MiniLM-L6-v2).

Sentences are sorted by length and run in chunks of `batch_size` rows (the row count is padded
to a power of two, so the number of compiled programs stays small); results come back in the
input order. Padding never changes a sentence's vector (the mask hides padded keys).
"""

from __future__ import annotations

import dataclasses
import json
from functools import partial
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

from bapjax.text.bert import BertCheckpointError, BertEncoder, load_bert

MIN_BUCKET = 16


@dataclasses.dataclass(frozen=True)
class Batch:
    ids: np.ndarray   # int32 [N, L]
    mask: np.ndarray  # int32 [N, L], 1 = real token ([CLS] and [SEP] included)


def length_bucket(length: int, max_length: int) -> int:
    """The padded length for a longest sequence of `length` tokens: a power of two >= 16, capped."""
    bucket = MIN_BUCKET
    while bucket < length:
        bucket *= 2
    return min(bucket, max_length)


def _row_bucket(rows: int) -> int:
    return 1 << max(rows - 1, 0).bit_length()


@partial(jax.jit, static_argnums=0)
def _forward_states(model: BertEncoder, params, ids, mask):
    return model.apply({"params": params}, ids, mask)


@partial(jax.jit, static_argnums=0)
def _forward_pooled(model: BertEncoder, params, ids, mask):
    states = model.apply({"params": params}, ids, mask).astype(jnp.float32)
    weights = mask.astype(jnp.float32)[..., None]
    mean = (states * weights).sum(1) / jnp.maximum(weights.sum(1), 1e-9)
    return mean / jnp.maximum(jnp.linalg.norm(mean, axis=-1, keepdims=True), 1e-12)


class BertTextEncoder:
    """Tokenizer + pretrained Flax BERT of one checkpoint directory (see the module docstring)."""

    def __init__(self, model_dir: str | Path, max_length: int | None = None, batch_size: int = 64):
        from tokenizers import Tokenizer  # needed only by the pretrained text encoders

        self.model_dir = Path(model_dir)
        self.config, params = load_bert(self.model_dir)
        self.params = jax.device_put(params)  # once, not per call
        self.model = BertEncoder(self.config)
        if max_length is None:
            max_length = self.config.max_position_embeddings
            st_config = self.model_dir / "sentence_bert_config.json"
            if st_config.exists():
                max_length = int(json.loads(st_config.read_text()).get("max_seq_length", max_length))
        self.max_length = min(max_length, self.config.max_position_embeddings)
        self.batch_size = batch_size
        tokenizer_path = self.model_dir / "tokenizer.json"
        if not tokenizer_path.exists():
            raise BertCheckpointError(f"{tokenizer_path}: no such file (the WordPiece tokenizer)")
        try:
            self.tokenizer = Tokenizer.from_file(str(tokenizer_path))
        except Exception as err:  # tokenizers raises a bare Exception for a bad file
            raise BertCheckpointError(f"{tokenizer_path}: not a readable tokenizer ({err})") from err
        # tokenizer.json may carry its own padding/truncation (all-MiniLM-L6-v2's: fixed 128);
        # bapjax pads to its buckets and truncates at max_length like sentence-transformers.
        self.tokenizer.no_padding()
        self.tokenizer.enable_truncation(max_length=self.max_length)

    @property
    def dim(self) -> int:
        return self.config.hidden_size

    def token_ids(self, sentences: list[str]) -> list[list[int]]:
        """WordPiece ids with [CLS]/[SEP], truncated to max_length (no padding)."""
        if isinstance(sentences, str):
            raise TypeError("sentences must be a list of strings, not one string")
        return [e.ids for e in self.tokenizer.encode_batch(list(sentences))]

    def tokenize(self, sentences: list[str], pad_to: int | None = None) -> Batch:
        """Ids and mask padded to the length bucket of the longest sentence (or to `pad_to`)."""
        return self._pad(self.token_ids(sentences), pad_to)

    def _pad(self, ids: list[list[int]], pad_to: int | None, rows: int | None = None) -> Batch:
        longest = max((len(s) for s in ids), default=1)
        length = length_bucket(longest, self.max_length) if pad_to is None else pad_to
        if length < longest or length > self.config.max_position_embeddings:
            raise ValueError(f"pad_to={length}: must be in [{longest}, "
                             f"{self.config.max_position_embeddings}]")
        rows = len(ids) if rows is None else rows
        out = np.full((rows, length), self.config.pad_token_id, np.int32)
        mask = np.zeros((rows, length), np.int32)
        for i, seq in enumerate(ids):
            out[i, :len(seq)] = seq
            mask[i, :len(seq)] = 1
        return Batch(out, mask)

    def _chunks(self, sentences: list[str], pad_to: int | None):
        """(positions in the input, padded Batch) per chunk, shortest sentences first."""
        ids = self.token_ids(sentences)
        order = sorted(range(len(ids)), key=lambda i: len(ids[i]))
        for start in range(0, len(order), self.batch_size):
            chunk = order[start:start + self.batch_size]
            batch = self._pad([ids[i] for i in chunk], pad_to, rows=_row_bucket(len(chunk)))
            yield chunk, batch

    def encode(self, sentences: list[str], pad_to: int | None = None) -> np.ndarray:
        """float32 [N, H]: mask-weighted mean of the token states, L2-normalized."""
        out = np.zeros((len(sentences), self.dim), np.float32)
        for chunk, batch in self._chunks(sentences, pad_to):
            pooled = _forward_pooled(self.model, self.params, batch.ids, batch.mask)
            out[chunk] = np.asarray(pooled)[:len(chunk)]
        return out

    def token_states(self, sentences: list[str], pad_to: int | None = None) -> tuple[np.ndarray, np.ndarray]:
        """(float32 [N, L, H] last-layer states, int32 [N, L] mask), L the bucket of the longest."""
        batch = self.tokenize(sentences, pad_to)
        states = np.zeros((len(sentences), batch.ids.shape[1], self.dim), np.float32)
        for chunk, part in self._chunks(sentences, batch.ids.shape[1]):
            states[chunk] = np.asarray(_forward_states(self.model, self.params, part.ids, part.mask))[:len(chunk)]
        return states, batch.mask
