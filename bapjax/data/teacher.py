"""Teacher outputs for sequence-level distillation (Kim & Rush 2016): a folder of a decoder's
predictions over a data source's training items, and training items whose targets are those
predictions.

A teacher folder (``python -m bapjax.distil`` writes it) holds:

* ``predictions.jsonl.gz``: one record per item, ``{"item_id", "actions", "item_digest"}``, the
  actions in the item's world coordinates and in the order the teacher predicts them (a
  predictions file: ``bapjax.evaluate`` reads it), written in chunks, each chunk one gzip member
  (`append_chunk`), so a killed writer leaves whole chunks and at most one damaged last member
  (`read_chunks` names and skips it); `item_digest` (`item_digest`) fixes the item the record was
  decoded from, so records are never matched with other items of the same id;
* ``teacher.json``: its provenance (the command, code version, the runs decoded, the decoding, the
  source of the items, each invocation) and ``"finished"`` once every item is written.

A data source takes a teacher with its ``teacher`` block (`bapjax.training.run_config`):
``path`` (the folder, "" for none), ``mode`` and ``weight``. `apply` gives the source's training
items, each with the teacher's actions as its targets (`with_targets`: they become the item's
reference actions, so featurization turns them into the ``actions`` array exactly as references,
the Builder's frame and the cut at ``features.max_actions`` included), and each item's weight in
the loss: "replace" keeps only those items, at `weight`; "mix" keeps the items with their
references (weight 1) followed by their teacher copies (weight `weight`). An item the teacher
predicts no action for keeps its reference as its teacher targets (every BAP item has at least one
action, and decoding never stops before the first: ``eval.min_actions``). What reads an item's
actions reads the teacher's on a teacher copy: the curriculum's L_A orders copies by the length of
the targets they teach. Val and test items are never passed here: they keep their references.
"""

from __future__ import annotations

import dataclasses
import gzip
import hashlib
import json
import math
import os
import zlib
from pathlib import Path
from typing import Mapping, Sequence

import numpy as np
import orjson

from bapjax import paths
from bapjax.errors import UserError
from bapjax.world import grid
from bapjax.world.grid import Action
from bapjax.world.items import BapItem

PREDICTIONS = "predictions.jsonl.gz"
RECORD = "teacher.json"
MODES = ("replace", "mix")
DEFAULTS = {"path": "", "mode": "replace", "weight": 1.0}  # a source's `teacher` block (run_config._source)


class TeacherError(UserError):
    """A teacher folder or a source's teacher block that cannot be used: one line naming it."""


def item_digest(item: BapItem) -> str:
    """16 hex digits of sha256 over what a model reads of `item` and its reference: its id, history,
    start structure, reference actions and the Builder's pose."""
    key = (item.item_id, item.history, item.prev_structure, item.reference_actions, tuple(item.builder_pose))
    return hashlib.sha256(repr(key).encode()).hexdigest()[:16]


# --------------------------------------------------------------------------------------------
# The predictions file, in chunks


def chunk_bytes(records: Sequence[dict]) -> bytes:
    """One chunk of records as one gzip member, deterministically (no name or time in its header)."""
    text = "".join(json.dumps(record) + "\n" for record in records)
    return gzip.compress(text.encode("utf-8"), compresslevel=9, mtime=0)


def append_chunk(path: str | os.PathLike, records: Sequence[dict]) -> None:
    """Append `records` to the predictions file `path` as one gzip member, on disk before it returns."""
    data = chunk_bytes(records)
    with paths.writing(path, "the teacher's predictions"), open(path, "ab") as out:
        out.write(data)
        out.flush()
        os.fsync(out.fileno())


@dataclasses.dataclass
class Chunks:
    """What `read_chunks` found: the records of the whole chunks {item_id: record}, the bytes they
    span, and the bytes after them (a damaged last chunk: 0 when there is none)."""

    records: dict[str, dict]
    good_bytes: int
    damaged_bytes: int


def _chunk_records(text: bytes, where: str) -> list[dict] | None:
    """The records of one decompressed chunk, None when it is not whole (a line cut short)."""
    if text and not text.endswith(b"\n"):
        return None
    records = []
    for line in text.splitlines():
        try:
            record = orjson.loads(line)
        except orjson.JSONDecodeError:
            return None
        if not isinstance(record, dict) or not isinstance(record.get("item_id"), str) \
                or not isinstance(record.get("actions"), list):
            raise TeacherError(f"{where}: a record without item_id and actions: not a teacher's predictions file")
        records.append(record)
    return records


def read_chunks(path: str | os.PathLike) -> Chunks:
    """The whole chunks of the predictions file `path` (none when it does not exist). Reading stops
    at the first member that is cut short or does not decompress: that and what follows is the
    damaged tail a killed writer leaves. TeacherError: an item in two records, a record that is not
    a teacher's."""
    path = Path(path)
    if not path.exists():
        return Chunks({}, 0, 0)
    data = path.read_bytes()
    records: dict[str, dict] = {}
    offset = 0
    while offset < len(data):
        member = zlib.decompressobj(16 + zlib.MAX_WBITS)  # one gzip member
        try:
            text = member.decompress(data[offset:])
        except zlib.error:
            break
        if not member.eof:
            break
        chunk = _chunk_records(text, f"{path} (byte {offset})")
        if chunk is None:
            break
        for record in chunk:
            if record["item_id"] in records:
                raise TeacherError(f"{path}: item {record['item_id']} is in two records")
            records[record["item_id"]] = record
        offset = len(data) - len(member.unused_data)
    return Chunks(records, offset, len(data) - offset)


