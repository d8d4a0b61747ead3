"""The BAP v2 evaluator: predictions + items -> micro/macro tables (EB / NEB / Overall); its
command is `python -m bapjax.evaluate`.

Predictions: one JSON object per line, ``{"item_id": ..., "actions": [{"type": "place",
"color": "red", "x": 0, "y": 1, "z": 0}, ...]}`` (``write_predictions`` writes this).
With ``--format json`` the last printed line is the report: ``{"micro": {"EB": {"type",
"color", "location", "shape", "overall"}, "NEB": ..., "Overall": ...}, "macro": {...},
"strict_micro": f, "counts": {...}}`` (fractions in [0, 1]; null for a group with no items);
a partial report (``bapjax.evaluate --limit N``) adds ``"limit": {"first", "of",
"ignored_predictions"}`` (``bapjax.llm score``: ``"ignored_responses"``).
The metric definitions live in ``bapjax.evaluation.metrics``; this module is input checking and output.
"""

from __future__ import annotations

import json
from typing import Iterable, Mapping, Sequence

import numpy as np

from bapjax.errors import UserError
from bapjax.evaluation import metrics
from bapjax.world import grid
from bapjax.world.grid import Action
from bapjax.world.items import BapItem


class EvaluationError(UserError):
    """Bad evaluator input; the message names the file, line, item or field."""


# --------------------------------------------------------------------------------------------
# Evaluation


def evaluate_items(items: Sequence[BapItem], predictions: Mapping[str, Sequence[Action]],
                   multiple: Iterable[str] | None = None, drop_infeasible: bool = False,
                   allow_missing: bool = False):
    """Score every item; returns (report dict, metrics.ItemScores, per-item details).

    ``multiple``: ids of the items in M (fairer alignment); None means all EB items.
    """
    with metrics.no_gc():
        return _evaluate_items(items, predictions, multiple, drop_infeasible, allow_missing)


def _evaluate_items(items, predictions, multiple, drop_infeasible, allow_missing):
    known = {item.item_id for item in items}
    if len(known) != len(items):
        raise EvaluationError("the item list holds the same item id twice")
    unknown = [item_id for item_id in predictions if item_id not in known]
    if unknown:
        raise EvaluationError(
            f"{len(unknown)} predicted item id(s) are not among the {len(items)} items "
            f"being evaluated, e.g. {unknown[0]!r}")
    if multiple is None:
        in_multiple = {item.item_id for item in items if item.is_empty_board}
    else:
        in_multiple = set(multiple) & known
    missing = []
    action_lists = []
    for item in items:
        actions = predictions.get(item.item_id)
        if actions is None:
            if not allow_missing:
                raise EvaluationError(
                    f"item {item.item_id} has no prediction (use --allow_missing to score missing "
                    "items as empty predictions)")
            missing.append(item.item_id)
            actions = []
        action_lists.append(actions)
    multiple_positions = [n for n, item in enumerate(items) if item.item_id in in_multiple]
    try:
        pred_sets, fair_sources, dropped = metrics.predicted_net_actions_batch(
            [item.prev_structure for item in items], action_lists, drop_infeasible,
            names=[item.item_id for item in items], structure_needed=multiple_positions)
    except metrics.InfeasibleActionError as err:
        raise EvaluationError(str(err)) from None
    dropped_steps = sum(map(len, dropped))
    items_with_drops = sum(1 for d in dropped if d)
    ref_sets = [grid.net_actions(item.reference_actions) for item in items]
    fair_targets = {n: grid.apply_sequence(items[n].prev_structure, items[n].reference_actions)
                    for n in multiple_positions}
    scores = metrics.score_items(pred_sets, ref_sets, fair_sources, fair_targets)
    is_eb = np.array([item.is_empty_board for item in items], bool)
    report = metrics.tables(scores, is_eb)
    report["counts"] = {
        "items": len(items),
        "EB": int(is_eb.sum()),
        "NEB": int((~is_eb).sum()),
        "multiple": len(in_multiple),
        "unique": len(items) - len(in_multiple),
        "missing": len(missing),
        "dropped_infeasible_actions": dropped_steps,
        "items_with_dropped_actions": items_with_drops,
        "predicted_net_actions": int(scores.n_pred.sum()),
        "reference_net_actions": int(scores.n_ref.sum()),
    }
    details = {"pred_sets": pred_sets, "ref_sets": ref_sets, "missing": missing,
               "in_multiple": in_multiple}
    return report, scores, details


def evaluate_predictions(items: Sequence[BapItem], predictions: Mapping[str, Sequence[Action]],
                         multiple: Iterable[str] | None = None, drop_infeasible: bool = False,
                         allow_missing: bool = False) -> dict:
    """The v2 report: {"micro", "macro", "strict_micro", "counts"} (see the module docstring)."""
    return evaluate_items(items, predictions, multiple, drop_infeasible, allow_missing)[0]


