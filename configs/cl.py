"""M_agg+cl: joint training on D_bs, D_ss, D_r, D_mc with curriculum learning (paper 6.2).

Differs from the defaults: configs/agg.py with the paper's curriculum, metric D in 10 buckets (the paper's
grid: metrics D, L_A, L_I and their combinations; 5 to 30 buckets).
Command: python -m bapjax.train --config=configs/cl.py [--config.curriculum.metric=D,L_A --config.curriculum.num_buckets=15]
Runtime: an accelerator job, not run to the end; alone on one H200 (~950 items/s) --config.train.max_steps=6000 took 9.0 min.
Result: with --config.train.max_steps=6000: MDC test 27.3 micro Overall, 22.8 strict (results/gpu/README.md).
The CPU-scale experiment (cl, cl_la, cl_mc) and its evidence: docs/results.md.
"""

from configs import agg


def get_config():
    config = agg.get_config()
    config.workdir = "runs/cl"
    config.curriculum.metric = "D"  # in curriculum.num_buckets (10) buckets
    return config
