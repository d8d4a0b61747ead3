"""How long a training run has left: the ETA of its progress line and of its stop notice.

A run's time after its first steps is its training steps, the evals and checkpoint saves between
them, and the final evaluation (the decoding chosen on val, then each test split decoded).
`TimeLeft` adds up what is left of each:

- the steps left, at the step rate `cli.Progress` measures (compilation, evals and saves left out);
- the evals and saves left (an eval every `eval_every` steps and at the last step, a save every
  `checkpoint_every` steps and at the last), each at the duration the last one took less its
  compilation (a later one reuses the programs), or, before the first, at an estimate;
- the final evaluation's decoding passes (`FinalPasses`) at the greedy decoding time per item an
  eval measured, or, before any eval decoded, at an estimate. The test splits count greedy: their
  draws are decoded only if the draws win on val, which the run learns at its end, so the
  progress line gives their time apart (`if_draws_win`).

An estimate comes from the measured time of a training item (a step's seconds over its batch):
a val-loss item costs `LOSS_ITEM` of it (the forward pass; a training step adds the backward
pass), a greedy decoding `GREEDY_ITEM`, one more draw of an item `DRAW_ITEM` (the draws of an
item are decoded together, its text and start world encoded once), a save `SAVE_SECONDS`. On the
2-core host `python -m benchmarks.bench_train --config configs/cpu_experiment.py:agg --fixed_length
5 --decode_items 200` trained 82.1 items/s at batch 32 and decoded 269.8 items/s (0.30); a
`configs/cpu_experiment.py:cl_la` run training at 98 items/s decoded MDC val greedily at 0.29 and
its final evaluation's 64 draws of 1,331 val and 4,886 test items at 0.10 per draw (431 s in all;
the estimate 441 s); the quickstart's model decoded its val items at 0.33. Decoding and
evaluation that compile for the first time (a fresh cache) take longer than the estimate:
compilation is not counted.
"""

from __future__ import annotations

import dataclasses

LOSS_ITEM = 1 / 3
GREEDY_ITEM = 0.3
DRAW_ITEM = 0.1
SAVE_SECONDS = 2.0  # an Orbax save of the CPU models' state on the 2-core host: 1-3 s


def steps_at(first: int, last: int, every: int, final: int) -> int:
    """How many of the steps first..last (both included) are multiples of `every` or the run's
    `final` step: the evals (or saves) they hold."""
    if last < first:
        return 0
    count = last // every - (first - 1) // every if every > 0 else 0
    return count + (first <= final <= last and (every <= 0 or final % every != 0))


@dataclasses.dataclass(frozen=True)
class FinalPasses:
    """The final evaluation's decoding, in item passes: `greedy` (one item decoded greedily),
    `draws` (one more draw of an item whose draws are decoded together) and `test_draws`, the
    draws of the test splits, decoded only if the draws win on val."""

    greedy: int = 0
    draws: int = 0
    test_draws: int = 0

    @classmethod
    def of(cls, eval_config, choice_val_items: int, test_items: int, length_head: bool = False) -> "FinalPasses":
        """What `loop.final_evaluation` decodes under `eval_config` (config.eval):
        `on_val.choose_decoding` on `choice_val_items` items (one greedy pass per STOP rule
        tried, each temperature's greedy pass and draws, the vote's greedy pass and draws; nothing
        when there is no STOP threshold or no val item), then the `test_items` of the final splits
        greedily, and, if the draws win on val, their draws (the vote's where the config has one,
        else the selection's)."""
        greedy = draws = 0
        if len(eval_config.stop_thresholds) and choice_val_items:
            rules = 1 + len(eval_config.stop_thresholds) + (len(eval_config.length_quantiles) if length_head else 0)
            greedy += rules * choice_val_items
            if int(eval_config.samples):
                greedy += len(eval_config.temperatures) * choice_val_items
                draws += len(eval_config.temperatures) * int(eval_config.samples) * choice_val_items
            if int(eval_config.vote_samples):
                greedy += choice_val_items
                draws += int(eval_config.vote_samples) * choice_val_items
        test_draws = (int(eval_config.vote_samples) or int(eval_config.samples)) if greedy else 0
        return cls(greedy + test_items, draws, test_draws * test_items)


