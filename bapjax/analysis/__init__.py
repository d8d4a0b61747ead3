"""Finished runs -> results/: each module is a command with its usage in its docstring."""

import json
from pathlib import Path


def finish(summary: dict, text: str, out: str | None) -> int:
    """The end of an analysis command: with `out` (a path without extension) write OUT.json (the
    `summary`, whose "command" heads OUT.md) and OUT.md (`text`); print `text`, then the summary as
    one JSON line; return 0."""
    if out:
        path = Path(out)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.with_suffix(".json").write_text(json.dumps(summary, indent=1) + "\n")
        path.with_suffix(".md").write_text(f"`{summary['command']}`\n\n{text}\n")
    print(text)
    print(json.dumps(summary))
    return 0
