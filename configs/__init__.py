"""Experiment configs (big_vision style): each file's `get_config(arg=None)` returns an
`ml_collections.ConfigDict`; its docstring gives the exact command and its measured runtime.

    python -m bapjax.train --config=configs/cpu.py --config.train.batch_size=16
    config = configs.load("cpu")            # the same config in Python (tests, benchmarks)
"""

import importlib
import importlib.util
from pathlib import Path

import ml_collections


def load(name_or_path: str) -> ml_collections.ConfigDict:
    """`get_config()` of ``configs/<name>.py`` or of a config file path; ``"file.py:arg"`` (or
    ``"name:arg"``) passes ``arg`` to ``get_config``, as ``--config=file.py:arg`` does."""
    target, _, arg = str(name_or_path).partition(":")
    if target.endswith(".py"):
        spec = importlib.util.spec_from_file_location(f"config_{Path(target).stem}", target)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    else:
        module = importlib.import_module(f"configs.{target}")
    return module.get_config(arg) if arg else module.get_config()
