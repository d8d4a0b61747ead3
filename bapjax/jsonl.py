"""Reading JSON-lines files with errors that name the file and line (one place for all readers)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Iterator

import orjson


def iter_records(path: str | os.PathLike, error: type[Exception], what: str) -> Iterator[tuple[str, Any]]:
    """Yield ``(where, record)`` for each non-blank line, ``where`` = "path:line".

    Raises ``error`` naming the file when it cannot be read, and the line when it is not JSON.
    """
    path = Path(path)
    try:
        handle = open(path, "rb")
    except OSError as err:
        raise error(f"{path}: cannot read {what} ({err.strerror})") from None
    with handle:
        for number, line in enumerate(handle, 1):
            if not line.strip():
                continue
            where = f"{path}:{number}"
            try:
                record = orjson.loads(line)
            except orjson.JSONDecodeError as err:
                raise error(f"{where}: not valid JSON ({err})") from None
            yield where, record
