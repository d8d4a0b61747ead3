#!/bin/bash
# agg.py and cl.py (paper-size models) side by side on one GPU, the same item budget each.
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .devcarry/whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD/.devcarry/site:$PWD
export BAPJAX_MDC=$PWD/.devcarry/mdc/minecraft-dialogue-corpus.tar.xz
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_MEM_FRACTION=0.45
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv > $OUT/driver.log 2>&1
python3 -c "import jax, flax, optax, orbax.checkpoint as oc, chex, numpy; print('jax', jax.__version__, 'flax', flax.__version__, 'optax', optax.__version__, 'orbax', oc.__version__, 'chex', chex.__version__, 'numpy', numpy.__version__, jax.devices())" >> $OUT/driver.log 2>&1
run() {
  echo "$1 start $(date +%T)" >> $OUT/driver.log
  timeout 520 python3 -m bapjax.train --config=configs/$1.py --workdir=/tmp/runs/$1 \
    --config.train.max_steps=2500 --config.train.eval_every_steps=625 --config.train.time_budget_minutes=4.7 \
    --config.eval.val_decode_items=-1 --config.eval.stop_rule_val=mc "--config.eval.final_splits=('mc:test',)" \
    > $OUT/$1.log 2>&1
  echo "$1 exit $? $(date +%T)" >> $OUT/driver.log
}
run agg & run cl & wait
for v in agg cl; do tar czf $OUT/$v.tgz -C /tmp/runs/$v --exclude=checkpoints --exclude=tensorboard . 2>> $OUT/driver.log; done
cat $OUT/driver.log
