"""Minimum-Bayes-risk decoding: of an item's greedy decoding and K sequences drawn from the model,
keep the one with the highest expected gain in micro F1 against the draws.

The BAP score is a micro F1 over net action sets, 2 TP / (P + R) summed over items, and a greedy
decoder commits to the single most likely action at each step, so where the model spreads its
probability over several starts or lengths the greedy sequence can sit far from what the model
believes on the whole (and it stops early: `bapjax.decoding.kernel`). The draws
(`bapjax.decoding.decode.candidates`: the slot pool with `sample_keys`, STOP drawn with the rest,
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
(`buildable_order`), so what is predicted stays buildable. `combine_item` applies either rule to one
item's candidates; a decoding may use one rule for the items that start on an empty board and
another for the rest (`BOARDS`, `board`).

An ensemble's pool (`Pool`: several runs' greedy passes, then their draws, and each run's own
decoding) takes a third rule, "members" at m: the net actions that at least m of the members' own
decodings predict (`vote` among them, built the same way). `combine` applies a rule to a pool's
items, `combine_chosen` one rule per kind of board; a rule pair is written RULE:VALUE,RULE:VALUE
(`parse_rules`, `run_vote_rules`). With fewer than two draws in a pool its greedy passes are the draws.

This module is plain Python over net action sets (`choose`, its pair-by-pair reference
`choose_pairwise`, `vote`, `combine_item`); the K + 1 decoding passes are
`bapjax.decoding.decode.candidates`, and `decode.predict` decodes with them when a run's settings
have draws. The rules are chosen on val in `bapjax.decoding.on_val`.
"""

from __future__ import annotations

import collections
import dataclasses
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


RULES = ("select", "vote")  # how one item's prediction is made from its candidates (`combine_item`)
POOL_RULES = RULES + ("members",)  # and from an ensemble's pool, where "members" counts its runs' own decodings
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


def combine_item(candidates: Sequence[Sequence[G.Action]], rule: str, value: float, start=(),
                 draws_from: int = 1) -> list[G.Action]:
    """One item's prediction from its `candidates` (the greedy passes first, the draws from
    `draws_from` on) by `rule`: "select" at cost `value` (`choose`), or "vote" at threshold
    `value` among the draws (every candidate when there are fewer than two draws), built from the
    item's `start` structure."""
    if rule == "select":
        return candidates[choose(candidates, value, draws_from=draws_from)]
    draws = candidates[draws_from:]
    return vote(draws if len(draws) >= 2 else candidates, value, start)


def check_rule(rule: str, value: float, members: int | None = None) -> None:
    """The one check of a rule and its value: of `RULES` (`members` None: a run's own draws) a cost
    or share of the draws in [0, 1); of `POOL_RULES` (an ensemble of `members` runs) also
    "members" at m, 1 <= m <= `members` (the members' own decodings there are to count): ValueError."""
    allowed = RULES if members is None else POOL_RULES
    if rule not in allowed:
        raise ValueError(f"the {'' if members is None else 'ensemble '}rule must be one of {', '.join(allowed)}, "
                         f"got {rule!r}")
    if rule == "members":
        if not 1 <= value <= members:
            raise ValueError(f"the rule 'members' needs 1 <= m <= {members} (the members' own decodings "
                             f"in the pool), got {value!r}")
    elif not 0.0 <= float(value) < 1.0:
        raise ValueError(f"the rule {rule}'s cost or share must be in [0, 1), got {value!r}")


@dataclasses.dataclass(frozen=True)
class Pool:
    """The passes of an ensemble over a set of items: `passes` [{item_id: [Action]}], the members'
    greedy passes first and their draws from index `draws_from` on; `alone`, each member's own
    decoding of the items (`bapjax.decoding.runs.RunDecoder.alone`), where known."""

    passes: list
    draws_from: int
    alone: list = dataclasses.field(default_factory=list)


def pool(member_passes: Sequence[Sequence[dict]], alone: Sequence[dict] = ()) -> Pool:
    """A `Pool` from each member's [greedy, draw 0, ...] (`bapjax.decoding.decode.candidates`) and, optionally,
    each member's own decoding (`bapjax.decoding.runs.RunDecoder.alone`)."""
    greedy = [passes[0] for passes in member_passes]
    draws = [one for passes in member_passes for one in passes[1:]]
    draws_from = len(greedy) if len(draws) >= 2 else 0
    return Pool(greedy + draws, draws_from, list(alone))


def parse_rules(texts: Sequence[str], members: int | None) -> dict:
    """Two rules written RULE:VALUE, for the items on an empty board and then for the others, as
    {"EB": (rule, value), "NEB": (rule, value)}, each checked (`check_rule` against `members` runs;
    None: a run's own draws); ValueError naming the text at fault."""
    if len(texts) != len(BOARDS):
        raise ValueError(f"{','.join(texts)}: expected two rules, RULE:VALUE for the items on an empty board, then "
                         "for the others (e.g. select:0.075,vote:0.15)")
    rules = {}
    for kind, text in zip(BOARDS, texts):
        rule, _, value = text.partition(":")
        try:
            number = float(value)
        except ValueError:
            raise ValueError(f"{text}: expected RULE:VALUE with a number, e.g. vote:0.15") from None
        try:
            check_rule(rule, number, members)
        except ValueError as err:
            raise ValueError(f"{text}: {err}") from None
        rules[kind] = (rule, number)
    return rules


def run_vote_rules(text: str) -> dict | None:
    """`config.eval.vote_rules`: "" (None: a run chooses its vote's two rules on val) or two rules
    fixed beforehand written as `--rules` takes them, "RULE:VALUE,RULE:VALUE" (`parse_rules`), each
    "select" or "vote": a run's own vote pools one run's draws, with no members to count.
    ValueError naming the text at fault."""
    if not text.strip():
        return None
    texts = [part.strip() for part in text.split(",")]
    for part in texts:
        if part.partition(":")[0] not in RULES:
            raise ValueError(f"{part}: a run's own vote takes {' or '.join(RULES)} (the rule 'members' "
                             "counts an ensemble's runs: python -m bapjax.ensemble --rules)")
    return parse_rules(texts, members=None)


def combine(pooled: Pool, rule: str, value: float, items: Sequence) -> dict[str, list[G.Action]]:
    """Predictions {item_id: [Action]} of `items` (BapItems) from the pooled passes by `rule`
    ("select" at cost `value`, "vote" at threshold `value`, "members" by at least `value` members;
    votes are built from each item's `prev_structure`)."""
    check_rule(rule, value, len(pooled.alone))
    chosen = {}
    for item in items:
        if rule == "members":  # more than (m - 1/2) / n of n voters: at least m of them
            voters = [one[item.item_id] for one in pooled.alone]
            chosen[item.item_id] = vote(voters, (value - 0.5) / len(voters), item.prev_structure)
        else:
            chosen[item.item_id] = combine_item([one[item.item_id] for one in pooled.passes], rule, value,
                                                item.prev_structure, draws_from=pooled.draws_from)
    return chosen


def combine_chosen(pooled: Pool, choice: dict, items: list) -> dict[str, list[G.Action]]:
    """Predictions of `items` by the rules `choose_combination` chose for each kind of board."""
    predictions = {}
    for kind in BOARDS:
        chosen = [item for item in items if board(item) == kind]
        if chosen:
            predictions.update(combine(pooled, choice[kind]["rule"], choice[kind]["value"], chosen))
    return predictions
