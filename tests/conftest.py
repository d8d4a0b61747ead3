"""Shared fixtures: the real MDC from ../shared/mdc, itemized once per session (cached on disk)."""

from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED_MDC = REPO.parent / "shared" / "mdc"


@pytest.fixture(scope="session")
def mdc_path() -> Path:
    if not SHARED_MDC.exists():
        pytest.fail(f"the MDC archive is expected at {SHARED_MDC} (../shared/mdc beside the repo)")
    return SHARED_MDC


@pytest.fixture(scope="session")
def mdc_corpus(mdc_path):
    from bapjax.corpus import mdc

    return mdc.load_corpus(mdc_path)
