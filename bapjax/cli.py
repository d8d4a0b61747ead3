"""What every bapjax command line shares: flag definitions, the error style, the compilation cache.

Each CLI module defines its flags in a `define_flags()` that only runs when the module is the
program (``cli.run(main, define_flags)`` under ``__main__``), so CLIs can import each other's
modules freely; a name several CLIs share (--out, --seed, ...) is defined by whichever asks
first (`flag`), and the item-source flags (--corpus, --store, --items, --split, --dataset) have
their one definition and help text here (`define_item_source_flags`). A user mistake (`bapjax.errors.UserError`, a bad flag value, a usage error)
prints one line, ``error: <what and where>``, and exits 2; so does a write that meets a full
disk or a file-size limit (`bapjax.paths.NoSpaceError` names what could not be written; an
OSError of that kind from elsewhere names its file). Anything else is a bug and keeps its
traceback.
"""

from __future__ import annotations

import contextlib
import errno
import importlib
import importlib.machinery
import importlib.util
import logging as std_logging
import os
import re
import sys
import time
from pathlib import Path
from typing import Callable, NoReturn, Sequence

import jax
from absl import app, flags
from absl import logging as absl_logging
from ml_collections import config_flags

from bapjax import sharding
from bapjax.errors import PeerLost, RunFailure, UserError
from bapjax.paths import cache_root, describe_no_space, no_space_error

FLAGS = flags.FLAGS


def flag(kind: str, name: str, default, help_text: str, **kwargs) -> None:
    """Define ``--name`` (``kind``: string, integer, float, bool, enum, list) unless a module of
    this program already did (several CLIs share --out, --seed, ...). The flag belongs to the
    program's main module, so ``--help`` lists it."""
    if name not in FLAGS:
        getattr(flags, f"DEFINE_{kind}")(name, default, help=help_text, module_name=sys.argv[0], **kwargs)


# The flags that name where a CLI's items come from (resolved by
# ``bapjax.corpus.load.items_from_flags``): their one definition. A command whose default differs
# (the MDC for --corpus, test or train for --split) applies it in its own code and says so in its usage.
ITEM_SOURCE_FLAGS = {
    "corpus": "A corpus (with --split): an MDC-layout directory, its .tar.xz, or a directory with one "
              "archive; @mdc: the MDC as bapjax finds it ($BAPJAX_MDC first; docs/corpus.md).",
    "store": "An item store directory (python -m bapjax.build), with --split.",
    "items": "An items JSONL file (corpus.mdc export, v2_clean build): one split already, no --split.",
    "split": "The split of --corpus or --store: train, val or test.",
    "dataset": "With --store: only items of this data set (mc, bs, ss, r).",
}


def define_item_source_flags(*names: str) -> None:
    """Define the item-source flags a CLI reads (``names``; default: all of `ITEM_SOURCE_FLAGS`)."""
    unknown = [name for name in names if name not in ITEM_SOURCE_FLAGS]
    if unknown:
        raise ValueError(f"not item-source flags: {unknown} (known: {', '.join(ITEM_SOURCE_FLAGS)})")
    for name in names or ITEM_SOURCE_FLAGS:
        flag("string", name, None, ITEM_SOURCE_FLAGS[name])


# --------------------------------------------------------------------------------------------
# Configs: a file, or a config installed with bapjax by name

CONFIG_PACKAGE = "configs"  # installed beside bapjax (pyproject.toml), e.g. configs/quickstart.py


class ConfigNotFoundError(UserError):
    """--config names neither a file nor an installed config."""


def config_names() -> list[str]:
    """The configs installed with bapjax, by name (``configs/<name>.py`` files with a ``get_config``)."""
    spec = importlib.util.find_spec(CONFIG_PACKAGE)
    folders = spec.submodule_search_locations if spec and spec.submodule_search_locations else []
    return sorted({path.stem for folder in folders for path in Path(folder).glob("*.py")
                   if not path.name.startswith("_") and "def get_config(" in path.read_text(encoding="utf-8")})


