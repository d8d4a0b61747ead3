"""A compact on-disk store of BAP items with a manifest and O(1) random access.

Layout of a store directory::

    manifest.json              format, version, sources, seeds, per-split sizes and hashes
    <split>.items              concatenated records, each zlib-compressed compact item JSON
    <split>.offsets.npy        int64 [N + 1]: byte offset of record i is offsets[i]
    <split>.columns.npz        per-item columns for sampling without decoding items:
                               dataset (str), num_actions (int32), history_events (int32),
                               empty_board (bool), item_id (str)

A record is ``BapItem.to_json()`` without the derivable fields ``dialogue`` and
``is_empty_board`` (``BapItem.from_json`` restores them). Items are unique by
(dataset, item_id): synthetic corpora number their games alike, so the dataset tag is part of
the key. ``manifest.json["splits"][split]`` holds ``items``, ``by_dataset`` (item counts),
``sha256`` of the ``.items`` file and ``content_sha256`` (of the records in order, so it does not
depend on compression), and ``bytes``.
"""

from __future__ import annotations

import collections
import datetime
import hashlib
import json
import os
import zlib
from pathlib import Path
from typing import Any, Iterable, Iterator, Mapping, Sequence

import numpy as np
import orjson
from absl import logging

from bapjax import cli
from bapjax.errors import UserError
from bapjax.paths import file_sha256
from bapjax.world import grid
from bapjax.world.grid import Action, Block
from bapjax.world.items import BapItem, BuilderPose, ChatTurn

STORE_FORMAT = "bapjax-item-store"
STORE_VERSION = 1
_DERIVED_FIELDS = ("dialogue", "is_empty_board")


class StoreError(UserError):
    """A store file is missing, malformed or does not match its manifest; names the file."""


def item_record(item: BapItem) -> bytes:
    record = item.to_json()
    for field in _DERIVED_FIELDS:
        record.pop(field, None)
    return orjson.dumps(record, option=orjson.OPT_SORT_KEYS)


def _history_action(record: Mapping[str, Any], where: str) -> Action:
    """A history action; unlike grid.action_from_dict it accepts cells outside the build region
    (MDC histories hold a few earlier actions outside it, while the item itself is inside)."""
    try:
        return Action(grid.TYPE_TO_ID[record["type"]], grid.color_id(str(record["color"])),
                      int(record["x"]), int(record["y"]), int(record["z"]))
    except (KeyError, TypeError, ValueError) as err:
        raise StoreError(f"{where}: bad history action {record!r} ({err!r})") from err


def item_from_record(record: Mapping[str, Any], where: str) -> BapItem:
    """Inverse of ``item_record``. Records were validated when written, so this decodes directly;
    a malformed record falls back to ``BapItem.from_json`` for an error that names the field."""
    colors, types = grid.COLOR_TO_ID, grid.TYPE_TO_ID
    try:
        history = tuple(
            Action(types[e["action"]["type"]], colors[e["action"]["color"]], e["action"]["x"],
                   e["action"]["y"], e["action"]["z"]) if "action" in e else ChatTurn(e["speaker"], e["text"])
            for e in record.get("history", ()))
        pose = record["builder_pose"]
        return BapItem(
            item_id=record["item_id"], game_id=record["game_id"], target_id=record["target_id"],
            split=record["split"], history=history,
            prev_structure=tuple(Block(b["x"], b["y"], b["z"], colors[b["color"]]) for b in record["prev_structure"]),
            reference_actions=tuple(Action(types[a["type"]], colors[a["color"]], a["x"], a["y"], a["z"])
                                    for a in record["reference_actions"]),
            next_structure=tuple(Block(b["x"], b["y"], b["z"], colors[b["color"]]) for b in record["next_structure"]),
            builder_pose=BuilderPose(*(float(pose[k]) for k in BuilderPose._fields)),
            dataset=record["dataset"])
    except (KeyError, TypeError) as err:
        # The validating path names the bad field when it can.
        try:
            for n, e in enumerate(record.get("history", [])):
                if "action" in e:
                    _history_action(e["action"], f"{where} history[{n}]")
            BapItem.from_json({k: v for k, v in record.items() if k != "history"}, where=where)
        except ValueError as detail:
            raise StoreError(str(detail)) from err
        raise StoreError(f"{where}: malformed record: missing or bad field {err!r}") from err


