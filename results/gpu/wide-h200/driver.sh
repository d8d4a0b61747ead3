#!/bin/bash
# configs/cpu_experiment.py:agg,0,wide (the chosen CPU model at the paper's widths) on one GPU, decoded as cl.py's
# GPU run was (the STOP rule chosen on MDC val, greedy), interrupted once (SIGTERM after 170 s) and resumed, with
# the persistent compilation cache ($BAPJAX_CACHE/jax): each invocation's runs.jsonl entry says what it compiled
# and what it read from the cache.
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .devcarry/whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD/.devcarry/site:$PWD
export BAPJAX_MDC=$PWD/.devcarry/mdc/minecraft-dialogue-corpus.tar.xz BAPJAX_CACHE=/tmp/bapjax-cache
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv > $OUT/driver.log 2>&1
python3 -c "import jax, flax, optax, orbax.checkpoint as oc, chex, numpy; print('jax', jax.__version__, 'flax', flax.__version__, 'optax', optax.__version__, 'orbax', oc.__version__, 'chex', chex.__version__, 'numpy', numpy.__version__, jax.devices())" >> $OUT/driver.log 2>&1
run() {  # $1: seconds before SIGTERM; the rest: extra flags
  local limit=$1; shift
  timeout -s TERM $limit python3 -m bapjax.train --config=configs/cpu_experiment.py:agg,0,wide --workdir=/tmp/runs/wide \
    --config.eval.samples=0 --config.train.time_budget_minutes=3.3 "$@" >> $OUT/wide.log 2>&1
  echo "exit $? $(date +%T)" >> $OUT/driver.log
}
echo "first invocation $(date +%T)" >> $OUT/driver.log
run 170
echo "resumed $(date +%T)" >> $OUT/driver.log
run 330
tar czf $OUT/wide.tgz -C /tmp/runs/wide --exclude=checkpoints --exclude=tensorboard . 2>> $OUT/driver.log
du -sh /tmp/bapjax-cache/* >> $OUT/driver.log 2>&1
cat $OUT/driver.log; tail -25 $OUT/wide.log; cat /tmp/runs/wide/runs.jsonl