def load_config(spec: str, flag_name: str = "config"):
    """``get_config()`` of a config: ``FILE[:arg]`` when the file exists (relative to the working
    directory), else the installed ``NAME[:arg]`` (``configs/NAME.py``, wherever bapjax is
    installed; ``configs/NAME.py`` that is not a file here names it too, so the README's commands
    work from any directory); ``arg`` is passed to ``get_config``. Neither: `ConfigNotFoundError`,
    naming the flag and listing the names."""
    target, colon, arg = str(spec).partition(":")
    path = Path(target).expanduser()
    if path.is_file():
        name = f"config_{re.sub(r'[^0-9A-Za-z_]', '_', path.stem)}"
        loader = importlib.machinery.SourceFileLoader(name, str(path))
        module = importlib.util.module_from_spec(importlib.util.spec_from_loader(name, loader))
        loader.exec_module(module)
    else:
        names = config_names()
        if path.suffix == ".py" and path.parent.name == CONFIG_PACKAGE and path.stem in names:
            target = path.stem  # configs/NAME.py from another directory: the installed copy of that name
        if target not in names:
            hint = f"; the installed {path.stem} is --{flag_name}={path.stem}{colon}{arg}" if path.stem in names else ""
            raise ConfigNotFoundError(f"--{flag_name}={spec}: no such config file or config name "
                                      f"(names: {', '.join(names) or 'none installed'}{hint})")
        module = importlib.import_module(f"{CONFIG_PACKAGE}.{target}")
    return module.get_config(arg) if colon else module.get_config()


class _ConfigFileOrNameParser(flags.ArgumentParser):
    """The config flag's value: `load_config`'s lookup (a file, else a name), locked as
    ml_collections locks a config file's; a missing config is refused while the flags are
    parsed (ml_collections' own parser defers that error to the config's first use)."""

    def __init__(self, name: str):
        self.name = name

    def parse(self, argument):
        config = load_config(argument, self.name)
        if callable(getattr(config, "lock", None)):
            config.lock()
        return config

    def flag_type(self) -> str:
        return "config object"


# Per config flag: the config tree whose fields a mistyped flag is matched against when no
# --config was given (`define_config_flag`'s `defaults`).
_CONFIG_DEFAULTS: dict[str, Callable[[], object]] = {}


def define_config_flag(help_text: str, name: str = "config", defaults: Callable[[], object] | None = None) -> None:
    """``--config=FILE[:arg]`` or ``--config=NAME[:arg]`` with ``--config.field=value`` overrides:
    the one definition of a config flag, for every command that takes a config. ``defaults``
    builds the tree of fields every config has (a flag named like one of its fields, e.g.
    ``--batch_size``, is answered with its ``--config.train.batch_size`` path)."""
    if defaults is not None:
        _CONFIG_DEFAULTS[name] = defaults
    if name not in FLAGS:
        config_flags.DEFINE_config_file(name, None, help_text + " FILE.py[:arg], or the name of a config "
                                        "installed with bapjax (NAME[:arg], e.g. quickstart, cpu_experiment:mc).")
        FLAGS[name].parser = _ConfigFileOrNameParser(name)
        FLAGS.register_flag_by_module(sys.argv[0], FLAGS[name])  # listed by the program's --help


# --------------------------------------------------------------------------------------------
# The one-line error


def fail(message: str) -> NoReturn:
    """Print the one-line error and exit 2."""
    print(f"error: {message}", file=sys.stderr, flush=True)
    sys.exit(2)


def _missing_field(err: Exception, argv: Sequence[str]) -> tuple[str | None, str, str | None]:
    """The field ml_collections' AttributeError / KeyError names, the `--config.<...>` override in
    `argv` whose last part is that field (None when none is), and ml_collections' suggestion
    ("Did you mean ...", None when it has none)."""
    while err.args and isinstance(err.args[0], BaseException):  # AttributeError(KeyError(...))
        err = err.args[0]
    text = str(err.args[0]) if err.args else str(err)
    found = re.match(r"""\s*['"]?([^'"\s]+)""", text)
    name = found.group(1) if found else text.strip("\"'")
    suggestion = re.search(r'Did you mean "([^"]+)"', text)
    culprit = next((a.split("=")[0] for a in argv if a.startswith("--config.")
                    and name in a.split("=")[0].split(".")[1:]), None)
    return culprit, name, suggestion.group(1) if suggestion else None


