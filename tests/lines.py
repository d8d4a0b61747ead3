"""Reading a child process's output with a deadline: a test that waits on a pipe never hangs, and
when the line does not come it says what it waited for and what it read instead."""

import queue
import re
import threading
import time


class LineReader:
    """Lines of `stream` (a child's text stdout or stderr) read by a daemon thread, so that a wait for
    one has a deadline; `lines` holds every line read so far."""

    def __init__(self, stream):
        self.lines: list[str] = []
        self._queue: queue.Queue = queue.Queue()
        threading.Thread(target=self._read, args=(stream,), daemon=True).start()

    def _read(self, stream) -> None:
        for line in stream:
            self._queue.put(line)
        self._queue.put(None)  # end of the stream

    def wait_for(self, pattern: str, timeout: float) -> str:
        """The first new line that matches `pattern` (re.search); AssertionError naming the pattern,
        the wait and the lines read instead when the stream ends or `timeout` seconds pass first."""
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            try:
                line = self._queue.get(timeout=max(left, 0.0)) if left > 0 else None
            except queue.Empty:
                line = None
            if line is None:
                ended = "the stream ended" if left > 0 else f"{timeout:g} s passed"
                raise AssertionError(f"waited for a line matching {pattern!r}; {ended}; read instead: "
                                     f"{''.join(self.lines)[-3000:]!r}")
            self.lines.append(line)
            if re.search(pattern, line):
                return line

    def rest(self, timeout: float = 60) -> str:
        """Every line until the stream ends (at most `timeout` seconds), as one string."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                line = self._queue.get(timeout=max(deadline - time.monotonic(), 0.01))
            except queue.Empty:
                break
            if line is None:
                break
            self.lines.append(line)
        return "".join(self.lines)
