"""Minimum-Bayes-risk decoding: of an item's greedy decoding and K sequences drawn from the model,
keep the one with the highest expected gain in micro F1 against the draws.

The BAP score is a micro F1 over net action sets, 2 TP / (P + R) summed over items, and a greedy
decoder commits to the single most likely action at each step, so where the model spreads its
probability over several starts or lengths the greedy sequence can sit far from what the model
believes on the whole (and it stops early: `bapjax.training.decode`). The draws
(`decode.decode_pool` with `sample_keys`, STOP drawn with the rest, at the settings' temperature)
stand for the model's distribution over sequences. Micro F1 F rises with an item's prediction P
when its true positives grow by more than F / 2 per predicted action, so each candidate's utility
is linear (`utility`): its mean number of net actions shared with the draws other than itself,
minus `cost` per net action it predicts. The draws agree with each other far more than with the
references (their mutual F1 is about twice the model's val F1), so `cost` is chosen on val
(`config.eval.mbr_costs`) rather than set to half their F1. Ties go to the earliest candidate
(the greedy one first). Every candidate is a sequence the decoder produced under the feasibility
mask, so what is kept is always buildable.

The selection is plain Python over sets (`choose`); decoding is K + 1 passes of the jitted pool
(`candidates`). A run tries it on val after choosing its STOP rule
(`bapjax.training.run_eval.Evaluator.tune_stop_rule`) and keeps it in decode.json only if it
scores higher there.
"""

from __future__ import annotations

from typing import Sequence

from bapjax.training import decode
from bapjax.world import grid as G


def utility(net: frozenset, draws: Sequence[frozenset], cost: float) -> float:
    """Mean |net & draw| over `draws` minus `cost` * |net| (net action sets)."""
    return sum(len(net & draw) for draw in draws) / len(draws) - cost * len(net)


def choose(candidates: Sequence[Sequence[G.Action]], cost: float, draws_from: int = 1) -> int:
    """The index of the candidate with the highest `utility` of its net actions against the draws
    `candidates[draws_from:]` other than itself (ties: the lowest index). With fewer than two
    draws there is nothing to weigh: index 0."""
    nets = [G.net_actions(c) for c in candidates]
    draws = list(range(draws_from, len(nets)))
    if len(draws) < 2:
        return 0
    best, best_utility = 0, float("-inf")
    for i, net in enumerate(nets):
        value = utility(net, [nets[j] for j in draws if j != i], cost)
        if value > best_utility + 1e-12:
            best, best_utility = i, value
    return best


def candidates(model, params, items: list, vocab, feature_config, settings: decode.DecodeSettings, *,
               decode_fn=None, mesh=None, features=None, progress: bool = False) -> list[dict]:
    """[greedy, draw 0, ..., draw K-1]: each {item_id: [Action]}; the greedy decoding with the
    settings' STOP rule, draw k with the keys of `decode.sample_keys(k, item ids)` at
    `settings.temperature` (K = `settings.samples`), so every item's draws are reproducible and the
    same whichever items are decoded with it."""
    from bapjax.data import input_pipeline

    decode_fn = decode_fn or settings.decode_fn(model, mesh)
    if features is None:
        features = input_pipeline.featurize_items(items, vocab, feature_config)
    passes = []
    for sample in [None] + list(range(settings.samples)):
        passes.append(decode.predict_items(model, params, items, vocab, feature_config, settings.slots,
                                           settings.max_actions, decode_fn=decode_fn, features=features, mesh=mesh,
                                           sample=sample, progress=progress and sample is None))
        if progress and sample is not None:
            print(f"decode: draw {sample + 1}/{settings.samples} of {len(items)} items", flush=True)
    return passes


def select(passes: Sequence[dict], cost: float) -> dict:
    """{item_id: the `choose`n candidate} from `candidates`' passes (greedy first)."""
    chosen = {}
    for item_id in passes[0]:
        candidates = [one[item_id] for one in passes]
        chosen[item_id] = candidates[choose(candidates, cost)]
    return chosen


def predict_items(model, params, items: list, vocab, feature_config, settings: decode.DecodeSettings, *,
                  decode_fn=None, mesh=None, features=None, progress: bool = False) -> dict[str, list[G.Action]]:
    """Predictions {item_id: [Action]} decoded with `settings`: greedy (`decode.predict_items`)
    when `settings.samples` is 0, else the `select`ion at `settings.cost` among `candidates`."""
    passes = candidates(model, params, items, vocab, feature_config, settings, decode_fn=decode_fn, mesh=mesh,
                        features=features, progress=progress)
    return passes[0] if settings.samples == 0 else select(passes, settings.cost)
