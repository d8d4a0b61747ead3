"""Shared fixtures: the real MDC (found as every CLI finds it: $BAPJAX_MDC, else ../shared/mdc),
itemized once per session (cached on disk)."""

from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="session")
def mdc_path() -> Path:
    from bapjax import paths

    try:
        return paths.mdc_path()
    except paths.MdcNotFoundError as err:
        pytest.fail(str(err))


@pytest.fixture(scope="session")
def mdc_corpus(mdc_path):
    from bapjax.corpus import mdc

    return mdc.load_corpus(mdc_path)


@pytest.fixture(scope="session")
def mdc_archive(mdc_path) -> Path:
    """The MDC .tar.xz the tests read (the fetch tests serve it through a file:// URL)."""
    path = Path(mdc_path)
    archives = [path] if path.is_file() else sorted(path.glob("*.tar.xz"))
    if not archives:
        pytest.skip(f"{path} is an unpacked MDC; the fetch tests read the archive (point $BAPJAX_MDC at it)")
    return archives[0]
