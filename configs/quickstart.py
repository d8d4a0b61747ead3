"""First run: a small model on freshly simulated D_bs, D_ss, D_r (plus the MDC when a corpus is given).

Differs from the defaults: three small simulated sets (300 / 40 / 100 items), the CPU model at 16 x 2 world
features, the newest 96 dialogue tokens, 5 passes without early stopping, val loss only during training.
Command: python -m bapjax.train --config=configs/quickstart.py [--config.data.sources.mc.corpus=@mdc]
Runtime: 3 min 47 s on a quiet 2-core host of 94.4 items/s (bench_train; fresh cache, simulation included).
Result: the v2 tables of every test split, printed at the end (a smoke run: docs/results.md has the real ones).
"""

from bapjax.training import run_config
from configs import common


def get_config():
    config = run_config.base_config()
    config.workdir = "runs/quickstart"
    for name in ("bs", "ss", "r"):
        config.data.sources[name] = run_config.generated_source(name, train=300, val=40, test=100, seed=1)
    mc = run_config.mdc_source(augment=False)
    mc.corpus = ""  # set to a corpus path to add the MDC
    mc.max_train_items = 600
    mc.max_val_items = 100
    mc.max_test_items = 300
    config.data.sources.mc = mc
    config.model = common.cpu_model()
    config.model.world.layers = 2
    config.features.max_text_tokens = 96
    config.train.num_epochs = 5
    config.train.patience = 0
    config.train.log_every_steps = 10
    config.eval.val_decode_items = -1  # val loss only during training; tables at the end
    config.eval.final_splits = ("bs:test", "ss:test", "r:test", "mc:test")
    return config
