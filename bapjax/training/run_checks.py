"""What a training run checks and records around its loop: the config completed from its one set
of defaults, validated before anything is read or written, compared with the run already in the
workdir (a resume), and each invocation logged with the code version behind it."""

from __future__ import annotations

import hashlib
import json
import shlex
import subprocess
import sys
import time
from typing import Mapping

import jax
import ml_collections
from etils import epath

from bapjax import sharding
from bapjax.data import curriculum, input_pipeline, sources, teacher
from bapjax.decoding import DecodeSettings
from bapjax.errors import UserError
from bapjax.models import builder
from bapjax.paths import REPO_ROOT
from bapjax.text.vocab import Vocabulary
from bapjax.training import optimizer, run_config
from bapjax.training.metric_writer import REPORT_F1
from bapjax.world.items import SPLITS

RUN_LOG = "runs.jsonl"  # one line per invocation of train on a workdir (the command, code, items, time)
# What fixes a run: changing any of these makes the checkpoints, the vocabulary or the data order of
# an existing workdir meaningless, so a resume with other values is refused before anything is written.
RUN_DEFINING_FIELDS = ("seed", "init_seed", "model", "features", "data.sources", "data.vocab_path", "data.min_count",
                       "curriculum", "train.glove", "train.batch_size", "train.schedule", "train.warmup_steps",
                       "train.select_by", "train.ema_decay", "train.init_from")


class ConfigError(UserError):
    """A user mistake in the config or flags: the CLI prints it as one line and exits with 2."""


def _overlay(defaults: dict, values: Mapping) -> dict:
    merged = dict(defaults)
    for key, value in values.items():
        if isinstance(value, Mapping) and isinstance(merged.get(key), Mapping):
            merged[key] = _overlay(merged[key], value)
        else:
            merged[key] = value
    return merged


def with_defaults(config: ml_collections.ConfigDict | Mapping) -> ml_collections.ConfigDict:
    """`config` over `run_config.base_config()`, the one home of the run defaults: every field
    a run reads is then present (a config written by hand, or a run's config.json from before a
    field existed, gets the default; its data sources too, `run_config.complete_sources`). Values
    `config` sets win; unknown fields are kept (so validation can name them). The model section is
    completed with the defaults of its own parts (`builder.complete_section`), not with another
    model's. A run config of the layout before the model's parts is refused in one line
    (`run_config.OldRunConfigError`)."""
    values = config.to_dict() if isinstance(config, ml_collections.ConfigDict) else dict(config)
    run_config.refuse_old_layout(values)
    values = run_config.complete_sources(values)
    base = run_config.base_config().to_dict()
    merged = _overlay(base, {key: value for key, value in values.items() if key != "model"})
    merged["model"] = builder.complete_section(values.get("model") or base["model"])
    return ml_collections.ConfigDict(merged)


