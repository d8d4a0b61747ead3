"""The BAP v2 clean test set: annotation records, the look-ahead fix, the drop rules, a CLI.

    python -m bapjax.corpus.v2_clean annotate --corpus PATH --split test --out ann.jsonl
    python -m bapjax.corpus.v2_clean template --corpus PATH --split test --out ann.jsonl
    python -m bapjax.corpus.v2_clean build --corpus PATH --split test --annotations ann.jsonl \\
        --out clean.jsonl [--stats stats.json]

Annotation record (JSON lines; paper section 3, docs/evaluation.md "v2 clean test set"):

    {"item_id": "...", "context": "clear" | "unclear",
     "interpretation": "unique" | "multiple",   # clear items; "multiple" only for EB items
     "structure": "correct" | "incorrect"}      # clear items

plus optional free fields (``note``, ``annotator``). Build rule: drop unclear items; a run of
one or more (clear) incorrect items immediately followed in the same game by a clear correct
item is fixed by giving each of them that item's resulting structure (reference = the net
actions from the item's own S_prev to it); other incorrect items are dropped. Kept EB items
annotated "multiple" form M for the fairer F1 (the evaluator's ``--annotations``).
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
from collections import Counter
from pathlib import Path
from typing import Callable, Iterable, Mapping, Sequence

from absl import flags

from bapjax import cli, paths
from bapjax.corpus.load import items_from_flags
from bapjax.errors import UserError
from bapjax.world import grid, jsonl
from bapjax.world.actions import structure_diff
from bapjax.world.grid import REMOVE, Action, as_blocks, as_structure
from bapjax.world.items import BapItem
from bapjax.world.jsonl import (  # noqa: F401  (the record format; re-exported for this module's users)
    Annotation,
    AnnotationError,
    read_annotations,
    write_annotations,
)


def check_annotations(items: Sequence[BapItem], annotations: Mapping[str, Annotation],
                      where: str = "annotations") -> None:
    """Annotations must name known items, and 'multiple' only for empty-board items."""
    by_id = {item.item_id: item for item in items}
    unknown = [i for i in annotations if i not in by_id]
    if unknown:
        raise AnnotationError(f"{where}: {len(unknown)} annotated item id(s) are not among the "
                              f"{len(items)} items, e.g. {unknown[0]!r}")
    for item_id, annotation in annotations.items():
        if annotation.interpretation == "multiple" and not by_id[item_id].is_empty_board:
            raise AnnotationError(f"{where}: item {item_id}: interpretation 'multiple' is only "
                                  "for empty-board (EB) items; this item's board is not empty")


def multiple_ids(items: Sequence[BapItem], annotations: Mapping[str, Annotation],
                 where: str = "annotations") -> set[str]:
    """M for the evaluator: items annotated 'multiple'. Every EB item needs a record; a NEB
    item without one is unique. Annotations of items not being evaluated are ignored (a clean
    set is a subset of the annotated split)."""
    by_id = {item.item_id: item for item in items}
    relevant = {i: a for i, a in annotations.items() if i in by_id}
    check_annotations(items, relevant, where)
    unannotated_eb = [i.item_id for i in items if i.is_empty_board and i.item_id not in relevant]
    if unannotated_eb:
        raise AnnotationError(f"{where}: {len(unannotated_eb)} empty-board item(s) have no "
                              f"annotation (unique/multiple), e.g. {unannotated_eb[0]!r}")
    return {i for i, a in relevant.items() if a.interpretation == "multiple"}


# --------------------------------------------------------------------------------------------
# Building the clean set


def _item_index(item: BapItem) -> int | None:
    tail = item.item_id.rsplit(":", 1)[-1]
    return int(tail) if tail.isdigit() else None


def _follows(previous: BapItem, item: BapItem) -> bool:
    """Whether ``item`` comes right after ``previous`` in their game (by the ':k' id suffix;
    list order when the ids carry no index)."""
    a, b = _item_index(previous), _item_index(item)
    return a is None or b is None or b == a + 1


def reference_order(actions: Iterable[Action]) -> list[Action]:
    """A readable order for a fixed reference: removals first, then placements bottom-up."""
    return sorted(actions, key=lambda a: (a.type != REMOVE, a.y, a.x, a.z, a.color))


def fixed_item(item: BapItem, target: BapItem) -> BapItem:
    """``item`` with ``target``'s resulting structure as its reference outcome."""
    goal = as_structure(target.next_structure)
    actions = tuple(reference_order(structure_diff(item.prev_structure, goal)))
    return dataclasses.replace(item, reference_actions=actions, next_structure=as_blocks(goal))


