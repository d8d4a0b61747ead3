"""Where trained builders go wrong on an MDC split (val by default), run by run.

    python -m bapjax.analysis.error_analysis runs/exp/mc runs/exp/agg runs/exp/cl --out runs/val_errors

For each run (its best checkpoint and the STOP rule it chose on val, as the final test decode
uses), every MDC val item is decoded greedily and scored with the v2 evaluator; then:

* **by reference length**: micro Overall / Location / Type F1 and predicted vs reference net
  actions for items with 0 (actions that cancel out), 1, 2-3, 4-7 and 8+ reference net actions (is the model's length right?);
* **near misses**: every predicted net action of a NEB item that is not an exact match, by the
  L1 distance from its cell to the nearest reference net action of the same type and color
  ("none": the reference has no action of that type and color; a miss in a reference action's
  cell with the wrong type or color is also counted apart): are Location errors a cell off (spatial language half understood) or anywhere?
  Distance-1 misses are split by axis (x, y, z): which direction words fail;
* **attribute vs place**: the share of predicted actions whose type and color occur in the
  reference (Type+Color right) against those whose exact action does (Overall right);
* **first action in the Builder's frame**: for NEB items grouped by the direction words of the
  last Architect turn (left/right only, front/behind only, both, vertical only, neither), the
  first predicted action against the first reference action, both turned into the item's Builder
  frame (`world.rotation.to_builder_frame`: the Builder looks along +z, so x is left/right):
  exact, another type or color, none predicted, or the same kind off along one axis (left/right,
  up/down, front/back; 1 cell or 2+), a diagonal neighbour, or farther along several axes: does a
  miss lie along the axis the words name, or does the build start elsewhere?
* **where the build starts**: for NEB items with an earlier Builder action, whether the first
  reference action and the first predicted action lie at or next to that last action (Chebyshev
  distance <= 1, `start_group`'s rule) or 2+ cells away, and how often the first
  predicted action is exact in each of the four cases: does the model find a start the Architect
  names away from where the Builder stopped?

With `--bootstrap N` (for the test split, where the results table's differences live) it also
resamples the items N times (paired: the same resampled items for every run) and reports each
run's 95% interval of micro Overall F1 and, for every pair of runs, the interval of the
difference and how often it is > 0: whether a single-seed difference is more than item noise.

`breakdown` (what `collect_experiment` gives per variant as "mc_test_subgroups") scores a set of
predictions on all items and on groups of NEB items: by the words of the last Architect turn
(`instruction_group`: "horizontal", "vertical only", "neither") and by where the reference starts
against the Builder's last earlier action (`start_group`: at or next to it, or 2+ cells away).

NEB items are scored without alignment (the fairer alignment applies only to EB items, whose
predictions may be shifted or rotated as a whole), so their distances are in world cells.
Writes <out>.json and <out>.md; the last stdout line is the JSON.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Mapping, Sequence

import numpy as np

from bapjax import cli, paths
from bapjax.analysis.bootstrap import paired_bootstrap
from bapjax.corpus import load
from bapjax.errors import UserError
from bapjax.evaluation import evaluator, metrics
from bapjax.training import run_eval
from bapjax.world import grid as G
from bapjax.world import rotation
from bapjax.world.items import BapItem, last_architect_turn

HORIZONTAL_WORDS = frozenset({"left", "right", "front", "behind"})
VERTICAL_WORDS = frozenset({"top", "above", "below", "under"})
WORD = re.compile(r"[a-z]+")


def instruction_group(item: BapItem) -> str:
    """"horizontal" (left, right, front, behind), "vertical only" (top, above, below, under, and no
    horizontal word) or "neither", by the words of the last Architect turn."""
    words = set(WORD.findall(last_architect_turn(item).lower()))
    if words & HORIZONTAL_WORDS:
        return "horizontal"
    return "vertical only" if words & VERTICAL_WORDS else "neither"


def last_action(item: BapItem) -> G.Action | None:
    """The Builder's last earlier action of the item (None when it has none)."""
    return next((event for event in reversed(item.history) if isinstance(event, G.Action)), None)


