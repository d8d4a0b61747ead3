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

The same utility gives a second rule, "vote" at a threshold (`vote`): the set of net actions
predicted by more than that share of the draws, the set of highest utility when any set may be
predicted and the cost is the threshold. It is built from the item's start structure
(`buildable_order`), so what is predicted stays buildable. `combine` applies either rule to one
item's candidates; a decoding may use one rule for the items that start on an empty board and
another for the rest (`BOARDS`, `board`).

This module is only the selection, plain Python over net action sets (`choose`, its pair-by-pair
reference `choose_pairwise`, `select`, `vote`, `combine`); the K + 1 decoding passes are
`bapjax.training.decode.candidates`, and `decode.predict` decodes with them when a run's settings
have draws. A run tries them on val after choosing its STOP rule
(`bapjax.training.run_eval.Evaluator.choose_decoding`) and keeps one only if it scores higher there.
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
    (quadratic in the draws; the tests hold `choose` to it)."""
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


RULES = ("select", "vote")  # how one item's prediction is made from its candidates (`combine`)
BOARDS = ("EB", "NEB")  # items that start on an empty board, and the others: each kind may take its own rule


def board(item) -> str:
    """The kind of board a BapItem starts on: "EB" (empty) or "NEB"."""
    return "EB" if item.is_empty_board else "NEB"


def buildable_order(start, net: frozenset) -> list[G.Action]:
    """A net action set as a sequence built from the `start` structure: removals from the top
    down, then placements from the bottom up (by cell, then color), each pass over the placements
    left doing every one that is feasible by then, until a pass does none; what no order makes
    feasible (a block with nothing under or beside it in the voted structure, the 21st block of a
    color) is left out."""
    walk = G.StructureWalk(start)
    for action in sorted((a for a in net if a.type == G.REMOVE), key=lambda a: (-a.y, a.x, a.z, a.color)):
        walk.step(action)
    pending = sorted((a for a in net if a.type == G.PLACE), key=lambda a: (a.y, a.x, a.z, a.color))
    while pending:
        left = [action for action in pending if not walk.step(action)]
        if len(left) == len(pending):
            break
        pending = left
    return list(walk.applied)


def vote(voters: Sequence[Sequence[G.Action]], threshold: float, start=()) -> list[G.Action]:
    """The net actions predicted by more than `threshold` of the `voters` (action sequences), at
    most one action of each type per cell (the more frequent; ties: the lower color), as a sequence
    from the `start` structure (`buildable_order`). A threshold of 0.5 or more never keeps two
    placements in one cell; below it the more frequent of two conflicting actions is kept."""
    counts: dict = {}
    for actions in voters:
        for action in G.net_actions(actions):
            counts[action] = counts.get(action, 0) + 1
    kept: dict = {}
    for action, count in counts.items():
        if count / len(voters) <= threshold:
            continue
        key = (action.type, action.x, action.y, action.z)
        if key not in kept or (count, -action.color) > (counts[kept[key]], -kept[key].color):
            kept[key] = action
    return buildable_order(start, frozenset(kept.values()))


def check_rule(rule: str, value: float) -> None:
    """The one check of a rule of `RULES` and its value (a cost or share of the draws in [0, 1)):
    ValueError."""
    if rule not in RULES:
        raise ValueError(f"the rule must be one of {', '.join(RULES)}, got {rule!r}")
    if not 0.0 <= float(value) < 1.0:
        raise ValueError(f"the rule {rule}'s cost or share must be in [0, 1), got {value!r}")


def combine(candidates: Sequence[Sequence[G.Action]], rule: str, value: float, start=(),
            draws_from: int = 1) -> list[G.Action]:
    """One item's prediction from its `candidates` (the greedy passes first, the draws from
    `draws_from` on) by `rule`: "select" at cost `value` (`choose`), or "vote" at threshold
    `value` among the draws (every candidate when there are fewer than two draws), built from the
    item's `start` structure."""
    if rule == "select":
        return candidates[choose(candidates, value, draws_from=draws_from)]
    draws = candidates[draws_from:]
    return vote(draws if len(draws) >= 2 else candidates, value, start)
