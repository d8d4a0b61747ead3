#!/usr/bin/env bash
# Train on every host of a Cloud TPU VM pod slice (big_vision-style launcher).
#
#   TPU_NAME=my-v4-32 ZONE=us-central2-b ./launch/run_tpu_pod.sh configs/cl.py gs://bucket/runs/cl [extra --config.x=y flags]
#
# Every host runs the same command; jax.distributed.initialize() (config.distributed.initialize)
# auto-detects the pod, each host reads its own rows of every global batch
# (DataIterator(process_index, process_count)), and the mesh spans all chips.
# The repo is expected at ~/bapjax on every host (e.g. after `gcloud ... scp --worker=all`), with
# the data reachable from each host (a copy of the corpus / store, or a mounted bucket).
set -euo pipefail
CONFIG=${1:?config file, e.g. configs/cl.py}
WORKDIR=${2:?work directory (shared, e.g. a gs:// path Orbax can write to)}
shift 2
: "${TPU_NAME:?set TPU_NAME}" "${ZONE:?set ZONE}"
gcloud compute tpus tpu-vm ssh "$TPU_NAME" --zone "$ZONE" --worker=all --command "
  cd ~/bapjax &&
  (test -d .venv || (python3 -m venv .venv && .venv/bin/pip install -q -r requirements.txt -e . 'jax[tpu]' \
      -f https://storage.googleapis.com/jax-releases/libtpu_releases.html)) &&
  BAPJAX_CACHE=\$HOME/.cache/bapjax .venv/bin/python -m bapjax.train --config=$CONFIG --workdir=$WORKDIR \
      --config.distributed.initialize=True --config.model.world.conv_impl=xla $*
"