def next_to(a: G.Action, b: G.Action) -> bool:
    """Whether two actions' cells are the same or neighbours (Chebyshev distance <= 1)."""
    return max(abs(a.x - b.x), abs(a.y - b.y), abs(a.z - b.z)) <= 1


def start_group(item: BapItem) -> str:
    """Where the reference starts against the Builder's last earlier action: "at or next to the
    last action" (`next_to`), "2+ cells away", or "no earlier action"."""
    last = last_action(item)
    if last is None or not item.reference_actions:
        return "no earlier action"
    return "at or next to the last action" if next_to(item.reference_actions[0], last) else "2+ cells away"


def _subset_row(items: Sequence[BapItem], predictions: Mapping[str, Sequence[G.Action]]) -> dict:
    if not items:
        return {"items": 0}
    report = evaluator.evaluate_predictions(items, {item.item_id: predictions[item.item_id] for item in items})
    return {"items": len(items), **evaluator.headline_f1(report), "location": report["micro"]["Overall"]["location"],
            **evaluator.net_counts(report)}


def breakdown(items: Sequence[BapItem], predictions: Mapping[str, Sequence[G.Action]]) -> dict:
    """Micro F1 and net action counts of `predictions` on `items` and on groups of their NEB items:
    {"all": row, "instruction: <group>": row (`instruction_group`), "start: <group>": row
    (`start_group`, the items with an earlier Builder action)}; a row is {"items": n, micro_overall,
    strict, ..., "location", "predicted_net", "reference_net"}, an empty group's {"items": 0}."""
    neb = [item for item in items if item.prev_structure]
    rows = {"all": _subset_row(items, predictions)}
    for group in ("horizontal", "vertical only", "neither"):
        rows[f"instruction: {group}"] = _subset_row([i for i in neb if instruction_group(i) == group], predictions)
    for group in ("at or next to the last action", "2+ cells away"):
        rows[f"start: {group}"] = _subset_row([i for i in neb if start_group(i) == group], predictions)
    return rows


LENGTH_BINS = ((0, 0, "0"), (1, 1, "1"), (2, 3, "2-3"), (4, 7, "4-7"), (8, 10**9, "8+"))
DISTANCE_BINS = ("1", "2", "3-4", "5+", "none")  # never 0: a same-kind action in the same cell is exact


def length_bin(n_ref: int) -> str:
    for low, high, name in LENGTH_BINS:
        if low <= n_ref <= high:
            return name
    raise ValueError(f"negative reference length {n_ref}")


def distance_bin(distance: int | None) -> str:
    if distance is None:
        return "none"
    if distance <= 2:
        return str(distance)
    return "3-4" if distance <= 4 else "5+"


def nearest_same_kind(action: G.Action, reference: frozenset) -> tuple[int | None, tuple[int, int, int] | None]:
    """L1 distance (and the offset) from `action` to the nearest reference action with the same
    type and color; (None, None) when the reference has none."""
    best, offset = None, None
    for ref in reference:
        if ref.type != action.type or ref.color != action.color:
            continue
        d = (ref.x - action.x, ref.y - action.y, ref.z - action.z)
        distance = abs(d[0]) + abs(d[1]) + abs(d[2])
        if best is None or distance < best:
            best, offset = distance, d
    return best, offset


def near_misses(pred_sets, ref_sets, is_eb) -> dict:
    """Distance histogram of the inexact predicted net actions of NEB items (see the docstring)."""
    bins, axes = Counter(), Counter()
    exact = predicted = type_color_in_ref = same_cell = 0
    for pred, ref, eb in zip(pred_sets, ref_sets, is_eb):
        if eb:
            continue
        kinds = Counter((a.type, a.color) for a in ref)
        cells = {(a.x, a.y, a.z) for a in ref}
        for action in pred:
            predicted += 1
            if kinds[(action.type, action.color)]:
                type_color_in_ref += 1
            if action in ref:
                exact += 1
                continue
            if (action.x, action.y, action.z) in cells:
                same_cell += 1
            distance, offset = nearest_same_kind(action, ref)
            bins[distance_bin(distance)] += 1
            if distance == 1:
                axes["xyz"[next(i for i, v in enumerate(offset) if v)]] += 1
    inexact = predicted - exact
    return {
        "predicted_net_actions": predicted,
        "exact": exact,
        "type_color_in_reference": type_color_in_ref,
        "inexact": inexact,
        "inexact_same_cell_other_kind": same_cell,
        "inexact_by_distance_to_same_kind": {name: bins[name] for name in DISTANCE_BINS},
        "distance_1_by_axis": {axis: axes[axis] for axis in "xyz"},
    }


