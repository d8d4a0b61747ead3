"""The baseline (M_mc, MDC augmented 4x) with the narrow CPU model: the real CPU run of docs/training.md.

    nice -n 5 python -m bapjax.train --config=configs/cpu.py

Measured: 14.5 min wall on a 2-core CPU (quiet; 3 passes = 1,389 steps of 32 at 50-57 items/s,
12 evals, the STOP-rule choice on val and the test decode included; the MDC augmentation, built on
first use, adds ~20 s). MDC test micro Overall F1 19.2 (results/cpu_run.json).
"""

from bapjax.training import run_config
from configs import common


def get_config():
    config = run_config.base_config()
    config.workdir = "runs/cpu"
    config.model = common.cpu_model()
    config.train.update(dict(
        glove=True,
        batch_size=32,
        num_epochs=3,
        max_steps=0,
        time_budget_minutes=38.0,  # a shared 2-core machine: stop, then evaluate on test
        learning_rate=1e-3,
        schedule="cosine",  # linear warmup, then cosine to final_lr_fraction x lr at the last step
        warmup_steps=50,
        final_lr_fraction=0.1,
        weight_decay=0.1,
        grad_clip=5.0,
        ema_decay=0.0,
        select_by="loss",
        patience=5,
        min_delta=0.0,
        eval_every_steps=120,
        checkpoint_every_steps=0,
        log_every_steps=10,
        pack_multiple=32,
    ))
    config.data.sources.mc = run_config.mdc_source(augment=True)
    config.data.sources.mc.max_val_items = 0  # all 1331 val items: val loss (~6 s per eval) and the STOP rule's choice
    config.eval.val_decode_items = 128  # decoded F1 during training on 128 val items
    config.eval.final_splits = ("mc:test",)
    return config