def missing_field_message(err: Exception, argv: Sequence[str], source: str = "the config") -> str:
    """One plain line for an override naming no field: the flag as typed, the field, the suggestion."""
    culprit, name, suggestion = _missing_field(err, argv)
    hint = f" (did you mean {suggestion!r}?)" if suggestion else " (python -m bapjax.train --config=... --print_config lists them)"
    return f"{culprit or '--config.*'}: {source} has no field {name!r}{hint}"


def config_field_paths(config, name: str, prefix: str = "") -> list[str]:
    """The dotted paths of every field called `name` in a config tree (nested dicts)."""
    found = []
    for key, value in (config.items() if hasattr(config, "items") else ()):
        path = f"{prefix}{key}"
        if key == name:
            found.append(path)
        if hasattr(value, "items"):
            found += config_field_paths(value, name, path + ".")
    return found


def _config_field(config, path: str):
    for key in path.split("."):
        config = config[key] if hasattr(config, "items") and key in config else None
    return config


# What a value of a field's type looks like, for a value that does not parse as one.
EXPECTED_VALUES = {bool: "true or false", int: "an integer", float: "a number", str: "a string",
                   tuple: "a tuple, e.g. \"('a', 'b')\"", list: "a list, e.g. \"['a', 'b']\""}


def _config_of_flags() -> tuple[str, object] | None:
    """(name, tree) of the program's config flag: the parsed --config, else its `defaults`."""
    for name, defaults in [*_CONFIG_DEFAULTS.items(), ("config", None)]:
        if name in FLAGS and getattr(FLAGS[name], "value", None) is not None:
            return name, FLAGS[name].value
        if defaults is not None:
            return name, defaults()
    return None


def flag_error_message(err: flags.Error, config=None, config_flag: str = "config") -> str:
    """absl's flag error as one line in bapjax's words: a flag that is a field of `config` points
    at its ``--config.<path>`` override; an override whose value does not parse says what its
    field takes (``--config.train.batch_size=abc: expected an integer``)."""
    line = str(err).splitlines()[0] if str(err) else repr(err)
    line = line.removeprefix("flag ").replace("\\'", "'")
    if config is None:
        return line
    if isinstance(err, flags.UnrecognizedFlagError):
        paths = config_field_paths(config, err.flagname)
        if paths:
            given = str(getattr(err, "flagvalue", "") or "")
            value = given.partition("=")[2] if "=" in given else "..."
            overrides = " or ".join(f"--{config_flag}.{path}={value}" for path in paths)
            return f"--{err.flagname}: not a flag of this command; it is a field of the config: {overrides}"
        return line
    cause = err.__context__
    head = line.removesuffix(f": {cause}") if cause is not None else line
    found = re.fullmatch(rf"--{re.escape(config_flag)}\.([\w.]+)=(.*)", head)
    if isinstance(err, flags.IllegalFlagValueError) and found:
        expected = EXPECTED_VALUES.get(type(_config_field(config, found.group(1))))
        if expected:
            return f"{head}: expected {expected}"
    return line


HELP_FLAGS = ("--help", "-help", "-h", "-?", "--helpshort", "--helpfull", "--helpxml")


def help_as_long_flag(argv: Sequence[str]) -> list[str]:
    """`argv` with ``-h`` (before a ``--``) spelled ``--help``: absl knows only the long forms and ``-?``."""
    argv = list(argv)
    end = argv.index("--") if "--" in argv else len(argv)
    return [argv[0], *("--help" if arg == "-h" else arg for arg in argv[1:end]), *argv[end:]]


