"""One training run per workdir: a run claims its workdir for as long as it runs.

Two runs on one workdir would both train from step 0, interleave `metrics.jsonl` and
`runs.jsonl` and overwrite each other's checkpoints, and every reader would take the mix for one
run. So `bapjax.train` claims the workdir before it writes anything and releases it at the end:

- Local workdirs: `<workdir>/claim.json` is locked with `flock` for the whole run and holds the
  holder's description (host, pid and the process's start time, since when, the command, the
  number of processes). The kernel drops the lock when its holder dies, however it dies, so a
  claim left by a `kill -9` is taken over with one warning. The description is checked too:
  a holder on this host whose pid still runs with the same start time (pid reuse is not mistaken
  for it) keeps the claim even where `flock` is not honoured. A description left by a run on
  another host is not taken over (bapjax cannot tell from here whether it still runs): the
  refusal says who holds it and which file to remove if it is gone. A filesystem without file
  locks (ENOLCK) gets the remote kind of claim, with one warning.
- Remote workdirs (`gs://...`, any scheme): there is no lock, only the description object,
  written at the start and read back a moment later; a second run started after the first wrote
  it is refused, two started within that moment are not reliably told apart (docs/training.md).
- Several processes of one job (`jax.distributed`): process 0 takes the claim and tells the
  others (an all-gather), who join it; none of them writes before process 0 holds it, and all
  of them are refused when it is refused.

A refused run raises `WorkdirClaimedError` (a `UserError`: one line, exit 2) having written
nothing; `wait=True` (`--wait`) polls until the claim is free instead. Readers of a run
(`predict`, `viz report`, `checkpoints.load_run`) never look at the claim.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import shlex
import socket
import sys
import time
from typing import Iterator

from etils import epath

from bapjax.errors import UserError

CLAIM_FILE = "claim.json"  # in the workdir while a run trains it (left behind only by a run that died)
POLL_SECONDS = 2.0  # how often a waiting run (--wait) looks again
READ_BACK_SECONDS = 1.0  # remote workdirs: how long a written description must survive to count as ours


class WorkdirClaimedError(UserError):
    """The workdir is claimed by another run (the message says whose and what to do)."""


# ------------------------------------------------------------------------------------------------
# Who a process is, and whether a described holder still runs


def _boot_id() -> str | None:
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            return f.read().strip()
    except OSError:
        return None


def process_start(pid: int) -> int | None:
    """The start time of process `pid` in clock ticks since boot (/proc/<pid>/stat field 22),
    None where it cannot be read; with the pid it names one process, so pid reuse is detected."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return None
    # the command name (field 2) is in parentheses and may hold spaces: split after its last ")"
    fields = stat[stat.rindex(b")") + 2:].split()
    return int(fields[19])


def describe_this_process(processes: int = 1) -> dict:
    """The holder description written into the claim."""
    pid = os.getpid()
    return {"host": socket.gethostname(), "pid": pid, "process_start": process_start(pid), "boot_id": _boot_id(),
            "since": time.strftime("%Y-%m-%d %H:%M:%S %z"),
            "command": shlex.join(getattr(sys, "orig_argv", None) or [sys.executable, *sys.argv]),
            "processes": int(processes)}


def holder_state(holder: dict) -> str:
    """"running", "gone" (on this host and no longer running) or "elsewhere" (another host:
    unknown from here)."""
    if holder.get("host") != socket.gethostname():
        return "elsewhere"
    boot = _boot_id()
    if holder.get("boot_id") and boot and holder["boot_id"] != boot:
        return "gone"  # this host rebooted since
    try:
        pid = int(holder["pid"])
    except (KeyError, TypeError, ValueError):
        return "gone"
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return "gone"
    except PermissionError:
        pass  # it exists, run by another user
    start = process_start(pid)
    if holder.get("process_start") is not None and start is not None and start != holder["process_start"]:
        return "gone"  # the pid now belongs to another process
    return "running"


def describe_holder(holder: dict | None) -> str:
    if not holder:
        return "a run that is starting (its description is not written yet)"
    jobs = f", process 0 of {holder['processes']}" if int(holder.get("processes") or 1) > 1 else ""
    command = str(holder.get("command")).replace("\n", "\\n")  # the refusal stays one line
    return f"pid {holder.get('pid')} on host {holder.get('host')}{jobs}, since {holder.get('since')} ({command})"


