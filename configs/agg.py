"""M_agg: joint training on D_bs, D_ss, D_r (simulated, paper Table 3 sizes) and D_mc (augmented).

python -m bapjax.train --config=configs/agg.py

Runtime: not measured to the end. This is the paper-size model (rnn 300, world CNN width 300), an
accelerator job: at the ~640 items/s configs/baseline.py ran on one H100 (results/gpu/README.md),
40 passes over its 52,419 items are ~55 min, less with early stopping. Measured: on one H200 beside
cl.py, ~440 items/s once compiled; a 4.7-minute training budget reached 60,000 items (MDC test
21.9 micro Overall, val loss still falling), results/gpu/README.md. On the 2-core CPU of this
workspace one pass over its data would take days (see configs/cpu.py for the measured CPU run).
"""

from bapjax.training import run_config


def get_config():
    config = run_config.base_config()
    config.workdir = "runs/agg"
    for name, (train, val, test) in run_config.PAPER_SIZES.items():
        config.data.sources[name] = run_config.generated_source(name, train, val, test)
    config.data.sources.mc = run_config.mdc_source(augment=True)
    config.eval.final_splits = ("bs:test", "ss:test", "r:test", "mc:test")
    config.eval.val_decode_items = 300  # per source, to keep evals affordable
    return config
