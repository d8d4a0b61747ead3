"""M_mc: the baseline trained on the MDC (training split augmented 4x), paper-size model.

python -m bapjax.train --config=configs/baseline.py

Runtime: not measured. This is the paper-size model (rnn 300, world CNN width 300), an
accelerator job; no accelerator has been lent to this project yet. On the 2-core CPU of this
workspace one pass over its data would take days (see configs/cpu.py for the measured CPU run).
"""

from bapjax import run_config


def get_config():
    config = run_config.base_config()
    config.workdir = "runs/baseline"
    config.data.sources.mc = run_config.mdc_source(augment=True)
    config.eval.final_splits = ("mc:test",)
    return config
