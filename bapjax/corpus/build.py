"""Assemble the BAP v2 training set into an item store.

    python -m bapjax.corpus.build --out STORE --mdc ../shared/mdc --seed 0 \
        [--datasets mc,bs,ss,r] [--sizes bs=9890:1186:1181,...] [--scale 1.0] \
        [--synthetic bs=DIR,ss=DIR,r=DIR] [--work_dir DIR] [--overwrite]

* D_mc: the MDC training games augmented to the paper's 4x mix (``bapjax.corpus.augment``,
  3 copies per game: 14,836 items), val and test from the original corpus (never augmented).
* D_bs, D_ss, D_r: generated with ``bapjax.sim.generate.generate_corpus`` at Table 3 sizes
  (or ``--sizes``, or all sizes times ``--scale``), or read from existing corpus directories
  given with ``--synthetic``.

Generated and augmented corpora go under ``--work_dir`` (default STORE/sources) and are reused
when a later build asks for the same seed and sizes. The store (``bapjax.corpus.store``) gets
splits train / val / test holding every data set's items with their dataset tag, a vocabulary
built from the training split (``vocab.json``), and a manifest with sources, seeds, sizes and
content hashes. The last line printed is JSON with the per-dataset sizes next to Table 3's.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sys
import time
from pathlib import Path
from typing import Sequence

import numpy as np
from absl import app, flags, logging

from bapjax.corpus import augment, mdc, store
from bapjax.text.vocab import Vocabulary

SPLITS = ("train", "val", "test")
DATASETS = ("mc", "bs", "ss", "r")
TABLE3 = {  # paper Table 3: (train, val, test) items
    "bs": (9890, 1186, 1181),
    "ss": (11868, 1000, 1000),
    "r": (15825, 1161, 1089),
    "mc": (14836, 1331, 1616),
}


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


def augmented_mdc(mdc_path: str, work_dir: Path, seed: int, copies: int, paraphrase_prob: float) -> tuple[Path, dict]:
    """The augmented MDC training corpus (reused if already written with these settings)."""
    out = work_dir / f"mc-aug-seed{seed}-copies{copies}"
    meta_path = out / "data" / "augmentation.json"
    if meta_path.exists():
        meta = json.loads(meta_path.read_text())
        if meta.get("seed") == seed and meta.get("copies") == copies and meta.get("paraphrase_prob") == paraphrase_prob:
            logging.info("reusing the augmented MDC at %s", out)
            return out, {k: v for k, v in meta.items() if k != "games_written"}
    logging.info("augmenting the MDC training games into %s", out)
    stats = augment.augment_games(mdc_path, out, seed, copies, paraphrase_prob)
    return out, stats


def synthetic_corpus(dataset: str, work_dir: Path, seed: int, sizes: tuple[int, int, int],
                     processes: int | None) -> tuple[Path, dict]:
    """A generated corpus (reused if one with this seed and these sizes is there)."""
    from bapjax.sim import generate

    out = work_dir / f"{dataset}-seed{seed}-{sizes[0]}-{sizes[1]}-{sizes[2]}"
    meta_path = out / "data" / "dataset.json"
    if meta_path.exists():
        meta = json.loads(meta_path.read_text())
        requested = meta.get("requested_items", {})
        if meta.get("name") == dataset and meta.get("seed") == seed and \
                tuple(requested.get(s) for s in SPLITS) == tuple(sizes):
            logging.info("reusing the generated %s corpus at %s", dataset, out)
            return out, {"reused": True}
    logging.info("generating %s (%s train / %s val / %s test items) into %s", dataset, *sizes, out)
    stats = generate.generate_corpus(dataset, out, seed, *sizes, processes=processes, progress=True,
                                     overwrite=True)
    return out, {k: stats.get(k) for k in ("seconds", "items_per_second", "skipped_duplicate_targets")}


def build_store(out: str | os.PathLike, mdc_path: str | None, seed: int = 0,
                datasets: Sequence[str] = DATASETS, sizes: dict | None = None, scale: float = 1.0,
                synthetic_dirs: dict | None = None, work_dir: str | os.PathLike | None = None,
                copies: int = 3, paraphrase_prob: float = 0.5, processes: int | None = None,
                overwrite: bool = False, vocab_min_count: int = 1) -> dict:
    """Build the store; returns the manifest."""
    out = Path(out)
    work = Path(work_dir) if work_dir else out / "sources"
    work.mkdir(parents=True, exist_ok=True)
    sizes = dict(sizes or {})
    synthetic_dirs = dict(synthetic_dirs or {})
    unknown = [d for d in datasets if d not in DATASETS]
    if unknown:
        raise ValueError(f"unknown data set(s) {unknown}; expected some of {DATASETS}")
    splits = {s: [] for s in SPLITS}
    sources: dict = {}
    start = time.time()
    for dataset in datasets:
        if dataset == "mc":
            if not mdc_path:
                raise ValueError("data set mc needs --mdc (the MDC corpus)")
            aug_root, aug_stats = augmented_mdc(mdc_path, work, seed, copies, paraphrase_prob)
            original = mdc.load_corpus(mdc_path)
            augmented = mdc.load_corpus(aug_root)
            splits["train"] += augmented.split("train")
            splits["val"] += original.split("val")
            splits["test"] += original.split("test")
            sources["mc"] = {
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
                root, info = synthetic_corpus(dataset, work, seed, want, processes)
                info = {"kind": "synthetic (generated)", "requested": list(want), **info}
            corpus = mdc.load_corpus(root)
            if corpus.dataset != dataset:
                raise ValueError(f"{root}: data/dataset.json names data set {corpus.dataset!r}, not {dataset!r}")
            for split in SPLITS:
                splits[split] += corpus.items.get(split, [])
            meta = root / "data" / "dataset.json"
            sources[dataset] = {**info, "corpus": str(root),
                                "seed": json.loads(meta.read_text()).get("seed") if meta.exists() else None,
                                "dataset_json_sha256": _sha256_of([meta]),
                                "splits_sha256": _sha256_of([root / "data" / "logs" / "splits.json"])}
        logging.info("collected %s after %.0f s", dataset, time.time() - start)
    vocab = Vocabulary.build(splits["train"], min_count=vocab_min_count)
    table3 = {d: dict(zip(SPLITS, TABLE3[d])) for d in datasets}
    manifest = store.write_store(out, splits, sources=sources, seeds={"build": seed},
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
    from bapjax import curriculum

    opened = store.ItemStore(path)
    out: dict = {}
    for split in opened.split_names:
        part = opened.split(split)
        items = list(part)
        tokens = curriculum.history_token_counts(items)
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


FLAGS = flags.FLAGS


def define_flags() -> None:
    if "out" not in FLAGS:
        flags.DEFINE_string("out", None, "Store directory to write.")
    flags.DEFINE_string("mdc", None, "The MDC corpus (directory, archive, or directory with one archive).")
    flags.DEFINE_integer("seed", 0, "Seed for augmentation and generation.")
    flags.DEFINE_list("datasets", list(DATASETS), "Data sets to include (mc, bs, ss, r).")
    flags.DEFINE_string("sizes", "", "Synthetic sizes NAME=TRAIN:VAL:TEST,... (default: Table 3 x --scale).")
    flags.DEFINE_float("scale", 1.0, "Multiply Table 3 synthetic sizes (for quick builds).")
    flags.DEFINE_string("synthetic", "", "Existing synthetic corpora NAME=DIR,... instead of generating.")
    flags.DEFINE_string("work_dir", None, "Where generated/augmented corpora go (default OUT/sources).")
    flags.DEFINE_integer("copies", 3, "Augmented copies per MDC training game.")
    flags.DEFINE_float("paraphrase_prob", 0.5, "Synonym substitution probability.")
    flags.DEFINE_integer("processes", None, "Worker processes for generation.")
    flags.DEFINE_bool("overwrite", False, "Replace an existing store.")
    flags.DEFINE_bool("stats", False, "Only print statistics of the existing store at --out.")


def main(argv: Sequence[str]) -> int:
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments {argv[1:]}")
    if not FLAGS.out:
        raise app.UsageError("--out is required")
    if FLAGS.stats:
        try:
            stats = store_statistics(FLAGS.out)
        except store.StoreError as err:
            print(f"error: {err}", file=sys.stderr)
            return 2
        for dataset, splits in stats.items():
            for split, s in splits.items():
                print(f"{dataset:>3} {split:>5}: {s['items']:6d} items (Table 3: {s['table3']}), EB "
                      f"{100 * s['empty_board_share']:.1f}%, actions mean {s['mean_actions']:.2f} max "
                      f"{s['max_actions']} (>20: {s['over_20_actions']}), history tokens mean "
                      f"{s['mean_history_tokens']:.0f} (>256: {100 * s['over_256_history_tokens']:.1f}%)")
        print(json.dumps(stats))
        return 0
    try:
        manifest = build_store(FLAGS.out, FLAGS.mdc, FLAGS.seed, FLAGS.datasets, parse_sizes(FLAGS.sizes),
                               FLAGS.scale, parse_dirs(FLAGS.synthetic), FLAGS.work_dir, FLAGS.copies,
                               FLAGS.paraphrase_prob, FLAGS.processes, FLAGS.overwrite)
    except (mdc.CorpusError, store.StoreError, ValueError, FileExistsError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    table = size_table(manifest)
    print(f"{'set':>4} " + " ".join(f"{s + ' (built/Table 3)':>24}" for s in SPLITS))
    for dataset, row in table.items():
        print(f"{dataset:>4} " + " ".join(f"{row[s][0]:>12} / {row[s][1]!s:>9}" for s in SPLITS))
    totals = {s: manifest["splits"][s]["items"] for s in SPLITS}
    print(f"total: {totals}; store {FLAGS.out}")
    print(json.dumps({"store": str(FLAGS.out), "sizes": table, "totals": totals,
                      "vocabulary_size": manifest["vocabulary"]["size"]}))
    return 0


if __name__ == "__main__":
    define_flags()
    app.run(main)