DIRECTION_GROUPS = ("left/right", "front/behind", "both", "vertical only", "neither")
FIRST_ACTION_OUTCOMES = ("exact", "left/right 1", "left/right 2+", "up/down 1", "up/down 2+", "front/back 1",
                         "front/back 2+", "diagonal 1", "several axes 2+", "other kind", "none predicted")
LEFT_RIGHT, FRONT_BEHIND = frozenset({"left", "right"}), frozenset({"front", "behind"})


def direction_group(item) -> str:
    """The item's group in DIRECTION_GROUPS by the words of its last Architect turn."""
    words = set(WORD.findall(last_architect_turn(item).lower()))
    lr, fb = bool(words & LEFT_RIGHT), bool(words & FRONT_BEHIND)
    if lr or fb:
        return "both" if lr and fb else ("left/right" if lr else "front/behind")
    return instruction_group(item)


def first_action_outcome(item, predicted) -> str | None:
    """FIRST_ACTION_OUTCOMES' name for the first of `predicted` (the item's predicted actions, in
    order, world coordinates) against the item's first reference action, compared in the item's
    Builder frame; None when the item has no reference action."""

    if not item.reference_actions:
        return None
    if not predicted:
        return "none predicted"
    k = rotation.builder_frame_turns(item.builder_pose.yaw)
    pred, ref = rotation.rotate_action(predicted[0], k), rotation.rotate_action(item.reference_actions[0], k)
    if (pred.type, pred.color) != (ref.type, ref.color):
        return "other kind"
    offset = (ref.x - pred.x, ref.y - pred.y, ref.z - pred.z)
    moved = [i for i, v in enumerate(offset) if v]
    if not moved:
        return "exact"
    if len(moved) > 1:  # a diagonal neighbour (at most 1 cell along each axis) or farther
        return "diagonal 1" if max(map(abs, offset)) == 1 else "several axes 2+"
    axis = ("left/right", "up/down", "front/back")[moved[0]]
    return f"{axis} {'1' if abs(offset[moved[0]]) == 1 else '2+'}"


def first_actions(items, predictions) -> dict:
    """{direction group: {"items": n, outcome: count}} over NEB items with a reference action."""
    table = {group: Counter() for group in DIRECTION_GROUPS}
    for item in items:
        if item.is_empty_board:
            continue
        outcome = first_action_outcome(item, list(predictions[item.item_id]))
        if outcome is None:
            continue
        row = table[direction_group(item)]
        row["items"] += 1
        row[outcome] += 1
    return {group: {"items": row["items"], **{o: row[o] for o in FIRST_ACTION_OUTCOMES}}
            for group, row in table.items()}


START_CASES = ("near / near", "near / far", "far / near", "far / far")  # reference start / predicted start


def start_cases(items, predictions) -> dict:
    """{case: {"items": n, "exact": m}} over NEB items with an earlier Builder action, a reference
    action and a predicted one; case "<reference> / <prediction>", near: the first action lies at
    or next to the Builder's last earlier action (`next_to`)."""

    table = {case: Counter() for case in START_CASES}
    for item in items:
        predicted = list(predictions[item.item_id])
        last = last_action(item)
        if item.is_empty_board or last is None or not item.reference_actions or not predicted:
            continue
        first = item.reference_actions[0]
        row = table[f"{'near' if next_to(first, last) else 'far'} / {'near' if next_to(predicted[0], last) else 'far'}"]
        row["items"] += 1
        row["exact"] += predicted[0] == first
    return {case: {"items": row["items"], "exact": row["exact"]} for case, row in table.items()}


