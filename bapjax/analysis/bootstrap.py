"""Bootstrap intervals of micro F1 over test items and, for a seeds x items experiment, over seeds.

A run's figure is micro F1 (`metrics.micro_f1`: 2 tp / (n_pred + n_ref) of counts summed over the
items), so a resampling recomputes it from the resampled items' summed counts; per-item F1 is never
averaged. Per-item counts are {"tp", "n_pred", "n_ref"} arrays in one item order, e.g. the fairer
Overall counts of `evaluator.evaluate_items` (`scores.fair_tp`, `scores.n_pred`, `scores.n_ref`).

The two-level bootstrap (`two_level`) of variants, each a set of runs (seeds) scored on the same
items: every replicate draws the items with replacement once, the same draw for every run of every
variant (paired), and independently per variant that variant's seeds with replacement; a
variant's replicate value is the mean over its drawn seeds of their micro F1 on the drawn items.
Its interval accounts for the test items and for the seeds; a difference between two variants is
taken replicate by replicate; variants that hold the same models (one set of checkpoints decoded
two ways) can share their seed draws (`paired`), so their difference is resampled seed by seed.
Intervals are percentile intervals (`INTERVAL`). `draw` makes the
draws (one generator: the items first, then each variant's seeds in the variants' order), so that
the NumPy computation (`replicates`) and the plain-Python one it is tested against
(`replicates_reference`) see the same draws. With one run per variant the seed draws are trivial
and the bootstrap is over the items alone (`paired_bootstrap`).

The seeds' spread (`spread`, with its oracle `spread_reference`) splits their standard deviation
into the part explained by which items each seed gets right (their paired differences' variance
over the same item draws) and the rest (seeds better or worse overall).
"""

from __future__ import annotations

import dataclasses
import statistics
from collections.abc import Mapping, Sequence

import numpy as np

from bapjax.evaluation import metrics

INTERVAL = (2.5, 97.5)  # percentiles: a 95% interval

Counts = Mapping[str, np.ndarray]  # {"tp", "n_pred", "n_ref"}: one entry per item


@dataclasses.dataclass(frozen=True)
class Draws:
    """The indices of one bootstrap: `items` [samples, n_items] (shared by every run) and per
    variant `seeds` [samples, runs] (which of its runs each replicate averages)."""

    items: np.ndarray
    seeds: dict[str, np.ndarray]


def draw(n_items: int, runs_per_variant: Mapping[str, int], samples: int, seed: int = 0,
         paired: Sequence[Sequence[str]] = ()) -> Draws:
    """`samples` replicates' draws: the items with replacement (once, for every variant), then per
    variant (in order) its runs with replacement. Variants of one group of `paired` hold the same
    models in the same order (e.g. one set of checkpoints decoded two ways): they share one draw of
    their runs, made at the first of them in the variants' order, so their difference is resampled
    seed by seed; the variants of no group draw as they do without `paired`."""
    group_of = {}
    for group in paired:
        unknown = [v for v in group if v not in runs_per_variant]
        if unknown:
            raise ValueError(f"paired variants {', '.join(unknown)} are not among {', '.join(runs_per_variant)}")
        if len({runs_per_variant[v] for v in group}) > 1:
            raise ValueError(f"paired variants {', '.join(group)} hold different numbers of runs "
                             f"({', '.join(str(runs_per_variant[v]) for v in group)})")
        for variant in group:
            if variant in group_of:
                raise ValueError(f"variant {variant} is in two paired groups")
            group_of[variant] = tuple(group)
    rng = np.random.default_rng(seed)
    items = rng.integers(0, n_items, (samples, n_items))
    seeds: dict[str, np.ndarray] = {}
    shared: dict[tuple, np.ndarray] = {}
    for variant, k in runs_per_variant.items():
        group = group_of.get(variant)
        if group is None:
            seeds[variant] = rng.integers(0, k, (samples, k))
            continue
        if group not in shared:
            shared[group] = rng.integers(0, k, (samples, k))
        seeds[variant] = shared[group]
    return Draws(items, seeds)


