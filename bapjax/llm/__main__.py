"""The LLM command line: export prompts, write a fine-tuning set, score responses (docs/llm.md).

    python -m bapjax.llm export --format {nebula,code,rich} (--corpus PATH | --store DIR | --items FILE)
        --split S --out FILE [--shots K [--pool PATH]]
    python -m bapjax.llm finetune-set --config=configs/cl.py --format F --out FILE [--curriculum]
    python -m bapjax.llm score --format F (--corpus PATH | --store DIR | --items FILE) --split S
        --responses FILE [--out predictions.jsonl]

``export`` and ``finetune-set`` write ``{"item_id", "prompt", "completion"}`` lines
(``finetune-set --curriculum`` adds ``"stage"``); ``score`` prints the evaluator's tables and,
last, its JSON report with a ``"parse"`` object. ``export`` and ``score`` take ``--limit N``: the
first N items of the split, the items ``python -m bapjax.predict --limit N`` predicts (``score``
ignores responses of later items, and its report gets ``"limit": {"first", "of",
"ignored_responses"}``).
"""

from __future__ import annotations

import json
import sys
import time
from typing import Sequence

import numpy as np
from absl import flags, logging

from bapjax import cli, paths
from bapjax.corpus import load
from bapjax.data import curriculum, sources
from bapjax.errors import UserError
from bapjax.evaluation import evaluator
from bapjax.llm import formats as llm_formats
from bapjax.llm import lengths, retrieval
from bapjax.llm.score import read_responses, score_responses
from bapjax.world import jsonl

FLAGS = flags.FLAGS
COMMANDS = ("export", "finetune-set", "score")
USAGE = f"usage: python -m bapjax.llm {{{','.join(COMMANDS)}}} --flags... (see docs/llm.md)"


def define_flags() -> None:
    cli.flag("enum", "format", None, "Text layout: nebula, code or rich.", enum_values=list(llm_formats.FORMATS))
    cli.define_item_source_flags()
    cli.flag("string", "out", None, "Output JSONL (export, finetune-set: prompts; score: predictions).")
    cli.flag("integer", "shots", 0, "export: K retrieved examples per prompt (MiniLM cosine of the "
             "last instruction; pool items of the item's own game are left out).")
    cli.flag("string", "pool", None, "export --shots: the examples' corpus, store or items file "
             "(its train split); default: the --corpus or --store given.")
    cli.flag("string", "responses", None, "score: JSONL of {item_id, response} lines.")
    cli.flag("integer", "limit", 0, "export, score: " + load.LIMIT_HELP)
    cli.flag("bool", "curriculum", False, "finetune-set: write the config's curriculum stages in order "
             "(items repeat across stages; each line gets 'stage').")
    cli.flag("list", "length_formats", list(llm_formats.FORMATS), "finetune-set: formats of the "
             "prompt-length report (empty: no report).")
    cli.define_compilation_cache_flag()
    cli.define_config_flag("finetune-set: the training config:")


def write_records(path: str, records, total: int, what: str) -> int:
    """Write JSONL records from an iterator, with a progress line every 10 s (`cli.Progress.show`)."""
    rule, count = cli.Progress(total, "records"), 0
    with open(path, "w", encoding="utf-8") as out:
        for record in records:
            out.write(json.dumps(record) + "\n")
            count += 1
            if count % 500 == 0 or count == total:
                rule.show(count, what)
    return count


def export(argv_flags=FLAGS) -> dict:
    cli.require_flags("format", "out", values=argv_flags)
    if argv_flags.shots < 0:
        raise UserError(f"--shots {argv_flags.shots}: must be >= 0")
    paths.check_output_file(argv_flags.out, "--out")
    load.check_limit(argv_flags.limit)
    every = load.items_from_flags(argv_flags.corpus, argv_flags.split, argv_flags.items,
                                  argv_flags.store, argv_flags.dataset)
    items = load.first_items(every, argv_flags.limit)
    shots = [[] for _ in items]
    if argv_flags.shots:
        pool_path = argv_flags.pool or argv_flags.corpus or argv_flags.store
        if not pool_path:
            raise UserError("--shots with --items needs --pool (a corpus, store or items file of examples)")
        pool = load.load_split(pool_path, "train", argv_flags.dataset if not argv_flags.pool else None)
        if not pool:
            raise UserError(f"--pool {pool_path}: its train split holds no items")
        shots = retrieval.few_shot(items, pool, argv_flags.shots)
    fmt = argv_flags.format
    count = write_records(argv_flags.out, (llm_formats.render(item, fmt, s) for item, s in zip(items, shots)),
                          len(items), f"export {fmt}")
    summary = {"items": count, "format": fmt, "shots": argv_flags.shots, "out": argv_flags.out}
    if argv_flags.limit:
        summary["limit"] = {"first": count, "of": len(every)}
    print(json.dumps(summary))
    return summary