def write_split(out_dir: Path, split: str, items: Sequence[BapItem], level: int = 6,
                progress: bool = False) -> dict:
    """Write one split's files; returns its manifest entry."""
    seen: set = set()
    offsets = np.zeros(len(items) + 1, np.int64)
    content = hashlib.sha256()
    items_path = out_dir / f"{split}.items"
    tmp = items_path.with_suffix(f".items.tmp{os.getpid()}")
    rule = cli.Progress(len(items), f"{split} items")
    with open(tmp, "wb") as f:
        for n, item in enumerate(items):
            key = (item.dataset, item.item_id)
            if key in seen:
                raise StoreError(f"{split}: item {item.item_id} of data set {item.dataset} appears twice")
            seen.add(key)
            raw = item_record(item)
            content.update(len(raw).to_bytes(8, "little"))
            content.update(raw)
            packed = zlib.compress(raw, level)
            f.write(packed)
            offsets[n + 1] = offsets[n] + len(packed)
            if progress and (n + 1) % 10000 == 0:
                logging.info("stored %s", rule.line(n + 1))
    tmp.replace(items_path)
    np.save(out_dir / f"{split}.offsets.npy", offsets)
    np.savez_compressed(out_dir / f"{split}.columns.npz",
             dataset=np.array([i.dataset for i in items], dtype=str),
             item_id=np.array([i.item_id for i in items], dtype=str),
             num_actions=np.array([len(i.reference_actions) for i in items], np.int32),
             history_events=np.array([len(i.history) for i in items], np.int32),
             empty_board=np.array([i.is_empty_board for i in items], bool))
    return {
        "items": len(items),
        "by_dataset": dict(sorted(collections.Counter(i.dataset for i in items).items())),
        "empty_board": int(sum(i.is_empty_board for i in items)),
        "mean_actions": round(float(np.mean([len(i.reference_actions) for i in items])), 4) if items else 0.0,
        "bytes": int(offsets[-1]),
        "sha256": file_sha256(items_path),
        "content_sha256": content.hexdigest(),
    }


def write_store(out_dir: str | os.PathLike, splits: Mapping[str, Sequence[BapItem]],
                sources: Mapping[str, Any] | None = None, seeds: Mapping[str, Any] | None = None,
                extra: Mapping[str, Any] | None = None, overwrite: bool = False,
                progress: bool = False) -> dict:
    """Write a store; returns the manifest (also written as manifest.json, last)."""
    out = Path(out_dir)
    if (out / "manifest.json").exists():
        if not overwrite:
            raise FileExistsError(f"{out}/manifest.json exists; pass overwrite=True to replace the store")
        (out / "manifest.json").unlink()
    out.mkdir(parents=True, exist_ok=True)
    manifest = {
        "format": STORE_FORMAT,
        "version": STORE_VERSION,
        "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "sources": dict(sources or {}),
        "seeds": dict(seeds or {}),
        "splits": {},
        **dict(extra or {}),
    }
    for split, items in splits.items():
        manifest["splits"][split] = write_split(out, split, items, progress=progress)
    tmp = out / f"manifest.json.tmp{os.getpid()}"
    tmp.write_text(json.dumps(manifest, indent=1))
    tmp.replace(out / "manifest.json")  # written last: a store with a manifest is complete
    return manifest


