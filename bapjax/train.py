"""Train a builder model: `python -m bapjax.train --config=configs/cl.py [--config.field=value]`.

Teacher forcing with cross entropy over actions + STOP (decoder step t sees the world after the
gold actions < t), AdamW with gradient clipping, data parallel over every device (batch on the
mesh's 'data' axis, params replicated, `jax.jit` with shardings), evaluation on val with the v2
metrics, early stopping on val loss, best + latest Orbax checkpoints (params, optimizer, step,
RNG, the data iterator's position, early-stopping counters) so a killed run resumes to the same
result, TensorBoard + JSONL metrics, a progress line with rate and ETA, and a learning-curve PNG.
The last line printed is the final evaluation: one JSON object keyed "<source>_<split>".
"""

from __future__ import annotations

import functools
import json
import math
import os
import subprocess
import sys
import time

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import optax
from absl import flags, logging
from etils import epath
from ml_collections import config_flags
from tensorboardX import SummaryWriter

from bapjax import checkpoints, cli, curriculum, evaluate, input_pipeline, preemption, sharding, sources, viz
from bapjax import decode as decoding
from bapjax.corpus.items import BapItem
from bapjax.errors import UserError
from bapjax.models import builder
from bapjax.paths import REPO_ROOT, cache_root, resolve_path, workdir_path
from bapjax.text.glove import load_glove_50d
from bapjax.text.vocab import Vocabulary



# ------------------------------------------------------------------------------------------------
# Data


def log(message: str, *args) -> None:
    """Progress lines on stdout (host 0); absl's INFO stream stays quiet (Orbax is chatty)."""
    if jax.process_index() == 0:
        print(time.strftime("%H:%M:%S ") + (message % args if args else message), flush=True)


def load_data(config) -> dict[str, dict[str, list[BapItem]]]:
    """{source name: {split: items}} for every source with a corpus, store or generate block."""
    data = {}
    for name, source in config.data.sources.items():
        if sources.source_is_set(source):
            data[name] = sources.load_source(name, source)
            log("source %s: %s", name, {k: len(v) for k, v in data[name].items()})
        else:
            log("data source %s has no corpus: skipped", name)
    return data


def load_vocab_and_embeddings(config, train_items: list[BapItem], workdir: epath.Path):
    """The vocabulary (saved in the workdir so predict/resume use the same ids) and its GloVe matrix."""
    vocab_path = workdir / "vocab.json"
    if vocab_path.exists():
        vocab = Vocabulary.load(vocab_path)
    elif config.data.get("vocab_path", ""):
        vocab = Vocabulary.load(resolve_path(config.data.vocab_path))
    else:
        vocab = Vocabulary.build(train_items, min_count=int(config.data.get("min_count", 1)))
    if jax.process_index() == 0 and not vocab_path.exists():
        workdir.mkdir(parents=True, exist_ok=True)
        vocab.save(vocab_path)
    matrix = None
    if config.model.get("glove", True):
        matrix = vocab.embedding_matrix(load_glove_50d())
    return vocab, matrix


# ------------------------------------------------------------------------------------------------
# Train state and steps


def learning_rate_schedule(train_config, total_steps: int | None = None):
    """config.train.schedule: "constant" or "cosine" (to final_lr_fraction x lr at total_steps),
    both after `warmup_steps` of linear warmup from 0."""
    lr = float(train_config.learning_rate)
    warmup = int(train_config.get("warmup_steps", 0) or 0)
    kind = train_config.get("schedule", "constant")
    if kind == "cosine":
        if not total_steps:
            raise ValueError("config.train.schedule='cosine' needs the total number of steps")
        return optax.warmup_cosine_decay_schedule(
            0.0, lr, warmup, max(int(total_steps), warmup + 1),
            end_value=lr * float(train_config.get("final_lr_fraction", 0.1)))
    if kind != "constant":
        raise ValueError(f"config.train.schedule must be 'constant' or 'cosine', got {kind!r}")
    return optax.warmup_constant_schedule(0.0, lr, warmup) if warmup else lr


