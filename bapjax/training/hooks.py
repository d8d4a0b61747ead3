"""What the training loop (`loop.train`) does around its step, each part a hook with its period.

The loop passes the train state from step to step; after each step it hands the step's metrics
to `StepMetrics` and then, each when its period says so, calls the hooks that read the state:

- `TrainRows` (every `train.log_every_steps` and at the last step): the train row of
  metrics.jsonl and TensorBoard, the mean of the steps since the last row with the step rate;
- `ProgressLine` (with the row): the progress line, its rate and ETA (`time_left.TimeLeft`);
- `Evaluation` (every `eval_every` steps and at the last): val loss, decoded val F1, the val row,
  the early-stopping record (`EarlyStopping`) and the best checkpoint when the score improved;
- `Saving` (every `checkpoint_every` steps, at the last and when early stopping ends the run):
  the latest checkpoint;
- `StopOnSignal` (every step): at a SIGTERM/SIGINT the step is saved and `preemption.Preempted`
  raised (exit 75).

Before any of them reads the state, `StepMetrics.verify` checks the loss and gradient norm of the
steps not yet checked (`NonFiniteLoss` at the first that is not finite): the metrics stay on the
device until a hook needs them, so no step waits on the host, and no state with a non-finite loss
is ever logged, evaluated or saved. `TimeBudget` is asked before each step; `Position` is where
the loop is, as a stop signal's notice and the invocation's record (runs.jsonl) tell it; an eval
or a save pauses the step rate (`pauses`), which the progress line then measures afresh.
"""

from __future__ import annotations

import dataclasses
import json
import math
import sys
import time
from typing import Callable

import jax
import numpy as np
from etils import epath
from jax.experimental import multihost_utils

from bapjax import cli
from bapjax.decoding import DecodeSettings, Evaluator
from bapjax.errors import NonFiniteLoss
from bapjax.training import checkpoints, preemption, time_left
from bapjax.training.metric_writer import MetricWriter, report_scalars
from bapjax.training.run_config import base_config


def log(message: str, *args) -> None:
    """Progress lines on stdout (host 0); absl's INFO stream stays quiet (Orbax is chatty)."""
    if jax.process_index() == 0:
        print(time.strftime("%H:%M:%S ") + (message % args if args else message), flush=True)


def say(message: str, *args) -> None:
    """A line about how the run ends (a stop signal's save) on stderr, as `log` writes it: it
    still reaches the user when stdout's reader is gone."""
    if jax.process_index() == 0:
        print(time.strftime("%H:%M:%S ") + (message % args if args else message), file=sys.stderr, flush=True)


@dataclasses.dataclass(frozen=True)
class Every:
    """A hook's period: every `steps` steps and at the run's `last` step."""

    steps: int
    last: int

    def __call__(self, step: int) -> bool:
        return step % self.steps == 0 or step == self.last


@dataclasses.dataclass
class Position:
    """Where the loop is: the step this invocation started from (`first`), the step of the newest
    state (`done`), the step a stop signal would save (`step`: the step under way, or just done),
    when the eval under way started (None: none is), the last evaluated step, the measured step
    rate (None before the progress line measured one)."""

    first: int
    done: int
    step: int
    eval_started: float | None = None
    evaluated: int | None = None
    steps_per_s: float | None = None


@dataclasses.dataclass
class LastSave:
    """The newest step in <workdir>/checkpoints/latest (None before any): what resuming starts
    from, as a lost peer's and a non-finite loss's lines name it."""

    workdir: epath.Path
    step: int | None = None

    @property
    def directory(self) -> epath.Path:
        return self.workdir / "checkpoints" / "latest"

    def resume_hint(self) -> str:
        """What rerunning the job does, for a process that loses its peers."""
        if self.step is None:
            return "no checkpoint was saved yet: rerun the same job to start over"
        return (f"the last checkpoint is step {self.step} in {self.directory}: "
                f"rerun the same job (all {jax.process_count()} processes) to resume from it")


class TimeBudget:
    """`train.time_budget_minutes` (0: none) from `start()`, the loop's start: once spent, the run
    evaluates and saves its state and goes to the final evaluation."""

    def __init__(self, minutes: float):
        self.seconds, self.started = 60.0 * float(minutes), time.time()

    def start(self) -> None:
        self.started = time.time()

    def spent(self) -> bool:
        return bool(self.seconds) and time.time() - self.started > self.seconds

    def left(self, now: float) -> float | None:
        """The seconds left at time `now` (None: no budget)."""
        return self.seconds - (now - self.started) if self.seconds else None


