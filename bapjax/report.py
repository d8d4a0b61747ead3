"""A split's predictions as one self-contained HTML page (`bapjax.pages.report_page`).

    python -m bapjax.report --predictions preds.jsonl --corpus @mdc --split test --out report
    python -m bapjax.report --checkpoint runs/cpu --corpus @mdc --split val --out report --limit 200

(``python -m bapjax.viz report ...`` is the same command under its older name.) Items come from
``--corpus PATH --split S``, ``--store DIR --split S [--dataset D]`` or ``--items FILE``; ``--limit N``
takes the first N of them (as ``python -m bapjax.predict --limit N`` does: its predictions file
reads as is, predictions of later items are ignored) and the page says it is partial.
"""

from __future__ import annotations

from typing import Sequence

from absl import flags

from bapjax import cli
from bapjax.corpus import load
from bapjax.pages.report_page import ReportError, make_report

FLAGS = flags.FLAGS


def define_flags() -> None:
    """The report's flags (``bapjax.viz`` defines them too, for its ``report`` alias)."""
    cli.define_item_source_flags()
    cli.flag("string", "out", None, "The folder to write index.html to (created; its parent must exist).")
    cli.flag("string", "checkpoint", None, "A training workdir whose checkpoint predicts the items, or "
             "`pretrained`: the builder bapjax ships.")
    cli.flag("string", "predictions", None, "Predictions JSONL: {item_id, actions: [{type,color,x,y,z}]}.")
    cli.flag("integer", "limit", 0, load.LIMIT_HELP)
    cli.flag("integer", "batch_size", 64, "With --checkpoint: items decoded per compiled batch.")
    cli.flag("bool", "allow_missing", False, "Score items without a prediction as empty predictions.")
    cli.flag("bool", "drop_infeasible", False, "Drop infeasible predicted actions instead of failing.")


def main(argv: Sequence[str]) -> int:
    if len(argv) > 1:
        raise ReportError(f"unexpected arguments: {' '.join(argv[1:])} (usage: python -m bapjax.report "
                          "(--checkpoint RUN | --predictions FILE) (--corpus PATH | --store DIR | --items FILE) "
                          "--split S --out DIR)")
    make_report(out=FLAGS.out, checkpoint=FLAGS.checkpoint, predictions=FLAGS.predictions, corpus=FLAGS.corpus,
                store=FLAGS.store, items_file=FLAGS.items, split=FLAGS.split, dataset=FLAGS.dataset,
                limit=FLAGS.limit, batch_size=FLAGS.batch_size, allow_missing=FLAGS.allow_missing,
                drop_infeasible=FLAGS.drop_infeasible)
    return 0


if __name__ == "__main__":
    cli.run(main, define_flags)