@dataclasses.dataclass
class TimeLeft:
    """The seconds a run has left after a step, from its plan (steps, how often it evaluates and
    saves, what an eval does, what the final evaluation decodes) and what it measured so far."""

    steps_total: int
    batch_size: int
    eval_every: int
    checkpoint_every: int
    loss_items: int  # val items an eval computes the loss of
    decoded_items: int  # val items an eval decodes
    final: FinalPasses
    eval_seconds: float | None = None  # the last eval, compilation left out
    save_seconds: float | None = None  # the last save
    greedy_seconds: float | None = None  # per item decoded greedily, measured by an eval

    def evaluated(self, seconds: float, decoded: int = 0, decode_seconds: float = 0.0) -> None:
        """An eval took `seconds` (compilation left out), `decode_seconds` of them decoding `decoded` items."""
        self.eval_seconds = seconds
        if decoded and decode_seconds > 0:
            self.greedy_seconds = decode_seconds / decoded

    def saved(self, seconds: float) -> None:
        self.save_seconds = seconds

    def item_seconds(self, steps_per_s: float) -> float:
        return 1.0 / (steps_per_s * self.batch_size)

    def greedy_item_seconds(self, steps_per_s: float) -> float:
        """Seconds to decode one item greedily: measured by an eval, else the estimate."""
        return self.greedy_seconds if self.greedy_seconds is not None else GREEDY_ITEM * self.item_seconds(steps_per_s)

    def eval_estimate(self, steps_per_s: float | None) -> tuple[float | None, bool]:
        """(seconds of one eval, whether an eval measured them); (None, False) before both an eval
        and a measured step rate."""
        if self.eval_seconds is not None:
            return self.eval_seconds, True
        if not steps_per_s:
            return None, False
        decoding = self.decoded_items * self.greedy_item_seconds(steps_per_s)
        return self.loss_items * LOSS_ITEM * self.item_seconds(steps_per_s) + decoding, False

    def draw_item_seconds(self, steps_per_s: float) -> float:
        return self.greedy_item_seconds(steps_per_s) * (DRAW_ITEM / GREEDY_ITEM)

    def final_seconds(self, steps_per_s: float) -> float:
        """The final evaluation's decoding, the test splits greedy."""
        return (self.final.greedy * self.greedy_item_seconds(steps_per_s)
                + self.final.draws * self.draw_item_seconds(steps_per_s))

    def if_draws_win(self, steps_per_s: float) -> float:
        """The seconds the test splits' draws add when the draws win on val (0: the config draws none)."""
        return self.final.test_draws * self.draw_item_seconds(steps_per_s)

    def seconds(self, step: int, steps_per_s: float, budget_left_s: float | None = None) -> float:
        """Seconds left after `step`'s progress line (its own eval and save still to come) at
        `steps_per_s`, the test splits decoded greedily (`if_draws_win` adds their draws);
        `budget_left_s`: what `train.time_budget_minutes` leaves, after which the run evaluates
        and saves once more and goes to the final evaluation."""
        last = self.steps_total
        training = (self.steps_total - step) / steps_per_s
        extra_pause = 0
        if budget_left_s is not None and budget_left_s < training:
            training = max(budget_left_s, 0.0)
            last = min(self.steps_total, step + int(training * steps_per_s))
            extra_pause = 1  # the budget's own eval and save
        evals = steps_at(step, last, self.eval_every, self.steps_total) + extra_pause
        saves = steps_at(step, last, self.checkpoint_every, self.steps_total) + extra_pause
        save = self.save_seconds if self.save_seconds is not None else SAVE_SECONDS
        return training + evals * self.eval_estimate(steps_per_s)[0] + saves * save + self.final_seconds(steps_per_s)
