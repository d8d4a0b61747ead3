"""A run directory's checkpoints and files: Orbax managers for training, loading for prediction.

A training workdir holds ``config.json`` (the run's config), ``vocab.json``, ``decode.json`` (the
STOP rule chosen on val, read by ``bapjax.training.run_eval.read_decode_choice``) and ``checkpoints/latest`` (the newest steps, to resume) and
``checkpoints/best`` (lowest val loss, or `train.select_by`'s best). `Checkpoints` is what ``bapjax.train`` saves and resumes
with; `load_run` is what ``bapjax.predict`` and the benchmarks load a trained model with.

A checkpoint that cannot be read (a truncated file, a half-written step) is skipped with one
warning naming it, and the newest intact one is used instead; when none is intact the error
names every directory tried. A save that meets a full disk (or a file-size limit) ends with one
line naming the step (`bapjax.paths.NoSpaceError`); Orbax writes into a temporary folder and
renames it only when whole, so the half-written step is never listed, and it is removed.
"""

from __future__ import annotations

import dataclasses
import logging as std_logging
import os
import sys
from typing import Any, Iterable

import jax
import ml_collections
import orbax.checkpoint as ocp
from etils import epath

from bapjax import paths, sharding
from bapjax.errors import UserError
from bapjax.models import builder
from bapjax.paths import workdir_path
from bapjax.text.vocab import Vocabulary
from bapjax.training import run_checks

KEEP_LATEST = 2  # steps kept in checkpoints/latest, so a corrupt newest step has an intact fallback
# The builder bapjax ships: a workdir inside the package (written by `python -m bapjax.export`), which every
# command taking a checkpoint reads by this name (`--checkpoint=pretrained`); ./pretrained names a local folder.
PRETRAINED = "pretrained"
PRETRAINED_DIR = epath.Path(__file__).resolve().parents[1] / "pretrained"
BUILDER_RECORD = "builder.json"  # in a builder directory (`bapjax.export`): the run it was made of, its figures


def checkpoint_path(checkpoint: str | os.PathLike) -> epath.Path:
    """Where a checkpoint argument points: the shipped builder for `PRETRAINED`, else the path as a
    workdir path (`paths.workdir_path`)."""
    if os.fspath(checkpoint) == PRETRAINED:
        if not (PRETRAINED_DIR / "config.json").exists():
            raise CheckpointError(f"--checkpoint={PRETRAINED}: this install has no shipped builder "
                                  f"({PRETRAINED_DIR} is missing); pass a training workdir")
        return PRETRAINED_DIR
    return workdir_path(checkpoint)


class CheckpointError(UserError):
    """No intact checkpoint where one was expected; the message names the directories."""


def _closed_loop_error(exc_type, exc) -> bool:
    return exc_type is RuntimeError and str(exc) == "Event loop is closed"


def _quiet_leftover_reads() -> None:
    """Orbax reads a step's arrays as concurrent asyncio tasks and raises the first failure; the
    other reads finish later, on TensorStore's threads (whose callbacks meet a closed event loop)
    or at garbage collection, often at exit, printing "Event loop is closed", "Task exception was
    never retrieved" and "Exception ignored in <coroutine ...>" tracebacks. A damaged step is
    reported once, by name (`_restore_newest_intact`): these leftovers are dropped (installed
    before a restore, since the threads may print while it fails)."""
    if getattr(sys.excepthook, "_bapjax_quiet", False):
        return
    std_logging.getLogger("asyncio").setLevel(std_logging.CRITICAL)
    previous_excepthook, previous_unraisable = sys.excepthook, sys.unraisablehook

    def excepthook(exc_type, exc, tb):
        if not _closed_loop_error(exc_type, exc):
            previous_excepthook(exc_type, exc, tb)

    def unraisablehook(unraisable):
        code = getattr(unraisable.object, "cr_code", None)
        if (code is not None and "orbax" in code.co_filename) or _closed_loop_error(unraisable.exc_type,
                                                                                      unraisable.exc_value):
            return
        previous_unraisable(unraisable)

    excepthook._bapjax_quiet = True
    sys.excepthook, sys.unraisablehook = excepthook, unraisablehook


def _restore_newest_intact(manager, args_for_step, where: str, steps: Iterable[int] | None = None):
    """(restored, step) of the newest step that restores; each failure is logged by name.
    Orbax raises many exception types for damaged files, hence the broad except."""
    _quiet_leftover_reads()
    for step in sorted(manager.all_steps() if steps is None else steps, reverse=True):
        try:
            return manager.restore(step, args=args_for_step(step)), step
        except Exception as err:  # noqa: BLE001 (any unreadable step falls back to an older one)
            print(f"warning: checkpoint {where}/{step} is unreadable ({type(err).__name__}); "
                  "falling back to an older one", flush=True)
    return None, None


def _remove_unfinished(directory: epath.Path) -> None:
    """Orbax's temporary folders of saves that did not finish (they are never restored)."""
    for tmp in directory.glob("*.orbax-checkpoint-tmp*"):
        try:
            tmp.rmtree() if tmp.is_dir() else tmp.unlink()
        except OSError:
            pass