def _parse_flags(argv: Sequence[str]) -> list[str]:
    argv = help_as_long_flag(argv)
    try:
        return FLAGS(argv)
    except SystemExit as done:  # absl's --help prints the usage, then exits 1: asking for help is no failure
        if any(arg.split("=")[0] in HELP_FLAGS for arg in argv[1:]):
            sys.exit(0)
        raise done
    except flags.Error as err:  # unknown flag, bad value, a config override that does not parse
        if isinstance(err.__context__, UserError):  # a flag's parser named the mistake (ConfigNotFoundError)
            fail(str(err.__context__))
        named = _config_of_flags()
        fail(flag_error_message(err, *(named[::-1] if named else ())))
    except (AttributeError, KeyError) as err:  # ml_collections: a --config.<field> the config lacks
        fail(missing_field_message(err, argv))
    except (ValueError, TypeError) as err:  # ml_collections: a value of the wrong type
        overrides = [a for a in argv if a.startswith("--config.")]
        culprit = overrides[0] if len(overrides) == 1 else "a --config.* override"  # named when it can only be it
        fail(f"{culprit}: the value does not fit its field ({str(err).splitlines()[0]})")


def quiet_library_logs() -> None:
    """Library INFO logs (Orbax's, JAX's) off unless the user asked with --verbosity (absl's flag:
    0 brings INFO back, -1 WARNING, the default here); bapjax's own progress lines are prints."""
    if "verbosity" in FLAGS and not FLAGS["verbosity"].present:
        absl_logging.set_verbosity(absl_logging.WARNING)
    std_logging.getLogger("jax").setLevel(std_logging.WARNING)


INTERRUPTED = ("error: interrupted (SIGINT) before it finished; run the same command again (a training run "
               "goes on from its last checkpoint, with the caches built so far)")
INTERRUPTED_EXIT = 128 + 2  # the shell's status for a process ended by SIGINT


def run(main: Callable[[Sequence[str]], int | None], define_flags: Callable[[], None]) -> NoReturn:
    """Define the flags, parse them, run ``main(argv)``; user mistakes end as one line, exit 2; a
    Ctrl-C that no training loop answers (`bapjax.training.preemption`) ends as one line, exit 130.
    Output whose reader went away is dropped and the command goes on (`output_without_readers`)."""
    define_flags()

    def guarded(argv: Sequence[str]) -> int:
        quiet_library_logs()
        try:
            return checked(argv)
        except SystemExit as done:  # a failed process of a multi-process job: no shutdown barrier with its peers,
            if done.code and sharding.processes_started():  # which may be gone (JAX would abort with pages of its own report)
                sys.stdout.flush()
                sys.stderr.flush()
                os._exit(done.code if isinstance(done.code, int) else 1)
            raise

    def checked(argv: Sequence[str]) -> int:
        with output_without_readers(READERLESS_NOTE):
            try:
                return int(main(argv) or 0)
            except RunFailure as err:  # a run that went wrong: its own exit status
                print(f"error: {err}", file=sys.stderr, flush=True)
                if isinstance(err, PeerLost):  # before JAX's own shutdown report: its collectives cannot end cleanly
                    sys.stdout.flush()
                    os._exit(err.exit_status)
                sys.exit(err.exit_status)
            except (UserError, app.UsageError) as err:
                fail(str(err))
            except KeyboardInterrupt:  # a Ctrl-C outside a training loop's watch: one line, not a traceback
                print(INTERRUPTED, file=sys.stderr, flush=True)
                sys.exit(INTERRUPTED_EXIT)
            except Exception as err:  # noqa: BLE001 (re-raised unless a write met a full disk)
                full = no_space_error(err)
                if full is None:
                    raise
                fail(describe_no_space(full, full.filename, "it" if full.filename else "a file"))

    app.run(guarded, flags_parser=_parse_flags)


def require_flags(*names: str, values=FLAGS, of: str = "") -> None:
    """The flags a command cannot run without: refused in one line naming only those missing
    (``--out is required``; ``of``: what needs them, e.g. " by export"). `values`: FLAGS or an
    object with the flags as attributes."""
    missing = [f"--{name}" for name in names if getattr(values, name) in (None, "")]
    if missing:
        listed = missing[0] if len(missing) == 1 else f"{', '.join(missing[:-1])} and {missing[-1]}"
        raise UserError(f"{listed} {'is' if len(missing) == 1 else 'are'} required{of}")


