"""The paper's experiment (Tables 4-5) at CPU scale: M_mc vs M_agg vs M_agg+cl, one model, seeds.

    python -m bapjax.train --config=configs/cpu_experiment.py:agg,0    # workdir runs/exp/agg-once-s0
    python -m bapjax.train --config=configs/cpu_experiment.py:cl,1     # and mc, cl_mc, cl_la; seeds 0, 1, ...
    python -m bapjax.analysis.collect_experiment results/runs/mc-once-tok128-s{0,1} results/runs/agg-once-tok128-s{0,1,2} \
      results/runs/cl-once-tok128-s{0,1} results/runs/cl_mc-once-tok128-s{0,1} --out results/cpu_experiment

The argument is `<variant>[,<seed>][,<model>]` (seed 0 by default); the seed sets `config.seed`
(data order, initialization) and the simulators' seed (the synthetic corpora), so two seeds of a
variant differ in everything that is drawn at random except the MDC augmentation. The model is
one of `MODELS`: "once" (the default since issue 32, `common.cpu_once_model`: one world encoding
per item, chosen on MDC val: M_agg 22.5 micro Overall, mean of its seeds' STOP-rule choices on
all 1,331 val items, against the per-step model's best variant M_mc 19.7) or "film"
(`common.cpu_film_model`: the per-step model of the earlier experiment, e.g.
`--config=configs/cpu_experiment.py:mc,0,film`); the workdir is `runs/exp/<variant>-<model>-s<seed>`.

* mc: the augmented MDC training games (14,836 items);
* agg: the same plus D_bs, D_ss, D_r simulated at Table 3 sizes (52,419 training items), shuffled;
* cl: agg with the paper's curriculum (metric D, 10 buckets, then all data);
* cl_la: the ablation with metric L_A (reference-action count) instead of D;
* cl_mc: cl with the MDC items in every stage at their share (`curriculum.every_stage`), since
  with metric D the MDC (the hardest set) enters the paper's curriculum only in its last stages.

Every variant has the same model, optimizer and schedule (learning rate 2e-3, chosen on MDC val
with FiLM: results/cpu_ablation.md), and trains on exactly TRAIN_ITEMS[model] items
(`train.max_steps`; no early stopping), so machine load cannot change a result; every eval
decodes all val items, the weights are averaged (`train.ema_decay` 0.999) and the final
evaluation uses the checkpoint with the best decoded MDC val micro Overall F1 (`train.select_by`;
both chosen on MDC val in issue 32's fourth session), the STOP rule chosen on MDC val alone
(`eval.stop_rule_val`), and every MDC test item (1,616) plus each synthetic test split. The
collections before that (results/cpu_experiment_lossrule.md, cpu_experiment_film.md) ran with
`--config.train.select_by=loss --config.train.ema_decay=0 --config.eval.val_decode_items=128`.
Since issue 32's fifth session the dialogue window is the newest 128 tokens
(`features.max_text_tokens`; equal on MDC val to 256, chosen there: docs/results.md, "Session 5: a
shorter dialogue window"; the text GRU is a third of the step). results/cpu_experiment.* is this
config's collection (session 6: every variant's seeds average 21.4 strict on MDC test);
results/cpu_experiment_tokens256.* (session 4) ran with `--config.features.max_text_tokens=256`.

Runtime on the 2-core CPU of this workspace, one run at a time (docs/results.md, "One world
encoding per item"): the once model's 192,000 items (6,000 steps), five evals each decoding every
val item, the STOP-rule choice and the final decodes, took agg,0 16.6 min, agg,1 16.2, agg,2 17.2,
cl,0 16.9, cl,1 17.5, mc,1 17.3 (quiet, ~190-200 items/s), mc,0 20.8 (beside a CI run). With the
earlier checkpoint rule (128 val items decoded per eval): 15.7-23.7 min. As configured now (128
tokens, evals decoding MDC val only): 14.7-15.9 min per run (results/cpu_experiment.md: mc 15.1,
14.7; agg 15.9, 15.0, 14.9; cl 15.0, 15.1; cl_mc 15.7, 15.5). The film model's 48,000 items (1,500 steps) took 29-41
min (docs/results.md, "The experiment with the chosen CPU model"). Two trainings at once are
slower in total than one after the other.
"""

