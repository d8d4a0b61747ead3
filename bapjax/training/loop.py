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

`train_and_evaluate` strings the parts together: an `Invocation` (the job joined, the config
checked, what it opened, its record in runs.jsonl), `setup` (the data, the compiled steps of
`Trainer`, the state to start from), `train` (the loop: the state passed from step to step, the
progress line, evals, saves, the time budget, the stop signal and the non-finite check as the
hooks of `bapjax.training.hooks`, each with its period), `final_evaluation`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import json
import os
import re
import time
from typing import NamedTuple

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import optax
from etils import epath

from bapjax import cli, sharding
from bapjax.data import curriculum, input_pipeline, sources
from bapjax.decoding import DecodeSettings, Evaluator
from bapjax.errors import PeerLost, RunFailure, UserError
from bapjax.models import builder
from bapjax.paths import cache_root, resolve_path, workdir_path
from bapjax.text.glove import load_glove_50d
from bapjax.text.vocab import Vocabulary
from bapjax.training import checkpoints, hooks, peer_watch, preemption, run_checks, run_eval, time_left, workdir_claim
from bapjax.training.hooks import log
from bapjax.training.metric_writer import MetricWriter, plot_learning_curves, report_scalars
from bapjax.training.optimizer import make_optimizer, update_ema
from bapjax.training.run_config import init_seed
from bapjax.world.items import BapItem

# ------------------------------------------------------------------------------------------------
# Data


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


class StepParts(NamedTuple):
    """What a train step is compiled for: the model, the optimizer, the mesh and the decay of the
    weights' moving average (0: none)."""

    model: builder.BuilderModel
    optimizer: optax.GradientTransformation
    mesh: jax.sharding.Mesh
    ema_decay: float