# --------------------------------------------------------------------------------------------
# Progress lines: the one rule of their rate and ETA


def eta_text(seconds: float) -> str:
    """A remaining time as a progress line says it: seconds, minutes or hours."""
    if seconds < 90:
        return f"{seconds:.0f} s"
    return f"{seconds / 60:.1f} min" if seconds < 90 * 60 else f"{seconds / 3600:.1f} h"


def compiling_seconds() -> float:
    """Seconds this process has spent compiling so far (XLA's backend, reads of the persistent
    compilation cache, tracing and lowering: `compile_tally`): what a loop's rate leaves out."""
    totals = compile_tally().totals
    return totals["compile_seconds"] + totals["trace_seconds"]


class Stopwatch:
    """Wall seconds since it started, and the part of them not spent compiling (`working`): what
    the same work takes again once its programs are compiled."""

    def __init__(self):
        self.start, self.compiled = time.time(), compiling_seconds()

    def seconds(self) -> float:
        return time.time() - self.start

    def working(self) -> float:
        return max(0.0, self.seconds() - (compiling_seconds() - self.compiled))


class Progress:
    """Rate and ETA of a long loop over `total` units. What a loop does once (compiling, starting
    worker processes, loading a model) falls before its first progress line, so that line says so
    and gives no rate; every later line gives the steady rate: the units per second over the
    stretches since the first line, each from a mark (the first line, or `restart` after a pause
    such as an evaluation) to its last measured line, less the seconds spent compiling meanwhile
    (a new shape's program, `compiling_seconds`), so its ETA is not one inflated by compilation
    or pauses, nor thrown by the few steps of one short stretch. The last line (all `total` done)
    gives the time taken and the rate, and promises no next line. `show` prints the lines of a long
    step on stderr, a few seconds apart."""

    WARMING_UP = "includes compilation and start-up"

    def __init__(self, total: int, unit: str = "items"):
        self.total, self.unit = total, unit
        self.start, self.mark = time.time(), None
        self.shown: tuple[float, int] | None = None  # when `show` last printed, and at what count
        self.counted = (0, 0.0)  # units and working seconds of the stretches before the mark
        self.last = None  # (units, working seconds) from the mark to its last measured line

    def restart(self, done: int) -> None:
        """Measure from here (after a pause the rate should leave out)."""
        if self.last is not None:
            self.counted = (self.counted[0] + self.last[0], self.counted[1] + self.last[1])
        self.mark, self.last = (Stopwatch(), done), None

    def measure(self, done: int) -> tuple[float, float] | None:
        """(units per second, seconds left) over the stretches so far, compilation left out; None
        on the first line (it sets the mark) and while nothing but compilation has been measured."""
        if self.mark is None:
            self.restart(done)
            return None
        watch, since = self.mark
        working = watch.working()
        if done > since and working > 0:
            self.last = (done - since, working)
        units = self.counted[0] + (self.last[0] if self.last else 0)
        seconds = self.counted[1] + (self.last[1] if self.last else 0.0)
        if units <= 0 or seconds <= 0:
            return None
        rate = units / seconds
        return rate, (self.total - done) / rate

    def unmeasured(self, done: int) -> str:
        """What a line without a rate says: it includes the warm-up, and, unless it is the last,
        that the next line gives the rate and ETA."""
        return self.WARMING_UP + ("" if done >= self.total else "; rate and ETA from the next line")

    def line(self, done: int) -> str:
        """``done/total unit (rate unit/s, ETA ...)``; the first: the time so far and that it
        includes the warm-up; the last: ``done/total unit in T s (rate unit/s)``."""
        measured = self.measure(done)
        elapsed = f"{done}/{self.total} {self.unit} in {time.time() - self.start:.0f} s"
        if measured is None:
            return f"{elapsed} ({self.unmeasured(done)})"
        rate, left = measured
        if done >= self.total:
            return f"{elapsed} ({rate:.1f} {self.unit}/s)"
        return f"{done}/{self.total} {self.unit} ({rate:.1f} {self.unit}/s, ETA {eta_text(left)})"

    def show(self, done: int, label: str, every: float = 10.0, force: bool = False) -> None:
        """Print ``label: line(done)`` on stderr: on the first call, then at most every `every`
        seconds; the last line (all done) and a `force`d one always, but never twice the same count."""
        now = time.time()
        if self.shown is not None and done == self.shown[1]:
            return
        if force or done >= self.total or self.shown is None or now - self.shown[0] >= every:
            self.shown = (now, done)
            print(f"{label}: {self.line(done)}", file=sys.stderr, flush=True)