from bapjax.training import run_config
from configs import common, cpu

VARIANTS = ("mc", "agg", "cl", "cl_la", "cl_mc")
MODELS = {"once": common.cpu_once_model, "film": common.cpu_film_model}  # the first is the default
# items per variant and model (the same for every variant): once 6,000 steps of 32 (15-16 min on this
# 2-core CPU, one run at a time); film 1,500 steps (~40 min)
TRAIN_ITEMS = {"once": 192_000, "film": 48_000}


def get_config(arg: str = "cl"):
    variant, *rest = arg.split(",")
    seeds = [t for t in rest if t.isdigit()]
    models = [t for t in rest if not t.isdigit()]
    if variant not in VARIANTS or len(seeds) > 1 or len(models) > 1 or any(m not in MODELS for m in models):
        raise ValueError(f"configs/cpu_experiment.py:{arg}: expected <variant>[,<seed>][,<model>] with a variant "
                         f"of {', '.join(VARIANTS)}, a seed >= 0 and a model of {', '.join(MODELS)}")
    seed = int(seeds[0]) if seeds else 0
    model = models[0] if models else next(iter(MODELS))
    config = cpu.get_config()
    config.model = MODELS[model]()
    config.seed = seed
    config.workdir = f"runs/exp/{variant}-{model}-s{seed}"  # runs of one model group by seed
    config.train.num_epochs = 100  # never the limit: max_steps is
    config.train.max_steps = TRAIN_ITEMS[model] // config.train.batch_size
    config.train.time_budget_minutes = 0.0  # the item budget, not wall time, ends training
    config.train.learning_rate = 2e-3  # chosen on MDC val with FiLM (results/cpu_ablation.md: 18.7 vs 15.3 at 1e-3)
    config.train.patience = 0
    config.train.eval_every_steps = config.train.max_steps // 5  # five evals (val loss, decoded val F1)
    # Chosen on MDC val in session 4 of issue 32 (docs/results.md, "Checkpoints by decoded MDC val F1,
    # weights averaged"): the checkpoint with the best decoded MDC val micro Overall F1 (M_mc's val loss
    # rises from its first eval while its F1 climbs), evaluated with a moving average of the weights.
    # The collections before it ran with select_by "loss", ema_decay 0 and val_decode_items 128.
    config.train.select_by = "mc_val_overall_micro_f1"
    config.train.ema_decay = 0.999
    config.features.max_text_tokens = 128  # the newest 128 dialogue tokens: equal to 256 on MDC val, ~1.2x the items/s
    config.eval.val_decode_items = 0  # every val item at each eval (select_by reads MDC's)
    # only MDC's: select_by reads nothing else (the runs of results/cpu_experiment_tokens256.* also
    # decoded the 900 synthetic val items at each eval; the same training and checkpoints, longer evals)
    config.eval.val_decode_sources = ("mc",)
    config.eval.stop_thresholds = (0.2, 0.3, 0.4)  # with argmax: 4 candidates, decoded on MDC val
    config.eval.stop_rule_val = "mc"
    for name, (train, val, test) in run_config.PAPER_SIZES.items():
        source = run_config.generated_source(name, train, val, test, seed=seed)
        source.max_val_items = 300  # val loss stays affordable
        source.splits = ("test",) if variant == "mc" else ("train", "val", "test")  # M_mc: tested only
        config.data.sources[name] = source
    config.eval.final_splits = ("mc:test", "bs:test", "ss:test", "r:test")
    if variant.startswith("cl"):
        config.curriculum.metric = "L_A" if variant == "cl_la" else "D"
        config.curriculum.num_buckets = 10
    if variant == "cl_mc":
        config.curriculum.every_stage = ("mc",)
    return config
