"""Items of one split from a path: the reading half of ``bapjax.data.sources``, at the corpus level.

A path is one of: an MDC-layout corpus directory, its ``.tar.xz`` (or a directory holding one
archive), ``@mdc`` (``bapjax.paths.MDC``: the MDC wherever ``paths.mdc_path`` finds it), an item
store directory (``bapjax.corpus.store``, has ``manifest.json``), or an items JSONL file
(``bapjax.world.jsonl``). `load_split` reads any of them; `items_from_flags` is what the CLIs'
``--corpus/--store/--items --split [--dataset]`` flags resolve through, and `first_items` is
their ``--limit N`` (the first N items in that order, for every command alike); `split_names`
lists what a path holds. ``bapjax.data.sources`` re-exports them (with the derived-corpus cache and the
training configs' sources above them); modules below it (the corpus tools, the simulators'
checks) import them from here.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Mapping, Sequence, TypeVar

from bapjax.corpus import mdc
from bapjax.corpus.store import ItemStore
from bapjax.errors import UserError
from bapjax.paths import resolve_path
from bapjax.world import jsonl
from bapjax.world.items import BapItem


class SourceError(UserError):
    """A data source that cannot be resolved; the message names the path or config field."""


def is_store(path: Path) -> bool:
    return path.is_dir() and (path / "manifest.json").exists()


def is_items_file(path: Path) -> bool:
    return path.is_file() and path.name.endswith((".jsonl", ".json", ".jsonl.gz"))


def load_split(path: str | os.PathLike, split: str | None, dataset: str | Sequence[str] | None = None
               ) -> list[BapItem]:
    """Items of one split from a corpus (directory or archive), an item store or an items JSONL
    file (which holds one split already: ``split`` is ignored). ``dataset`` keeps only items
    of those data sets (mc, bs, ss, r)."""
    resolved = resolve_path(path)
    if not resolved.exists():
        raise SourceError(f"{path}: no such corpus, store or items file")
    if is_items_file(resolved):
        items = jsonl.read_items(resolved)
    elif split is None:
        raise SourceError(f"{path}: give a split (train, val or test)")
    elif is_store(resolved):
        store = ItemStore(resolved)
        if split not in store.split_names:
            raise SourceError(f"{path}: the store has no split {split!r} (it has {', '.join(store.split_names)})")
        return store.split(split).items(dataset)
    else:
        corpus = mdc.load_corpus(resolved)
        if split not in corpus.items:
            raise SourceError(f"{path}: no split {split!r} (expected one of {', '.join(corpus.items)})")
        items = list(corpus.split(split))
    if dataset:
        wanted = {dataset} if isinstance(dataset, str) else set(dataset)
        items = [item for item in items if item.dataset in wanted]
    return items


def split_names(path: str | os.PathLike) -> list[str]:
    """The splits a corpus (directory or archive) or an item store holds; [] for an items file
    (it holds one split already)."""
    resolved = resolve_path(path)
    if not resolved.exists():
        raise SourceError(f"{path}: no such corpus, store or items file")
    if is_items_file(resolved):
        return []
    if is_store(resolved):
        return list(ItemStore(resolved).split_names)
    return list(mdc.load_corpus(resolved).items)


def items_from_flags(corpus: str | None = None, split: str | None = None, items: str | None = None,
                     store: str | None = None, dataset: str | None = None) -> list[BapItem]:
    """The CLIs' item flags: exactly one of --corpus, --store, --items (the first two with --split)."""
    given = {name: value for name, value in (("--corpus", corpus), ("--store", store), ("--items", items))
             if value}
    if len(given) != 1:
        named = ", ".join(name for name, value in (("--corpus", corpus), ("--store", store), ("--items", items))
                          if value is not None or name != "--store")
        raise SourceError(f"give exactly one of {named}" + (f" (got {', '.join(given)})" if given else ""))
    (flag, path), = given.items()
    if flag != "--items" and not split:
        raise SourceError(f"{flag} needs --split (train, val or test)")
    if flag == "--store" and not is_store(resolve_path(path)):
        raise SourceError(f"--store {path}: no manifest.json there (build one with python -m bapjax.build)")
    return load_split(path, None if flag == "--items" else split, dataset)


# --------------------------------------------------------------------------------------------
# --limit N: the first N items of a split

# The help of every command's --limit: predict --limit N, then evaluate / report / llm with the
# same N, read the same items.
LIMIT_HELP = "Only the first N items of the split (0: all), as predict --limit N takes them."

T = TypeVar("T")


def check_limit(limit: int) -> None:
    """A --limit value: 0 (all) or a positive count."""
    if limit < 0:
        raise SourceError(f"--limit is {limit}; expected an integer >= 0 (0: all)")


def first_items(items: Sequence[BapItem], limit: int) -> list[BapItem]:
    """The first `limit` items (0: all) in the order `items_from_flags` gives them: the items
    ``python -m bapjax.predict --limit N`` predicts."""
    check_limit(limit)
    return list(items[:limit]) if limit else list(items)


def without_later_items(records: Mapping[str, T], every: Sequence[BapItem], chosen: Sequence[BapItem]
                        ) -> tuple[dict[str, T], int]:
    """(`records` (by item id) less those of items of `every` outside `chosen`, how many were
    left out). A file written for more of the split than --limit takes (predictions of a whole
    split, read with --limit 20) is not wrong; ids of no item of `every` are kept, so the reader's
    own check still names them."""
    chosen_ids = {item.item_id for item in chosen}
    later = {item.item_id for item in every} - chosen_ids
    kept = {item_id: value for item_id, value in records.items() if item_id not in later}
    return kept, len(records) - len(kept)
