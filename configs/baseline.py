"""M_mc: the baseline trained on the MDC (training split augmented 4x), paper-size model.

python -m bapjax.train --config=configs/baseline.py

Runtime, one NVIDIA H100 (results/gpu/README.md): ~640 items/s once compiled, so a pass over the
14,836 training items is ~25 s and the whole run stops (patience 10 after the best val loss, at
pass 2) near pass 12, ~6 min; measured: two passes (--config.train.max_steps=926) took 4.4 min
with data preparation and the final test decode, MDC test 22.4 micro Overall, 19.1 strict. On the
2-core CPU of this workspace one pass would take hours (configs/cpu.py is the CPU run).
"""

from bapjax.training import run_config


def get_config():
    config = run_config.base_config()
    config.workdir = "runs/baseline"
    config.data.sources.mc = run_config.mdc_source(augment=True)
    config.eval.final_splits = ("mc:test",)
    return config
