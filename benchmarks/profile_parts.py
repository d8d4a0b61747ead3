"""Where a once-architecture train step's time goes, part by part, against each part's own floor.

From the repository root (this tree's bapjax):

    python -m benchmarks.profile_parts [--config configs/cpu_experiment.py:agg] [--repeats 10] [--out FILE.json]

The config's model (the once architecture: the CPU "frame" model by default) is split into the
parts its train step runs, each timed as its own jitted forward and backward pass (gradients with
respect to the part's parameters and to the inputs the step differentiates) on the inputs a real
batch gives it (the first MDC training batch of 32 whose pack size is the most common one):

* text: the text encoder over the batch's tokens;
* decoder: the decoder over the reference actions (teacher forcing), from the text's states;
* world CNN: the start worlds' encoding (FiLM-conditioned on the text summary), in its chunks;
* changes: the change features of the K packed steps (change channels and their sparse
  convolution), in the heads' chunks;
* heads: the action and STOP heads over the K packed steps' world features and decoder outputs;
* loss: the cross entropy (and the step accuracy) over the K x 7624 logits;
* step: the whole train step (AdamW and the moving average included), as `bapjax.train` runs it.

For each: its FLOPs (XLA's cost analysis of the part compiled without chunks, as bench_train counts
them), its measured time (best of `--repeats`), and its floor: the time of the same FLOPs as one
fp32 matmul [m, 512] @ [512, 512] in the same process (m chosen so the FLOPs match). `gap` =
measured / floor: the parts far above 1 are the ones whose time is not arithmetic. The parts'
times need not add up to the step's: `step_beyond_parts_ms` is the difference (the worlds before
each step, the packing and its gathers, AdamW and the moving average, less what the step overlaps
on the cores). Run it on a quiet host: the figures are times, not ratios.

The last line is JSON {"config", "pack_size", "matmul_gflops_per_s", "parts": {NAME: {"gflop",
"ms", "floor_ms", "gap"}}, "step_beyond_parts_ms"}; `--out` holds it too.
"""

from __future__ import annotations

import argparse
import collections
import json
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np

from benchmarks.bench_train import fail, load_config
from benchmarks.profile_step import Setup, emit

PARTS = ("text", "decoder", "world CNN", "changes", "heads", "loss", "step")


def best_ms(fn, args, repeats: int) -> float:
    jax.block_until_ready(fn(*args))
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        jax.block_until_ready(fn(*args))
        best = min(best, time.perf_counter() - start)
    return 1e3 * best


def matmul_ms(gflop: float, repeats: int) -> float:
    """ms of one fp32 [m, 512] @ [512, 512] matmul of `gflop` GFLOP (m rounded, at least 1)."""
    m = max(1, round(gflop * 1e9 / (2 * 512 * 512)))
    a = jax.random.normal(jax.random.PRNGKey(0), (m, 512), jnp.float32)
    b = jax.random.normal(jax.random.PRNGKey(1), (512, 512), jnp.float32)
    return best_ms(jax.jit(jnp.matmul), (a, b), repeats) * gflop * 1e9 / (2 * m * 512 * 512)


def gflop(fn, args) -> float:
    analysis = fn.lower(*args).compile().cost_analysis()
    return float((analysis[0] if isinstance(analysis, (list, tuple)) else analysis)["flops"]) / 1e9


