"""Assemble the BAP v2 training set into an item store (`bapjax.data.training_set`).

    python -m bapjax.build --out STORE --mdc @mdc --seed 0 \
        [--datasets mc,bs,ss,r] [--sizes bs=9890:1186:1181,...] [--scale 1.0] \
        [--synthetic bs=DIR,ss=DIR,r=DIR] [--work_dir DIR] [--overwrite]

The last line printed is JSON with the per-dataset sizes next to Table 3's.
"""

from __future__ import annotations

import json
from typing import Sequence

from absl import flags

from bapjax import cli, paths
from bapjax.data.training_set import build_store, parse_dirs, parse_sizes, size_table, store_statistics
from bapjax.errors import UserError
from bapjax.world.items import DATASETS, SPLITS

FLAGS = flags.FLAGS


def define_flags() -> None:
    cli.flag("string", "out", None, "Store directory to write.")
    cli.flag("string", "mdc", None, "The MDC corpus (directory, archive, or directory with one archive; "
             "default @mdc: the MDC as bapjax finds it, $BAPJAX_MDC first; docs/corpus.md).")
    cli.flag("integer", "seed", 0, "Seed for augmentation and generation.")
    cli.flag("list", "datasets", list(DATASETS), "Data sets to include (mc, bs, ss, r).")
    cli.flag("string", "sizes", "", "Synthetic sizes NAME=TRAIN:VAL:TEST,... (default: Table 3 x --scale).")
    cli.flag("float", "scale", 1.0, "Multiply Table 3 synthetic sizes (for quick builds).")
    cli.flag("string", "synthetic", "", "Existing synthetic corpora NAME=DIR,... instead of generating.")
    cli.flag("string", "work_dir", None, "Where generated/augmented corpora go (default: the bapjax "
             "cache, $BAPJAX_CACHE/generated and /augmented, shared with bapjax.train).")
    cli.flag("integer", "copies", 3, "Augmented copies per MDC training game.")
    cli.flag("float", "paraphrase_prob", 0.5, "Synonym substitution probability.")
    cli.flag("integer", "processes", None, "Worker processes for generation.")
    cli.flag("bool", "overwrite", False, "Replace an existing store.")
    cli.flag("bool", "stats", False, "Only print statistics of the existing store at --out.")


def main(argv: Sequence[str]) -> int:
    if len(argv) > 1:
        raise UserError(f"unexpected arguments {argv[1:]}")
    cli.require_flags("out")
    if FLAGS.stats:
        stats = store_statistics(FLAGS.out)
        for dataset, splits in stats.items():
            for split, s in splits.items():
                print(f"{dataset:>3} {split:>5}: {s['items']:6d} items (Table 3: {s['table3']}), EB "
                      f"{100 * s['empty_board_share']:.1f}%, actions mean {s['mean_actions']:.2f} max "
                      f"{s['max_actions']} (>20: {s['over_20_actions']}), history tokens mean "
                      f"{s['mean_history_tokens']:.0f} (>256: {100 * s['over_256_history_tokens']:.1f}%)")
        print(json.dumps(stats))
        return 0
    if FLAGS.seed < 0:
        raise UserError(f"--seed is {FLAGS.seed}; expected an integer >= 0")
    if FLAGS.scale <= 0:
        raise UserError(f"--scale is {FLAGS.scale}; expected a positive number")
    if FLAGS.copies < 1:
        raise UserError(f"--copies is {FLAGS.copies}; expected an integer >= 1")
    if FLAGS.processes is not None and FLAGS.processes < 1:
        raise UserError(f"--processes is {FLAGS.processes}; expected an integer >= 1 (or leave it out)")
    if FLAGS.work_dir:
        paths.check_writable_dir(FLAGS.work_dir, "--work_dir")
    else:
        paths.writable_cache()  # the generated and augmented corpora go there
    paths.check_writable_dir(FLAGS.out, "--out")
    try:
        manifest = build_store(FLAGS.out, FLAGS.mdc, FLAGS.seed, FLAGS.datasets, parse_sizes(FLAGS.sizes),
                               FLAGS.scale, parse_dirs(FLAGS.synthetic), FLAGS.work_dir, FLAGS.copies,
                               FLAGS.paraphrase_prob, FLAGS.processes, FLAGS.overwrite)
    except (ValueError, FileExistsError) as err:  # UserErrors are ValueErrors too
        raise UserError(str(err)) from None
    table = size_table(manifest)
    print(f"{'set':>4} " + " ".join(f"{s + ' (built/Table 3)':>24}" for s in SPLITS))
    for dataset, row in table.items():
        print(f"{dataset:>4} " + " ".join(f"{row[s][0]:>12} / {row[s][1]!s:>9}" for s in SPLITS))
    totals = {s: manifest["splits"][s]["items"] for s in SPLITS}
    print(f"total: {totals}; store {FLAGS.out}")
    print(json.dumps({"store": str(FLAGS.out), "sizes": table, "totals": totals,
                      "vocabulary_size": manifest["vocabulary"]["size"]}))
    return 0


if __name__ == "__main__":
    cli.run(main, define_flags)