def make_optimizer(train_config, total_steps: int | None = None) -> optax.GradientTransformation:
    return optax.chain(
        optax.clip_by_global_norm(float(train_config.grad_clip)),
        optax.adamw(learning_rate_schedule(train_config, total_steps),
                    weight_decay=float(train_config.weight_decay)),
    )


def create_state(model, optimizer, rng, embedding_matrix) -> dict:
    """The whole training state as one pytree (what the checkpoints hold, besides JSON metadata)."""
    init_rng, rng = jax.random.split(rng)
    params = builder.init_params(model, init_rng, embedding_matrix)
    return {"step": jnp.int32(0), "params": params, "opt_state": optimizer.init(params),
            "rng": jax.random.key_data(rng)}


def device_loss_sums(model, num_packed: int, params, batch):
    """Run by every device on its own rows (`sharding.per_device`): pack and encode only those,
    then add the loss sums of all devices."""
    logits, pack = model.apply({"params": params}, batch, num_packed)
    return jax.lax.psum(builder.loss_sums(logits, pack), sharding.DATA_AXIS)


def train_step(model, optimizer, mesh, state, batch, num_packed: int):
    """One AdamW step on a global batch (loss = mean cross entropy over all target steps of the
    global batch; `num_packed` is the pack size per device)."""
    sums_fn = sharding.per_device(functools.partial(device_loss_sums, model, num_packed), mesh)

    def loss_fn(params):
        return builder.loss_from_sums(sums_fn(params, batch))

    (_, metrics), grads = jax.value_and_grad(loss_fn, has_aux=True)(state["params"])
    updates, opt_state = optimizer.update(grads, state["opt_state"], state["params"])
    params = optax.apply_updates(state["params"], updates)
    metrics["grad_norm"] = optax.global_norm(grads)
    rng = jax.random.key_data(jax.random.split(jax.random.wrap_key_data(state["rng"]))[0])
    new_state = {"step": state["step"] + 1, "params": params, "opt_state": opt_state, "rng": rng}
    return new_state, metrics


def eval_step(model, mesh, params, batch, num_packed: int):
    return sharding.per_device(functools.partial(device_loss_sums, model, num_packed), mesh)(params, batch)


