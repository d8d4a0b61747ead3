"""Where a training step's time goes on this host's first device, for any model, and what each
variant of the config (a lever: mixed precision, unrolled scans, a larger batch) does to it.

From the repository root (this tree's bapjax):

    python -m benchmarks.profile_step --config configs/cl.py [--steps 20] [--ops 25] [--rounds 2] \
        [--variant "bf16 --config.model.dtype=bfloat16" ...] [--trace_dir DIR] [--out FILE.json]

Measured in one process on the config's own train step (`loop.Trainer` as `bapjax.train` builds
it: pack multiple, pack rounding, moving average) over batches of the first 2,048 MDC training
items (`--corpus`), featurized as the config's run featurizes them:

* step: `--steps` train steps on batches already on the device: items/s and ms per step; and
  the compilation (the first call of each pack size those batches meet), s.
* pipeline: what the training loop does on the host per batch: the next batch of a
  `DataIterator`, its rows balanced and its pack size chosen (`Trainer.prepare`), the global
  arrays made (`sharding.host_batch_to_global`) and waited for: ms per batch.
* loop: the two as the training loop runs them (next batch, step dispatched, no wait between):
  items/s. Loop well below step, with the pipeline's ms near the loop's ms per step: the input
  bounds training (prefetching or a faster pipeline pays); loop near step: the device step does.
* ops (`--ops N`, N > 0): a JAX profiler trace of 3 steps. Per step: the summed durations of the
  compiled step's XLA ops (`ops_ms`; loops and calls left out, their bodies' ops counted) against
  the step's wall time (`busy` = ops_ms / step ms: far below 1, the device waits between ops, so
  launches and latency bound the step, not arithmetic; above 1 on a CPU, ops ran side by side on
  its threads), the ops run per step and their mean
  duration, ms per step by opcode and by model part (`PARTS`: the op's source in the model code),
  and the N longest ops. The trace's events of the device's own processes (a GPU's kernels and
  memory copies, named by the device's runtime) are summed by name too (`device_events`): the
  part of the device's time the HLO names do not cover. `--trace_dir DIR` keeps the trace there.
* variants: each `--variant "NAME OVERRIDE..."` (overrides as training's, `--config.<field>=value`)
  is a second config; its step and the config's are timed alternately for `--rounds` rounds
  (fresh batches of each one's own batch size, best round of each), and `ratio` is the variant's
  items/s over the config's, measured in this run.

The last line is JSON {"config", "devices", "step": {...}, "pipeline_ms", "loop_items_per_s",
"ops": {...}, "variants": {NAME: {"overrides", "items_per_s", "ratio", "compile_s"}}}; `--out` holds
it too, rewritten after each part (step, ops, each variant), so a run cut short keeps what it measured.
"""

from __future__ import annotations

import argparse
import collections
import gzip
import json
import re
import shlex
import sys
import tempfile
import time
from pathlib import Path

import jax

from benchmarks.bench_train import fail, load_config

REPO = Path(__file__).resolve().parents[1]
HLO_OP = re.compile(r'^\s*(?:ROOT )?%?([\w.\-]+) = (.+?) ([a-z][\w\-]*)\(')
OP_NAME = re.compile(r'op_name="([^"]*)"')
CONTAINERS = ("while", "call", "conditional")  # their time is their bodies' ops'
# the model part an op comes from: the first of these names in its op_name (the Flax module path)
PARTS = (("text_encoder", "text"), ("text_projection", "text"), ("action_decoder", "decoder"),
         ("decoder", "decoder"), ("world_cnn", "world CNN"), ("world_changes", "world changes"),
         ("change", "world changes"), ("head", "heads"), ("stop_", "heads"), ("length_", "length head"),
         ("action_in", "action embedding"), ("action_out", "action embedding"))


def hlo_ops(hlo_text: str) -> dict[str, dict]:
    """The instructions of a compiled HLO module's text, loops and calls left out: {name: {"shape",
    "opcode", "source" (the last two components of its op_name), "part" (`part_of`)}}."""
    ops = {}
    for line in hlo_text.splitlines():
        head, source = HLO_OP.match(line), OP_NAME.search(line)
        if head and head.group(3) not in CONTAINERS:
            name = source.group(1) if source else ""
            ops[head.group(1)] = {"shape": head.group(2), "opcode": head.group(3),
                                  "source": "/".join(name.split("/")[-2:]), "part": part_of(name)}
    return ops


def part_of(op_name: str) -> str:
    """The model part of an op, from its op_name (`PARTS`); "optimizer" for the update's ops
    outside the model, "loss and rest" for the others."""
    for component in op_name.split("/"):
        for marker, part in PARTS:
            if component.startswith(marker):
                return part
    return "optimizer" if re.search(r"adam|clip|global_norm|optax|update", op_name) else "loss and rest"


