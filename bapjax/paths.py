"""Where bapjax keeps things on disk: the cache root, the MDC, repository-relative paths, run directories.

The cache (`$BAPJAX_CACHE`, default `~/.cache/bapjax`) holds everything bapjax can rebuild:
unpacked corpus archives (`mdc/`), itemized corpora and features, generated and augmented corpora
(`generated/`, `augmented/`), GloVe (`glove/`) and compiled XLA programs (`jax/`); also the
games `python -m bapjax.play` writes when given no --out (`play-games/`), which cannot be rebuilt.

Every command checks where it will write before any work (`check_writable_dir` for a folder,
`check_output_file` for a file, `writable_cache` for the cache when it must write there): a
location that cannot be made or written is one line naming it, the flag and why (exit 2).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import json
import os
import re
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Sequence

from etils import epath

from bapjax.errors import UserError

REPO_ROOT = Path(__file__).resolve().parents[1]
CACHE_ENV = "BAPJAX_CACHE"  # the cache root's variable (`cache_root`)


def cache_root() -> Path:
    """The root of every bapjax cache: `$BAPJAX_CACHE`, else `~/.cache/bapjax`."""
    return Path(os.environ.get(CACHE_ENV) or Path.home() / ".cache" / "bapjax")


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

MDC = "@mdc"  # a path value (bapjax.training.run_config.MDC, any --corpus) meaning "the MDC, found by mdc_path()"
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
        f"`export {MDC_ENV}=DIR` or pass --corpus DIR (docs/corpus.md)")


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


# --------------------------------------------------------------------------------------------
# Cache entries: a record of what a finished entry holds, checked on every load

COMPLETE = ".bapjax-complete"  # written last into a finished cache entry: what it holds
DAMAGED = "damaged"  # <cache root>/damaged/: entries that failed their check, moved aside


def file_sha256(path: str | os.PathLike) -> str:
    """The sha256 of a file's bytes, hex (read in 1 MiB chunks): cache seals, archives, stores."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def _entry_files(entry: Path):
    for path in sorted(entry.rglob("*")):
        if path.is_file() and path.name != COMPLETE:
            yield path


def seal(entry: str | os.PathLike, **info) -> None:
    """Mark the cache folder `entry` complete: its record (size, mtime and sha256 of every file,
    plus `info`) is written last and atomically, so an entry without it is unfinished."""
    entry = Path(entry)
    files = {}
    for path in _entry_files(entry):
        st = path.stat()
        files[str(path.relative_to(entry))] = [st.st_size, st.st_mtime_ns, file_sha256(path)]
    with writing(entry / COMPLETE, "the completion record of a cache entry"):
        partial = entry / f".{COMPLETE}.{os.getpid()}.tmp"
        try:
            partial.write_text(json.dumps({**info, "pid": os.getpid(), "files": files}) + "\n")
            os.replace(partial, entry / COMPLETE)
        finally:
            partial.unlink(missing_ok=True)


def is_sealed(entry: str | os.PathLike) -> bool:
    return (Path(entry) / COMPLETE).exists()


def seal_problem(entry: str | os.PathLike) -> str | None:
    """None when the sealed folder `entry` still holds what its record says; else what differs.
    Sizes are checked on every load (a stat per file); a file whose mtime changed is hashed, so
    a rewrite of the same size is caught too. An entry sealed before records held files (an
    older bapjax) passes, as it did then."""
    entry = Path(entry)
    try:
        record = json.loads((entry / COMPLETE).read_text())
    except FileNotFoundError:
        return "no completion record"
    except (OSError, ValueError) as err:
        return f"unreadable completion record {COMPLETE} ({err})"
    files = record.get("files") if isinstance(record, dict) else None
    if not isinstance(files, dict):
        return None
    for name, expected in files.items():
        path = entry / name
        try:
            size, mtime_ns, sha256 = expected
            st = path.stat()
        except FileNotFoundError:
            return f"{name} is missing"
        except (OSError, ValueError, TypeError) as err:
            return f"{name}: cannot check it ({err})"
        if st.st_size != size:
            return f"{name} has {st.st_size} bytes, {size} when the entry was completed"
        if st.st_mtime_ns != mtime_ns and file_sha256(path) != sha256:
            return f"{name} changed since the entry was completed (sha256 differs)"
    return None


def in_cache(path: str | os.PathLike) -> bool:
    """Whether `path` lies inside the cache root (only such paths are ever healed)."""
    root = cache_root().resolve()
    return Path(path).resolve().is_relative_to(root) and Path(path).resolve() != root


class DamagedOutsideCacheError(UserError):
    """A derived folder outside the cache that fails its check: bapjax does not move it."""


def set_aside(entry: str | os.PathLike, problem: str, what: str) -> Path:
    """Move the damaged cache entry `entry` (folder or file) to ``<cache root>/damaged/`` and say
    so in one warning line; the caller rebuilds it. Anything outside the cache is never moved:
    DamagedOutsideCacheError names it instead."""
    entry = Path(entry)
    if not in_cache(entry):
        raise DamagedOutsideCacheError(f"{entry}: {what} is damaged ({problem}); it is outside the cache "
                                       f"({cache_root()}), so bapjax leaves it: remove it or build it elsewhere")
    aside = cache_root() / DAMAGED / f"{entry.name}-{time.strftime('%Y%m%dT%H%M%S')}-{os.getpid()}"
    aside.parent.mkdir(parents=True, exist_ok=True)
    os.replace(entry, aside)
    print(f"warning: {what} at {entry} is damaged ({problem}); moved it to {aside} and rebuilding it",
          file=sys.stderr, flush=True)
    return aside


