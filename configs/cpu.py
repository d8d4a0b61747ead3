"""The baseline (M_mc, MDC augmented 4x) with the narrow CPU model: the real CPU run of docs/training.md.

nice -n 5 python -m bapjax.train --config=configs/cpu.py

Measured: 14.5 min wall on the 2-core CPU of this workspace (quiet; 3 passes = 1,389 steps of 32
at 50-57 items/s, 12 evals, the STOP-rule choice on val and the test decode included; the MDC
augmentation, built on first use, adds ~20 s). MDC test micro Overall F1 19.2 (results/cpu_run.json).
"""

from configs import baseline, common


def get_config():
    config = baseline.get_config()
    config.workdir = "runs/cpu"
    config.model = common.cpu_model()
    config.train.batch_size = 32
    config.train.num_epochs = 3
    config.train.schedule = "cosine"  # linear warmup, then cosine to 0.1 x lr at the last step
    config.train.warmup_steps = 50
    config.train.time_budget_minutes = 38.0  # the shared 2-core machine: stop, then evaluate on test
    config.train.eval_every_steps = 120
    config.train.patience = 5
    config.train.log_every_steps = 10
    config.data.sources.mc.max_val_items = 0  # all 1331 val items: val loss (~6 s per eval) and the STOP rule's choice
    config.eval.val_decode_items = 128  # decoded F1 during training on 128 val items
    return config
