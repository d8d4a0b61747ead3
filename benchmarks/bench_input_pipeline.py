"""Input pipeline throughput: items/s into ready device batches, against a naive per-item
baseline and against the training step's consumption rate, all measured in this run.

From the repository root (this tree's bapjax):

    python -m benchmarks.bench_input_pipeline [--store STORE | --mdc ../shared/mdc] \
        [--batch_size 32] [--seconds 5] [--train_steps 10] [--config configs/cpu.py]

Rates:
* baseline: ``featurize(item)`` per item then ``np.stack`` (no table, no vectorization);
* table: one-time ``featurize_items`` (items/s), then ``DataIterator`` host batches and
  those batches put on the device (``jax.device_put``, items/s, ``block_until_ready``);
* training step (if ``bapjax.train`` is importable): the jit-compiled step of the config's model
  on the same batches (items/s after compilation). The report gives pipeline / step.
The last line is JSON.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np

from bapjax import cli, paths
from bapjax.data import input_pipeline
from bapjax.text.vocab import Vocabulary


def _rate(fn, seconds: float, per_call: int) -> tuple[float, int]:
    """items/s of repeated fn() calls for about ``seconds``."""
    calls = 0
    start = time.perf_counter()
    while True:
        fn()
        calls += 1
        elapsed = time.perf_counter() - start
        if elapsed >= seconds:
            return calls * per_call / elapsed, calls


def load_items(args):
    if args.store:
        from bapjax.corpus.store import ItemStore

        return ItemStore(args.store).split("train").items(), f"store {args.store} train"
    from bapjax.corpus import mdc

    return mdc.load_corpus(args.mdc).split("train"), f"MDC train ({args.mdc})"


def train_step_rate(args, vocab, iterator, batch_size):
    """items/s consumed by the compiled training step of the config's model (None if unavailable)."""
    try:
        import jax

        from bapjax import sharding
        from bapjax.models import builder
        from bapjax.training import loop
        from bapjax.training import optimizer as optim
    except ImportError as err:
        return None, f"bapjax.train not importable ({err})"
    config = cli.load_config(args.config)
    mesh = sharding.data_mesh()
    model = builder.build_model(config.model, vocab.size)
    optimizer = optim.make_optimizer(config.train, total_steps=1000)
    trainer = loop.Trainer(model, optimizer, mesh, int(config.train.get("pack_multiple", 32)))
    state = sharding.replicate(loop.create_state(model, optimizer, jax.random.PRNGKey(0), None), mesh)
    batches = [next(iterator) for _ in range(args.train_steps + 2)]
    # Compile for every packed size these batches need, then time.
    for batch in batches[:2]:
        state, metrics = trainer.train(state, batch)
    jax.block_until_ready(metrics)
    compile_sizes = {trainer.num_packed(b) for b in batches}
    for batch in batches[2:]:
        if trainer.num_packed(batch) in compile_sizes:
            state, metrics = trainer.train(state, batch)
            compile_sizes.discard(trainer.num_packed(batch))
    jax.block_until_ready(metrics)
    start = time.perf_counter()
    for batch in batches[2:]:
        state, metrics = trainer.train(state, batch)
    jax.block_until_ready(metrics)
    elapsed = time.perf_counter() - start
    return args.train_steps * batch_size / elapsed, f"{args.config} model, {args.train_steps} steps"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--store", default="")
    parser.add_argument("--mdc", default=paths.MDC, help="the MDC (default: found by bapjax.paths.mdc_path)")
    parser.add_argument("--batch_size", type=int, default=32)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--train_steps", type=int, default=10)
    parser.add_argument("--config", default=str(Path(__file__).resolve().parents[1] / "configs" / "cpu.py"))
    parser.add_argument("--no_train", action="store_true")
    args = parser.parse_args()

    import jax

    items, source = load_items(args)
    vocab = Vocabulary.build(items)
    config = input_pipeline.FeatureConfig()
    B = args.batch_size
    print(f"{len(items)} items from {source}; batch {B}; devices {jax.devices()}")

    rng = np.random.default_rng(0)

    def baseline_batch():
        picked = rng.choice(len(items), B)
        feats = [input_pipeline.featurize(items[i], vocab, config) for i in picked]
        return {k: np.stack([f[k] for f in feats]) for k in feats[0]}

    baseline, _ = _rate(baseline_batch, args.seconds, B)
    print(f"baseline (featurize per item + stack): {baseline:,.0f} items/s")

    start = time.perf_counter()
    table = input_pipeline.featurize_items(items, vocab, config)
    featurize_rate = len(items) / (time.perf_counter() - start)
    print(f"featurize_items (one time, cacheable): {featurize_rate:,.0f} items/s")

    it = input_pipeline.DataIterator(table, None, config, B, seed=0)
    host, _ = _rate(lambda: next(it), args.seconds, B)
    print(f"DataIterator host batches: {host:,.0f} items/s ({host / baseline:.1f}x baseline)")

    device_iter = input_pipeline.DataIterator(table, None, config, B, seed=1)
    device, _ = _rate(lambda: jax.block_until_ready(jax.device_put(next(device_iter))), args.seconds, B)
    print(f"ready device batches (jax.device_put): {device:,.0f} items/s ({device / baseline:.1f}x baseline)")

    step_rate, step_note = (None, "skipped (--no_train)")
    if not args.no_train:
        step_rate, step_note = train_step_rate(args, vocab, input_pipeline.DataIterator(table, None, config, B, seed=2), B)
    if step_rate:
        print(f"training step ({step_note}): {step_rate:,.1f} items/s; pipeline / step = {device / step_rate:,.0f}x")
    else:
        print(f"training step: {step_note}; comparison pending")
    print(json.dumps({
        "items": len(items), "batch_size": B, "baseline_items_per_s": round(baseline, 1),
        "featurize_items_per_s": round(featurize_rate, 1), "host_batches_items_per_s": round(host, 1),
        "device_batches_items_per_s": round(device, 1),
        "train_step_items_per_s": round(step_rate, 2) if step_rate else None,
        "pipeline_over_step": round(device / step_rate, 1) if step_rate else None,
        "pipeline_over_baseline": round(device / baseline, 1),
    }))


if __name__ == "__main__":
    main()
