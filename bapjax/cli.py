"""What every bapjax command line shares: flag definitions, the error style, the compilation cache.

Each CLI module defines its flags in a `define_flags()` that only runs when the module is the
program (``cli.run(main, define_flags)`` under ``__main__``), so CLIs can import each other's
modules freely; shared names (--corpus, --split, --out, ...) are defined by whichever CLI
asks first (`flag`). A user mistake (`bapjax.errors.UserError`, a bad flag value, a usage error)
prints one line, ``error: <what and where>``, and exits 2; so does a write that meets a full
disk or a file-size limit (`bapjax.paths.NoSpaceError` names what could not be written; an
OSError of that kind from elsewhere names its file). Anything else is a bug and keeps its
traceback.
"""

from __future__ import annotations

import logging as std_logging
import sys
from pathlib import Path
from typing import Callable, NoReturn, Sequence

import jax
from absl import app, flags

from bapjax.errors import UserError
from bapjax.paths import cache_root, describe_no_space, no_space_error

FLAGS = flags.FLAGS


def flag(kind: str, name: str, default, help_text: str, **kwargs) -> None:
    """Define ``--name`` (``kind``: string, integer, float, bool, enum, list) unless a module of
    this program already did (several CLIs share --corpus, --split, --out)."""
    if name not in FLAGS:
        getattr(flags, f"DEFINE_{kind}")(name, default, help=help_text, **kwargs)


def fail(message: str) -> NoReturn:
    """Print the one-line error and exit 2."""
    print(f"error: {message}", file=sys.stderr, flush=True)
    sys.exit(2)


def _parse_flags(argv: Sequence[str]) -> list[str]:
    try:
        return FLAGS(argv)
    except flags.Error as err:  # unknown flag, bad value, a config override that does not parse
        fail(str(err).splitlines()[0] if str(err) else repr(err))
    except (AttributeError, KeyError) as err:  # ml_collections: a --config.<field> the config lacks
        name = str(err).strip("\"'")
        culprit = next((a.split("=")[0] for a in argv if a.startswith("--config.")
                        and a.split("=")[0].rsplit(".", 1)[-1] == name), None)
        fail(f"{culprit or '--config.*'}: the config has no field {name!r}")
    except (ValueError, TypeError) as err:  # ml_collections: a value of the wrong type
        fail(f"a --config.* override does not fit its field: {err}")


def run(main: Callable[[Sequence[str]], int | None], define_flags: Callable[[], None]) -> NoReturn:
    """Define the flags, parse them, run ``main(argv)``; user mistakes end as one line, exit 2."""
    define_flags()
    std_logging.getLogger("jax._src.xla_bridge").setLevel(std_logging.WARNING)  # "no TPU" notes

    def guarded(argv: Sequence[str]) -> int:
        try:
            return int(main(argv) or 0)
        except (UserError, app.UsageError) as err:
            fail(str(err))
        except Exception as err:  # noqa: BLE001 (re-raised unless a write met a full disk)
            full = no_space_error(err)
            if full is None:
                raise
            fail(describe_no_space(full, full.filename, "it" if full.filename else "a file"))

    app.run(guarded, flags_parser=_parse_flags)


def check_output_file(flag_name: str, path: str | None) -> None:
    """An output file's folder must exist before any work is done (so nothing is lost at the end)."""
    if path and path != "-" and "://" not in path:
        parent = Path(path).expanduser().resolve().parent
        if not parent.is_dir():
            raise UserError(f"--{flag_name} {path}: the folder {parent} does not exist")


def enable_compilation_cache() -> str:
    """Keep compiled XLA programs on disk (``<cache root>/jax``), so later runs of a command skip
    compilation (the evaluator compiles a handful of padded shapes, training a few steps)."""
    root = cache_root() / "jax"
    jax.config.update("jax_compilation_cache_dir", str(root))
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.2)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
    return str(root)
