"""Training and decoding throughput on a CPU split into several XLA devices (`config.cpu_devices`).

From the repository root (this tree's bapjax):

    python -m benchmarks.bench_cpu_devices [--config configs/cpu_experiment.py:agg] [--devices 1,4]
                                           [--rounds 3] [--out results/bench_cpu_devices_agg.json]

Each count is measured in its own process, as a run sees it (`jax_num_cpu_devices` = the count, a
data mesh over all of them: `sharding.data_mesh`): training on the same batches from the same
parameters (`bench_train.time_training`: after an untimed pass that compiles every pack size), then the MDC test items' draws
(`decode.predict_draws`, the vote's decoding, exactly `--fixed_length` actions, random-init
parameters). The counts alternate within each of `--rounds` rounds, so the ratios against one
device are paired against the host's drift (a 2-core host's speed moves by 10-30% within minutes).
The same function on every count: the parameters' largest difference from the 1-device ones after
training is reported (float summation order only), and the draws must be identical (each
item's key depends on its id and draw number, not on its device).

Why several devices on one host: XLA runs one device's program op by op, and this model's train
step is hundreds of small ops (a 2-core host reaches ~0.1 of its matmul rate), so the cores idle
between them; devices run their shards' programs concurrently.

The last line is JSON: per count, the items/s of each round and their median, and the ratio to
one device per round (train and decode).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def parse_devices(text: str) -> list[int]:
    try:
        counts = sorted({int(t) for t in text.split(",") if t.strip()})
    except ValueError:
        counts = []
    if not counts or counts[0] < 1:
        raise SystemExit(f"error: --devices: expected counts >= 1 separated by commas, got {text!r}")
    return counts if counts[0] == 1 else [1, *counts]  # one device is the baseline


def child(args) -> dict:
    """One count's figures, in this process: the CPU split into args.child devices."""
    from bapjax import sharding

    sharding.set_cpu_devices(args.child)  # before JAX runs anything, as `python -m bapjax.train` does
    import jax
    import numpy as np

    from bapjax.data import input_pipeline
    from bapjax.decoding import decode
    from bapjax.decoding.settings import DecodeSettings
    from bapjax.models import builder
    from benchmarks.bench_train import load_config, time_training, training_setup

    config = load_config(args.config, REPO, [])
    corpus, vocab, feature_config, features, model, optimizer = training_setup(config, args.corpus)
    train_rate, _, _, state = time_training(model, optimizer, features, feature_config, 32, args.train_batches,
                                            devices=args.child, ema_decay=float(config.train.get("ema_decay", 0.0)))
    params_after = jax.device_get(state["params"])
    mesh = sharding.data_mesh()

    test_items = list(corpus.split("test"))[:args.decode_items]
    table = input_pipeline.featurize_items(test_items, vocab, feature_config)
    settings = DecodeSettings(args.fixed_length, args.fixed_length, int(config.eval.batch_size),
                                     temperature=float(config.eval.vote_temperature))
    params = sharding.replicate(builder.init_params(model, jax.random.PRNGKey(0)), mesh)
    decode_fn = settings.decode_fn(model, mesh)

    def draws():
        return decode.predict_draws(model, params, test_items, vocab, feature_config, settings,
                                    list(range(args.draws)), decode_fn=decode_fn, mesh=mesh, features=table)

    draws()  # untimed: compiles
    start = time.perf_counter()
    predicted = draws()
    decode_rate = len(test_items) / (time.perf_counter() - start)
    out = Path(args.child_out)
    np.savez(out / "params.npz", *[np.asarray(leaf) for leaf in jax.tree_util.tree_leaves(params_after)])
    (out / "draws.json").write_text(json.dumps([{k: [str(a) for a in v] for k, v in p.items()} for p in predicted]))
    return {"devices": jax.device_count(), "train_items_per_s": train_rate, "decode_items_per_s": decode_rate}