def _parse(text: str) -> dict | None:
    try:
        holder = json.loads(text)
    except ValueError:
        return None
    return holder if isinstance(holder, dict) else None


def _refusal(workdir, holder: dict | None, state: str, claim_path) -> WorkdirClaimedError:
    who = describe_holder(holder)
    if state == "elsewhere":
        return WorkdirClaimedError(
            f"{workdir} is claimed by a training run on another host: {who}; bapjax cannot tell from here whether it "
            f"still runs: if it does not, remove {claim_path} and run again (--wait waits until it is removed)")
    return WorkdirClaimedError(f"{workdir} is in use by another training run: {who}; wait for it with --wait, "
                               f"or train into another --workdir")


def _took_over(workdir, holder: dict) -> None:
    print(f"warning: {workdir} was claimed by {describe_holder(holder)}, which is no longer running; "
          f"taking the claim over (the run resumes from its last checkpoint)", file=sys.stderr, flush=True)


# ------------------------------------------------------------------------------------------------
# Claims


class Claim:
    """A held claim; `release()` gives it up (idempotent)."""

    def release(self) -> None:
        pass


class _Held(Exception):
    """Internal: one attempt found the claim held by `holder` ("running" or "elsewhere")."""

    def __init__(self, holder: dict | None, state: str):
        super().__init__(state)
        self.holder, self.state = holder, state


class _NoLocks(Exception):
    """Internal: the filesystem refuses `flock`."""


class LocalClaim(Claim):
    """`flock` on <workdir>/claim.json, held open until `release()` (or the process's death)."""

    def __init__(self, workdir: epath.Path, processes: int = 1):
        self.workdir, self.processes = workdir, processes
        self.path = os.path.join(os.fspath(workdir), CLAIM_FILE)
        self.fd: int | None = None
        self.fallback: RemoteClaim | None = None  # where the filesystem has no locks

    def _open_locked(self) -> int | None:
        """An fd of the claim file holding its lock, or None when another process holds it."""
        while True:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                return None
            except OSError as err:
                os.close(fd)
                if err.errno in (errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOSYS):
                    raise _NoLocks(err.strerror) from err
                raise
            try:  # its previous holder may have removed the file after we opened it: lock the one at the path
                here = os.stat(self.path)
                mine = os.fstat(fd)
                if (here.st_dev, here.st_ino) == (mine.st_dev, mine.st_ino):
                    return fd
            except FileNotFoundError:
                pass
            os.close(fd)

    def _read_holder(self) -> dict | None:
        for _ in range(10):  # the holder writes its description right after locking: give it a moment
            try:
                with open(self.path) as f:
                    holder = _parse(f.read())
            except FileNotFoundError:
                return None
            if holder is not None:
                return holder
            time.sleep(0.1)
        return None

    def try_take(self) -> None:
        """Take the claim or raise `_Held` (nothing written in that case)."""
        os.makedirs(os.fspath(self.workdir), exist_ok=True)
        if self.fallback is not None:
            return self.fallback.try_take()
        try:
            fd = self._open_locked()
        except _NoLocks as err:
            print(f"warning: {self.path}: this filesystem has no file locks ({err}); the claim on {self.workdir} is "
                  f"only its description, as on a remote workdir (docs/training.md)", file=sys.stderr, flush=True)
            self.fallback = RemoteClaim(self.workdir, self.processes)
            return self.fallback.try_take()
        if fd is None:
            raise _Held(self._read_holder(), "running")
        try:
            left = _parse(os.pread(fd, 1 << 16, 0).decode("utf-8", "replace"))
            if left is not None:  # a description without its lock: a run that did not end cleanly
                state = holder_state(left)
                if state != "gone":  # still running (locks not honoured here) or on another host
                    raise _Held(left, state)
                _took_over(self.workdir, left)
            data = json.dumps(describe_this_process(self.processes), indent=1).encode() + b"\n"
            os.ftruncate(fd, 0)
            os.pwrite(fd, data, 0)
            os.fsync(fd)
        except BaseException:
            os.close(fd)  # drops the lock; the description left (if any) stays as it was
            raise
        self.fd = fd

    def release(self) -> None:
        if self.fallback is not None:
            self.fallback.release()
        if self.fd is None:
            return
        try:
            here, mine = os.stat(self.path), os.fstat(self.fd)
            if (here.st_dev, here.st_ino) == (mine.st_dev, mine.st_ino):
                os.unlink(self.path)  # while still locked: a waiter that opened it retries on the new file
        except FileNotFoundError:
            pass
        finally:
            os.close(self.fd)
            self.fd = None


