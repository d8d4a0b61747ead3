"""Curriculum learning (paper 6.2): difficulty metrics and Xu et al. (2020)'s arrangement.

Metrics: ``D`` (data set, bs < ss < r < mc), ``L_A`` (number of reference actions), ``L_I``
(number of history tokens, untruncated, as the tokenizer renders them), and lexicographic
combinations written with commas, e.g. ``"D,L_A"`` or ``"(D, L_I, L_A)"`` (the first metric
sorts, later ones break ties).

Arrangement: sort items by difficulty (remaining ties in a seeded random order) and cut them
into N buckets of near-equal size; stage i (1..N) is one pass over a sample of 1/N of each of
buckets 1..i (without replacement, seeded); a final stage is all items. The stages are index
arrays for ``bapjax.data.input_pipeline.DataIterator(schedule=...)``, which shuffles within a stage
and, after the last stage, keeps repeating it (all data).

``every_stage`` (data set names, e.g. ``("mc",)``): those items are left out of the buckets and
every stage i also holds a sample of i/N^2 of them (without replacement), the same fraction of
them as stage i holds of the other items, so the data set keeps its share of every stage instead
of waiting for the last buckets (with metric D the MDC, the hardest, would otherwise enter only
at stage N-2 of N). The final stage is all items, as without it.

Each stage is one pass (as in the paper): the N stages hold L(N+1)/(2N) of the L items (about
half whatever N; 0.55 L with 10 buckets). ``stage_samples`` S (1 to N; 1 is the paper's) gives
each stage S disjoint samples of 1/N of each of its buckets, so the stages hold S times as many
distinct items (S L(N+1)/(2N)): the curriculum's share of a fixed training budget grows S-fold
with no item repeated within a stage.

Configs: ``config.curriculum.metric`` ("" or None for no curriculum),
``config.curriculum.num_buckets`` (paper grid: 5, 10, 15, 20, 25, 30),
``config.curriculum.every_stage`` and ``config.curriculum.stage_samples``.
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from bapjax.text.tokenizer import history_token_counts  # L_I
from bapjax.world.items import BapItem

DATASET_ORDER = ("bs", "ss", "r", "mc")
METRICS = ("D", "L_A", "L_I")


def parse_metric(metric: str) -> tuple[str, ...]:
    """("D", "L_A") from "D,L_A", "(D, L_A)" or "D L_A"; errors name the bad part."""
    parts = [p for p in metric.replace("(", " ").replace(")", " ").replace(",", " ").split() if p]
    if not parts:
        raise ValueError(f"curriculum metric {metric!r} names no metric; use some of {METRICS}")
    for part in parts:
        if part not in METRICS:
            raise ValueError(f"curriculum metric {metric!r}: unknown part {part!r}; use {METRICS}")
    if len(set(parts)) != len(parts):
        raise ValueError(f"curriculum metric {metric!r} repeats a part")
    return tuple(parts)


def dataset_rank(items: Sequence[BapItem]) -> np.ndarray:
    rank = {name: r for r, name in enumerate(DATASET_ORDER)}
    out = np.empty(len(items), np.int64)
    for n, item in enumerate(items):
        if item.dataset not in rank:
            raise ValueError(f"item {item.item_id}: data set {item.dataset!r} has no difficulty rank "
                             f"(known: {DATASET_ORDER})")
        out[n] = rank[item.dataset]
    return out


def difficulty(items: Sequence[BapItem], metric: str) -> np.ndarray:
    """int64 [N, K]: one column per metric part, compared lexicographically (column 0 first)."""
    columns = []
    for part in parse_metric(metric):
        if part == "D":
            columns.append(dataset_rank(items))
        elif part == "L_A":
            columns.append(np.array([len(i.reference_actions) for i in items], np.int64))
        else:
            columns.append(history_token_counts(items))
    return np.stack(columns, axis=1) if items else np.zeros((0, len(columns)), np.int64)


def difficulty_order(keys: np.ndarray, seed: int) -> np.ndarray:
    """Indices from easiest to hardest; equal keys in a seeded random order."""
    keys = np.asarray(keys).reshape(len(keys), -1)
    shuffled = np.random.default_rng(seed).permutation(len(keys))
    # np.lexsort sorts by the last key first, so pass columns reversed.
    order = np.lexsort(tuple(keys[shuffled, c] for c in reversed(range(keys.shape[1]))))
    return shuffled[order]


def check_num_buckets(num_buckets: int) -> None:
    """The one check of ``num_buckets`` alone: at least one bucket; ValueError. (Whether the items
    fill them is `buckets_from_keys`'s.)"""
    if num_buckets < 1:
        raise ValueError(f"num_buckets must be >= 1, got {num_buckets}")


def buckets_from_keys(keys: np.ndarray, num_buckets: int, seed: int) -> list[np.ndarray]:
    """N near-equal buckets of item indices, easiest first."""
    check_num_buckets(num_buckets)
    if num_buckets > len(keys):
        raise ValueError(f"num_buckets {num_buckets} exceeds the number of items {len(keys)}")
    return [np.asarray(b, np.int64) for b in np.array_split(difficulty_order(keys, seed), num_buckets)]


def check_stage_samples(stage_samples: int, num_buckets: int) -> None:
    """The one check of ``stage_samples``: an integer from 1 to the number of buckets (disjoint
    samples of 1/N of a bucket: at most N of them fit); ValueError."""
    if int(stage_samples) != stage_samples or not 1 <= stage_samples <= num_buckets:
        raise ValueError(f"curriculum stage_samples must be an integer from 1 to num_buckets ({num_buckets}), "
                         f"got {stage_samples!r}")


def check_section(section: Any) -> None:
    """``config.curriculum`` before a run reads any data: its metric (when set), ``num_buckets`` >= 1
    and ``stage_samples`` (`check_stage_samples`); ValueError."""
    if not section.metric:
        return
    parse_metric(str(section.metric))
    check_num_buckets(int(section.num_buckets))  # an int already: config fields keep their type
    check_stage_samples(section.stage_samples, int(section.num_buckets))


def arrange(buckets: Sequence[np.ndarray], seed: int, stage_samples: int = 1) -> list[np.ndarray]:
    """Stages 1..N (`stage_samples` x 1/N of each of buckets 1..i, distinct items) then the final
    all-data stage."""
    n = len(buckets)
    check_stage_samples(stage_samples, n)
    rng = np.random.default_rng([seed, 1])
    stages = []
    for i in range(1, n + 1):
        parts = []
        for bucket in buckets[:i]:
            size = max(1, int(round(len(bucket) * stage_samples / n)))  # <= len(bucket): stage_samples <= n
            parts.append(rng.choice(bucket, size=size, replace=False))
        stages.append(np.sort(np.concatenate(parts)))
    stages.append(np.sort(np.concatenate(list(buckets))))
    return stages


def curriculum_stages(items: Sequence[BapItem], metric: str, num_buckets: int, seed: int,
                      every_stage: Sequence[str] = (), stage_samples: int = 1) -> list[np.ndarray]:
    """The schedule for ``DataIterator``: N + 1 index arrays (the N stages, then all items); items
    of the data sets in `every_stage` are in every stage at the others' fraction, `stage_samples`
    samples per stage (module docstring)."""
    if not every_stage:
        return arrange(buckets_from_keys(difficulty(items, metric), num_buckets, seed), seed, stage_samples)
    kept_mask = np.array([item.dataset in set(every_stage) for item in items], bool)
    kept, others = np.flatnonzero(kept_mask), np.flatnonzero(~kept_mask)
    if not len(kept) or not len(others):
        raise ValueError(f"curriculum every_stage {tuple(every_stage)}: needs items of those data sets "
                         f"and of others (found {len(kept)} and {len(others)})")
    stages = arrange(buckets_from_keys(difficulty([items[i] for i in others], metric), num_buckets, seed), seed,
                     stage_samples)
    rng = np.random.default_rng([seed, 2])
    out = []
    for i, stage in enumerate(stages[:-1], 1):
        size = max(1, int(round(len(kept) * i * stage_samples / num_buckets ** 2)))
        out.append(np.sort(np.concatenate([others[stage], rng.choice(kept, size=min(size, len(kept)), replace=False)])))
    return out + [np.arange(len(items))]


def schedule_from_config(items: Sequence[BapItem], config: Any, seed: int) -> list[np.ndarray] | None:
    """Stages from ``config.curriculum`` (metric, num_buckets, every_stage, stage_samples) of a
    config completed with the defaults (`run_checks.with_defaults`); None when no curriculum is set."""
    section = config.curriculum
    if not section.metric:
        return None
    return curriculum_stages(items, str(section.metric), int(section.num_buckets), seed, tuple(section.every_stage),
                             int(section.stage_samples))
