"""Shared fixtures: the real MDC (found as every CLI finds it: $BAPJAX_MDC, else ../shared/mdc),
itemized once per session (cached on disk)."""

from pathlib import Path

import pytest


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
