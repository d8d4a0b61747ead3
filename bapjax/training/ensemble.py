"""Ensembles: several trained runs (members) decoded together, one prediction per item made from
all their passes, the way of combining them chosen on val.

Each member decodes as it does alone (`bapjax.training.run_eval.RunDecoder`: its checkpoint, the
STOP rule and sampling temperature of its decode.json), giving its greedy pass and `samples`
draws (`bapjax.training.decode.candidates`). The passes of all members are pooled per item
(`pool`: the members' greedy passes first, then their draws, and each member's own decoding,
`member_alone`) and combined by one of three rules. The first two are the minimum-Bayes-risk
choice of `bapjax.training.mbr` under one utility, the number of net actions a prediction shares
with the draws on average less a cost per predicted action, so the sum over its net actions a of
(share of draws predicting a) - cost:

* "select" at a cost: the pass with the highest utility (`mbr.choose`), a sequence one member
  decoded, so always buildable;
* "vote" at a threshold: the net actions predicted by more than that share of the draws
  (`mbr.vote`): the set of highest utility when any set may be predicted and the cost is the
  threshold. The set is built from the item's start structure, removals first (top down), then
  placements bottom up; a voted block that nothing in the voted structure supports is left out
  (`mbr.buildable_order`), so every prediction is buildable.

The third weighs members, not draws: "members" at m keeps the net actions that at least m of the
members' own decodings predict (`mbr.vote` among them, built the same way).

With fewer than two draws in the pool (greedy-only members) the greedy passes are the draws.
`choose_combination` scores every rule on val items and keeps the best for the items on an empty
board and the best for the others (ties: the first tried, "select", "vote", "members", lower
values first); `combine_chosen` applies them. The command is
`python -m bapjax.ensemble`. A one-member ensemble is a run decoded with a vote over its own
draws, which a run can choose on val itself (`config.eval.vote_samples`,
`bapjax.training.run_eval.Evaluator.choose_decoding`, by `choose_combination`).
"""

from __future__ import annotations

import dataclasses
from typing import Sequence

import numpy as np

from bapjax.evaluation import evaluator
from bapjax.training import decode, mbr
from bapjax.world import grid as G

RULES = mbr.RULES + ("members",)
COSTS = (0.075, 0.1, 0.125, 0.15, 0.2)  # "select"'s costs per action tried on val by default
THRESHOLDS = (0.1, 0.125, 0.15, 0.175, 0.2, 0.25)  # "vote"'s shares of the draws tried on val by default


@dataclasses.dataclass(frozen=True)
class Pool:
    """The passes of an ensemble over a set of items: `passes` [{item_id: [Action]}], the members'
    greedy passes first and their draws from index `draws_from` on; `alone`, each member's own
    decoding of the items (`member_alone`), where known."""

    passes: list
    draws_from: int
    alone: list = dataclasses.field(default_factory=list)


def pool(member_passes: Sequence[Sequence[dict]], alone: Sequence[dict] = ()) -> Pool:
    """A `Pool` from each member's [greedy, draw 0, ...] (`decode.candidates`) and, optionally,
    each member's own decoding (`member_alone`)."""
    greedy = [passes[0] for passes in member_passes]
    draws = [one for passes in member_passes for one in passes[1:]]
    draws_from = len(greedy) if len(draws) >= 2 else 0
    return Pool(greedy + draws, draws_from, list(alone))


def check_rule(rule: str, value: float, members: int) -> None:
    """The one check of a rule (`RULES`) and its value: a cost or share in [0, 1)
    (`mbr.check_rule`), or for "members" m against the `members` own decodings there are to
    count: ValueError."""
    if rule not in RULES:
        raise ValueError(f"the ensemble rule must be one of {', '.join(RULES)}, got {rule!r}")
    if rule != "members":
        mbr.check_rule(rule, value)
    elif not 1 <= value <= members:
        raise ValueError(f"the rule 'members' needs 1 <= m <= {members} (the members' own decodings "
                         f"in the pool), got {value!r}")


