"""Train a builder model: `python -m bapjax.train --config=configs/cl.py [--config.field=value]`.

Teacher forcing with cross entropy over actions + STOP (decoder step t sees the world after the
gold actions < t), AdamW with gradient clipping, data parallel over every device (batch on the
mesh's 'data' axis, params replicated, `jax.jit` with shardings), evaluation on val with the v2
metrics, early stopping on val loss (or `train.select_by`), best + latest Orbax checkpoints (params, optimizer, step,
the data iterator's position, early-stopping counters) so a killed run resumes to the same
result, TensorBoard + JSONL metrics (`metric_writer`), a progress line with rate and ETA, and a
learning-curve PNG. The config is completed from `bapjax.training.run_config.base_config` and checked before
anything is written (`run_checks`); decoding and scoring a run (the STOP rule chosen on val, its
decode.json) is `bapjax.predict`'s. The last line printed is the final evaluation: one JSON
object keyed "<source>_<split>".
"""

from __future__ import annotations

import contextlib
import functools
import json
import math
import os
import re
import sys
import time

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import optax
from etils import epath
from jax.experimental import multihost_utils

from bapjax import cli, sharding
from bapjax.data import curriculum, input_pipeline, sources
from bapjax.decoding import DecodeSettings, Evaluator
from bapjax.errors import NonFiniteLoss, PeerLost, RunFailure, UserError
from bapjax.models import builder
from bapjax.paths import cache_root, resolve_path, workdir_path
from bapjax.text.glove import load_glove_50d
from bapjax.text.vocab import Vocabulary
from bapjax.training import checkpoints, peer_watch, preemption, run_checks, run_eval, time_left, workdir_claim
from bapjax.training.metric_writer import MetricWriter, plot_learning_curves, report_scalars
from bapjax.training.optimizer import make_optimizer, update_ema
from bapjax.training.run_config import base_config, init_seed
from bapjax.world.items import BapItem

# ------------------------------------------------------------------------------------------------
# Data


def log(message: str, *args) -> None:
    """Progress lines on stdout (host 0); absl's INFO stream stays quiet (Orbax is chatty)."""
    if jax.process_index() == 0:
        print(time.strftime("%H:%M:%S ") + (message % args if args else message), flush=True)


def say(message: str, *args) -> None:
    """A line about how the run ends (a stop signal's save) on stderr, as `log` writes it: it
    still reaches the user when stdout's reader is gone."""
    if jax.process_index() == 0:
        print(time.strftime("%H:%M:%S ") + (message % args if args else message), file=sys.stderr, flush=True)


def load_vocab_and_embeddings(config, train_items: list[BapItem], workdir: epath.Path):
    """The vocabulary (saved in the workdir so predict/resume use the same ids) and its GloVe matrix."""
    vocab_path = workdir / "vocab.json"
    if vocab_path.exists():
        vocab = run_checks.run_vocabulary(workdir)
    elif config.data.vocab_path:
        vocab = Vocabulary.load(resolve_path(config.data.vocab_path))
    elif config.train.init_from:  # the weights it starts from index this vocabulary
        vocab = run_checks.run_vocabulary(checkpoints.find_run_dir(config.train.init_from))
    else:
        vocab = Vocabulary.build(train_items, min_count=int(config.data.min_count))
    if jax.process_index() == 0 and not vocab_path.exists():
        workdir.mkdir(parents=True, exist_ok=True)
        vocab.save(vocab_path)
    matrix = None
    if config.train.glove:
        matrix = vocab.embedding_matrix(load_glove_50d())
    return vocab, matrix


# ------------------------------------------------------------------------------------------------
# Train state and steps


def create_state(model, optimizer, rng, embedding_matrix, ema_decay: float = 0.0) -> dict:
    """The whole training state as one pytree (what the checkpoints hold, besides JSON metadata);
    `rng` initializes the parameters (training itself draws nothing: no dropout). With `ema_decay`
    it also holds "ema_params", the weights' moving average (`checkpoints.evaluation_params`)."""
    init_rng, _ = jax.random.split(rng)  # the key every run has initialized from (same params per seed)
    params = builder.init_params(model, init_rng, embedding_matrix)
    state = {"step": jnp.int32(0), "params": params, "opt_state": optimizer.init(params)}
    if ema_decay:
        state["ema_params"] = jax.tree_util.tree_map(jnp.copy, params)  # own buffers: the state is donated
    return state