def score(argv_flags=FLAGS) -> dict:
    cli.require_flags("format", "responses", values=argv_flags)
    paths.check_output_file(argv_flags.out, "--out")
    load.check_limit(argv_flags.limit)
    every = load.items_from_flags(argv_flags.corpus, argv_flags.split, argv_flags.items,
                                  argv_flags.store, argv_flags.dataset)
    items = load.first_items(every, argv_flags.limit)
    responses, ignored = load.without_later_items(read_responses(argv_flags.responses, every), every, items)
    report, predictions = score_responses(items, responses)
    if argv_flags.limit:
        evaluator.mark_partial(report, len(items), len(every), ignored, "responses")
        print(f"score: the first {len(items)} of {len(every)} items (--limit {argv_flags.limit}); "
              f"{ignored} response(s) of later items ignored", file=sys.stderr, flush=True)
    missing = report["parse"]["items_without_response"]
    if missing:
        print(f"warning: {missing} of the {len(items)} items have no response in {argv_flags.responses}; they are "
              "scored as empty predictions (--limit N scores the first N items alone)", file=sys.stderr, flush=True)
    if argv_flags.out:
        jsonl.write_predictions(argv_flags.out, predictions)
    parse = report["parse"]
    print(evaluator.format_report(report, "text"))
    print(f"parse ({argv_flags.format} responses): " + ", ".join(f"{k} {v}" for k, v in parse.items()))
    print(json.dumps(report))
    return report


def finetune_items(config):
    """The training items of a config (`sources.load_config_sources`: what training reads, the same caches)."""
    data = sources.load_config_sources(config)
    return [it for splits in data.values() for it in splits["train"]]


def curriculum_order(items, config) -> list[tuple[int, int]]:
    """(stage, item index) in the config's curriculum order; each stage in a seeded shuffle."""
    stages = curriculum.schedule_from_config(items, config, int(config.seed))
    if stages is None:
        raise UserError("--curriculum: the config has no curriculum (config.curriculum.metric is empty)")
    order = []
    for number, stage in enumerate(stages, 1):
        shuffled = np.random.default_rng([int(config.seed), number]).permutation(stage)
        order.extend((number, int(i)) for i in shuffled)
    return order


def finetune_set(argv_flags=FLAGS) -> dict:
    config = argv_flags.config
    if config is None:
        raise UserError("--config is required: a config file (--config=configs/cl.py) or an installed config's name (--config=cl)")
    cli.require_flags("format", "out", values=argv_flags)
    unknown = [f for f in argv_flags.length_formats if f not in llm_formats.FORMATS]
    if unknown:
        raise UserError(f"--length_formats: unknown format(s) {', '.join(unknown)} "
                        f"(expected {', '.join(llm_formats.FORMATS)})")
    paths.check_output_file(argv_flags.out, "--out")
    if argv_flags.curriculum and not (config.get("curriculum", None) and config.curriculum.get("metric", "")):
        raise UserError("--curriculum: the config has no curriculum (config.curriculum.metric is empty)")
    items = finetune_items(config)
    if not items:
        raise UserError("no training items: check config.data.sources (every source is empty or unset)")
    fmt = argv_flags.format
    if argv_flags.curriculum:
        order = curriculum_order(items, config)
        records = ({**llm_formats.render(items[i], fmt), "stage": stage} for stage, i in order)
        total = len(order)
    else:
        records = (llm_formats.render(item, fmt) for item in items)
        total = len(items)
    count = write_records(argv_flags.out, records, total, f"finetune-set {fmt}")
    by_dataset: dict[str, int] = {}
    for item in items:
        by_dataset[item.dataset] = by_dataset.get(item.dataset, 0) + 1
    summary = {"items": len(items), "lines": count, "by_dataset": by_dataset, "format": fmt,
               "out": argv_flags.out}
    if argv_flags.length_formats:
        began = time.time()
        tokenizer = lengths.wordpiece()
        report = {}
        for name in argv_flags.length_formats:
            prompts = [llm_formats.render_prompt(item, name) for item in items]
            report[name] = lengths.summarize(lengths.token_counts(prompts, tokenizer, f"lengths {name}"))
            print(f"lengths {name}: {len(prompts)} prompts ({time.time() - began:.0f} s)", file=sys.stderr, flush=True)
        print(lengths.table(report))
        summary["prompt_tokens"] = {"tokenizer": lengths.TOKENIZER, **report}
    print(json.dumps(summary))
    return summary


def main(argv: Sequence[str]) -> int:
    logging.set_verbosity(logging.WARNING)
    if len(argv) != 2 or argv[1] not in COMMANDS:
        extra = f" (got {' '.join(argv[1:])})" if len(argv) > 1 else ""
        raise UserError(f"give one command: {', '.join(COMMANDS)}{extra}; {USAGE}")
    cli.apply_compilation_cache_flag()
    {"export": export, "score": score, "finetune-set": finetune_set}[argv[1]]()
    return 0


if __name__ == "__main__":
    cli.run(main, define_flags)