def part_functions(model, batch: dict, num_packed: int) -> tuple[dict, dict]:
    """({part: its forward pass, a function of (module, inputs)}, the batch's data the parts read: tokens,
    the packed steps' worlds and start worlds, the pack and its item and step indices) for `model` on
    `batch`; `measure` sums each part's outputs against fixed random weights, so its gradient is the
    backward pass."""
    from bapjax.models import builder, world_changes, world_input

    batch = {k: jnp.asarray(v) for k, v in batch.items()}
    actions = batch["actions"].astype(jnp.int32)
    bsz, steps = actions.shape
    mask = batch["text_mask"]
    start = world_input.start_world(batch)
    worlds = world_input.worlds_before_each_step(start, actions)
    pack = builder.pack_steps(batch["action_mask"], batch["weight"], num_packed)
    b, t = pack["item"], pack["step"]
    packed_worlds = jax.tree_util.tree_map(lambda x: x[b, t], worlds)
    packed_starts = jax.tree_util.tree_map(lambda x: x[b], start)
    prev = jnp.concatenate([jnp.full((bsz, 1), builder.START, jnp.int32), actions[:, :-1]], axis=1)
    decay = model.world.recent_decay

    def text(m, tokens):
        return m.encode_text(tokens, mask)

    def decoder(m, token_states, summary):
        state = m.init_decoder(summary, token_states, mask, steps)
        return m.decoder_sequence(state, prev, token_states, mask)

    def cnn(m, summary):
        return m.encode_starts(start, summary)

    def changes(m, worlds_, starts_):
        def run(module, w, s):
            return module.change_conv(world_changes.change_channels(w, s, decay), steps)
        return m.in_chunks(run, (worlds_, starts_), m.world.step_chunk)

    def heads(m, feats, dec):
        return m.in_chunks(lambda module, f, d: module.action_logits(f, d), (feats, dec), m.world.step_chunk)

    data = {"tokens": batch[model.text_key], "packed_worlds": packed_worlds, "packed_starts": packed_starts,
            "pack": {**pack, "targets": actions[b, t]}, "b": b, "t": t}
    return {"text": text, "decoder": decoder, "world CNN": cnn, "changes": changes, "heads": heads}, data


def part_inputs(model, params, fns: dict, data: dict) -> tuple[dict, jax.Array]:
    """({part: the inputs it gets in the step}, the packed steps' logits), computed by the parts in
    the step's order: text, decoder, world CNN, changes, then the heads on the start features plus
    the changes (`part_functions`' functions and data)."""
    def apply(method, *args):
        return model.apply({"params": params}, *args, method=method)

    token_states, summary = apply(fns["text"], data["tokens"])
    dec_out = apply(fns["decoder"], token_states, summary)
    encoded = apply(fns["world CNN"], summary)
    delta = apply(fns["changes"], data["packed_worlds"], data["packed_starts"])
    feats = encoded[data["b"]] + delta
    dec = dec_out[data["b"], data["t"]]
    inputs = {"text": (data["tokens"],), "decoder": (token_states, summary), "world CNN": (summary,),
              "changes": (data["packed_worlds"], data["packed_starts"]), "heads": (feats, dec)}
    return inputs, apply(fns["heads"], feats, dec)


