"""Members of a CPU ensemble (`python -m bapjax.ensemble`): a cpu_experiment.py variant without its own draws or test decode.

Differs from cpu_experiment.py:<variant>,<seed>: the member chooses only its STOP rule on MDC val, no test decode; ":half"
(the default) trains 96,000 items, ":full" exactly the run's 192,000 (the same weights as cpu_experiment's run).
Command: python -m bapjax.train --config=configs/cpu_ensemble.py:<seed>[,full][,<variant>] for two seeds, then
  python -m bapjax.ensemble --runs runs/ens/cl_la-full-m<a>,runs/ens/cl_la-full-m<b> --samples 128 --temperature 0.8 --rules select:0.075,vote:0.175 --noval --out runs/pairs/<name>
Runtime: a full cl_la pair 56.2 min (members 26.1 + 25.1, decoding 5.0) on a host at ~117 items/s (bench_train batch 32).
Result: six cl_la pairs 34.0 [32.3, 35.7] MDC test micro Overall, strict 30.0 (results/cpu_best.md; docs/results.md).
"""

from configs import cpu_experiment

# the member's budget: half of cpu_experiment.py's training items (the default, the first) or all of them; its workdir
BUDGETS = {"half": "runs/ens/{variant}-m{seed}", "full": "runs/ens/{variant}-full-m{seed}"}
DEFAULT_VARIANT = "agg"  # a member is this variant of cpu_experiment.py unless the argument names another


def get_config(arg: str = "0"):
    seed, *rest = arg.split(",")
    budgets = [r for r in rest if r in BUDGETS]
    variants = [r for r in rest if r in cpu_experiment.VARIANTS]
    if not seed.isdigit() or len(budgets) > 1 or len(variants) > 1 or len(budgets) + len(variants) < len(rest):
        raise ValueError(f"configs/cpu_ensemble.py:{arg}: expected <seed>[,full][,<variant>] with a seed (an integer "
                         f">= 0) and a variant of {', '.join(cpu_experiment.VARIANTS)}")
    budget = budgets[0] if budgets else next(iter(BUDGETS))
    variant = variants[0] if variants else DEFAULT_VARIANT
    config = cpu_experiment.get_config(f"{variant},{seed}")
    config.workdir = BUDGETS[budget].format(variant=variant, seed=seed)
    if budget == "half":
        config.train.max_steps //= 2
        config.train.eval_every_steps = config.train.max_steps // 2
    config.eval.vote_samples = 0
    config.eval.final_splits = ()
    return config
