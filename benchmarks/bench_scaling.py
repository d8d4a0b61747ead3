"""Does data parallelism divide the work? Per-device FLOPs of the compiled train and decode steps
on 1, 2, 4 and 8 devices, from XLA's cost analysis of each compiled (per-device) program.

From the repository root (this tree's bapjax):

    python -m benchmarks.bench_scaling [--config cpu] [--config.<field>=value ...] [--batch_size 32] [--decode_items 256]
    python -m benchmarks.bench_scaling --config configs/cpu_experiment.py:mc,0,once

`--config` is a config name or file (`path.py:arg` passes arg), `--config.<field>=value` overrides
it as training does (`bapjax.cli.apply_overrides`; a bad one is one line `error: ...`, exit 2).

Runs on forced host CPU devices (`--xla_force_host_platform_device_count=8`, set here unless
XLA_FLAGS already asks for devices) or on real accelerators when there are 8. The train step takes
one global batch of real MDC training items (the same rows for every device count); decoding
takes the first `--decode_items` MDC test items with `--slots` slots in all. XLA counts a loop
body once, so the decode figure is one decoding step per device (plus one step of the text
encoder's scan), and the model is compiled without chunks (`BuilderModel.unchunked`: world.encode_chunk
and step_chunk 0): the chunked encoding computes the same function in a loop whose body XLA would
count only once.
The last line is JSON: {"devices", "train_flops_per_device", "decode_flops_per_device", ...}.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

if "xla_force_host_platform_device_count" not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=8").strip()

import jax
import numpy as np

REPO = Path(__file__).resolve().parents[1]

import configs
from bapjax import paths, sharding
from bapjax.corpus import mdc
from bapjax.data import input_pipeline
from bapjax.decoding import decode
from bapjax.decoding.settings import DecodeSettings
from bapjax.errors import UserError
from bapjax.models import builder
from bapjax.text.vocab import Vocabulary
from bapjax.training import loop
from bapjax.training import optimizer as optim


def flops(compiled) -> float:
    analysis = compiled.cost_analysis()
    if isinstance(analysis, (list, tuple)):  # older JAX: one dict per program
        analysis = analysis[0]
    return float(analysis["flops"])


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--config", default="cpu", help="a config name (configs/<name>.py) or file path")
    parser.add_argument("--corpus", default=paths.MDC, help="the MDC (default: found by bapjax.paths.mdc_path)")
    parser.add_argument("--batch_size", type=int, default=32, help="global training batch")
    parser.add_argument("--decode_items", type=int, default=256)
    parser.add_argument("--slots", type=int, default=64, help="decoding slots over all devices")
    parser.add_argument("--devices", default="1,2,4,8")
    args, extra = parser.parse_known_args()
    bad = [t for t in extra if not t.startswith("--config.")]
    if bad:
        parser.error(f"unrecognized arguments: {' '.join(bad)}")

    counts = [int(n) for n in args.devices.split(",")]
    if jax.device_count() < max(counts):
        raise SystemExit(f"--devices needs {max(counts)} devices, found {jax.device_count()}")
    try:
        config = configs.load(args.config, extra)
    except UserError as err:
        print(f"error: {err}", file=sys.stderr)
        sys.exit(2)
    corpus = mdc.load_corpus(args.corpus)
    train_items = list(corpus.split("train"))
    vocab = Vocabulary.build(train_items)
    feature_config = input_pipeline.FeatureConfig.from_config(config)
    features = input_pipeline.featurize_items(train_items[:512], vocab, feature_config)
    batch = next(input_pipeline.DataIterator(features, None, feature_config, args.batch_size, seed=0))
    test_items = list(corpus.split("test"))[:args.decode_items]
    test_table = input_pipeline.featurize_items(test_items, vocab, feature_config)
    model = builder.build_model(config.model, vocab.size).unchunked()  # see the module docstring
    optimizer = optim.make_optimizer(config.train, total_steps=1000)
    ema = {"ema_decay": float(config.train.ema_decay)} if config.train.get("ema_decay") else {}  # the step as the config trains it
    state = loop.create_state(model, optimizer, jax.random.PRNGKey(0), None, **ema)
    print(f"{jax.device_count()} {jax.devices()[0].platform} devices; model world "
          f"{config.model.world.features}x{config.model.world.layers} ({config.model.name} "
          f"world encoding), batch {args.batch_size} "
          f"({int(batch['action_mask'].sum())} target steps), decode {len(test_items)} items / {args.slots} slots",
          flush=True)

    out = {"devices": counts, "train_flops_per_device": [], "decode_flops_per_device": [],
           "train_pack_per_device": []}
    for n in counts:
        mesh = sharding.data_mesh(jax.devices()[:n])
        trainer = loop.Trainer(model, optimizer, mesh, int(config.train.get("pack_multiple", 32)), **ema)
        replicated = sharding.replicate(state, mesh)
        out["train_pack_per_device"].append(trainer.prepare(batch)[1])
        out["train_flops_per_device"].append(flops(trainer.compile_train(replicated, batch)))
        settings = DecodeSettings(int(config.eval.max_actions), 0, args.slots)
        decode_fn = settings.decode_fn(model, mesh)
        per_device = -(-len(test_items) // n)
        rows = np.full(per_device * n, test_table.padding_row)
        rows[decode.call_layout(len(test_items), n, per_device)] = np.arange(len(test_items))
        expanded = input_pipeline.expand_batch(test_table, rows, feature_config)
        dbatch = sharding.host_batch_to_global({k: expanded[k] for k in decode.decode_keys(model)}, mesh)
        out["decode_flops_per_device"].append(flops(decode_fn.lower(replicated["params"], dbatch).compile()))
        print(f"{n} devices: train {out['train_flops_per_device'][-1] / 1e9:8.2f} GFLOP/device "
              f"(pack {out['train_pack_per_device'][-1]}/device, "
              f"{out['train_flops_per_device'][-1] / out['train_flops_per_device'][0]:.3f} of 1 device), "
              f"decode {out['decode_flops_per_device'][-1] / 1e9:8.2f} GFLOP/device "
              f"({out['decode_flops_per_device'][-1] / out['decode_flops_per_device'][0]:.3f})", flush=True)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
