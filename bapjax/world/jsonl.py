"""The on-disk JSONL formats: items, predictions, v2 annotations (one reader each, one error style).

* items: one ``BapItem.to_json()`` object per line (``python -m bapjax.corpus.mdc export``,
  ``bapjax.corpus.v2_clean build``).
* predictions: ``{"item_id": ..., "actions": [{"type": "place", "color": "red", "x": 0, "y": 1,
  "z": 0}, ...]}`` per line (what ``bapjax.predict`` writes and ``bapjax.evaluate`` reads).
* annotations: ``{"item_id", "context": clear|unclear, "interpretation": unique|multiple,
  "structure": correct|incorrect}`` per line (docs/evaluation.md, "v2 clean test set").

A file whose name ends in ``.gz`` is read and written gzip-compressed, any other as plain UTF-8
text. Every reader raises `FormatError` (a `UserError`) naming the file, line, item and field, and
refuses an empty file, a binary one and a damaged gzip one in one line naming the file.
"""

from __future__ import annotations

import contextlib
import dataclasses
import gzip
import io
import json
import os
import zlib
from pathlib import Path
from typing import Any, Iterable, Iterator, Mapping

import orjson

from bapjax import paths
from bapjax.errors import UserError
from bapjax.world import grid
from bapjax.world.grid import Action
from bapjax.world.items import BapItem


class FormatError(UserError):
    """A file that does not hold what its format says; the message names the file and line."""


GZIP = ".gz"  # a name ending so is read and written gzip-compressed (e.g. predictions/mc_test.jsonl.gz)
_GZIP_MAGIC = b"\x1f\x8b"


def is_gzip(path: str | os.PathLike) -> bool:
    """Whether `path` is read and written as gzip: its name ends in ``.gz``."""
    return os.fspath(path).endswith(GZIP)


def stored(path: str | os.PathLike) -> Path:
    """`path`, or its twin that exists when `path` does not: ``X.jsonl`` -> ``X.jsonl.gz`` and back
    (a run writes ``predictions/mc_test.jsonl``; results/ keeps it as ``mc_test.jsonl.gz``)."""
    path = Path(path)
    if path.exists():
        return path
    twin = path.with_name(path.name.removesuffix(GZIP)) if is_gzip(path) else path.with_name(path.name + GZIP)
    return twin if twin.exists() else path


def _binary_line(line: bytes) -> bool:
    try:
        return "\0" in line.decode("utf-8")
    except UnicodeDecodeError:
        return True


def iter_records(path: str | os.PathLike, what: str, error: type[Exception] = FormatError,
                 allow_empty: bool = False) -> Iterator[tuple[str, Any]]:
    """Yield ``(where, record)`` for each non-blank line, ``where`` = "path:line"; a ``.gz`` file
    is read through gzip.

    Raises ``error`` naming the file when it cannot be read, is binary (not UTF-8 text), is not
    gzip though named ``.gz``, or holds no record (unless `allow_empty`), and the line when it is
    not JSON.
    """
    path = Path(path)
    try:
        handle = gzip.open(path, "rb") if is_gzip(path) else open(path, "rb")
    except OSError as err:
        raise error(f"{path}: cannot read {what} ({err.strerror})") from None
    count = 0
    with handle:
        lines = enumerate(handle, 1)
        while True:
            try:
                number, line = next(lines)
            except StopIteration:
                break
            except (OSError, EOFError, zlib.error) as err:
                raise error(f"{path}: not a gzip file of {what}, or a damaged one ({err})") from None
            if not line.strip():
                continue
            where = f"{path}:{number}"
            try:
                record = orjson.loads(line)
            except orjson.JSONDecodeError as err:
                if _binary_line(line):
                    hint = f"; it is gzip data: name it {path.name}{GZIP}" if line.startswith(_GZIP_MAGIC) else ""
                    raise error(f"{path}: not a UTF-8 JSONL file of {what} (line {number} is binary data{hint})") from None
                raise error(f"{where}: not valid JSON ({err})") from None
            count += 1
            yield where, record
    if not count and not allow_empty:
        raise error(f"{path}: the file is empty (no {what} in it)")


def _write_lines(path: str | os.PathLike, records: Iterable[dict], append: bool = False) -> int:
    """Write JSONL (gzip-compressed, deterministically, when the name ends in ``.gz``: no name or
    time in the header, level 9); a new file is written whole or not at all
    (`paths.write_atomically`: a full disk leaves no half file where predictions or items were
    expected)."""
    def write(target) -> int:
        count = 0
        with contextlib.ExitStack() as stack:
            raw = stack.enter_context(open(target, "ab" if append else "wb"))
            if is_gzip(path):
                raw = stack.enter_context(gzip.GzipFile(filename="", mode="wb", fileobj=raw, compresslevel=9, mtime=0))
            out = stack.enter_context(io.TextIOWrapper(raw, encoding="utf-8", newline="\n"))
            for record in records:
                out.write(json.dumps(record) + "\n")
                count += 1
        return count

    if append:
        with paths.writing(path, "the JSONL file"):
            return write(path)
    return paths.write_atomically(path, write, "the JSONL file")


# --------------------------------------------------------------------------------------------
# Items


def read_items(path: str | os.PathLike) -> list[BapItem]:
    """Items from an export JSONL file (``python -m bapjax.corpus.mdc export`` or v2_clean)."""
    items = []
    for where, record in iter_records(path, "items"):
        try:
            items.append(BapItem.from_json(record, where))
        except (ValueError, KeyError, TypeError) as err:
            message = str(err)
            raise FormatError(message if message.startswith(where) else f"{where}: {message}") from None
    return items


