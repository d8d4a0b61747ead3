"""A trained run as decoding reads it: the decoding it chose on val (<workdir>/decode.json, written
and read only here: `write_decode_choice`, `read_decode_choice`, `run_decode_settings`), the
device count its commands split the CPU into (`use_runs_cpu_devices`), and the run loaded for
decoding (`load_decoder`, `predict_with_run`). The decoding itself is `bapjax.decoding`."""

from __future__ import annotations

import json

from bapjax import sharding
from bapjax.decoding import CHOICE_FIELDS, DecodeSettings, RunDecoder
from bapjax.errors import UserError
from bapjax.training import checkpoints, run_checks

DECODE_SETTINGS = "decode.json"  # in a run's workdir: the decoding chosen on val (`bapjax.decoding.Evaluator.choose`)


def read_decode_choice(run_dir) -> dict | None:
    """<run_dir>/decode.json (the decoding the run chose on val, `bapjax.decoding.Evaluator.choose`), or
    None where the run has none: the one reader of the file."""
    if not (run_dir / DECODE_SETTINGS).exists():
        return None
    return run_checks.read_run_file(run_dir, DECODE_SETTINGS, CHOICE_FIELDS)  # damage: one line


def write_decode_choice(workdir, choice: dict) -> None:
    """<workdir>/decode.json: `choice` as `bapjax.decoding.Evaluator.choose` returns it."""
    (workdir / DECODE_SETTINGS).write_text(json.dumps(choice, indent=1))


def use_runs_cpu_devices(paths) -> int:
    """Before JAX runs anything in a command that decodes trained runs: the CPU split into as many XLA
    devices as the most any of them trained on (their `config.cpu_devices`), since decoding over
    several devices is faster on a small CPU as training is (`sharding.set_cpu_devices`). The
    predictions are the same on any count, so a process whose JAX already started keeps its devices,
    and a path that is not a run is left for the loader to name. Returns the count (0: JAX's default)."""
    count = 0
    for path in paths:
        try:
            config = run_checks.read_run_file(checkpoints.find_run_dir(path), "config.json")
        except UserError:
            continue
        count = max(count, int(config.get("cpu_devices", 0) or 0))
    try:
        sharding.set_cpu_devices(count)
    except ValueError:
        pass
    return count


def run_decode_settings(run_dir, config) -> DecodeSettings:
    """How a run decodes: config.eval's settings with the STOP rule (and the sampling, if any:
    `samples`, `temperature`, `cost` or `rules`, and the `sampler` its draws use) of <run_dir>/decode.json if
    the run has chosen them (its final evaluation, `predict_with_run` and the benchmarks); a
    decode.json without sampling: greedy."""
    return DecodeSettings.from_eval_config(config.eval).chosen(read_decode_choice(run_dir))


def load_decoder(checkpoint, **overrides) -> RunDecoder:
    """A `RunDecoder` of the run's best (else latest) checkpoint with `run_decode_settings` (its
    config.eval with the decoding it chose on val); `overrides` as `RunDecoder.of_run` takes them
    (settings its model cannot decode with: one UserError naming the checkpoint). `checkpoint` is
    what `checkpoints.load_run` takes, or a run it loaded already."""
    run = checkpoint if isinstance(checkpoint, checkpoints.TrainedRun) else checkpoints.load_run(checkpoint)
    settings = run_decode_settings(run.run_dir, run.config)  # a damaged decode.json names itself
    try:
        return RunDecoder.of_run(run, settings, **overrides)
    except ValueError as err:
        raise UserError(f"{run.run_dir}: {err}") from None


def predict_with_run(checkpoint, items: list, progress: bool = True, **overrides):
    """Predictions {item_id: [Action]} of a training run's best (else latest) checkpoint (or of a run
    `checkpoints.load_run` loaded),
    decoded as the run's own final evaluation does (`run_decode_settings`: its config.eval
    with the decoding it chose on val); `overrides` as `RunDecoder.of_run` takes them.
    Returns (predictions, the DecodeSettings used). `load_decoder` keeps the loaded run for more calls."""
    decoder = load_decoder(checkpoint, **overrides)
    return decoder.predict(items, progress=progress), decoder.settings
