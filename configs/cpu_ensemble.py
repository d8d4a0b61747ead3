"""Members of a CPU ensemble: M_agg (or another variant) of `configs/cpu_experiment.py` without what only a run
decoded alone needs, for `python -m bapjax.ensemble`.

Differs from cpu_experiment.py:agg: the member's own choice on MDC val is its STOP rule only (the ensemble draws),
and no test decode (the ensemble decodes test with every member). ":<seed>" trains half the items (96,000: 3,000
steps of 32, two evals); ":<seed>,full" trains exactly as cpu_experiment.py:agg,<seed> (192,000 items, its five
evals and checkpoint choice: the same weights), so full members decoded together give what those runs decoded
together give with the same draws; at temperature 0.8 (chosen on MDC val over 0.5, what the runs choose alone,
1.0 and 64 draws) they score higher.
Command: python -m bapjax.train --config=configs/cpu_ensemble.py:<seed>[,full][,<variant>]   (runs/ens/agg-m<seed>,
  runs/ens/agg-full-m<seed>; another variant of cpu_experiment.py, e.g. cl_la, in place of agg), for each member's
  seed, then
  python -m bapjax.ensemble --runs runs/ens/agg-full-m<s0>,runs/ens/agg-full-m<s1> --samples 32 --temperature 0.8
  --out runs/ens/<name>   (four half members: --samples 8 --temperature 0.5)
Runtime: full 12.9-15.9 min per member (seeds 0-2, 4-16), 4.3-5.3 min for two members' ensemble decoding: 31.3-35.7
min in all per pair; half 8.6-8.9 min per member, 3.4 min for four members' ensemble decoding: 38.4 min in all
(docs/results.md, "Ensembles"; results/cpu_experiment_runs.md), decoding one pass per draw; with the draws decoded
together and today's sampler the same pair's ensemble decoding took 3.24 instead of 8.99 min on a host half as fast
(results/runs/ens2-host3-*). Two half cl_la members (`:<seed>,cl_la`, seeds 9 and 10, 4 devices) on a slow host: 16.5
and 16.1 min, 8.2 for their ensemble decoding with val: 40.7 min, MDC val 27.98 against 28.84 for one full cl_la
run alone (docs/results.md, "The best CPU builder within 40 minutes").
More draws: in two pairs decoded with 32, 64, 128 and 256 draws per member, MDC val rose at each step (32 to 128:
+0.24 and +0.11; docs/results.md, "A pair's decoding noise"; results/ensemble_noise_pair{78,1718}.md): --samples
128 is the next pairs' setting where it fits 40 minutes.
With --samples 128: eight pairs (seeds 7+8, 17+18, 19+20, 21+22, 23+24, 25+26, 27+28, 29+30) 33.6 [31.9, 35.3]
(32.9, 34.2, 34.4, 32.3, 34.6, 32.7, 32.7, 34.8), strict 29.5, seed SD 1.0, at 59.5-70.8 min per pair on a host
half as fast (results/cpu_best_pair_d128_host3.md). With --rules select:0.075,vote:0.175 (the pooled val best of
those pairs, results/ensemble_rules_pairs_d128.md) and members whose STOP rule leaves out "length" (their draws
then sample their length; cpu_experiment.py's default), five pairs of cpu_experiment.py:agg runs (the same weights as full
members) 33.5 [31.7, 35.2], strict 29.5, seed SD 0.6 (results/cpu_best_pair_d128_fixed_host5.md; those members
timed only on slow hosts). With rules fixed, --noval leaves the val split (which then only scores them) undecoded:
4.8-5.0 of those pairs' 10.4-11.1 min of ensemble decoding. Five pairs of cpu_experiment.py:cl_la runs trained
the same way (seeds 0+1, 2+3, 4+5, 6+7, 9+10) and one of ":<seed>,full,cl_la" members (11+12), decoded so with --noval
(5.0-6.1 min each on those slow hosts): 34.0 [32.3, 35.7], strict 30.0, seed SD 0.4, 56.2-72.3 min per pair, the lean
pair 56.2 (members 26.1 and 25.1; results/cpu_cl_la_pairs128_noval.md; ":<seed>,full,cl_la" trains such a
member without its own draws and test decode).
Result: MDC test micro Overall, pairs of full members at T 0.8 (seeds 0+4, 1+2, 5+6, 7+8, 9+10, 11+12, 13+14,
15+16): 32.9 [31.3, 34.6] (33.6, 32.4, 32.7, 33.5, 32.2, 32.9, 33.7, 32.1), strict 28.7 (docs/results.md, "The best
CPU builder within 40 minutes"; results/cpu_best_pair.md); the first four pairs at T 0.5: 32.8, and 33.3 for members 7 and 8
(the test predictions of cpu_experiment.py:agg,7 and agg,8 decoded together, byte for byte); four half members,
seeds 10-13: 30.5 (members alone 22.8-25.3).

The seed sets `config.seed` and the simulators' seed, so every member trains on its own simulated items in its own
order from its own initialization.
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
