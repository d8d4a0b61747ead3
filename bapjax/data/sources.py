"""A training config's data sources as BAP items, and one cache layout for derived corpora.

A path names items as ``bapjax.corpus.load`` reads them (`load_split`: a corpus directory or
archive, ``@mdc``, an item store, an items JSONL file; `items_from_flags`: the CLIs'
``--corpus/--store/--items --split [--dataset]``); `load_source` resolves a training config's
``config.data.sources.<name>`` (used by ``bapjax.train``), simulated and augmented corpora included;
`train_items` is what training reads of them: each source's train items through its ``teacher``
block (``bapjax.data.teacher``), with each item's weight in the loss.

Derived corpora are built once into the cache (``bapjax.paths.cache_root()``), in folders named
by `generated_entry` and `augmented_entry` (the one statement of the names):

    generated/<dataset>-seed<seed>-<train>-<val>-<test>/   simulated D_bs / D_ss / D_r
    augmented/mc-seed<seed>-copies<copies>-p<paraphrase>/  the augmented MDC training games

Both ``bapjax.train`` and ``bapjax.build`` use these folders, in-process. An entry counts
only once its completion record (``bapjax.paths.seal``: every file's size and checksum) is
written, after the whole corpus is; a folder without it (a killed build) is removed and built
again. An entry whose files no longer match the record, or whose games fail to parse, is moved
to ``<cache>/damaged/`` with one warning and built again (``bapjax.paths.set_aside``). A full
disk during a build ends with one line naming the entry (``paths.NoSpaceError``); the half-built
folder is removed.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import numpy as np
from absl import logging

from bapjax import paths
from bapjax.corpus import augment, mdc
from bapjax.corpus.load import SourceError
from bapjax.corpus.store import ItemStore, StoreError
from bapjax.data import teacher
from bapjax.paths import cache_root, resolve_path
from bapjax.sim import generate
from bapjax.world.items import SPLITS, BapItem  # SPLITS: also read here by bapjax.train

COMPLETE = paths.COMPLETE  # written last into a finished cache entry (what it holds)


# --------------------------------------------------------------------------------------------
# Derived corpora in the cache


def _safely(matches: Callable[[Path], bool], path: Path) -> bool:
    try:
        return bool(matches(path))
    except (OSError, ValueError, KeyError, AttributeError):  # a damaged entry is rebuilt
        return False


def _cached_entry(out: Path, matches: Callable[[Path], bool], build: Callable[[Path], Any], what: str,
                  writer: str) -> tuple[Path, bool]:
    """(`out`, True) when it holds a finished entry that `matches`; else (re)build it: (`out`, False).
    Only a folder `writer` wrote (bapjax.paths owner marker) is ever removed; two processes
    asking for the same entry build it once (bapjax.paths.build_lock)."""
    with paths.build_lock(out):
        return _cached_entry_locked(out, matches, build, what, writer)


def _cached_entry_locked(out, matches, build, what, writer) -> tuple[Path, bool]:
    if paths.is_sealed(out):
        problem = paths.seal_problem(out)
        if problem is None and _safely(matches, out):
            logging.info("reusing %s at %s", what, out)
            return out, True
        if problem is not None:
            paths.check_replaceable(out, writer, what)
            paths.set_aside(out, problem, what)
    if out.exists():
        paths.check_replaceable(out, writer, what)
        logging.warning("removing the unfinished or different %s at %s", what, out)
        shutil.rmtree(out)
    with paths.writing(out, what, cleanup=[out]):
        build(out)
        paths.seal(out, writer=writer)
    return out, False


def _load_derived(entry: Path, rebuild: Callable[[], tuple[Path, bool]], what: str):
    """The itemized corpus of the derived cache entry `entry`; when a game in it fails to parse,
    the entry is moved aside (one warning) and `rebuild` makes it again (outside the cache: the
    error stands)."""
    try:
        return mdc.load_corpus(entry)
    except mdc.CorpusError as err:
        named = [str(p) for p in (entry, entry.resolve()) if str(p) in str(err)]
        if not (paths.in_cache(entry) and named):  # a mistake in the corpus the user gave stands
            raise
        with paths.build_lock(entry):
            if entry.exists():
                paths.set_aside(entry, str(err).replace(named[0] + "/", ""), what)
        return mdc.load_corpus(rebuild()[0])


def generated_entry(dataset: str, seed: int, sizes: Sequence[int], parent: str | os.PathLike | None = None
                    ) -> Path:
    """The folder of the generated corpus of `dataset` with (train, val, test) `sizes` for `seed`:
    under `parent` when given (``bapjax.build --work_dir``), else under the cache's ``generated/``."""
    train, val, test = (int(n) for n in sizes)
    return Path(parent or cache_root() / "generated") / f"{dataset}-seed{seed}-{train}-{val}-{test}"


