"""Pictures of structures, BAP items and predictions (`bapjax.pages.pictures`), as PNG files.

    python -m bapjax.viz item (--corpus PATH | --store DIR | --items FILE) [--split S] --item_id ID \\
        --out item.png
    python -m bapjax.viz structure --gold PATH/C1.xml --out c1.png [--yaw 45]
    python -m bapjax.viz prediction --corpus PATH --split test --predictions preds.jsonl \\
        --item_id ID --out pred.png
    python -m bapjax.viz sample --kind shapes --num_shapes 3 --seed 0 --out s.png
    python -m bapjax.viz report ...   (the same as python -m bapjax.report ...)

``report`` writes a self-contained HTML page of a whole split (an alias of ``python -m bapjax.report``,
with the same flags). ``item`` and
``prediction`` read items through ``bapjax.corpus.load.items_from_flags`` (``--corpus`` defaults to
the MDC; without ``--split`` every split is searched). ``--out`` is checked before anything is
read or drawn (``paths.check_output_file``; a missing folder is made). Mistakes in what was
given (flags, files, an ``--out`` that cannot be written) are ``errors.UserError``s (``VizError``,
``paths.UnwritableError``: one line, exit 2); anything else is a bug and keeps its traceback.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Sequence

import numpy as np
from absl import flags

from bapjax import cli, paths, report
from bapjax.corpus import mdc
from bapjax.pages.pictures import (
    VizError,
    find_item,
    read_gold_xml,
    read_prediction,
    render_item,
    render_prediction,
    render_sim_pictures,
    render_structure,
)
from bapjax.sim.structures import StructureError, grow_random_structure, sample_shape_structure
from bapjax.world import grid

FLAGS = flags.FLAGS


def define_flags() -> None:
    """Flags exist only when this module is the program or a test asks (idempotent)."""
    cli.define_item_source_flags()  # structure/item/prediction: --corpus defaults to the MDC, item: --split to all
    cli.flag("string", "out", None, "Output PNG file (sim-items, report: a folder).")
    cli.flag("string", "item_id", None, "Item id, e.g. 'B1-A3-C1-1522435497386:5'.")
    cli.flag("string", "gold", None, "Gold configuration XML (structure).")
    cli.flag("string", "target", None, "Target id, e.g. C1, read from --corpus (structure).")
    cli.flag("float", "yaw", 45.0, "Camera yaw for structure pictures (Minecraft degrees).")
    cli.flag("enum", "kind", "shapes", "sample: shape composition or random growth.",
                     enum_values=["shapes", "random"])
    cli.flag("integer", "num_shapes", 3, "sample --kind shapes: number of shapes.")
    cli.flag("integer", "num_blocks", 15, "sample --kind random: number of blocks.")
    cli.flag("integer", "seed", 0, "sample: random seed.")
    cli.flag("integer", "dpi", 90, "Picture resolution.")
    report.define_flags()  # the `report` alias; --predictions (prediction, report) is defined there




def main(argv: Sequence[str]) -> int:
    commands = ("item", "structure", "prediction", "sample", "sim-items", "report")
    if len(argv) != 2 or argv[1] not in commands:
        raise VizError(f"usage: python -m bapjax.viz {{{'|'.join(commands)}}} --out PNG ...")
    if argv[1] == "report":  # the alias of python -m bapjax.report (--out is a folder there)
        return report.main(argv[:1])
    if not FLAGS.out:
        raise VizError("--out is required")
    if FLAGS.dpi < 1:
        raise VizError(f"--dpi is {FLAGS.dpi}; expected a positive integer")
    command = argv[1]
    if command == "sim-items":  # a folder of pictures
        paths.check_writable_dir(FLAGS.out, "--out")
    else:
        paths.check_output_file(FLAGS.out, "--out")
    if command in ("item", "prediction"):
        if not FLAGS.item_id:
            raise VizError(f"{command} needs --item_id")
        # --corpus defaults to the MDC unless --store or --items names the items.
        corpus = FLAGS.corpus or (None if FLAGS.store or FLAGS.items else paths.MDC)
        item = find_item(FLAGS.item_id, corpus=corpus, split=FLAGS.split, items=FLAGS.items, store=FLAGS.store)
        if command == "item":
            out = render_item(item, FLAGS.out, dpi=FLAGS.dpi)
        else:
            if not FLAGS.predictions:
                raise VizError("prediction needs --predictions")
            predicted = read_prediction(FLAGS.predictions, FLAGS.item_id)
            out = render_prediction(item, predicted, FLAGS.out, dpi=FLAGS.dpi)
    elif command == "sim-items":  # --out is a directory here
        written = render_sim_pictures(FLAGS.out, seed=FLAGS.seed, dpi=FLAGS.dpi)
        for path in written:
            print(f"wrote {path} ({os.path.getsize(path) // 1024} KB)")
        print(f"wrote {Path(FLAGS.out) / 'sim_items.json'}")
        return 0
    elif command == "structure":
        if FLAGS.gold:
            structure = read_gold_xml(FLAGS.gold)
            name = Path(FLAGS.gold).stem
        elif FLAGS.target:
            root = mdc.resolve_corpus(paths.mdc_path(FLAGS.corpus))
            structure = read_gold_xml(str(root / "data" / "gold-configurations" / f"{FLAGS.target}.xml"))
            name = FLAGS.target
        else:
            raise VizError("structure needs --gold XML, or --target (of --corpus, default the MDC)")
        out = render_structure(structure, FLAGS.out, title=f"{name}: {len(structure)} blocks",
                               yaw=FLAGS.yaw, dpi=FLAGS.dpi)
    else:
        rng = np.random.default_rng(FLAGS.seed)
        if FLAGS.kind == "shapes":
            if FLAGS.num_shapes < 1:
                raise VizError(f"--num_shapes is {FLAGS.num_shapes}; expected an integer >= 1")
            try:
                sampled = sample_shape_structure(rng, FLAGS.num_shapes)
            except StructureError as err:  # too many shapes to compose in the region
                raise VizError(f"--num_shapes {FLAGS.num_shapes}: {err}") from None
            structure = sampled.blocks
            title = " + ".join(f"{grid.color_name(s.color)} {s.kind}" for s in sampled.shapes)
        else:
            most = grid.NUM_COLORS * grid.INVENTORY_PER_COLOR
            if not 1 <= FLAGS.num_blocks <= most:
                raise VizError(f"--num_blocks is {FLAGS.num_blocks}; expected 1 to {most} (the inventory)")
            structure = {b[:3]: b.color for b in grow_random_structure(rng, FLAGS.num_blocks)}
            title = f"random growth, {len(structure)} blocks"
        out = render_structure(structure, FLAGS.out, title=title, yaw=FLAGS.yaw, dpi=FLAGS.dpi)
    print(f"wrote {out} ({os.path.getsize(out) // 1024} KB)")
    return 0


if __name__ == "__main__":
    cli.run(main, define_flags)
