"""A multi-process job notices at once when one of its processes dies.

JAX's coordination service notices a dead process only after its heartbeat timeout (100 s by
default), and then aborts every other process with a C++ stack trace; a collective waiting on
the dead peer fails or hangs until then. `PeerWatch` gives each process a TCP connection to
process 0 (process 0 listens on a free port it broadcasts at start): a process killed outright
(kill -9, a lost host) closes its connections, so its peers read end-of-file at once. A process
that ends normally says goodbye first. On an unannounced end the watching process prints one
line in bapjax's words (which process was lost, the checkpoint to resume from) and exits with
`PeerLost.exit_status` before the runtime's own shutdown report.
"""

from __future__ import annotations

import os
import socket
import sys
import threading
from typing import Callable

import jax
import numpy as np
from jax.experimental import multihost_utils

from bapjax.errors import PeerLost

GOODBYE = b"bye\n"


class PeerWatch:
    """Watches this job's other processes (a no-op in a single-process job); `resume_hint()` says
    what rerunning the job does, asked when a peer is lost."""

    def __init__(self, resume_hint: Callable[[], str], coordinator_host: str = "localhost"):
        self.resume_hint, self.coordinator_host = resume_hint, coordinator_host
        self.sockets: list[socket.socket] = []
        self.stopping = threading.Event()

    def start(self) -> "PeerWatch":
        if jax.process_count() == 1:
            return self
        server = None
        if jax.process_index() == 0:
            server = socket.create_server(("", 0))
            port = server.getsockname()[1]
        else:
            port = 0
        port = int(multihost_utils.broadcast_one_to_all(np.int32(port)))
        if server is not None:
            threading.Thread(target=self._accept, args=(server, jax.process_count() - 1), daemon=True).start()
        else:
            conn = socket.create_connection((self.coordinator_host, port), timeout=60)
            conn.settimeout(None)
            conn.sendall(f"{jax.process_index()}\n".encode())
            self._watch(conn, conn.makefile("rb"), 0)
        return self

    def _accept(self, server: socket.socket, peers: int) -> None:
        for _ in range(peers):
            conn, _ = server.accept()
            reader = conn.makefile("rb")  # one reader for the peer's index and its goodbye
            self._watch(conn, reader, int(reader.readline() or -1))
        server.close()

    def _watch(self, conn: socket.socket, reader, peer: int) -> None:
        self.sockets.append(conn)
        threading.Thread(target=self._read, args=(reader, peer), daemon=True).start()

    def _read(self, reader, peer: int) -> None:
        try:
            said = reader.readline()
        except OSError:
            said = b""
        if said == GOODBYE or self.stopping.is_set():
            return
        who = "the coordinator, process 0" if peer == 0 else f"process {peer}"
        print(f"error: process {jax.process_index()} of {jax.process_count()}: {who} of the job ended without "
              f"finishing (killed, or its host was lost); {self.resume_hint()}", file=sys.stderr, flush=True)
        sys.stdout.flush()
        os._exit(PeerLost.exit_status)

    def stop(self) -> None:
        """This process ends normally: its peers are told so."""
        self.stopping.set()
        for conn in self.sockets:
            try:
                conn.sendall(GOODBYE)
                conn.close()
            except OSError:
                pass
        self.sockets = []
