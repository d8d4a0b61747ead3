"""M_agg: joint training on D_bs, D_ss, D_r (simulated, paper Table 3 sizes) and D_mc (augmented), the paper-size model.

Differs from the defaults: the three simulated sets beside the augmented MDC, every test split decoded, 300 val items per
source decoded at each eval.
Command: python -m bapjax.train --config=configs/agg.py
Runtime: an accelerator job, not run to the end (~440 items/s on one H200; days on a 2-core CPU).
Result: a 4.7-minute training budget on one H200: MDC test 21.9 micro Overall (results/gpu/README.md). CPU scale: docs/results.md.
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