def lower_learning_rate(rate: float) -> str:
    """The learning rate a diverged run's message suggests, as an override's value: half the
    run's, but no more than the default one (`run_config.base_config`; a rate far above it, say
    1e3, halved still diverges), two significant digits ("0.0005", "0.001")."""
    return f"{min(rate / 2, float(base_config().train.learning_rate)):.2g}"


class StepMetrics:
    """The metrics of the steps since the last train row, as the step returned them (on the
    device: nothing is fetched until a hook needs them), and the non-finite check of them."""

    def __init__(self, last_save: LastSave, learning_rate: float):
        self.window: list[dict] = []
        self.checked = 0  # how many of `window`'s steps `verify` has seen
        self.last_save, self.learning_rate = last_save, learning_rate

    def add(self, metrics: dict) -> None:
        self.window.append(metrics)

    def verify(self, step: int) -> None:
        """Raise `NonFiniteLoss` naming the first step not checked yet (of those up to `step`)
        whose loss or gradient norm is not finite."""
        unchecked = self.window[self.checked:]
        first = step - len(unchecked) + 1
        for offset, metrics in enumerate(unchecked):
            loss, grad_norm = float(metrics["loss"]), float(metrics["grad_norm"])
            if not (math.isfinite(loss) and math.isfinite(grad_norm)):
                raise NonFiniteLoss(self.message(first + offset, loss, grad_norm))
        self.checked = len(self.window)

    def message(self, step: int, loss: float, grad_norm: float) -> str:
        kept = self.last_save.step
        where = (f"the last finite checkpoint is step {kept} in {self.last_save.directory}"
                 if kept is not None else "no checkpoint was saved before it")
        resume = f"resumes from step {kept}" if kept is not None else "starts over"
        return (f"step {step}: the training loss is {loss} (gradient norm {grad_norm}); training stopped and kept "
                f"no state of it: {where}. Likely cause: train.learning_rate={self.learning_rate:g} is too high "
                f"for this model; the same command with e.g. "
                f"--config.train.learning_rate={lower_learning_rate(self.learning_rate)} {resume}")

    def take(self) -> dict[str, float]:
        """The mean of each metric over the window, which starts afresh."""
        values = {k: float(np.mean([float(m[k]) for m in self.window])) for k in self.window[0]}
        self.window, self.checked = [], 0
        return values


class TrainRows:
    """The train row of metrics.jsonl and TensorBoard: the mean metrics since the last row, the
    step rate since the loop started (`values`: the last row's metrics, for the progress line)."""

    pauses = False

    def __init__(self, every: Every, metrics: StepMetrics, writer: MetricWriter, budget: TimeBudget,
                 position: Position, batch_size: int):
        self.every, self.metrics, self.writer = every, metrics, writer
        self.budget, self.position, self.batch_size = budget, position, batch_size
        self.values: dict[str, float] = {}

    def due(self, step: int) -> bool:
        return self.every(step)

    def __call__(self, step: int, state: dict) -> None:
        del state
        self.values = self.metrics.take()
        rate = (step - self.position.first) / max(time.time() - self.budget.started, 1e-9)
        self.writer.write(step, "train", {**self.values, "steps_per_s": rate, "items_per_s": rate * self.batch_size})


class ProgressLine:
    """``step S/N loss L acc A | R items/s, ETA T`` on stdout (host 0), after each train row: the
    rate that `cli.Progress` measures (compilation, evals and saves left out: `restart` after
    them), the ETA `time_left.TimeLeft`'s (the steps, evals and saves left, the time budget, the
    final evaluation)."""

    pauses = False

    def __init__(self, rows: TrainRows, clock: time_left.TimeLeft, budget: TimeBudget, position: Position):
        self.rows, self.clock, self.budget, self.position = rows, clock, budget, position
        self.progress = cli.Progress(clock.steps_total, "steps")

    def due(self, step: int) -> bool:
        return self.rows.due(step)

    def restart(self, step: int) -> None:
        self.progress.restart(step)

    def __call__(self, step: int, state: dict) -> None:
        del state
        values, now = self.rows.values, time.time()
        measured = self.progress.measure(step)
        if jax.process_index() != 0:
            return
        if measured:
            self.position.steps_per_s = measured[0]
            left = self.clock.seconds(step, measured[0], self.budget.left(now))
            more = self.clock.if_draws_win(measured[0])
            speed = (f"{measured[0] * self.clock.batch_size:.1f} items/s, ETA {cli.eta_text(left)}"
                     + (f" (+{cli.eta_text(more)} if the draws win on val)" if more >= 1 else ""))
        else:
            speed = f"{now - self.budget.started:.0f} s: {self.progress.unmeasured(step)}"
        print(f"step {step}/{self.clock.steps_total} loss {values['loss']:.4f} acc "
              f"{values['step_accuracy']:.3f} | {speed}", flush=True)


