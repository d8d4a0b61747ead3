"""Retrieval few-shot (Kranti et al. 2024): the training items whose last instruction is nearest.

An item's last instruction (`formats.last_instruction`: the Architect's turns since the
Builder's latest action) is embedded with all-MiniLM-L6-v2 (`bapjax.text.minilm.encode`,
L2-normalized, so a dot product is the cosine); the K pool items with the highest cosine are the
item's examples, best first, ties in pool order. Pool items from the query's own game are left
out by default (in a training split they would hand the model its own answer's context).

Sentence vectors are cached under ``$BAPJAX_CACHE/sentence_vectors/minilm/``: one float32
``.npy`` per list of distinct texts, named by sha256 of the encoder name and the texts, written
atomically, so a second export of the same split and pool encodes nothing.
"""

from __future__ import annotations

import hashlib
import os
import sys
import time
from pathlib import Path
from typing import Callable, Sequence

import numpy as np

from bapjax import paths
from bapjax.llm.formats import last_instruction
from bapjax.world.items import BapItem

ENCODER = "minilm"
CHUNK = 512


def _minilm_encode(texts: list[str]) -> np.ndarray:
    from bapjax.text import minilm  # JAX + weights only when vectors are missing

    return minilm.encode(texts)


class SentenceVectors:
    """Unit sentence vectors by text list: disk cache, else the encoder in chunks (with progress)."""

    def __init__(self, encode: Callable[[list[str]], np.ndarray] = _minilm_encode, name: str = ENCODER,
                 root: str | os.PathLike | None = None):
        self.encode = encode
        self.name = name
        self.root = Path(root) if root is not None else paths.cache_root() / "sentence_vectors" / name
        self.encoded = 0  # texts sent to the encoder by this object

    def path(self, texts: Sequence[str]) -> Path:
        digest = hashlib.sha256(self.name.encode())
        for text in texts:
            digest.update(b"\0" + text.encode())
        return self.root / f"{digest.hexdigest()[:40]}.npy"

    def vectors(self, texts: Sequence[str], what: str = "texts") -> np.ndarray:
        """float32 [N, D] for `texts` (duplicates encoded once)."""
        distinct = list(dict.fromkeys(texts))
        path = self.path(distinct)
        if path.exists():
            table = np.load(path)
        else:
            parts, began = [], time.time()
            for start in range(0, len(distinct), CHUNK):
                parts.append(np.asarray(self.encode(distinct[start:start + CHUNK]), np.float32))
                done = start + len(parts[-1])
                print(f"encoded {done}/{len(distinct)} {what} with {self.name} ({time.time() - began:.0f} s)",
                      file=sys.stderr, flush=True)
            self.encoded += len(distinct)
            table = np.concatenate(parts) if parts else np.zeros((0, 1), np.float32)
            path.parent.mkdir(parents=True, exist_ok=True)
            partial = path.with_name(f".{path.name}.{os.getpid()}.tmp")
            with open(partial, "wb") as handle:
                np.save(handle, table)
            os.replace(partial, path)  # atomic: a killed run never leaves half a file
        row = {text: n for n, text in enumerate(distinct)}
        return table[[row[t] for t in texts]] if texts else table[:0]


def nearest(queries: np.ndarray, pool: np.ndarray, k: int, excluded: np.ndarray | None = None) -> np.ndarray:
    """int [Q, k] pool rows by descending cosine (ties: lower row first); `excluded` bool [Q, P]
    rows are never chosen (fewer than k left: -1 fills). Vectors must be unit length."""
    scores = queries @ pool.T
    if excluded is not None:
        scores = np.where(excluded, -np.inf, scores)
    order = np.argsort(-scores, axis=1, kind="stable")[:, :k]
    chosen = np.take_along_axis(scores, order, axis=1)
    return np.where(np.isfinite(chosen), order, -1)


def nearest_reference(queries, pool, k, excluded=None) -> list[list[int]]:
    """`nearest` in plain Python (the definition the tests hold the vectorized one to)."""
    out = []
    for q, query in enumerate(queries):
        ranked = []
        for p, vector in enumerate(pool):
            if excluded is not None and excluded[q][p]:
                continue
            ranked.append((-sum(float(a) * float(b) for a, b in zip(query, vector)), p))
        ranked.sort()
        rows = [p for _, p in ranked[:k]]
        out.append(rows + [-1] * (k - len(rows)))
    return out


def few_shot(items: Sequence[BapItem], pool: Sequence[BapItem], k: int, vectors: SentenceVectors | None = None,
             exclude_same_game: bool = True) -> list[list[BapItem]]:
    """The `k` nearest pool items of every item, best first (see the module docstring)."""
    if k <= 0 or not items:
        return [[] for _ in items]
    vectors = vectors or SentenceVectors()
    pool_vectors = vectors.vectors([last_instruction(p) for p in pool], "pool instructions")
    query_vectors = vectors.vectors([last_instruction(i) for i in items], "item instructions")
    excluded = None
    if exclude_same_game:
        games = np.array([p.game_id for p in pool])
        excluded = np.array([i.game_id for i in items])[:, None] == games[None, :]
    rows = nearest(query_vectors, pool_vectors, k, excluded)
    return [[pool[r] for r in row if r >= 0] for row in rows]
