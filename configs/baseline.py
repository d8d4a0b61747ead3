"""M_mc: the baseline trained on the MDC (training split augmented 4x), the paper-size model.

Differs from the defaults: nothing but the augmented MDC as its one source.
Command: python -m bapjax.train --config=configs/baseline.py
Runtime: ~6 min on one NVIDIA H100 (~640 items/s; early stopping near pass 12); hours per pass on a 2-core CPU.
Result: two passes (--config.train.max_steps=926, 4.4 min): MDC test 22.4 micro Overall, 19.1 strict (results/gpu/README.md).
"""

from bapjax.training import run_config


def get_config():
    config = run_config.base_config()
    config.workdir = "runs/baseline"
    config.data.sources.mc = run_config.mdc_source(augment=True)
    return config
