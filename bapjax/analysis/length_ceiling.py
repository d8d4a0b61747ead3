"""How much a trained builder could gain from knowing how many actions to take, and where it
fails, on MDC val: its own decoding against the same model decoded with each item's reference
length forced (STOP masked until k actions, then taken), both broken down by what the last
instruction says and by where the build starts.

    python -m bapjax.analysis.length_ceiling RUN [RUN ...] [--split val] [--out results/length_ceiling]

Per run (its best checkpoint, decoded with the STOP rule it chose on val, as its final test
decode is) and per decoding ("own", "forced length"):

* micro Overall / Location / strict F1 over every item, predicted vs reference net actions;
* NEB items by the words of their last Architect turn (`instruction_group`): "horizontal" (left,
  right, front, behind), "vertical only" (top, above, below, under, and no horizontal word),
  "neither";
* NEB items with earlier Builder actions by where the reference starts (`start_group`): its first
  action at or next to (Chebyshev distance <= 1) the cell of the Builder's last action, or 2+
  cells away.

The forced decoding needs the reference length, so it is a ceiling (what a perfect length head
would allow this model), never a result. Writes OUT.json and OUT.md; the last line is the JSON.
"""

from __future__ import annotations

import argparse
import re
import sys
import time
from pathlib import Path
from typing import Mapping, Sequence

from bapjax import paths
from bapjax.analysis import finish
from bapjax.corpus import mdc
from bapjax.evaluation import evaluator
from bapjax.training import run_eval
from bapjax.world.grid import Action
from bapjax.world.items import BapItem, last_architect_turn

HORIZONTAL_WORDS = frozenset({"left", "right", "front", "behind"})
VERTICAL_WORDS = frozenset({"top", "above", "below", "under"})
WORD = re.compile(r"[a-z]+")


def instruction_group(item: BapItem) -> str:
    """"horizontal", "vertical only" or "neither", by the words of the last Architect turn."""
    words = set(WORD.findall(last_architect_turn(item).lower()))
    if words & HORIZONTAL_WORDS:
        return "horizontal"
    return "vertical only" if words & VERTICAL_WORDS else "neither"


def last_action(item: BapItem) -> Action | None:
    """The Builder's last earlier action of the item (None when it has none)."""
    return next((event for event in reversed(item.history) if isinstance(event, Action)), None)


def next_to(a: Action, b: Action) -> bool:
    """Whether two actions' cells are the same or neighbours (Chebyshev distance <= 1)."""
    return max(abs(a.x - b.x), abs(a.y - b.y), abs(a.z - b.z)) <= 1


def start_group(item: BapItem) -> str:
    """Where the reference starts against the Builder's last earlier action: "at or next to the
    last action" (`next_to`), "2+ cells away", or "no earlier action"."""
    last = last_action(item)
    if last is None or not item.reference_actions:
        return "no earlier action"
    return "at or next to the last action" if next_to(item.reference_actions[0], last) else "2+ cells away"


def _row(items: Sequence[BapItem], predictions: Mapping[str, Sequence[Action]]) -> dict:
    if not items:
        return {"items": 0}
    report = evaluator.evaluate_predictions(items, {item.item_id: predictions[item.item_id] for item in items})
    return {"items": len(items), **evaluator.headline_f1(report), "location": report["micro"]["Overall"]["location"],
            **evaluator.net_counts(report)}


def breakdown(items: Sequence[BapItem], predictions: Mapping[str, Sequence[Action]]) -> dict:
    """{"all": row, "instruction: <group>": row, "start: <group>": row} (the groups of NEB items)."""
    neb = [item for item in items if item.prev_structure]
    rows = {"all": _row(items, predictions)}
    for group in ("horizontal", "vertical only", "neither"):
        rows[f"instruction: {group}"] = _row([i for i in neb if instruction_group(i) == group], predictions)
    for group in ("at or next to the last action", "2+ cells away"):
        rows[f"start: {group}"] = _row([i for i in neb if start_group(i) == group], predictions)
    return rows


def analyze_run(run_dir: str, items: list[BapItem]) -> dict:
    decoder = run_eval.RunDecoder.load(run_dir)
    max_actions = decoder.settings.max_actions
    own = decoder.predict(items)
    lengths = {item.item_id: min(len(item.reference_actions), max_actions) for item in items}
    settings = decoder.settings
    forced = decoder.predict_items(items, lengths=lengths)
    return {"stop_rule": settings.stop_rule, "stop_threshold": settings.stop_threshold,
            "own": breakdown(items, own), "forced length": breakdown(items, forced)}


def pct(value) -> str:
    return "-" if value is None else f"{100 * value:.1f}"


def markdown(results: dict, split: str) -> str:
    lines = [f"MDC {split}: each run's own decoding vs the reference length forced (a ceiling), micro F1 (%)", "",
             "| run | decoding | subset | items | Overall | Location | strict | predicted / reference net |",
             "|---|---|---|---:|---:|---:|---:|---:|"]
    for name, result in results.items():
        for decoding in ("own", "forced length"):
            for subset, row in result[decoding].items():
                if not row["items"]:
                    continue
                lines.append(f"| {name} | {decoding} | {subset} | {row['items']} | {pct(row['micro_overall'])} | "
                             f"{pct(row['location'])} | {pct(row['strict'])} | "
                             f"{row['predicted_net']} / {row['reference_net']} |")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", nargs="+", help="finished training workdirs")
    parser.add_argument("--split", default="val", choices=["val", "test"])
    parser.add_argument("--corpus", default="@mdc")
    parser.add_argument("--out", default=None, help="output path without extension (OUT.json, OUT.md)")
    args = parser.parse_args()
    items = mdc.load_corpus(paths.mdc_path(args.corpus)).split(args.split)
    results, start = {}, time.time()
    for run in args.runs:
        results[Path(run).name] = analyze_run(run, items)
        print(f"{run}: decoded {len(items)} items twice ({time.time() - start:.0f} s)", file=sys.stderr, flush=True)
    text = markdown(results, args.split)
    summary = {"command": "python -m bapjax.analysis.length_ceiling " + " ".join(sys.argv[1:]),
               "split": args.split, "runs": results}
    return finish(summary, text, args.out)


if __name__ == "__main__":
    sys.exit(main())
