#!/usr/bin/env bash
# The accelerator check of configs/cl.py in one device call under 9 minutes, everything under $OUT.
#
#   python launch/device_carry.py                      # here, once: builds .devcarry/ (36 MiB)
#   bash launch/device_check.sh profile                # there, carried: .devcarry (the device tool's carry)
#   bash launch/device_check.sh schedule "OVERRIDES"   # a second call: cl.py's full schedule with the levers kept
#
# profile: where a cl.py train step's time goes and what each lever does to it, as ratios measured in
#   the same process (benchmarks/profile_step.py): the step, the host's pipeline, the loop against the
#   step, a profiler trace's ops by model part and opcode and the device's own events, then each lever
#   (`LEVERS` below) against today's step; the same for the chosen CPU model at the paper's widths
#   (configs/cpu_experiment.py:agg,0,wide). Writes profile_cl.json, profile_wide.json, their logs and
#   driver.log; each profile's JSON is rewritten after each part, so a part cut short keeps the rest.
# schedule: `python -m bapjax.train --config=configs/cl.py` with "OVERRIDES" (e.g. the levers that paid),
#   the whole schedule (10 curriculum stages, then up to 40 passes with early stopping) under a time
#   budget that leaves the MDC test decode (mc:test, the STOP rule chosen on MDC val) inside the call;
#   its train.log, config, metrics, decode and final eval and test predictions come back in cl.tgz.
#
# Environment: OUT (required; the device tool sets it), CALL_S (the call's limit, default 540),
# STEPS (timed steps per measurement, default 30), RESERVE_S (schedule: the call's seconds kept out of the
# training budget for the data before and the final eval after, default 240: on one H200 cl.py's data took
# ~90 s, a paper-size final eval ~40-60 s), EXTRA (overrides for every config: the CPU dry run's
# tiny widths), CARRY (default .devcarry). The CPU dry run (tiny widths, a few steps, docs/training.md):
#   OUT=/tmp/dry STEPS=2 EXTRA="--config.model.text.hidden=16 ..." bash launch/device_check.sh profile
set -u
mode=${1:-profile}
: "${OUT:?set OUT to the output folder}"
CALL_S=${CALL_S:-540} STEPS=${STEPS:-30} EXTRA=${EXTRA:-} CARRY=${CARRY:-.devcarry} RESERVE_S=${RESERVE_S:-240}
t0=$(date +%s)
left() { echo $((t0 + CALL_S - $(date +%s))); }
mkdir -p "$OUT"
log=$OUT/driver.log
[ -f "$CARRY/MANIFEST.json" ] || { echo "error: $CARRY/MANIFEST.json: no carry folder (python launch/device_carry.py builds it)" | tee -a "$log" >&2; exit 2; }
wheels=$(python3 -c "import json; print(' '.join(f'{k}=={v}' for k, v in json.load(open('$CARRY/MANIFEST.json'))['wheels'].items()))")
# shellcheck disable=SC2086  # wheels is a list of requirements
python3 -m pip install -q --no-index --find-links "$CARRY/whl" --no-deps --no-compile --no-cache-dir --upgrade \
  --target /tmp/site $wheels >> "$log" 2>&1 || { echo "error: the carried wheels did not install (driver.log)" >&2; exit 1; }