READERLESS_NOTE = "the command goes on, and what it writes to files (a run's workdir) is kept"
LOST_READER = (errno.EPIPE, errno.EBADF, errno.EIO)  # a closed pipe, a closed descriptor, a hung-up terminal


class ReaderlessStream:
    """A text stream (sys.stdout, sys.stderr) a command writes on after its reader went away: a
    pipe closed (`... | tee log` ended by the same Ctrl-C), a terminal hung up, the stream closed.
    The first write that meets it calls `lost(self)` once, points the descriptor at os.devnull
    (so what Python still buffers flushes quietly at exit) and drops every later write, so the
    command goes on instead of ending in a BrokenPipeError traceback."""

    def __init__(self, stream, name: str, lost: Callable[["ReaderlessStream"], None]):
        self.stream, self.name, self._lost, self.gone = stream, name, lost, False

    def write(self, text: str) -> int:
        if not self.gone:
            try:
                return self.stream.write(text)
            except (OSError, ValueError) as err:
                self._lose(err)
        return len(text)

    def writelines(self, lines) -> None:
        for line in lines:
            self.write(line)

    def flush(self) -> None:
        if not self.gone:
            try:
                self.stream.flush()
            except (OSError, ValueError) as err:
                self._lose(err)

    def _lose(self, err: Exception) -> None:
        if isinstance(err, OSError) and err.errno not in LOST_READER:
            raise err  # e.g. a full disk under a redirect: a write error of its own (`paths.no_space_error`)
        self.gone = True
        try:
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, self.stream.fileno())
            os.close(devnull)
        except (OSError, ValueError):  # a closed stream has no descriptor left to point elsewhere
            pass
        self._lost(self)

    def __getattr__(self, name):
        return getattr(self.stream, name)


@contextlib.contextmanager
def output_without_readers(note: str):
    """sys.stdout and sys.stderr as `ReaderlessStream`s while the block runs: a long command (training)
    outlives the reader of its output. The first stream found gone is named on the other, with `note`
    (what still records the work), e.g. ``note: stdout's reader is gone (...): its lines are dropped
    from here on; <note>``."""
    streams = {"stdout": sys.stdout, "stderr": sys.stderr}

    def lost(stream: ReaderlessStream) -> None:
        other = sys.stderr if stream.name == "stdout" else sys.stdout
        if other is not None:
            print(f"note: {stream.name}'s reader is gone (a closed pipe or terminal): its lines are dropped from "
                  f"here on; {note}", file=other, flush=True)

    wrapped = {name: ReaderlessStream(stream, name, lost) if stream is not None else None
               for name, stream in streams.items()}
    sys.stdout, sys.stderr = wrapped["stdout"], wrapped["stderr"]
    try:
        yield
    finally:
        for name, stream in wrapped.items():
            if stream is not None:
                stream.flush()
        sys.stdout, sys.stderr = streams["stdout"], streams["stderr"]


def define_compilation_cache_flag() -> None:
    """``--[no]compilation_cache`` (default on): the commands that compile read it with `apply_compilation_cache_flag`."""
    flag("bool", "compilation_cache", True, "Reuse compiled programs across runs and a run's restarts "
         "(on disk under $BAPJAX_CACHE/jax).")


def apply_compilation_cache_flag() -> None:
    """`enable_compilation_cache`, or with ``--nocompilation_cache`` (`define_compilation_cache_flag`)
    no persistent cache at all (not even one JAX's own $JAX_COMPILATION_CACHE_DIR names)."""
    if FLAGS.compilation_cache:
        enable_compilation_cache()
    else:
        jax.config.update("jax_enable_compilation_cache", False)