def headline(report: Mapping) -> dict:
    """A report's headline numbers: micro Overall (fairer) F1, legacy strict micro F1, and the mean
    number of predicted net actions per item."""
    counts = report["counts"]
    return {"micro_overall": float(report["micro"]["Overall"]["overall"]), "strict": float(report["strict_micro"]),
            "mean_predicted_net_actions": counts["predicted_net_actions"] / max(counts["items"], 1)}


def headline_f1(report: Mapping) -> dict:
    """The two F1s of a report's headline: micro Overall (fairer) and legacy strict micro."""
    numbers = headline(report)
    return {key: numbers[key] for key in ("micro_overall", "strict")}


def net_counts(report: Mapping) -> dict:
    """A report's predicted and reference net actions, summed over its items."""
    counts = report["counts"]
    return {"predicted_net": counts["predicted_net_actions"], "reference_net": counts["reference_net_actions"]}


def per_item_records(items: Sequence[BapItem], scores: metrics.ItemScores, details: dict):
    """One JSON-able record per item: F1s, set sizes, and the alignments chosen."""
    f1 = scores.per_item()
    for n, item in enumerate(items):
        yield {
            "item_id": item.item_id,
            "group": "EB" if item.is_empty_board else "NEB",
            "multiple": item.item_id in details["in_multiple"],
            "n_pred": int(scores.n_pred[n]),
            "n_ref": int(scores.n_ref[n]),
            **{metric: float(values[n]) for metric, values in f1.items()},
            "fair_alignment": list(metrics.transform_params(scores.fair_index[n])),
            "shape_alignment": list(metrics.transform_params(scores.shape_index[n])),
        }


# --------------------------------------------------------------------------------------------
# Output


def _cell(value, percent: bool) -> str:
    if value is None:
        return "-"
    return f"{100 * value:.1f}" if percent else f"{value:.4f}"


def mark_partial(report: dict, first: int, of: int, ignored: int | None = None, what: str = "predictions") -> dict:
    """`report` marked as scoring only the first `first` of a split's `of` items (``--limit N`` of
    evaluate, predict --evaluate, llm score): its ``"limit"`` object (with how many records of
    later items were ignored, ``ignored_<what>``), which `format_report` prints as its partial line."""
    report["limit"] = {"first": first, "of": of, **({f"ignored_{what}": ignored} if ignored is not None else {})}
    return report


def format_report(report: Mapping, fmt: str = "text", percent: bool = True) -> str:
    """The two v2 tables (micro, macro) and legacy strict micro F1 as text, markdown or JSON."""
    if fmt == "json":
        return json.dumps(report)
    if fmt not in ("text", "markdown"):
        raise ValueError(f"unknown format {fmt!r}; expected text, markdown or json")
    header = ["", "Type", "Color", "Location", "Shape", "Overall"]
    unit = " (%)" if percent else ""
    lines = []
    for kind in ("micro", "macro"):
        rows = [[group] + [_cell(report[kind][group][m], percent) for m in metrics.METRIC_NAMES]
                for group in metrics.GROUPS]
        title = f"{kind.capitalize()} F1{unit}"
        if fmt == "markdown":
            lines.append(f"**{title}**")
            lines.append("")
            lines.append("| " + " | ".join(header) + " |")
            lines.append("|" + "|".join(["---"] + ["---:"] * 5) + "|")
            lines.extend("| " + " | ".join(row) + " |" for row in rows)
        else:
            lines.append(title)
            lines.append(f"{'':<8}" + "".join(f"{h:>10}" for h in header[1:]))
            lines.extend(f"{row[0]:<8}" + "".join(f"{v:>10}" for v in row[1:]) for row in rows)
        lines.append("")
    counts = report.get("counts", {})
    strict = _cell(report.get("strict_micro"), percent)
    legacy = f"Legacy strict micro F1{unit}: {strict}"
    lines.append(f"**{legacy}**" if fmt == "markdown" else legacy)
    if counts:
        lines.append("")
        summary = (f"items {counts.get('items')} (EB {counts.get('EB')}, NEB {counts.get('NEB')}; "
                   f"multiple {counts.get('multiple')}, unique {counts.get('unique')}); "
                   f"missing {counts.get('missing')}; dropped infeasible actions "
                   f"{counts.get('dropped_infeasible_actions')} in "
                   f"{counts.get('items_with_dropped_actions')} items")
        lines.append(summary)
    limit = report.get("limit")
    if limit and limit["first"] < limit["of"]:  # `mark_partial`: the one wording of a partial score
        lines.append(f"partial: the first {limit['first']} of {limit['of']} items (--limit)")
    return "\n".join(lines)