def augmented_entry(seed: int, copies: int, paraphrase_prob: float, parent: str | os.PathLike | None = None) -> Path:
    """The folder of the augmented MDC for these settings: under `parent` when given, else under
    the cache's ``augmented/``."""
    name = f"mc-seed{seed}-copies{copies}-p{paraphrase_prob:g}"
    return Path(parent or cache_root() / "augmented") / name


def generated_corpus(dataset: str, seed: int, sizes: Sequence[int], processes: int | None = None,
                     out: str | os.PathLike | None = None, progress: bool = True) -> tuple[Path, bool]:
    """The simulated corpus of `dataset` (bs, ss, r) with (train, val, test) items for `seed`,
    generated on first use (``bapjax.sim.generate``). Returns (directory, whether it was reused)."""
    sizes = tuple(int(n) for n in sizes)
    root = Path(out) if out else generated_entry(dataset, seed, sizes)

    def matches(path: Path) -> bool:
        meta = json.loads((path / "data" / "dataset.json").read_text())
        requested = meta.get("requested_items", {})
        return meta.get("name") == dataset and meta.get("seed") == seed and \
            tuple(requested.get(s) for s in SPLITS) == sizes and \
            meta.get("simulator_version") == generate.SIMULATOR_VERSION  # older simulators: rebuilt

    def build(path: Path) -> None:
        logging.info("generating %s (%s train / %s val / %s test items) into %s", dataset, *sizes, path)
        generate.generate_corpus(dataset, path, seed, *sizes, processes=processes, progress=progress,
                                 overwrite=True)

    return _cached_entry(root, matches, build, f"the generated {dataset} corpus", generate.WRITER)


def augmented_corpus(mdc_path: str | os.PathLike, seed: int, copies: int = augment.DEFAULT_COPIES,
                     paraphrase_prob: float = augment.DEFAULT_PARAPHRASE_PROB,
                     out: str | os.PathLike | None = None, processes: int | None = None) -> tuple[Path, bool]:
    """The MDC training games augmented `copies` times (``bapjax.corpus.augment``) plus the
    originals, built on first use. Returns (directory, whether it was reused)."""
    source = mdc.resolve_corpus(resolve_path(mdc_path))
    root = Path(out) if out else augmented_entry(seed, copies, paraphrase_prob)

    def matches(path: Path) -> bool:
        meta = json.loads((path / "data" / "augmentation.json").read_text())
        # "mirror": an entry built with mirrored copies (possible up to commit 57cc1b0) is not this one
        return (meta.get("seed"), meta.get("copies"), meta.get("paraphrase_prob"), meta.get("source"),
                bool(meta.get("mirror", False))) == (seed, copies, paraphrase_prob, str(source), False)

    def build(path: Path) -> None:
        logging.info("augmenting the MDC training games of %s into %s", source, path)
        augment.augment_games(source, path, seed, copies, paraphrase_prob, processes=processes)

    return _cached_entry(root, matches, build, "the augmented MDC", augment.WRITER)


# --------------------------------------------------------------------------------------------
# Training config sources


def source_is_set(source: Mapping) -> bool:
    return bool(source.get("corpus", "") or source.get("generate", None) or source.get("store", ""))


def source_splits(source: Mapping) -> tuple[str, ...]:
    """The splits a source keeps: its `splits` field, all three when unset or empty."""
    return tuple(source.get("splits", SPLITS) or SPLITS)


