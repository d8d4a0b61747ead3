"""Headless Chromium for checking pages bapjax writes (the report): the DOM after load, screenshots.

Debian's ``chromium`` package (``apt-get install -y chromium``) or any Chrome/Chromium on PATH
(``$BAPJAX_CHROMIUM`` names one explicitly). WebGL runs on SwiftShader, Chromium's software GL,
so a machine without a GPU draws the 3D view too. Used by tests/test_report.py and
benchmarks/bench_report.py; not needed to make or read a report.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

CANDIDATES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable", "chrome")
FLAGS = ("--headless", "--no-sandbox", "--disable-dev-shm-usage", "--use-angle=swiftshader",
         "--enable-unsafe-swiftshader", "--hide-scrollbars", "--no-first-run", "--mute-audio")


def find_chromium() -> str | None:
    """The browser to drive: $BAPJAX_CHROMIUM, else the first of CANDIDATES on PATH, else None."""
    named = os.environ.get("BAPJAX_CHROMIUM")
    if named:
        return shutil.which(named) or (named if Path(named).is_file() else None)
    return next((path for path in map(shutil.which, CANDIDATES) if path), None)


def _run(args: list[str], timeout: float) -> subprocess.CompletedProcess:
    browser = find_chromium()
    if browser is None:
        raise FileNotFoundError("no Chromium found (apt-get install -y chromium, or set $BAPJAX_CHROMIUM)")
    with tempfile.TemporaryDirectory(prefix="bapjax-chromium-") as profile:
        return subprocess.run([browser, *FLAGS, f"--user-data-dir={profile}", *args], capture_output=True,
                              text=True, timeout=timeout, check=False)


def file_url(path, query: str = "", fragment: str = "") -> str:
    url = Path(path).resolve().as_uri()
    return url + (f"?{query}" if query else "") + (f"#{fragment}" if fragment else "")


def dump_dom(url: str, window: tuple[int, int] = (1400, 860), timeout: float = 120.0) -> str:
    """The page's DOM serialized after its load event (scripts that ran by then are reflected)."""
    done = _run([f"--window-size={window[0]},{window[1]}", "--dump-dom", url], timeout)
    if done.returncode != 0 or "<html" not in done.stdout:
        raise RuntimeError(f"chromium --dump-dom {url} failed ({done.returncode}): {done.stderr[-2000:]}")
    return done.stdout


def screenshot(url: str, out, window: tuple[int, int] = (1400, 860), timeout: float = 120.0) -> Path:
    """A PNG of the page as it stands after load."""
    out = Path(out).resolve()
    out.parent.mkdir(parents=True, exist_ok=True)
    done = _run([f"--window-size={window[0]},{window[1]}", f"--screenshot={out}", url], timeout)
    if done.returncode != 0 or not out.is_file():
        raise RuntimeError(f"chromium --screenshot {url} failed ({done.returncode}): {done.stderr[-2000:]}")
    return out
