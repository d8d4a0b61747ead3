"""The paper's Tables 4-5 at CPU scale: M_mc, M_agg, M_agg+cl (cl, cl_la, cl_mc), M_bs, M_ss, M_r; cl_la distilled (kd_*).

Differs from the defaults: the CPU "frame" model in the Builder's frame, the newest 128 dialogue tokens, D_bs/D_ss/D_r at
Table 3 sizes, 192,000 items (cosine, lr 2e-3, EMA 0.999), the checkpoint of best decoded val F1 (the MDC's; a single set's
own), the STOP rule chosen there, then a 64-draw vote (rules fixed: EB select 0.075, NEB vote 0.175); all four test sets;
kd_la / kd_mix: cl_la with the augmented MDC's training targets from TEACHER (a pair's vote, `python -m bapjax.distil`)
in place of the references / beside them.
Command: python -m bapjax.train --config=configs/cpu_experiment.py:<variant>[,<seed>][,<model>]  (runs/exp/<variant>-<model>-s<seed>)
Runtime: 24.5-35.7 min per run on 2-core hosts at 104-130 items/s (python -m benchmarks.bench_train, batch 32).
Result: MDC test micro Overall mc 29.3 (9 seeds), agg 32.3 (10), cl_la 32.4 (14) (results/cpu_experiment.md); kd_la, kd_mix not run.
Evidence for each choice: docs/results.md.
"""

from bapjax.training import run_config
from configs import common

VARIANTS = ("mc", "agg", "cl", "cl_la", "cl_mc", "bs", "ss", "r", "kd_la", "kd_mix")
CURRICULA = {"cl": "D", "cl_mc": "D", "cl_la": "L_A", "kd_la": "L_A", "kd_mix": "L_A"}  # each variant's metric (10 buckets)
# kd_*: the MDC training targets of the pair decoded together (pretrained, i.e. cl_la seed 11, and cl_la seed 12;
# python -m bapjax.distil --runs pretrained,runs/exp/cl_la-frame-s12 --out runs/teacher/mc-train-pair)
TEACHER = "results/teacher/mc-train-pair"  # written by the command above (at c5dc094, 59.1 min), kept here
TEACHER_MODES = {"kd_la": "replace", "kd_mix": "mix"}  # kd_mix: each MDC item twice, the teacher's copy at weight 1
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
        patience=2,  # two evals without a better select_by end the run (docs/results.md, the evidence table)
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
    if variant in CURRICULA:
        config.curriculum.metric = CURRICULA[variant]  # 10 buckets (the default)
    if variant in TEACHER_MODES:
        config.data.sources.mc.teacher.update(dict(path=TEACHER, mode=TEACHER_MODES[variant]))
    if variant == "cl_mc":
        config.curriculum.every_stage = ("mc",)
    return config