def validate_config(config: ml_collections.ConfigDict, mesh) -> None:
    """Out-of-range values and unknown fields of a completed config (`with_defaults`), caught
    before anything is read or written. The model, features, decoding and optimizer sections are
    checked by building what owns them; the rest (counts and sources) here."""
    tc, ec = config.train, config.eval
    builder.parts_of(config.model)  # ModelConfigError naming an unknown field or an out-of-range value
    owners = [
        ("features", lambda: input_pipeline.FeatureConfig.from_config(config)),
        *DecodeSettings.eval_checks(ec, lambda: builder.build_model(config.model, vocab_size=1)),
        ("train", lambda: optimizer.make_optimizer(tc, total_steps=1)),
        ("curriculum", lambda: curriculum.check_section(config.curriculum)),
    ]
    for section, build in owners:
        try:
            build()
        except (ValueError, TypeError) as err:
            raise ConfigError(f"--config.{section}: {err}") from None
    checks = [
        ("seed", config.seed, int(config.seed) >= 0, ">= 0"),
        ("init_seed", config.init_seed, int(config.init_seed) >= -1, ">= 0, or -1 (config.seed)"),
        ("cpu_devices", config.cpu_devices, int(config.cpu_devices) >= 0, ">= 0 (0: JAX's default)"),
        ("train.batch_size", tc.batch_size, int(tc.batch_size) >= 1, ">= 1"),
        ("train.num_epochs", tc.num_epochs, int(tc.num_epochs) >= 1, ">= 1"),
        ("train.max_steps", tc.max_steps, int(tc.max_steps) >= 0, ">= 0 (0: no cap)"),
        ("train.learning_rate", tc.learning_rate, float(tc.learning_rate) > 0, "> 0"),
        ("train.warmup_steps", tc.warmup_steps, int(tc.warmup_steps) >= 0, ">= 0"),
        ("train.pack_multiple", tc.pack_multiple, int(tc.pack_multiple) >= 1, ">= 1"),
        ("train.pack_rounding", tc.pack_rounding, tc.pack_rounding in builder.PACK_ROUNDING_SETTINGS,
         " or ".join(builder.PACK_ROUNDING_SETTINGS)),
        ("train.patience", tc.patience, int(tc.patience) >= 0, ">= 0 (0: no early stopping)"),
        ("train.ema_decay", tc.ema_decay, 0.0 <= float(tc.ema_decay) < 1.0, ">= 0 and < 1 (0: no moving average)"),
    ]
    for key in ec.final_splits:
        source_name, _, split = str(key).partition(":")
        if source_name not in config.data.sources or split not in SPLITS:
            raise ConfigError(f"--config.eval.final_splits entry {key!r}: expected <source>:<split> with a "
                              f"source of config.data.sources ({', '.join(config.data.sources)}) and a split "
                              f"of {', '.join(SPLITS)}")
    for name, source in config.data.sources.items():  # a teacher's block: its fields, its folder finished
        block = source.get("teacher", None)
        if block and block.get("path", "") and "train" not in sources.source_splits(source):
            raise ConfigError(f"--config.data.sources.{name}.teacher.path={block.path!r}: the source has no train split "
                              f"to teach (config.data.sources.{name}.splits)")
        teacher.check_block(f"config.data.sources.{name}.teacher", block)
    decode_sources = tuple(ec.val_decode_sources)
    unknown = [name for name in decode_sources if name not in config.data.sources]
    if unknown:
        raise ConfigError(f"--config.eval.val_decode_sources names {unknown[0]!r}: expected () (every source) or "
                          f"sources of config.data.sources ({', '.join(config.data.sources)})")
    selecting = select_by_source(config)
    if selecting is not None:
        if int(ec.val_decode_items) < 0:
            raise ConfigError(f"--config.train.select_by={tc.select_by!r} needs decoded val F1 at each eval: "
                              f"--config.eval.val_decode_items must be >= 0 (0: all val items), not "
                              f"{ec.val_decode_items}")
        if decode_sources and selecting not in decode_sources:
            raise ConfigError(f"--config.train.select_by={tc.select_by!r} needs {selecting!r}'s val decoded at each "
                              f"eval: --config.eval.val_decode_sources={decode_sources!r} leaves it out")
    if ec.stop_rule_val and ec.stop_rule_val not in config.data.sources:
        raise ConfigError(f"--config.eval.stop_rule_val={ec.stop_rule_val!r}: expected '' (all val items) or a "
                          f"source of config.data.sources ({', '.join(config.data.sources)})")
    for name, value, ok, allowed in checks:
        if not ok:
            raise ConfigError(f"--config.{name}={value!r} is out of range: it must be {allowed}")
    try:
        sharding.check_batch_size(int(tc.batch_size), mesh)
    except ValueError as err:
        raise ConfigError(f"--config.train.batch_size={tc.batch_size!r} is out of range: {err}") from None