def write_items(path: str | os.PathLike, items: Iterable[BapItem]) -> int:
    """Write items in the export JSONL format; returns how many."""
    return _write_lines(path, (item.to_json() for item in items))


# --------------------------------------------------------------------------------------------
# Predictions


def read_predictions(path: str | os.PathLike) -> dict[str, list[Action]]:
    """{item_id: [Action, ...]} from a predictions JSONL file (errors name the line and field)."""
    predictions: dict[str, list[Action]] = {}
    for where, record in iter_records(path, "predictions"):
        if not isinstance(record, dict):
            raise FormatError(f"{where}: expected an object with item_id and actions")
        if "item_id" not in record:
            raise FormatError(f"{where}: missing field 'item_id'")
        item_id = record["item_id"]
        if not isinstance(item_id, str) or not item_id:
            raise FormatError(f"{where}: field 'item_id' is {item_id!r}; expected a string")
        if "actions" not in record:
            raise FormatError(f"{where}: item {item_id}: missing field 'actions'")
        if not isinstance(record["actions"], list):
            raise FormatError(f"{where}: item {item_id}: field 'actions' is not a list")
        if item_id in predictions:
            raise FormatError(f"{where}: item {item_id} is predicted twice")
        try:
            predictions[item_id] = [
                grid.action_from_dict(a, f"{where}: item {item_id}: actions[{i}]")
                for i, a in enumerate(record["actions"])
            ]
        except ValueError as err:
            raise FormatError(str(err)) from None
    return predictions


def action_records(actions: Iterable[Action]) -> list[dict]:
    """Actions as a predictions line's ``"actions"`` holds them: ``[{"type", "color", "x", "y",
    "z"}, ...]`` (also the play server's answers)."""
    return [grid.action_to_dict(a) for a in actions]


def prediction_records(predictions: Mapping[str, Iterable[Action]]) -> Iterator[dict]:
    """The predictions JSONL records of {item_id: actions}, one per item (what ``read_predictions`` takes)."""
    return ({"item_id": item_id, "actions": action_records(actions)} for item_id, actions in predictions.items())


def predictions_jsonl(predictions: Mapping[str, Iterable[Action]]) -> str:
    """{item_id: actions} as the text of a predictions JSONL file (for writers other than a local path)."""
    return "".join(json.dumps(record) + "\n" for record in prediction_records(predictions))


def write_predictions(path: str | os.PathLike, predictions: Mapping[str, Iterable[Action]]) -> None:
    """Write {item_id: actions} as predictions JSONL (the format ``read_predictions`` takes)."""
    _write_lines(path, prediction_records(predictions))


# --------------------------------------------------------------------------------------------
# v2 annotations

CONTEXTS = ("clear", "unclear")
INTERPRETATIONS = ("unique", "multiple")
STRUCTURES = ("correct", "incorrect")


class AnnotationError(FormatError):
    """A bad annotation file or record; the message names the file, line, item or field."""


@dataclasses.dataclass(frozen=True)
class Annotation:
    item_id: str
    context: str  # clear / unclear
    interpretation: str | None = None  # unique / multiple (clear items)
    structure: str | None = None  # correct / incorrect (clear items)
    note: str = ""

    def to_json(self) -> dict:
        record = {"item_id": self.item_id, "context": self.context}
        if self.interpretation is not None:
            record["interpretation"] = self.interpretation
        if self.structure is not None:
            record["structure"] = self.structure
        if self.note:
            record["note"] = self.note
        return record

    @classmethod
    def from_json(cls, record: Mapping, where: str) -> "Annotation":
        if not isinstance(record, Mapping):
            raise AnnotationError(f"{where}: expected a JSON object")
        item_id = record.get("item_id")
        if not isinstance(item_id, str) or not item_id:
            raise AnnotationError(f"{where}: field 'item_id' is missing or not a string")
        where = f"{where}: item {item_id}"

        def field(name, allowed, required):
            value = record.get(name)
            if value is None:
                if required:
                    raise AnnotationError(f"{where}: missing field {name!r} "
                                          f"(one of {', '.join(allowed)})")
                return None
            if value not in allowed:
                raise AnnotationError(f"{where}: field {name!r} is {value!r}; "
                                      f"expected one of {', '.join(allowed)}")
            return value

        context = field("context", CONTEXTS, True)
        clear = context == "clear"
        interpretation = field("interpretation", INTERPRETATIONS, False)
        structure = field("structure", STRUCTURES, clear)
        if clear and interpretation is None:
            interpretation = "unique"
        return cls(item_id, context, interpretation, structure, str(record.get("note", "")))


def read_annotations(path: str | os.PathLike, allow_empty: bool = False) -> dict[str, Annotation]:
    """{item_id: Annotation} from an annotation JSONL file (errors name the line and field);
    `allow_empty`: an empty file is no annotations rather than an error."""
    out: dict[str, Annotation] = {}
    for where, record in iter_records(path, "annotations", AnnotationError, allow_empty):
        annotation = Annotation.from_json(record, where)
        if annotation.item_id in out:
            raise AnnotationError(f"{where}: item {annotation.item_id} is annotated twice")
        out[annotation.item_id] = annotation
    return out


def write_annotations(path: str | os.PathLike, annotations: Iterable[Annotation], append=False) -> None:
    _write_lines(path, (annotation.to_json() for annotation in annotations), append)
