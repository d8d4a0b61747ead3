"""Process pools that are safe next to JAX.

Forking a process whose JAX runtime has started copies its threads' locks and can deadlock
the child; forking before any JAX work is safe and fastest (no re-imports). So: fork while JAX
is idle (the CLIs), forkserver once it has run (tests, notebooks, training scripts).
"""

from __future__ import annotations

import multiprocessing


def jax_has_started() -> bool:
    try:  # a private module, imported here so an unknown JAX version only costs this answer
        from jax._src import xla_bridge

        return bool(xla_bridge.backends_are_initialized())
    except (ImportError, AttributeError):  # unknown JAX version: assume the worst
        return True


def pool_context() -> multiprocessing.context.BaseContext:
    return multiprocessing.get_context("forkserver" if jax_has_started() else "fork")
