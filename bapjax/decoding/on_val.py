"""A run's decoding chosen on val: the STOP rule, then the draws' selection at a cost or one rule per
kind of board (`choose_decoding`, whose result is what the run writes to decode.json), and the
rules of an ensemble's pool scored on val (`choose_combination`; `fixed_combination` for rules
fixed beforehand, `pooled_choice` over several ensembles' val). The highest val micro Overall
(fairer) F1 wins; ties go to the first tried.
"""

from __future__ import annotations

import sys
from typing import Sequence

import numpy as np

from bapjax.decoding import decode, mbr
from bapjax.decoding.settings import DecodeSettings
from bapjax.evaluation import evaluator

CHOICE_FIELDS = ("stop_rule", "stop_threshold")  # what decode.json always keeps of the chosen decoding
SAMPLING_FIELDS = ("samples", "temperature", "rules")  # and those of these a choice with draws has
COSTS = (0.075, 0.1, 0.125, 0.15, 0.2)  # "select"'s costs per action tried on val by default
THRESHOLDS = (0.1, 0.125, 0.15, 0.175, 0.2, 0.25)  # "vote"'s shares of the draws tried on val by default


def choose_decoding(decoder, params, val_items, eval_config, chosen_on: str = "val",
                    log_fn=lambda message, *args: print(message % args, file=sys.stderr)) -> dict:
    """The decoding chosen on val, as decode.json keeps it (`bapjax.training.run_eval.write_decode_choice`;
    read back by `DecodeSettings.chosen`), the candidates decoded by `decoder.candidates`
    (`bapjax.decoding.runs.Evaluator`): "argmax", "mass" at each of `config.eval.stop_thresholds` and,
    for a model with a length head, "length" at each of `config.eval.length_quantiles`; then,
    with `config.eval.samples` > 0, the winning rule with minimum-Bayes-risk selection among
    the greedy decoding and that many draws (`bapjax.decoding.mbr`) at each of
    `config.eval.temperatures` (drawn once per temperature) and each of `config.eval.costs`;
    then, with `config.eval.vote_samples` > 0, the winning rule with that many draws at
    `config.eval.vote_temperature`, combined by one rule for the items on an empty board and one
    for the others ("rules": "select" at each of `COSTS`, "vote" at each of
    `THRESHOLDS`; `choose_combination` over the run as its one member), or
    by the two rules `config.eval.vote_rules` fixes (only scored).
    The highest val micro Overall (fairer) F1 wins (ties: the first tried, greedy before
    sampled, one rule for every item before a rule per board). `chosen_on` names the items
    ("val": every source's val; "mc:val": one source's); "candidates" lists every decoding
    tried with its val F1."""
    base = DecodeSettings.from_eval_config(eval_config)
    rules = [("argmax", 0.5)] + [("mass", float(t)) for t in eval_config.stop_thresholds]
    if getattr(decoder.model, "length_head", False):
        rules += [("length", float(q)) for q in eval_config.length_quantiles]
    tried = _Tried(val_items, log_fn)
    for rule, threshold in rules:
        settings = base.replace(stop_rule=rule, stop_threshold=threshold)
        tried.score(settings, decoder.candidates(params, val_items, settings)[0])
    greedy_best = max(tried.rows, key=lambda r: r["val_overall_micro_f1"])
    greedy = base.replace(stop_rule=greedy_best["stop_rule"], stop_threshold=greedy_best["stop_threshold"])
    for temperature in (eval_config.temperatures if int(eval_config.samples) else ()):
        sampled = greedy.replace(samples=int(eval_config.samples), temperature=float(temperature))
        drawn = decoder.candidates(params, val_items, sampled)
        for cost in eval_config.costs:
            settings = sampled.at_cost(float(cost))
            tried.score(settings, decode.select(drawn, settings, val_items))
    if int(eval_config.vote_samples):
        voted = greedy.replace(samples=int(eval_config.vote_samples), temperature=float(eval_config.vote_temperature))
        _vote_rows(tried, voted, decoder.candidates(params, val_items, voted), eval_config.vote_rules)
    best = max(tried.rows, key=lambda r: r["val_overall_micro_f1"])  # ties: the first
    fields = CHOICE_FIELDS + (tuple(key for key in SAMPLING_FIELDS if key in best) if best["samples"] else ())
    return {**{key: best[key] for key in fields}, "sampler": base.sampler, "chosen_on": chosen_on,
            "val_items": len(val_items), "candidates": tried.rows}


