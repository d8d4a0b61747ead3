"""Where bapjax keeps things on disk: the cache root, repository-relative paths, run directories.

The cache (`$BAPJAX_CACHE`, default `~/.cache/bapjax`) holds everything bapjax can rebuild:
unpacked corpus archives (`mdc/`), itemized corpora and features, generated and augmented corpora
(`generated/`, `augmented/`), GloVe (`glove/`) and compiled XLA programs (`jax/`).
"""

from __future__ import annotations

import os
from pathlib import Path

from etils import epath

REPO_ROOT = Path(__file__).resolve().parents[1]


def cache_root() -> Path:
    """The root of every bapjax cache: `$BAPJAX_CACHE`, else `~/.cache/bapjax`."""
    return Path(os.environ.get("BAPJAX_CACHE") or Path.home() / ".cache" / "bapjax")


def resolve_path(path: str | os.PathLike) -> Path:
    """Absolute, '~' and $VAR expanded; a relative path is taken from the cwd when it exists
    there, else from the repository root (so configs can say ../shared/mdc from any directory)."""
    expanded = Path(os.path.expandvars(os.path.expanduser(str(path))))
    if expanded.is_absolute() or expanded.exists():
        return expanded.resolve()
    return (REPO_ROOT / expanded).resolve()


def workdir_path(path: str | os.PathLike) -> epath.Path:
    """A run directory on any path Orbax accepts: `gs://...` (or another scheme) stays as given;
    a local path is made absolute ('~' expanded). All workdir I/O goes through `epath.Path`."""
    text = os.fspath(path)
    if "://" in text:
        return epath.Path(text)
    return epath.Path(os.path.abspath(os.path.expanduser(text)))
