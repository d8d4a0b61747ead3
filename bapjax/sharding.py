"""Device mesh and data-parallel shardings (one module for every multi-device decision).

One 1-D mesh over every device of every host, axis 'data'. Batches are sharded on their leading
axis over 'data'; parameters and optimizer state are replicated. Each host feeds only its own
rows (`bapjax.data.input_pipeline.DataIterator(process_index=..., process_count=...)`) and the global
array is assembled with `jax.make_array_from_process_local_data`.
"""

from __future__ import annotations

import os
import socket
import time
from typing import Any

import jax
import numpy as np
from absl import logging
from jax.experimental import multihost_utils
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from bapjax.errors import ProcessesNotJoined, UserError

DATA_AXIS = "data"
DATA_SPEC = P(DATA_AXIS)  # leading axis split over 'data'


def set_cpu_devices(count: int) -> None:
    """Split the CPU backend into `count` XLA devices (`config.cpu_devices`; 0: leave JAX's default),
    which must happen before JAX runs anything; a process whose backends already started keeps its
    devices, and a different count then is a ValueError saying so."""
    count = int(count)
    if count <= 0:
        return
    try:
        jax.config.update("jax_num_cpu_devices", count)
    except RuntimeError:  # backends started: fine if they already have this many CPU devices
        have = len(jax.devices("cpu"))
        if have != count:
            raise ValueError(f"JAX already started with {have} CPU device(s); set it before JAX runs anything "
                             f"(a fresh process)") from None


def start_processes(config: Any | None) -> None:
    """Join this process to its multi-process job (`jax.distributed.initialize`) when
    `config.distributed.initialize` is set; nothing when it is not, or when the job is joined already.

    It must come before anything asks JAX for devices or processes (`jax.process_index()`,
    `jax.devices()`, any computation): a command that trains calls it first, before it prints a line.
    With no coordinator fields it relies on auto-detection (TPU pods, SLURM, Open MPI); otherwise it
    passes coordinator_address / num_processes / process_id from the config. A process that cannot
    join is `ProcessesNotJoined`: one line naming the process and the cause. JAX already started
    in this process is a `UserError` (the job needs fresh processes).
    """
    if config is None or not config.get("initialize", False) or processes_started():
        return
    from jax._src import xla_bridge  # what jax.distributed.initialize itself checks
    if xla_bridge.backends_are_initialized():
        raise UserError("config.distributed.initialize=True needs a fresh process: JAX already ran in this one "
                        "(jax.distributed must be initialized before anything asks JAX for its devices)")
    kwargs = {}
    for key in ("coordinator_address", "num_processes", "process_id", "local_device_ids", "initialization_timeout"):
        value = config.get(key, None)
        if value not in (None, "", -1):
            kwargs[key] = value
    if kwargs.get("process_id", 0) != 0 and "coordinator_address" in kwargs:
        # XLA's client aborts the process (no Python error) when the coordinator never answers
        await_coordinator(config, kwargs["coordinator_address"], float(kwargs.get("initialization_timeout", 300)))
    try:
        jax.distributed.initialize(**kwargs)
    except Exception as err:  # the coordinator unreachable, a process id taken twice, no cluster detected
        cause = (str(err).strip().splitlines() or [type(err).__name__])[0][:240].rstrip(".")
        hint = ("set config.distributed.coordinator_address, num_processes and process_id, or run under a scheduler "
                "JAX detects (SLURM, a TPU pod, Open MPI)") if "coordinator_address" not in kwargs \
            else "start every process of the job, each with its own process_id"
        raise ProcessesNotJoined(f"{describe_process(config)} could not join its multi-process job ({cause}); {hint}") from None
    logging.info("jax.distributed initialized: process %d of %d, %d global devices",
                 jax.process_index(), jax.process_count(), jax.device_count())