def select_by_source(config: ml_collections.ConfigDict) -> str | None:
    """The data source whose decoded val F1 `train.select_by` names ("<source>_val_<REPORT_F1 name>_f1",
    as `hooks.Validation` writes it), None for "loss"; ConfigError when it names no such F1."""
    select_by = config.train.select_by
    if select_by == "loss":
        return None
    allowed = {f"{name}_val_{metric}_f1": name for name, source in config.data.sources.items()
               if "val" in sources.source_splits(source) for metric in REPORT_F1}
    if select_by not in allowed:
        raise ConfigError(f"--config.train.select_by={select_by!r}: expected 'loss' or a decoded val F1 of "
                          f"a source with a val split: {', '.join(allowed)}")
    return allowed[select_by]


def flatten(tree, prefix=""):
    """(dotted key, value) of every leaf of a nested dict, each key after `prefix`."""
    if isinstance(tree, dict):
        for key, value in tree.items():
            yield from flatten(value, f"{prefix}{key}.")
    else:
        yield prefix[:-1], tree


def differing_fields(old, new, prefix: str = "") -> list[tuple[str, object, object]]:
    """(dotted key, old value, new value) of every leaf where two nested dicts differ, in key order
    (a leaf only one of them has: None on the other side)."""
    old_flat, new_flat = dict(flatten(old, prefix)), dict(flatten(new, prefix))
    return [(key, old_flat.get(key), new_flat.get(key)) for key in sorted(set(old_flat) | set(new_flat))
            if old_flat.get(key) != new_flat.get(key)]


def check_resume_config(config: ml_collections.ConfigDict, workdir: epath.Path) -> bool:
    """True when `workdir` already holds a run. Refuses (ConfigError) a config whose run-defining
    fields differ from the run's config.json (both completed with the defaults, so a field added
    since the run started is not a difference), naming them; reads only, writes nothing."""
    path = workdir / "config.json"
    if not path.exists():
        return False
    saved = json.loads(with_defaults(read_run_file(workdir, "config.json")).to_json_best_effort())
    current = json.loads(with_defaults(config).to_json_best_effort())
    differences = []
    for field in RUN_DEFINING_FIELDS:
        old, new = saved, current
        for part in field.split("."):
            old = old.get(part) if isinstance(old, dict) else None
            new = new.get(part) if isinstance(new, dict) else None
        for key, was, now in differing_fields(old, new, f"{field}."):
            differences.append(f"{key}={now!r} (the run has {was!r})")
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


def record_invocation(workdir: epath.Path, started: float, commit: str | None, first_step: int, last_step: int,
                      batch_size: int, finished: bool, config_sha256: str | None = None,
                      compiled: dict | None = None) -> None:
    """Append what this invocation did to <workdir>/runs.jsonl (host 0); `commit` is the code
    version read when the invocation started (commits made while it ran are not its code);
    `compiled`: what it compiled (`cli.CompileTally.since`)."""
    if jax.process_index() != 0:
        return
    entry = {"argv": sys.argv, "commit": commit, "started": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(started)),
             "wall_seconds": round(time.time() - started, 1), "first_step": first_step, "last_step": last_step,
             "items_trained": (last_step - first_step) * batch_size, "finished": finished,
             "devices": jax.device_count(), "platform": jax.devices()[0].platform,
             "config_sha256": config_sha256, "compiled": compiled}
    with (workdir / RUN_LOG).open("a") as out:
        out.write(json.dumps(entry) + "\n")


def invocations(workdir: epath.Path) -> list[dict]:
    """The records of `runs.jsonl`, oldest first (none when the run has not ended an invocation)."""
    log = workdir / RUN_LOG
    return [json.loads(line) for line in log.read_text().splitlines() if line.strip()] if log.exists() else []


# The files of a run that commands read, each with what a damaged copy means for the run.
RUN_FILES = {
    "config.json": "the run cannot be read without it (its model, features and data come from it): "
                   "restore it from a copy of the run",
    "vocab.json": "the run cannot be read without it (its token ids are the model's): restore it from a copy of the run",
    "decode.json": "it holds the decoding the run chose on val; {rerun} chooses it again (and evaluates the test "
                   "splits again)",
}


class DamagedRunFileError(UserError):
    """A file of a training run (`RUN_FILES`) that does not parse: named, with the way back."""


