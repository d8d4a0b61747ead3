"""Write the predictions of a trivial predictor (empty, oracle, perturbed: `bapjax.evaluation.trivial`).

    python -m bapjax.predictors empty  --corpus PATH --split test --out empty.jsonl
    python -m bapjax.predictors oracle --items clean.jsonl --out oracle.jsonl
    python -m bapjax.predictors oracle --corpus @mdc --split test --limit 20 --out oracle20.jsonl
"""

from __future__ import annotations

import difflib
import sys
from typing import Sequence

from absl import flags

from bapjax import cli, paths
from bapjax.corpus import load
from bapjax.errors import UserError
from bapjax.evaluation.trivial import PREDICTORS, predict
from bapjax.world import jsonl

FLAGS = flags.FLAGS


def define_flags() -> None:
    cli.define_item_source_flags("corpus", "split", "items")
    cli.flag("string", "out", None, "Predictions JSONL to write.")
    cli.flag("integer", "seed", 0, "Random seed (perturbed).")
    cli.flag("integer", "limit", 0, load.LIMIT_HELP)


USAGE = (f"usage: python -m bapjax.predictors {{{'|'.join(PREDICTORS)}}} "
         "(--corpus PATH --split S | --items FILE) --out FILE")


def main(argv: Sequence[str]) -> int:
    if len(argv) != 2:
        given = f" (got {' '.join(argv[1:])})" if len(argv) > 2 else ""
        raise UserError(f"name one predictor: {', '.join(PREDICTORS)}{given}; {USAGE}")
    if argv[1] not in PREDICTORS:
        close = difflib.get_close_matches(argv[1], PREDICTORS, n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise UserError(f"{argv[1]!r} is not a predictor{hint}; the predictors are {', '.join(PREDICTORS)}")
    cli.require_flags("out")
    paths.check_output_file(FLAGS.out, "--out")
    load.check_limit(FLAGS.limit)
    items = load.first_items(load.items_from_flags(FLAGS.corpus, FLAGS.split, FLAGS.items), FLAGS.limit)
    predictions = predict(argv[1], items, FLAGS.seed)
    jsonl.write_predictions(FLAGS.out, predictions)
    changed = sum(1 for item in items if predictions[item.item_id] != list(item.reference_actions))
    note = f" ({changed} with temporary supports added)" if argv[1] == "oracle" else ""
    print(f"wrote {argv[1]} predictions for {len(items)} items to {FLAGS.out}{note}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    cli.run(main, define_flags)