def measure(config_spec: str, repeats: int, corpus: str) -> dict:
    from bapjax.corpus import mdc
    from bapjax.models import builder
    from bapjax.text.vocab import Vocabulary

    config = load_config(config_spec)
    if config.model.name != "once":
        fail(f"--config {config_spec}: its model is {config.model.name!r}; the parts here are the once architecture's")
    items = list(mdc.load_corpus(corpus).split("train"))
    vocab = Vocabulary.build(items)
    setup = Setup(config, items[:2048], vocab)
    batches = setup.ready_batches(12)
    k = collections.Counter(size for _, size in batches).most_common(1)[0][0]
    batch = next(b for b, size in batches if size == k)
    host_batch = jax.tree_util.tree_map(np.asarray, batch)
    model, params = setup.model, setup.state["params"]
    whole = model.unchunked()
    fns, data = part_functions(model, host_batch, k)

    inputs, logits = part_inputs(model, params, fns, data)
    float_args = {"decoder": (0, 1), "world CNN": (0,), "heads": (0, 1)}

    rng = np.random.default_rng(0)
    result = {"config": config_spec, "pack_size": int(k), "batch_size": setup.batch_size, "parts": {}}
    rate = 2 * 2048 ** 3 / matmul_ms(2 * 2048 ** 3 / 1e9, repeats) / 1e6
    result["matmul_gflops_per_s"] = round(rate, 1)

    def timed(name, fn, flop_fn, args):
        g = gflop(flop_fn, args)
        ms = best_ms(fn, args, repeats)
        floor = matmul_ms(g, repeats)
        result["parts"][name] = {"gflop": round(g, 4), "ms": round(ms, 2), "floor_ms": round(floor, 2),
                                 "gap": round(ms / floor, 1) if floor else None}
        print(f"{name:10s} {g:8.3f} GFLOP {ms:9.2f} ms  floor {floor:7.2f} ms  gap {ms / floor:6.1f}x", flush=True)

    for name, fn in fns.items():
        outs = jax.eval_shape(lambda *a, f=fn: model.apply({"params": params}, *a, method=f), *inputs[name])
        cots = jax.tree_util.tree_map(lambda s: jnp.asarray(rng.normal(size=s.shape), s.dtype), outs)
        wrt = (0,) + tuple(1 + i for i in float_args.get(name, ()))

        def objective(p, *a, f=fn, m=model, c=cots):
            out = m.apply({"params": p}, *a, method=f)
            return sum(jnp.vdot(o, w) for o, w in zip(jax.tree_util.tree_leaves(out), jax.tree_util.tree_leaves(c)))

        def objective_whole(p, *a, f=fn, c=cots):
            return objective(p, *a, f=f, m=whole, c=c)

        timed(name, jax.jit(jax.grad(objective, argnums=wrt)), jax.jit(jax.grad(objective_whole, argnums=wrt)),
              (params, *inputs[name]))

    pack = data["pack"]
    loss = jax.jit(jax.grad(lambda lg: builder.loss_from_sums(builder.loss_sums(lg, pack))[0]))
    timed("loss", loss, loss, (logits,))

    step_ms = 1e3 * min(setup.timed_steps([(batch, k)] * 3) / 3 for _ in range(max(1, repeats // 3)))
    from bapjax.training import loop
    from bapjax.training import optimizer as optim

    optimizer = optim.make_optimizer(config.train)
    whole_trainer = loop.Trainer(whole, optimizer, setup.mesh)  # the step's FLOPs without chunks, as bench_train counts
    whole_state = loop.create_state(whole, optimizer, jax.random.PRNGKey(0), None)
    analysis = whole_trainer.lower_global(whole_state, batch, k).compile().cost_analysis()
    g = float((analysis[0] if isinstance(analysis, (list, tuple)) else analysis)["flops"]) / 1e9
    floor = matmul_ms(g, repeats)
    result["parts"]["step"] = {"gflop": round(g, 4), "ms": round(step_ms, 2), "floor_ms": round(floor, 2),
                               "gap": round(step_ms / floor, 1)}
    print(f"{'step':10s} {g:8.3f} GFLOP {step_ms:9.2f} ms  floor {floor:7.2f} ms  gap {step_ms / floor:6.1f}x "
          f"({setup.batch_size * 1e3 / step_ms:.1f} items/s)", flush=True)
    parts_ms = sum(v["ms"] for name, v in result["parts"].items() if name != "step")
    result["step_beyond_parts_ms"] = round(step_ms - parts_ms, 2)
    print(f"the step beyond its parts: {step_ms - parts_ms:.2f} ms (the worlds before each step, the packing and its "
          f"gathers, AdamW and the moving average, less what the step overlaps)", flush=True)
    return result


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default="configs/cpu_experiment.py:agg")
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--corpus", default=None, help="the MDC (default: @mdc)")
    parser.add_argument("--out", default=None)
    args = parser.parse_args(argv)
    from bapjax import paths

    corpus = args.corpus or str(paths.mdc_path())
    print(f"device {jax.devices()[0].platform}; config {args.config}", flush=True)
    result = measure(args.config, args.repeats, corpus)
    emit(args.out, result)
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