def measure(args, counts: list[int]) -> dict:
    """Each count in its own process (`--child`), alternately for --rounds rounds."""
    import numpy as np

    passed = ["--config", args.config, "--corpus", args.corpus, "--train_batches", str(args.train_batches),
              "--decode_items", str(args.decode_items), "--draws", str(args.draws),
              "--fixed_length", str(args.fixed_length)]
    rates = {"train": {c: [] for c in counts}, "decode": {c: [] for c in counts}}
    checks = {}
    with tempfile.TemporaryDirectory(prefix="bapjax-devices-") as tmp:
        for round_ in range(args.rounds):
            for count in counts:
                out = Path(tmp) / f"{count}-{round_}"
                out.mkdir()
                done = subprocess.run([sys.executable, "-m", "benchmarks.bench_cpu_devices", *passed, "--child",
                                       str(count), "--child_out", str(out)], capture_output=True, text=True,
                                      cwd=str(REPO))
                if done.returncode:
                    raise SystemExit(f"error: the {count}-device process failed:\n{done.stderr[-3000:]}")
                figures = json.loads(done.stdout.strip().splitlines()[-1])
                if figures["devices"] != count:
                    raise SystemExit(f"error: asked for {count} CPU devices, JAX has {figures['devices']}")
                rates["train"][count].append(figures["train_items_per_s"])
                rates["decode"][count].append(figures["decode_items_per_s"])
                if round_ == 0:
                    mine = np.load(out / "params.npz")
                    ones = np.load(Path(tmp) / "1-0" / "params.npz")
                    checks[str(count)] = {
                        "max_param_diff_vs_1": float(max(np.max(np.abs(mine[k] - ones[k])) for k in ones.files)),
                        "draws_equal_to_1": (out / "draws.json").read_text()
                        == (Path(tmp) / "1-0" / "draws.json").read_text()}
                    print(f"{count} device(s): max |params - 1-device params| after {2 * args.train_batches + 2} steps "
                          f"{checks[str(count)]['max_param_diff_vs_1']:.2e}, draws "
                          f"{'identical' if checks[str(count)]['draws_equal_to_1'] else 'DIFFER'}", flush=True)
            print(f"round {round_ + 1}: train items/s " + ", ".join(f"{c}: {rates['train'][c][-1]:.1f}" for c in counts)
                  + "; decode items/s " + ", ".join(f"{c}: {rates['decode'][c][-1]:.1f}" for c in counts), flush=True)

    def summary(by_count: dict) -> dict:
        return {str(c): {"items_per_s": [round(r, 1) for r in by_count[c]],
                         "median_items_per_s": round(statistics.median(by_count[c]), 1),
                         "ratio_vs_1_per_round": [round(a / b, 3) for a, b in zip(by_count[c], by_count[1])],
                         "median_ratio_vs_1": round(statistics.median(a / b for a, b in zip(by_count[c], by_count[1])),
                                                    3)}
                for c in counts}

    return {"train": summary(rates["train"]), "decode": summary(rates["decode"]), "checks": checks}


def main() -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", default="configs/cpu_experiment.py:agg")
    parser.add_argument("--corpus", default="@mdc")
    parser.add_argument("--devices", default="1,4", help="device counts to compare (1 is always included)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--train_batches", type=int, default=12, help="batches of 32 timed per process")
    parser.add_argument("--decode_items", type=int, default=128, help="MDC test items decoded per process")
    parser.add_argument("--draws", type=int, default=8, help="draws per item (the vote's decoding)")
    parser.add_argument("--fixed_length", type=int, default=5, help="actions decoded per draw")
    parser.add_argument("--out", default="", help="also write the JSON here")
    parser.add_argument("--child", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--child_out", default="", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args)), flush=True)
        return {}
    counts = parse_devices(args.devices)
    if args.rounds < 1 or args.train_batches < 1 or args.decode_items < 1 or args.draws < 1 or args.fixed_length < 1:
        raise SystemExit("error: --rounds, --train_batches, --decode_items, --draws and --fixed_length must be >= 1")
    print(f"devices {counts}, {args.rounds} rounds, one process each: {args.train_batches} train batches of 32, "
          f"{args.decode_items} MDC test items x {args.draws} draws", flush=True)
    result = {"command": "python -m benchmarks.bench_cpu_devices " + " ".join(sys.argv[1:]), "config": args.config,
              **measure(args, counts)}
    for name in ("train", "decode"):
        print(f"{name}: median ratio to 1 device " + ", ".join(
            f"{c}: {result[name][str(c)]['median_ratio_vs_1']:.2f}x" for c in counts[1:]), flush=True)
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps(result), flush=True)
    return result


if __name__ == "__main__":
    main()
