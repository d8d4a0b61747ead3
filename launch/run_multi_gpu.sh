#!/usr/bin/env bash
# One machine with several GPUs: a single process drives all local GPUs (the mesh is every
# visible device; the global batch is split over them).
#
#   ./launch/run_multi_gpu.sh configs/cl.py runs/cl [--config.train.batch_size=256 ...]
#
# Needs jax with CUDA (pip install "jax[cuda12]"). Pick devices with CUDA_VISIBLE_DEVICES.
set -euo pipefail
CONFIG=${1:?config file}
WORKDIR=${2:?work directory}
shift 2
export XLA_PYTHON_CLIENT_PREALLOCATE=${XLA_PYTHON_CLIENT_PREALLOCATE:-true}
exec python -m bapjax.train --config="$CONFIG" --workdir="$WORKDIR" --config.model.world.conv_impl=xla "$@"
