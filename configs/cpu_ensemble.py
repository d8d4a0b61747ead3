"""Members of a CPU ensemble: M_agg of `configs/cpu_experiment.py` on half its items, for `python -m bapjax.ensemble`.

Differs from cpu_experiment.py:agg: 96,000 training items (3,000 steps of 32, two evals), the member's own choice on
MDC val is its STOP rule only (the ensemble draws), and no test decode (the ensemble decodes test with every member).
Command: python -m bapjax.train --config=configs/cpu_ensemble.py:<seed>   (runs/ens/agg-m<seed>), for four seeds, then
  python -m bapjax.ensemble --runs runs/ens/agg-m<s0>,...,runs/ens/agg-m<s3> --samples 8 --out runs/ens/<name>
Runtime: 8.6-8.9 min per member, 3.4 min for the ensemble's decoding: 38.4 min in all (results/cpu_experiment_runs.md).
Result: MDC test micro Overall 30.5 for seeds 10-13 (members alone 22.8-25.3; one full agg run 29.9 on the same host,
two full runs together 32.0 in 39.9 min) (docs/results.md, "Ensembles").

The argument is the member's seed: it sets `config.seed` and the simulators' seed, so every member trains on its own
simulated items in its own order from its own initialization.
"""

from configs import cpu_experiment

TRAIN_ITEMS = 96_000


def get_config(arg: str = "0"):
    if not arg.isdigit():
        raise ValueError(f"configs/cpu_ensemble.py:{arg}: expected a seed (an integer >= 0)")
    config = cpu_experiment.get_config(f"agg,{arg}")
    config.workdir = f"runs/ens/agg-m{arg}"
    max_steps = TRAIN_ITEMS // config.train.batch_size
    config.train.max_steps = max_steps
    config.train.eval_every_steps = max_steps // 2
    config.eval.samples = 0
    config.eval.final_splits = ()
    return config
