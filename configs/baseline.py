"""M_mc: the baseline trained on the MDC (training split augmented 4x), paper-size model.

python -m bapjax.train --config=configs/baseline.py
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from configs import common  # noqa: E402


def get_config():
    config = common.base_config()
    config.workdir = "runs/baseline"
    config.data.sources.mc = common.mdc_source(augment=True)
    config.eval.final_splits = ("mc:test",)
    return config
