"""Where the once model's (`config.model.name="once"`) training loss spends its time, on one real MDC
batch of 32: the jitted forward and forward+backward of the whole loss, of the text encoder alone,
of the text encoder with the action decoder, and of the start worlds' CNN alone (chunked as
training runs it). The rest (change convolution, per-cell head, loss) is the difference.

From the repository root (this tree's bapjax):

    python -m benchmarks.profile_once [--config configs/cpu_experiment.py:mc] [--config.model.world.encode_chunk=4 ...]

`--config.<field>=value` overrides work as in training (e.g. to time other chunk sizes, which do
not change the function). Best of 3 tries of 5 calls each. `--ops N` then traces 3 calls of the
loss's forward+backward with JAX's profiler and prints the N XLA ops that took longest (ms per call,
runs per call, the op's result shape, opcode and the model code it came from, from the compiled
HLO's metadata; loops and calls are left out, their bodies' ops count): where the step's time goes
below the parts. The last line is JSON {"<part>_fwd_ms", "<part>_fwd_bwd_ms", "packed_steps"} for
the parts loss, text, text_decoder, start_cnn (with --ops also "top_ops": [{"op", "ms_per_call",
"runs_per_call", "shape", "opcode", "source"}]).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import jax
import jax.numpy as jnp

from benchmarks import profile_step
from benchmarks.bench_gru import timed_ms
from benchmarks.bench_train import load_config

REPO = Path(__file__).resolve().parents[1]


def top_ops(compiled, args, count: int, calls: int = 3) -> list[dict]:
    """The `count` ops of `compiled` (a `jax.stages.Compiled`) that took longest over `calls` calls
    traced by JAX's profiler: the trace's events named as the compiled HLO's instructions
    (`benchmarks.profile_step.hlo_ops`, `op_times`)."""
    ops = profile_step.hlo_ops(compiled.as_text())
    events = profile_step.trace_events(lambda: compiled(*args), calls)
    return profile_step.op_times(events, ops, calls)[:count]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default="configs/cpu_experiment.py:mc")
    parser.add_argument("--corpus", default="@mdc")
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--ops", type=int, default=0, help="also list the N XLA ops of the loss's forward+backward "
                        "that took longest (JAX's profiler)")
    args, overrides = parser.parse_known_args()
    bad = [o for o in overrides if not o.startswith("--config.")]
    if bad:
        parser.error(f"unknown argument {bad[0]} (overrides are --config.<field>=value)")
    if args.ops < 0:
        parser.error(f"--ops {args.ops}: expected a number of ops >= 0")

    from bapjax.corpus import mdc
    from bapjax.data import input_pipeline
    from bapjax.models import builder, world_input
    from bapjax.text.vocab import Vocabulary

    config = load_config(args.config, REPO, overrides)
    if config.model.get("name", "per_step") != "once":
        raise SystemExit(f"error: --config {args.config}: config.model.name is not 'once' (the model this "
                         "profile splits into parts)")
    train_items = list(mdc.load_corpus(args.corpus).split("train"))
    vocab = Vocabulary.build(train_items)
    feature_config = input_pipeline.FeatureConfig.from_config(config)
    features = input_pipeline.featurize_items(train_items[:2048], vocab, feature_config)
    model = builder.build_model(config.model, vocab.size)
    host_batch = next(input_pipeline.DataIterator(features, None, feature_config, args.batch, seed=0))
    batch = {k: jnp.asarray(v) for k, v in host_batch.items()}
    packed = builder.packed_size(host_batch["action_mask"], host_batch["weight"])
    params = builder.init_params(model, jax.random.PRNGKey(0))

    def squares(tree):
        return sum((x.astype(jnp.float32) ** 2).sum() for x in jax.tree_util.tree_leaves(tree))

    def loss(p, b):
        logits, pack = model.apply({"params": p}, b, packed)
        return builder.loss_from_logits(logits, pack)[0]

    def text(p, b):
        return squares(model.apply({"params": p}, b[model.text_key], b["text_mask"], method=model.encode_text))

    def text_decoder(p, b):
        def run(m, b):
            token_states, summary = m.encode_text(b[m.text_key], b["text_mask"])
            actions = b["actions"].astype(jnp.int32)
            prev = jnp.concatenate([jnp.full((actions.shape[0], 1), builder.START, jnp.int32), actions[:, :-1]], 1)
            state = m.init_decoder(summary, token_states, b["text_mask"], actions.shape[1])
            return m.decoder_sequence(state, prev, token_states, b["text_mask"]), summary
        return squares(model.apply({"params": p}, b, method=run))

    def start_cnn(p, b):
        def run(m, b):
            summary = jnp.zeros((b["actions"].shape[0], m.text.hidden))
            return m.encode_starts(world_input.start_world(b), summary)
        return squares(model.apply({"params": p}, b, method=run))

    result, grads = {"packed_steps": packed}, {}
    for name, fn in (("loss", loss), ("text", text), ("text_decoder", text_decoder), ("start_cnn", start_cnn)):
        grads[name] = jax.jit(jax.grad(fn)).lower(params, batch).compile()
        result[f"{name}_fwd_ms"] = round(timed_ms(jax.jit(fn), params, batch, repeats=5), 2)
        result[f"{name}_fwd_bwd_ms"] = round(timed_ms(grads[name], params, batch, repeats=5), 2)
        print(f"{name:13s} forward {result[f'{name}_fwd_ms']:7.1f} ms   forward+backward "
              f"{result[f'{name}_fwd_bwd_ms']:7.1f} ms", flush=True)
    rest = result["loss_fwd_bwd_ms"] - result["text_decoder_fwd_bwd_ms"] - result["start_cnn_fwd_bwd_ms"]
    print(f"rest (change convolution, head, loss): {rest:.1f} ms of {result['loss_fwd_bwd_ms']:.1f}; "
          f"batch {args.batch}, {packed} packed steps")
    if args.ops > 0:
        result["top_ops"] = top_ops(grads["loss"], (params, batch), args.ops)  # the program timed above
        print(f"the loss's forward+backward: its {args.ops} longest XLA ops (ms per call, runs per call)")
        for op in result["top_ops"]:
            print(f"  {op['ms_per_call']:7.2f} ms x{op['runs_per_call']:<4d} {op['op']:28s} {op['opcode']:12s} "
                  f"{op['shape'][:40]:40s} {op['source']}")
    print(json.dumps(result))


if __name__ == "__main__":
    sys.exit(main())