class RemoteClaim(Claim):
    """Remote workdirs (gs://...): the description object alone (no atomic create, no lock)."""

    def __init__(self, workdir: epath.Path, processes: int = 1):
        self.workdir, self.processes = workdir, processes
        self.path = workdir / CLAIM_FILE
        self.mine: dict | None = None

    def _read(self) -> tuple[bool, dict | None]:
        try:
            text = self.path.read_text()
        except FileNotFoundError:
            return False, None
        return bool(text.strip()), _parse(text)  # an empty file (a failed lock's) claims nothing

    def try_take(self) -> None:
        exists, left = self._read()
        if exists:
            state = holder_state(left) if left else "elsewhere"
            if state != "gone":
                raise _Held(left, state)
            _took_over(self.workdir, left)
        mine = describe_this_process(self.processes)
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.path.write_text(json.dumps(mine, indent=1) + "\n")
        time.sleep(READ_BACK_SECONDS)  # a run that wrote at the same moment has overwritten it by now
        _, now = self._read()
        if now != mine:
            raise _Held(now, "running" if now and holder_state(now) == "running" else "elsewhere")
        self.mine = mine

    def release(self) -> None:
        if self.mine is None:
            return
        _, now = self._read()
        if now == self.mine:
            self.path.unlink(missing_ok=True)
        self.mine = None


def is_remote(workdir) -> bool:
    return "://" in os.fspath(workdir)


def _agree(status: int) -> int:
    """Process 0's status, on every process (an all-gather of one integer; identity on one process)."""
    import jax
    import numpy as np
    from jax.experimental import multihost_utils

    if jax.process_count() == 1:
        return status
    return int(multihost_utils.process_allgather(np.asarray([status], np.int32)).reshape(-1)[0])


TAKEN, HELD, FAILED = 0, 1, 2


@contextlib.contextmanager
def claimed(workdir: epath.Path, wait: bool = False, poll_seconds: float = POLL_SECONDS) -> Iterator[Claim]:
    """Hold the claim on `workdir` for the body of the `with` (released however it ends).

    Raises `WorkdirClaimedError` when another run holds it, unless `wait`: then one line says
    whom it waits for and it looks again every `poll_seconds`. On several processes process 0
    takes it and the others join, in step (they are refused or wait with it)."""
    import jax

    main, processes = jax.process_index() == 0, jax.process_count()
    claim: Claim = Claim()
    if main:
        claim = (RemoteClaim if is_remote(workdir) else LocalClaim)(workdir, processes)
    said_waiting = False
    while True:
        held = failure = None
        if main:
            try:
                claim.try_take()
            except _Held as err:
                held = err
            except Exception as err:  # noqa: BLE001 (raised below, once the other processes know)
                failure = err
        status = _agree(FAILED if failure else HELD if held else TAKEN)
        if status == TAKEN:
            break
        if status == FAILED:
            if failure:
                raise failure
            raise WorkdirClaimedError(f"{workdir}: process 0 of this job could not claim it (its output says why)")
        if not wait:
            if held:
                raise _refusal(workdir, held.holder, held.state, claim.path)
            raise WorkdirClaimedError(f"{workdir} is in use by another training run (process 0 of this job says "
                                      f"whose); wait for it with --wait")
        if held and not said_waiting:
            clear = f"; if it is gone, remove {claim.path}" if held.state == "elsewhere" else ""
            print(f"waiting for {workdir} (--wait): in use by {describe_holder(held.holder)}{clear}", flush=True)
            said_waiting = True
        time.sleep(poll_seconds)
    try:
        yield claim
    finally:
        claim.release()