def start_from(state: dict, params, optimizer) -> dict:
    """`state` (of `create_state`) with `params` (another run's weights, the same tree and shapes) as
    its weights and their moving average, and the optimizer's state initialized for them."""
    params = jax.tree_util.tree_map(jnp.asarray, params)
    mine = jax.tree_util.tree_map(jnp.shape, state["params"])
    theirs = jax.tree_util.tree_map(jnp.shape, params)
    if mine != theirs:
        raise ValueError("its parameters have other names or shapes than this run's model")
    new = {**state, "params": params, "opt_state": optimizer.init(params)}
    if "ema_params" in state:
        new["ema_params"] = jax.tree_util.tree_map(jnp.copy, params)
    return new


def check_init_from(config) -> None:
    """Refuses (ConfigError naming the flag) a `config.train.init_from` that holds no run, or a run
    whose model fields differ from this config's (naming the first); reads only."""
    source = config.train.init_from
    try:
        run_dir = checkpoints.find_run_dir(source)
    except checkpoints.CheckpointError as err:
        raise run_checks.ConfigError(f"--config.train.init_from={source!r}: {err}") from None
    trained = run_checks.with_defaults(run_checks.read_run_file(run_dir, "config.json"))
    differing = run_checks.differing_fields(json.loads(trained.model.to_json()), json.loads(config.model.to_json()),
                                            "model.")
    if differing:
        key, theirs, mine = differing[0]
        raise run_checks.ConfigError(f"--config.train.init_from={source!r}: its {key} is {theirs!r}, "
                                     f"this run's {mine!r}")


def initial_weights(config, optimizer, state: dict) -> dict:
    """`state` started from `config.train.init_from`'s evaluation weights (`start_from`; the run is
    checked by `check_init_from` first)."""
    source = config.train.init_from
    try:
        params, _ = checkpoints.load_params(source)
        return start_from(state, params, optimizer)
    except checkpoints.CheckpointError as err:
        raise run_checks.ConfigError(f"--config.train.init_from={source!r}: {err}") from None
    except ValueError as err:
        raise run_checks.ConfigError(f"--config.train.init_from={source!r}: {err} (another vocabulary?)") from None


def device_loss_sums(model, num_packed: int, params, batch):
    """Run by every device on its own rows (`sharding.per_device`): pack and encode only those,
    then add the loss sums of all devices."""
    logits, pack = model.apply({"params": params}, batch, num_packed)
    return jax.lax.psum(builder.loss_sums(logits, pack), sharding.DATA_AXIS)


def train_step(model, optimizer, mesh, ema_decay: float, state, batch, num_packed: int):
    """One AdamW step on a global batch (loss = mean cross entropy over all target steps of the
    global batch, plus the weighted mean length cross entropy with a length head; `num_packed` is
    the pack size per device), and the weights' moving average when the state holds one."""
    sums_fn = sharding.per_device(functools.partial(device_loss_sums, model, num_packed), mesh)
    length_weight = builder.objective_length_weight(model)

    def loss_fn(params):
        return builder.loss_from_sums(sums_fn(params, batch), length_weight)

    (_, metrics), grads = jax.value_and_grad(loss_fn, has_aux=True)(state["params"])
    updates, opt_state = optimizer.update(grads, state["opt_state"], state["params"])
    params = optax.apply_updates(state["params"], updates)
    metrics["grad_norm"] = optax.global_norm(grads)
    new_state = {"step": state["step"] + 1, "params": params, "opt_state": opt_state}
    if ("ema_params" in state) != bool(ema_decay):
        raise ValueError(f"the train state {'holds' if 'ema_params' in state else 'lacks'} ema_params but the "
                         f"Trainer's ema_decay is {ema_decay}: build both from the same train.ema_decay")
    if ema_decay:
        new_state["ema_params"] = update_ema(state["ema_params"], params, state["step"], ema_decay)
    return new_state, metrics


def eval_step(model, mesh, params, batch, num_packed: int):
    return sharding.per_device(functools.partial(device_loss_sums, model, num_packed), mesh)(params, batch)


