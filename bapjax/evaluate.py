"""Score predictions with the BAP v2 benchmark: micro/macro tables (EB / NEB / Overall).

    python -m bapjax.evaluate --corpus PATH --split test --predictions preds.jsonl
    python -m bapjax.evaluate --items clean.jsonl --annotations ann.jsonl \\
        --predictions preds.jsonl --format markdown
    python -m bapjax.evaluate --corpus @mdc --split test --limit 20 --predictions preds.jsonl

Predictions and the report are described in `bapjax.evaluation.evaluator`; with ``--format json``
the last printed line is the report. Every item scored needs a prediction (``--allow_missing``
scores the missing ones as empty). ``--limit N`` scores the first N items of the split, the
items ``python -m bapjax.predict --limit N`` predicts: predictions of later items of the split
are ignored (counted on stderr), and the report says it is partial (``"limit": {"first": N,
"of": M, "ignored_predictions": K}`` beside the counts, a line under the text tables).
"""

from __future__ import annotations

import json
import sys
import time
from typing import Sequence

from absl import flags, logging

from bapjax import cli, paths
from bapjax.corpus import load, v2_clean
from bapjax.evaluation.evaluator import EvaluationError, evaluate_items, format_report, mark_partial, per_item_records
from bapjax.world import jsonl

# --------------------------------------------------------------------------------------------
# CLI

FLAGS = flags.FLAGS


def define_flags() -> None:
    cli.define_item_source_flags()
    cli.flag("string", "predictions", None, "Predictions JSONL: {item_id, actions: [...]} per line.")
    cli.flag("string", "annotations", None, "v2 annotations JSONL; M = items annotated "
             "'multiple'. Without it M = all empty-board items.")
    cli.flag("enum", "format", "text", "Output format: text, json or markdown.",
             enum_values=["text", "json", "markdown"])
    cli.flag("bool", "allow_missing", False, "Score items without a prediction as empty predictions.")
    cli.flag("bool", "drop_infeasible", False, "Drop infeasible predicted actions (counted) instead of failing.")
    cli.define_compilation_cache_flag()
    cli.flag("string", "per_item", None, "Optional JSONL file for per-item F1s and alignments.")
    cli.flag("integer", "limit", 0, load.LIMIT_HELP)


def check_not_a_prefix(items, predictions) -> None:
    """Predictions of exactly the first k < n items (``predict --limit k``) without --limit: the
    missing-prediction error, naming the --limit that scores what was predicted."""
    k = len(predictions)
    if 0 < k < len(items) and set(predictions) == {item.item_id for item in items[:k]}:
        raise EvaluationError(f"item {items[k].item_id} has no prediction: the {k} predictions are of the "
                              f"first {k} of the {len(items)} items (--limit {k} scores those; "
                              "--allow_missing scores the rest as empty predictions)")


def run(argv_flags=FLAGS) -> dict:
    """The CLI's work (importable for tests): load, evaluate, print; returns the report."""
    start = time.perf_counter()
    if not argv_flags.predictions:
        raise EvaluationError("--predictions FILE is required")
    paths.check_output_file(argv_flags.per_item, "--per_item")
    load.check_limit(argv_flags.limit)
    every = load.items_from_flags(argv_flags.corpus, argv_flags.split, argv_flags.items,
                                  argv_flags.store, argv_flags.dataset)
    items = load.first_items(every, argv_flags.limit)
    predictions, ignored = load.without_later_items(jsonl.read_predictions(argv_flags.predictions), every, items)
    multiple = None
    if argv_flags.annotations:
        annotations = jsonl.read_annotations(argv_flags.annotations)
        multiple = v2_clean.multiple_ids(items, annotations, argv_flags.annotations)
    if not argv_flags.limit and not argv_flags.allow_missing:
        check_not_a_prefix(items, predictions)
    report, scores, details = evaluate_items(items, predictions, multiple, argv_flags.drop_infeasible,
                                             argv_flags.allow_missing)
    partial = ""
    if argv_flags.limit:
        mark_partial(report, len(items), len(every), ignored)
        partial = (f" (--limit {argv_flags.limit}: the first {len(items)} of {len(every)} items; "
                   f"{ignored} prediction(s) of later items ignored)")
    if argv_flags.per_item:
        with open(argv_flags.per_item, "w", encoding="utf-8") as out:
            for record in per_item_records(items, scores, details):
                out.write(json.dumps(record) + "\n")
    print(format_report(report, argv_flags.format))
    print(f"evaluated {len(items)} items{partial} in {time.perf_counter() - start:.2f} s", file=sys.stderr)
    return report


def main(argv: Sequence[str]) -> int:
    logging.set_verbosity(logging.WARNING)
    cli.apply_compilation_cache_flag()
    if len(argv) > 1:
        raise EvaluationError(f"unexpected arguments: {' '.join(argv[1:])}")
    run()
    return 0


if __name__ == "__main__":
    cli.run(main, define_flags)
