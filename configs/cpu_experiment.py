"""The paper's experiment (Tables 4-5) at CPU scale: M_mc vs M_agg vs M_agg+cl, one narrow model, seeds.

Differs from the defaults: the CPU "frame" model (`common.cpu_frame_model`; "once", "film" by argument) in
the Builder's frame, the newest 128 dialogue tokens, the simulated sets at Table 3 sizes (tested only for
mc), a fixed item budget (`TRAIN_ITEMS`: cosine schedule, lr 2e-3), the checkpoint of best decoded MDC val F1
under a weights average (ema 0.999), a stop after two evals without a better one (mc's val F1 peaks at its
second eval: its runs stop at 4,800 steps with the same kept checkpoint and predictions, 0.83x the minutes;
no agg or cl_la run in results/ would have stopped), the STOP rule chosen on MDC val (argmax, or mass at three
thresholds), then a vote over 64 draws per item at T 0.8 with one rule for the items on an empty board and one
for the others fixed at six agg runs' pooled val best (EB select 0.075, NEB vote 0.175;
results/ensemble_rules_agg_vote64.md), kept where it beats the greedy rows on MDC val (it did in every run of
results/cpu_experiment.md); cl: curriculum D (cl_la: L_A; cl_mc: the MDC in every stage), 10 buckets.
Command: python -m bapjax.train --config=configs/cpu_experiment.py:<variant>[,<seed>][,<model>]   (runs/exp/<variant>-<model>-s<seed>)
Runtime: 24.5-35.7 min per run, alone, on 2-core hosts whose train step ran at 104-130 items/s at batch 32
(`python -m benchmarks.bench_train --config configs/cpu_experiment.py:agg --fixed_length 5 --decode_items 200`),
about 3 of them decoding (results/cpu_experiment.md); with `cpu_devices` 4: 32.4 min (cl_la,8), on a host whose
one-device train step ran 113-121 items/s that hour, and 27.8 and 28.0 min (cl_la,9 then cl_la,10; 117 items/s). Not timed on the host of results/cpu_experiment_host2.md
(256.7 items/s), where runs with the earlier decoding (the best of greedy and 32 draws at T 0.5:
--config.eval.samples=32 --config.eval.vote_samples=0 "--config.eval.length_quantiles=(0.5,0.6,0.7,0.8)") took
16.3-19.7 min. A seed run after another on the same machine reads its train-step, eval-step and decoder
programs from the compilation cache (cl_la,10 after cl_la,9: 20.5 s of XLA compiling against 118.7): the models
round the embedding table to one size for every seed (docs/results.md, "One embedding table size for every seed").
Result: MDC test micro Overall, seed means: mc 29.5 (6 seeds), agg 32.3 (7), cl_la 32.4 (11); agg - mc
+2.8 [+1.7, +3.9], cl_la - agg +0.1 [-0.7, +0.9] (results/cpu_experiment.md); with the earlier decoding mc 26.9, agg 30.0, cl_la 29.6
(8 seeds each, results/cpu_experiment_host2.md); the first collection, five variants: results/cpu_experiment_earlier.md.
Evidence for each choice, and the collection's command: docs/results.md ("What the models score now").

The argument: a variant of `VARIANTS` (mc: the augmented MDC training games; agg: + D_bs, D_ss, D_r,
shuffled; cl, cl_la, cl_mc: agg with a curriculum), a seed (default 0; it sets `config.seed` and the
simulators' seed) and a model of `MODELS` (default "frame"; "wide": the frame model at the paper's widths, for an
accelerator: on one H200, 94,400 items in a 1.5-minute training budget, 2.4 min in all with warm caches, MDC test
30.2-31.3 greedy, results/gpu/README.md). Add the synthetic test splits with
`--config.eval.final_splits="('mc:test','bs:test','ss:test','r:test')"`.
"""

from bapjax.training import run_config
from configs import common

VARIANTS = ("mc", "agg", "cl", "cl_la", "cl_mc", "bs", "ss", "r")
SINGLE_SETS = ("bs", "ss", "r")  # Table 4's M_bs, M_ss, M_r: one simulated set alone, chosen on its own val
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
    config.cpu_devices = 4  # a CPU host as 4 XLA devices, data-parallel (results/bench_cpu_devices_agg.json)
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
        patience=2,  # two evals without a better select_by end the run (docs/results.md, "Early stopping")
        eval_every_steps=max_steps // 5,  # five evals (val loss, decoded MDC val F1 on every MDC val item)
        log_every_steps=10,
    ))

    # the set whose val split picks the checkpoint, the STOP rule and the vote: the MDC's, or a single set's own
    chosen_on = variant if variant in SINGLE_SETS else "mc"
    config.train.select_by = f"{chosen_on}_val_overall_micro_f1"
    config.eval.val_decode_sources = (chosen_on,)  # select_by reads nothing else
    config.eval.stop_thresholds = (0.2, 0.3, 0.4)  # with argmax: 4 candidates, decoded on the chosen val split
    # no STOP rule "length": it fixes every draw's length at one quantile, where the vote's draws sample theirs
    config.eval.length_quantiles = ()
    config.eval.stop_rule_val = chosen_on
    # then a vote over 64 draws per item at T 0.8 with the rules fixed at agg's pooled val best, kept if it
    # beats the greedy rows on the chosen val split; no selection among 32 draws at T 0.5, which never won
    config.eval.samples = 0
    config.eval.vote_samples = 64
    config.eval.vote_rules = "select:0.075,vote:0.175"
    config.eval.final_splits = ("mc:test", "bs:test", "ss:test", "r:test")  # Tables 4 and 5: all four test sets

    trained = {variant} if variant in SINGLE_SETS else {"bs", "ss", "r"} if variant != "mc" else set()
    config.data.sources.mc = run_config.mdc_source(augment=True)
    if variant in SINGLE_SETS:
        config.data.sources.mc.splits = ("test",)  # M_bs, M_ss, M_r: the MDC tested only
    for name, (train, val, test) in run_config.PAPER_SIZES.items():
        source = run_config.generated_source(name, train, val, test, seed=seed)
        source.max_val_items = 300  # val loss stays affordable
        source.splits = ("train", "val", "test") if name in trained else ("test",)  # a set not trained on: tested only
        config.data.sources[name] = source
    if variant.startswith("cl"):
        config.curriculum.metric = "L_A" if variant == "cl_la" else "D"  # 10 buckets (the default)
    if variant == "cl_mc":
        config.curriculum.every_stage = ("mc",)
    return config
