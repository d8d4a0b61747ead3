#!/usr/bin/env bash
# Training on every host of a Cloud TPU VM pod slice: one `python -m bapjax.train` process per host,
# joined by jax.distributed, which detects the pod (coordinator, process index) with no coordinator
# flags. The SLURM launcher's twin: the same train command and flags; what differs is who starts
# the processes (gcloud's ssh to every worker, not srun), the install on each host, and preemption:
# a preempted TPU VM gets SIGTERM, every process saves the same step and exits 75, and running this
# script again with the same arguments resumes from it (there is no scheduler to requeue the job).
#
#   TPU_NAME=my-v4-32 ZONE=us-central2-b ./launch/run_tpu_pod.sh configs/cl.py gs://bucket/runs/cl [--config.x=y ...]
#
# The repository is expected at ~/bapjax on every host (e.g. after `gcloud ... scp --worker=all`), the
# data reachable from each host (a copy of the corpus or store, or a mounted bucket), the workdir
# shared (a gs:// path Orbax can write to). Extra arguments go to the train command.
set -euo pipefail
CONFIG=${1:?config file, e.g. configs/cl.py}
WORKDIR=${2:?work directory (shared, e.g. a gs:// path Orbax can write to)}
shift 2
: "${TPU_NAME:?set TPU_NAME}" "${ZONE:?set ZONE}"
gcloud compute tpus tpu-vm ssh "$TPU_NAME" --zone "$ZONE" --worker=all --command "
  cd ~/bapjax &&
  (test -d .venv || (python3 -m venv .venv && .venv/bin/pip install -q -r requirements.txt -e . 'jax[tpu]' \
      -f https://storage.googleapis.com/jax-releases/libtpu_releases.html)) &&
  BAPJAX_CACHE=\$HOME/.cache/bapjax exec .venv/bin/python -m bapjax.train --config=$CONFIG --workdir=$WORKDIR \
      --config.distributed.initialize=True --config.model.world.conv_impl=xla $*
"
