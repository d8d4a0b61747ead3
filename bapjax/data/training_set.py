"""Assemble the BAP v2 training set into an item store (its command: `python -m bapjax.build`).

* D_mc: the MDC training games augmented to the paper's 4x mix (``bapjax.corpus.augment``,
  3 copies per game: 14,836 items), val and test from the original corpus (never augmented).
* D_bs, D_ss, D_r: generated with ``bapjax.sim.generate.generate_corpus`` at Table 3 sizes
  (or ``--sizes``, or all sizes times ``--scale``), or read from existing corpus directories
  given with ``--synthetic``.

Generated and augmented corpora are built once into the bapjax cache (``bapjax.data.sources``:
``$BAPJAX_CACHE/generated/...`` and ``/augmented/...``, the folders ``bapjax.train`` uses too;
``--work_dir`` puts them elsewhere, under the same entry names) and reused when a later build
asks for the same seed and sizes. The store (``bapjax.corpus.store``) gets
splits train / val / test holding every data set's items with their dataset tag, a vocabulary
built from the training split (``vocab.json``), and a manifest with sources, seeds, sizes and
content hashes. The last line printed is JSON with the per-dataset sizes next to Table 3's.

This module sits above ``bapjax.data.sources`` (it builds derived corpora through it); the corpus
package below only reads and stores items.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from pathlib import Path
from typing import Sequence

import numpy as np
from absl import logging

from bapjax import paths
from bapjax.corpus import mdc, store
from bapjax.data import sources
from bapjax.text.tokenizer import history_token_counts
from bapjax.text.vocab import Vocabulary
from bapjax.world.items import DATASETS, SPLITS, TABLE3


def parse_sizes(text: str) -> dict[str, tuple[int, int, int]]:
    """{"bs": (train, val, test)} from "bs=9890:1186:1181,r=100:10:10"."""
    out = {}
    for part in filter(None, (p.strip() for p in (text or "").split(","))):
        try:
            name, sizes = part.split("=")
            train, val, test = (int(v) for v in sizes.split(":"))
        except ValueError as err:
            raise ValueError(f"--sizes entry {part!r}: expected NAME=TRAIN:VAL:TEST") from err
        if name not in ("bs", "ss", "r"):
            raise ValueError(f"--sizes entry {part!r}: sizes are for the synthetic sets bs, ss, r")
        out[name] = (train, val, test)
    return out


def parse_dirs(text: str) -> dict[str, str]:
    out = {}
    for part in filter(None, (p.strip() for p in (text or "").split(","))):
        if "=" not in part:
            raise ValueError(f"--synthetic entry {part!r}: expected NAME=DIR")
        name, path = part.split("=", 1)
        out[name] = path
    return out


def _sha256_of(paths: Sequence[Path]) -> str:
    digest = hashlib.sha256()
    for path in paths:
        if path.exists():
            digest.update(path.name.encode())
            digest.update(path.read_bytes())
    return digest.hexdigest()


def build_store(out: str | os.PathLike, mdc_path: str | None, seed: int = 0,
                datasets: Sequence[str] = DATASETS, sizes: dict | None = None, scale: float = 1.0,
                synthetic_dirs: dict | None = None, work_dir: str | os.PathLike | None = None,
                copies: int = 3, paraphrase_prob: float = 0.5, processes: int | None = None,
                overwrite: bool = False, vocab_min_count: int = 1) -> dict:
    """Build the store; returns the manifest. A store already at `out` is refused before any work
    unless `overwrite`."""
    out = Path(out)
    if (out / "manifest.json").exists() and not overwrite:
        raise FileExistsError(f"{out} holds a store (manifest.json); --overwrite replaces it")
    work = Path(work_dir) if work_dir else None
    sizes = dict(sizes or {})
    synthetic_dirs = dict(synthetic_dirs or {})
    unknown = [d for d in datasets if d not in DATASETS]
    if unknown:
        raise ValueError(f"unknown data set(s) {unknown}; expected some of {DATASETS}")
    splits = {s: [] for s in SPLITS}
    source_info: dict = {}
    start = time.time()
    for dataset in datasets:
        if dataset == "mc":
            mdc_path = paths.mdc_path(mdc_path)  # --mdc, else @mdc (bapjax.paths.mdc_path)
            aug_out = sources.augmented_entry(seed, copies, paraphrase_prob, work) if work else None
            aug_root, _ = sources.augmented_corpus(mdc_path, seed, copies, paraphrase_prob, aug_out, processes)
            aug_stats = json.loads((aug_root / "data" / "augmentation.json").read_text())
            original = mdc.load_corpus(mdc_path)
            augmented = mdc.load_corpus(aug_root)
            splits["train"] += augmented.split("train")
            splits["val"] += original.split("val")
            splits["test"] += original.split("test")
            source_info["mc"] = {
                "kind": "mdc+augmentation", "corpus": str(original.root), "augmented": str(aug_root),
                "seed": seed, "copies": copies, "paraphrase_prob": paraphrase_prob,
                "augmentation": {k: aug_stats.get(k) for k in ("original_items", "augmented_items",
                                                                "substitutions", "games")},
                "splits_sha256": _sha256_of([original.root / "data" / "logs" / "splits.json"]),
            }
        else:
            if dataset in synthetic_dirs:
                root = mdc.resolve_corpus(synthetic_dirs[dataset])
                info = {"kind": "synthetic (given directory)"}
            else:
                want = sizes.get(dataset, tuple(max(1, round(n * scale)) for n in TABLE3[dataset]))
                gen_out = sources.generated_entry(dataset, seed, want, work) if work else None
                root, reused = sources.generated_corpus(dataset, seed, want, processes, gen_out)
                info = {"kind": "synthetic (generated)", "requested": list(want), "reused": reused}
            corpus = mdc.load_corpus(root)
            if corpus.dataset != dataset:
                raise ValueError(f"{root}: data/dataset.json names data set {corpus.dataset!r}, not {dataset!r}")
            for split in SPLITS:
                splits[split] += corpus.items.get(split, [])
            meta = root / "data" / "dataset.json"
            source_info[dataset] = {**info, "corpus": str(root),
                                "seed": json.loads(meta.read_text()).get("seed") if meta.exists() else None,
                                "dataset_json_sha256": _sha256_of([meta]),
                                "splits_sha256": _sha256_of([root / "data" / "logs" / "splits.json"])}
        logging.info("collected %s after %.0f s", dataset, time.time() - start)
    vocab = Vocabulary.build(splits["train"], min_count=vocab_min_count)
    table3 = {d: dict(zip(SPLITS, TABLE3[d])) for d in datasets}
    manifest = store.write_store(out, splits, sources=source_info, seeds={"build": seed},
                                 extra={"datasets": list(datasets), "table3": table3,
                                        "vocabulary": {"file": "vocab.json", "size": vocab.size,
                                                       "min_count": vocab_min_count}},
                                 overwrite=overwrite, progress=True)
    vocab.save(out / "vocab.json")
    return manifest


def size_table(manifest: dict) -> dict:
    """{dataset: {split: [built, table3]}}."""
    table = {}
    for dataset in manifest.get("datasets", []):
        row = {}
        for split in SPLITS:
            built = manifest["splits"].get(split, {}).get("by_dataset", {}).get(dataset, 0)
            row[split] = [built, manifest.get("table3", {}).get(dataset, {}).get(split)]
        table[dataset] = row
    return table


def store_statistics(path: str | os.PathLike) -> dict:
    """Per data set and split: items, empty-board share, mean/max actions, mean history tokens."""
    opened = store.ItemStore(path)
    out: dict = {}
    for split in opened.split_names:
        part = opened.split(split)
        items = list(part)
        tokens = history_token_counts(items)
        datasets = part.datasets
        for dataset in sorted(set(datasets.tolist()), key=lambda d: DATASETS.index(d) if d in DATASETS else 9):
            keep = np.nonzero(datasets == dataset)[0]
            actions = np.array([len(items[i].reference_actions) for i in keep])
            out.setdefault(dataset, {})[split] = {
                "items": int(len(keep)),
                "table3": TABLE3.get(dataset, (None,) * 3)[SPLITS.index(split)] if split in SPLITS else None,
                "empty_board_share": round(float(np.mean([items[i].is_empty_board for i in keep])), 4),
                "mean_actions": round(float(actions.mean()), 3),
                "max_actions": int(actions.max()),
                "over_20_actions": int((actions > 20).sum()),
                "mean_history_tokens": round(float(tokens[keep].mean()), 1),
                "over_256_history_tokens": round(float((tokens[keep] > 256).mean()), 4),
            }
    return out
