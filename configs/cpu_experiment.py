"""The paper's experiment (Tables 4-5) at CPU scale: M_mc vs M_agg vs M_agg+cl, one model.

    nice -n 5 python -m bapjax.train --config=configs/cpu_experiment.py:mc --workdir=runs/exp/mc
    nice -n 5 python -m bapjax.train --config=configs/cpu_experiment.py:agg --workdir=runs/exp/agg
    nice -n 5 python -m bapjax.train --config=configs/cpu_experiment.py:cl --workdir=runs/exp/cl
    nice -n 5 python -m bapjax.train --config=configs/cpu_experiment.py:cl_la --workdir=runs/exp/cl_la
    python benchmarks/collect_experiment.py runs/exp/mc runs/exp/agg runs/exp/cl runs/exp/cl_la

* mc: the augmented MDC training games (14,836 items);
* agg: the same plus D_bs, D_ss, D_r simulated at Table 3 sizes (52,419 training items), shuffled;
* cl: agg with the paper's curriculum (metric D, 10 buckets, then all data);
* cl_la: the ablation with metric L_A (reference-action count) instead of D.

Every variant has the narrow CPU model of configs/cpu.py, the same optimizer and schedule, and
trains on exactly TRAIN_ITEMS items (`train.max_steps`; no early stopping), so machine load
cannot change a result; the final evaluation uses the checkpoint with the lowest val loss, the
STOP rule chosen on val, and every MDC test item (1,616) plus each synthetic test split.

Runtime, measured on the 2-core CPU of this workspace (2026-11-22/23, one run at a time, `nice -n 5`,
augmented MDC and simulated data cached by an earlier run): mc 28.9 min (its first ~8 min shared the
CPU with another training), agg 24.8 min, cl 25.1 min, each = 1,500 steps at ~35-55 items/s, five
evals with val loss and decoded val F1 (~1 min each), the STOP-rule choice (~1.5 min) and the final
decode of the four test splits (~1.5 min). Two trainings at once are slower in total than one after
the other (each ran at ~19 items/s). Results: docs/results.md.
"""

from configs import common, cpu

TRAIN_ITEMS = 48_000  # per variant; 1,500 steps of 32 (the four variants and M'_agg+cl fit one 3-hour session)
VARIANTS = ("mc", "agg", "cl", "cl_la")


def get_config(variant: str = "cl"):
    if variant not in VARIANTS:
        raise ValueError(f"configs/cpu_experiment.py:{variant}: expected one of {', '.join(VARIANTS)}")
    config = cpu.get_config()
    config.workdir = f"runs/exp/{variant}"
    config.train.num_epochs = 100  # never the limit: max_steps is
    config.train.max_steps = TRAIN_ITEMS // config.train.batch_size
    config.train.time_budget_minutes = 0.0  # the item budget, not wall time, ends training
    config.train.patience = 0
    config.train.eval_every_steps = 300
    config.eval.val_decode_items = 128
    config.eval.stop_thresholds = (0.2, 0.3, 0.4)  # with argmax: 4 candidates, decoded on val
    for name, (train, val, test) in common.PAPER_SIZES.items():
        source = common.generated_source(name, train, val, test)
        source.max_val_items = 300  # val loss and the STOP-rule choice stay affordable
        source.splits = ("test",) if variant == "mc" else ("train", "val", "test")  # M_mc: tested only
        config.data.sources[name] = source
    config.eval.final_splits = ("mc:test", "bs:test", "ss:test", "r:test")
    if variant == "cl":
        config.curriculum.metric = "D"
        config.curriculum.num_buckets = 10
    if variant == "cl_la":
        config.curriculum.metric = "L_A"
        config.curriculum.num_buckets = 10
    return config
