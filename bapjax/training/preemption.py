"""Stop training cleanly at SIGTERM or SIGINT: finish the step, save it, exit with `EXIT_STATUS`.

Pods and Slurm preempt with SIGTERM and a grace period; a Ctrl-C is SIGINT. While the training
loop runs, `PreemptionWatch` turns either signal into a request that `should_stop(step)`
answers after each step, so the loop saves a checkpoint of exactly that step (as the periodic
one: iterator position, optimizer state, early-stopping state) and the same command resumes from it.

The signal is answered on stderr at once, by a thread that the C-level signal handler wakes
(`signal.set_wakeup_fd`): Python runs a signal's handler in the main thread only between
bytecodes, and the main thread can sit for many seconds in one call (compiling a new shape,
waiting on the steps it dispatched ahead, an eval's decoding). The line comes from the loop's
`notice(signal_name)` (which step is saved and what comes first) and is written with `os.write`,
so a dead stderr reader costs nothing but the line. A second signal while the first is being
served says so and changes nothing (the save goes on: killing it midway would lose the step); a
third stops the process at once (exit 128 + the signal's number; the checkpoints saved before
stay intact: Orbax renames a checkpoint into place only when it is whole).

On several processes (``jax.distributed``) every process must save at the same step. JAX's
preemption service does that: its notifier catches SIGTERM in any process, and
``multihost_utils.reached_preemption_sync_point(step)``, called by every process at every step,
turns True for all of them at the same step (the largest step any process had reached, plus
one). A SIGINT there is handed to that service as a SIGTERM to this process. JAX's notifier
holds SIGTERM in C there (a Python handler would silence it), so a SIGTERM is heard only at the
sync point, where the loop's closing line says so. On one process the signal handler's flag is enough.
"""

from __future__ import annotations

import os
import signal
import threading
from typing import Callable

import numpy as np
from jax.experimental import multihost_utils

EXIT_STATUS = 75  # EX_TEMPFAIL: stopped early on request, the checkpoint saved; rerun to resume
SIGNALS = (signal.SIGTERM, signal.SIGINT)
FORCED = 3  # the signal that stops the process at once, unsaved: the third


class Preempted(Exception):
    """Training stopped at a signal after saving `step` (what `bapjax.train` exits 75 with)."""

    def __init__(self, step: int, signal_name: str):
        super().__init__(f"stopped by {signal_name} at step {step}")
        self.step, self.signal_name = step, signal_name


def _distributed_state():
    from jax._src import distributed  # the client exists only after jax.distributed.initialize

    return distributed.global_state


def say(line: str) -> None:
    """`line` on stderr now, bypassing Python's buffered stream (safe while the main thread is
    inside a write of its own); a stderr without a reader drops it."""
    try:
        os.write(2, (line.rstrip("\n") + "\n").encode("utf-8", "replace"))
    except OSError:
        pass


class PreemptionWatch:
    """SIGTERM/SIGINT handlers from `install()` (before the training loop) to `uninstall()`
    (after it): a signal outside the loop keeps its usual meaning (data builds are safe to kill).
    `notice(signal_name)` is the line said at once at the first signal (None: a plain one)."""

    def __init__(self, notice: Callable[[str], str] | None = None):
        self.received: str | None = None
        self.heard = 0  # signals counted by the notice thread
        self.notice = notice or (lambda name: f"{name} received: saving the current step, then exit {EXIT_STATUS}")
        state = _distributed_state()
        self.multi_process = state.client is not None
        # without JAX's preemption service (jax_enable_preemption_service=False) the processes
        # agree by an all-gather of their flags at every step instead
        self.service = self.multi_process and state.preemption_sync_manager is not None
        self._previous: dict = {}
        self._wakeup = None  # (read end, write end, the wakeup fd before ours)
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def _handle(self, signum, frame):
        """The Python-level handler (main thread, between bytecodes): the stop request."""
        del frame
        if self.received is not None:
            return  # counted and answered by the notice thread
        self.received = signal.Signals(signum).name
        if self.service and signum != signal.SIGTERM:
            os.kill(os.getpid(), signal.SIGTERM)  # JAX's notifier tells every process

    def _listen(self, read_end: int) -> None:
        """The notice thread: each byte the C-level handler writes is a signal's number."""
        while True:
            try:
                data = os.read(read_end, 64)
            except OSError:
                return
            if not data:  # uninstall closed the write end
                os.close(read_end)
                return
            for signum in data:
                if signum in SIGNALS:
                    self._heard(signal.Signals(signum).name, signum)

    def _heard(self, name: str, signum: int) -> None:
        with self._lock:
            self.heard += 1
            count = self.heard
        if count == 1:
            try:
                say(self.notice(name))
            except Exception as err:  # noqa: BLE001 (the notice must never cost the save)
                say(f"{name} received: saving the current step, then exit {EXIT_STATUS} ({err})")
        elif count < FORCED:
            say(f"{name} received again: still finishing and saving that step; a third signal stops at once without "
                "it (the checkpoints saved before it stay)")
        else:
            say(f"{name} received a third time: stopping now without saving; the same command resumes from the last "
                "checkpoint saved before")
            os._exit(128 + signum)

    def install(self) -> "PreemptionWatch":
        if threading.current_thread() is not threading.main_thread():
            return self  # Python takes signals in the main thread only: leave them as they are
        for signum in SIGNALS:
            if self.service and signum == signal.SIGTERM:
                continue  # JAX's preemption notifier holds SIGTERM (a C handler)
            self._previous[signum] = signal.signal(signum, self._handle)
        read_end, write_end = os.pipe()
        os.set_blocking(write_end, False)  # the C handler must never block on a full pipe
        before = signal.set_wakeup_fd(write_end, warn_on_full_buffer=False)
        self._wakeup = (read_end, write_end, before)
        self._thread = threading.Thread(target=self._listen, args=(read_end,), name="preemption-notice", daemon=True)
        self._thread.start()
        return self

    def uninstall(self) -> None:
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)
        self._previous = {}
        if self._wakeup is not None:
            _, write_end, before = self._wakeup
            signal.set_wakeup_fd(before)
            os.close(write_end)  # the notice thread reads the end of the pipe and closes its end
            self._wakeup = None
            self._thread.join(timeout=5)
            self._thread = None

    def should_stop(self, step: int) -> bool:
        """Call after every step, on every process: True at the step all processes save at."""
        if self.service:
            if multihost_utils.reached_preemption_sync_point(step):
                self.received = self.received or "SIGTERM"
                return True
            return False
        if self.multi_process:
            flags = multihost_utils.process_allgather(np.int32(self.received is not None))
            if np.any(flags):
                self.received = self.received or "a signal to another process"
                return True
            return False
        return self.received is not None
