#!/bin/bash
# What a run of a second seed compiles when a run of another seed filled the persistent compilation cache
# before it: for this tree and for BASELINE (a commit, `git archive`d), each with its own empty
# `$BAPJAX_CACHE/jax` (the data caches of ~/.cache/bapjax shared), two short runs of
# `configs/cpu_experiment.py:cl_la,<seed>` (200 steps, one eval, the STOP rule chosen on MDC val, no test
# decode), seed A then seed B; each run's `compiled` entry of runs.jsonl (programs, read from the cache, XLA's
# seconds, tracing's seconds) and its vocabulary's size. Seeds' simulated data give vocabularies a few tokens
# apart; the embedding table's shape follows the vocabulary unless `model.text.vocab_multiple` rounds it.
#   BASELINE=461c07f SEEDS="11 12" bash benchmarks/bench_compile_cache.sh     # ~16 min on a 2-core host
set -eu
BASELINE=${BASELINE:?set BASELINE to a commit}
SEEDS=${SEEDS:-"11 12"}
here=$(cd "$(dirname "$0")/.." && pwd)
data=${BAPJAX_CACHE:-$HOME/.cache/bapjax}
root=$(mktemp -d /tmp/bapjax-compile-cache-XXXX)
mkdir -p "$root/baseline-tree" "$data"
git -C "$here" archive "$BASELINE" | tar -x -C "$root/baseline-tree"
for label in current baseline; do
  mkdir -p "$root/cache-$label/jax"
  for d in "$data"/*; do [ "$(basename "$d")" = jax ] || ln -s "$d" "$root/cache-$label/$(basename "$d")"; done
done
for seed in $SEEDS; do for label in current baseline; do
  tree=$here; [ $label = baseline ] && tree=$root/baseline-tree
  w=$root/$label-s$seed
  (cd "$tree" && BAPJAX_CACHE=$root/cache-$label PYTHONPATH=$tree python -m bapjax.train \
    --config=configs/cpu_experiment.py:cl_la,$seed --config.train.max_steps=200 --config.train.eval_every_steps=200 \
    "--config.eval.final_splits=()" --config.eval.vote_samples=0 --workdir=$w > $w.log 2>&1) \
    || { echo "the $label run of seed $seed failed: $w.log"; exit 1; }
  python -c "
import json
run = [json.loads(line) for line in open('$w/runs.jsonl')][-1]
c, vocab = run['compiled'], len(json.load(open('$w/vocab.json'))['tokens'])
print('$label seed $seed: vocabulary %d, %d programs, %d read from the cache, XLA %.1f s, tracing %.1f s, run %.0f s'
      % (vocab, c['programs'], c['from_cache'], c['compile_seconds'], c['trace_seconds'], run['wall_seconds']), flush=True)"
done; done
rm -rf "$root"
