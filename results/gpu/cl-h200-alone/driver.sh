#!/bin/bash
# configs/cl.py (paper-size M_agg+cl) alone on one GPU, time-capped to fit one device call.
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .devcarry/whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD/.devcarry/site:$PWD
export BAPJAX_MDC=$PWD/.devcarry/mdc/minecraft-dialogue-corpus.tar.xz
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv > $OUT/driver.log 2>&1
python3 -c "import jax, flax, optax, orbax.checkpoint as oc, chex, numpy; print('jax', jax.__version__, 'flax', flax.__version__, 'optax', optax.__version__, 'orbax', oc.__version__, 'chex', chex.__version__, 'numpy', numpy.__version__, jax.devices())" >> $OUT/driver.log 2>&1
echo "cl start $(date +%T)" >> $OUT/driver.log
timeout 560 python3 -m bapjax.train --config=configs/cl.py --workdir=/tmp/runs/cl \
  --config.train.max_steps=6000 --config.train.eval_every_steps=750 --config.train.time_budget_minutes=6.6 \
  --config.eval.val_decode_items=-1 --config.eval.stop_rule_val=mc "--config.eval.final_splits=('mc:test',)" \
  > $OUT/cl.log 2>&1
echo "cl exit $? $(date +%T)" >> $OUT/driver.log
tar czf $OUT/cl.tgz -C /tmp/runs/cl --exclude=checkpoints --exclude=tensorboard . 2>> $OUT/driver.log
cat $OUT/driver.log
