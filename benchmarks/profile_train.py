"""Where a training step's time goes, on the same real MDC batch: the whole compiled step; its
world part (CNN and per-cell head over the packed worlds, forward and backward, chunked as
training runs it); the CNN alone; and the text encoder with the action decoder (forward and
backward over the batch, as the step runs them); then one hidden CNN layer on the packed rows,
split into its im2col (forming the patch matrix) and its GEMM, and the layer forward and
backward. Each with the GFLOP/s XLA's cost analysis implies, beside a jitted fp32 matmul's GFLOP/s
measured in the same process.

    python benchmarks/profile_train.py [--config configs/cpu.py] [--rounds 5]

The rest of the step (gathering the packed worlds, AdamW) is the difference. XLA's cost analysis
counts a scan's body once, so the recurrent part's GFLOP are those of one token and one decoder
step: its GFLOP/s is a lower bound. The last line is JSON: {"step_s", "world_s", "cnn_s",
"rnn_s", "layer_im2col_s", "layer_gemm_s", "layer_fwd_bwd_s", ..._gflop, ..._gflops_per_s,
"matmul_gflops_per_s"}.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import optax
from bench_train import flops, matmul_gflops_per_s  # noqa: E402 (benchmarks/ is the script's directory)

import configs
from bapjax.corpus import mdc
from bapjax.data import input_pipeline
from bapjax.models import builder, world_cnn, world_input
from bapjax.text.vocab import Vocabulary
from bapjax.training import loop, sharding
from bapjax.training import optimizer as optim

REPO = Path(__file__).resolve().parents[1]


def best_time(fn, args, rounds: int) -> float:
    jax.block_until_ready(fn(*args))
    best = float("inf")
    for _ in range(rounds):
        start = time.perf_counter()
        jax.block_until_ready(fn(*args))
        best = min(best, time.perf_counter() - start)
    return best


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--config", default="configs/cpu.py")
    parser.add_argument("--corpus", default=str(REPO.parent / "shared" / "mdc"))
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    config = configs.load(args.config)
    corpus = mdc.load_corpus(args.corpus)
    items = list(corpus.split("train"))
    vocab = Vocabulary.build(items)
    fc = input_pipeline.FeatureConfig.from_config(config)
    features = input_pipeline.featurize_items(items[:512], vocab, fc)
    batch = next(input_pipeline.DataIterator(features, None, fc, 32, seed=0))
    config.train.schedule = "constant"
    optimizer = optim.make_optimizer(config.train)
    model = builder.build_model(config.model, vocab.size)
    if model.world_encoding != "per_step":
        print(f"error: --config {args.config}: model {model.world_encoding!r}; this profile splits the "
              "per-step world part (the CNN over every packed world), which that model does not run", file=sys.stderr)
        sys.exit(2)
    whole = model.unchunked()  # what XLA's cost analysis can count (see bench_scaling)
    mesh = sharding.data_mesh(jax.devices()[:1])
    state = sharding.replicate(loop.create_state(model, optimizer, jax.random.PRNGKey(0), None), mesh)
    trainer = loop.Trainer(model, optimizer, mesh)
    local, k = trainer.prepare(batch)
    out = {"pack": k, "targets": int(batch["action_mask"].sum())}

    step_flops = flops(loop.Trainer(whole, optimizer, mesh).compile_train(state, batch))
    live = {"state": state}  # the train step donates its state: each call takes the last one's

    def step():
        live["state"] = trainer.train(live["state"], batch)[0]
        return live["state"]["step"]

    out["step_s"] = best_time(step, (), args.rounds)
    state = live["state"]

    # The world part alone: the packed worlds and decoder outputs the step feeds it.
    params = state["params"]
    dev = {key: jnp.asarray(v) for key, v in local.items()}
    worlds = world_input.worlds_before_each_step(world_input.start_world(dev), dev["actions"].astype(jnp.int32))
    pack = builder.pack_steps(dev["action_mask"], dev["weight"], k)
    packed = jax.tree_util.tree_map(lambda x: x[pack["item"], pack["step"]], worlds)
    dec_out = jax.random.normal(jax.random.PRNGKey(1), (k, model.decoder.hidden), jnp.float32)
    targets = dev["actions"][pack["item"], pack["step"]].astype(jnp.int32)

    def world_loss(m):
        def loss(p, w, d):
            logits = m.apply({"params": p}, w, d, method=type(m).world_logits)
            return (optax.softmax_cross_entropy_with_integer_labels(logits, targets) * pack["weights"]).sum()
        return jax.jit(jax.grad(loss, argnums=(0, 2)))

    def cnn_loss(m):
        def loss(p, w, d):
            return m.apply({"params": p}, w, d, method=type(m).encode_world).sum()
        return jax.jit(jax.grad(loss, argnums=(0, 2)))

    def rnn_loss(m):  # text encoder and action decoder over the whole batch, as the step runs them
        actions = dev["actions"].astype(jnp.int32)
        prev = jnp.concatenate([jnp.full((actions.shape[0], 1), builder.START, jnp.int32), actions[:, :-1]], 1)

        def text_and_decoder(module, text, mask):
            token_states, summary = module.encode_text(text, mask)
            state0 = module.init_decoder(summary, token_states, mask, actions.shape[1])
            return module.decoder_sequence(state0, prev, token_states, mask)

        def loss(p, text, mask):
            return m.apply({"params": p}, text, mask, method=text_and_decoder).sum()
        return jax.jit(jax.grad(loss))

    for name, make in (("world", world_loss), ("cnn", cnn_loss)):
        fn = make(model)
        out[f"{name}_s"] = best_time(fn, (params, packed, dec_out), args.rounds)
        out[f"{name}_gflop"] = flops(make(whole).lower(params, packed, dec_out).compile()) / 1e9
    rnn_args = (params, dev[model.text_key], dev["text_mask"])
    rnn = rnn_loss(model)  # one jitted function, both timed and cost-analysed
    out["rnn_s"] = best_time(rnn, rnn_args, args.rounds)
    out["rnn_gflop"] = flops(rnn.lower(*rnn_args).compile()) / 1e9
    out["step_gflop"] = step_flops / 1e9

    # One hidden CNN layer on the packed rows, split into its im2col (forming the patch matrix)
    # and its GEMM (patches @ kernel), forward only, and the whole layer forward and backward.
    feats, ksize = model.world.features, model.world.kernel_size
    x = jax.random.normal(jax.random.PRNGKey(2), (k,) + packed["grid"].shape[1:] + (feats,), jnp.float32)
    kernel = jax.random.normal(jax.random.PRNGKey(3), (ksize ** 3 * feats, feats), jnp.float32) * 0.1
    im2col = jax.jit(lambda v: world_cnn.patches(v, ksize).reshape(-1, ksize ** 3 * feats))
    patch_matrix = jax.block_until_ready(im2col(x))
    gemm = jax.jit(lambda a, b: a @ b)
    layer = jax.jit(jax.grad(lambda v, w: jax.nn.relu(world_cnn.conv3d_im2col(v, w)).sum(), argnums=(0, 1)))
    out["layer_im2col_s"] = best_time(im2col, (x,), args.rounds)
    out["layer_gemm_s"] = best_time(gemm, (patch_matrix, kernel), args.rounds)
    out["layer_fwd_bwd_s"] = best_time(layer, (x, kernel.reshape((ksize,) * 3 + (feats, feats))), args.rounds)
    out["layer_patch_mb"] = round(patch_matrix.size * 4 / 1e6, 1)
    out["layer_gemm_gflop"] = 2 * patch_matrix.shape[0] * patch_matrix.shape[1] * feats / 1e9
    out["layer_gemm_gflops_per_s"] = round(out["layer_gemm_gflop"] / out["layer_gemm_s"], 1)
    out["layer_fwd_bwd_gflops_per_s"] = round(3 * out["layer_gemm_gflop"] / out["layer_fwd_bwd_s"], 1)
    for name in ("step", "world", "cnn", "rnn"):
        out[f"{name}_gflops_per_s"] = round(out[f"{name}_gflop"] / out[f"{name}_s"], 1)
    out["matmul_gflops_per_s"] = round(matmul_gflops_per_s(), 1)
    print(f"{args.config}: pack {k} ({out['targets']} targets) of a batch of 32")
    for name, label in (("step", "whole train step"), ("world", "world part (CNN + head, fwd+bwd)"),
                        ("cnn", "world CNN alone (fwd+bwd)"), ("rnn", "text GRU + action decoder (fwd+bwd)")):
        print(f"  {label:36s} {1e3 * out[f'{name}_s']:8.1f} ms  {out[f'{name}_gflop']:7.2f} GFLOP "
              f"{out[f'{name}_gflops_per_s']:7.1f} GFLOP/s  ({out[f'{name}_s'] / out['step_s']:.2f} of the step)")
    print(f"  one hidden CNN layer, {k} rows x {feats} -> {feats} features:")
    print(f"    im2col (the {out['layer_patch_mb']} MB patch matrix)  {1e3 * out['layer_im2col_s']:8.1f} ms")
    print(f"    GEMM patches @ kernel               {1e3 * out['layer_gemm_s']:8.1f} ms  "
          f"{out['layer_gemm_gflop']:7.2f} GFLOP {out['layer_gemm_gflops_per_s']:7.1f} GFLOP/s")
    print(f"    the layer fwd+bwd                   {1e3 * out['layer_fwd_bwd_s']:8.1f} ms  "
          f"{3 * out['layer_gemm_gflop']:7.2f} GFLOP {out['layer_fwd_bwd_gflops_per_s']:7.1f} GFLOP/s")
    print(f"  jitted fp32 2048^2 matmul: {out['matmul_gflops_per_s']:.1f} GFLOP/s")
    print(json.dumps(out))


if __name__ == "__main__":
    main()
