"""Shared fixtures: the real MDC (found as every CLI finds it: $BAPJAX_MDC, else ../shared/mdc;
found nowhere, fetched once into the cache, `find_or_fetch_mdc`), itemized once per session
(cached on disk)."""

import os
import sys
from pathlib import Path

import pytest

from bapjax import paths  # imports no JAX: the variable below is set before JAX reads it

REPO = Path(__file__).resolve().parents[1]
# One persistent compilation cache for the whole session, this process and every command a test runs
# (also those given their own $BAPJAX_CACHE): a program the tests compile twice is compiled once
# (`bapjax.cli.enable_compilation_cache` reads JAX's own variable first).
os.environ.setdefault("JAX_COMPILATION_CACHE_DIR", str(paths.cache_root() / "jax"))
MDC_FIXTURES = ("mdc_path", "mdc_corpus", "mdc_archive")  # the tests that read the corpus ask for one of these


class MdcUnavailable(Exception):
    """No MDC found and none could be fetched; the message (one line) says how to get it."""


def fetched_mdc() -> Path:
    """Where the tests fetch the MDC when it is found nowhere: <cache root>/mdc-fetched."""
    return paths.cache_root() / "mdc-fetched"


def find_or_fetch_mdc(report=lambda line: print(line, file=sys.__stderr__, flush=True)) -> tuple[Path, bool]:
    """(the MDC, whether it is the tests' fetched copy): where `paths.mdc_path` finds it, else the
    copy in `fetched_mdc()`, else fetched there first (the pinned-sha256 download of `python -m
    bapjax.corpus.mdc fetch`, once: a second session finds it). `MdcUnavailable` (one line) when
    $BAPJAX_MDC points nowhere (it is not fetched over) or the fetch fails (offline, say)."""
    from bapjax.corpus import fetch

    try:
        return paths.mdc_path(), False
    except paths.MdcNotFoundError as err:
        if os.environ.get(paths.MDC_ENV):
            raise MdcUnavailable(str(err)) from None
    target = fetched_mdc()
    with paths.build_lock(target):  # a second session fetching at the same time waits, then finds it
        if not target.exists():
            url = fetch.DEFAULT_URL
            report(f"the MDC is found nowhere (${paths.MDC_ENV} unset, no {paths.shared_mdc()}): fetching it "
                   f"once into {target} for the tests")
            try:
                fetch.fetch(target, url, report=report)
            except fetch.FetchError as err:
                raise MdcUnavailable(
                    f"the corpus tests need the MDC: ${paths.MDC_ENV} is unset, {paths.shared_mdc()} does not exist "
                    f"and fetching it into {target} failed ({err}); get it where you are online with "
                    f"`python -m bapjax.corpus.mdc fetch --out DIR` and `export {paths.MDC_ENV}=DIR` "
                    f"(or fetch it with --out {target})") from None
    return target, True


@pytest.fixture(scope="session", autouse=True)
def _the_mdc(request):
    """Before the first test of a session that reads the corpus: the MDC found or fetched, and a
    fetched copy named in $BAPJAX_MDC for the session (so the commands the tests run, and tests
    that point $BAPJAX_CACHE elsewhere, find it too). A session of other tests fetches nothing."""
    if not any(name in item.fixturenames for item in request.session.items for name in MDC_FIXTURES):
        yield None
        return
    try:
        path, fetched = find_or_fetch_mdc()
    except MdcUnavailable as err:
        yield err
        return
    if not fetched:
        yield path
        return
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(paths.MDC_ENV, str(path))
        yield path


@pytest.fixture(scope="session")
def mdc_path(_the_mdc) -> Path:
    if isinstance(_the_mdc, MdcUnavailable):
        pytest.fail(str(_the_mdc), pytrace=False)
    return _the_mdc


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


@pytest.fixture(scope="session")
def tiny_run(tmp_path_factory, mdc_path):
    """test_train's tiny run, 2 steps on 32 MDC items (~20 s with compilation), trained once per session for
    the tests that need any trained run (play, the README's Python API); decoding places at least one
    action (min_actions 1), the run's own STOP rule."""
    from bapjax.training import loop
    from tests.test_train import tiny_config

    config = tiny_config("unused")
    mc = config.data.sources.mc
    mc.corpus = str(mdc_path)
    mc.max_train_items = 32
    config.train.update(dict(num_epochs=1, max_steps=2, eval_every_steps=2, log_every_steps=2))
    config.eval.update(dict(final_splits=(), min_actions=1, max_actions=6, stop_thresholds=()))
    run = tmp_path_factory.mktemp("tiny-run") / "run"
    loop.train_and_evaluate(config, run)
    return run
