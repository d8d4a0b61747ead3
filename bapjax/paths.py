"""Where bapjax keeps things on disk: the cache root, the MDC, repository-relative paths, run directories.

The cache (`$BAPJAX_CACHE`, default `~/.cache/bapjax`) holds everything bapjax can rebuild:
unpacked corpus archives (`mdc/`), itemized corpora and features, generated and augmented corpora
(`generated/`, `augmented/`), GloVe (`glove/`) and compiled XLA programs (`jax/`).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
from pathlib import Path

from etils import epath

from bapjax.errors import UserError

REPO_ROOT = Path(__file__).resolve().parents[1]


def cache_root() -> Path:
    """The root of every bapjax cache: `$BAPJAX_CACHE`, else `~/.cache/bapjax`."""
    return Path(os.environ.get("BAPJAX_CACHE") or Path.home() / ".cache" / "bapjax")


def resolve_path(path: str | os.PathLike) -> Path:
    """Absolute, '~' and $VAR expanded; a relative path is taken from the cwd when it exists
    there, else from the repository root. `MDC` ("@mdc") is the MDC as `mdc_path` finds it."""
    if os.fspath(path) == MDC:
        return mdc_path()
    expanded = Path(os.path.expandvars(os.path.expanduser(str(path))))
    if expanded.is_absolute() or expanded.exists():
        return expanded.resolve()
    return (REPO_ROOT / expanded).resolve()


# --------------------------------------------------------------------------------------------
# The Minecraft Dialogue Corpus: found in one place

MDC = "@mdc"  # a path value (configs.common.MDC, any --corpus) meaning "the MDC, found by mdc_path()"
MDC_ENV = "BAPJAX_MDC"
MDC_REPOSITORY = "https://github.com/prashant-jayan21/minecraft-bap-models"  # publishes it in data/


class MdcNotFoundError(UserError):
    """No MDC was given and none is where bapjax looks; the message says how to get one."""


def shared_mdc() -> Path:
    """``../shared/mdc`` beside the repository: where the workspace that built bapjax keeps it."""
    return REPO_ROOT.parent / "shared" / "mdc"


def mdc_path(value: str | os.PathLike | None = None) -> Path:
    """Where the MDC is (the archive, an unpacked folder or a clone of the public repository):
    `value` (a flag or config value) when given and not `MDC`, else ``$BAPJAX_MDC``, else
    ``../shared/mdc`` beside the repository, else `MdcNotFoundError` with the instructions.
    Every CLI, config and test finds the corpus through here, so there is no second default."""
    if value is not None and os.fspath(value) not in ("", MDC):
        return resolve_path(value)
    env = os.environ.get(MDC_ENV)
    if env:
        path = resolve_path(env)
        if not path.exists():
            raise MdcNotFoundError(f"${MDC_ENV}={env}: no such file or folder; point it at the MDC archive, "
                                   f"an unpacked copy or a clone of {MDC_REPOSITORY}")
        return path
    if shared_mdc().exists():
        return shared_mdc()
    raise MdcNotFoundError(
        f"no Minecraft Dialogue Corpus: none given, ${MDC_ENV} is unset and {shared_mdc()} does not exist; "
        f"get it with `python -m bapjax.corpus.mdc fetch --out DIR` (from {MDC_REPOSITORY}), then "
        f"`export {MDC_ENV}=DIR` or pass --corpus DIR (README: The corpus)")


def workdir_path(path: str | os.PathLike) -> epath.Path:
    """A run directory on any path Orbax accepts: `gs://...` (or another scheme) stays as given;
    a local path is made absolute ('~' expanded). All workdir I/O goes through `epath.Path`."""
    text = os.fspath(path)
    if "://" in text:
        return epath.Path(text)
    return epath.Path(os.path.abspath(os.path.expanduser(text)))


# --------------------------------------------------------------------------------------------
# Folders bapjax writes: a marker says so, and only such folders are ever replaced

OWNER_MARKER = ".bapjax-owner"  # JSON {"writer": module}; written before anything else


def mark_owned(directory: str | os.PathLike, writer: str) -> None:
    """Record that `writer` (a bapjax module) is filling `directory`."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    (directory / OWNER_MARKER).write_text(json.dumps({"writer": writer}) + "\n")


def owner_of(directory: str | os.PathLike) -> str | None:
    """The bapjax module that wrote `directory`, or None when bapjax did not (or it is unreadable)."""
    try:
        return json.loads((Path(directory) / OWNER_MARKER).read_text()).get("writer")
    except (OSError, ValueError, AttributeError):
        return None


class NotOursError(UserError):
    """A folder bapjax was asked to replace but did not write."""


def check_replaceable(directory: str | os.PathLike, writer: str, what: str) -> None:
    """Raise NotOursError unless `directory` is absent, empty, or was written by `writer`:
    `--overwrite` and cache rebuilds never delete a folder bapjax did not write."""
    directory = Path(directory)
    if not directory.exists() or not any(directory.iterdir()):
        return
    owner = owner_of(directory)
    if owner != writer:
        who = f"it was written by {owner}" if owner else f"bapjax did not write it (no {OWNER_MARKER} marker)"
        raise NotOursError(f"{directory}: refusing to replace {what}: {who}; pick another output directory")


@contextlib.contextmanager
def build_lock(target: str | os.PathLike):
    """Hold an exclusive lock named after `target` (beside it) while building it: a second
    process building the same cache entry waits, then finds it built. The kernel drops the lock
    when its holder dies, so a killed build never blocks the next one."""
    target = Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    with open(target.parent / f".{target.name}.lock", "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