def pack_unit(model, pack_multiple: int, devices: int) -> int:
    """The per-device pack sizes' unit: `pack_multiple / devices`, rounded up to a multiple of the
    model's `packed_chunk`."""
    chunk = max(1, int(getattr(model, "packed_chunk", 0) or 1))
    per_device = max(1, int(pack_multiple) // devices)
    return -(-per_device // chunk) * chunk


class Trainer:
    """Holds the compiled steps for one model, optimizer and mesh.

    Each host balances its rows over its devices (by target count, so the per-device packs are
    even; the loss is a sum, so row order does not change it) and picks the per-device pack size:
    a multiple of `pack_multiple / devices` (and of the model's `packed_chunk`), or that times a power
    of two with `pack_rounding` "power_of_two" (fewer compiled shapes, more padding), agreed over hosts;
    "auto" picks one by the mesh's platform (`builder.resolve_pack_rounding`).
    """

    def __init__(self, model, optimizer, mesh, pack_multiple: int = 32, ema_decay: float = 0.0,
                 pack_rounding: str = "auto"):
        self.model, self.optimizer, self.mesh = model, optimizer, mesh
        self.pack_rounding = builder.resolve_pack_rounding(pack_rounding, mesh.devices.flat[0].platform)
        self.pack_multiple = pack_unit(model, pack_multiple, mesh.size)
        self.local_devices = sharding.local_device_count(mesh)
        repl, data = sharding.replicated(mesh), sharding.batch_sharding(mesh)
        self._train = jax.jit(functools.partial(train_step, model, optimizer, mesh, float(ema_decay)), static_argnums=(2,),
                              in_shardings=(repl, data), out_shardings=(repl, repl), donate_argnums=(0,))
        self._eval = jax.jit(functools.partial(eval_step, model, mesh), static_argnums=(2,),
                             in_shardings=(repl, data), out_shardings=repl)

    def prepare(self, local_batch) -> tuple[dict, int]:
        """This host's rows balanced over its devices, and the per-device pack size."""
        counts = builder.targets_per_row(local_batch["action_mask"], local_batch["weight"])
        order = sharding.balanced_order(counts, self.local_devices)
        local_batch = {k: np.asarray(v)[order] for k, v in local_batch.items()}
        size = builder.packed_size(local_batch["action_mask"], local_batch["weight"], self.pack_multiple,
                                   shards=self.local_devices, rounding=self.pack_rounding)
        return local_batch, sharding.global_max(size)

    def compile_train(self, state, local_batch):
        """The compiled train step for this batch's pack size (for cost analysis)."""
        local_batch, k = self.prepare(local_batch)
        return self._train.lower(state, sharding.host_batch_to_global(local_batch, self.mesh), k).compile()

    def train(self, state, local_batch):
        return self.train_global(state, *self.global_batch(local_batch))

    def global_batch(self, local_batch) -> tuple[dict, int]:
        """`local_batch` prepared (`prepare`) and made global arrays on the mesh, with its pack size."""
        local_batch, k = self.prepare(local_batch)
        return sharding.host_batch_to_global(local_batch, self.mesh), k

    def train_global(self, state, global_batch, num_packed: int):
        """The compiled step on a batch already prepared (`prepare`) and on the mesh, of pack size `num_packed`."""
        return self._train(state, global_batch, num_packed)

    def lower_global(self, state, global_batch, num_packed: int):
        """`train_global`'s program lowered for these arguments (`.compile()`, `.as_text()`)."""
        return self._train.lower(state, global_batch, num_packed)

    def eval_loss(self, params, iterator) -> dict:
        """Val loss and step accuracy (with a length head also its loss and accuracy) over `iterator`."""
        sums = {"loss_sum": 0.0, "correct_sum": 0.0, "count": 0.0}
        for local_batch in iterator:
            local_batch, k = self.prepare(local_batch)
            out = self._eval(params, sharding.host_batch_to_global(local_batch, self.mesh), k)
            for key in out:
                sums[key] = sums.get(key, 0.0) + float(out[key])
        count = max(sums["count"], 1e-9)
        values = {"loss": sums["loss_sum"] / count, "step_accuracy": sums["correct_sum"] / count}
        if "length_count" in sums:
            items = max(sums["length_count"], 1e-9)
            values.update(length_loss=sums["length_loss_sum"] / items,
                          length_accuracy=sums["length_correct_sum"] / items)
        return values


# ------------------------------------------------------------------------------------------------
# Main loop


def total_steps(iterator: input_pipeline.DataIterator, num_passes: int) -> int:
    return sum(iterator.batches_in_pass(p) for p in range(num_passes))


def eval_batches(features, feature_config, batch_size: int) -> input_pipeline.DataIterator:
    """One pass over featurized val items in order, this process's share, the last batch padded: what
    an eval's val loss reads."""
    return input_pipeline.DataIterator(features, None, feature_config, batch_size, seed=0, shuffle=False,
                                       process_index=jax.process_index(), process_count=jax.process_count(),
                                       drop_remainder=False, num_epochs=1)


def training_budget(iterator: input_pipeline.DataIterator, schedule, train_config) -> tuple[int, int]:
    """(passes, steps) of a run: the curriculum `schedule`'s stages before its last (none without
    one), then `train.num_epochs` passes over all the data; the steps are those passes' batches,
    at most `train.max_steps` (0: no cap)."""
    num_passes = (len(schedule) - 1 if schedule else 0) + int(train_config.num_epochs)
    steps = total_steps(iterator, num_passes)
    if int(train_config.max_steps):
        steps = min(steps, int(train_config.max_steps))
    return num_passes, steps


def describe_budget(iterator: input_pipeline.DataIterator, steps: int, num_stages: int) -> str:
    """What `steps` cover: the `num_stages` curriculum stages, then passes over all the data
    (fractions where the step budget ends one)."""
    unit = "curriculum stages"
    stage_steps = total_steps(iterator, num_stages)
    if num_stages and steps <= stage_steps:
        done, covered = 0, 0
        while covered + iterator.batches_in_pass(done) <= steps:
            covered += iterator.batches_in_pass(done)
            done += 1
        return f"{done + (steps - covered) / max(iterator.batches_in_pass(done), 1):.1f} of {num_stages} {unit}"
    passes = (steps - stage_steps) / max(iterator.batches_in_pass(num_stages), 1)
    stages = f"{num_stages} {unit}, then " if num_stages else ""
    return f"{stages}{passes:.1f} passes over all training items"


class EarlyStopping:
    """Best-eval bookkeeping (kept in the checkpoint's metadata so a resumed run continues it) on
    a score where lower is better: the val loss, or minus the decoded val F1 that
    `train.select_by` names (`score`). An eval without it (no val split) neither improves nor
    counts against patience. `best_val_loss` is the key's old name: it holds the best score."""

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


def decoded_val_items(data: dict, eval_config) -> dict[str, list]:
    """{source: the val items an eval decodes}: the first `eval.val_decode_items` (0: all, -1: none)
    of each source in `eval.val_decode_sources` (empty: every source) that has val items."""
    cap, chosen = int(eval_config.val_decode_items), tuple(eval_config.val_decode_sources) or tuple(data)
    if cap < 0:
        return {}
    picked = {name: (splits["val"][:cap] if cap else splits["val"]) for name, splits in data.items() if name in chosen}
    return {name: items for name, items in picked.items() if items}


def lower_learning_rate(rate: float) -> str:
    """The learning rate a diverged run's message suggests, as an override's value: half the
    run's, but no more than the default one (`run_config.base_config`; a rate far above it, say
    1e3, halved still diverges), two significant digits ("0.0005", "0.001")."""
    return f"{min(rate / 2, float(base_config().train.learning_rate)):.2g}"


class TrainingRun:
    """One invocation of training on a workdir: the data, model, state and checkpoints, with the
    loop's pieces as plain methods (`train_and_evaluate` strings them together)."""

    def __init__(self, config: ml_collections.ConfigDict, workdir: epath.Path):
        self.started, self.commit = time.time(), run_checks.code_version()
        self.compiles = cli.compile_tally().snapshot()  # what this invocation compiles: recorded in runs.jsonl
        self.config, self.workdir = config, workdir
        sharding.start_processes(config.distributed)  # the command joined it already; a library call joins here
        host = str(config.distributed.get("coordinator_address", "") or "localhost").rsplit(":", 1)[0]
        self.peers = peer_watch.PeerWatch(self.resume_hint, host)  # started with the run (`train_and_evaluate`)
        self.is_main = jax.process_index() == 0
        self.mesh = sharding.data_mesh()
        run_checks.validate_config(config, self.mesh)
        self.resuming = run_checks.check_resume_config(config, workdir)
        if config.train.init_from and not self.resuming:
            check_init_from(config)
        self.last_saved_step = None  # the newest step in checkpoints/latest (set at restore and save)

    def setup(self) -> None:
        """Read the data, write the run's config and vocabulary, build the model and its state,
        and restore the latest checkpoint if there is one."""
        config, workdir, tc = self.config, self.workdir, self.config.train
        self.data = sources.load_config_sources(config, log)
        train_items, train_weights = sources.train_items(config, self.data, log)  # a source's teacher applied
        self.val_items = [it for splits in self.data.values() for it in splits["val"]]
        if not train_items:
            raise UserError("no training items: check config.data.sources (every source is empty or unset)")
        select_source = run_checks.select_by_source(config)
        if select_source is not None and not self.data.get(select_source, {}).get("val"):
            raise run_checks.ConfigError(f"--config.train.select_by={tc.select_by!r}: the source {select_source!r} "
                                         f"has no val items to decode; choose a source with val items or 'loss'")
        self.vocab, embedding_matrix = load_vocab_and_embeddings(config, train_items, workdir)
        if self.is_main:
            if self.resuming:
                k = 1 + sum(1 for _ in workdir.glob("config.resume-*.json"))
                (workdir / f"config.resume-{k}.json").write_text(config.to_json_best_effort(indent=1))
            else:
                (workdir / "config.json").write_text(config.to_json_best_effort(indent=1))
        self.feature_config = input_pipeline.FeatureConfig.from_config(config)
        feature_cache = cache_root() / "features"
        schedule = None
        if config.curriculum.metric:
            schedule = curriculum.schedule_from_config(train_items, config, int(config.seed))
            log("curriculum %s with %d buckets: stage sizes %s", config.curriculum.metric,
                config.curriculum.num_buckets, [len(s) for s in schedule])
        self.train_iter = input_pipeline.DataIterator(
            train_items, self.vocab, self.feature_config, int(tc.batch_size), seed=int(config.seed), shuffle=True,
            process_index=jax.process_index(), process_count=jax.process_count(), schedule=schedule,
            drop_remainder=True, cache_dir=feature_cache, weights=train_weights)
        self.val_features = (input_pipeline.featurize_items_cached(self.val_items, self.vocab, self.feature_config,
                                                                   feature_cache) if self.val_items else None)
        num_passes, self.steps_total = training_budget(self.train_iter, schedule, tc)
        self.eval_every = int(tc.eval_every_steps) or self.train_iter.batches_in_pass(num_passes - 1)
        self.checkpoint_every = int(tc.checkpoint_every_steps) or self.eval_every
        self.model = builder.build_model(config.model, self.vocab.size)
        optimizer = make_optimizer(tc, self.steps_total)
        self.trainer = Trainer(self.model, optimizer, self.mesh, int(tc.pack_multiple), float(tc.ema_decay),
                               str(tc.pack_rounding))
        log("training %d steps (%s), batch %d over %d devices, eval every %d steps, pack rounding %s",
            self.steps_total, describe_budget(self.train_iter, self.steps_total, num_passes - int(tc.num_epochs)),
            tc.batch_size, self.mesh.size, self.eval_every, self.trainer.pack_rounding)
        state = create_state(self.model, optimizer, jax.random.PRNGKey(init_seed(config)),
                             embedding_matrix, float(tc.ema_decay))
        self.state = sharding.replicate(state, self.mesh)
        self.ckpts = checkpoints.Checkpoints(workdir)
        self.meta = {"iterator": self.train_iter.get_state(), **EarlyStopping.initial()}
        restored, restored_meta = self.ckpts.restore(self.ckpts.latest, self.abstract_state())
        if restored is not None:
            self.state, self.meta = restored, restored_meta
            self.train_iter.set_state(self.meta["iterator"])
            log("resumed from step %d", self.step)
            self.last_saved_step = self.step
        elif tc.init_from:
            self.state = sharding.replicate(initial_weights(config, optimizer, state), self.mesh)
            log("weights from %s", tc.init_from)
        self.first_step = self.step
        self.writer = MetricWriter(workdir, self.is_main)
        self.evaluator = Evaluator(self.model, self.vocab, self.feature_config)
        self.eval_settings = DecodeSettings.from_eval_config(config.eval)
        self.clock = self.time_left()

    def time_left(self) -> time_left.TimeLeft:
        """The run's plan as its ETA counts it: steps, evals, saves, the final evaluation's decoding."""
        ec = self.config.eval
        test_items = sum(len(self.data.get(source, {}).get(split) or ())
                         for source, _, split in (key.partition(":") for key in ec.final_splits))
        final = time_left.FinalPasses.of(ec, len(self.stop_rule_val_items()), test_items,
                                         bool(getattr(self.model, "length_head", False)))
        return time_left.TimeLeft(
            self.steps_total, int(self.config.train.batch_size), self.eval_every, self.checkpoint_every,
            loss_items=len(self.val_items) if self.val_features is not None else 0,
            decoded_items=sum(len(items) for items in decoded_val_items(self.data, ec).values()), final=final)

    def stop_rule_val_items(self) -> list:
        """The val items the final evaluation chooses the decoding on (`eval.stop_rule_val`'s, else all)."""
        ec = self.config.eval
        return self.data[ec.stop_rule_val]["val"] if ec.stop_rule_val else self.val_items

    def resume_hint(self) -> str:
        """What rerunning the job does, for a process that loses its peers."""
        if self.last_saved_step is None:
            return "no checkpoint was saved yet: rerun the same job to start over"
        return (f"the last checkpoint is step {self.last_saved_step} in {self.workdir / 'checkpoints' / 'latest'}: "
                f"rerun the same job (all {jax.process_count()} processes) to resume from it")

    @property
    def step(self) -> int:
        return int(jax.device_get(self.state["step"]))

    def abstract_state(self):
        return checkpoints.abstract_like(self.state, self.mesh)

    def save(self, manager) -> None:
        """Save the state with the iterator's position and the early-stopping record."""
        self.meta["iterator"] = self.train_iter.get_state()
        self.ckpts.save(manager, self.state, dict(self.meta))
        if manager is self.ckpts.latest:
            self.last_saved_step = int(jax.device_get(self.state["step"]))

    def save_latest(self) -> None:
        watch = cli.Stopwatch()
        self.save(self.ckpts.latest)
        self.clock.saved(watch.seconds())

    def evaluate(self, step: int) -> None:
        """Val loss (every source's val), decoded val F1 (up to `eval.val_decode_items` per source
        of `eval.val_decode_sources`), early-stopping bookkeeping, and the best checkpoint when the
        `train.select_by` score improved; all with the evaluation weights (the moving average under
        `train.ema_decay`)."""
        tc, ec = self.config.train, self.config.eval
        whole, decoded = cli.Stopwatch(), 0
        values, params = {}, checkpoints.evaluation_params(self.state)
        if self.val_features is not None:
            values.update(self.trainer.eval_loss(params, self.val_iterator()))
        decoding = cli.Stopwatch()
        if self.is_main:
            for name, items in decoded_val_items(self.data, ec).items():
                report = self.evaluator.split(params, items, self.eval_settings)
                values.update(report_scalars(f"{name}_val", report))
                decoded += len(items)
        decode_seconds = decoding.working()
        self.writer.write(step, "val", values)
        log("eval at step %d: %s", step, json.dumps({k: round(v, 4) for k, v in values.items()}))
        score = EarlyStopping.score(values, tc.select_by)
        if tc.select_by != "loss" and jax.process_count() > 1:  # decoded on process 0 only: every process
            # must take the same save decision (the save is collective)
            score = float(multihost_utils.broadcast_one_to_all(np.float32(math.nan if score is None else score)))
            score = None if math.isnan(score) else score
        if EarlyStopping.update(self.meta, score, float(tc.min_delta), int(tc.patience)):
            self.save(self.ckpts.best)
        if self.meta["stopped_early"]:
            log("early stopping at step %d (no %s improvement in %d evals)", step, tc.select_by, int(tc.patience))
        self.clock.evaluated(whole.working(), decoded, decode_seconds)

    def val_iterator(self):
        return eval_batches(self.val_features, self.feature_config, int(self.config.eval.batch_size))

    def train(self) -> None:
        """Steps until the item budget, early stopping or the time budget; raises
        `preemption.Preempted` after saving the step at which a SIGTERM/SIGINT arrived (said at once
        on stderr: `stop_notice`), and `NonFiniteLoss` at the first step whose loss or gradient norm
        is not finite (checked on the metrics already fetched at each log, eval and checkpoint step,
        so no step waits on the host; no such state is ever saved or evaluated). Each progress line's
        ETA is `time_left.TimeLeft`'s: the steps, evals and saves left and the final evaluation."""
        tc = self.config.train
        batch_size, log_every = int(tc.batch_size), int(tc.log_every_steps)
        budget_s = 60.0 * float(tc.time_budget_minutes)
        step = self.step
        t0, window, checked = time.time(), [], 0  # `checked`: how many of `window`'s steps verify() has seen
        progress = cli.Progress(self.steps_total, "steps")  # the step rate: compilation, evals and saves left out
        # what `stop_notice` reads: the step under way, when its eval started, the last eval's step, the step rate
        self.under_way = {"step": step + 1, "eval": None, "evaluated": None, "steps_per_s": None}
        watch = preemption.PreemptionWatch(self.stop_notice).install()  # SIGTERM/SIGINT: finish the step, save, exit 75

        def verify() -> None:  # before a state is logged, evaluated or saved: its steps' loss is finite
            nonlocal checked
            self.check_finite(window[checked:], step)
            checked = len(window)

        try:
            while step < self.steps_total and not self.meta["stopped_early"]:
                self.under_way["step"] = step + 1
                if budget_s and time.time() - t0 > budget_s:
                    log("time budget of %g min reached at step %d: final evaluation", budget_s / 60, step)
                    self.under_way["step"] = step
                    verify()
                    if step % self.eval_every:  # not evaluated at this step yet
                        self.evaluate(step)
                    self.save_latest()
                    return
                self.state, metrics = self.trainer.train(self.state, next(self.train_iter))
                step += 1
                window.append(metrics)
                if step % log_every == 0 or step == self.steps_total:
                    verify()
                    values = {k: float(np.mean([float(m[k]) for m in window])) for k in window[0]}
                    window, checked = [], 0
                    now = time.time()
                    rate = (step - self.first_step) / max(now - t0, 1e-9)
                    self.writer.write(step, "train", {**values, "steps_per_s": rate, "items_per_s": rate * batch_size})
                    measured = progress.measure(step)
                    if self.is_main:
                        if measured:
                            self.under_way["steps_per_s"] = measured[0]
                            budget_left = budget_s - (now - t0) if budget_s else None
                            left = self.clock.seconds(step, measured[0], budget_left)
                            more = self.clock.if_draws_win(measured[0])
                            speed = (f"{measured[0] * batch_size:.1f} items/s, ETA {cli.eta_text(left)}"
                                     + (f" (+{cli.eta_text(more)} if the draws win on val)" if more >= 1 else ""))
                        else:
                            speed = f"{now - t0:.0f} s: {progress.unmeasured(step)}"
                        print(f"step {step}/{self.steps_total} loss {values['loss']:.4f} acc "
                              f"{values['step_accuracy']:.3f} | {speed}", flush=True)
                paused = False  # an eval or a save this step: the printed rate leaves it out
                if step % self.eval_every == 0 or step == self.steps_total:
                    verify()
                    self.under_way["eval"] = time.time()
                    self.evaluate(step)
                    self.under_way.update(eval=None, evaluated=step)
                    paused = True
                if step % self.checkpoint_every == 0 or step == self.steps_total or self.meta["stopped_early"]:
                    verify()
                    self.save_latest()
                    paused = True
                if paused:
                    progress.restart(step)
                if watch.should_stop(step):  # the watch stays: a second signal says the save is under way
                    if step not in self.ckpts.latest.all_steps():  # not saved by this step's periodic checkpoint
                        verify()
                        self.save_latest()
                    say("%s received: saved the checkpoint of step %d in %s; the same command resumes from it "
                        "(exit %d)", watch.received, step, self.workdir / "checkpoints" / "latest",
                        preemption.EXIT_STATUS)
                    raise preemption.Preempted(step, watch.received)
        finally:
            watch.uninstall()

    def stop_notice(self, signal_name: str) -> str:
        """The line a stop signal gets at once (`preemption.PreemptionWatch`): the step that will be
        saved, and what comes first (that step's eval, with its likely duration; the first step's
        compilation)."""
        step, started, rate = self.under_way["step"], self.under_way["eval"], self.under_way["steps_per_s"]
        after = (f"exit {preemption.EXIT_STATUS} (the same command resumes from it; a second signal only says how the save "
                 "goes, a third stops at once without it)")
        eval_step = step % self.eval_every == 0 or step == self.steps_total
        if started is None and not (eval_step and self.under_way["evaluated"] != step):
            compiles = " (its program compiles first)" if step == self.first_step + 1 else ""
            return f"{signal_name} received: saving the checkpoint of step {step} when that step ends{compiles}, then {after}"
        seconds, measured = self.clock.eval_estimate(rate)
        if started is not None and seconds is not None:
            seconds = max(seconds - (time.time() - started), 0.0)
        how = "as long as the last eval took" if measured else "estimated from the step rate: no eval has run yet"
        length = (f"about {cli.eta_text(seconds)}{' more' if started else ''}, {how}" if seconds is not None
                  else "no eval has run yet to tell how long")
        what = f"the eval of step {step} is under way" if started else f"step {step} ends with an eval, which runs first"
        return f"{signal_name} received: {what} ({length}); then the checkpoint of step {step} is saved, then {after}"

    def check_finite(self, window: list, step: int) -> None:
        """Raise `NonFiniteLoss` naming the first step of `window` (the metrics of the last
        len(window) steps, up to `step`) whose loss or gradient norm is not finite."""
        first = step - len(window) + 1
        for offset, metrics in enumerate(window):
            loss, grad_norm = float(metrics["loss"]), float(metrics["grad_norm"])
            if not (math.isfinite(loss) and math.isfinite(grad_norm)):
                raise NonFiniteLoss(self.nonfinite_message(first + offset, loss, grad_norm))

    def nonfinite_message(self, step: int, loss: float, grad_norm: float) -> str:
        tc = self.config.train
        kept = self.last_saved_step
        where = (f"the last finite checkpoint is step {kept} in {self.workdir / 'checkpoints' / 'latest'}"
                 if kept is not None else "no checkpoint was saved before it")
        resume = f"resumes from step {kept}" if kept is not None else "starts over"
        return (f"step {step}: the training loss is {loss} (gradient norm {grad_norm}); training stopped and kept "
                f"no state of it: {where}. Likely cause: train.learning_rate={float(tc.learning_rate):g} is too high "
                f"for this model; the same command with e.g. "
                f"--config.train.learning_rate={lower_learning_rate(float(tc.learning_rate))} {resume}")

    def final_evaluation(self) -> dict:
        """The best checkpoint (by `train.select_by`, else the last state) decoded as `bapjax.predict`
        decodes a run (`run_eval.run_decode_settings`), after choosing its STOP rule and sampling on
        val (`Evaluator.choose`, kept in decode.json); the reports go to final_eval.json,
        the predictions to predictions/<source>_<split>.jsonl."""
        ec = self.config.eval
        params = checkpoints.evaluation_params(self.state)
        if self.ckpts.best.latest_step() is not None:
            params = checkpoints.evaluation_params(self.ckpts.restore(self.ckpts.best, self.abstract_state())[0])
        results = {}
        if not self.is_main:
            return results
        stop_val_items = self.stop_rule_val_items()
        if len(ec.stop_thresholds) and stop_val_items:
            choice = self.evaluator.choose(params, stop_val_items, ec, log_fn=log,
                                           chosen_on=f"{ec.stop_rule_val}:val" if ec.stop_rule_val else "val")
            run_eval.write_decode_choice(self.workdir, choice)
        else:  # nothing to choose on: the choice of an earlier final evaluation of this run, if any
            choice = run_eval.read_decode_choice(self.workdir)
        settings = self.eval_settings.chosen(choice)
        for key in ec.final_splits:
            source_name, _, split = key.partition(":")
            items = self.data.get(source_name, {}).get(split)
            if not items:
                continue
            report = self.evaluator.split(params, items, settings,
                                          predictions_path=self.workdir / "predictions" / f"{source_name}_{split}.jsonl")
            results[f"{source_name}_{split}"] = report
            self.writer.write(self.step, "test", report_scalars(f"{source_name}_{split}", report))
        (self.workdir / "final_eval.json").write_text(json.dumps(results, indent=1))
        if self.writer.jsonl.exists():
            plot_learning_curves(self.writer.jsonl, self.workdir / "learning_curves.png")
        return results

    def release(self) -> None:
        """Close what setup opened (Orbax's background workers, the metric files), as far as it got."""
        for name in ("ckpts", "writer"):
            part = getattr(self, name, None)
            if part is not None:
                part.close()
                setattr(self, name, None)

    def close(self, finished: bool) -> None:
        self.release()
        run_checks.record_invocation(self.workdir, self.started, self.commit, self.first_step, self.step,
                                     int(self.config.train.batch_size), finished=finished,
                                     config_sha256=run_checks.config_digest(self.config),
                                     compiled=cli.compile_tally().since(self.compiles))


def train_and_evaluate(config: ml_collections.ConfigDict, workdir: str | os.PathLike, wait: bool = False) -> dict:
    """Train per `config` (completed with the defaults of `bapjax.training.run_config.base_config`),
    checkpointing into `workdir`; return the final evaluation {"<source>_<split>": report}.
    Resuming keeps the run's config.json (the resumed run's config goes to
    config.resume-<k>.json); a config that contradicts the run is refused first. A SIGTERM or
    SIGINT saves the step and raises `preemption.Preempted`; a non-finite loss raises
    `NonFiniteLoss`, a lost peer process `PeerLost`. Every exit closes the checkpoint managers
    and the metric writer first. The run claims `workdir` before writing to it (`workdir_claim`:
    another run's claim refuses this one, or with `wait` waits)."""
    run = TrainingRun(run_checks.with_defaults(config), workdir_path(workdir))
    with collectives_named(run), workdir_claim.claimed(run.workdir, wait=wait):  # the claim's agreement is a collective too
        run.resuming = run_checks.check_resume_config(run.config, run.workdir)  # again: as the claim found it
        try:
            run.peers.start()
            with collectives_named(run):
                run.setup()
                run.train()
                results = run.final_evaluation()
        except PeerLost:
            raise  # the job's collectives are broken: nothing more can be saved or closed collectively
        except (preemption.Preempted, RunFailure):
            run.close(finished=False)
            run.peers.stop()
            raise
        except BaseException:
            run.release()
            run.peers.stop()
            raise
        run.close(finished=True)
        run.peers.stop()
    return results


PEER_SIGNS = ("connection closed by peer", "connection reset", "gloo", "coordination service", "heartbeat",
              "unavailable", "deadline_exceeded", "failed to connect", "socket closed", "broken pipe")


@contextlib.contextmanager
def collectives_named(run: "TrainingRun"):
    """In a multi-process job, a runtime error of a collective whose peer died becomes `PeerLost`:
    one line naming the process count, the failed operation and the checkpoint to resume from."""
    try:
        yield
    except jax.errors.JaxRuntimeError as err:
        text = str(err)
        if jax.process_count() == 1 or not any(sign in text.lower() for sign in PEER_SIGNS):
            raise
        op = re.search(r"\b(All[A-Z][A-Za-z]*|ReduceScatter|Broadcast|Barrier|CollectivePermute)\b", text)
        raise PeerLost(f"process {jax.process_index()} of {jax.process_count()}: a collective "
                       f"({op.group(1) if op else 'a cross-process step'}) failed because a peer process was lost "
                       f"({text.strip().splitlines()[0][:160]}); {run.resume_hint()}") from None