def item_weights(picks: np.ndarray, n_items: int) -> np.ndarray:
    """[samples, n_items]: how often each replicate `picks` [samples, m] drew each item."""
    samples = picks.shape[0]
    flat = (picks + n_items * np.arange(samples)[:, None]).ravel()
    return np.bincount(flat, minlength=samples * n_items).reshape(samples, n_items)


def resampled_f1(tp: np.ndarray, total: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """Micro F1 [..., samples] of per-item counts `tp`, `total` (= n_pred + n_ref) [..., n_items]
    on each replicate of `weights` [samples, n_items] (`metrics.micro_f1`'s rule: 1 when every set
    is empty)."""
    tp_sum = np.asarray(tp, np.int64) @ weights.T
    total_sum = np.asarray(total, np.int64) @ weights.T
    return np.where(total_sum == 0, 1.0, 2.0 * tp_sum / np.maximum(total_sum, 1))


def resampled_micro_f1(counts: Counts, picks: np.ndarray) -> np.ndarray:
    """Micro F1 [samples] of one run's per-item counts on each resampling `picks` [samples, m] of
    its items."""
    n_items = len(counts["tp"])
    return resampled_f1(counts["tp"], np.asarray(counts["n_pred"]) + np.asarray(counts["n_ref"]),
                        item_weights(picks, n_items))


def runs_f1(counts: Sequence[Counts], weights: np.ndarray) -> np.ndarray:
    """[runs, samples]: each run's micro F1 on each replicate of `weights` [samples, n_items]."""
    tp = np.stack([c["tp"] for c in counts])
    total = np.stack([np.asarray(c["n_pred"]) + np.asarray(c["n_ref"]) for c in counts])
    return resampled_f1(tp, total, weights)


def seed_means(f1: np.ndarray, seeds: np.ndarray) -> np.ndarray:
    """[samples]: per replicate, the mean over its drawn `seeds` [samples, k] of `runs_f1`'s `f1`."""
    return np.take_along_axis(f1.T, seeds, axis=1).mean(axis=1)


def replicates(runs: Mapping[str, Sequence[Counts]], draws: Draws) -> dict[str, np.ndarray]:
    """{variant: [samples] replicate values}: the mean over the drawn seeds of their micro F1 on the
    drawn items."""
    weights = item_weights(draws.items, draws.items.shape[1])
    return {variant: seed_means(runs_f1(counts, weights), draws.seeds[variant]) for variant, counts in runs.items()}


def replicates_reference(runs: Mapping[str, Sequence[Counts]], draws: Draws) -> dict[str, list[float]]:
    """`replicates` in plain Python, one replicate, seed and item at a time (the oracle of the tests)."""
    out = {}
    for variant, counts in runs.items():
        values = []
        for sample, items in enumerate(draws.items.tolist()):
            f1s = []
            for run in draws.seeds[variant][sample].tolist():
                tp = sum(int(counts[run]["tp"][i]) for i in items)
                total = sum(int(counts[run]["n_pred"][i]) + int(counts[run]["n_ref"][i]) for i in items)
                f1s.append(1.0 if total == 0 else 2.0 * tp / total)
            values.append(sum(f1s) / len(f1s))
        out[variant] = values
    return out


def spread(counts: Sequence[Counts], items: np.ndarray) -> dict:
    """Where the spread of one variant's seeds (>= 2 runs on the same items) comes from, on the
    resamplings `items` [samples, n_items] of the items: {"seed_sd": the standard deviation of their
    micro F1 over seeds; "interaction_sd": the part which items each seed happens to get right
    explains (an item x seed interaction: half the mean over pairs of seeds of the bootstrap variance
    of their paired difference, square-rooted); "model_sd": the rest, seeds better or worse on any
    items (square root of seed variance minus interaction variance, 0 if that is negative)}. With
    seeds that differ only by item x seed noise, interaction_sd ~ seed_sd: it does not shrink with
    more seeds, only with models that agree item by item (e.g. an ensemble's) or more test items."""
    if len(counts) < 2:
        raise ValueError("the spread of seeds needs at least 2 runs")
    per_run = [metrics.micro_f1(c["tp"], c["n_pred"], c["n_ref"]) for c in counts]
    return split_spread(runs_f1(counts, item_weights(items, items.shape[1])), per_run)


def split_spread(f1: np.ndarray, per_run: Sequence[float]) -> dict:
    """`spread` of runs with micro F1 `per_run` on every item and `f1` [runs, samples] on the
    resampled items (`runs_f1`)."""
    runs = len(per_run)
    pair_vars = [np.var(f1[a] - f1[b]) for a in range(runs) for b in range(a + 1, runs)]
    interaction = float(np.mean(pair_vars)) / 2
    seed_var = statistics.variance(per_run)
    return {"seed_sd": seed_var ** 0.5, "interaction_sd": interaction ** 0.5,
            "model_sd": max(0.0, seed_var - interaction) ** 0.5}


def spread_reference(counts: Sequence[Counts], items: np.ndarray) -> dict:
    """`spread` in plain Python, one replicate, pair and item at a time (the oracle of the tests)."""
    def f1(run, picked):
        tp = sum(int(run["tp"][i]) for i in picked)
        total = sum(int(run["n_pred"][i]) + int(run["n_ref"][i]) for i in picked)
        return 1.0 if total == 0 else 2.0 * tp / total

    every = range(len(counts[0]["tp"]))
    points = [f1(run, every) for run in counts]
    mean = sum(points) / len(points)
    seed_var = sum((p - mean) ** 2 for p in points) / (len(points) - 1)
    pair_vars = []
    for a in range(len(counts)):
        for b in range(a + 1, len(counts)):
            diffs = [f1(counts[a], picked) - f1(counts[b], picked) for picked in items.tolist()]
            centre = sum(diffs) / len(diffs)
            pair_vars.append(sum((d - centre) ** 2 for d in diffs) / len(diffs))
    interaction = sum(pair_vars) / len(pair_vars) / 2
    return {"seed_sd": seed_var ** 0.5, "interaction_sd": interaction ** 0.5,
            "model_sd": max(0.0, seed_var - interaction) ** 0.5}


def percentile_reference(values: Sequence[float], q: float) -> float:
    """The q-th percentile by linear interpolation between order statistics (np.percentile's
    default), in plain Python."""
    ordered = sorted(values)
    position = q / 100 * (len(ordered) - 1)
    low = int(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def interval(values: np.ndarray) -> list[float]:
    return [float(v) for v in np.percentile(values, INTERVAL)]


def two_level(runs: Mapping[str, Sequence[Counts]], differences: Sequence[tuple[str, str]], samples: int,
              seed: int = 0, paired: Sequence[Sequence[str]] = ()) -> dict:
    """The two-level bootstrap of `runs` ({variant: per-run counts, the same items in the same
    order}): per variant its runs' micro F1, their mean, standard deviation (None for one run) and
    the mean's 95% interval, and with >= 2 runs their `spread` on the same item draws; per difference (a, b) of `differences` "a - b": the difference of the
    means, its 95% interval and the share of replicates above 0. `paired`: groups of variants whose
    runs are the same models in the same order, drawn together (`draw`)."""
    n_items = len(next(iter(next(iter(runs.values()))))["tp"])
    if any(len(c[k]) != n_items for counts in runs.values() for c in counts for k in ("tp", "n_pred", "n_ref")):
        raise ValueError("every run's per-item counts must cover the same items")
    draws = draw(n_items, {v: len(c) for v, c in runs.items()}, samples, seed, paired)
    weights = item_weights(draws.items, n_items)
    out = {"samples": samples, "seed": seed, "items": n_items, "variants": {}, "differences": {}}
    means, values = {}, {}
    for variant, counts in runs.items():
        per_run = [metrics.micro_f1(c["tp"], c["n_pred"], c["n_ref"]) for c in counts]
        f1 = runs_f1(counts, weights)
        values[variant] = seed_means(f1, draws.seeds[variant])  # `replicates`, the resampling shared with `spread`
        means[variant] = sum(per_run) / len(per_run)
        out["variants"][variant] = {"runs": len(per_run), "per_run": per_run, "mean": means[variant],
                                    "sd": statistics.stdev(per_run) if len(per_run) > 1 else None,
                                    "interval": interval(values[variant])}
        if len(counts) > 1:
            out["variants"][variant]["spread"] = split_spread(f1, per_run)
    for a, b in differences:
        diff = values[a] - values[b]
        out["differences"][f"{a} - {b}"] = {"mean": means[a] - means[b], "interval": interval(diff),
                                            "share_above_0": float((diff > 0).mean())}
    return out


def paired_bootstrap(per_item: Mapping[str, Counts], samples: int, seed: int = 0) -> dict:
    """95% intervals of micro Overall F1 per run and of each pairwise difference ("b - a" for a
    listed before b), over `samples` resamplings of the items (the same ones for every run)."""
    labels = list(per_item)
    pairs = [(b, a) for i, a in enumerate(labels) for b in labels[i + 1:]]
    boot = two_level({label: [counts] for label, counts in per_item.items()}, pairs, samples, seed)
    return {"samples": samples, "items": boot["items"],
            "runs": {label: v["interval"] for label, v in boot["variants"].items()},
            "differences": {name: {k: d[k] for k in ("interval", "share_above_0")}
                            for name, d in boot["differences"].items()}}


def own_items_draws(items_per_run: Sequence[int], samples: int, seed: int = 0) -> tuple[list[np.ndarray], np.ndarray]:
    """Draws of `own_items`: per run its own items with replacement [samples, n_items of that run]
    (in the runs' order), then the runs with replacement [samples, runs]."""
    rng = np.random.default_rng(seed)
    items = [rng.integers(0, n, (samples, n)) for n in items_per_run]
    return items, rng.integers(0, len(items_per_run), (samples, len(items_per_run)))


def own_items(counts: Sequence[Counts], samples: int, seed: int = 0) -> dict:
    """The two-level bootstrap of runs scored on test sets of their own (a simulated test split
    generated with each run's seed): every replicate resamples each run's items within its own set
    and the runs with replacement; its value is the mean over the drawn runs of their micro F1 on
    their drawn items. {"per_run", "mean", "sd", "interval"} (`own_items_reference`: the oracle)."""
    items, seeds = own_items_draws([len(c["tp"]) for c in counts], samples, seed)
    f1 = np.stack([resampled_micro_f1(c, picks) for c, picks in zip(counts, items)])  # [runs, samples]
    per_run = [metrics.micro_f1(c["tp"], c["n_pred"], c["n_ref"]) for c in counts]
    return {"per_run": per_run, "mean": sum(per_run) / len(per_run),
            "sd": statistics.stdev(per_run) if len(per_run) > 1 else None,
            "interval": interval(seed_means(f1, seeds))}


def own_items_reference(counts: Sequence[Counts], samples: int, seed: int = 0) -> list[float]:
    """`own_items`' replicate values in plain Python, one replicate, run and item at a time."""
    items, seeds = own_items_draws([len(c["tp"]) for c in counts], samples, seed)
    values = []
    for sample in range(samples):
        f1s = []
        for run in seeds[sample].tolist():
            picks = items[run][sample].tolist()
            tp = sum(int(counts[run]["tp"][i]) for i in picks)
            total = sum(int(counts[run]["n_pred"][i]) + int(counts[run]["n_ref"][i]) for i in picks)
            f1s.append(1.0 if total == 0 else 2.0 * tp / total)
        values.append(sum(f1s) / len(f1s))
    return values
