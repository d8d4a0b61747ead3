"""M_mc: the baseline trained on the MDC (training split augmented 4x), paper-size model.

python -m bapjax.train --config=configs/baseline.py
"""

from configs import common


def get_config():
    config = common.base_config()
    config.workdir = "runs/baseline"
    config.data.sources.mc = common.mdc_source(augment=True)
    config.eval.final_splits = ("mc:test",)
    return config