class Checkpoints:
    """Orbax managers for `latest/` (resume; the last `KEEP_LATEST` steps) and `best/` (the best eval by `train.select_by`)."""

    def __init__(self, workdir: epath.Path):
        self.latest = ocp.CheckpointManager(
            workdir / "checkpoints" / "latest",
            options=ocp.CheckpointManagerOptions(max_to_keep=KEEP_LATEST, create=True))
        self.best = ocp.CheckpointManager(
            workdir / "checkpoints" / "best", options=ocp.CheckpointManagerOptions(max_to_keep=1, create=True))

    @staticmethod
    def save(manager, state, meta: dict) -> None:
        """Save (replacing a checkpoint of the same step, e.g. a final save right after an eval)."""
        step = int(jax.device_get(state["step"]))
        if step in manager.all_steps():
            manager.delete(step)
        args = ocp.args.Composite(state=ocp.args.StandardSave(state), meta=ocp.args.JsonSave(meta))
        target = manager.directory / str(step)
        try:
            with paths.writing(target, f"the checkpoint of step {step}"):
                manager.save(step, args=args, force=True)
                manager.wait_until_finished()
        except paths.NoSpaceError:
            _remove_unfinished(manager.directory)  # Orbax never lists them as steps; free their space
            raise

    @staticmethod
    def restore(manager, abstract_state, step: int | None = None):
        """(state, meta) of `step`, else of the newest intact step; (None, None) when the manager
        holds no step. Raises CheckpointError when it holds steps and none of them restores."""
        steps = manager.all_steps() if step is None else [step]
        if not steps:
            return None, None
        args = ocp.args.Composite(state=ocp.args.StandardRestore(abstract_state), meta=ocp.args.JsonRestore())
        restored, found = _restore_newest_intact(manager, lambda _: args, str(manager.directory), steps)
        if restored is None:
            raise CheckpointError(f"{manager.directory}: no intact checkpoint among steps {sorted(steps)}; "
                                  "remove the directory to start over")
        return restored["state"], dict(restored["meta"])

    def close(self):
        self.latest.close()
        self.best.close()


def abstract_like(state, mesh):
    """Shapes, dtypes and replicated shardings of `state`: what a restore fills in."""
    repl = sharding.replicated(mesh)
    return jax.tree_util.tree_map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=repl), state)


def evaluation_params(state: dict):
    """The weights a run evaluates and predicts with: the moving average when the run keeps one
    (`train.ema_decay` > 0: the state's "ema_params"), else the trained weights."""
    return state["ema_params"] if "ema_params" in state else state["params"]


def _local_restore_args(manager, step: int):
    """Restore arguments for one step's state from its own metadata (the tree, shapes and dtypes),
    replicated over this process's devices: a checkpoint saved on another number of devices (a run
    trained on 4 CPU devices, read by a process with 1) restores as well as one saved here."""
    tree = manager.item_metadata(step)["state"]
    tree = getattr(tree, "tree", tree)
    target = abstract_like(tree, sharding.data_mesh(jax.local_devices()))
    return ocp.args.Composite(state=ocp.args.StandardRestore(target))


def load_params(checkpoint_dir: str | os.PathLike) -> tuple[Any, int]:
    """(params, step) of a run's best (else latest) intact checkpoint, its evaluation weights
    (`evaluation_params`): `checkpoint_dir` is the run's workdir, its checkpoints/ dir, a best/
    or latest/ manager dir, or one step of one (e.g. checkpoints/latest/4800: that step only, an
    error when it does not restore); the params tree comes from the checkpoint's own metadata."""
    root = checkpoint_path(checkpoint_dir)
    named = [int(root.name)] if root.name.isdigit() and (root / "state").is_dir() else None  # one step of a manager
    candidates = [root.parent] if named else [root / "checkpoints" / "best", root / "checkpoints" / "latest",
                                              root / "best", root / "latest", root]
    for directory in candidates:
        if not directory.is_dir():
            continue
        manager = ocp.CheckpointManager(directory, item_handlers={"state": ocp.StandardCheckpointHandler(),
                                                                 "meta": ocp.JsonCheckpointHandler()})
        try:
            restored, step = _restore_newest_intact(manager, lambda step: _local_restore_args(manager, step),
                                                    str(directory), named)
        finally:
            manager.close()
        if restored is not None:
            return evaluation_params(restored["state"]), step
    if named:
        raise CheckpointError(f"{checkpoint_dir}: this checkpoint step does not restore")
    raise CheckpointError(f"no intact Orbax checkpoint under {checkpoint_dir} (looked in "
                          f"{', '.join(str(c) for c in candidates)})")


def find_run_dir(checkpoint: str | os.PathLike) -> epath.Path:
    """The workdir (local or e.g. gs://) holding config.json and vocab.json: `checkpoint` itself
    or one of its three nearest parents (so checkpoints/best works too); `PRETRAINED` is the shipped builder."""
    path = checkpoint_path(checkpoint)
    for candidate in (path, *list(path.parents)[:3]):
        if (candidate / "config.json").exists() and (candidate / "vocab.json").exists():
            return candidate
    raise CheckpointError(f"{checkpoint}: no config.json + vocab.json here or in its parents; "
                          "pass the training workdir")


@dataclasses.dataclass
class TrainedRun:
    """What `load_run` reads from a training workdir."""

    model: builder.BuilderModel
    params: Any
    config: ml_collections.ConfigDict  # config.json completed with today's defaults (`run_checks.with_defaults`)
    vocab: Vocabulary
    run_dir: epath.Path
    step: int


def load_run(checkpoint: str | os.PathLike) -> TrainedRun:
    """The model, params, config and vocabulary of a training run (its workdir, or a checkpoints
    directory inside it)."""
    run_dir = find_run_dir(checkpoint)
    config = run_checks.with_defaults(run_checks.read_run_file(run_dir, "config.json"))
    vocab = run_checks.run_vocabulary(run_dir)
    model = builder.build_model(config.model, vocab.size)
    params, step = load_params(checkpoint)
    print(f"loaded {run_dir} step {step}", file=sys.stderr)
    return TrainedRun(model, params, config, vocab, run_dir, step)
