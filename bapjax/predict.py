"""Greedy predictions of a trained model, in the evaluator's JSONL format.

    python -m bapjax.predict --checkpoint runs/cpu --corpus ../shared/mdc --split test --out preds.jsonl
    python -m bapjax.predict --checkpoint runs/cl --store data/store --split test --dataset bs --out bs.jsonl
    python -m bapjax.predict --checkpoint runs/cpu --items items.jsonl --out preds.jsonl --evaluate

`--checkpoint` is a training workdir (it holds config.json, vocab.json and checkpoints/best|latest)
or a checkpoints/best or /latest directory inside one. Then score with
`python -m bapjax.evaluate --predictions preds.jsonl --corpus ... --split ...` (or `--evaluate`).
"""

from __future__ import annotations

import json
import sys
import time

import ml_collections
from absl import app, flags

FLAGS = flags.FLAGS


def _define_flags() -> None:
    """CLI flags; names shared with other bapjax CLIs (--corpus, --split, --out) are defined once."""
    from bapjax.evaluate import define_flag_once

    define_flag_once("string", "checkpoint", None, "Training workdir (or its checkpoints/best or /latest).")
    define_flag_once("string", "corpus", None, "Corpus directory or archive (MDC layout).")
    define_flag_once("string", "store", None, "An item store directory (bapjax.corpus.store).")
    define_flag_once("string", "items", None, "A JSONL file of items (bapjax.evaluate.write_items format).")
    define_flag_once("string", "split", None, "Split to predict with --corpus or --store (default test).")
    define_flag_once("string", "dataset", None, "With --store: only items of this data set (mc, bs, ss, r).")
    define_flag_once("string", "out", None, "Output predictions JSONL.")
    define_flag_once("integer", "batch_size", 64, "Items decoded per compiled batch.")
    define_flag_once("integer", "max_actions", None, "Greedy decoding length (default: the run's config.eval.max_actions).")
    define_flag_once("integer", "min_actions", None, "STOP is masked before this many actions (default: the run's config.eval.min_actions, else 0).")
    define_flag_once("string", "stop_rule", None, "argmax or mass (default: the run's decode.json, tuned on val; else config.eval.stop_rule).")
    define_flag_once("float", "stop_threshold", None, "p(STOP) threshold of the mass rule (default: the run's decode.json, else config.eval.stop_threshold, else 0.5).")
    define_flag_once("integer", "limit", 0, "Predict only the first N items (0: all).")
    define_flag_once("bool", "evaluate", False, "Also print the v2 tables and the report JSON.")


def find_run_dir(checkpoint: str):
    """The workdir (an `epath.Path`, local or e.g. gs://) holding config.json and vocab.json."""
    from bapjax.train import workdir_path

    path = workdir_path(checkpoint)
    for candidate in (path, *list(path.parents)[:3]):
        if (candidate / "config.json").exists() and (candidate / "vocab.json").exists():
            return candidate
    raise FileNotFoundError(f"{checkpoint}: no config.json + vocab.json here or in its parents; "
                            "pass the training workdir")


def load_model(checkpoint: str):
    """(model, params, run config, vocabulary) of a training run."""
    from bapjax import train
    from bapjax.models import builder
    from bapjax.text.vocab import Vocabulary

    run_dir = find_run_dir(checkpoint)
    config = ml_collections.ConfigDict(json.loads((run_dir / "config.json").read_text()))
    vocab = Vocabulary.load(run_dir / "vocab.json")
    model = builder.build_model(config.model, vocab.size, config.features)
    params, step = train.load_params(train.workdir_path(checkpoint), model)
    print(f"loaded {run_dir} step {step}", file=sys.stderr)
    return model, params, config, vocab


def decode_settings(checkpoint: str, config) -> tuple[str, float]:
    """The run's STOP rule and threshold: its decode.json (tuned on val at the end of training)
    when present, else config.eval."""
    from bapjax.train import DECODE_SETTINGS

    path = find_run_dir(checkpoint) / DECODE_SETTINGS
    if path.exists():
        settings = json.loads(path.read_text())
        return settings["stop_rule"], float(settings["stop_threshold"])
    return config.eval.get("stop_rule", "argmax"), float(config.eval.get("stop_threshold", 0.5))


def load_items(corpus: str | None, store: str | None, items_file: str | None, split: str, dataset: str | None):
    given = [x for x in (corpus, store, items_file) if x]
    if len(given) != 1:
        raise app.UsageError("give exactly one of --corpus, --store, --items")
    if items_file:
        from bapjax import evaluate

        return evaluate.read_items(items_file)
    if store:
        from bapjax.corpus.store import ItemStore

        return ItemStore(store).split(split).items(dataset)
    from bapjax.corpus import mdc

    return list(mdc.load_corpus(corpus).split(split))


def main(argv):
    del argv
    if not FLAGS.checkpoint or not FLAGS.out:
        raise app.UsageError("--checkpoint and --out are required")
    from bapjax import decode, evaluate, input_pipeline

    model, params, config, vocab = load_model(FLAGS.checkpoint)
    items = load_items(FLAGS.corpus, FLAGS.store, FLAGS.items, FLAGS.split or "test", FLAGS.dataset)
    if FLAGS.limit:
        items = items[:FLAGS.limit]
    feature_config = input_pipeline.FeatureConfig.from_config(config.features)
    max_actions = FLAGS.max_actions or int(config.eval.max_actions)
    min_actions = FLAGS.min_actions if FLAGS.min_actions is not None else int(config.eval.get("min_actions", 0))
    start = time.time()
    stop_rule, stop_threshold = decode_settings(FLAGS.checkpoint, config)
    stop_rule = FLAGS.stop_rule or stop_rule
    stop_threshold = FLAGS.stop_threshold if FLAGS.stop_threshold is not None else stop_threshold
    if stop_rule not in decode.STOP_RULES:
        raise app.UsageError(f"--stop_rule must be one of {', '.join(decode.STOP_RULES)}, got {stop_rule!r}")
    if not 0.0 < stop_threshold <= 1.0:
        raise app.UsageError(f"--stop_threshold must be in (0, 1], got {stop_threshold}")
    predictions = decode.predict_items(model, params, items, vocab, feature_config, FLAGS.batch_size,
                                       max_actions, progress=True, min_actions=min_actions, stop_rule=stop_rule,
                                       stop_threshold=stop_threshold)
    elapsed = time.time() - start
    evaluate.write_predictions(FLAGS.out, predictions)
    print(f"wrote {len(predictions)} predictions to {FLAGS.out} ({len(items) / elapsed:.1f} items/s)",
          file=sys.stderr)
    if FLAGS.evaluate:
        report = evaluate.evaluate_predictions(items, predictions)
        print(evaluate.format_report(report, fmt="text"))
        print(json.dumps(report))


if __name__ == "__main__":
    _define_flags()
    app.run(main)
