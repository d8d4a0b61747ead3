"""Why greedy predictions are short: the STOP decision of a trained checkpoint, on val.

    python -m bapjax.analysis.stop_rule --checkpoint runs/cpu [--split val] [--limit 0] [--out results/stop_rule_cpu.json]

Teacher forcing over the gold sequences gives, at every gold step that is an *action*, the
model's p(STOP), its most likely single feasible action, and p(continue) = the summed
probability of the feasible actions. Greedy argmax stops there whenever p(STOP) beats every
single action; the "mass" rule stops only when p(STOP) >= p(continue). The script counts how
often each rule stops too early on the gold path, then decodes the split with both rules and
scores them (v2 tables), reporting mean predicted vs reference length. The last line is JSON.
"""

from __future__ import annotations

import argparse
import functools
import json
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

from bapjax import paths
from bapjax.corpus import mdc
from bapjax.data import input_pipeline
from bapjax.evaluation import evaluator
from bapjax.models import builder, world_input
from bapjax.training import checkpoints, decode, metric_writer
from bapjax.world import grid as G


def gold_path_stop_stats(model, params, items, vocab, feature_config, batch_size=32) -> dict:
    """Counts over gold action steps (and gold STOP steps) of what each rule would do."""
    table = input_pipeline.featurize_items(items, vocab, feature_config)

    @functools.partial(jax.jit, static_argnums=2)
    def step_probs(params, batch, num_packed):
        logits, pack = model.apply({"params": params}, batch, num_packed)
        grids = world_input.worlds_before_each_step(world_input.start_world(batch), batch["actions"])["grid"]
        feasible = jax.vmap(G.feasible_mask_single)(grids[pack["item"], pack["step"]])
        logp = jax.nn.log_softmax(logits.astype(jnp.float32))
        action_logp = jnp.where(feasible[:, :G.STOP], logp[:, :G.STOP], -jnp.inf)
        return {"stop": jnp.exp(logp[:, G.STOP]), "best_action": jnp.exp(action_logp.max(-1)),
                "continue": jnp.exp(jax.nn.logsumexp(action_logp, -1)), "target": pack["targets"],
                "weight": pack["weights"]}

    stats = {"gold_action_steps": 0, "argmax_stops_early": 0, "mass_stops_early": 0,
             "gold_stop_steps": 0, "argmax_stops_at_gold_stop": 0, "mass_stops_at_gold_stop": 0}
    p_stop_on_actions = []
    for lo in range(0, len(items), batch_size):
        rows = np.arange(lo, min(lo + batch_size, len(items)))
        rows = np.concatenate([rows, np.full(batch_size - len(rows), table.padding_row)])
        batch = input_pipeline.expand_batch(table, rows, feature_config)
        k = builder.packed_size(batch["action_mask"], batch["weight"], 32)
        out = jax.device_get(step_probs(params, batch, k))
        real = out["weight"] > 0
        is_stop = out["target"] == G.STOP
        argmax_stop = out["stop"] > out["best_action"]
        mass_stop = out["stop"] >= out["continue"]
        act, stp = real & ~is_stop, real & is_stop
        stats["gold_action_steps"] += int(act.sum())
        stats["argmax_stops_early"] += int((act & argmax_stop).sum())
        stats["mass_stops_early"] += int((act & mass_stop).sum())
        stats["gold_stop_steps"] += int(stp.sum())
        stats["argmax_stops_at_gold_stop"] += int((stp & argmax_stop).sum())
        stats["mass_stops_at_gold_stop"] += int((stp & mass_stop).sum())
        p_stop_on_actions.extend(out["stop"][act].tolist())
    stats["mean_p_stop_on_gold_actions"] = float(np.mean(p_stop_on_actions))
    return stats


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--checkpoint", required=True)
    parser.add_argument("--corpus", default=paths.MDC, help="the MDC (default: found by bapjax.paths.mdc_path)")
    parser.add_argument("--split", default="val")
    parser.add_argument("--limit", type=int, default=0)
    parser.add_argument("--out", default="")
    args = parser.parse_args()

    run = checkpoints.load_run(args.checkpoint)
    model, params, config, vocab = run.model, run.params, run.config, run.vocab
    feature_config = input_pipeline.FeatureConfig.from_config(config)
    items = list(mdc.load_corpus(args.corpus).split(args.split))
    if args.limit:
        items = items[:args.limit]
    result = {"checkpoint": args.checkpoint, "split": args.split, "items": len(items),
              "reference_mean_length": float(np.mean([len(it.reference_actions) for it in items]))}
    result["gold_path"] = gold_path_stop_stats(model, params, items, vocab, feature_config)
    print(json.dumps(result["gold_path"]), flush=True)
    for rule in decode.STOP_RULES:
        settings = decode.DecodeSettings.from_eval_config(config.eval).replace(stop_rule=rule, stop_threshold=0.5)
        predictions = decode.predict_items(model, params, items, vocab, feature_config, settings)
        report = evaluator.evaluate_predictions(items, predictions)
        result[rule] = {"mean_predicted_length": float(np.mean([len(a) for a in predictions.values()])),
                        **metric_writer.report_scalars(args.split, report)}
        print(f"{rule}: {json.dumps(result[rule])}", flush=True)
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps(result))


if __name__ == "__main__":
    main()