class _Tried:
    """The decodings `choose_decoding` tried on val, in order: each row its settings and scores
    (`_val_row`), logged as it is added."""

    def __init__(self, val_items, log_fn):
        self.val_items, self.log_fn, self.rows = val_items, log_fn, []

    def add(self, settings: DecodeSettings, headline: dict) -> None:
        self.rows.append(_val_row(settings, headline))
        self.log_fn("val with %s: micro Overall F1 %.4f, %.2f net actions per item", settings.describe(),
                    self.rows[-1]["val_overall_micro_f1"], self.rows[-1]["mean_predicted_net_actions"])

    def score(self, settings: DecodeSettings, predictions: dict) -> None:
        self.add(settings, evaluator.headline(evaluator.evaluate_predictions(
            self.val_items, predictions, drop_infeasible=False)))


def _vote_rows(tried: _Tried, voted: DecodeSettings, drawn: list[dict], vote_rules: str) -> None:
    """The vote's rows: with `vote_rules` "" each rule of `COSTS` and `THRESHOLDS` for every item
    (`choose_combination` over the run as its one member), then the pair of one rule per kind of
    board chosen from them; else only the pair `vote_rules` fixes, scored."""
    pair = mbr.run_vote_rules(vote_rules)  # fixed beforehand, or None: chosen here
    if pair is None:
        chosen = choose_combination(mbr.pool([drawn]), tried.val_items, COSTS, THRESHOLDS)
        for row in chosen["candidates"]:  # one rule for every item, scored by choose_combination
            tried.add(voted.replace(rules=((row["rule"], row["value"]),) * len(mbr.BOARDS)), row)
        pair = {kind: (chosen[kind]["rule"], chosen[kind]["value"]) for kind in mbr.BOARDS}
    settings = voted.replace(rules=tuple(pair[kind] for kind in mbr.BOARDS))
    tried.score(settings, decode.select(drawn, settings, tried.val_items))


def _val_row(settings: DecodeSettings, headline: dict) -> dict:
    """A decoding tried on val, as decode.json's "candidates" list it: its settings and scores
    (`headline`: `evaluator.headline` of its val report)."""
    sampled = {"temperature": settings.temperature, "rules": settings.rules_json()} if settings.samples else {}
    return {"stop_rule": settings.stop_rule, "stop_threshold": settings.stop_threshold,
            "samples": settings.samples, **sampled,
            "val_overall_micro_f1": headline["micro_overall"],
            "mean_predicted_net_actions": headline["mean_predicted_net_actions"]}


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


def choose_combination(pooled: mbr.Pool, items: list, costs: Sequence[float], thresholds: Sequence[float]) -> dict:
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
                         **score(items, mbr.combine(pooled, rule, float(value), items))})
    best = pooled_choice([{"candidates": rows}])
    return {kind: best[kind] for kind in ("EB", "NEB", "micro_overall")} | {"candidates": rows}


def fixed_combination(pooled: mbr.Pool | None, items: list, rules: dict) -> dict:
    """What `choose_combination` returns, for rules fixed beforehand ({"EB": (rule, value), "NEB":
    (rule, value)}, e.g. the best on the pooled val items of earlier ensembles,
    `pooled_choice`) instead of chosen on these `items`: each scored on them
    ("candidates"), and the pair's micro F1 ("micro_overall"); "fixed": True. With `pooled` None (no
    val split decoded) the rules alone: no candidates, "micro_overall" None."""
    fixed = {kind: {"rule": rules[kind][0], "value": float(rules[kind][1])} for kind in mbr.BOARDS}
    if pooled is None:
        return {**fixed, "micro_overall": None, "candidates": [], "fixed": True}
    rows = [{**fixed[kind], **score(items, mbr.combine(pooled, fixed[kind]["rule"], fixed[kind]["value"], items))}
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
    keys = [{(row["rule"], row["value"]): row["counts"] for row in one["candidates"]} for one in choices]
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