class StoreSplit:
    """Random access to one split: ``split[i]`` decodes item i (seek + inflate + parse)."""

    def __init__(self, root: Path, name: str, entry: Mapping[str, Any]):
        self.root = root
        self.name = name
        self.entry = entry
        self.path = root / f"{name}.items"
        try:
            self.offsets = np.load(root / f"{name}.offsets.npy")
            with np.load(root / f"{name}.columns.npz") as columns:
                self.columns = {k: columns[k] for k in columns.files}
        except (OSError, ValueError) as err:
            raise StoreError(f"{root}: split {name}: cannot read its index files ({err})") from err
        if len(self.offsets) != entry["items"] + 1:
            raise StoreError(f"{root / (name + '.offsets.npy')}: {len(self.offsets) - 1} records but the "
                             f"manifest says {entry['items']}")
        if not self.path.exists() or self.path.stat().st_size != int(self.offsets[-1]):
            raise StoreError(f"{self.path}: missing or not {int(self.offsets[-1])} bytes as its offsets say")
        self._file = None

    def __len__(self) -> int:
        return len(self.offsets) - 1

    @property
    def datasets(self) -> np.ndarray:
        return self.columns["dataset"]

    @property
    def item_ids(self) -> np.ndarray:
        return self.columns["item_id"]

    def _handle(self):
        if self._file is None:
            self._file = open(self.path, "rb")
        return self._file

    def record(self, index: int) -> dict:
        if not -len(self) <= index < len(self):
            raise IndexError(f"{self.path}: item {index} out of range [0, {len(self)})")
        index %= len(self)
        start, end = int(self.offsets[index]), int(self.offsets[index + 1])
        f = self._handle()
        f.seek(start)
        try:
            return orjson.loads(zlib.decompress(f.read(end - start)))
        except (zlib.error, orjson.JSONDecodeError) as err:
            raise StoreError(f"{self.path}: record {index} (bytes {start}..{end}) is corrupt ({err})") from err

    def __getitem__(self, index: int) -> BapItem:
        return item_from_record(self.record(index), where=f"{self.path} record {index}")

    def __iter__(self) -> Iterator[BapItem]:
        """Sequential read (one pass over the file, no seeks)."""
        with open(self.path, "rb") as f:
            data = f.read()
        for n in range(len(self)):
            raw = zlib.decompress(data[self.offsets[n]:self.offsets[n + 1]])
            yield item_from_record(orjson.loads(raw), where=f"{self.path} record {n}")

    def items(self, dataset: str | Iterable[str] | None = None) -> list[BapItem]:
        """All items (optionally only those of some data sets), in stored order."""
        if dataset is None:
            return list(self)
        wanted = {dataset} if isinstance(dataset, str) else set(dataset)
        keep = np.isin(self.datasets, list(wanted))
        return [item for item, k in zip(self, keep) if k]

    def take(self, indices: Iterable[int]) -> list[BapItem]:
        """Items at the given indices (random access; e.g. one host's shard)."""
        return [self[int(i)] for i in indices]

    def indices(self, dataset: str) -> np.ndarray:
        return np.nonzero(self.datasets == dataset)[0]

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None


class ItemStore:
    """A store directory opened for reading: ``store.split("train")[i]``."""

    def __init__(self, path: str | os.PathLike):
        self.root = Path(path)
        manifest_path = self.root / "manifest.json"
        try:
            self.manifest = json.loads(manifest_path.read_text())
        except OSError as err:
            raise StoreError(f"{manifest_path}: cannot read the store manifest ({err}); "
                             "was the build finished?") from err
        except json.JSONDecodeError as err:
            raise StoreError(f"{manifest_path}: not valid JSON ({err})") from err
        if self.manifest.get("format") != STORE_FORMAT:
            raise StoreError(f"{manifest_path}: format is {self.manifest.get('format')!r}, not {STORE_FORMAT!r}")
        if self.manifest.get("version") != STORE_VERSION:
            raise StoreError(f"{manifest_path}: version {self.manifest.get('version')} is not {STORE_VERSION}")
        self._splits: dict[str, StoreSplit] = {}

    @property
    def split_names(self) -> list[str]:
        return list(self.manifest["splits"])

    def split(self, name: str) -> StoreSplit:
        if name not in self.manifest["splits"]:
            raise KeyError(f"split {name!r} is not in the store at {self.root}; it has {self.split_names}")
        if name not in self._splits:
            self._splits[name] = StoreSplit(self.root, name, self.manifest["splits"][name])
        return self._splits[name]

    def verify(self) -> None:
        """Recompute every split's hashes against the manifest (raises StoreError on mismatch)."""
        for name, entry in self.manifest["splits"].items():
            split = self.split(name)
            if file_sha256(split.path) != entry["sha256"]:
                raise StoreError(f"{split.path}: sha256 differs from the manifest")
            content = hashlib.sha256()
            for n in range(len(split)):
                raw = orjson.dumps(split.record(n), option=orjson.OPT_SORT_KEYS)
                content.update(len(raw).to_bytes(8, "little"))
                content.update(raw)
            if content.hexdigest() != entry["content_sha256"]:
                raise StoreError(f"{split.path}: content hash differs from the manifest")
