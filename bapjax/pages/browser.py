"""Headless Chromium for checking pages bapjax writes (the report): the DOM after load, screenshots.

Debian's ``chromium`` package (``apt-get install -y chromium``) or any Chrome/Chromium on PATH
(``$BAPJAX_CHROMIUM`` names one explicitly). WebGL runs on SwiftShader, Chromium's software GL,
so a machine without a GPU draws the 3D view too. Used by tests/test_report.py and
benchmarks/bench_report.py; not needed to make or read a report.

``dump_dom`` is Chromium's ``--dump-dom`` (the DOM at the load event). ``Browser`` drives one
headless Chromium over the DevTools protocol on a pipe (``--remote-debugging-pipe``: no port, no
extra package): open a page, wait for a condition in it (work the page does after its load event,
such as the report's 3D view), evaluate JavaScript, take a screenshot.
"""

from __future__ import annotations

import base64
import fcntl
import json
import os
import select
import shutil
import subprocess
import tempfile
import time
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


class Browser:
    """One headless Chromium driven over the DevTools protocol (JSON messages ending in NUL on
    its file descriptors 3 and 4, ``--remote-debugging-pipe``), with one page. A context manager::

        with Browser() as b:
            b.open(url)                                 # returns after the load event
            b.wait_for("window.done === true")          # polls a JavaScript condition
            b.screenshot("page.png")
    """

    def __init__(self, window: tuple[int, int] = (1400, 860), timeout: float = 120.0):
        executable = find_chromium()
        if executable is None:
            raise FileNotFoundError("no Chromium found (apt-get install -y chromium, or set $BAPJAX_CHROMIUM)")
        self.timeout = timeout
        self._profile = tempfile.TemporaryDirectory(prefix="bapjax-chromium-")
        self._log = tempfile.TemporaryFile()  # Chromium's stderr, quoted when it stops answering
        to_browser, self._commands = os.pipe()
        self._replies, from_browser = os.pipe()
        # Chromium reads our commands on its fd 3 and writes its replies on its fd 4; bash puts
        # the pipe ends there (numbers above 4 first, so that the moves cannot clobber them; not
        # dash's /bin/sh, which takes only one-digit descriptors, and under pytest they have two).
        to_browser, from_browser = _above(to_browser, 4), _above(from_browser, 4)
        self._process = subprocess.Popen(
            [shutil.which("bash") or "/bin/bash", "-c", f'exec "$@" 3<&{to_browser} 4>&{from_browser} {to_browser}<&- {from_browser}>&-', "sh",
             executable, *FLAGS, f"--user-data-dir={self._profile.name}", f"--window-size={window[0]},{window[1]}",
             "--remote-debugging-pipe", "about:blank"],
            pass_fds=(to_browser, from_browser), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
            stderr=self._log)
        os.close(to_browser)
        os.close(from_browser)
        self._buffer = b""
        self._next_id = 0
        self._events: list[dict] = []
        try:
            deadline = time.monotonic() + timeout
            pages = []
            while not pages and time.monotonic() < deadline:
                pages = [t for t in self._send("Target.getTargets")["targetInfos"] if t["type"] == "page"]
                if not pages:
                    time.sleep(0.05)
            if not pages:
                raise RuntimeError("headless Chromium opened no page")
            self._session = self._send("Target.attachToTarget", targetId=pages[0]["targetId"],
                                       flatten=True)["sessionId"]
            self.call("Page.enable")
            # the page's viewport is the window size (as with --screenshot), not the window less
            # the browser's bars
            self.call("Emulation.setDeviceMetricsOverride", width=window[0], height=window[1], deviceScaleFactor=1,
                      mobile=False)
        except BaseException:
            self.close()
            raise

    def __enter__(self) -> "Browser":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        if self._process.poll() is None:
            try:
                self._send("Browser.close", _timeout=10)
                self._process.wait(10)
            except (OSError, RuntimeError, subprocess.TimeoutExpired):
                self._process.kill()
                self._process.wait()
        for fd in (self._commands, self._replies):
            try:
                os.close(fd)
            except OSError:
                pass
        self._profile.cleanup()
        self._log.close()

    def _log_tail(self, lines: int = 8) -> str:
        try:
            self._log.seek(0)
            tail = self._log.read().decode(errors="replace").strip().splitlines()[-lines:]
        except (OSError, ValueError):
            return ""
        return ("; its last stderr lines:\n" + "\n".join(tail)) if tail else ""

    def _message(self, deadline: float) -> dict:
        while b"\0" not in self._buffer:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self._replies], [], [], left)[0]:
                raise RuntimeError(f"headless Chromium did not answer within {self.timeout:.0f} s{self._log_tail()}")
            chunk = os.read(self._replies, 1 << 20)
            if not chunk:
                raise RuntimeError(f"headless Chromium closed its DevTools pipe (exit status "
                                   f"{self._process.poll()}){self._log_tail()}")
            self._buffer += chunk
        raw, self._buffer = self._buffer.split(b"\0", 1)
        return json.loads(raw)

    def _send(self, method: str, _session: str | None = None, _timeout: float | None = None, **params) -> dict:
        self._next_id += 1
        message = {"id": self._next_id, "method": method, "params": params}
        if _session:
            message["sessionId"] = _session
        os.write(self._commands, json.dumps(message).encode() + b"\0")
        deadline = time.monotonic() + (self.timeout if _timeout is None else _timeout)
        while True:
            reply = self._message(deadline)
            if reply.get("id") == self._next_id:
                if "error" in reply:
                    raise RuntimeError(f"DevTools {method}: {reply['error']}")
                return reply.get("result", {})
            if "method" in reply:
                self._events.append(reply)

    def call(self, method: str, **params) -> dict:
        """A DevTools protocol command to the page; its result."""
        return self._send(method, _session=self._session, **params)

    def open(self, url: str) -> None:
        """Navigates the page to ``url`` and returns after its load event."""
        self._events.clear()
        self.call("Page.navigate", url=url)
        deadline = time.monotonic() + self.timeout
        while not any(e["method"] == "Page.loadEventFired" for e in self._events):
            self._events.append(self._message(deadline))
        self._events.clear()

    def evaluate(self, expression: str):
        """The value of a JavaScript expression in the page (a promise is awaited)."""
        result = self.call("Runtime.evaluate", expression=expression, awaitPromise=True, returnByValue=True,
                           timeout=int(self.timeout * 1000))
        if "exceptionDetails" in result:
            details = result["exceptionDetails"]
            raise RuntimeError(f"JavaScript error: {details.get('exception', {}).get('description') or details}")
        return result["result"].get("value")

    def wait_for(self, condition: str, poll_ms: int = 20):
        """Polls the JavaScript expression ``condition`` in the page until it is truthy; its value."""
        return self.evaluate(f"""new Promise((resolve) => {{ const poll = () => {{ const v = ({condition});
            if (v) resolve(v); else setTimeout(poll, {poll_ms}); }}; poll(); }})""")

    def screenshot(self, out) -> Path:
        """A PNG of the page's viewport as it stands now."""
        out = Path(out).resolve()
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_bytes(base64.b64decode(self.call("Page.captureScreenshot", format="png")["data"]))
        return out


def _above(fd: int, lowest: int) -> int:
    """``fd`` moved to a number above ``lowest``."""
    if fd > lowest:
        return fd
    moved = fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, lowest + 1)
    os.close(fd)
    return moved


def screenshot(url: str, out, window: tuple[int, int] = (1400, 860), timeout: float = 120.0,
               wait_for: str | None = None) -> Path:
    """A PNG of the page after its load event and, when given, once the JavaScript condition
    ``wait_for`` holds (the report: ``report.VIEW_DRAWN``, its 3D view drawn)."""
    with Browser(window, timeout) as page:
        page.open(url)
        if wait_for:
            page.wait_for(wait_for)
        return page.screenshot(out)
