"""M_agg+cl: joint training on D_bs, D_ss, D_r, D_mc with curriculum learning (paper 6.2), the paper-size model.

Differs from the defaults: configs/agg.py with the curriculum metric D in 10 buckets.
Command: python -m bapjax.train --config=configs/cl.py [--config.curriculum.metric=D,L_A --config.curriculum.num_buckets=15]
Runtime: an accelerator job, not run to the end; --config.train.max_steps=6000 took 9.0 min alone on one H200 (~950 items/s).
Result: with that cap, MDC test 27.3 micro Overall, 22.8 strict (results/gpu/README.md). CPU scale: docs/results.md.
"""

from configs import agg


def get_config():
    config = agg.get_config()
    config.workdir = "runs/cl"
    config.curriculum.metric = "D"  # in curriculum.num_buckets (10) buckets
    return config
