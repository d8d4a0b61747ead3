"""Frozen BERT token states of dialogue histories: each chat turn encoded once, cached on disk.

The M' builder (paper section 6.3) reads the dialogue through a frozen BERT encoder. Encoding
every item's whole history would redo the same turns thousands of times (an item repeats its
game's earlier chat) and keep N x L x H floats per data set. Instead each distinct turn
("Architect: put a red block on top of it") is encoded once, on its own, by the encoder
(`bapjax.text.bert_encoder.BertTextEncoder`, e.g. `bapjax.text.minilm.load()`), and an item's text
input is the concatenation of its most recent turns' token states, `max_tokens` at most, cut by
the GRU pipeline's rule (`bapjax.text.tokenizer.truncate_newest_first`: whole turns from the
newest backwards; an oldest turn that does not fit keeps its first token and its newest ones).

On disk the turn states live under `$BAPJAX_CACHE/text_states/<encoder name>/`, one float16
`.npy` per turn named by sha256(encoder name, text) and written atomically, so training never
reruns BERT and later runs (and other data sets with the same turns) reuse them. A file that
does not load as float16 [tokens, H] is moved aside (`bapjax.paths.set_aside`) and encoded again. In memory a
featurized set is `ItemTextStates`: a pool of token states [P, H] (each distinct turn once) and
per item the pool rows of its tokens [N, L] (-1 = padding); `gather` builds a batch's
[B, L, H] input from them.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import time
from pathlib import Path
from typing import Protocol, Sequence

import numpy as np
from absl import logging

from bapjax import cli, paths
from bapjax.text import tokenizer
from bapjax.world.items import BapItem, ChatTurn


class TurnEncoder(Protocol):
    """What the store needs of an encoder (BertTextEncoder has it)."""

    dim: int

    def token_states(self, sentences: list[str]) -> tuple[np.ndarray, np.ndarray]: ...


def turn_text(turn: ChatTurn) -> str:
    """The text one chat turn is encoded as: 'Architect: put a red block on top of it'."""
    return f"{turn.speaker}: {' '.join(turn.text.split())}"


def history_turns(item: BapItem) -> list[str]:
    """The item's chat turns as encoder inputs, oldest first (actions are the world input's)."""
    return [turn_text(event) for event in item.history if isinstance(event, ChatTurn)]


class TurnStateStore:
    """Token states of chat turns by text: memory, then disk, then the encoder (batched)."""

    def __init__(self, encoder: TurnEncoder, name: str, root: str | os.PathLike | None = None, chunk: int = 256):
        self.encoder = encoder
        self.chunk = chunk
        self.name = name
        self.root = Path(root) if root is not None else paths.cache_root() / "text_states" / name
        self.memory: dict[str, np.ndarray] = {}
        self.encoded = 0  # turns this store sent to the encoder (the rest came from disk or memory)

    def key(self, text: str) -> str:
        return hashlib.sha256(f"{self.name}\0{text}".encode()).hexdigest()[:32]

    def _path(self, key: str) -> Path:
        return self.root / key[:2] / f"{key}.npy"

    def states(self, texts: Sequence[str]) -> list[np.ndarray]:
        """float16 [tokens, H] per text (the encoder's tokens, [CLS] and [SEP] included)."""
        keys = [self.key(t) for t in texts]
        missing = []
        for text, key in zip(texts, keys):
            if key in self.memory:
                continue
            path = self._path(key)
            if path.exists():
                try:
                    value = np.load(path, allow_pickle=False)
                    if value.dtype != np.float16 or value.ndim != 2 or value.shape[1] != self.encoder.dim:
                        raise ValueError(f"holds {value.dtype} {value.shape}, float16 [tokens, {self.encoder.dim}] expected")
                    self.memory[key] = value
                    continue
                except Exception as err:  # noqa: BLE001 (a damaged file: moved aside, encoded again)
                    paths.set_aside(path, f"unreadable: {type(err).__name__}: {err}",
                                    f"the cached {self.name} states of a chat turn")
            if text not in missing:
                missing.append(text)
        rule, last_log = cli.Progress(len(missing), "new chat turns"), time.time()
        for start in range(0, len(missing), self.chunk):  # chunks: [chunk, L, H] float32 at a time
            part = missing[start:start + self.chunk]
            states, mask = self.encoder.token_states(part)
            self.encoded += len(part)
            done = start + len(part)
            if time.time() - last_log > 30 or done == len(missing):  # a one-time cost of minutes: show it
                last_log = time.time()
                logging.info("encoded with %s: %s", self.name, rule.line(done))
            for text, row, row_mask in zip(part, states, mask):
                value = row[: int(np.asarray(row_mask).sum())].astype(np.float16)
                key = self.key(text)
                self.memory[key] = value
                path = self._path(key)
                path.parent.mkdir(parents=True, exist_ok=True)
                # atomic: a killed run never leaves half a file; a full disk ends with one line
                paths.write_atomically(path, lambda partial: _save_npy(partial, value),
                                       f"the cached {self.name} states of a chat turn")
        return [self.memory[k] for k in keys]


def _save_npy(path: Path, value: np.ndarray) -> None:
    with open(path, "wb") as handle:
        np.save(handle, value)


@dataclasses.dataclass
class ItemTextStates:
    """Featurized text of N items: `pool` float16 [P, H] token states of their distinct turns,
    `rows` int32 [N, L] the pool row of each kept token, oldest first (-1 = padding)."""

    pool: np.ndarray
    rows: np.ndarray
    truncated: int  # items whose history had more than L tokens

    def gather(self, items: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(float32 [B, L, H] token states, bool [B, L] mask) of items (indices into N)."""
        rows = self.rows[items]
        mask = rows >= 0
        return self.pool[np.maximum(rows, 0)].astype(np.float32) * mask[..., None], mask


def item_text_states(items: Sequence[BapItem], store: TurnStateStore, max_tokens: int) -> ItemTextStates:
    """Every item's recent turns as pool rows (see the module docstring)."""
    texts = list(dict.fromkeys(t for item in items for t in history_turns(item)))
    encoded = store.states(texts)
    offsets = np.cumsum([0] + [len(s) for s in encoded])
    pool = np.concatenate(encoded) if encoded else np.zeros((0, store.encoder.dim), np.float16)
    where = {text: (int(offsets[i]), len(encoded[i])) for i, text in enumerate(texts)}
    rows = np.full((len(items), max_tokens), -1, np.int32)
    truncated = 0
    for n, item in enumerate(items):
        turns = history_turns(item)
        segments = (list(range(start, start + length)) for start, length in (where[t] for t in reversed(turns)))
        kept, cut = tokenizer.truncate_newest_first(segments, max_tokens)
        rows[n, :len(kept)] = kept
        truncated += cut
    return ItemTextStates(pool, rows, truncated)