def parse_rules(texts: Sequence[str], members: int) -> dict:
    """Two rules written RULE:VALUE, for the items on an empty board and then for the others, as
    {"EB": (rule, value), "NEB": (rule, value)}, each checked (`check_rule`; a cost or share in
    [0, 1)); ValueError naming the text at fault."""
    if len(texts) != len(mbr.BOARDS):
        raise ValueError(f"{','.join(texts)}: expected two rules, RULE:VALUE for the items on an empty board, then "
                         "for the others (e.g. select:0.075,vote:0.15)")
    rules = {}
    for kind, text in zip(mbr.BOARDS, texts):
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
        if part.partition(":")[0] not in mbr.RULES:
            raise ValueError(f"{part}: a run's own vote takes {' or '.join(mbr.RULES)} (the rule 'members' "
                             "counts an ensemble's runs: python -m bapjax.ensemble --rules)")
    return parse_rules(texts, members=0)


def combine(pooled: Pool, rule: str, value: float, items: Sequence) -> dict[str, list[G.Action]]:
    """Predictions {item_id: [Action]} of `items` (BapItems) from the pooled passes by `rule`
    ("select" at cost `value`, "vote" at threshold `value`, "members" by at least `value` members;
    votes are built from each item's `prev_structure`)."""
    check_rule(rule, value, len(pooled.alone))
    chosen = {}
    for item in items:
        if rule == "members":  # more than (m - 1/2) / n of n voters: at least m of them
            voters = [one[item.item_id] for one in pooled.alone]
            chosen[item.item_id] = mbr.vote(voters, (value - 0.5) / len(voters), item.prev_structure)
        else:
            chosen[item.item_id] = mbr.combine([one[item.item_id] for one in pooled.passes], rule, value,
                                               item.prev_structure, draws_from=pooled.draws_from)
    return chosen


def member_passes(decoder, items: list, samples: int | None = None, temperature: float | None = None,
                  progress: bool = False, sampler: str | None = None, first_draw: int = 0) -> list[dict]:
    """[greedy, draw f, ..., draw f+K-1] of `items` by one member (a `RunDecoder`), decoded with its
    own settings; `samples` (K), `temperature` and `sampler` (when not None) replace its number of
    draws, their temperature and how they pick actions; `first_draw` (f) picks another set of draws
    (draw k is the same whatever the others, `decode.candidates`). A member that chose greedy
    decoding on val has no temperature of its own: its draws take the first of its
    config.eval.temperatures."""
    if temperature is None and decoder.settings.samples == 0:
        temperature = float(decoder.run.config.eval.temperatures[0])
    settings = decoder.settings.replace(samples=samples, temperature=temperature, sampler=sampler)
    run = decoder.run
    return decode.candidates(run.model, decoder.params, items, run.vocab, decoder.feature_config, settings,
                             decode_fn=decoder.decode_fn_for(settings), mesh=decoder.mesh, progress=progress,
                             first_draw=first_draw)


def member_alone(decoder, passes: list[dict], items: list) -> dict[str, list[G.Action]]:
    """A member's predictions of `items` from its `member_passes`, as it decodes alone
    (`decode.select` at its own settings; draw k is the same whatever the number of draws, so this
    is exactly its own decoding when the passes hold at least its number of draws, at its
    temperature)."""
    return decode.select(passes, decoder.settings, items)


def score(items: list, predictions: dict) -> dict:
    """The scores a combination is chosen by and reported with (v2 evaluator), and its fairer
    counts [true positives, predicted, reference net actions] per `BOARDS` kind ("counts")."""
    report, scores, _ = evaluator.evaluate_items(items, predictions, drop_infeasible=False)
    kinds = np.array([mbr.board(item) for item in items])
    counts = {kind: [int(np.sum(column[kinds == kind])) for column in (scores.fair_tp, scores.n_pred, scores.n_ref)]
              for kind in mbr.BOARDS}
    return {**evaluator.headline(report), "counts": counts}


def micro_f1(counts: Sequence[Sequence[int]]) -> float:
    """Micro F1 of summed fairer counts: 2 TP / (predicted + reference)."""
    tp, predicted, reference = (sum(c[i] for c in counts) for i in range(3))
    return 2 * tp / (predicted + reference) if predicted + reference else 0.0