def await_coordinator(config: Any, address: str, timeout: float) -> None:
    """Wait until the coordinator (`host:port`, process 0) accepts connections, at most `timeout`
    seconds; else `ProcessesNotJoined` naming this process, the address and the wait."""
    host, _, port = address.rpartition(":")
    deadline = time.monotonic() + timeout
    while True:
        try:
            with socket.create_connection((host.strip("[]"), int(port)), timeout=5):
                return
        except (OSError, ValueError) as err:
            if time.monotonic() >= deadline or isinstance(err, ValueError):
                raise ProcessesNotJoined(
                    f"{describe_process(config)} could not join its multi-process job: no coordinator answered at "
                    f"{address} within {timeout:g} s (config.distributed.initialization_timeout); start process 0 "
                    "of the job there, or correct config.distributed.coordinator_address") from None
        time.sleep(0.5)


def processes_started() -> bool:
    """Whether this process has joined a multi-process job (`jax.distributed.initialize` ran)."""
    from jax._src import distributed
    return distributed.global_state.client is not None


def describe_process(config: Any | None) -> str:
    """'process I of N' before the job is joined, from the config or the scheduler's environment
    (SLURM, Open MPI); 'this process' where neither says."""
    config = config or {}
    index, count = config.get("process_id", -1), config.get("num_processes", -1)
    for index_var, count_var in (("SLURM_PROCID", "SLURM_NTASKS"), ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE")):
        if index in (None, -1) and os.environ.get(index_var, "").isdigit():
            index, count = int(os.environ[index_var]), int(os.environ.get(count_var, "-1") or -1)
    if index in (None, -1):
        return "this process"
    return f"process {index}" + (f" of {count}" if count not in (None, -1) else "")


def data_mesh(devices: list | None = None) -> Mesh:
    """A 1-D mesh named 'data' over the given (default: all global) devices."""
    devices = jax.devices() if devices is None else devices
    return Mesh(np.asarray(devices), (DATA_AXIS,))


def batch_sharding(mesh: Mesh) -> NamedSharding:
    """Leading axis split over 'data', everything else whole."""
    return NamedSharding(mesh, P(DATA_AXIS))


def replicated(mesh: Mesh) -> NamedSharding:
    return NamedSharding(mesh, P())


def per_device(fn, mesh: Mesh, out_specs=P()):
    """`fn(params, batch)` run by each device on its own rows of `batch` (leading axis split over
    'data'; params replicated): each device packs and encodes only its own rows, which jit's
    automatic partitioning cannot do for data-dependent packing. Outputs follow `out_specs`
    (default replicated: `fn` must reduce over the axis itself, e.g. `jax.lax.psum`)."""
    # check_vma=False: the model's scans start from constant carries that become per-device
    # values; gradients of the replicated params are still summed over devices (tested against
    # one device in tests/test_sharding.py).
    return jax.shard_map(fn, mesh=mesh, in_specs=(P(), DATA_SPEC), out_specs=out_specs, check_vma=False)


def local_device_count(mesh: Mesh) -> int:
    """How many of the mesh's devices belong to this host (its rows are split among them)."""
    return sum(d.process_index == jax.process_index() for d in mesh.devices.flat)


def balanced_order(costs: np.ndarray, shards: int) -> np.ndarray:
    """A permutation of rows such that splitting it into `shards` equal consecutive blocks gives
    blocks of near-equal total cost (greedy: costliest row first, to the lightest block with room)."""
    costs = np.asarray(costs)
    rows = len(costs)
    if shards <= 1 or rows % shards:
        return np.arange(rows)
    per_block = rows // shards
    load = np.zeros(shards)
    blocks: list[list[int]] = [[] for _ in range(shards)]
    for row in np.argsort(-costs, kind="stable"):
        open_blocks = [b for b in range(shards) if len(blocks[b]) < per_block]
        target = min(open_blocks, key=lambda b: load[b])
        blocks[target].append(int(row))
        load[target] += costs[row]
    return np.array([row for block in blocks for row in sorted(block)], np.int64)


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
    return int(np.max(multihost_utils.process_allgather(np.asarray([value], np.int64))))
