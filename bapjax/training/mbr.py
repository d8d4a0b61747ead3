"""Minimum-Bayes-risk decoding: of an item's greedy decoding and K sequences drawn from the model,
keep the one with the highest expected gain in micro F1 against the draws.

The BAP score is a micro F1 over net action sets, 2 TP / (P + R) summed over items, and a greedy
decoder commits to the single most likely action at each step, so where the model spreads its
probability over several starts or lengths the greedy sequence can sit far from what the model
believes on the whole (and it stops early: `bapjax.training.decode`). The draws
(`bapjax.training.decode.candidates`: the slot pool with `sample_keys`, STOP drawn with the rest,
at the settings' temperature) stand for the model's distribution over sequences. Micro F1 F rises
with an item's prediction P when its true positives grow by more than F / 2 per predicted action,
so each candidate's utility is linear (`utility`): its mean number of net actions shared with the draws other than itself,
minus `cost` per net action it predicts. The draws agree with each other far more than with the
references (their mutual F1 is about twice the model's val F1), so `cost` is chosen on val
(`config.eval.costs`) rather than set to half their F1. Ties go to the earliest candidate
(the greedy one first). Every candidate is a sequence the decoder produced under the feasibility
mask, so what is kept is always buildable.

This module is only the selection, plain Python over net action sets (`choose`, its pair-by-pair
reference `choose_pairwise`, `select`); the K + 1 decoding passes are `bapjax.training.decode.candidates`, and `decode.predict` decodes with
it when a run's settings have draws. A run tries it on val after choosing its STOP rule
(`bapjax.training.run_eval.Evaluator.choose_decoding`) and keeps it in decode.json only if it
scores higher there.
"""

from __future__ import annotations

import collections
from typing import Sequence

from bapjax.world import grid as G


def utility(net: frozenset, draws: Sequence[frozenset], cost: float) -> float:
    """Mean |net & draw| over `draws` minus `cost` * |net| (net action sets)."""
    return sum(len(net & draw) for draw in draws) / len(draws) - cost * len(net)


def choose(candidates: Sequence[Sequence[G.Action]], cost: float, draws_from: int = 1) -> int:
    """The index of the candidate with the highest `utility` of its net actions against the draws
    `candidates[draws_from:]` other than itself (ties: the lowest index). With fewer than two
    draws there is nothing to weigh: index 0. Each net action's count over the draws is taken once,
    so a candidate's shared actions are the sum of its actions' counts (less its own, for a draw):
    the same integer `utility` sums pair by pair, in time linear in the draws."""
    nets = [G.net_actions(c) for c in candidates]
    draws = len(nets) - draws_from
    if draws < 2:
        return 0
    counts = collections.Counter(action for net in nets[draws_from:] for action in net)
    best, best_utility = 0, float("-inf")
    for i, net in enumerate(nets):
        own = i >= draws_from  # a draw is not weighed against itself
        shared = sum(counts[action] for action in net) - (len(net) if own else 0)
        value = shared / (draws - own) - cost * len(net)
        if value > best_utility + 1e-12:
            best, best_utility = i, value
    return best


def choose_pairwise(candidates: Sequence[Sequence[G.Action]], cost: float, draws_from: int = 1) -> int:
    """`choose`'s plain reference: `utility` of each candidate against every other draw, pair by pair
    (quadratic in the draws; the tests and `benchmarks/bench_mbr_choose.py` hold `choose` to it)."""
    nets = [G.net_actions(c) for c in candidates]
    draws = range(draws_from, len(nets))
    if len(draws) < 2:
        return 0
    best, best_utility = 0, float("-inf")
    for i, net in enumerate(nets):
        value = utility(net, [nets[j] for j in draws if j != i], cost)
        if value > best_utility + 1e-12:
            best, best_utility = i, value
    return best


def select(passes: Sequence[dict], cost: float) -> dict:
    """{item_id: the `choose`n candidate} from the passes [greedy, draw 0, ...] of
    `bapjax.training.decode.candidates`."""
    chosen = {}
    for item_id in passes[0]:
        candidates = [one[item_id] for one in passes]
        chosen[item_id] = candidates[choose(candidates, cost)]
    return chosen