class Trainer:
    """Holds the compiled steps for one model, optimizer and mesh.

    Each host balances its rows over its devices (by target count, so the per-device packs are
    even; the loss is a sum, so row order does not change it) and picks the per-device pack size:
    a multiple of `pack_multiple / devices` (and of the model's encode chunk), agreed over hosts.
    """

    def __init__(self, model, optimizer, mesh, pack_multiple: int = 32):
        self.model, self.optimizer, self.mesh = model, optimizer, mesh
        chunk = max(1, int(getattr(model, "encode_chunk", 0) or 1))
        per_device = max(1, int(pack_multiple) // mesh.size)
        self.pack_multiple = -(-per_device // chunk) * chunk
        self.local_devices = sharding.local_device_count(mesh)
        repl, data = sharding.replicated(mesh), sharding.batch_sharding(mesh)
        self._train = jax.jit(functools.partial(train_step, model, optimizer, mesh), static_argnums=(2,),
                              in_shardings=(repl, data), out_shardings=(repl, repl), donate_argnums=(0,))
        self._eval = jax.jit(functools.partial(eval_step, model, mesh), static_argnums=(2,),
                             in_shardings=(repl, data), out_shardings=repl)

    def prepare(self, local_batch) -> tuple[dict, int]:
        """This host's rows balanced over its devices, and the per-device pack size."""
        counts = builder.targets_per_row(local_batch["action_mask"], local_batch["weight"])
        order = sharding.balanced_order(counts, self.local_devices)
        local_batch = {k: np.asarray(v)[order] for k, v in local_batch.items()}
        size = builder.packed_size(local_batch["action_mask"], local_batch["weight"], self.pack_multiple,
                                   shards=self.local_devices)
        return local_batch, sharding.global_max(size)

    def compile_train(self, state, local_batch):
        """The compiled train step for this batch's pack size (for cost analysis)."""
        local_batch, k = self.prepare(local_batch)
        return self._train.lower(state, sharding.host_batch_to_global(local_batch, self.mesh), k).compile()

    def train(self, state, local_batch):
        local_batch, k = self.prepare(local_batch)
        return self._train(state, sharding.host_batch_to_global(local_batch, self.mesh), k)

    def eval_loss(self, params, iterator) -> dict:
        sums = {"loss_sum": 0.0, "correct_sum": 0.0, "count": 0.0}
        for local_batch in iterator:
            local_batch, k = self.prepare(local_batch)
            out = self._eval(params, sharding.host_batch_to_global(local_batch, self.mesh), k)
            for key in sums:
                sums[key] += float(out[key])
        count = max(sums["count"], 1e-9)
        return {"loss": sums["loss_sum"] / count, "step_accuracy": sums["correct_sum"] / count}


# ------------------------------------------------------------------------------------------------
# Metrics output


class MetricWriter:
    """TensorBoard events + metrics.jsonl in the workdir (host 0 only)."""

    def __init__(self, workdir: epath.Path, enabled: bool):
        self.enabled = enabled
        self.jsonl = workdir / "metrics.jsonl"
        self.tb = None
        if enabled:
            workdir.mkdir(parents=True, exist_ok=True)
            self.tb = SummaryWriter(str(workdir / "tensorboard"))

    def write(self, step: int, kind: str, values: dict) -> None:
        if not self.enabled:
            return
        flat = {k: float(v) for k, v in values.items() if isinstance(v, (int, float, np.floating, np.integer))}
        with self.jsonl.open("a") as f:
            f.write(json.dumps({"step": step, "kind": kind, **flat, "time": time.time()}) + "\n")
        if self.tb is not None:
            for key, value in flat.items():
                self.tb.add_scalar(f"{kind}/{key}", value, step)
            self.tb.flush()

    def close(self):
        if self.tb is not None:
            self.tb.close()


def report_scalars(prefix: str, report: dict) -> dict[str, float]:
    """A few headline numbers of an evaluator report, for logs and curves."""
    out = {}
    try:
        out[f"{prefix}_overall_micro_f1"] = float(report["micro"]["Overall"]["overall"])
        out[f"{prefix}_overall_macro_f1"] = float(report["macro"]["Overall"]["overall"])
        out[f"{prefix}_strict_micro_f1"] = float(report["strict_micro"])
    except (KeyError, TypeError):
        pass
    return out


# ------------------------------------------------------------------------------------------------
# Evaluation with the v2 metrics


def make_eval_decode_fn(model, eval_config, stop_rule: str | None = None, stop_threshold: float | None = None):
    """Compiled greedy decoding with the run's eval settings, on this host's devices."""
    return decoding.make_decode_fn(
        model, int(eval_config.max_actions), int(eval_config.get("min_actions", 0)),
        slots=int(eval_config.batch_size), stop_rule=stop_rule or eval_config.get("stop_rule", "argmax"),
        stop_threshold=float(stop_threshold if stop_threshold is not None else eval_config.get("stop_threshold", 0.5)),
        mesh=sharding.data_mesh(jax.local_devices()))


def tune_stop_rule(model, params, val_items, vocab, feature_config, eval_config, workdir,
                   chosen_on: str = "val") -> dict:
    """Pick the STOP rule on val: "argmax" and "mass" at each of `config.eval.stop_thresholds`,
    the highest val micro Overall (fairer) F1 wins; written to <workdir>/decode.json.
    `chosen_on` names the items ("val": every source's val; "mc:val": one source's)."""
    candidates = [("argmax", 0.5)] + [("mass", float(t)) for t in eval_config.get("stop_thresholds", ())]
    rows = []
    for rule, threshold in candidates:
        report = evaluate_split(model, params, val_items, vocab, feature_config, eval_config,
                                make_eval_decode_fn(model, eval_config, rule, threshold))
        rows.append({"stop_rule": rule, "stop_threshold": threshold,
                     "val_overall_micro_f1": float(report["micro"]["Overall"]["overall"]),
                     "mean_predicted_net_actions": report["counts"]["predicted_net_actions"] / max(report["counts"]["items"], 1)})
        log("val with stop rule %s (threshold %.2f): micro Overall F1 %.4f, %.2f net actions per item",
            rule, threshold, rows[-1]["val_overall_micro_f1"], rows[-1]["mean_predicted_net_actions"])
    best = max(rows, key=lambda r: r["val_overall_micro_f1"])
    settings = {"stop_rule": best["stop_rule"], "stop_threshold": best["stop_threshold"], "chosen_on": chosen_on,
                "val_items": len(val_items), "candidates": rows}
    (workdir / checkpoints.DECODE_SETTINGS).write_text(json.dumps(settings, indent=1))
    return settings


def evaluate_split(model, params, items, vocab, feature_config, eval_config, decode_fn) -> dict:
    """Greedy-decode `items` and score them with the v2 evaluator. Runs on this host only (over
    its local devices, with a local copy of the replicated params), so it also works when the
    training mesh spans hosts."""
    local_mesh = sharding.data_mesh(jax.local_devices())
    params = sharding.replicate(jax.tree_util.tree_map(lambda x: x.addressable_data(0), params), local_mesh)
    predictions = decoding.predict_items(model, params, items, vocab, feature_config,
                                         batch_size=int(eval_config.batch_size),
                                         max_actions=int(eval_config.max_actions), decode_fn=decode_fn,
                                         mesh=local_mesh)
    return evaluate.evaluate_predictions(items, predictions, drop_infeasible=False)


# ------------------------------------------------------------------------------------------------
# Main loop


def total_steps(iterator: input_pipeline.DataIterator, num_passes: int) -> int:
    return sum(iterator.batches_in_pass(p) for p in range(num_passes))


class ConfigError(UserError):
    """A user mistake in the config or flags: `main` prints it as one line and exits with 2."""


def validate_config(config: ml_collections.ConfigDict, num_devices: int) -> None:
    """Out-of-range values and unknown model fields, caught before anything is read or written."""
    tc, ec = config.train, config.eval
    builder.model_kwargs(config.model, config.features)  # ModelConfigError naming an unknown field
    frozen = config.model.get("text_encoder", "gru") == "frozen"
    if frozen != bool(config.features.get("text_encoder", "")):
        raise ConfigError("config.model.text_encoder='frozen' and config.features.text_encoder (e.g. 'minilm') "
                          "go together: the model reads frozen-encoder states only if the features make them")
    checks = [
        ("train.batch_size", tc.batch_size, int(tc.batch_size) >= 1 and int(tc.batch_size) % num_devices == 0,
         f"a positive multiple of the {num_devices} devices"),
        ("train.num_epochs", tc.num_epochs, int(tc.num_epochs) >= 1, ">= 1"),
        ("train.max_steps", tc.get("max_steps", 0), int(tc.get("max_steps", 0) or 0) >= 0, ">= 0 (0: no cap)"),
        ("train.learning_rate", tc.learning_rate, float(tc.learning_rate) > 0, "> 0"),
        ("train.warmup_steps", tc.get("warmup_steps", 0), int(tc.get("warmup_steps", 0) or 0) >= 0, ">= 0"),
        ("train.schedule", tc.get("schedule", "constant"), tc.get("schedule", "constant") in ("constant", "cosine"),
         "'constant' or 'cosine'"),
        ("train.pack_multiple", tc.get("pack_multiple", 32), int(tc.get("pack_multiple", 32)) >= 1, ">= 1"),
        ("eval.batch_size", ec.batch_size, int(ec.batch_size) >= 1, ">= 1"),
        ("eval.max_actions", ec.max_actions, int(ec.max_actions) >= 1, ">= 1"),
        ("eval.stop_rule", ec.get("stop_rule", "argmax"), ec.get("stop_rule", "argmax") in decoding.STOP_RULES,
         " or ".join(decoding.STOP_RULES)),
        ("eval.stop_thresholds", tuple(ec.get("stop_thresholds", ())),
         all(0.0 < float(t) <= 1.0 for t in ec.get("stop_thresholds", ())), "values in (0, 1]"),
        ("features.max_actions", config.features.max_actions, int(config.features.max_actions) >= 1, ">= 1"),
        ("features.max_text_tokens", config.features.max_text_tokens, int(config.features.max_text_tokens) >= 1, ">= 1"),
        ("model.encode_chunk", config.model.get("encode_chunk", 0), int(config.model.get("encode_chunk", 0) or 0) >= 0,
         ">= 0 (0: no chunks)"),
    ]
    for key in ec.get("final_splits", ()):
        source_name, _, split = str(key).partition(":")
        if source_name not in config.data.sources or split not in sources.SPLITS:
            raise ConfigError(f"--config.eval.final_splits entry {key!r}: expected <source>:<split> with a "
                              f"source of config.data.sources ({', '.join(config.data.sources)}) and a split "
                              f"of {', '.join(sources.SPLITS)}")
    stop_val = str(ec.get("stop_rule_val", "") or "")
    if stop_val and stop_val not in config.data.sources:
        raise ConfigError(f"--config.eval.stop_rule_val={stop_val!r}: expected '' (all val items) or a source of "
                          f"config.data.sources ({', '.join(config.data.sources)})")
    for name, value, ok, allowed in checks:
        if not ok:
            raise ConfigError(f"--config.{name}={value!r} is out of range: it must be {allowed}")


# What fixes a run: changing any of these makes the checkpoints, the vocabulary or the data order of
# an existing workdir meaningless, so a resume with other values is refused before anything is written.
RUN_DEFINING_FIELDS = ("seed", "model", "features", "data.sources", "data.vocab_path", "data.min_count",
                       "curriculum", "train.batch_size", "train.schedule", "train.warmup_steps")


def _flatten(tree, prefix=""):
    if isinstance(tree, dict):
        for key, value in tree.items():
            yield from _flatten(value, f"{prefix}{key}.")
    else:
        yield prefix[:-1], tree


def check_resume_config(config: ml_collections.ConfigDict, workdir: epath.Path) -> bool:
    """True when `workdir` already holds a run. Refuses (ConfigError) a config whose run-defining
    fields differ from the run's config.json, naming them; reads only, writes nothing."""
    path = workdir / "config.json"
    if not path.exists():
        return False
    try:
        saved = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as err:
        raise ConfigError(f"{path}: unreadable run config ({err}); use another --workdir") from err
    current = json.loads(config.to_json_best_effort())
    differences = []
    for field in RUN_DEFINING_FIELDS:
        old, new = saved, current
        for part in field.split("."):
            old = old.get(part) if isinstance(old, dict) else None
            new = new.get(part) if isinstance(new, dict) else None
        old_flat, new_flat = dict(_flatten(old, f"{field}.")), dict(_flatten(new, f"{field}."))
        for key in sorted(set(old_flat) | set(new_flat)):
            if old_flat.get(key) != new_flat.get(key):
                differences.append(f"{key}={new_flat.get(key)!r} (the run has {old_flat.get(key)!r})")
    if differences:
        shown = "; ".join(differences[:4]) + (f"; and {len(differences) - 4} more" if len(differences) > 4 else "")
        raise ConfigError(f"{workdir} holds a run with another configuration: {shown}. "
                          "Resume with the run's values or use another --workdir")
    return True


def code_version() -> str | None:
    """The git commit of the code that runs (with "+dirty" for uncommitted changes), or None
    outside a git checkout: recorded with every run so a result names the code behind it."""
    try:
        head = subprocess.run(["git", "-C", str(REPO_ROOT), "rev-parse", "HEAD"], capture_output=True,
                              text=True, timeout=20, check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(REPO_ROOT), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=20, check=True).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return head + ("+dirty" if dirty else "")


RUN_LOG = "runs.jsonl"  # one line per invocation of train on a workdir (the command, code, items, time)


def record_invocation(workdir: epath.Path, started: float, commit: str | None, first_step: int, last_step: int,
                      batch_size: int, finished: bool) -> None:
    """Append what this invocation did to <workdir>/runs.jsonl (host 0); `commit` is the code
    version read when the invocation started (commits made while it ran are not its code)."""
    if jax.process_index() != 0:
        return
    entry = {"argv": sys.argv, "commit": commit, "started": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(started)),
             "wall_seconds": round(time.time() - started, 1), "first_step": first_step, "last_step": last_step,
             "items_trained": (last_step - first_step) * batch_size, "finished": finished,
             "devices": jax.device_count(), "platform": jax.devices()[0].platform}
    with (workdir / RUN_LOG).open("a") as out:
        out.write(json.dumps(entry) + "\n")


def stop_at_signal(ckpts, state, meta, train_iter, writer, watch, workdir) -> None:
    """Save the step just finished (as the periodic checkpoint would) and say so in one line."""
    watch.uninstall()  # a second signal while saving stops at once
    step = int(jax.device_get(state["step"]))
    if step not in ckpts.latest.all_steps():  # not saved by this step's periodic checkpoint
        meta["iterator"] = train_iter.get_state()
        ckpts.save(ckpts.latest, state, dict(meta))
    ckpts.close()
    writer.close()
    log("%s received: saved the checkpoint of step %d in %s; the same command resumes from it (exit %d)",
        watch.received, step, workdir / "checkpoints" / "latest", preemption.EXIT_STATUS)


def train_and_evaluate(config: ml_collections.ConfigDict, workdir: str | os.PathLike) -> dict:
    """Train per `config`, checkpointing into `workdir`; return the final evaluation
    {"<source>_<split>": report}. Resuming keeps the run's config.json (the resumed run's config
    goes to config.resume-<k>.json); a config that contradicts the run is refused first."""
    started = time.time()
    commit = code_version()
    workdir = workdir_path(workdir)
    sharding.maybe_initialize_distributed(config.get("distributed", None))
    is_main = jax.process_index() == 0
    mesh = sharding.data_mesh()
    tc, ec = config.train, config.eval
    validate_config(config, mesh.size)
    resuming = check_resume_config(config, workdir)

    data = load_data(config)
    train_items = [it for splits in data.values() for it in splits["train"]]
    val_items = [it for splits in data.values() for it in splits["val"]]
    if not train_items:
        raise UserError("no training items: check config.data.sources (every source is empty or unset)")
    vocab, embedding_matrix = load_vocab_and_embeddings(config, train_items, workdir)
    if is_main:
        if resuming:
            k = 1 + sum(1 for _ in workdir.glob("config.resume-*.json"))
            (workdir / f"config.resume-{k}.json").write_text(config.to_json_best_effort(indent=1))
        else:
            (workdir / "config.json").write_text(config.to_json_best_effort(indent=1))
    feature_config = input_pipeline.FeatureConfig.from_config(config.features)
    feat_cache = cache_root() / "features"

    schedule = None
    if config.get("curriculum", None) and config.curriculum.get("metric", ""):
        schedule = curriculum.schedule_from_config(train_items, config, int(config.seed))
        log("curriculum %s with %d buckets: stage sizes %s", config.curriculum.metric,
                     config.curriculum.num_buckets, [len(s) for s in schedule])
    train_iter = input_pipeline.DataIterator(
        train_items, vocab, feature_config, int(tc.batch_size), seed=int(config.seed), shuffle=True,
        process_index=jax.process_index(), process_count=jax.process_count(), schedule=schedule,
        drop_remainder=True, cache_dir=feat_cache)
    val_features = input_pipeline.featurize_items_cached(val_items, vocab, feature_config, feat_cache) if val_items else None
    num_passes = (len(schedule) - 1 if schedule else 0) + int(tc.num_epochs)
    steps_total = total_steps(train_iter, num_passes)
    if int(tc.get("max_steps", 0) or 0):
        steps_total = min(steps_total, int(tc.max_steps))
    eval_every = int(tc.get("eval_every_steps", 0) or 0) or train_iter.batches_in_pass(num_passes - 1)
    log("training %d steps (%d passes), batch %d over %d devices, eval every %d steps",
                 steps_total, num_passes, tc.batch_size, mesh.size, eval_every)

    model = builder.build_model(config.model, vocab.size, config.features)
    optimizer = make_optimizer(tc, steps_total)
    trainer = Trainer(model, optimizer, mesh, int(tc.get("pack_multiple", 32)))
    state = create_state(model, optimizer, jax.random.PRNGKey(int(config.seed)), embedding_matrix)
    state = sharding.replicate(state, mesh)
    ckpts = checkpoints.Checkpoints(workdir)
    meta = {"iterator": train_iter.get_state(), "best_val_loss": math.inf, "evals_without_improvement": 0,
            "stopped_early": False}
    restored, restored_meta = ckpts.restore(ckpts.latest, checkpoints.abstract_like(state, mesh))
    if restored is not None:
        state = restored
        meta = restored_meta
        train_iter.set_state(meta["iterator"])
        log("resumed from step %d", int(state["step"]))
    writer = MetricWriter(workdir, is_main)
    decode_fn = make_eval_decode_fn(model, ec)

    def val_iterator():
        return input_pipeline.DataIterator(val_features, None, feature_config, int(ec.batch_size), seed=0,
                                           shuffle=False, process_index=jax.process_index(),
                                           process_count=jax.process_count(), drop_remainder=False,
                                           num_epochs=1)

    def run_eval(step: int) -> None:
        values = {}
        if val_features is not None:
            values.update(trainer.eval_loss(state["params"], val_iterator()))
        cap = int(ec.get("val_decode_items", 0) or 0)
        if is_main and cap >= 0:
            for name, splits in data.items():
                items = splits["val"][:cap] if cap else splits["val"]
                if items:
                    report = evaluate_split(model, state["params"], items, vocab, feature_config, ec, decode_fn)
                    values.update(report_scalars(f"{name}_val", report))
        writer.write(step, "val", values)
        log("eval at step %d: %s", step, json.dumps({k: round(v, 4) for k, v in values.items()}))
        if "loss" in values and values["loss"] < meta["best_val_loss"] - float(tc.get("min_delta", 0.0)):
            meta["best_val_loss"] = values["loss"]
            meta["evals_without_improvement"] = 0
            meta["iterator"] = train_iter.get_state()
            ckpts.save(ckpts.best, state, dict(meta))
        else:
            meta["evals_without_improvement"] += 1

    step = int(jax.device_get(state["step"]))
    preempt_at = int(tc.get("preempt_after_steps", 0) or 0)
    log_every = int(tc.get("log_every_steps", 50))
    ckpt_every = int(tc.get("checkpoint_every_steps", 0) or 0) or eval_every
    t0, step0, window = time.time(), step, []
    first_step = step
    budget_s = 60.0 * float(tc.get("time_budget_minutes", 0) or 0)
    watch = preemption.PreemptionWatch().install()  # SIGTERM/SIGINT: finish the step, save it, exit 75
    while step < steps_total and not meta["stopped_early"]:
        if budget_s and time.time() - t0 > budget_s:
            log("time budget of %.0f min reached at step %d: final evaluation", budget_s / 60, step)
            if step % eval_every:  # not evaluated at this step yet
                run_eval(step)
            meta["iterator"] = train_iter.get_state()
            ckpts.save(ckpts.latest, state, dict(meta))
            break
        batch = next(train_iter)
        state, metrics = trainer.train(state, batch)
        step += 1
        window.append(metrics)
        if step % log_every == 0 or step == steps_total:
            values = {k: float(np.mean([float(m[k]) for m in window])) for k in window[0]}
            window = []
            rate = (step - step0) / max(time.time() - t0, 1e-9)
            writer.write(step, "train", {**values, "steps_per_s": rate, "items_per_s": rate * int(tc.batch_size)})
            if is_main:
                eta = (steps_total - step) / max(rate, 1e-9)
                print(f"step {step}/{steps_total} loss {values['loss']:.4f} acc {values['step_accuracy']:.3f} "
                      f"| {rate * int(tc.batch_size):.1f} items/s, ETA {eta / 60:.1f} min", flush=True)
        if step % eval_every == 0 or step == steps_total:
            run_eval(step)
            patience = int(tc.get("patience", 0) or 0)
            if patience and meta["evals_without_improvement"] >= patience:
                meta["stopped_early"] = True
                log("early stopping at step %d (no val-loss improvement in %d evals)", step, patience)
        if step % ckpt_every == 0 or step == steps_total or meta["stopped_early"]:
            meta["iterator"] = train_iter.get_state()
            ckpts.save(ckpts.latest, state, dict(meta))
        if preempt_at and step >= preempt_at and step < steps_total:
            meta["iterator"] = train_iter.get_state()
            ckpts.save(ckpts.latest, state, dict(meta))
            ckpts.close()
            writer.close()
            logging.warning("stopping at step %d as config.train.preempt_after_steps asks", step)
            record_invocation(workdir, started, commit, first_step, step, int(tc.batch_size), finished=False)
            return {}
        if watch.should_stop(step):
            stop_at_signal(ckpts, state, meta, train_iter, writer, watch, workdir)
            record_invocation(workdir, started, commit, first_step, step, int(tc.batch_size), finished=False)
            raise preemption.Preempted(step, watch.received)
    watch.uninstall()

    # Final evaluation with the best checkpoint (lowest val loss), else the last state.
    final_state = state
    if ckpts.best.latest_step() is not None:
        final_state, _ = ckpts.restore(ckpts.best, checkpoints.abstract_like(state, mesh))
    results = {}
    if is_main:
        stop_val = str(ec.get("stop_rule_val", "") or "")
        stop_val_items = data[stop_val]["val"] if stop_val else val_items
        if len(ec.get("stop_thresholds", ())) and stop_val_items:
            chosen = tune_stop_rule(model, final_state["params"], stop_val_items, vocab, feature_config, ec, workdir,
                                    chosen_on=f"{stop_val}:val" if stop_val else "val")
            decode_fn = make_eval_decode_fn(model, ec, chosen["stop_rule"], chosen["stop_threshold"])
        for key in ec.final_splits:
            source_name, _, split = key.partition(":")
            if source_name not in data:
                continue
            items = data[source_name][split]
            if not items:
                continue
            report = evaluate_split(model, final_state["params"], items, vocab, feature_config, ec, decode_fn)
            results[f"{source_name}_{split}"] = report
            writer.write(step, "test", report_scalars(f"{source_name}_{split}", report))
        (workdir / "final_eval.json").write_text(json.dumps(results, indent=1))
        if writer.jsonl.exists():
            viz.plot_learning_curves(writer.jsonl, workdir / "learning_curves.png")
    ckpts.close()
    writer.close()
    record_invocation(workdir, started, commit, first_step, step, int(tc.batch_size), finished=True)
    return results


FLAGS = flags.FLAGS


def define_flags() -> None:
    config_flags.DEFINE_config_file("config", None, "Training config file (configs/*.py).")
    cli.flag("string", "workdir", None, "Overrides config.workdir.")


def main(argv) -> int:
    if len(argv) > 1:
        raise UserError(f"unexpected arguments: {' '.join(argv[1:])}")
    config = FLAGS.config
    if config is None:
        raise UserError("--config=configs/<name>.py is required")
    try:
        results = train_and_evaluate(config, workdir_path(FLAGS.workdir or config.workdir))
    except preemption.Preempted:
        return preemption.EXIT_STATUS  # the checkpoint is saved and the line printed
    if jax.process_index() == 0 and results:
        for key, report in results.items():
            print(f"\n== {key} ==\n{evaluate.format_report(report, fmt='text')}", flush=True)
        print(json.dumps(results), flush=True)
    return 0


if __name__ == "__main__":
    cli.run(main, define_flags)