def by_length(scores: metrics.ItemScores) -> dict:
    rows = {}
    names = np.array([length_bin(int(n)) for n in scores.n_ref])
    for _, _, name in LENGTH_BINS:
        mask = names == name
        if not mask.any():
            continue
        pick = lambda a: a[mask]  # noqa: E731
        n_pred, n_ref = pick(scores.n_pred), pick(scores.n_ref)
        rows[name] = {
            "items": int(mask.sum()),
            "predicted_net_actions": int(n_pred.sum()),
            "reference_net_actions": int(n_ref.sum()),
            "empty_predictions": int((n_pred == 0).sum()),
            **{f"micro_{m}": metrics.micro_f1(pick(scores.tp(m)), n_pred, n_ref)
               for m in ("overall", "location", "type")},
        }
    return rows


def analyze_run(run_dir: str, items, batch_size: int) -> dict:
    start = time.time()
    predictions, settings = run_eval.predict_with_run(run_dir, items, slots=batch_size)
    seconds = time.time() - start
    report, scores, details = evaluator.evaluate_items(items, predictions)
    is_eb = [item.is_empty_board for item in items]
    return {
        "run": run_dir,
        "stop_rule": [settings.stop_rule, settings.stop_threshold],
        "decode_seconds": round(seconds, 1),
        "micro_overall": report["micro"]["Overall"]["overall"],
        "micro_location": report["micro"]["Overall"]["location"],
        "counts": report["counts"],
        "by_reference_length": by_length(scores),
        "neb_predictions": near_misses(details["pred_sets"], details["ref_sets"], is_eb),
        "first_action_in_builder_frame": first_actions(items, predictions),
        "start_cases": start_cases(items, predictions),
        "per_item_overall": {"tp": scores.fair_tp.tolist(), "n_pred": scores.n_pred.tolist(),
                             "n_ref": scores.n_ref.tolist()},
    }


def pct(value) -> str:
    return "-" if value is None else f"{100 * value:.1f}"