def rerun_command(workdir: epath.Path, *extra: str) -> str:
    """The training command of the run in `workdir` as its last invocation ran it (`runs.jsonl`),
    with --workdir set to it and `extra` flags; a placeholder config when none was recorded."""
    try:
        recorded = [str(arg) for arg in invocations(workdir)[-1]["argv"]]
    except (OSError, ValueError, IndexError, KeyError, TypeError):
        recorded = []
    # a run trained by `python -m bapjax.train` (argv[0] its train.py), not from Python
    argv = recorded[1:] if recorded and recorded[0].endswith(("bapjax/train.py", "bapjax.train")) else ["--config=CONFIG"]
    kept = [arg for arg in argv if not arg.startswith(("--workdir", *(flag.split("=")[0] for flag in extra)))]
    if "--workdir" in argv:  # --workdir DIR: its value goes too
        kept.remove(argv[argv.index("--workdir") + 1])
    return shlex.join(["python", "-m", "bapjax.train", *kept, f"--workdir={workdir}", *extra])


def read_run_file(workdir: epath.Path, name: str, fields: tuple[str, ...] = ()) -> dict:
    """The JSON object in <workdir>/<name>, one of `RUN_FILES`, holding `fields`; a file that does
    not parse is `DamagedRunFileError`: one line naming it, what is wrong, and the way back. A
    config.json of the layout before the model's parts is `run_config.OldRunConfigError`, naming it."""
    path = workdir / name
    try:
        text = path.read_bytes().decode("utf-8")
        record = json.loads(text) if text.strip() else None
        wrong = ("empty" if record is None else "not a JSON object" if not isinstance(record, dict)
                 else next((f"no field {field!r}" for field in fields if field not in record), None))
    except UnicodeDecodeError:
        wrong = "not UTF-8 text"
    except json.JSONDecodeError as err:
        wrong = f"not valid JSON: {err}"
    if wrong is None:
        if name == "config.json":
            run_config.refuse_old_layout(record, str(path))
        return record
    remedy = RUN_FILES[name].format(rerun=f"`{rerun_command(workdir, '--redo_final_eval')}`")
    raise DamagedRunFileError(f"{path}: damaged ({wrong}); {remedy}")


def run_vocabulary(workdir: epath.Path):
    """The vocabulary a run trained with (<workdir>/vocab.json, read by `read_run_file`)."""
    tokens = read_run_file(workdir, "vocab.json", ("tokens",))["tokens"]
    if not isinstance(tokens, list) or not all(isinstance(token, str) for token in tokens):
        raise DamagedRunFileError(f"{workdir / 'vocab.json'}: damaged ('tokens' is not a list of strings); "
                                  f"{RUN_FILES['vocab.json']}")
    return Vocabulary(tokens)


def config_digest(config) -> str:
    """sha256 of a config completed with the defaults (key order aside): which config an invocation ran."""
    values = json.loads(with_defaults(config).to_json_best_effort())
    return hashlib.sha256(json.dumps(values, sort_keys=True).encode()).hexdigest()


def last_run_config(workdir: epath.Path) -> epath.Path | None:
    """The config the run last trained with: its newest config.resume-<k>.json, else config.json."""
    resumes = sorted(workdir.glob("config.resume-*.json"), key=lambda p: int(p.stem.rsplit("-", 1)[-1]))
    newest = resumes[-1] if resumes else workdir / "config.json"
    return newest if newest.exists() else None


def finished_run(config: ml_collections.ConfigDict, workdir: epath.Path) -> dict | None:
    """The last `runs.jsonl` record when `workdir` holds a finished run (its final evaluation
    written, its last invocation finished) of exactly this config (completed with the defaults:
    the record's `config_sha256`); None when there is anything left to do for it."""
    if not (workdir / "final_eval.json").exists():
        return None
    try:
        records = invocations(workdir)
    except (OSError, ValueError):
        return None
    if not records or not records[-1].get("finished"):
        return None
    return records[-1] if records[-1].get("config_sha256") == config_digest(config) else None