def record_of(item: BapItem, actions: Sequence[Action]) -> dict:
    """The predictions record of `item` predicted as `actions` (world coordinates)."""
    return {"item_id": item.item_id, "actions": [grid.action_to_dict(a) for a in actions],
            "item_digest": item_digest(item)}


# --------------------------------------------------------------------------------------------
# A teacher folder, as training reads it


def read_record(folder: str | os.PathLike, what: str) -> dict:
    """<folder>/teacher.json; TeacherError naming `what` (a flag or config field) and the file."""
    path = Path(folder) / RECORD
    if not Path(folder).is_dir():
        raise TeacherError(f"{what}: {folder} is not a folder; python -m bapjax.distil makes a teacher folder")
    if not path.exists():
        raise TeacherError(f"{what}: {folder} holds no {RECORD}: not a teacher folder (python -m bapjax.distil "
                           "makes one)")
    try:
        record = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise TeacherError(f"{what}: {path} does not parse ({err})") from None
    if not isinstance(record, dict) or "defines" not in record:
        raise TeacherError(f"{what}: {path} is not a teacher's record (no 'defines')")
    return record


def check_block(where: str, block: Mapping | None) -> None:
    """A source's teacher block before any data is read: its mode, its weight, and a `path` that
    names a finished teacher folder. TeacherError naming the field (`where` is the block's config path)."""
    if not block:
        return
    mode, weight = block.get("mode", DEFAULTS["mode"]), block.get("weight", DEFAULTS["weight"])
    if mode not in MODES:
        raise TeacherError(f"--{where}.mode={mode!r}: expected {' or '.join(MODES)}")
    if not isinstance(weight, (int, float)) or not math.isfinite(weight) or weight <= 0:
        raise TeacherError(f"--{where}.weight={weight!r}: expected a number > 0")
    if not block.get("path", ""):
        return
    folder = paths.resolve_path(block["path"])
    record = read_record(folder, f"--{where}.path={block['path']}")
    if not record.get("finished"):
        raise TeacherError(f"--{where}.path={block['path']}: the teacher is unfinished ({record.get('decoded', 0)} "
                           f"of {record.get('items')} items decoded); run its command again to finish it: "
                           f"{record.get('command')}")


def load_targets(folder: str | os.PathLike, items: Sequence[BapItem], what: str) -> dict[str, list[Action]]:
    """{item_id: actions} of the teacher in `folder` for every one of `items`; TeacherError naming
    `what` and the file when it lacks some of them or decoded some from other content of the same id."""
    path = Path(folder) / PREDICTIONS
    chunks = read_chunks(path)
    if chunks.damaged_bytes:
        raise TeacherError(f"{what}: {path} ends in a damaged chunk ({chunks.damaged_bytes} bytes); run the "
                           "teacher's command again: it cuts that chunk and decodes its items again")
    lacking = [item.item_id for item in items if item.item_id not in chunks.records]
    if lacking:
        raise TeacherError(f"{what}: {path} lacks {len(lacking)} of the source's {len(items)} training items "
                           f"(first: {lacking[0]}); decode them with python -m bapjax.distil on this source")
    other = [item.item_id for item in items if chunks.records[item.item_id].get("item_digest") != item_digest(item)]
    if other:
        raise TeacherError(f"{what}: {path}: {len(other)} of the source's {len(items)} training items were decoded "
                           f"from other content of the same id (first: {other[0]}): the teacher was made for "
                           "another source; decode this one with python -m bapjax.distil")
    targets = {}
    for item in items:
        record = chunks.records[item.item_id]
        try:
            targets[item.item_id] = [grid.action_from_dict(a, f"{path}: item {item.item_id}: actions[{i}]")
                                     for i, a in enumerate(record["actions"])]
        except ValueError as err:
            raise TeacherError(f"{what}: {err}") from None
    return targets


def with_targets(item: BapItem, actions: Sequence[Action]) -> BapItem:
    """`item` with `actions` as its reference (its next structure: the start with them applied);
    `item` itself when `actions` is empty (module docstring)."""
    if not actions:
        return item
    after = grid.as_blocks(grid.apply_sequence(item.prev_structure, actions))
    return dataclasses.replace(item, reference_actions=tuple(actions), next_structure=after)


def apply(where: str, block: Mapping | None, items: Sequence[BapItem], log=None) -> tuple[list[BapItem], np.ndarray]:
    """A source's training `items` through its teacher `block` (the config path `where`), and each
    item's weight in the loss (float32): the items at weight 1 without a teacher; with one, its
    targets replacing the references or beside them (module docstring). `log(message, *args)`
    hears one line on the teacher's use."""
    items = list(items)
    if not block or not block.get("path", ""):
        return items, np.ones(len(items), np.float32)
    check_block(where, block)
    folder = paths.resolve_path(block["path"])
    targets = load_targets(folder, items, f"--{where}.path={block['path']}")
    taught = [with_targets(item, targets[item.item_id]) for item in items]
    weight, mode = float(block.get("weight", DEFAULTS["weight"])), block.get("mode", DEFAULTS["mode"])
    if log is not None:
        kept = sum(1 for item in items if not targets[item.item_id])
        log("%s: %s (%s, weight %g): %d training items take its targets (%d it predicts no action for keep "
            "their reference)", where, folder, mode, weight, len(items), kept)
    if mode == "replace":
        return taught, np.full(len(taught), weight, np.float32)
    return items + taught, np.concatenate([np.ones(len(items), np.float32), np.full(len(taught), weight, np.float32)])
