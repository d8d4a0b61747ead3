"""M_agg+cl: joint training on D_bs, D_ss, D_r, D_mc with curriculum learning (paper 6.2).

python -m bapjax.train --config=configs/cl.py [--config.curriculum.metric=D,L_A --config.curriculum.num_buckets=10]

Runtime: not measured to the end. This is the paper-size model (rnn 300, world CNN width 300), an
accelerator job: on one H100 beside configs/baseline.py it ran ~350 items/s (results/gpu/README.md),
so its 66,416 steps (10 curriculum stages, then 40 passes over 52,419 items) would take ~55 min
alone at baseline's ~640 items/s, less with early stopping. On one H200 beside agg.py (~440
items/s once compiled) a 4.7-minute training budget reached step 1,659 (the 10 stages, then 0.46
of a pass): MDC test 20.2 micro Overall, val loss still falling. Alone on one H200 (~950 items/s)
`--config.train.max_steps=6000` (192,000 items: the stages, then 3.1 passes) took 9.0 min: MDC
test 27.3 micro Overall, 22.8 strict, val loss flat over its last four evals (results/gpu/README.md). On the
2-core CPU of this workspace one pass over its data would take days (see configs/cpu.py for the
measured CPU run).
"""

from configs import agg


def get_config():
    config = agg.get_config()
    config.workdir = "runs/cl"
    config.curriculum.metric = "D"  # paper's metrics: D, L_A, L_I and lexicographic combinations
    config.curriculum.num_buckets = 10  # paper grid: 5, 10, 15, 20, 25, 30
    return config