def train_step(parts: StepParts, state, batch, num_packed: int):
    """One AdamW step on a global batch (loss = mean cross entropy over all target steps of the
    global batch, plus the weighted mean length cross entropy with a length head; `num_packed` is
    the pack size per device), and the weights' moving average when the state holds one."""
    model, optimizer, mesh, ema_decay = parts
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
        parts = StepParts(model, optimizer, mesh, float(ema_decay))
        self._train = jax.jit(functools.partial(train_step, parts), static_argnums=(2,),
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
# The step budget, the val batches and items


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


def decoded_val_items(data: dict, eval_config) -> dict[str, list]:
    """{source: the val items an eval decodes}: the first `eval.val_decode_items` (0: all, -1: none)
    of each source in `eval.val_decode_sources` (empty: every source) that has val items."""
    cap, chosen = int(eval_config.val_decode_items), tuple(eval_config.val_decode_sources) or tuple(data)
    if cap < 0:
        return {}
    picked = {name: (splits["val"][:cap] if cap else splits["val"]) for name, splits in data.items() if name in chosen}
    return {name: items for name, items in picked.items() if items}


# ------------------------------------------------------------------------------------------------
# A run: its invocation, its parts, the loop, the final evaluation


class Invocation:
    """One invocation of training on a workdir, from the start of `train_and_evaluate` to its
    record in runs.jsonl (`close`): the job joined, the mesh, the config checked (against the run
    already in the workdir, if any), the watch on the job's other processes, the newest saved step
    (`last_save`, which a lost peer's line names), what setup opened (`opened`: closed on every
    exit) and where the loop got (`position`, from setup on)."""

    def __init__(self, config: ml_collections.ConfigDict, workdir: epath.Path):
        self.started, self.commit = time.time(), run_checks.code_version()
        self.compiles = cli.compile_tally().snapshot()  # what this invocation compiles: recorded in runs.jsonl
        self.config, self.workdir = config, workdir
        sharding.start_processes(config.distributed)  # the command joined it already; a library call joins here
        host = str(config.distributed.get("coordinator_address", "") or "localhost").rsplit(":", 1)[0]
        self.last_save = hooks.LastSave(workdir)  # set at restore and at each save of checkpoints/latest
        self.peers = peer_watch.PeerWatch(self.last_save.resume_hint, host)  # started with the run
        self.mesh = sharding.data_mesh()
        run_checks.validate_config(config, self.mesh)
        self.resuming = run_checks.check_resume_config(config, workdir)
        if config.train.init_from and not self.resuming:
            check_init_from(config)
        self.opened = contextlib.ExitStack()
        self.position: hooks.Position | None = None

    def release(self) -> None:
        """Close what setup opened (Orbax's background workers, the metric files), as far as it got."""
        self.opened.close()

    def close(self, finished: bool) -> None:
        """`release`, then this invocation's line in runs.jsonl (once setup has the state to start from)."""
        self.release()
        if self.position is None:
            return
        run_checks.record_invocation(self.workdir, self.started, self.commit, self.position.first, self.position.done,
                                     int(self.config.train.batch_size), finished=finished,
                                     config_sha256=run_checks.config_digest(self.config),
                                     compiled=cli.compile_tally().since(self.compiles))


@dataclasses.dataclass
class RunData:
    """What a run reads: its items ({source: {split: items}}) and all val items, the vocabulary and
    its GloVe matrix (None without `train.glove`), the featurization, the training batches (in the
    curriculum's stages: `schedule`, None without a curriculum), the val items featurized (None
    without any)."""

    sources: dict
    val_items: list[BapItem]
    vocab: Vocabulary
    embeddings: np.ndarray | None
    features: input_pipeline.FeatureConfig
    batches: input_pipeline.DataIterator
    schedule: list | None
    val_features: input_pipeline.FeaturizedItems | None


def prepare_data(inv: Invocation) -> RunData:
    """Read the items, the vocabulary (written to the workdir), write the run's config (a resume's
    beside the run's own: config.resume-<k>.json), and featurize."""
    config, workdir, tc = inv.config, inv.workdir, inv.config.train
    data = sources.load_config_sources(config, log)
    train_items, train_weights = sources.train_items(config, data, log)  # a source's teacher applied
    val_items = [it for splits in data.values() for it in splits["val"]]
    if not train_items:
        raise UserError("no training items: check config.data.sources (every source is empty or unset)")
    select_source = run_checks.select_by_source(config)
    if select_source is not None and not data.get(select_source, {}).get("val"):
        raise run_checks.ConfigError(f"--config.train.select_by={tc.select_by!r}: the source {select_source!r} "
                                     f"has no val items to decode; choose a source with val items or 'loss'")
    vocab, embedding_matrix = load_vocab_and_embeddings(config, train_items, workdir)
    if jax.process_index() == 0:
        if inv.resuming:
            k = 1 + sum(1 for _ in workdir.glob("config.resume-*.json"))
            (workdir / f"config.resume-{k}.json").write_text(config.to_json_best_effort(indent=1))
        else:
            (workdir / "config.json").write_text(config.to_json_best_effort(indent=1))
    feature_config = input_pipeline.FeatureConfig.from_config(config)
    feature_cache = cache_root() / "features"
    schedule = None
    if config.curriculum.metric:
        schedule = curriculum.schedule_from_config(train_items, config, int(config.seed))
        log("curriculum %s with %d buckets: stage sizes %s", config.curriculum.metric,
            config.curriculum.num_buckets, [len(s) for s in schedule])
    batches = input_pipeline.DataIterator(
        train_items, vocab, feature_config, int(tc.batch_size), seed=int(config.seed), shuffle=True,
        process_index=jax.process_index(), process_count=jax.process_count(), schedule=schedule,
        drop_remainder=True, cache_dir=feature_cache, weights=train_weights)
    val_features = (input_pipeline.featurize_items_cached(val_items, vocab, feature_config, feature_cache)
                    if val_items else None)
    return RunData(data, val_items, vocab, embedding_matrix, feature_config, batches, schedule, val_features)


def stop_rule_val_items(eval_config, data: RunData) -> list:
    """The val items the final evaluation chooses the decoding on (`eval.stop_rule_val`'s, else all)."""
    return data.sources[eval_config.stop_rule_val]["val"] if eval_config.stop_rule_val else data.val_items


def run_clock(config, data: RunData, model, periods: tuple[int, int, int]) -> time_left.TimeLeft:
    """The run's plan as its ETA counts it: the steps, the evals and saves (`periods`: the steps,
    the eval and the checkpoint period), the final evaluation's decoding."""
    ec = config.eval
    test_items = sum(len(data.sources.get(source, {}).get(split) or ())
                     for source, _, split in (key.partition(":") for key in ec.final_splits))
    final = time_left.FinalPasses.of(ec, len(stop_rule_val_items(ec, data)), test_items,
                                     bool(getattr(model, "length_head", False)))
    steps_total, eval_every, checkpoint_every = periods
    return time_left.TimeLeft(
        steps_total, int(config.train.batch_size), eval_every, checkpoint_every,
        loss_items=len(data.val_items) if data.val_features is not None else 0,
        decoded_items=sum(len(items) for items in decoded_val_items(data.sources, ec).values()), final=final)


@dataclasses.dataclass
class Run:
    """A run set up (`setup`): its data, its compiled steps, its checkpoints (`ckpts`), the
    early-stopping record (restored with the state), the metric writer, the decoder of its evals
    and final evaluation (`evaluator` with `settings`), and its plan (`clock`: the steps, the eval
    and checkpoint periods, and the ETA measured as it goes)."""

    data: RunData
    trainer: Trainer
    ckpts: checkpoints.Checkpoints
    early: hooks.EarlyStopping
    writer: MetricWriter
    evaluator: Evaluator
    settings: DecodeSettings
    clock: time_left.TimeLeft


def setup(inv: Invocation) -> tuple[Run, dict]:
    """The run's data (`prepare_data`), model and compiled steps, and the state to start from: the
    latest checkpoint's (with the data's position and the early-stopping record), else a new one
    (`init_seed`, or `train.init_from`'s weights)."""
    config, tc, mesh = inv.config, inv.config.train, inv.mesh
    data = prepare_data(inv)
    num_passes, steps_total = training_budget(data.batches, data.schedule, tc)
    eval_every = int(tc.eval_every_steps) or data.batches.batches_in_pass(num_passes - 1)
    checkpoint_every = int(tc.checkpoint_every_steps) or eval_every
    model = builder.build_model(config.model, data.vocab.size)
    optimizer = make_optimizer(tc, steps_total)
    trainer = Trainer(model, optimizer, mesh, int(tc.pack_multiple), float(tc.ema_decay), str(tc.pack_rounding))
    log("training %d steps (%s), batch %d over %d devices, eval every %d steps, pack rounding %s",
        steps_total, describe_budget(data.batches, steps_total, num_passes - int(tc.num_epochs)),
        tc.batch_size, mesh.size, eval_every, trainer.pack_rounding)
    initial = create_state(model, optimizer, jax.random.PRNGKey(init_seed(config)), data.embeddings,
                           float(tc.ema_decay))
    state = sharding.replicate(initial, mesh)
    ckpts = inv.opened.enter_context(contextlib.closing(checkpoints.Checkpoints(inv.workdir)))
    record = hooks.EarlyStopping.initial()
    restored, meta = ckpts.restore(ckpts.latest, checkpoints.abstract_like(state, mesh))
    if restored is not None:
        state = restored
        data.batches.set_state(meta.pop("iterator"))
        record = meta  # the early-stopping record saved beside the data's position
        inv.last_save.step = int(jax.device_get(state["step"]))
        log("resumed from step %d", inv.last_save.step)
    elif tc.init_from:
        state = sharding.replicate(initial_weights(config, optimizer, initial), mesh)
        log("weights from %s", tc.init_from)
    first = int(jax.device_get(state["step"]))
    inv.position = hooks.Position(first=first, done=first, step=first + 1)
    writer = inv.opened.enter_context(contextlib.closing(MetricWriter(inv.workdir, jax.process_index() == 0)))
    early = hooks.EarlyStopping(str(tc.select_by), float(tc.min_delta), int(tc.patience), record)
    run = Run(data, trainer, ckpts, early, writer, Evaluator(model, data.vocab, data.features),
              DecodeSettings.from_eval_config(config.eval),
              run_clock(config, data, model, (steps_total, eval_every, checkpoint_every)))
    return run, state


def make_hooks(inv: Invocation, run: Run) -> hooks.Hooks:
    """The loop's hooks (`hooks`), each with its period: the train row and progress line every
    `train.log_every_steps`, the eval every `eval_every`, the save every `checkpoint_every` (each
    also at the last step), the stop signal's check every step; the time budget from `train.time_budget_minutes`."""
    tc, ec, clock, position = inv.config.train, inv.config.eval, run.clock, inv.position
    budget = hooks.TimeBudget(float(tc.time_budget_minutes))
    metrics = hooks.StepMetrics(inv.last_save, float(tc.learning_rate))
    rows = hooks.TrainRows(hooks.Every(int(tc.log_every_steps), clock.steps_total), metrics, run.writer, budget,
                           position, int(tc.batch_size))
    saves = hooks.Saving(hooks.Every(clock.checkpoint_every, clock.steps_total), run.ckpts, run.data.batches,
                         run.early, clock, inv.last_save)
    val_loss = None
    if run.data.val_features is not None:
        def val_loss(params):
            return run.trainer.eval_loss(params, eval_batches(run.data.val_features, run.data.features,
                                                              int(ec.batch_size)))
    validation = hooks.Validation(val_loss, run.evaluator, run.settings, decoded_val_items(run.data.sources, ec),
                                  run.writer)
    evals = hooks.Evaluation(hooks.Every(clock.eval_every, clock.steps_total), validation, run.early, saves, clock,
                             position)
    return hooks.Hooks(position, budget, metrics, rows, hooks.ProgressLine(rows, clock, budget, position), evals,
                       saves, hooks.StopOnSignal(saves, metrics, evals, clock, position))


def train(state: dict, batches, trainer: Trainer, last_step: int, run_hooks: hooks.Hooks) -> dict:
    """Steps from `state` to `last_step`, early stopping or the end of the time budget; returns
    the state after the last step.

    After each step the step's metrics are kept (`StepMetrics`), then each periodic hook that is
    due reads the state (the train row, the progress line, the eval, the save: `Hooks.periodic`),
    after the non-finite check of the steps not yet checked (`NonFiniteLoss` at the first whose
    loss or gradient norm is not finite: no such state is logged, evaluated or saved); an eval or
    a save restarts the progress line's rate. Last, the stop signal's check: at a SIGTERM/SIGINT
    the step is saved and `preemption.Preempted` raised (its line on stderr at once:
    `StopOnSignal.notice`). The time budget is checked before each step: once spent, the state is
    evaluated (unless this step's eval already ran) and saved, and the loop ends.
    """
    position, budget, metrics = run_hooks.position, run_hooks.budget, run_hooks.metrics
    evals, saves, stop = run_hooks.evals, run_hooks.saves, run_hooks.stop
    step = int(jax.device_get(state["step"]))
    position.step = step + 1
    budget.start()
    with stop:  # SIGTERM/SIGINT from here to the loop's end: finish the step, save it, exit 75
        while step < last_step and not evals.early.stopped:
            position.step = step + 1
            if budget.spent():
                log("time budget of %g min reached at step %d: final evaluation", budget.seconds / 60, step)
                position.step = step
                metrics.verify(step)
                if not evals.due(step):  # not evaluated at this step yet
                    evals.evaluate(step, state)
                saves(step, state)
                break
            state, step_metrics = trainer.train(state, next(batches))
            step += 1
            position.done = step
            metrics.add(step_metrics)
            paused = False  # an eval or a save ran: the progress line's rate leaves it out
            for hook in run_hooks.periodic:
                if hook.due(step):
                    metrics.verify(step)
                    hook(step, state)
                    paused = paused or hook.pauses
            if paused:
                run_hooks.progress.restart(step)
            stop(step, state)  # the watch stays: a second signal says the save is under way
    return state


def final_evaluation(inv: Invocation, run: Run, state: dict) -> dict:
    """The best checkpoint (by `train.select_by`, else `state`) decoded as `bapjax.predict`
    decodes a run (`run_eval.run_decode_settings`), after choosing its STOP rule and sampling on
    val (`Evaluator.choose`, kept in decode.json); the reports go to final_eval.json,
    the predictions to predictions/<source>_<split>.jsonl."""
    ec, workdir, ckpts = inv.config.eval, inv.workdir, run.ckpts
    params = checkpoints.evaluation_params(state)
    if ckpts.best.latest_step() is not None:
        params = checkpoints.evaluation_params(ckpts.restore(ckpts.best, checkpoints.abstract_like(state, inv.mesh))[0])
    results = {}
    if jax.process_index() != 0:
        return results
    stop_val_items = stop_rule_val_items(ec, run.data)
    if len(ec.stop_thresholds) and stop_val_items:
        choice = run.evaluator.choose(params, stop_val_items, ec, log_fn=log,
                                      chosen_on=f"{ec.stop_rule_val}:val" if ec.stop_rule_val else "val")
        run_eval.write_decode_choice(workdir, choice)
    else:  # nothing to choose on: the choice of an earlier final evaluation of this run, if any
        choice = run_eval.read_decode_choice(workdir)
    settings = run.settings.chosen(choice)
    for key in ec.final_splits:
        source_name, _, split = key.partition(":")
        items = run.data.sources.get(source_name, {}).get(split)
        if not items:
            continue
        report = run.evaluator.split(params, items, settings,
                                     predictions_path=workdir / "predictions" / f"{source_name}_{split}.jsonl")
        results[f"{source_name}_{split}"] = report
        run.writer.write(int(jax.device_get(state["step"])), "test", report_scalars(f"{source_name}_{split}", report))
    (workdir / "final_eval.json").write_text(json.dumps(results, indent=1))
    if run.writer.jsonl.exists():
        plot_learning_curves(run.writer.jsonl, workdir / "learning_curves.png")
    return results


def train_and_evaluate(config: ml_collections.ConfigDict, workdir: str | os.PathLike, wait: bool = False) -> dict:
    """Train per `config` (completed with the defaults of `bapjax.training.run_config.base_config`),
    checkpointing into `workdir`; return the final evaluation {"<source>_<split>": report}.
    Resuming keeps the run's config.json (the resumed run's config goes to
    config.resume-<k>.json); a config that contradicts the run is refused first. A SIGTERM or
    SIGINT saves the step and raises `preemption.Preempted`; a non-finite loss raises
    `NonFiniteLoss`, a lost peer process `PeerLost`. Every exit closes the checkpoint managers
    and the metric writer first. The run claims `workdir` before writing to it (`workdir_claim`:
    another run's claim refuses this one, or with `wait` waits)."""
    inv = Invocation(run_checks.with_defaults(config), workdir_path(workdir))
    # the claim's agreement is a collective too
    with collectives_named(inv.last_save), workdir_claim.claimed(inv.workdir, wait=wait):
        inv.resuming = run_checks.check_resume_config(inv.config, inv.workdir)  # again: as the claim found it
        try:
            inv.peers.start()
            with collectives_named(inv.last_save):
                run, state = setup(inv)
                state = train(state, run.data.batches, run.trainer, run.clock.steps_total, make_hooks(inv, run))
                results = final_evaluation(inv, run, state)
        except PeerLost:
            raise  # the job's collectives are broken: nothing more can be saved or closed collectively
        except (preemption.Preempted, RunFailure):
            inv.close(finished=False)
            inv.peers.stop()
            raise
        except BaseException:
            inv.release()
            inv.peers.stop()
            raise
        inv.close(finished=True)
        inv.peers.stop()
    return results


PEER_SIGNS = ("connection closed by peer", "connection reset", "gloo", "coordination service", "heartbeat",
              "unavailable", "deadline_exceeded", "failed to connect", "socket closed", "broken pipe")


@contextlib.contextmanager
def collectives_named(last_save: hooks.LastSave):
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
                       f"({text.strip().splitlines()[0][:160]}); {last_save.resume_hint()}") from None