def trace_events(run, calls: int, keep_dir: str | None = None) -> list[dict]:
    """The events of a JAX profiler trace of `calls` calls of `run()` (each waited for)."""
    jax.block_until_ready(run())
    with tempfile.TemporaryDirectory() as tmp:
        trace_dir = keep_dir or tmp
        with jax.profiler.trace(trace_dir, create_perfetto_trace=True):
            for _ in range(calls):
                jax.block_until_ready(run())
        path = sorted(Path(trace_dir).rglob("perfetto_trace.json.gz"), key=lambda p: p.stat().st_mtime)[-1]
        trace = json.load(gzip.open(path))
    return trace["traceEvents"] if isinstance(trace, dict) else trace


def event_name(event: dict) -> str:
    """An event's HLO instruction name: its `hlo_op` argument where the runtime names one (a GPU
    kernel's event), else its name."""
    return str((event.get("args") or {}).get("hlo_op") or event.get("name", ""))


def op_times(events: list[dict], ops: dict[str, dict], calls: int) -> list[dict]:
    """Per HLO op of `ops` met in `events`: ms per call and runs per call, longest first."""
    micros, runs = collections.Counter(), collections.Counter()
    for event in events:
        name = event_name(event)
        if event.get("ph") == "X" and name in ops:
            micros[name] += float(event.get("dur", 0.0))
            runs[name] += 1
    return [{"op": name, "ms_per_call": round(us / calls / 1e3, 3), "runs_per_call": runs[name] // calls, **ops[name]}
            for name, us in micros.most_common()]


def device_events(events: list[dict], calls: int, count: int) -> dict:
    """The events of the trace's device processes (a process named "/device:..." other than the
    host's CPU): ms per call in all, and by name the `count` longest."""
    names = {e["pid"]: str(e.get("args", {}).get("name", "")) for e in events
             if e.get("ph") == "M" and e.get("name") == "process_name"}
    device = {pid for pid, name in names.items() if name.startswith("/device:") and "CPU" not in name.upper()}
    micros = collections.Counter()
    for event in events:
        if event.get("ph") == "X" and event.get("pid") in device:
            micros[str(event.get("name", ""))] += float(event.get("dur", 0.0))
    return {"processes": sorted(names[p] for p in device), "ms_per_call": round(sum(micros.values()) / calls / 1e3, 3),
            "top": [{"name": n[:120], "ms_per_call": round(us / calls / 1e3, 3)} for n, us in micros.most_common(count)]}


def summarize_ops(timed: list[dict], step_ms: float, count: int) -> dict:
    """The per-step figures of a trace's op times (`op_times` of one call per step)."""
    total = sum(op["ms_per_call"] for op in timed)
    runs = sum(op["runs_per_call"] for op in timed)
    by = {key: collections.Counter() for key in ("opcode", "part")}
    for op in timed:
        for key in by:
            by[key][op[key]] += op["ms_per_call"]
    return {"ops_ms": round(total, 3), "busy": round(total / step_ms, 3) if step_ms else None, "ops_per_step": runs,
            "mean_op_us": round(1e3 * total / runs, 2) if runs else None,
            **{f"by_{key}": {k: round(v, 3) for k, v in c.most_common()} for key, c in by.items()},
            "top_ops": timed[:count]}


class Setup:
    """One config's train step, optimizer and batches (shared vocabulary and corpus)."""

    def __init__(self, config, items, vocab, seed: int = 0):
        from bapjax import sharding
        from bapjax.data import input_pipeline
        from bapjax.models import builder
        from bapjax.training import loop
        from bapjax.training import optimizer as optim

        tc = config.train
        self.batch_size = int(tc.batch_size)
        self.feature_config = input_pipeline.FeatureConfig.from_config(config)
        self.features = input_pipeline.featurize_items(items, vocab, self.feature_config)
        self.model = builder.build_model(config.model, vocab.size)
        tc.schedule = "constant"  # the schedule does not change a step's cost
        optimizer = optim.make_optimizer(tc)
        self.mesh = sharding.data_mesh(jax.devices()[:1])
        self.trainer = loop.Trainer(self.model, optimizer, self.mesh, int(tc.pack_multiple), float(tc.ema_decay),
                                    str(tc.pack_rounding))
        self.state = sharding.replicate(loop.create_state(self.model, optimizer, jax.random.PRNGKey(seed), None,
                                                          ema_decay=float(tc.ema_decay)), self.mesh)
        self.seed = seed
        self.compile_s = 0.0
        self.compiled_packs: set[int] = set()

    def iterator(self, seed: int | None = None):
        from bapjax.data import input_pipeline

        return input_pipeline.DataIterator(self.features, None, self.feature_config, self.batch_size,
                                           seed=self.seed if seed is None else seed)

    def ready_batches(self, count: int, seed: int | None = None) -> list[tuple[dict, int]]:
        """`count` batches prepared and on the device, each with its pack size."""
        iterator = self.iterator(seed)
        return jax.block_until_ready([self.trainer.global_batch(next(iterator)) for _ in range(count)])

    def step(self, batch, k):
        self.state, metrics = self.trainer.train_global(self.state, batch, k)
        return metrics

    def compile(self, batches) -> None:
        """Run one step per new pack size of `batches` (compiling it), timed into `compile_s`."""
        for batch, k in batches:
            if k not in self.compiled_packs:
                start = time.perf_counter()
                jax.block_until_ready(self.step(batch, k))
                self.compile_s += time.perf_counter() - start
                self.compiled_packs.add(k)

    def timed_steps(self, batches) -> float:
        """Seconds of the steps over `batches` (compiled first)."""
        self.compile(batches)
        jax.block_until_ready(self.state)
        start = time.perf_counter()
        for batch, k in batches:
            self.step(batch, k)
        jax.block_until_ready(self.state)
        return time.perf_counter() - start


def pipeline_ms(setup: Setup, count: int) -> float:
    """ms per batch of the host's side of a training step (`pipeline` in the docstring)."""
    iterator = setup.iterator(seed=setup.seed + 1)
    start = time.perf_counter()
    for _ in range(count):
        jax.block_until_ready(setup.trainer.global_batch(next(iterator)))
    return 1e3 * (time.perf_counter() - start) / count


def loop_items_per_s(setup: Setup, count: int) -> float:
    """items/s of `count` steps as the training loop runs them (`Trainer.train` on the next batch)."""
    iterator = setup.iterator(seed=setup.seed + 1)
    setup.compile([setup.trainer.global_batch(next(iterator)) for _ in range(count)])  # these batches' pack sizes compiled
    iterator = setup.iterator(seed=setup.seed + 1)  # the same batches again, timed
    jax.block_until_ready(setup.state)
    start = time.perf_counter()
    for _ in range(count):
        setup.state, _ = setup.trainer.train(setup.state, next(iterator))
    jax.block_until_ready(setup.state)
    return count * setup.batch_size / (time.perf_counter() - start)


def parse_variants(specs: list[str]) -> list[tuple[str, list[str]]]:
    """`--variant "NAME OVERRIDE..."` values -> (name, overrides); a mistake is one line, exit 2."""
    out = []
    for spec in specs:
        words = shlex.split(spec)
        if len(words) < 2 or words[0].startswith("--"):
            fail(f"--variant {spec!r}: give a name, then its overrides (--variant \"bf16 --config.model.dtype=bfloat16\")")
        bad = [w for w in words[1:] if not (w.startswith("--config.") and "=" in w)]
        if bad:
            fail(f"--variant {words[0]}: {bad[0]!r} is not an override --config.<field>=value")
        if words[0] in {name for name, _ in out}:
            fail(f"--variant {words[0]}: named twice")
        out.append((words[0], words[1:]))
    return out


def main(argv: list[str] | None = None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default="configs/cl.py")
    parser.add_argument("--corpus", default="@mdc")
    parser.add_argument("--steps", type=int, default=20, help="timed steps per measurement")
    parser.add_argument("--ops", type=int, default=25, help="list the N longest XLA ops of a traced step (0: no trace)")
    parser.add_argument("--rounds", type=int, default=2, help="alternate rounds of each variant against the config")
    parser.add_argument("--variant", action="append", default=[], help='"NAME --config.<field>=value ..." (repeatable)')
    parser.add_argument("--trace_dir", default=None, help="keep the profiler trace in this directory")
    parser.add_argument("--out", default=None, help="also write the JSON result here")
    args, overrides = parser.parse_known_args(argv)
    bad = [o for o in overrides if not o.startswith("--config.")]
    if bad:
        fail(f"unrecognized argument {bad[0]!r} (overrides are --config.<field>=value)")
    for flag in ("steps", "rounds"):
        if getattr(args, flag) < 1:
            fail(f"--{flag}={getattr(args, flag)}: expected a number >= 1")
    if args.ops < 0:
        fail(f"--ops={args.ops}: expected a number of ops >= 0")
    if args.out:
        from bapjax.errors import UserError
        from bapjax.paths import check_output_file

        try:
            check_output_file(args.out, "--out")
        except UserError as err:
            fail(str(err))
    variants = parse_variants(args.variant)

    from bapjax.corpus import mdc
    from bapjax.text.vocab import Vocabulary

    config = load_config(args.config, REPO, overrides)
    configs = {name: load_config(args.config, REPO, [*overrides, *more]) for name, more in variants}
    corpus = mdc.load_corpus(args.corpus)
    train_items = list(corpus.split("train"))
    vocab = Vocabulary.build(train_items)
    items = train_items[:2048]
    device = jax.devices()[0]
    print(f"device {device.device_kind} ({device.platform}); config {args.config} {' '.join(overrides)}", flush=True)

    base = Setup(config, items, vocab)
    batches = base.ready_batches(args.steps)
    seconds = base.timed_steps(batches)
    step_ms = 1e3 * seconds / args.steps
    result = {"config": " ".join([args.config, *overrides]), "device": f"{device.device_kind} ({device.platform})",
              "step": {"items_per_s": round(args.steps * base.batch_size / seconds, 2), "ms": round(step_ms, 3),
                       "batch_size": base.batch_size, "pack_sizes": sorted(base.compiled_packs),
                       "compile_s": round(base.compile_s, 2)}}
    print(f"step: {result['step']['items_per_s']:.1f} items/s, {step_ms:.2f} ms per step of {base.batch_size} "
          f"(pack sizes {result['step']['pack_sizes']}; compiled in {base.compile_s:.1f} s)", flush=True)
    result["pipeline_ms"] = round(pipeline_ms(base, args.steps), 3)
    result["loop_items_per_s"] = round(loop_items_per_s(base, args.steps), 2)
    emit(args.out, result)
    print(f"pipeline: {result['pipeline_ms']:.2f} ms per batch on the host; loop (pipeline then step, as training "
          f"runs): {result['loop_items_per_s']:.1f} items/s = {result['loop_items_per_s'] / result['step']['items_per_s']:.2f}"
          " of the step's", flush=True)

    if args.ops:
        one_batch, k = batches[0]
        ops = hlo_ops(base.trainer.lower_global(base.state, one_batch, k).compile().as_text())
        events = trace_events(lambda: base.step(one_batch, k), calls=3, keep_dir=args.trace_dir)
        timed_one = 1e3 * base.timed_steps([(one_batch, k)] * args.steps) / args.steps  # this batch's own step time
        result["ops"] = {"pack_size": k, "step_ms": round(timed_one, 3),
                         **summarize_ops(op_times(events, ops, calls=3), timed_one, args.ops),
                         "device_events": device_events(events, calls=3, count=args.ops)}
        o = result["ops"]
        print(f"ops (one batch, pack {k}): {o['ops_ms']:.2f} ms of XLA ops per step of {timed_one:.2f} ms "
              f"(busy {o['busy']}), {o['ops_per_step']} ops per step, mean {o['mean_op_us']} us", flush=True)
        print("  by part: " + ", ".join(f"{p} {ms:.2f}" for p, ms in o["by_part"].items()), flush=True)
        print("  by opcode: " + ", ".join(f"{p} {ms:.2f}" for p, ms in list(o["by_opcode"].items())[:8]), flush=True)
        for op in o["top_ops"]:
            print(f"  {op['ms_per_call']:8.3f} ms x{op['runs_per_call']:<5d} {op['op'][:28]:28s} {op['opcode']:12s} "
                  f"{op['shape'][:36]:36s} {op['part']:15s} {op['source'][:40]}", flush=True)
        emit(args.out, result)
        if o["device_events"]["processes"]:
            d = o["device_events"]
            print(f"  device events: {d['ms_per_call']:.2f} ms per step on {', '.join(d['processes'])}", flush=True)
            for e in d["top"][:10]:
                print(f"    {e['ms_per_call']:8.3f} ms {e['name'][:100]}", flush=True)

    result["variants"] = {}
    for index, (name, more) in enumerate(variants):
        other = Setup(configs[name], items, vocab)
        best_base = best_other = 0.0
        for r in range(args.rounds):
            seed = 100 + 10 * index + r  # fresh batches each round, the same for both
            for setup in (base, other):
                timed = setup.ready_batches(args.steps, seed=seed)
                rate = args.steps * setup.batch_size / setup.timed_steps(timed)
                if setup is base:
                    best_base = max(best_base, rate)
                else:
                    best_other = max(best_other, rate)
        result["variants"][name] = {"overrides": more, "items_per_s": round(best_other, 2),
                                    "config_items_per_s": round(best_base, 2), "ratio": round(best_other / best_base, 3),
                                    "batch_size": other.batch_size, "compile_s": round(other.compile_s, 2)}
        emit(args.out, result)
        print(f"variant {name} ({' '.join(more)}): {best_other:.1f} items/s against {best_base:.1f}: "
              f"{best_other / best_base:.2f}x (compiled in {other.compile_s:.1f} s)", flush=True)
        del other

    emit(args.out, result)
    print(json.dumps(result))


def emit(out: str | None, result: dict) -> None:
    """`result` so far, as JSON, into `out` (replaced whole)."""
    if out:
        tmp = Path(f"{out}.tmp")
        tmp.write_text(json.dumps(result) + "\n")
        tmp.replace(out)


if __name__ == "__main__":
    sys.exit(main())
