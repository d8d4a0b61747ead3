"""Which training items a finished run saw: per data source, per curriculum stage, distinct items.

    python -m bapjax.analysis.items_seen runs/exp/mc runs/exp/agg runs/exp/cl runs/exp/cl_la \
        --out results/cpu_experiment_items_seen.json

Replays the run's own batch order (its config.json, seed, curriculum schedule and
`DataIterator`, the code training used) for the steps it trained (runs.jsonl) without touching a
model, so the answer is the sequence training consumed, not an estimate. It answers the question
an item budget raises: how many MDC items did a joint or curriculum run actually train on?
"""

from __future__ import annotations

import argparse
import collections
import json
from pathlib import Path

import numpy as np

from bapjax.data import curriculum, input_pipeline, sources
from bapjax.paths import cache_root
from bapjax.text.vocab import Vocabulary
from bapjax.training import run_checks


def items_seen(run: Path) -> dict:
    config = run_checks.with_defaults(run_checks.read_run_file(run, "config.json"))
    invocations = [json.loads(line) for line in (run / run_checks.RUN_LOG).read_text().splitlines() if line.strip()]
    steps = max(i["last_step"] for i in invocations)
    data = sources.load_config_sources(config)
    train_items, source_of = [], []
    for name, splits in data.items():
        train_items += splits["train"]
        source_of += [name] * len(splits["train"])
    source_of = np.asarray(source_of)
    schedule = None
    if config.curriculum.metric:
        schedule = curriculum.schedule_from_config(train_items, config, int(config.seed))
    iterator = input_pipeline.DataIterator(
        train_items, Vocabulary.load(run / "vocab.json"), input_pipeline.FeatureConfig.from_config(config),
        int(config.train.batch_size), seed=int(config.seed), shuffle=True, schedule=schedule,
        drop_remainder=True, cache_dir=cache_root() / "features")
    rows, stage_of_step = [], []
    for _ in range(steps):
        rows.append(iterator.next_rows())
        stage_of_step.append(iterator.stage_of_pass(iterator.get_state()["pass"]))
    rows = np.concatenate(rows)
    seen = source_of[rows]
    per_stage = collections.defaultdict(collections.Counter)
    for stage, batch in zip(stage_of_step, np.split(seen, steps)):
        per_stage[int(stage)].update(batch.tolist())
    num_stages = len(schedule) if schedule else 1
    return {
        "steps": steps,
        "items_seen": int(len(rows)),
        "train_items_available": {name: int((source_of == name).sum()) for name in data},
        "items_seen_per_source": {name: int((seen == name).sum()) for name in data},
        "distinct_items_seen_per_source": {name: int(len(np.unique(rows[seen == name]))) for name in data},
        "items_seen_per_stage": {("all data" if stage == num_stages - 1 else f"curriculum stage {stage + 1}"): dict(counts)
                                 for stage, counts in sorted(per_stage.items())},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", nargs="+", help="finished training workdirs")
    parser.add_argument("--out", default="", help="write the JSON here too")
    args = parser.parse_args()
    results = {Path(r).name: items_seen(Path(r)) for r in args.runs}
    text = json.dumps(results, indent=1)
    print(text)
    if args.out:
        Path(args.out).write_text(text + "\n")


if __name__ == "__main__":
    main()
