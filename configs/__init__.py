"""Experiment configs (big_vision style): each file's `get_config(arg=None)` returns an
`ml_collections.ConfigDict`; its docstring gives the exact command and its measured runtime.

    python -m bapjax.train --config=configs/cpu.py --config.train.batch_size=16
    config = configs.load("cpu")            # the same config in Python (tests, benchmarks)
    config = configs.load("cpu", ["--config.train.batch_size=16"])   # with the same overrides
"""

import importlib
import importlib.util
from pathlib import Path

import ml_collections

from bapjax.errors import UserError


def load(name_or_path: str, overrides=()) -> ml_collections.ConfigDict:
    """`get_config()` of ``configs/<name>.py`` or of a config file path; ``"file.py:arg"`` (or
    ``"name:arg"``) passes ``arg`` to ``get_config``, as ``--config=file.py:arg`` does."""
    target, _, arg = str(name_or_path).partition(":")
    if target.endswith(".py"):
        spec = importlib.util.spec_from_file_location(f"config_{Path(target).stem}", target)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    else:
        module = importlib.import_module(f"configs.{target}")
    config = module.get_config(arg) if arg else module.get_config()
    return apply_overrides(config, overrides, name_or_path)


class ConfigOverrideError(UserError):
    """A `--config.<field>=value` override that names no field of the config or does not fit it."""


def apply_overrides(config: ml_collections.ConfigDict, overrides, source: str = "the config"):
    """`config` with `--config.<field>=value` overrides applied (in place) exactly as
    `python -m bapjax.train` applies them: ml_collections' config flags parse each value by the
    field's type. Raises ConfigOverrideError naming the override (and `source`)."""
    overrides = list(overrides)
    if not overrides:
        return config
    from absl import flags
    from ml_collections import config_flags

    for token in overrides:
        if not token.startswith("--config.") or "=" not in token:
            raise ConfigOverrideError(f"{token}: a config override is --config.<field>=value")
    argv = ["configs", *overrides]
    values = flags.FlagValues()
    try:
        config_flags.DEFINE_config_dict("config", config, flag_values=values, sys_argv=argv)
        values(argv)
    except flags.Error as err:
        raise ConfigOverrideError(str(err).splitlines()[0]) from None
    except (AttributeError, KeyError) as err:  # ml_collections: a field the config lacks
        name = str(err).strip("\"'")
        culprit = next((t.split("=")[0] for t in overrides if t.split("=")[0].rsplit(".", 1)[-1] == name),
                       " ".join(overrides))
        raise ConfigOverrideError(f"{culprit}: {source} has no field {name!r}") from None
    except (ValueError, TypeError) as err:
        raise ConfigOverrideError(f"{' '.join(overrides)}: a value does not fit its field of {source}: {err}") from None
    return config
