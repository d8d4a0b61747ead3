"""Training and decoding throughput of the builder model on real MDC items.

    python benchmarks/bench_train.py [--config configs/cpu.py] [--steps 5] [--decode_items 256]
                                     [--checkpoint runs/cpu]

Training: items/s of the compiled train step (teacher forcing, AdamW) at batch sizes 1 (the
original implementation's setting) and 32, measured in the same run after compilation; the
ratio is the speedup of batching. Decoding: items/s of compiled greedy decoding (max 20
actions, re-encoding the world after each action) on the MDC test split, with the trained
parameters of --checkpoint when given (decoded lengths depend on when the model stops).
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
import time
from pathlib import Path

import jax
import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bapjax import decode, input_pipeline, sharding, train  # noqa: E402
from bapjax.corpus import mdc  # noqa: E402
from bapjax.models import builder  # noqa: E402
from bapjax.text.vocab import Vocabulary  # noqa: E402


def load_config(path):
    spec = importlib.util.spec_from_file_location("bench_cfg", REPO / path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.get_config()


def time_training(model, optimizer, features, feature_config, batch_size, steps, seed=0):
    mesh = sharding.data_mesh(jax.devices()[:1])
    trainer = train.Trainer(model, optimizer, mesh)
    state = sharding.replicate(train.create_state(model, optimizer, jax.random.PRNGKey(seed), None), mesh)
    iterator = input_pipeline.DataIterator(features, None, feature_config, batch_size, seed=seed)
    batches = [next(iterator) for _ in range(steps + 2)]
    # one untimed pass compiles every pack size these batches need
    for b in batches:
        state, _ = trainer.train(state, b)
    jax.block_until_ready(state)
    start = time.perf_counter()
    for b in batches[:steps]:
        state, metrics = trainer.train(state, b)
    jax.block_until_ready(state)
    elapsed = time.perf_counter() - start
    targets = sum(int(b["action_mask"].sum()) for b in batches[:steps])
    return steps * batch_size / elapsed, targets / elapsed


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--config", default="configs/cpu.py")
    parser.add_argument("--corpus", default=str(REPO.parent / "shared" / "mdc"))
    parser.add_argument("--steps", type=int, default=5, help="timed steps per batch size")
    parser.add_argument("--steps_b1", type=int, default=32, help="timed steps at batch size 1")
    parser.add_argument("--decode_items", type=int, default=256, help="MDC test items to decode (0: all)")
    parser.add_argument("--decode_batch", type=int, default=64)
    parser.add_argument("--checkpoint", default="", help="a training workdir for decoding with trained params")
    args = parser.parse_args()

    config = load_config(args.config)
    corpus = mdc.load_corpus(args.corpus)
    train_items = list(corpus.split("train"))
    vocab = Vocabulary.build(train_items)
    feature_config = input_pipeline.FeatureConfig.from_config(config.features)
    features = input_pipeline.featurize_items(train_items[:2048], vocab, feature_config)
    model = builder.build_model(config.model, vocab.size)
    optimizer = train.make_optimizer(config.train)
    print(f"devices: {jax.devices()}  model: world {config.model.world_features}x{config.model.world_layers}, "
          f"rnn {config.model.text_hidden}, decoder {config.model.decoder}", flush=True)

    rates = {}
    for batch_size, steps in ((1, args.steps_b1), (32, args.steps)):
        items_s, steps_s = time_training(model, optimizer, features, feature_config, batch_size, steps)
        rates[batch_size] = items_s
        print(f"train batch {batch_size:>2}: {items_s:7.2f} items/s ({steps_s:7.1f} decoder steps/s)", flush=True)
    print(f"batch 32 vs batch 1: {rates[32] / rates[1]:.2f}x items/s", flush=True)

    test_items = list(corpus.split("test"))
    if args.decode_items:
        test_items = test_items[:args.decode_items]
    if args.checkpoint:
        from bapjax import predict

        model, params, run_config, vocab = predict.load_model(args.checkpoint)
        feature_config = input_pipeline.FeatureConfig.from_config(run_config.features)
    else:
        params = builder.init_params(model, jax.random.PRNGKey(0))
    decode_fn = decode.make_decode_fn(model, int(config.eval.max_actions))
    table = input_pipeline.featurize_items(test_items, vocab, feature_config)
    warm = test_items[:args.decode_batch]
    decode.predict_items(model, params, warm, vocab, feature_config, args.decode_batch, decode_fn=decode_fn,
                         features=input_pipeline.featurize_items(warm, vocab, feature_config))
    start = time.perf_counter()
    predictions = decode.predict_items(model, params, test_items, vocab, feature_config, args.decode_batch,
                                       decode_fn=decode_fn, features=table)
    elapsed = time.perf_counter() - start
    lengths = [len(a) for a in predictions.values()]
    print(f"decode MDC test ({len(test_items)} items, batch {args.decode_batch}, "
          f"{'trained' if args.checkpoint else 'random-init'} params): {len(test_items) / elapsed:.2f} items/s, "
          f"mean predicted length {np.mean(lengths):.2f}", flush=True)


if __name__ == "__main__":
    main()
