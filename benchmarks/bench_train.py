"""Training and decoding throughput of the builder model on real MDC items.

From the repository root (this tree's bapjax):

    python -m benchmarks.bench_train [--config configs/cpu.py] [--steps 5] [--decode_items 256]
                                     [--fixed_length N] [--checkpoint runs/cpu]
    python -m benchmarks.bench_train --compare_to 42333b0 --fixed_length 5 [--rounds 2]
    python -m benchmarks.bench_train --config configs/cpu_experiment.py --compare_config configs/bert.py --rounds 2
    python -m benchmarks.bench_train --config configs/cpu_experiment.py:mc,0,film \
        --compare_config.model.name=once --rounds 2
    python -m benchmarks.bench_train --config configs/cpu_experiment.py:mc \
        --compare_to 498834b --fixed_length 5 --decode_items 0 --rounds 2   # 498834b's :mc is the per-step model

Training: items/s of the compiled train step (teacher forcing, AdamW) at batch sizes 1 (the
original implementation's setting) and 32, measured in the same run after compilation; the
ratio is the speedup of batching. Decoding: items/s of compiled greedy decoding on the MDC test
split (max `config.eval.max_actions` actions), with the trained parameters of --checkpoint when
given; `--fixed_length N` decodes exactly N actions per item (STOP masked until then), so decode
speed compares across versions whatever the model predicts.

Config overrides work as in training: `--config.<field>=value` (e.g.
`--config.model.world.features=32`; the `=` form) changes --config, parsed by ml_collections as
`python -m bapjax.train` parses them; a field the config lacks or a value that does not fit is one
line `error: ...`, exit 2.
`--compare_config PATH` measures a second config alternately with --config in this process
(e.g. the M' builder against the GRU builder of the CPU experiment) and prints the ratios;
`--compare_config.<field>=value` overrides it (without --compare_config the second config is
--config's file with only these overrides, e.g. `--compare_config.model.name=once`).
`--compare_to COMMIT` measures a copy of that commit (`git archive`) with its own
benchmarks/bench_train.py and this tree with this script, alternately for `--rounds` rounds, with
the same flags (refused, naming it, if COMMIT's script lacks one), and prints the best figure of
each and the ratios of the figures both report. Each tree runs in its own process, whose working
directory and PYTHONPATH are that tree (`run_tree`), so it imports only that tree's bapjax.
The `--config.<field>` overrides go to this tree only: COMMIT measures --config as it stood
there (e.g. this tree's model option against the commit's model). `--repo DIR` measures the tree
DIR (a checkout) with its own script the same way, in place of this tree.
Efficiency against the machine itself: `train_gflop_per_item` is XLA's cost analysis of the
compiled batch-32 train steps that were timed (counted as bench_scaling counts: the model compiled
without chunks, `BuilderModel.unchunked`, since XLA counts a loop body once; the rematerialized chunked step really
computes the forward encoding twice, so this is the model's work, not the chunked program's),
summed over the timed batches and divided by their items; `train_gflops_per_s` is that times the
measured items/s; `matmul_gflops_per_s` is a jitted fp32 2048x2048 matmul timed in the same
process (best of 5), the ceiling a dense kernel reaches on this machine.

The last line is JSON: {"train_b1_items_per_s", "train_b32_items_per_s", "decode_items_per_s",
"decode_mean_length", "train_gflop_per_item", "train_gflops_per_s", "matmul_gflops_per_s"}
(with --compare_to: {"current": {...}, "baseline": {...}, "ratio": {...}}).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
METRICS = ("train_b1_items_per_s", "train_b32_items_per_s", "decode_items_per_s")
EFFICIENCY = ("train_gflop_per_item", "train_gflops_per_s", "matmul_gflops_per_s")  # reported, not ratioed


def load_config(spec, repo: Path = REPO, overrides: list[str] = ()):
    """The measured tree's config: a file relative to `repo` ('path.py[:arg]'), else what
    ``--config`` takes (`bapjax.cli.load_config`: a file, or an installed config's name), with
    `--config.<field>=value` overrides applied as training applies them (`bapjax.cli.apply_overrides`)."""
    from bapjax.cli import apply_overrides
    from bapjax.cli import load_config as load
    from bapjax.errors import UserError

    path, colon, arg = str(spec).partition(":")
    if (Path(repo) / path).is_file():
        spec = f"{Path(repo) / path}{colon}{arg}"
    try:
        return apply_overrides(load(spec), overrides, path)
    except UserError as err:
        fail(str(err))


def fail(message: str):
    """A user mistake: one line, exit 2."""
    print(f"error: {message}", file=sys.stderr, flush=True)
    sys.exit(2)


OVERRIDE_PREFIXES = {"--config.": "overrides", "--compare_config.": "compare_overrides"}


def split_overrides(extra: list[str]) -> dict[str, list[str]]:
    """The `--config.<field>=value` and `--compare_config.<field>=value` tokens of the command line,
    each as a `--config.<field>=value` override of its config; anything else is an error."""
    out = {dest: [] for dest in OVERRIDE_PREFIXES.values()}
    for token in extra:
        prefix = next((p for p in OVERRIDE_PREFIXES if token.startswith(p)), None)
        if prefix is None:
            fail(f"unrecognized argument {token!r}")
        if "=" not in token:
            fail(f"{token}: give an override as {prefix}<field>=value")
        out[OVERRIDE_PREFIXES[prefix]].append("--config." + token[len(prefix):])
    return out


def describe(path: str, overrides: list[str]) -> str:
    return " ".join([path, *overrides])


def time_training(model, optimizer, features, feature_config, batch_size, steps, seed=0, devices=1, ema_decay=0.0):
    """Items/s and decoder steps/s of `steps` train steps on a mesh of `devices`, after an untimed pass
    over `steps` + 2 batches that compiles every pack size they need; also the timed batches and the
    state after both passes."""
    import jax

    from bapjax import sharding
    from bapjax.data import input_pipeline
    from bapjax.training import loop

    mesh = sharding.data_mesh(jax.devices()[:devices if batch_size % devices == 0 else 1])
    ema = {"ema_decay": ema_decay} if ema_decay else {}  # a checkout from before train.ema_decay takes no such argument
    trainer = loop.Trainer(model, optimizer, mesh, **ema)
    state = sharding.replicate(loop.create_state(model, optimizer, jax.random.PRNGKey(seed), None, **ema), mesh)
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
    return steps * batch_size / elapsed, targets / elapsed, batches[:steps], state


def training_setup(config, corpus_path: str):
    """What a timing of `config`'s train step takes: the MDC corpus, the vocabulary of its training
    items, the feature config, the first 2,048 training items featurized, the model and an optimizer
    with a constant schedule (the LR schedule does not change a step's cost; a cosine one would need
    the run's step count)."""
    from bapjax.corpus import mdc
    from bapjax.data import input_pipeline
    from bapjax.models import builder
    from bapjax.text.vocab import Vocabulary
    from bapjax.training import optimizer as optim

    corpus = mdc.load_corpus(corpus_path)
    train_items = list(corpus.split("train"))
    vocab = Vocabulary.build(train_items)
    feature_config = input_pipeline.FeatureConfig.from_config(config)
    features = input_pipeline.featurize_items(train_items[:2048], vocab, feature_config)
    model = builder.build_model(config.model, vocab.size)
    config.train.schedule = "constant"
    return corpus, vocab, feature_config, features, model, optim.make_optimizer(config.train)


def flops(compiled) -> float:
    """XLA's FLOP count of a compiled program (one dict, or one per program on older JAX)."""
    analysis = compiled.cost_analysis()
    return float((analysis[0] if isinstance(analysis, (list, tuple)) else analysis)["flops"])


def train_gflop_per_item(model, optimizer, batches, seed=0) -> float:
    """XLA's FLOP count of the compiled train step over `batches`, per item (see the docstring)."""
    import jax

    from bapjax import sharding
    from bapjax.training import loop

    whole = model.unchunked()
    mesh = sharding.data_mesh(jax.devices()[:1])
    trainer = loop.Trainer(whole, optimizer, mesh)
    state = sharding.replicate(loop.create_state(whole, optimizer, jax.random.PRNGKey(seed), None), mesh)
    by_pack: dict[int, float] = {}
    total = 0.0
    for b in batches:
        k = trainer.prepare(b)[1]
        if k not in by_pack:
            by_pack[k] = flops(trainer.compile_train(state, b))
        total += by_pack[k]
    return total / 1e9 / sum(len(b["weight"]) for b in batches)


def matmul_gflops_per_s(n: int = 2048, repeats: int = 5) -> float:
    """Best-of-`repeats` GFLOP/s of a jitted fp32 n x n matmul: the machine's dense ceiling."""
    import jax
    import jax.numpy as jnp

    a = jax.random.normal(jax.random.PRNGKey(0), (n, n), jnp.float32)
    b = jax.random.normal(jax.random.PRNGKey(1), (n, n), jnp.float32)
    matmul = jax.jit(jnp.matmul)
    matmul(a, b).block_until_ready()
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        matmul(a, b).block_until_ready()
        best = min(best, time.perf_counter() - start)
    return 2 * n ** 3 / best / 1e9


def measure(args) -> dict:
    """This process's figures: the bapjax it imports (this tree's, run from the repository root)."""
    import jax
    import numpy as np

    from bapjax.data import input_pipeline
    from bapjax.decoding import decode
    from bapjax.decoding.settings import DecodeSettings
    from bapjax.models import builder

    config = load_config(args.config, REPO, getattr(args, "overrides", []))
    corpus, vocab, feature_config, features, model, optimizer = training_setup(config, args.corpus)
    print(f"{REPO}: devices {jax.devices()}  model: {config.model.to_dict()}", flush=True)

    result = {}
    for batch_size, steps in ((1, args.steps_b1), (32, args.steps)):
        items_s, steps_s, timed, _ = time_training(model, optimizer, features, feature_config, batch_size, steps,
                                                devices=getattr(args, "host_devices", 1),
                                                ema_decay=float(config.train.get("ema_decay", 0.0)))
        result[f"train_b{batch_size}_items_per_s"] = round(items_s, 3)
        print(f"train batch {batch_size:>2}: {items_s:7.2f} items/s ({steps_s:7.1f} decoder steps/s)", flush=True)
    gflop = train_gflop_per_item(model, optimizer, timed)
    result["train_gflop_per_item"] = round(gflop, 4)
    result["train_gflops_per_s"] = round(gflop * result["train_b32_items_per_s"], 2)
    result["matmul_gflops_per_s"] = round(matmul_gflops_per_s(), 1)
    print(f"train batch 32: {gflop:.3f} GFLOP/item, {result['train_gflops_per_s']:.1f} GFLOP/s "
          f"= {result['train_gflops_per_s'] / result['matmul_gflops_per_s']:.2f} of a jitted fp32 matmul's "
          f"{result['matmul_gflops_per_s']:.1f} GFLOP/s", flush=True)

    test_items = list(corpus.split("test"))
    if args.decode_items:
        test_items = test_items[:args.decode_items]
    if args.checkpoint:
        from bapjax.training.checkpoints import load_run

        run = load_run(args.checkpoint)
        model, params, vocab = run.model, run.params, run.vocab
        feature_config = input_pipeline.FeatureConfig.from_config(run.config)
    else:
        params = builder.init_params(model, jax.random.PRNGKey(0))
    max_actions = args.fixed_length or int(config.eval.max_actions)
    min_actions = args.fixed_length or int(config.eval.min_actions)
    settings = DecodeSettings(max_actions, min_actions, args.decode_batch)
    decode_fn = settings.decode_fn(model)
    table = input_pipeline.featurize_items(test_items, vocab, feature_config)
    # an untimed pass over the same items compiles every call shape they need
    decode.predict_items(model, params, test_items, vocab, feature_config, settings, decode_fn=decode_fn,
                         features=table)
    start = time.perf_counter()
    predictions = decode.predict_items(model, params, test_items, vocab, feature_config, settings,
                                       decode_fn=decode_fn, features=table)
    elapsed = time.perf_counter() - start
    lengths = [len(a) for a in predictions.values()]
    result["decode_items_per_s"] = round(len(test_items) / elapsed, 3)
    result["decode_mean_length"] = round(float(np.mean(lengths)), 3)
    print(f"decode MDC test ({len(test_items)} items, batch {args.decode_batch}, "
          f"{'trained' if args.checkpoint else 'random-init'} params, "
          f"{f'exactly {args.fixed_length}' if args.fixed_length else f'max {max_actions}'} actions): "
          f"{result['decode_items_per_s']:.2f} items/s, mean predicted length {result['decode_mean_length']:.2f}",
          flush=True)
    print(f"batch 32 vs batch 1: {result['train_b32_items_per_s'] / result['train_b1_items_per_s']:.2f}x items/s",
          flush=True)
    return result


def best_efficiency(results: list[dict]) -> dict:
    """The efficiency fields over rounds: the (fixed) GFLOP per item, the best rates."""
    return {key: max(r[key] for r in results) for key in EFFICIENCY if all(key in r for r in results)}


def run_tree(tree: Path, flags: list[str]) -> subprocess.CompletedProcess:
    """`tree`'s own benchmarks/bench_train.py with `flags`, in a process whose working directory and
    PYTHONPATH are `tree`: it imports that tree's bapjax and nothing of this one."""
    if not (tree / "benchmarks" / "bench_train.py").exists():
        raise SystemExit(f"error: {tree} has no benchmarks/bench_train.py to measure it with")
    return subprocess.run([sys.executable, "-m", "benchmarks.bench_train", *flags], capture_output=True, text=True,
                          cwd=str(tree), env={**os.environ, "PYTHONPATH": str(tree)})


def script_flags(tree: Path) -> set[str]:
    """The flags of a tree's own bench_train.py, read from its --help."""
    out = run_tree(tree, ["--help"])
    if out.returncode:
        raise SystemExit(f"error: {tree / 'benchmarks' / 'bench_train.py'} --help failed:\n{out.stderr[-2000:]}")
    return set(re.findall(r"(--[a-z_0-9]+)", out.stdout))


def forwarded_flags(argv: list[str], dropped: tuple[str, ...], overrides: bool) -> list[str]:
    """The command line less the flags named in `dropped` (and, unless `overrides`, the
    `--config.<field>` overrides): the flags passed on to another tree's script."""
    forwarded = []
    skip = False
    for token in argv:
        if skip:
            skip = False
            continue
        if token.split("=")[0] in dropped:
            skip = "=" not in token
            continue
        if token.startswith("--config.") and not overrides:
            continue
        forwarded.append(token)
    return forwarded


def other_tree(args, argv: list[str]) -> dict:
    """`--repo DIR`: DIR measured by its own script in its own process (`run_tree`), its output shown."""
    out = run_tree(Path(args.repo).resolve(), forwarded_flags(argv, ("--repo",), overrides=True))
    print(out.stdout.strip(), flush=True)
    if out.returncode:
        raise SystemExit(f"error: the run in {args.repo} failed:\n{out.stderr[-4000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def compare(args, argv: list[str]) -> dict:
    """Each tree measured by its own benchmarks/bench_train.py (COMMIT's from `git archive`, this
    tree's), alternately for --rounds rounds, with the flags given here (a flag COMMIT's script
    lacks is an error naming it); best of the rounds each, ratios of the figures both report."""
    forwarded = forwarded_flags(argv, ("--compare_to", "--rounds", "--repo"), overrides=False)
    from bapjax import paths

    forwarded += ["--corpus", str(paths.mdc_path(args.corpus))]  # a path, for a baseline tree of any age
    with tempfile.TemporaryDirectory(prefix="bapjax-bench-") as tmp:
        archive = subprocess.run(["git", "-C", str(REPO), "archive", args.compare_to], check=True,
                                 capture_output=True).stdout
        subprocess.run(["tar", "-x", "-C", tmp], input=archive, check=True)
        trees = {"baseline": Path(tmp), "current": REPO}
        known = script_flags(trees["baseline"])
        missing = sorted({t.split("=")[0] for t in forwarded if t.startswith("--")} - known)
        if missing:
            raise SystemExit(f"error: {args.compare_to}'s benchmarks/bench_train.py has no {', '.join(missing)}")
        runs: dict[str, list[dict]] = {"baseline": [], "current": []}
        flags_of = {"baseline": forwarded, "current": forwarded + list(args.overrides)}  # overrides: this tree only
        for _ in range(args.rounds):
            for name, tree in trees.items():
                out = run_tree(tree, flags_of[name])
                if out.returncode:
                    raise SystemExit(f"the {name} run failed:\n{out.stdout[-2000:]}\n{out.stderr[-4000:]}")
                print(f"--- {name} ({args.compare_to if name == 'baseline' else 'this tree'})\n{out.stdout.strip()}",
                      flush=True)
                runs[name].append(json.loads(out.stdout.strip().splitlines()[-1]))
    shared = [key for key in METRICS if all(key in r for rs in runs.values() for r in rs)]
    best = {name: {key: max(r[key] for r in rs) for key in shared} | {"decode_mean_length": rs[0]["decode_mean_length"]}
            | best_efficiency(rs) for name, rs in runs.items()}
    ratio = {key: round(best["current"][key] / best["baseline"][key], 3) for key in shared}
    for key in shared:
        print(f"{key}: {best['current'][key]:.2f} vs {best['baseline'][key]:.2f} at {args.compare_to} "
              f"= {ratio[key]:.2f}x (best of {args.rounds})", flush=True)
    return {"current": best["current"], "baseline": best["baseline"], "baseline_commit": args.compare_to,
            "current_overrides": list(args.overrides), "ratio": ratio, "rounds": args.rounds}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--config", default="configs/cpu.py")
    parser.add_argument("--corpus", default="@mdc", help="the MDC (default @mdc = bapjax.paths.MDC: found by "
                        "bapjax.paths.mdc_path)")
    parser.add_argument("--steps", type=int, default=5, help="timed steps per batch size")
    parser.add_argument("--steps_b1", type=int, default=32, help="timed steps at batch size 1")
    parser.add_argument("--decode_items", type=int, default=256, help="MDC test items to decode (0: all)")
    parser.add_argument("--decode_batch", type=int, default=64)
    parser.add_argument("--fixed_length", type=int, default=0, help="decode exactly N actions per item (0: model decides)")
    parser.add_argument("--checkpoint", default="", help="a training workdir for decoding with trained params")
    parser.add_argument("--repo", default=str(REPO), help="the bapjax tree to measure (another one: with its own "
                        "benchmarks/bench_train.py, in its own process)")
    parser.add_argument("--compare_to", default="", help="also measure this git commit, alternately with this tree")
    parser.add_argument("--rounds", type=int, default=1, help="with --compare_to/--compare_config: rounds")
    parser.add_argument("--compare_config", default="",
                        help="also measure this config, alternately with --config, in this process")
    parser.add_argument("--host_devices", type=int, default=1,
                        help="train data-parallel over this many host CPU devices (XLA's forced device count)")
    args, extra = parser.parse_known_args()
    vars(args).update(split_overrides(extra))
    if args.host_devices > 1 and "xla_force_host_platform_device_count" not in os.environ.get("XLA_FLAGS", ""):
        os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") +
                                   f" --xla_force_host_platform_device_count={args.host_devices}").strip()
    if Path(args.repo).resolve() != REPO:
        result = other_tree(args, sys.argv[1:])
    elif args.compare_to:
        result = compare(args, sys.argv[1:])
    elif args.compare_config or args.compare_overrides:
        result = compare_configs(args)
    else:
        result = measure(args)
    print(json.dumps(result), flush=True)


def compare_configs(args) -> dict:
    """--config (the baseline) and --compare_config measured alternately in one process for
    --rounds rounds; the best figure of each and the ratios compare_config / config."""
    settings = {"baseline": (args.config, list(args.overrides)),
                "current": (args.compare_config or args.config, list(args.compare_overrides))}
    labels = {name: describe(*setting) for name, setting in settings.items()}
    runs = {"baseline": [], "current": []}
    for _ in range(args.rounds):
        for name, (path, overrides) in settings.items():
            print(f"== {name}: {labels[name]}", flush=True)
            runs[name].append(measure(argparse.Namespace(**{**vars(args), "config": path, "overrides": overrides})))
    best = {name: {m: max(r[m] for r in results) for m in METRICS} | best_efficiency(results)
            | {"decode_mean_length": results[0]["decode_mean_length"]} for name, results in runs.items()}
    ratio = {m: round(best["current"][m] / best["baseline"][m], 3) for m in METRICS}
    for m in METRICS:
        print(f"{m}: {labels['current']} / {labels['baseline']} = {ratio[m]:.2f}x "
              f"({best['current'][m]:.2f} vs {best['baseline'][m]:.2f})", flush=True)
    return {"baseline": best["baseline"], "current": best["current"], "ratio": ratio, "configs": labels,
            "rounds": args.rounds}


if __name__ == "__main__":
    main()