root=$PWD
export PYTHONPATH=/tmp/site:$root/$CARRY/site:$root PYTHONUNBUFFERED=1
export BAPJAX_MDC=$(ls "$root/$CARRY"/mdc/*.tar.xz) BAPJAX_CACHE=${BAPJAX_CACHE:-/tmp/bapjax-cache}
{ echo "mode $mode start $(date +%T), call limit ${CALL_S}s"; git log -1 --format=%H; git status --short
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv 2>&1
  python3 -c "import jax, flax, optax, orbax.checkpoint as oc, numpy, pyarrow; print('jax', jax.__version__, 'flax', flax.__version__, 'optax', optax.__version__, 'orbax', oc.__version__, 'numpy', numpy.__version__, 'pyarrow', pyarrow.__version__, jax.devices())" 2>&1
  cat "$CARRY/MANIFEST.json"; } >> "$log"

# A lever is "NAME OVERRIDE...": an option of the config, tested on the CPU for its numerics (docs/training.md).
# The batch of 128 scales the learning rate by sqrt(4) (Adam), the schedule's steps by 1/4 (the same items).
LEVERS=(
  "bf16 --config.model.dtype=bfloat16"
  "xla_conv --config.model.world.conv_impl=xla"
  "b128 --config.train.batch_size=128 --config.train.learning_rate=2e-3"
  "unroll8 --config.model.text.unroll=8 --config.model.decoder.unroll=8"
  "all --config.model.dtype=bfloat16 --config.model.world.conv_impl=xla --config.train.batch_size=128 --config.train.learning_rate=2e-3 --config.model.text.unroll=8 --config.model.decoder.unroll=8"
)

profile() {  # $1: name, $2: config, $3: seconds at most, then the variants
  local name=$1 config=$2 cap=$3; shift 3
  local variants=(); for lever in "$@"; do variants+=(--variant "$lever"); done
  [ "$cap" -gt "$(left)" ] && cap=$(left)
  echo "profile $name start $(date +%T) limit ${cap}s" >> "$log"
  # shellcheck disable=SC2086  # EXTRA is a list of overrides
  timeout -s TERM "$cap" python3 -m benchmarks.profile_step --config "$config" --steps "$STEPS" --ops 25 --rounds 2 \
    $EXTRA "${variants[@]}" --out "$OUT/profile_$name.json" > "$OUT/profile_$name.log" 2>&1
  echo "profile $name exit $? $(date +%T)" >> "$log"
}

case $mode in
  profile)
    XLA_PYTHON_CLIENT_MEM_FRACTION=0.8 profile cl configs/cl.py $(( CALL_S * 6 / 10 )) "${LEVERS[@]}"
    XLA_PYTHON_CLIENT_MEM_FRACTION=0.8 profile wide configs/cpu_experiment.py:agg,0,wide $(( $(left) - 15 )) \
      "${LEVERS[0]}" "${LEVERS[1]}"
    ;;
  schedule)
    overrides=${2:-}
    budget=$(python3 -c "print(round(max(1.0, ($(left) - $RESERVE_S) / 60), 1))")  # RESERVE_S: data before, the final eval after
    echo "schedule start $(date +%T): cl.py $overrides, training budget ${budget} min" >> "$log"
    # shellcheck disable=SC2086  # overrides and EXTRA are lists of overrides
    timeout -s TERM $(( $(left) - 10 )) python3 -m bapjax.train --config=configs/cl.py --workdir=/tmp/runs/cl \
      --config.train.time_budget_minutes="$budget" --config.eval.val_decode_items=-1 --config.eval.stop_rule_val=mc \
      "--config.eval.final_splits=('mc:test',)" $overrides $EXTRA > "$OUT/cl.log" 2>&1
    echo "schedule exit $? $(date +%T)" >> "$log"
    python3 -c "
import json, sys
words = json.load(open('$CARRY/vocab/cl.json'))
run = json.load(open('/tmp/runs/cl/vocab.json'))
print('vocabulary as carried:', words == run)" >> "$log" 2>&1
    tar czf "$OUT/cl.tgz" -C /tmp/runs/cl --exclude=checkpoints --exclude=tensorboard . 2>> "$log"
    ;;
  *) echo "error: mode $mode: expected profile or schedule" >&2; exit 2 ;;
esac
echo "done $(date +%T), $(( $(date +%s) - t0 )) s" >> "$log"
cat "$log"
for f in "$OUT"/profile_*.json; do [ -f "$f" ] && python3 -c "
import json; r = json.load(open('$f'))
print('$f', r.get('step'), 'loop', r.get('loop_items_per_s'), 'busy', r.get('ops', {}).get('busy'),
      {k: v['ratio'] for k, v in r.get('variants', {}).items()})"; done
exit 0
