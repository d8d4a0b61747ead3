"""Vocabulary built from training items, with GloVe initialisation for its embedding table."""

from __future__ import annotations

import collections
import json
import os
from typing import Iterable, Mapping, Sequence

import numpy as np
from etils import epath

from bapjax.text import tokenizer
from bapjax.text.glove import GLOVE_DIM


class Vocabulary:
    """Token <-> id map. Id 0 is padding, id 1 unknown; special tokens come next."""

    pad_id = 0
    unk_id = 1

    def __init__(self, tokens: Sequence[str]):
        tokens = list(tokens)
        if tokens[:2] != [tokenizer.PAD, tokenizer.UNK]:
            raise ValueError(f"a vocabulary starts with {tokenizer.PAD!r}, {tokenizer.UNK!r}; "
                             f"got {tokens[:2]}")
        if len(set(tokens)) != len(tokens):
            dupes = [t for t, c in collections.Counter(tokens).items() if c > 1]
            raise ValueError(f"vocabulary has duplicate tokens: {dupes[:5]}")
        self.tokens = tokens
        self._ids = {t: i for i, t in enumerate(tokens)}

    @property
    def size(self) -> int:
        return len(self.tokens)

    def __len__(self) -> int:
        return len(self.tokens)

    def token_id(self, token: str) -> int:
        return self._ids.get(token, self.unk_id)

    def ids(self, tokens: Iterable[str]) -> list[int]:
        get = self._ids.get
        unk = self.unk_id
        return [get(t, unk) for t in tokens]

    def encode(self, text: str) -> list[int]:
        """Ids of the word tokens of one utterance (no speaker or boundary tokens)."""
        return self.ids(tokenizer.tokenize(text))

    def decode(self, ids: Iterable[int]) -> list[str]:
        return [self.tokens[i] for i in ids]

    @classmethod
    def build(cls, items: Iterable, min_count: int = 1) -> "Vocabulary":
        """Special tokens, then every word of the items' dialogue seen ``min_count`` times.

        Words are ordered by descending count, then alphabetically, so the result does not
        depend on item order.
        """
        counts: collections.Counter = collections.Counter()
        seen_turns: set = set()
        for item in items:
            for turn in item.dialogue:
                # Items of one game share their history; count each distinct turn once per game.
                key = (item.game_id, turn)
                if key in seen_turns:
                    continue
                seen_turns.add(key)
                counts.update(tokenizer.tokenize(turn.text))
        special = tokenizer.special_tokens()
        special_set = set(special)
        words = sorted((w for w, c in counts.items() if c >= min_count and w not in special_set),
                       key=lambda w: (-counts[w], w))
        return cls(special + words)

    def embedding_matrix(self, glove: Mapping[str, np.ndarray], seed: int = 0,
                         scale: float = 0.1) -> np.ndarray:
        """float32 [V, 50]: GloVe vectors where known, N(0, scale^2) otherwise, zeros for pad."""
        rng = np.random.default_rng(seed)
        matrix = rng.normal(0.0, scale, (self.size, GLOVE_DIM)).astype(np.float32)
        for i, token in enumerate(self.tokens):
            vector = glove.get(token)
            if vector is not None:
                matrix[i] = vector
        matrix[self.pad_id] = 0.0
        return matrix

    def glove_coverage(self, glove: Mapping[str, np.ndarray]) -> float:
        """Share of non-special tokens that have a GloVe vector."""
        special = set(tokenizer.special_tokens())
        words = [t for t in self.tokens if t not in special]
        return sum(t in glove for t in words) / max(len(words), 1)

    def save(self, path: str | os.PathLike) -> None:
        epath.Path(path).write_text(json.dumps({"tokens": self.tokens}), encoding="utf-8")

    @classmethod
    def load(cls, path: str | os.PathLike) -> "Vocabulary":
        try:
            record = json.loads(epath.Path(path).read_text(encoding="utf-8"))
            return cls(record["tokens"])
        except (OSError, json.JSONDecodeError, KeyError, TypeError) as err:
            raise ValueError(f"{path}: not a vocabulary file ({err!r})") from err
