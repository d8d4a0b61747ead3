"""Finished runs -> results/: each module is a command with its usage in its docstring."""

import argparse
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


def add_spread_flags(parser: argparse.ArgumentParser) -> None:
    """The flags of the commands that score disjoint sets of draws on one split and split their
    spread (`decode_noise`, `ensemble_noise`): the corpus, the items, the bootstrap and the output."""
    from bapjax.corpus import load  # here, so that the package's other commands start without it
    parser.add_argument("--corpus", default="@mdc")
    parser.add_argument("--limit", type=int, default=0, help=load.LIMIT_HELP)
    parser.add_argument("--bootstrap", type=int, default=1000, help="item resamplings of the spread's split")
    parser.add_argument("--seed", type=int, default=0, help="the bootstrap's random seed")
    parser.add_argument("--out", default=None, help="output path without extension (OUT.json, OUT.md)")