def build_clean_set(items: Sequence[BapItem], annotations: Mapping[str, Annotation],
                    skip_unannotated: bool = False, where: str = "annotations"):
    """(clean items in input order, statistics) per the v2 rules (module docstring)."""
    check_annotations(items, {i: a for i, a in annotations.items()
                              if i in {it.item_id for it in items}}, where)
    unannotated = [item.item_id for item in items if item.item_id not in annotations]
    if unannotated and not skip_unannotated:
        raise AnnotationError(f"{where}: {len(unannotated)} of {len(items)} items have no "
                              f"annotation, e.g. {unannotated[0]!r} (annotate them, or pass "
                              "--skip_unannotated to drop them)")
    dropped = Counter()
    replacement: dict[str, BapItem] = {}
    # Walk each game's items in order; a pending run of incorrect items is fixed by the next
    # item when that item directly follows them and is clear and correct.
    games: dict[str, list[BapItem]] = {}
    for item in items:
        games.setdefault(item.game_id, []).append(item)
    fixed_ids = set()
    for game_items in games.values():
        run: list[BapItem] = []
        previous = None
        for item in game_items:
            if previous is None or not _follows(previous, item):
                run = []
            annotation = annotations.get(item.item_id)
            if annotation is None or annotation.context == "unclear":
                run = []
            elif annotation.structure == "correct":
                for broken in run:
                    replacement[broken.item_id] = fixed_item(broken, item)
                    fixed_ids.add(broken.item_id)
                run = []
            else:
                run.append(item)
            previous = item
    clean = []
    for item in items:
        annotation = annotations.get(item.item_id)
        if annotation is None:
            dropped["unannotated"] += 1
        elif annotation.context == "unclear":
            dropped["unclear"] += 1
        elif annotation.structure == "correct":
            clean.append(item)
        elif item.item_id in replacement:
            clean.append(replacement[item.item_id])
        else:
            dropped["incorrect_unfixable"] += 1
    multiple = sum(1 for item in clean if annotations[item.item_id].interpretation == "multiple")
    stats = {
        "input_items": len(items),
        "kept": len(clean),
        "kept_correct": len(clean) - len(fixed_ids),
        "fixed": len(fixed_ids),
        "fixed_with_empty_reference": sum(
            1 for item in clean if item.item_id in fixed_ids and not item.reference_actions),
        "dropped": {reason: dropped.get(reason, 0)
                    for reason in ("unclear", "incorrect_unfixable", "unannotated")},
        "unique": len(clean) - multiple,
        "multiple": multiple,
        "EB": sum(item.is_empty_board for item in clean),
        "NEB": sum(not item.is_empty_board for item in clean),
    }
    return clean, stats


# --------------------------------------------------------------------------------------------
# Annotating (a small terminal tool; the prompts go through ``ask`` so tests can script it)


def top_view(blocks: Iterable, highlight: Iterable = ()) -> str:
    """A top-down map of a structure: the highest block's color initial per column
    (x to the right, z downwards, i.e. north up in Minecraft); '*' marks cells in ``highlight``."""
    letters = {1: "r", 2: "o", 3: "y", 4: "g", 5: "b", 6: "p"}
    top: dict[tuple[int, int], tuple[int, int]] = {}
    for x, y, z, color in blocks:
        if (x, z) not in top or y > top[(x, z)][0]:
            top[(x, z)] = (y, color)
    marked = {(a[2], a[4]) for a in highlight}
    rows = ["    " + "".join(f"{x:>3}" for x in range(-5, 6))]
    for z in range(-5, 6):
        cells = []
        for x in range(-5, 6):
            mark = "*" if (x, z) in marked else " "
            cells.append(f" {letters[top[(x, z)][1]] if (x, z) in top else '.'}{mark}")
        rows.append(f"{z:>3} " + "".join(cells))
    return "\n".join(rows)


def describe_item(item: BapItem, turns: int = 6) -> str:

    lines = [f"== {item.item_id}  ({'EB' if item.is_empty_board else 'NEB'}, "
             f"{len(item.prev_structure)} blocks before, {len(item.reference_actions)} actions)"]
    for turn in item.dialogue[-turns:]:
        lines.append(f"  <{turn.speaker}> {turn.text}")
    lines.append("  Builder did:")
    for action in item.reference_actions:
        d = grid.action_to_dict(action)
        lines.append(f"    {d['type']:<6} {d['color']:<6} at ({d['x']}, {d['y']}, {d['z']})")
    lines.append("  Structure after (top view, * = changed column):")
    lines.append(top_view(item.next_structure, item.reference_actions))
    return "\n".join(lines)


