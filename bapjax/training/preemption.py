"""Stop training cleanly at SIGTERM or SIGINT: finish the step, save it, exit with `EXIT_STATUS`.

Pods and Slurm preempt with SIGTERM and a grace period; a Ctrl-C is SIGINT. While the training
loop runs, `PreemptionWatch` turns either signal into a request that `should_stop(step)`
answers after each step, so the loop saves a checkpoint of exactly that step (as the periodic
one: iterator position, optimizer state, early-stopping state) and the same command resumes from it.

On several processes (``jax.distributed``) every process must save at the same step. JAX's
preemption service does that: its notifier catches SIGTERM in any process, and
``multihost_utils.reached_preemption_sync_point(step)``, called by every process at every step,
turns True for all of them at the same step (the largest step any process had reached, plus
one). A SIGINT there is handed to that service as a SIGTERM to this process. On one process the
signal handler's flag is enough. A second signal while the first is pending stops at once.
"""

from __future__ import annotations

import os
import signal
import threading

import numpy as np
from jax.experimental import multihost_utils

EXIT_STATUS = 75  # EX_TEMPFAIL: stopped early on request, the checkpoint saved; rerun to resume
SIGNALS = (signal.SIGTERM, signal.SIGINT)


class Preempted(Exception):
    """Training stopped at a signal after saving `step` (what `bapjax.train` exits 75 with)."""

    def __init__(self, step: int, signal_name: str):
        super().__init__(f"stopped by {signal_name} at step {step}")
        self.step, self.signal_name = step, signal_name


def _distributed_state():
    from jax._src import distributed  # the client exists only after jax.distributed.initialize

    return distributed.global_state


class PreemptionWatch:
    """SIGTERM/SIGINT handlers from `install()` (before the training loop) to `uninstall()`
    (after it): a signal outside the loop keeps its usual meaning (data builds are safe to kill)."""

    def __init__(self):
        self.received: str | None = None
        state = _distributed_state()
        self.multi_process = state.client is not None
        # without JAX's preemption service (jax_enable_preemption_service=False) the processes
        # agree by an all-gather of their flags at every step instead
        self.service = self.multi_process and state.preemption_sync_manager is not None
        self._previous: dict = {}

    def _handle(self, signum, frame):
        del frame
        if self.received is not None:  # a second signal: stop now, as without the watch
            self.uninstall()
            os.kill(os.getpid(), signum)
            return
        self.received = signal.Signals(signum).name
        if self.service and signum != signal.SIGTERM:
            os.kill(os.getpid(), signal.SIGTERM)  # JAX's notifier tells every process

    def install(self) -> "PreemptionWatch":
        if threading.current_thread() is not threading.main_thread():
            return self  # Python takes signals in the main thread only: leave them as they are
        for signum in SIGNALS:
            if self.service and signum == signal.SIGTERM:
                continue  # JAX's preemption notifier holds SIGTERM (a C handler)
            self._previous[signum] = signal.signal(signum, self._handle)
        return self

    def uninstall(self) -> None:
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)
        self._previous = {}

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
