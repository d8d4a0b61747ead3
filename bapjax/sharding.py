"""Device mesh and data-parallel shardings (one module for every multi-device decision).

One 1-D mesh over every device of every host, axis 'data'. Batches are sharded on their leading
axis over 'data'; parameters and optimizer state are replicated. Each host feeds only its own
rows (`bapjax.input_pipeline.DataIterator(process_index=..., process_count=...)`) and the global
array is assembled with `jax.make_array_from_process_local_data`.
"""

from __future__ import annotations

from typing import Any

import jax
import numpy as np
from absl import logging
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

DATA_AXIS = "data"


def maybe_initialize_distributed(config: Any | None) -> None:
    """`jax.distributed.initialize` when `config.distributed.initialize` is set.

    With no coordinator fields it relies on auto-detection (TPU pods, SLURM, Open MPI); otherwise
    it passes coordinator_address / num_processes / process_id from the config.
    """
    if config is None or not config.get("initialize", False):
        return
    kwargs = {}
    for key in ("coordinator_address", "num_processes", "process_id", "local_device_ids"):
        value = config.get(key, None)
        if value not in (None, "", -1):
            kwargs[key] = value
    jax.distributed.initialize(**kwargs)
    logging.info("jax.distributed initialized: process %d of %d, %d global devices",
                 jax.process_index(), jax.process_count(), jax.device_count())


def data_mesh(devices: list | None = None) -> Mesh:
    """A 1-D mesh named 'data' over the given (default: all global) devices."""
    devices = jax.devices() if devices is None else devices
    return Mesh(np.asarray(devices), (DATA_AXIS,))


def batch_sharding(mesh: Mesh) -> NamedSharding:
    """Leading axis split over 'data', everything else whole."""
    return NamedSharding(mesh, P(DATA_AXIS))


def replicated(mesh: Mesh) -> NamedSharding:
    return NamedSharding(mesh, P())


def check_batch_size(global_batch_size: int, mesh: Mesh) -> None:
    if global_batch_size % mesh.size:
        raise ValueError(f"global batch size {global_batch_size} must be divisible by the "
                         f"{mesh.size} devices of the mesh (config.train.batch_size)")


def host_batch_to_global(local_batch: dict[str, np.ndarray], mesh: Mesh) -> dict[str, jax.Array]:
    """This host's rows -> global arrays sharded over 'data' (works for one or many hosts)."""
    sharding = batch_sharding(mesh)
    return {k: jax.make_array_from_process_local_data(sharding, np.asarray(v)) for k, v in local_batch.items()}


def replicate(tree: Any, mesh: Mesh) -> Any:
    """Place a pytree (params, optimizer state) fully replicated on the mesh."""
    return jax.device_put(tree, replicated(mesh))


def global_max(value: int) -> int:
    """Max of a host-side integer over all hosts (identity on one host)."""
    if jax.process_count() == 1:
        return int(value)
    from jax.experimental import multihost_utils

    return int(np.max(multihost_utils.process_allgather(np.asarray([value], np.int64))))