# --------------------------------------------------------------------------------------------
# Writes that can meet a full disk or a file-size limit

NO_SPACE = (errno.ENOSPC, errno.EFBIG, errno.EDQUOT)


_TENSORSTORE_ERRNO = re.compile(r"os_error_code='(\d+)'")  # how Orbax's TensorStore reports it


def no_space_error(err: BaseException | None) -> OSError | None:
    """The OSError of a full disk / quota / file-size limit behind `err` (its cause or context
    chain: Orbax and worker pools wrap it; TensorStore puts the errno in its message), else None."""
    seen = set()
    while err is not None and id(err) not in seen:
        seen.add(id(err))
        if isinstance(err, OSError) and err.errno in NO_SPACE:
            return err
        code = _TENSORSTORE_ERRNO.search(str(err))
        if code and int(code.group(1)) in NO_SPACE:
            return OSError(int(code.group(1)), os.strerror(int(code.group(1))))
        err = err.__cause__ or err.__context__
    return None


class NoSpaceError(UserError):
    """A write that failed for lack of space (or a file-size limit); the message names what."""


def describe_no_space(err: OSError, target: str | os.PathLike | None, what: str) -> str:
    """The one line of a full disk: where (when known), what, why, and what to do."""
    reason = "the file-size limit (ulimit -f) was reached" if err.errno == errno.EFBIG else \
        "no space left on the device" if err.errno == errno.ENOSPC else "the disk quota is exceeded"
    where = f"{target}: " if target else ""
    return f"{where}could not write {what}: {reason}; free space and run the same command again"


@contextlib.contextmanager
def writing(target: str | os.PathLike, what: str, cleanup: Sequence[str | os.PathLike] = ()):
    """Turn a full disk / quota / file-size limit met while writing `target` into NoSpaceError
    naming it, after removing `cleanup` (the partial files or folders of this write)."""
    try:
        yield
    except NoSpaceError:
        raise
    except Exception as err:  # noqa: BLE001 (re-raised unless it is a full disk)
        cause = no_space_error(err)
        if cause is None:
            raise
        for path in cleanup:
            path = Path(path)
            if path.is_dir():
                shutil.rmtree(path, ignore_errors=True)
            else:
                path.unlink(missing_ok=True)
        raise NoSpaceError(describe_no_space(cause, target, what)) from None


def write_atomically(path: str | os.PathLike, write: Callable[[Path], Any], what: str) -> Any:
    """`write(partial)` then rename the partial file onto `path`: `path` is either the old file
    or the whole new one, never half of it (a full disk leaves it as it was)."""
    path = Path(path)
    partial = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with writing(path, what, cleanup=[partial]):
        try:
            result = write(partial)
            os.replace(partial, path)
        finally:
            partial.unlink(missing_ok=True)
    return result


class UnwritableError(UserError):
    """An output location that cannot be created or written; the message names it and why."""


def _file_in_the_way(path: Path) -> Path | None:
    """`path` or its nearest existing ancestor when that is not a folder (a file where a folder
    must go), else None."""
    for candidate in (path, *path.parents):
        if candidate.exists():
            return None if candidate.is_dir() else candidate
    return None


def check_writable_dir(directory: str | os.PathLike, what: str, output: str | os.PathLike | None = None,
                       keep_folders: bool = True) -> Path:
    """Create `directory` (and its parents) if need be and check that a file can be written in it,
    before any work: else `UnwritableError` naming `what` (a flag, e.g. "--out"), the path (or
    `output`, the file to be written in `directory`, as given) and the reason, in one line. The
    probe file is removed, and so are the folders the check made when it fails, or also when it
    passes with `keep_folders=False` (a command that may still refuse its input writes nothing)."""
    directory = Path(directory).expanduser()
    missing = [folder for folder in (directory, *directory.parents) if not folder.exists()]  # deepest first
    try:
        directory.mkdir(parents=True, exist_ok=True)
        handle, probe = tempfile.mkstemp(prefix=".bapjax-write-check.", dir=directory)  # a unique name (many processes)
        os.close(handle)
        os.unlink(probe)
    except OSError as err:
        for folder in missing:
            with contextlib.suppress(OSError):
                folder.rmdir()
        blocker = _file_in_the_way(directory)
        reason = ("a file, not a folder" if blocker == directory else f"{blocker} is a file, not a folder") \
            if blocker is not None else err.strerror or type(err).__name__
        where = f"{output}: cannot write in {directory}" if output is not None else f"{directory}: cannot write there"
        raise UnwritableError(f"{what} {where} ({reason})") from None
    if not keep_folders:
        for folder in missing:
            folder.rmdir()
    return directory


def check_output_file(path: str | os.PathLike | None, what: str) -> None:
    """An output file checked before any work: not a folder, in a folder that takes a file
    (`check_writable_dir`, which makes the folder and its parents when they are missing, as every
    output folder and `--workdir` are made); else `UnwritableError` naming `what` (its flag) and the
    path. None, "-" (stdout) and URLs pass."""
    text = os.fspath(path) if path is not None else ""
    if not text or text == "-" or "://" in text:
        return
    target = Path(text).expanduser().absolute()
    if target.is_dir():
        raise UnwritableError(f"{what} {text}: a folder, not a file")
    check_writable_dir(target.parent, what, output=text)


def writable_cache(*parts: str) -> Path:
    """The cache folder `cache_root()/parts...`, created and checked (`check_writable_dir`) where a
    command must write it: a cache that takes no file is one line naming it and $BAPJAX_CACHE."""
    return check_writable_dir(cache_root().joinpath(*parts), f"the cache (${CACHE_ENV})")