@dataclasses.dataclass
class EarlyStopping:
    """Best-eval bookkeeping (`record`, kept in the checkpoint's metadata so a resumed run
    continues it) on a score where lower is better: the val loss, or minus the decoded val F1
    that `train.select_by` names (`score`). An eval without it (no val split) neither improves nor
    counts against patience; `patience` evals in a row without an improvement of more than
    `min_delta` stop the run (0: never). `best_val_loss` is the key's old name: it holds the best
    score."""

    select_by: str
    min_delta: float
    patience: int
    record: dict

    @staticmethod
    def initial() -> dict:
        return {"best_val_loss": math.inf, "evals_without_improvement": 0, "stopped_early": False}

    @staticmethod
    def score(values: dict, select_by: str) -> float | None:
        """The eval's score under `select_by` (lower is better), or None when the eval lacks it."""
        value = values.get(select_by)
        if value is None:
            return None
        return float(value) if select_by == "loss" else -float(value)

    @staticmethod
    def update(meta: dict, score: float | None, min_delta: float, patience: int) -> bool:
        """Record an eval; True when its score is the best so far (save the best checkpoint)."""
        if score is None:
            return False
        if score < meta["best_val_loss"] - min_delta:
            meta["best_val_loss"] = score
            meta["evals_without_improvement"] = 0
            return True
        meta["evals_without_improvement"] += 1
        if patience and meta["evals_without_improvement"] >= patience:
            meta["stopped_early"] = True
        return False

    @property
    def stopped(self) -> bool:
        return self.record["stopped_early"]

    def observe(self, values: dict) -> bool:
        """Record the eval of `values` (`update`); True when it is the best so far. The decoded F1
        is process 0's: every process takes its decision (a save is collective)."""
        score = self.score(values, self.select_by)
        if self.select_by != "loss" and jax.process_count() > 1:
            score = float(multihost_utils.broadcast_one_to_all(np.float32(math.nan if score is None else score)))
            score = None if math.isnan(score) else score
        return self.update(self.record, score, self.min_delta, self.patience)


class Saving:
    """The latest checkpoint (`__call__`, timed for the ETA) and the best one (`save_best`), each
    with the metadata a resume continues from: the data iterator's position and the early-stopping
    record."""

    pauses = True

    def __init__(self, every: Every, ckpts: checkpoints.Checkpoints, batches, early: EarlyStopping,
                 clock: time_left.TimeLeft, last_save: LastSave):
        self.every, self.ckpts, self.batches, self.early = every, ckpts, batches, early
        self.clock, self.last_save = clock, last_save

    def due(self, step: int) -> bool:
        return self.every(step) or self.early.stopped

    def holds(self, step: int) -> bool:
        return step in self.ckpts.latest.all_steps()

    def __call__(self, step: int, state: dict) -> None:
        del step
        watch = cli.Stopwatch()
        self.save(self.ckpts.latest, state)
        self.clock.saved(watch.seconds())

    def save_best(self, state: dict) -> None:
        self.save(self.ckpts.best, state)

    def save(self, manager, state: dict) -> None:
        self.ckpts.save(manager, state, {"iterator": self.batches.get_state(), **self.early.record})
        if manager is self.ckpts.latest:
            self.last_save.step = int(jax.device_get(state["step"]))


@dataclasses.dataclass
class Validation:
    """What an eval computes on the weights it is given: the val loss and step accuracy
    (`loss`: None without val items), the decoded val F1 of `decoded` ({source: items}, on host
    0, by `evaluator` with `settings`); written as the val row of `writer` and logged."""

    loss: Callable[[dict], dict] | None
    evaluator: Evaluator
    settings: DecodeSettings
    decoded: dict[str, list]
    writer: MetricWriter

    def __call__(self, step: int, params) -> tuple[dict, int, float]:
        """(the eval's values, the items decoded, the seconds decoding them, compilation left out)."""
        values, decoded = {}, 0
        if self.loss is not None:
            values.update(self.loss(params))
        decoding = cli.Stopwatch()
        if jax.process_index() == 0:
            for name, items in self.decoded.items():
                report = self.evaluator.split(params, items, self.settings)
                values.update(report_scalars(f"{name}_val", report))
                decoded += len(items)
        decode_seconds = decoding.working()
        self.writer.write(step, "val", values)
        log("eval at step %d: %s", step, json.dumps({k: round(v, 4) for k, v in values.items()}))
        return values, decoded, decode_seconds


