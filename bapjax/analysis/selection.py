"""How much choosing the best of k runs adds: the best of k runs of one variant against one run of another.

    python -m bapjax.analysis.selection --chosen results/runs/cl_la-frame-s{0,1,2,3,4,5,6,7,8,9,10} \
        --against results/runs/agg-frame-s{7,9,10,11,12,13,14} --k 1,2,3,5,10,20,42 --out results/cpu_selection

A paper that reports the best of k runs of its method (chosen on the test split, or on val) beside
one run of its baseline reports, besides the method's effect, what the choice adds. This command
simulates that comparison on finished runs: each run (a training workdir, or a kept run of
results/runs) contributes its MDC test predictions (rescored on `--corpus`, per item) and its
decoded MDC val F1 (the best candidate of its decode.json, the figure its decoding was chosen by).

Each bootstrap replicate draws the test items with replacement once (the same draw for every run),
the `--chosen` runs with replacement (the replicate's population of that variant), and one
`--against` run. For each k it then draws k runs of that population with replacement and takes
the best of them on the drawn test items ("on test"), or the one of best val F1 ("on val"), and
subtracts the `--against` run's F1 on the same items. With k above the number of runs, draws
repeat runs, so the best of k cannot exceed the best run: the "normal" column replaces the draws
by the expected best of k independent runs from a normal distribution with the replicate
population's mean and SD (mean + SD x E[max of k standard normals]), which extrapolates to k = 42
(the paper's 7 metrics x 6 bucket counts). Every figure is a difference of micro Overall fairer F1
(points), its mean and 95% percentile interval over the replicates; k = 1 is the comparison of one
run with one run. OUT.json holds every figure, OUT.md the table.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import shlex
import statistics
import sys
from pathlib import Path

import numpy as np

from bapjax import cli, paths
from bapjax.analysis import bootstrap, collect_experiment
from bapjax.corpus import mdc
from bapjax.errors import UserError
from bapjax.world import jsonl


def expected_max_normal(k: int, points: int = 20001) -> float:
    """E[max of k independent standard normals], by integrating x k phi(x) Phi(x)^(k-1) on a grid."""
    x = np.linspace(-10.0, 10.0, points)
    phi = np.exp(-x * x / 2) / math.sqrt(2 * math.pi)
    cdf = 0.5 * (1 + np.vectorize(math.erf)(x / math.sqrt(2)))
    return float(np.trapezoid(x * k * phi * cdf ** (k - 1), x))


def run_inputs(run: Path, items: list) -> tuple[dict, float]:
    """A run's per-item fairer Overall counts on `items` (its MDC test predictions, which must
    rescore to its final_eval.json) and its decoded MDC val F1 (decode.json's best candidate)."""
    predictions = jsonl.stored(run / "predictions" / collect_experiment.PREDICTIONS)
    if not predictions.exists():
        raise UserError(f"{run}: no MDC test predictions ({predictions})")
    recorded = json.loads((run / "final_eval.json").read_text()).get("mc_test")
    counts = collect_experiment.rescore(predictions, items, recorded,
                                        ("the test split of --corpus", f"{run / 'final_eval.json'}'s mc_test"))
    decode = collect_experiment.run_record(run).get("decode") or {}
    vals = [c["val_overall_micro_f1"] for c in decode.get("candidates", []) if "val_overall_micro_f1" in c]
    if not vals:
        raise UserError(f"{run}: its record holds no decoded val F1 (decode.json candidates)")
    return counts, max(vals)


@dataclasses.dataclass(frozen=True)
class SelectionDraws:
    """One bootstrap's draws: `items` [samples, n_items] (shared by every run), `population`
    [samples, n_chosen] (the replicate's chosen runs), `against` [samples] (its one run of the other
    variant) and per k `picks` [samples, k] (positions in the population)."""

    items: np.ndarray
    population: np.ndarray
    against: np.ndarray
    picks: dict[int, np.ndarray]


def selection_draws(n_items: int, n_chosen: int, n_against: int, ks: list[int], samples: int,
                    seed: int) -> SelectionDraws:
    rng = np.random.default_rng(seed)
    items = rng.integers(0, n_items, (samples, n_items))
    population = rng.integers(0, n_chosen, (samples, n_chosen))
    against = rng.integers(0, n_against, samples)
    return SelectionDraws(items, population, against, {k: rng.integers(0, n_chosen, (samples, k)) for k in ks})


def simulate(chosen: list[dict], chosen_val: list[float], against: list[dict],
             draws: SelectionDraws) -> dict[int, dict[str, np.ndarray]]:
    """{k: {"on_test", "on_val", "normal": [samples]}}: best-of-k `chosen` minus one `against` run
    (micro F1 differences, fractions) on each replicate of `draws`."""
    weights = bootstrap.item_weights(draws.items, draws.items.shape[1])
    f_chosen = bootstrap.runs_f1(chosen, weights).T  # [samples, runs]
    f_against = bootstrap.runs_f1(against, weights).T
    samples = len(draws.against)
    one = f_against[np.arange(samples), draws.against]
    pop_f1 = np.take_along_axis(f_chosen, draws.population, axis=1)
    pop_mean = pop_f1.mean(axis=1)
    pop_sd = pop_f1.std(axis=1, ddof=1) if pop_f1.shape[1] > 1 else np.zeros(samples)
    val = np.asarray(chosen_val)
    out = {}
    for k, positions in draws.picks.items():
        picks = np.take_along_axis(draws.population, positions, axis=1)  # run indices
        f1 = np.take_along_axis(f_chosen, picks, axis=1)
        out[k] = {"on_test": f1.max(axis=1) - one,
                  "on_val": f1[np.arange(samples), val[picks].argmax(axis=1)] - one,
                  "normal": pop_mean + pop_sd * expected_max_normal(k) - one}
    return out


def simulate_reference(chosen: list[dict], chosen_val: list[float], against: list[dict],
                       draws: SelectionDraws) -> dict[int, dict[str, list[float]]]:
    """`simulate` in plain Python, one replicate, run and item at a time (the oracle of the tests)."""

    def f1(counts: dict, items: list[int]) -> float:
        tp = sum(int(counts["tp"][i]) for i in items)
        total = sum(int(counts["n_pred"][i]) + int(counts["n_ref"][i]) for i in items)
        return 1.0 if total == 0 else 2.0 * tp / total

    out = {k: {"on_test": [], "on_val": [], "normal": []} for k in draws.picks}
    for sample, items in enumerate(draws.items.tolist()):
        one = f1(against[int(draws.against[sample])], items)
        population = draws.population[sample].tolist()
        pop = [f1(chosen[run], items) for run in population]
        sd = statistics.stdev(pop) if len(pop) > 1 else 0.0
        for k, positions in draws.picks.items():
            runs = [population[p] for p in positions[sample].tolist()]
            scores = [f1(chosen[run], items) for run in runs]
            best_val = max(range(len(runs)), key=lambda i: (chosen_val[runs[i]], -i))  # the first of the best
            out[k]["on_test"].append(max(scores) - one)
            out[k]["on_val"].append(scores[best_val] - one)
            out[k]["normal"].append(statistics.fmean(pop) + sd * expected_max_normal(k) - one)
    return out


def summary(values: np.ndarray) -> dict:
    low, high = np.percentile(values, bootstrap.INTERVAL)
    return {"mean": float(values.mean()), "interval": [float(low), float(high)]}


def markdown(command: str, result: dict, chosen: str, against: str) -> str:
    signed = lambda v: f"{100 * v:+.1f}"  # noqa: E731
    cell = lambda s: f"{signed(s['mean'])} [{signed(s['interval'][0])}, {signed(s['interval'][1])}]"  # noqa: E731
    lines = [f"`{command}`", "",
             f"The best of k `{chosen}` runs minus one `{against}` run, MDC test micro Overall fairer F1 (points), "
             f"mean [95% interval] over {result['samples']} replicates (items, runs and the draws of k resampled):", "",
             "| k | best on test | best on val | best on test, normal model |", "|---:|---:|---:|---:|"]
    for k, row in result["by_k"].items():
        lines.append(f"| {k} | {cell(row['on_test'])} | {cell(row['on_val'])} | {cell(row['normal'])} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--chosen", nargs="+", required=True, help="the runs of the variant whose best of k is taken")
    parser.add_argument("--against", nargs="+", required=True, help="the runs of the variant it is compared with")
    parser.add_argument("--k", default="1,2,3,5,10,20,42", help="comma-separated numbers of runs to choose among")
    parser.add_argument("--corpus", default="@mdc", help="the MDC whose test split the runs' predictions are of")
    parser.add_argument("--bootstrap", type=int, default=2000, help="replicates")
    parser.add_argument("--seed", type=int, default=0, help="the bootstrap's random seed")
    parser.add_argument("--out", required=True, help="output path without extension (OUT.json, OUT.md)")
    args = parser.parse_args(argv)
    command = " ".join(["python", "-m", "bapjax.analysis.selection",
                        *map(shlex.quote, sys.argv[1:] if argv is None else argv)])
    try:
        ks = [int(t) for t in args.k.split(",") if t.strip()]
        if not ks or min(ks) < 1:
            raise ValueError
    except ValueError:
        cli.fail(f"--k {args.k}: expected comma-separated whole numbers >= 1, e.g. 1,2,5,42")
    if args.bootstrap < 1:
        cli.fail(f"--bootstrap {args.bootstrap}: expected 1 or more replicates")
    try:
        out = Path(args.out)
        paths.check_writable_dir(out.parent, "--out", output=args.out)
        for run in [*args.chosen, *args.against]:
            if not Path(run).is_dir():
                raise UserError(f"{run}: not a run directory")
        items = mdc.load_corpus(paths.mdc_path(args.corpus)).split("test")
        chosen = [run_inputs(Path(r), items) for r in args.chosen]
        against = [run_inputs(Path(r), items)[0] for r in args.against]
    except UserError as err:
        cli.fail(str(err))
    draws = selection_draws(len(items), len(chosen), len(against), ks, args.bootstrap, args.seed)
    values = simulate([c for c, _ in chosen], [v for _, v in chosen], against, draws)
    by_k = {str(k): {name: summary(v) for name, v in row.items()} for k, row in values.items()}  # JSON keys
    result = {"command": command, "samples": args.bootstrap, "seed": args.seed, "chosen": args.chosen,
              "against": args.against, "chosen_val": [v for _, v in chosen], "by_k": by_k}
    out.with_suffix(".json").write_text(collect_experiment.entry_per_line(result, levels=2))
    names = [collect_experiment.variant_of(Path(r[0]).name) for r in (args.chosen, args.against)]
    text = markdown(command, result, *names)
    out.with_suffix(".md").write_text(text)
    print(text, end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
