"""The BAP v2 evaluator: predictions + items -> micro/macro tables (EB / NEB / Overall).

    python -m bapjax.evaluate --corpus PATH --split test --predictions preds.jsonl
    python -m bapjax.evaluate --items clean.jsonl --annotations ann.jsonl \\
        --predictions preds.jsonl --format markdown

Predictions: one JSON object per line, ``{"item_id": ..., "actions": [{"type": "place",
"color": "red", "x": 0, "y": 1, "z": 0}, ...]}`` (``write_predictions`` writes this).
With ``--format json`` the last printed line is the report: ``{"micro": {"EB": {"type",
"color", "location", "shape", "overall"}, "NEB": ..., "Overall": ...}, "macro": {...},
"strict_micro": f, "counts": {...}}`` (fractions in [0, 1]; null for a group with no items).
The metric definitions live in ``bapjax.metrics``; this module is input checking and output.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Iterable, Mapping, Sequence

import numpy as np
from absl import app, flags, logging

from bapjax import grid, metrics
from bapjax.jsonl import iter_records
from bapjax.corpus.items import BapItem
from bapjax.grid import Action


class EvaluationError(ValueError):
    """Bad evaluator input; the message names the file, line, item or field."""


# --------------------------------------------------------------------------------------------
# Files


def read_predictions(path: str | os.PathLike) -> dict[str, list[Action]]:
    """{item_id: [Action, ...]} from a predictions JSONL file (errors name the line and field)."""
    predictions: dict[str, list[Action]] = {}
    for where, record in iter_records(path, EvaluationError, "predictions"):
        if not isinstance(record, dict):
            raise EvaluationError(f"{where}: expected an object with item_id and actions")
        if "item_id" not in record:
            raise EvaluationError(f"{where}: missing field 'item_id'")
        item_id = record["item_id"]
        if not isinstance(item_id, str) or not item_id:
            raise EvaluationError(f"{where}: field 'item_id' is {item_id!r}; expected a string")
        if "actions" not in record:
            raise EvaluationError(f"{where}: item {item_id}: missing field 'actions'")
        if not isinstance(record["actions"], list):
            raise EvaluationError(f"{where}: item {item_id}: field 'actions' is not a list")
        if item_id in predictions:
            raise EvaluationError(f"{where}: item {item_id} is predicted twice")
        try:
            predictions[item_id] = [
                grid.action_from_dict(a, f"{where}: item {item_id}: actions[{i}]")
                for i, a in enumerate(record["actions"])
            ]
        except ValueError as err:
            raise EvaluationError(str(err)) from None
    return predictions


def write_predictions(path: str | os.PathLike, predictions: Mapping[str, Iterable[Action]]) -> None:
    """Write {item_id: actions} as predictions JSONL (the format ``read_predictions`` takes)."""
    with open(path, "w", encoding="utf-8") as out:
        for item_id, actions in predictions.items():
            record = {"item_id": item_id, "actions": [grid.action_to_dict(a) for a in actions]}
            out.write(json.dumps(record) + "\n")


def read_items(path: str | os.PathLike) -> list[BapItem]:
    """Items from an export JSONL file (``python -m bapjax.corpus.mdc export`` or v2_clean)."""
    items = []
    for where, record in iter_records(path, EvaluationError, "items"):
        try:
            items.append(BapItem.from_json(record, where))
        except (ValueError, KeyError, TypeError) as err:
            raise EvaluationError(f"{where}: {err}") from None
    return items


def write_items(path: str | os.PathLike, items: Iterable[BapItem]) -> int:
    """Write items in the export JSONL format; returns how many."""
    count = 0
    with open(path, "w", encoding="utf-8") as out:
        for item in items:
            out.write(json.dumps(item.to_json()) + "\n")
            count += 1
    return count


def load_items(corpus: str | None, split: str | None, items_file: str | None) -> list[BapItem]:
    """Items from ``--items FILE`` or from ``--corpus PATH --split S`` (exactly one of them)."""
    if bool(items_file) == bool(corpus):
        raise EvaluationError("give either --items FILE or --corpus PATH --split S")
    if items_file:
        return read_items(items_file)
    if not split:
        raise EvaluationError("--corpus needs --split (train, val or test)")
    from bapjax.corpus import mdc

    try:
        return mdc.load_corpus(corpus).split(split)
    except KeyError as err:
        raise EvaluationError(err.args[0]) from None
    except mdc.CorpusError as err:
        raise EvaluationError(str(err)) from None


# --------------------------------------------------------------------------------------------
# Evaluation


def evaluate_items(items: Sequence[BapItem], predictions: Mapping[str, Sequence[Action]],
                   multiple: Iterable[str] | None = None, drop_infeasible: bool = False,
                   allow_missing: bool = False):
    """Score every item; returns (report dict, metrics.ItemScores, per-item details).

    ``multiple``: ids of the items in M (fairer alignment); None means all EB items.
    """
    with metrics._no_gc():
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
    ref_sets = [metrics.fast_net_actions(item.reference_actions) for item in items]
    fair_targets = {n: metrics.reference_structure(items[n].prev_structure, items[n].reference_actions)
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
    return "\n".join(lines)


# --------------------------------------------------------------------------------------------
# CLI

FLAGS = flags.FLAGS


def define_flag_once(kind: str, name: str, default, help_text: str, **kwargs) -> None:
    """Define an absl flag unless another bapjax module already did: the CLIs share names like
    --corpus, --split and --out, and a CLI may import another CLI's module."""
    if name not in FLAGS:
        getattr(flags, f"DEFINE_{kind}")(name, default, help=help_text, **kwargs)


