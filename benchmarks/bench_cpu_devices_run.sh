#!/bin/bash
# Real training runs on a CPU split into N XLA devices (config.cpu_devices), paired: for each of two
# rounds and each count in DEVS (default "1 4"), `python -m bapjax.train --config=configs/cpu_experiment.py:agg,0`
# from scratch in a temporary workdir, its items/s between steps 150 and 450 read from metrics.jsonl (the
# input pipeline, logging and checkpoints included; compilation and start-up left out), then the run is
# stopped. What benchmarks/bench_cpu_devices.py measures in isolation, as a run sees it.
#   DEVS="1 4" bash benchmarks/bench_cpu_devices_run.sh      # ~30 min on a 2-core host; one line per run
set -u
DEVS=${DEVS:-"1 4"}
root=$(mktemp -d /tmp/bapjax-devices-run-XXXX)
for r in 1 2; do for d in $DEVS; do
  w=$root/d$d-r$r
  python -m bapjax.train --config=configs/cpu_experiment.py:agg,0 --config.cpu_devices=$d --workdir=$w \
    > $root/d$d-r$r.log 2>&1 &
  pid=$!
  while ! grep -q '"step": 450, "kind": "train"' $w/metrics.jsonl 2>/dev/null; do
    sleep 5
    if ! kill -0 $pid 2>/dev/null; then echo "the $d-device run ended early: $root/d$d-r$r.log"; exit 1; fi
  done
  kill $pid; wait $pid 2>/dev/null
  python -c "
import json
rows = {r['step']: r for r in map(json.loads, open('$w/metrics.jsonl')) if r['kind'] == 'train'}
print('devices $d round $r: steps 150-450 %.1f items/s' % (300 * 32 / (rows[450]['time'] - rows[150]['time'])), flush=True)"
done; done
rm -rf "$root"
