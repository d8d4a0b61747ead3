#!/bin/bash
# One device call, two measurements, one after the other on one GPU:
# 1. K seeds in one program: `benchmarks/bench_seeds_vmap.py` on configs/cpu_experiment.py:agg,0,wide (the chosen
#    model at the paper's widths), one seed's train step against K = 4 and 8 seeds' stacked and vmapped, batch 32
#    per seed, pack sizes rounded to powers of two.
# 2. Cold compilation of the same config under train.pack_rounding "multiple" (the default: pack sizes any multiple
#    of 32) and "power_of_two" (32 x 2^k): 600 steps, one eval (val loss and the val decode that picks the
#    checkpoint), the STOP rule chosen on MDC val, no test decode, the persistent compilation cache off. The two
#    jobs share the GPU: the second starts once the first has built the data caches. Each job's runs.jsonl entry
#    says what it compiled (programs and seconds per function).
# Run from the repository's root as `bash results/gpu/kseeds-buckets-h200/driver.sh` with .devcarry carried: the
# wheels, the MDC archive and the GloVe subset of results/gpu/README.md, "wide-h200".
set -u
t0=$(date +%s)
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .devcarry/whl/*.whl || exit 1
root=$PWD
export PYTHONPATH=/tmp/site:$root/.devcarry/site:$root
export BAPJAX_MDC=$root/.devcarry/mdc/minecraft-dialogue-corpus.tar.xz BAPJAX_CACHE=/tmp/bapjax-cache
export PYTHONUNBUFFERED=1
git log -1 --format=%H > $OUT/driver.log 2>&1; git status --short >> $OUT/driver.log 2>&1
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv >> $OUT/driver.log 2>&1
python3 -c "import jax, flax, optax; print('jax', jax.__version__, 'flax', flax.__version__, 'optax', optax.__version__, jax.devices())" >> $OUT/driver.log 2>&1
echo "bench start $(date +%T)" >> $OUT/driver.log
XLA_PYTHON_CLIENT_MEM_FRACTION=0.8 timeout -s TERM 140 python3 benchmarks/bench_seeds_vmap.py \
  --config configs/cpu_experiment.py:agg,0,wide --seeds 4,8 --steps 40 --config.train.pack_rounding=power_of_two \
  --out $OUT/bench_seeds_vmap_wide.json >> $OUT/driver.log 2>&1
echo "bench exit $? $(date +%T)" >> $OUT/driver.log
export XLA_PYTHON_CLIENT_MEM_FRACTION=0.45
deadline=$((t0 + 565))
job() {  # $1: pack rounding
  local left=$((deadline - $(date +%s))); [ $left -gt 480 ] && left=480
  echo "$1 start $(date +%T) limit ${left}s" >> $OUT/driver.log
  timeout -s TERM $left python3 -m bapjax.train --config=configs/cpu_experiment.py:agg,0,wide --workdir=/tmp/runs/$1 \
    --nocompilation_cache --config.train.pack_rounding=$1 --config.train.max_steps=600 \
    --config.train.eval_every_steps=600 --config.eval.samples=0 --config.eval.final_splits="()" > /tmp/runs-$1.log 2>&1
  echo "$1 exit $? $(date +%T)" >> $OUT/driver.log
  cp /tmp/runs-$1.log /tmp/runs/$1/job.log
}
mkdir -p /tmp/runs
job multiple &
for i in $(seq 240); do grep -q "^.* training 600 steps" /tmp/runs-multiple.log 2>/dev/null && break; sleep 1; done
job power_of_two &
wait
tar czf $OUT/buckets.tgz -C /tmp/runs --exclude=checkpoints --exclude=tensorboard multiple power_of_two 2>> $OUT/driver.log
cat $OUT/driver.log
for r in multiple power_of_two; do python3 -c "
import json; r=json.loads(open('/tmp/runs/$r/runs.jsonl').read().splitlines()[-1]); print('$r', r['wall_seconds'], r.get('compiled'))"; done