def _define_flags() -> None:
    define_flag_once("string", "corpus", None, "Corpus directory / archive (with --split).")
    define_flag_once("string", "split", None, "Split of --corpus to evaluate on (train, val, test).")
    define_flag_once("string", "items", None, "Items JSONL (mdc export or v2_clean output) instead of --corpus.")
    define_flag_once("string", "predictions", None, "Predictions JSONL: {item_id, actions: [...]} per line.")
    define_flag_once("string", "annotations", None, "v2 annotations JSONL; M = items annotated "
                     "'multiple'. Without it M = all empty-board items.")
    define_flag_once("enum", "format", "text", "Output format: text, json or markdown.",
                     enum_values=["text", "json", "markdown"])
    define_flag_once("bool", "allow_missing", False, "Score items without a prediction as empty predictions.")
    define_flag_once("bool", "drop_infeasible", False, "Drop infeasible predicted actions (counted) instead of failing.")
    define_flag_once("bool", "compilation_cache", True, "Reuse compiled programs across runs "
                     "(on disk under $BAPJAX_CACHE/jax).")
    define_flag_once("string", "per_item", None, "Optional JSONL file for per-item F1s and alignments.")


def run(argv_flags=FLAGS) -> dict:
    """The CLI's work (importable for tests): load, evaluate, print; returns the report."""
    start = time.perf_counter()
    if not argv_flags.predictions:
        raise EvaluationError("--predictions FILE is required")
    items = load_items(argv_flags.corpus, argv_flags.split, argv_flags.items)
    predictions = read_predictions(argv_flags.predictions)
    multiple = None
    if argv_flags.annotations:
        from bapjax.corpus import v2_clean

        try:
            annotations = v2_clean.read_annotations(argv_flags.annotations)
            multiple = v2_clean.multiple_ids(items, annotations, argv_flags.annotations)
        except v2_clean.AnnotationError as err:
            raise EvaluationError(str(err)) from None
    report, scores, details = evaluate_items(items, predictions, multiple, argv_flags.drop_infeasible,
                                             argv_flags.allow_missing)
    if argv_flags.per_item:
        with open(argv_flags.per_item, "w", encoding="utf-8") as out:
            for record in per_item_records(items, scores, details):
                out.write(json.dumps(record) + "\n")
    print(format_report(report, argv_flags.format))
    print(f"evaluated {len(items)} items in {time.perf_counter() - start:.2f} s", file=sys.stderr)
    return report


def enable_compilation_cache() -> str:
    """Keep compiled XLA programs on disk ($BAPJAX_CACHE/jax or ~/.cache/bapjax/jax), so later
    evaluator runs skip the few seconds of compilation (a handful of padded shapes)."""
    import jax

    root = Path(os.environ.get("BAPJAX_CACHE", Path.home() / ".cache" / "bapjax")) / "jax"
    jax.config.update("jax_compilation_cache_dir", str(root))
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.2)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
    return str(root)


def main(argv: Sequence[str]) -> int:
    logging.set_verbosity(logging.WARNING)
    if FLAGS.compilation_cache:
        enable_compilation_cache()
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {' '.join(argv[1:])}")
    try:
        run()
    except EvaluationError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    _define_flags()
    app.run(main)