def load_source(name: str, source: Mapping) -> dict[str, list[BapItem]]:
    """{split: items} of ``config.data.sources.<name>``: a `store` (+ `dataset`), a `corpus`, or
    a `generate` block; train items from `train_corpus` or the `augment` block when given;
    `max_<split>_items` caps; `splits` (default all three) keeps only those splits, e.g.
    ("test",) for a set a model is evaluated on but not trained on; `dataset` tags every item
    (the curriculum's metric D)."""
    where = f"config.data.sources.{name}"
    wanted = source_splits(source)
    unknown = [s for s in wanted if s not in SPLITS]
    if unknown:
        raise SourceError(f"{where}.splits: {unknown} are not splits ({', '.join(SPLITS)})")
    tag = source.get("dataset", "") or None
    if source.get("store", ""):
        try:
            store = ItemStore(resolve_path(source["store"]))
        except StoreError as err:
            raise SourceError(f"{where}.store: {err}") from None
        splits = {split: (store.split(split).items(tag) if split in store.split_names else [])
                  for split in SPLITS}
    else:
        if source.get("generate", None):
            gen = source["generate"]
            sizes = (gen["train_items"], gen["val_items"], gen["test_items"])
            def generate_it():
                return generated_corpus(gen["dataset"], int(gen["seed"]), sizes, gen.get("processes", 0) or None,
                                        gen.get("out", "") or None)

            corpus_path, _ = generate_it()
            corpus = _load_derived(corpus_path, generate_it, f"the generated {gen['dataset']} corpus")
        elif source.get("corpus", ""):
            corpus_path = resolve_path(source["corpus"])
            corpus = mdc.load_corpus(corpus_path)
        else:
            raise SourceError(f"{where}: needs `corpus`, `store` or `generate`")
        splits = {split: list(corpus.split(split)) for split in SPLITS}
        train_path = source.get("train_corpus", "")
        aug = source.get("augment", None)
        if not train_path and aug and aug.get("enabled", True) and "train" in wanted:
            def augment_it():
                return augmented_corpus(corpus_path, int(aug["seed"]), int(aug.get("copies", augment.DEFAULT_COPIES)),
                                        float(aug.get("paraphrase_prob", augment.DEFAULT_PARAPHRASE_PROB)), aug.get("out", "") or None)

            splits["train"] = list(_load_derived(augment_it()[0], augment_it, "the augmented MDC").split("train"))
        elif train_path:
            splits["train"] = list(mdc.load_corpus(resolve_path(train_path)).split("train"))
    for split in SPLITS:
        if split not in wanted:
            splits[split] = []
        cap = int(source.get(f"max_{split}_items", 0) or 0)
        if cap:
            splits[split] = splits[split][:cap]
    if tag:  # the config names the data set when the corpus does not
        for split, items in splits.items():
            splits[split] = [dataclasses.replace(it, dataset=tag) if it.dataset != tag else it for it in items]
    return splits


def train_items(config, data: Mapping[str, Mapping[str, list[BapItem]]], log: Callable[..., None] | None = None
                ) -> tuple[list[BapItem], np.ndarray]:
    """What training reads of `data` (`load_config_sources`): every source's train items in order,
    each source's through its ``teacher`` block (`bapjax.data.teacher.apply`: the teacher's targets
    in place of the references or beside them), and each item's weight in the loss (float32)."""
    items, weights = [], []
    for name, splits in data.items():
        block = config.data.sources[name].get("teacher", None)
        taught, weight = teacher.apply(f"config.data.sources.{name}.teacher", block, splits["train"], log)
        items += taught
        weights.append(weight)
    return items, np.concatenate(weights) if weights else np.zeros(0, np.float32)


def load_config_sources(config, log: Callable[..., None] = lambda message, *args: print(message % args)
                        ) -> dict[str, dict[str, list[BapItem]]]:
    """{source name: {split: items}} for every source of ``config.data.sources`` with a corpus,
    store or generate block (what training, `bapjax.llm finetune-set` and the benchmarks read)."""
    data = {}
    used = [name for name, source in config.data.sources.items() if source_is_set(source)]
    for name, source in config.data.sources.items():
        if name in used:
            data[name] = load_source(name, source)
            log("source %s: %s", name, {k: len(v) for k, v in data[name].items()})
        else:
            log("source %s: skipped: the config gives it no corpus, store or generator (data.sources.%s.corpus "
                "is empty), so the run trains and tests on %s only; --config.data.sources.%s.corpus=PATH adds it "
                "(@mdc: the MDC as bapjax finds it)", name, name, ", ".join(used) or "no source", name)
    return data
