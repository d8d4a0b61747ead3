"""M_agg+cl: joint training on D_bs, D_ss, D_r, D_mc with curriculum learning (paper 6.2).

python -m bapjax.train --config=configs/cl.py [--config.curriculum.metric=D,L_A --config.curriculum.num_buckets=10]

Runtime: not measured. This is the paper-size model (rnn 300, world CNN width 300), an
accelerator job; no accelerator has been lent to this project yet. On the 2-core CPU of this
workspace one pass over its data would take days (see configs/cpu.py for the measured CPU run).
"""

from configs import agg


def get_config():
    config = agg.get_config()
    config.workdir = "runs/cl"
    config.curriculum.metric = "D"  # paper's metrics: D, L_A, L_I and lexicographic combinations
    config.curriculum.num_buckets = 10  # paper grid: 5, 10, 15, 20, 25, 30
    return config