def markdown(results: dict, split: str) -> str:
    lines = [f"MDC {split}, by reference length (micro F1 Overall / Location / Type; predicted / reference net actions):", "",
             "| run | " + " | ".join(name for _, _, name in LENGTH_BINS) + " |",
             "|---|" + "---:|" * len(LENGTH_BINS)]
    for label, result in results.items():
        cells = []
        for _, _, name in LENGTH_BINS:
            row = result["by_reference_length"].get(name)
            cells.append("-" if row is None else
                         f"{pct(row['micro_overall'])} / {pct(row['micro_location'])} / {pct(row['micro_type'])}; "
                         f"{row['predicted_net_actions']} / {row['reference_net_actions']} ({row['items']} items)")
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    lines += ["", f"MDC {split}, NEB items: predicted net actions by what went wrong (share of all predicted):", "",
              "| run | predicted | exact | type+color in reference | wrong, same cell | same kind 1 cell off "
              "(x / y / z) | 2 off | 3-4 off | 5+ off | no reference action of that kind |",
              "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for label, result in results.items():
        n = result["neb_predictions"]
        total = max(n["predicted_net_actions"], 1)
        share = lambda k: f"{100 * k / total:.1f}%"  # noqa: E731
        d = n["inexact_by_distance_to_same_kind"]
        axes = n["distance_1_by_axis"]
        lines.append(f"| {label} | {n['predicted_net_actions']} | {share(n['exact'])} | "
                     f"{share(n['type_color_in_reference'])} | {share(n['inexact_same_cell_other_kind'])} | "
                     f"{share(d['1'])} ({axes['x']} / {axes['y']} / {axes['z']}) | {share(d['2'])} | "
                     f"{share(d['3-4'])} | {share(d['5+'])} | {share(d['none'])} |")
    lines += ["", f"MDC {split}, NEB items: the first predicted action against the first reference action in the "
              "Builder's frame, by the direction words of the last Architect turn (share of the group's items):", "",
              "| run | words | items | " + " | ".join(FIRST_ACTION_OUTCOMES) + " |",
              "|---|---|---:|" + "---:|" * len(FIRST_ACTION_OUTCOMES)]
    for label, result in results.items():
        for group, row in result["first_action_in_builder_frame"].items():
            total = max(row["items"], 1)
            lines.append(f"| {label} | {group} | {row['items']} | "
                         + " | ".join(f"{100 * row[o] / total:.1f}%" for o in FIRST_ACTION_OUTCOMES) + " |")
    lines += ["", f"MDC {split}, NEB items with an earlier Builder action: where the first reference action and "
              "the first predicted action lie against the Builder's last action (near: at or next to it), items "
              "(share of all) and, where both are near or both far, how often the first predicted action is exact:", "",
              "| run | " + " | ".join(f"reference / prediction {case}" for case in START_CASES) + " |",
              "|---|" + "---:|" * len(START_CASES)]
    for label, result in results.items():
        rows = result["start_cases"]
        total = max(sum(row["items"] for row in rows.values()), 1)
        lines.append(f"| {label} | " + " | ".join(
            f"{row['items']} ({100 * row['items'] / total:.1f}%)"
            + (f", exact {100 * row['exact'] / max(row['items'], 1):.1f}%" if case in ("near / near", "far / far") else "")
            for case, row in rows.items()) + " |")
    return "\n".join(lines) + "\n"


def bootstrap_markdown(boot: dict, split: str) -> str:
    lines = [f"MDC {split}, micro Overall F1 with 95% paired-bootstrap intervals ({boot['samples']} resamplings of "
             f"{boot['items']} items):", "", "| run | interval |", "|---|---:|"]
    lines += [f"| {label} | {pct(lo)} - {pct(hi)} |" for label, (lo, hi) in boot["runs"].items()]
    lines += ["", "| difference | interval | share of resamplings > 0 |", "|---|---:|---:|"]
    lines += [f"| {name} | {pct(d['interval'][0])} - {pct(d['interval'][1])} | {100 * d['share_above_0']:.1f}% |"
              for name, d in boot["differences"].items()]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs="+", help="training workdirs")
    parser.add_argument("--corpus", default=paths.MDC, help="the MDC (default: found by bapjax.paths.mdc_path)")
    parser.add_argument("--split", default="val")
    parser.add_argument("--batch_size", type=int, default=64)
    parser.add_argument("--bootstrap", type=int, default=0, help="paired bootstrap resamplings (0: none)")
    parser.add_argument("--limit", type=int, default=0, help="only the first N items (0: all)")
    parser.add_argument("--out", default=None, help="writes OUT.json and OUT.md")
    args = parser.parse_args(argv)
    try:
        return analyze(args)
    except UserError as err:  # a mistake in what was given: one line, exit 2
        cli.fail(str(err))


def analyze(args: argparse.Namespace) -> int:
    if args.out:
        paths.check_writable_dir(Path(args.out).parent, "--out", output=args.out)
    items = load.items_from_flags(args.corpus, args.split)
    if args.limit:
        items = items[:args.limit]
    results = {}
    for run_dir in args.runs:
        label = Path(run_dir).name
        results[label] = analyze_run(run_dir, items, args.batch_size)
        print(f"{label}: micro Overall {pct(results[label]['micro_overall'])}", file=sys.stderr)
    text = markdown(results, args.split)
    boot = None
    if args.bootstrap:
        boot = paired_bootstrap({label: {k: np.asarray(v) for k, v in r["per_item_overall"].items()}
                                 for label, r in results.items()}, args.bootstrap)
        text += "\n" + bootstrap_markdown(boot, args.split)
    print(text, file=sys.stderr)
    # the per-item counts (one line each in the JSON) serve the bootstrap only: its intervals are written
    summaries = {label: {k: v for k, v in r.items() if k != "per_item_overall"} for label, r in results.items()}
    if args.out:
        Path(args.out + ".json").write_text(json.dumps({"command": " ".join(sys.argv), "split": args.split,
                                                        "bootstrap": boot, "runs": summaries}, indent=1) + "\n")
        Path(args.out + ".md").write_text(text)
    print(json.dumps(summaries))
    return 0


if __name__ == "__main__":
    sys.exit(main())