def _choose(ask: Callable[[str], str], prompt: str, options: dict[str, str]) -> str | None:
    """Ask until one of the option keys (first letters) is typed; 'q' returns None."""
    keys = "/".join(options)
    while True:
        try:
            answer = ask(f"{prompt} [{keys}, q=quit]: ").strip().lower()
        except EOFError:  # input ran out: stop like 'q' (what was answered is saved)
            return None
        if answer == "q":
            return None
        if answer in options:
            return options[answer]


def annotate_items(items: Sequence[BapItem], out_path: str | os.PathLike,
                   ask: Callable[[str], str] = input, show: Callable[[str], None] = print) -> int:
    """Ask for each item not yet in ``out_path`` and append its record there (resumable).

    Returns the number of records written in this session."""
    out_path = Path(out_path)
    done = read_annotations(out_path, allow_empty=True) if out_path.exists() else {}
    written = 0
    todo = [item for item in items if item.item_id not in done]
    show(f"{len(done)} items already annotated, {len(todo)} to go (q quits; progress is saved)")
    for n, item in enumerate(todo, 1):
        show(f"\n[{n}/{len(todo)}]")
        show(describe_item(item))
        context = _choose(ask, "context clear or unclear?", {"c": "clear", "u": "unclear"})
        if context is None:
            break
        interpretation = structure = None
        if context == "clear":
            if item.is_empty_board:
                interpretation = _choose(ask, "interpretation unique or multiple?",
                                         {"u": "unique", "m": "multiple"})
                if interpretation is None:
                    break
            else:
                interpretation = "unique"
            structure = _choose(ask, "built structure correct or incorrect?",
                                {"c": "correct", "i": "incorrect"})
            if structure is None:
                break
        write_annotations(out_path, [Annotation(item.item_id, context, interpretation, structure)],
                          append=True)
        written += 1
    show(f"wrote {written} annotation(s) to {out_path}")
    return written


def template_annotations(items: Sequence[BapItem]) -> list[Annotation]:
    """One record per item with the commonest answer (clear, unique, correct), to edit by hand."""
    return [Annotation(item.item_id, "clear", "unique", "correct") for item in items]


# --------------------------------------------------------------------------------------------
# CLI

FLAGS = flags.FLAGS


def define_flags() -> None:
    cli.define_item_source_flags("corpus", "split", "items")
    cli.flag("string", "annotations", None, "Annotation JSONL (build).")
    cli.flag("string", "out", None, "Output: clean items (build) or annotations (annotate, template).")
    cli.flag("string", "stats", None, "Optional JSON file for the build statistics.")
    cli.flag("bool", "skip_unannotated", False, "build: drop items without an annotation (counted).")


def main(argv: Sequence[str]) -> int:
    commands = ("build", "annotate", "template")
    if len(argv) != 2 or argv[1] not in commands:
        raise UserError(f"usage: python -m bapjax.corpus.v2_clean {{{'|'.join(commands)}}} ...")
    cli.require_flags("out")
    paths.check_output_file(FLAGS.out, "--out")
    paths.check_output_file(FLAGS.stats, "--stats")
    items = items_from_flags(FLAGS.corpus, FLAGS.split, FLAGS.items)
    if argv[1] == "annotate":
        annotate_items(items, FLAGS.out)
        return 0
    if argv[1] == "template":
        write_annotations(FLAGS.out, template_annotations(items))
        print(f"wrote {len(items)} template records to {FLAGS.out}", file=sys.stderr)
        return 0
    if not FLAGS.annotations:
        raise UserError("build needs --annotations")
    annotations = read_annotations(FLAGS.annotations)
    clean, stats = build_clean_set(items, annotations, FLAGS.skip_unannotated, FLAGS.annotations)
    jsonl.write_items(FLAGS.out, clean)
    if FLAGS.stats:
        Path(FLAGS.stats).write_text(json.dumps(stats, indent=2) + "\n")
    d = stats["dropped"]
    print(f"kept {stats['kept']} of {stats['input_items']} items ({stats['kept_correct']} correct, "
          f"{stats['fixed']} fixed by look-ahead); dropped {d['unclear']} unclear, "
          f"{d['incorrect_unfixable']} incorrect without a fix, {d['unannotated']} unannotated; "
          f"{stats['unique']} unique, {stats['multiple']} multiple; wrote {FLAGS.out}")
    print(json.dumps(stats))
    return 0


if __name__ == "__main__":
    cli.run(main, define_flags)
