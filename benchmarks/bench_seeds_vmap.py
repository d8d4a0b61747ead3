"""Training K seeds in one program: K train states stacked and one `vmap`ped train step, against one seed's step.

    python benchmarks/bench_seeds_vmap.py [--config configs/cpu_experiment.py:agg] [--seeds 2[,4,...]] [--steps 30]
        [--corpus @mdc] [--out results/bench_seeds_vmap.json] [--config.<field>=value ...]

What an option to train several seeds at once would buy: `bapjax.training.loop.train_step` (AdamW, the
weights' moving average, the run's model) on real MDC training items, batch 32 per seed, each seed with
its own initialization and its own batches (`DataIterator` seed k); the K seeds' batches are stacked and
packed to the largest of their pack sizes (under the config's `train.pack_rounding`, "auto" resolved as
training resolves it). Both are compiled on a first untimed round over the same batches, then timed once
each, one after the other. Reported: training items per second of one seed
alone and of the K seeds together (K x items per step), and their ratio: above 1, one program of K
seeds trains more items per second than one seed alone; on an accelerator a batch of 32 leaves the chip
idle, on a CPU it does not.

`--seeds 2,4,8` measures each K in one process (one seed's rate timed once): "seeds",
"vmapped_items_per_s" and "ratio" are then lists, one entry per K. Config overrides work as in
training (`--config.train.pack_rounding=power_of_two`).

The last line is JSON: {"config", "seeds", "steps", "single_items_per_s", "vmapped_items_per_s", "ratio"};
with `--out` it is also written there with the command.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", default="configs/cpu_experiment.py:agg")
    parser.add_argument("--seeds", default="2", help="K, or several K separated by commas")
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--corpus", default="@mdc")
    parser.add_argument("--out", default="")
    args, extra = parser.parse_known_args(argv)
    try:
        counts = [int(k) for k in args.seeds.split(",")]
    except ValueError:
        parser.error(f"--seeds {args.seeds!r}: give K or K1,K2,... as integers")
    if min(counts) < 2 or args.steps < 1:
        parser.error("--seeds must be >= 2 and --steps >= 1")
    sys.path.insert(0, str(REPO))  # this tree's bapjax and benchmarks

    import jax
    import jax.numpy as jnp
    import numpy as np

    from bapjax.corpus import mdc
    from bapjax.data import input_pipeline
    from bapjax.models import builder
    from bapjax.text.vocab import Vocabulary
    from bapjax.training import loop, sharding
    from bapjax.training import optimizer as optim
    from benchmarks.bench_train import load_config, split_overrides

    overrides = split_overrides(extra)
    if overrides["compare_overrides"]:
        parser.error("--compare_config.<field> overrides are bench_train's; use --config.<field>=value")
    config = load_config(args.config, overrides=overrides["overrides"])
    train_items = list(mdc.load_corpus(args.corpus).split("train"))
    vocab = Vocabulary.build(train_items)
    feature_config = input_pipeline.FeatureConfig.from_config(config)
    features = input_pipeline.featurize_items(train_items[:2048], vocab, feature_config)
    model = builder.build_model(config.model, vocab.size)
    config.train.schedule = "constant"  # a step's cost does not depend on the schedule
    optimizer = optim.make_optimizer(config.train)
    ema = float(config.train.ema_decay)
    mesh = sharding.data_mesh(jax.devices()[:1])

    def step(state, batch, num_packed):
        return loop.train_step(model, optimizer, mesh, ema, state, batch, num_packed)

    single = jax.jit(step, static_argnums=2, donate_argnums=0)
    vmapped = jax.jit(jax.vmap(step, in_axes=(0, 0, None)), static_argnums=2, donate_argnums=0)
    batches = [[next(it) for _ in range(args.steps)] for it in
               (input_pipeline.DataIterator(features, None, feature_config, 32, seed=k) for k in range(max(counts)))]
    keys = list(batches[0][0])

    rounding = builder.resolve_pack_rounding(str(config.train.pack_rounding), jax.default_backend())

    def packed(batch):
        return builder.packed_size(batch["action_mask"], batch["weight"], int(config.train.pack_multiple),
                                   rounding=rounding)

    def stacked(i, k_seeds):
        rows = [batches[k][i] for k in range(k_seeds)]
        return {key: np.stack([np.asarray(b[key]) for b in rows]) for key in keys}, max(packed(b) for b in rows)

    def run_single(state):
        for batch in batches[0]:
            state, _ = single(state, batch, packed(batch))
        return jax.block_until_ready(state)

    def run_vmapped(state, k_seeds):
        for i in range(args.steps):
            batch, size = stacked(i, k_seeds)
            state, _ = vmapped(state, batch, size)
        return jax.block_until_ready(state)

    def timed(run, state, *extra):
        state = run(state, *extra)  # compiles every pack size
        start = time.perf_counter()
        run(state, *extra)
        return time.perf_counter() - start

    single_s = timed(run_single, loop.create_state(model, optimizer, jax.random.PRNGKey(0), None, ema))
    single_rate = round(args.steps * 32 / single_s, 1)
    rates, ratios = [], []
    for k_seeds in counts:
        several = jax.tree_util.tree_map(lambda *x: jnp.stack(x), *[
            loop.create_state(model, optimizer, jax.random.PRNGKey(k), None, ema) for k in range(k_seeds)])
        rate = round(k_seeds * args.steps * 32 / timed(run_vmapped, several, k_seeds), 1)
        rates.append(rate)
        ratios.append(round(rate / single_rate, 3))
        print(f"one seed {single_rate} items/s; {k_seeds} seeds in one program {rate} items/s: "
              f"{ratios[-1]}x", flush=True)
    several_k = len(counts) > 1
    result = {"config": " ".join([args.config, *overrides["overrides"]]),
              "seeds": counts if several_k else counts[0], "steps": args.steps,
              "single_items_per_s": single_rate,
              "vmapped_items_per_s": rates if several_k else rates[0],
              "ratio": ratios if several_k else ratios[0]}
    if args.out:
        command = "python benchmarks/bench_seeds_vmap.py " + " ".join(sys.argv[1:] if argv is None else argv)
        Path(args.out).write_text(json.dumps(dict(result, command=command), indent=1) + "\n")
    print(json.dumps(result))
    return result


if __name__ == "__main__":
    main()