def enable_compilation_cache() -> str:
    """Keep compiled XLA programs on disk (JAX's $JAX_COMPILATION_CACHE_DIR when set, else
    ``<cache root>/jax``), so later runs of a command skip compilation (the evaluator compiles a
    handful of padded shapes, training a few steps)."""
    root = os.environ.get("JAX_COMPILATION_CACHE_DIR") or cache_root() / "jax"
    jax.config.update("jax_compilation_cache_dir", str(root))
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.2)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
    return str(root)


class CompileTally:
    """What this process compiled, read from `jax.monitoring`'s events: `programs` handed to the backend (XLA
    compiled each, or read it from the persistent compilation cache: `from_cache`), the backend's seconds
    (`compile_seconds`; a cache read counts its reading time), the seconds of tracing and lowering to MLIR
    before it (`trace_seconds`), and the functions that took most of the backend's time (`costliest`: name,
    programs, seconds). `compile_tally()` is the process's one tally; a part of a program (a training run)
    records `since(snapshot)`."""

    EVENTS = {"/jax/core/compile/backend_compile_duration": "compile_seconds",
              "/jax/core/compile/jaxpr_trace_duration": "trace_seconds",
              "/jax/core/compile/jaxpr_to_mlir_module_duration": "trace_seconds"}
    SHOWN = 8  # functions listed in `costliest`

    def __init__(self):
        self.totals = {"programs": 0, "from_cache": 0, "compile_seconds": 0.0, "trace_seconds": 0.0}
        self.functions: dict[str, list] = {}  # name: [programs, backend seconds]
        jax.monitoring.register_event_duration_secs_listener(self._duration)
        jax.monitoring.register_event_listener(self._event)

    def _duration(self, event: str, seconds: float, **kwargs) -> None:
        key = self.EVENTS.get(event)
        if key is None:
            return
        self.totals[key] += float(seconds)
        if key == "compile_seconds":
            self.totals["programs"] += 1
            entry = self.functions.setdefault(str(kwargs.get("fun_name", "?")), [0, 0.0])
            entry[0], entry[1] = entry[0] + 1, entry[1] + float(seconds)

    def _event(self, event: str, **_) -> None:
        self.totals["from_cache"] += event == "/jax/compilation_cache/cache_hits"

    def snapshot(self) -> dict:
        return {**self.totals, "functions": {k: list(v) for k, v in self.functions.items()}}

    def since(self, snapshot: dict) -> dict:
        """The totals since `snapshot` (seconds rounded to 0.1) and its `costliest` functions."""
        out = {k: (round(v - snapshot[k], 1) if isinstance(v, float) else v - snapshot[k]) for k, v in self.totals.items()}
        before = snapshot["functions"]
        grown = {name: (n - before.get(name, [0, 0.0])[0], t - before.get(name, [0, 0.0])[1])
                 for name, (n, t) in self.functions.items()}
        ranked = sorted(((name, n, t) for name, (n, t) in grown.items() if n), key=lambda r: -r[2])
        out["costliest"] = [[name, n, round(t, 1)] for name, n, t in ranked[:self.SHOWN]]
        return out


_TALLY: CompileTally | None = None


def compile_tally() -> CompileTally:
    """The process's CompileTally (its listeners registered on the first call)."""
    global _TALLY
    if _TALLY is None:
        _TALLY = CompileTally()
    return _TALLY


class ConfigOverrideError(UserError):
    """A `--config.<field>=value` override that names no field of the config or does not fit it."""


def apply_overrides(config, overrides, source: str = "the config"):
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
        raise ConfigOverrideError(flag_error_message(err, config)) from None
    except (AttributeError, KeyError) as err:  # ml_collections: a field the config lacks
        raise ConfigOverrideError(missing_field_message(err, overrides, source)) from None
    except (ValueError, TypeError) as err:
        raise ConfigOverrideError(f"{' '.join(overrides)}: a value does not fit its field of {source}: {err}") from None
    return config