class Evaluation:
    """An eval (`Validation`) of the state's evaluation weights (the moving average under
    `train.ema_decay`), the early-stopping record, and the best checkpoint when the eval's score
    is the best so far; its duration goes to the ETA."""

    pauses = True

    def __init__(self, every: Every, validation: Validation, early: EarlyStopping, saves: Saving,
                 clock: time_left.TimeLeft, position: Position):
        self.every, self.validation, self.early, self.saves = every, validation, early, saves
        self.clock, self.position = clock, position

    def due(self, step: int) -> bool:
        return self.every(step)

    def __call__(self, step: int, state: dict) -> None:
        """The eval of `step`, marked in `position` for a stop signal's notice."""
        self.position.eval_started = time.time()
        self.evaluate(step, state)
        self.position.eval_started, self.position.evaluated = None, step

    def evaluate(self, step: int, state: dict) -> None:
        """The eval alone, unmarked in `position`: what the time budget's last eval runs."""
        whole = cli.Stopwatch()
        values, decoded, decode_seconds = self.validation(step, checkpoints.evaluation_params(state))
        if self.early.observe(values):
            self.saves.save_best(state)
        if self.early.stopped:
            log("early stopping at step %d (no %s improvement in %d evals)", step, self.early.select_by,
                self.early.patience)
        self.clock.evaluated(whole.working(), decoded, decode_seconds)


class StopOnSignal:
    """A SIGTERM or SIGINT while the loop runs (`with` it: `preemption.PreemptionWatch`): after
    every step (`__call__`) it asks whether to stop, on every process; at the step all processes
    stop at, that step is saved (unless its periodic save holds it already), said on stderr, and
    `preemption.Preempted` raised. The signal is answered at once with `notice`."""

    def __init__(self, saves: Saving, metrics: StepMetrics, evals: Evaluation, clock: time_left.TimeLeft,
                 position: Position):
        self.saves, self.metrics, self.evals, self.clock, self.position = saves, metrics, evals, clock, position
        self.watch: preemption.PreemptionWatch | None = None

    def __enter__(self) -> "StopOnSignal":
        self.watch = preemption.PreemptionWatch(self.notice).install()
        return self

    def __exit__(self, *exc) -> None:
        self.watch.uninstall()

    def __call__(self, step: int, state: dict) -> None:
        watch = self.watch
        if not watch.should_stop(step):  # the watch stays: a second signal says the save is under way
            return
        if not self.saves.holds(step):  # not saved by this step's periodic checkpoint
            self.metrics.verify(step)
            self.saves(step, state)
        say("%s received: saved the checkpoint of step %d in %s; the same command resumes from it "
            "(exit %d)", watch.received, step, self.saves.last_save.directory, preemption.EXIT_STATUS)
        raise preemption.Preempted(step, watch.received)

    def notice(self, signal_name: str) -> str:
        """The line a stop signal gets at once: the step that will be saved, and what comes first
        (that step's eval, with its likely duration; the first step's compilation)."""
        step, started, rate = self.position.step, self.position.eval_started, self.position.steps_per_s
        after = (f"exit {preemption.EXIT_STATUS} (the same command resumes from it; a second signal only says how the "
                 "save goes, a third stops at once without it)")
        if started is None and not (self.evals.every(step) and self.position.evaluated != step):
            compiles = " (its program compiles first)" if step == self.position.first + 1 else ""
            return f"{signal_name} received: saving the checkpoint of step {step} when that step ends{compiles}, then {after}"
        seconds, measured = self.clock.eval_estimate(rate)
        if started is not None and seconds is not None:
            seconds = max(seconds - (time.time() - started), 0.0)
        how = "as long as the last eval took" if measured else "estimated from the step rate: no eval has run yet"
        length = (f"about {cli.eta_text(seconds)}{' more' if started else ''}, {how}" if seconds is not None
                  else "no eval has run yet to tell how long")
        what = f"the eval of step {step} is under way" if started else f"step {step} ends with an eval, which runs first"
        return f"{signal_name} received: {what} ({length}); then the checkpoint of step {step} is saved, then {after}"


@dataclasses.dataclass
class Hooks:
    """The hooks of one run's loop (`loop.train`), as `loop.make_hooks` builds them."""

    position: Position
    budget: TimeBudget
    metrics: StepMetrics
    rows: TrainRows
    progress: ProgressLine
    evals: Evaluation
    saves: Saving
    stop: StopOnSignal

    @property
    def periodic(self) -> tuple:
        """The hooks called after a step when `due`, in this order (each reads the state)."""
        return self.rows, self.progress, self.evals, self.saves
