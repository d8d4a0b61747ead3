"""Experiment configs (big_vision style): each file's `get_config(arg=None)` returns an
`ml_collections.ConfigDict` on `bapjax.training.run_config`'s defaults, setting only what differs; its
docstring says what differs, the command, the measured runtime and the result in a line each.

    python -m bapjax.train --config=configs/cpu.py --config.train.batch_size=16
    python -m bapjax.train --config=cpu             # by name: the copy installed with bapjax
    config = configs.load("cpu")                    # the same config in Python (tests, benchmarks)
    config = configs.load("cpu", ["--config.train.batch_size=16"])   # with the same overrides
"""

import ml_collections


def load(name_or_path: str, overrides=()) -> ml_collections.ConfigDict:
    """`get_config()` of a config file path or of ``configs/<name>.py`` by name; ``"file.py:arg"``
    (or ``"name:arg"``) passes ``arg`` to ``get_config``, exactly as ``--config=...`` does
    (`bapjax.cli.load_config`, the one lookup), with `--config.<field>=value` overrides applied as
    training applies them (`bapjax.cli.apply_overrides`)."""
    from bapjax.cli import apply_overrides, load_config  # imported here: `import configs` stays light

    return apply_overrides(load_config(name_or_path), overrides, name_or_path)
