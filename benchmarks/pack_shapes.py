"""How many step shapes a run compiles, and how many rows it pads, under each `train.pack_rounding`.

From the repository root (this tree's bapjax):

    python -m benchmarks.pack_shapes --config=configs/cpu_experiment.py:agg,0 --out results/pack_shapes_agg.json

Teacher forcing packs a batch's (item, step) targets into a fixed number of rows (`builder.packed_size`); each
distinct number is one compiled program of `train_step` (training batches) or `eval_step` (val batches). This walks
the config's batches exactly as its training run meets them, on one device: its training items, order, batch size
and step budget (the curriculum's stages first when it has them), and every val batch of `eval.batch_size`, and
gives for each rounding the pack sizes met (each with its batch count), the programs they compile, and the packed
rows per target (what the decoder and heads run per target; padding rows included). Host-side only: no model
weights, no compilation; the pack unit is the model's (`loop.pack_unit`). The last line is JSON.
"""

from __future__ import annotations

import argparse
import collections
import json
import time

from bapjax import cli, paths
from bapjax.data import curriculum, input_pipeline, sources
from bapjax.models import builder
from bapjax.text.vocab import Vocabulary
from bapjax.training import loop, run_checks


def walk(batches, unit: int, counts: dict) -> int:
    """Adds each batch's pack size under every rounding to `counts`; returns the targets seen."""
    targets = 0
    for batch in batches:
        targets += int(builder.targets_per_row(batch["action_mask"], batch["weight"]).sum())
        for rounding in builder.PACK_ROUNDINGS:
            counts[rounding][builder.packed_size(batch["action_mask"], batch["weight"], unit, rounding=rounding)] += 1
    return targets


def summary(counts: collections.Counter, targets: int) -> dict:
    rows = sum(size * n for size, n in counts.items())
    return {"programs": len(counts), "pack_sizes": {str(size): n for size, n in sorted(counts.items())},
            "batches": sum(counts.values()), "targets": targets, "packed_rows": rows,
            "rows_per_target": round(rows / max(targets, 1), 4)}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--config", required=True, help="a training config, e.g. configs/cpu_experiment.py:agg,0")
    parser.add_argument("--out", default="", help="write the JSON here too")
    args = parser.parse_args(argv)
    start = time.perf_counter()
    config = run_checks.with_defaults(cli.load_config(args.config))
    tc, ec = config.train, config.eval
    data = sources.load_config_sources(config, lambda *a: None)
    train_items, weights = sources.train_items(config, data)  # as a run reads them: a source's teacher applied
    val_items = [it for splits in data.values() for it in splits["val"]]
    # pack sizes depend on the actions only: any vocabulary featurizes them alike
    vocab = Vocabulary.build(train_items, min_count=int(config.data.min_count))
    feature_config = input_pipeline.FeatureConfig.from_config(config)
    schedule = (curriculum.schedule_from_config(train_items, config, int(config.seed))
                if config.curriculum.metric else None)
    cache = paths.cache_root() / "features"
    train_iter = input_pipeline.DataIterator(train_items, vocab, feature_config, int(tc.batch_size),
                                             seed=int(config.seed), shuffle=True, schedule=schedule,
                                             drop_remainder=True, cache_dir=cache, weights=weights)
    _, steps = loop.training_budget(train_iter, schedule, tc)
    unit = loop.pack_unit(builder.build_model(config.model, vocab.size), int(tc.pack_multiple), 1)
    result = {"config": args.config, "batch_size": int(tc.batch_size), "steps": steps,
              "eval_batch_size": int(ec.batch_size), "pack_unit": unit}
    counts = {split: {r: collections.Counter() for r in builder.PACK_ROUNDINGS} for split in ("train", "val")}
    train_batches = (batch for _, batch in zip(range(steps), train_iter))
    targets = {"train": walk(train_batches, unit, counts["train"])}
    val_features = input_pipeline.featurize_items_cached(val_items, vocab, feature_config, cache)
    targets["val"] = walk(loop.eval_batches(val_features, feature_config, int(ec.batch_size)), unit, counts["val"])
    for split in ("train", "val"):
        result[split] = {r: summary(counts[split][r], targets[split]) for r in builder.PACK_ROUNDINGS}
    result["seconds"] = round(time.perf_counter() - start, 1)
    for split in ("train", "val"):
        for rounding, row in result[split].items():
            print(f"{split:5s} {rounding:12s} {row['programs']:3d} programs  {row['rows_per_target']:.3f} packed rows "
                  f"per target  ({row['batches']} batches)")
    line = json.dumps(result)
    if args.out:
        paths.write_atomically(args.out, lambda tmp: tmp.write_text(json.dumps(result, indent=1) + "\n"), "the result")
    print(line)


if __name__ == "__main__":
    main()
