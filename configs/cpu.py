"""The baseline (M_mc, MDC augmented 4x) with the narrow CPU model: the real CPU run of docs/training.md.

Differs from the defaults: the CPU model (`common.cpu_model`), 3 passes in at most 38 min, cosine schedule
with 50 warmup steps, patience 5, an eval every 120 steps decoding 128 MDC val items, logs every 10 steps.
Command: nice -n 5 python -m bapjax.train --config=configs/cpu.py
Runtime: 14.5 min on a quiet 2-core CPU of unrecorded bench_train speed (1,389 steps of 32 at 50-57 items/s, 12 evals, the STOP rule, the test decode; ~20 s more for the first MDC augmentation).
Result: MDC test micro Overall F1 19.2 (results/cpu_run.json).
The experiment's models and what each choice gained: docs/results.md.
"""

from bapjax.training import run_config
from configs import common


def get_config():
    config = run_config.base_config()
    config.workdir = "runs/cpu"
    config.model = common.cpu_model()
    config.train.update(dict(
        num_epochs=3,
        time_budget_minutes=38.0,  # a shared 2-core machine: stop, then evaluate on test
        schedule="cosine",  # linear warmup, then cosine to final_lr_fraction x lr at the last step
        warmup_steps=50,
        patience=5,
        eval_every_steps=120,
        log_every_steps=10,
    ))
    config.data.sources.mc = run_config.mdc_source(augment=True)
    config.eval.val_decode_items = 128  # decoded F1 during training on 128 val items
    return config
