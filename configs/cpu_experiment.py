"""The paper's experiment (Tables 4-5) at CPU scale: M_mc vs M_agg vs M_agg+cl, one model, seeds.

    nice -n 5 python -m bapjax.train --config=configs/cpu_experiment.py:mc --workdir=runs/exp/mc-s0
    nice -n 5 python -m bapjax.train --config=configs/cpu_experiment.py:agg --workdir=runs/exp/agg-s0
    nice -n 5 python -m bapjax.train --config=configs/cpu_experiment.py:cl --workdir=runs/exp/cl-s0
    nice -n 5 python -m bapjax.train --config=configs/cpu_experiment.py:cl,1 --workdir=runs/exp/cl-s1
    nice -n 5 python -m bapjax.train --config=configs/cpu_experiment.py:cl_mc,1 --workdir=runs/exp/cl_mc-s1
    python benchmarks/collect_experiment.py runs/exp/mc-s0 runs/exp/mc-s1 runs/exp/agg-s0 ...

The argument is `<variant>[,<seed>][,<model>]` (seed 0 by default); the seed sets `config.seed`
(data order, initialization) and the simulators' seed (the synthetic corpora), so two seeds of a
variant differ in everything that is drawn at random except the MDC augmentation. The model is
one of `MODELS`: "film" (the default, `common.cpu_film_model`) or "once" (`common.cpu_once_model`:
the same with one world encoding per item, issue 32; workdir `runs/exp/<variant>-once-s<seed>`),
e.g. `--config=configs/cpu_experiment.py:mc,0,once`.

* mc: the augmented MDC training games (14,836 items);
* agg: the same plus D_bs, D_ss, D_r simulated at Table 3 sizes (52,419 training items), shuffled;
* cl: agg with the paper's curriculum (metric D, 10 buckets, then all data);
* cl_la: the ablation with metric L_A (reference-action count) instead of D;
* cl_mc: cl with the MDC items in every stage at their share (`curriculum.every_stage`), since
  with metric D the MDC (the hardest set) enters the paper's curriculum only in its last stages.

Every variant has the CPU model chosen on MDC val (`common.cpu_film_model`: configs/cpu.py's
narrow model with FiLM-conditioned world-CNN layers, learning rate 2e-3; results/cpu_ablation.md),
the same optimizer and schedule, and trains
on exactly TRAIN_ITEMS[model] items (`train.max_steps`; no early stopping), so machine load cannot
change a result; the final evaluation uses the checkpoint with the lowest val loss, the STOP rule
chosen on MDC val alone (`eval.stop_rule_val`), and every MDC test item (1,616) plus each
synthetic test split.

Runtime, measured on the 2-core CPU of this workspace with this model (one run at a time, at
encode_chunk 4, the CPU default until e413518; docs/results.md, "The experiment with the chosen
CPU model"): mc,0 41.3 min, agg,0 39.0 min, cl,0 40.1 min (light `nice -n 19` work beside them),
mc,1 34.8 min, agg,1 28.9 min, cl,1 37.1 min (quiet), cl_mc,0 37.8 min, cl_mc,1 39.5 min, each =
1,500 steps at 21-31 items/s, five evals with val loss and decoded val F1, the STOP-rule choice
on MDC val (~2 min) and the final decode of the four test splits (~2 min). (configs/cpu.py's
model without FiLM at lr 1e-3 took ~25 min at c506d54.) Two trainings at once are slower in
total than one after the other.

The once model (issue 32; docs/results.md, "One world encoding per item"), 192,000 items each:

    python -m bapjax.train --config=configs/cpu_experiment.py:agg,0,once   # workdir runs/exp/agg-once-s0
    python benchmarks/collect_experiment.py results/runs/mc-once-s0 results/runs/agg-once-s0 ... \
      --out results/cpu_experiment_once

took agg,0 22.7 min, cl,0 16.8 min, mc,0 19.6 min (beside a CI run), agg,1 17.0, cl,1 17.8, mc,1
17.1 min (quiet), cl,2 23.5 min (beside a CI run) on the same kind of machine: 6,000 steps at ~100-150 items/s, five evals, the
STOP-rule choice and the final decodes.
"""

from bapjax import run_config
from configs import common, cpu

VARIANTS = ("mc", "agg", "cl", "cl_la", "cl_mc")
MODELS = {"film": common.cpu_film_model, "once": common.cpu_once_model}  # the first is the default
# items per variant and model (the same for every variant): film 1,500 steps of 32 (~40 min on this CPU);
# once 6,000 steps (~30 min of training at its ~110 items/s here: three runs fit one session)
TRAIN_ITEMS = {"film": 48_000, "once": 192_000}


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
    suffix = "" if model == next(iter(MODELS)) else f"-{model}"  # runs of one model group by seed
    config.workdir = f"runs/exp/{variant}{suffix}-s{seed}"
    config.train.num_epochs = 100  # never the limit: max_steps is
    config.train.max_steps = TRAIN_ITEMS[model] // config.train.batch_size
    config.train.time_budget_minutes = 0.0  # the item budget, not wall time, ends training
    config.train.learning_rate = 2e-3  # chosen on MDC val with FiLM (results/cpu_ablation.md: 18.7 vs 15.3 at 1e-3)
    config.train.patience = 0
    config.train.eval_every_steps = config.train.max_steps // 5  # five evals (val loss, decoded val F1)
    config.eval.val_decode_items = 128
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
