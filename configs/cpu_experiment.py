"""The paper's experiment (Tables 4-5) at CPU scale: M_mc vs M_agg vs M_agg+cl, one narrow model, seeds.

Differs from the defaults: the CPU "frame" model (`common.cpu_frame_model`; "once", "film" by argument) in
the Builder's frame, the newest 128 dialogue tokens, the simulated sets at Table 3 sizes (tested only for
mc), a fixed item budget (`TRAIN_ITEMS`: cosine schedule, lr 2e-3), the checkpoint of best decoded MDC val F1
under a weights average (ema 0.999), a stop after two evals without a better one (mc's val F1 peaks at its
second eval: its runs stop at 4,800 steps with the same kept checkpoint and predictions, 0.83x the minutes;
no agg or cl_la run in results/ would have stopped), the STOP rule chosen on MDC val, then 32 draws
(`eval.samples`); cl: curriculum D (cl_la: L_A; cl_mc: the MDC in every stage), 10 buckets.
Command: python -m bapjax.train --config=configs/cpu_experiment.py:<variant>[,<seed>][,<model>]   (runs/exp/<variant>-<model>-s<seed>)
Runtime: 16.3-19.7 min per run on a 2-core host, alone (results/cpu_experiment_host2.md); 34-43 min on the earlier
collection's slower host (results/cpu_experiment_runs.md). Both measured with one decoding pass per draw; draws
decoded together with today's sampler decode 2.9x the item-passes per second (results/bench_draws_agg_member.json).
Result: MDC test micro Overall, seed means on the 2-core host: mc 26.9 (8), agg 30.0 (8), cl_la 29.6 (8)
(results/cpu_experiment_host2.md); the earlier collection: mc 27.0, agg 30.3, cl 28.7, cl_mc 28.0, cl_la 30.1.
Evidence for each choice, and the collection's command: docs/results.md ("What the models score now").
With --config.eval.vote_samples=64 a run also tries, on MDC val, a vote over 64 of its draws (one rule per kind
of board) and keeps it if it wins: agg 31.9 over 4 seeds against 29.4 for the same checkpoints' own decoding,
+2.5 [+1.7, +3.3], about 1.6 more minutes of decoding on a host half as fast as the 2-core one above
(results/cpu_run_vote64_host4.md); 31.8 over 6 seeds, seed SD 1.0 (results/cpu_run_vote64_host4_6seeds.md).
Add --config.eval.samples=0 with it: the 32 draws at T 0.5 never beat the vote on val, and skipping them
saves ~0.7 of those minutes there with the same choice (results/bench_vote_choice_samples0.json). And
--config.eval.vote_rules=select:0.075,vote:0.175 fixes the vote's rules at the six agg runs' pooled val best
(results/ensemble_rules_agg_vote64.md): those runs' test decoded so, 32.1, seed SD 0.6 against 1.0
(results/cpu_run_vote64_fixed_host4.md); with --config.eval.length_quantiles=() too (the vote's draws then
sample their length) eight agg seeds 32.0, seed SD 0.6 (results/cpu_run_vote64_nolength_host4.md); cl_la with
all three, eight seeds, 32.3, seed SD 0.7 (results/cpu_cl_la_vote.md). Not yet
the default: Table 5's runs have not been timed with the vote on the host they were collected on.

The argument: a variant of `VARIANTS` (mc: the augmented MDC training games; agg: + D_bs, D_ss, D_r,
shuffled; cl, cl_la, cl_mc: agg with a curriculum), a seed (default 0; it sets `config.seed` and the
simulators' seed) and a model of `MODELS` (default "frame"; "wide": the frame model at the paper's widths, for an
accelerator: on one H200, 94,400 items in a 1.5-minute training budget, 2.4 min in all with warm caches, MDC test
30.2-31.3 greedy, results/gpu/README.md). Add the synthetic test splits with
`--config.eval.final_splits="('mc:test','bs:test','ss:test','r:test')"`.
"""

from bapjax.training import run_config
from configs import common

VARIANTS = ("mc", "agg", "cl", "cl_la", "cl_mc")
MODELS = {"frame": common.cpu_frame_model, "once": common.cpu_once_model, "film": common.cpu_film_model,
          "wide": common.wide_frame_model}  # the first is the default; "wide": frame at the paper's widths (accelerators)
FEATURES = {"frame": {"builder_frame": True}}  # a model's feature settings beside the newest 128 tokens
# items per variant and model (the same for every variant): frame and once 6,000 steps of 32; film 1,500 steps
TRAIN_ITEMS = {"frame": 192_000, "once": 192_000, "film": 48_000}
FEATURES["wide"], TRAIN_ITEMS["wide"] = FEATURES["frame"], TRAIN_ITEMS["frame"]  # the frame model at other widths


def get_config(arg: str = "cl"):
    variant, *rest = arg.split(",")
    seeds = [t for t in rest if t.isdigit()]
    models = [t for t in rest if not t.isdigit()]
    if variant not in VARIANTS or len(seeds) > 1 or len(models) > 1 or any(m not in MODELS for m in models):
        raise ValueError(f"configs/cpu_experiment.py:{arg}: expected <variant>[,<seed>][,<model>] with a variant "
                         f"of {', '.join(VARIANTS)}, a seed >= 0 and a model of {', '.join(MODELS)}")
    seed = int(seeds[0]) if seeds else 0
    model = models[0] if models else next(iter(MODELS))
    config = run_config.base_config()
    config.seed = seed
    config.workdir = f"runs/exp/{variant}-{model}-s{seed}"  # runs of one model group by seed
    config.model = MODELS[model]()
    config.features.max_text_tokens = 128  # the newest 128 dialogue tokens
    config.features.update(FEATURES.get(model, {}))

    max_steps = TRAIN_ITEMS[model] // config.train.batch_size
    config.train.update(dict(
        num_epochs=100,  # never the limit: max_steps is
        max_steps=max_steps,
        learning_rate=2e-3,
        schedule="cosine",  # linear warmup, then cosine to final_lr_fraction x lr at the last step
        warmup_steps=50,
        ema_decay=0.999,  # evals, checkpoint choice and decoding use the weights' moving average
        select_by="mc_val_overall_micro_f1",  # checkpoints/best: the best decoded MDC val F1
        patience=2,  # two evals without a better select_by end the run (docs/results.md, "Early stopping")
        eval_every_steps=max_steps // 5,  # five evals (val loss, decoded MDC val F1 on every MDC val item)
        log_every_steps=10,
    ))

    config.eval.val_decode_sources = ("mc",)  # the MDC's val items only: select_by reads nothing else
    config.eval.stop_thresholds = (0.2, 0.3, 0.4)  # with argmax: 4 candidates, decoded on MDC val
    config.eval.stop_rule_val = "mc"
    # then the chosen rule with minimum-Bayes-risk selection among it and 32 draws per item at
    # temperature 0.5 (bapjax.training.mbr), kept if it wins on MDC val at one of the default costs
    config.eval.samples = 32

    config.data.sources.mc = run_config.mdc_source(augment=True)
    for name, (train, val, test) in run_config.PAPER_SIZES.items():
        source = run_config.generated_source(name, train, val, test, seed=seed)
        source.max_val_items = 300  # val loss stays affordable
        source.splits = ("test",) if variant == "mc" else ("train", "val", "test")  # M_mc: tested only
        config.data.sources[name] = source
    if variant.startswith("cl"):
        config.curriculum.metric = "L_A" if variant == "cl_la" else "D"  # 10 buckets (the default)
    if variant == "cl_mc":
        config.curriculum.every_stage = ("mc",)
    return config