def choose_combination(pooled: Pool, items: list, costs: Sequence[float], thresholds: Sequence[float]) -> dict:
    """The rules of highest micro Overall F1 on `items` (val): "select" at each of `costs`, "vote"
    at each of `thresholds` and, with two or more members' own decodings in the pool, "members"
    at each m from 1 to their number, each scored once; then one rule for the items on an empty
    board and one for the others (`BOARDS`; a vote can mix several members' placements of one
    shape on an empty board), the pair of highest micro F1 of their summed counts (ties: the
    first, by the order tried). {"EB": {"rule", "value"}, "NEB": {...}, "micro_overall": the
    pair's val F1, "candidates": every rule tried with its scores}."""
    rows = []
    members = range(1, len(pooled.alone) + 1) if len(pooled.alone) >= 2 else ()
    for rule, values in (("select", costs), ("vote", thresholds), ("members", members)):
        for value in values:
            rows.append({"rule": rule, "value": float(value),
                         **score(items, combine(pooled, rule, float(value), items))})
    best = pooled_choice([{"candidates": rows}])
    return {kind: best[kind] for kind in ("EB", "NEB", "micro_overall")} | {"candidates": rows}


def fixed_combination(pooled: Pool | None, items: list, rules: dict) -> dict:
    """What `choose_combination` returns, for rules fixed beforehand ({"EB": (rule, value), "NEB":
    (rule, value)}, e.g. the best on the pooled val items of earlier ensembles,
    `pooled_choice`) instead of chosen on these `items`: each scored on them
    ("candidates"), and the pair's micro F1 ("micro_overall"); "fixed": True. With `pooled` None (no
    val split decoded) the rules alone: no candidates, "micro_overall" None."""
    fixed = {kind: {"rule": rules[kind][0], "value": float(rules[kind][1])} for kind in mbr.BOARDS}
    if pooled is None:
        return {**fixed, "micro_overall": None, "candidates": [], "fixed": True}
    rows = [{**fixed[kind], **score(items, combine(pooled, fixed[kind]["rule"], fixed[kind]["value"], items))}
            for kind in mbr.BOARDS]
    return {**fixed, "micro_overall": micro_f1([rows[0]["counts"]["EB"], rows[1]["counts"]["NEB"]]),
            "candidates": rows, "fixed": True}


def pooled_choice(choices: Sequence[dict]) -> dict:
    """The rules of highest micro Overall F1 over the summed val counts of several ensembles'
    choices (their `choose_combination` dicts, every rule of each scored on its own val split):
    one rule for the items on an empty board and one for the others, as `choose_combination`
    picks them for one ensemble (`choose_combination` is this over one ensemble's rows), from the
    rules every choice tried (ValueError: none). {"EB", "NEB", "micro_overall", "ranking": [(micro
    F1, EB rule, NEB rule), ...] best first}."""
    keys = [{(row["rule"], row["value"]): row["counts"] for row in choice["candidates"]} for choice in choices]
    common = [key for key in keys[0] if all(key in other for other in keys[1:])]
    if not common:
        raise ValueError("the choices share no rule they all scored")
    tried, best = [], None
    for eb in common:
        for neb in common:
            tried.append((micro_f1([c for k in keys for c in (k[eb]["EB"], k[neb]["NEB"])]), eb, neb))
            if best is None or tried[-1][0] > best[0] + 1e-12:  # ties: the first tried
                best = tried[-1]
    return {"EB": {"rule": best[1][0], "value": best[1][1]}, "NEB": {"rule": best[2][0], "value": best[2][1]},
            "micro_overall": best[0], "ranking": sorted(tried, key=lambda row: -row[0])}


def combine_chosen(pooled: Pool, choice: dict, items: list) -> dict[str, list[G.Action]]:
    """Predictions of `items` by the rules `choose_combination` chose for each kind of board."""
    predictions = {}
    for kind in mbr.BOARDS:
        chosen = [item for item in items if mbr.board(item) == kind]
        if chosen:
            predictions.update(combine(pooled, choice[kind]["rule"], choice[kind]["value"], chosen))
    return predictions
