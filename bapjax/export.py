"""A finished training run as a self-contained builder directory: what bapjax ships as `pretrained`.

    python -m bapjax.export --checkpoint runs/exp/cl_la-frame-s11 --corpus @mdc --out bapjax/pretrained

The directory is a workdir that `bapjax.training.checkpoints.load_run` reads like any other:
config.json, vocab.json and decode.json copied from the run, and checkpoints/best/STEP holding only
the weights the run evaluates with (`checkpoints.evaluation_params`: the moving average), so no
optimizer state. builder.json records where it comes from (the run's command, code version,
training time) and what it scores: every test set of the run's final evaluation, and the micro
Overall F1 of its final MDC test predictions on the first `--slice_items` test items, the figure
`python -m bapjax.predict --checkpoint=DIR --corpus @mdc --split test --limit N --evaluate` gives
again. README.md is its model card, written from builder.json.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import jax
import orbax.checkpoint as ocp
from absl import flags

from bapjax import cli, paths
from bapjax.analysis import collect_experiment
from bapjax.corpus import load
from bapjax.errors import UserError
from bapjax.evaluation import evaluator
from bapjax.training import checkpoints, run_checks, run_eval
from bapjax.world import jsonl

FLAGS = flags.FLAGS

COPIED = ("config.json", "vocab.json", "decode.json")  # read by load_run and run_eval, as in any workdir
SLICE_ITEMS = 48  # MDC test items whose score builder.json records and the shipped builder's test decodes again


def define_flags() -> None:
    cli.flag("string", "checkpoint", None, "A finished training workdir (its final evaluation written).")
    cli.define_item_source_flags("corpus")  # the MDC, to score the slice of its test split (default: @mdc)
    cli.flag("string", "out", None, "The builder directory to write (replaced when bapjax wrote it).")
    cli.flag("integer", "slice_items", SLICE_ITEMS, "MDC test items of the recorded slice score.")
    cli.flag("float", "host_speed", None, "This host's `python -m benchmarks.bench_train` batch-32 items/s, "
             "recorded beside the run's training time.")


def _run_predictions(run_dir, source_split: str) -> dict:
    """The run's final predictions of one test set (predictions/<set>_<split>.jsonl, or .gz)."""
    path = jsonl.stored(run_dir / "predictions" / f"{source_split}.jsonl")
    if not path.exists():
        raise UserError(f"{run_dir}: no predictions/{source_split}.jsonl; is its final evaluation written?")
    return jsonl.read_predictions(path)


PROVENANCE = ("command", "commit", "started", "train_items_seen", "wall_minutes", "train_items_per_s_median",
              "host_bench_b32_items_per_s")  # of the run's compact record (`collect_experiment.run_record`)


def builder_record(run_dir, corpus: str, slice_items: int, host_speed: float | None = None) -> dict:
    """builder.json: the run's provenance and test figures, and the slice score (see the module docstring)."""
    if not (run_dir / "final_eval.json").exists():
        raise UserError(f"{run_dir}: no final_eval.json; finish the run first")
    final = json.loads((run_dir / "final_eval.json").read_text())
    if "mc_test" not in final:
        raise UserError(f"{run_dir}/final_eval.json: no MDC test report (mc_test)")
    run = collect_experiment.run_record(Path(run_dir), host_speed)
    test = {name.removesuffix("_test"): round(evaluator.headline(report)["micro_overall"] * 100, 2)
            for name, report in final.items() if name.endswith("_test")}
    items = load.first_items(load.load_split(corpus, "test"), slice_items)
    predictions = _run_predictions(run_dir, "mc_test")
    sliced = evaluator.evaluate_predictions(items, {item.item_id: predictions[item.item_id] for item in items})
    decoding = run["decode"] or {}
    return {
        "source_run": run_dir.name, "model": run["model"], "seed": run["seed"],
        **{key: run[key] for key in PROVENANCE},
        "decoding": {key: decoding.get(key) for key in ("stop_rule", "stop_threshold", "samples", "temperature",
                                                        "rules", "sampler", "chosen_on")},
        "test_micro_overall": test,  # every test set of the run's final evaluation, F1 x 100
        "mdc_test_slice": {"items": len(items), "first_item": items[0].item_id, "last_item": items[-1].item_id,
                           "micro_overall": round(evaluator.headline(sliced)["micro_overall"] * 100, 4)},
    }


MODEL_CARD = """# The builder bapjax ships (`--checkpoint=pretrained`)

One run of

    {command}

at commit `{commit}`, trained by bapjax on the Minecraft Dialogue Corpus (augmented 4x) and the
three simulated sets: {train_items_seen:,} training items in {wall_minutes} min on a 2-core CPU host
whose `python -m benchmarks.bench_train` trains {host_speed} items/s at batch 32. Each item is
decoded as the run chose on MDC val: a vote over {samples} of its own draws at temperature
{temperature} (rules per kind of board: {rules}).

MDC test micro Overall F1 (all 1,616 items): **{mc}**; the simulated test sets: D_bs {bs},
D_ss {ss}, D_r {r}. On the first {slice_n} MDC test items: {slice_f1}
(`python -m bapjax.predict --checkpoint=pretrained --corpus @mdc --split test --limit {slice_n} --evaluate`).

Made by `python -m bapjax.export --checkpoint=<that run's workdir> --corpus @mdc --out bapjax/pretrained`:
config.json, vocab.json and decode.json are the run's; checkpoints/best holds only its evaluation
weights (the moving average), no optimizer state. builder.json holds these figures.

Licenses: the model was trained on the Minecraft Dialogue Corpus (Narayan-Chen et al., 2019),
released under the University of Illinois/NCSA Open Source License; its word embeddings were
initialised from GloVe 6B (Pennington et al., 2014), released under the Open Data Commons Public
Domain Dedication and License (PDDL). The weights here are bapjax's own training; no third-party
weights are included.
"""


def model_card(record: dict) -> str:
    decoding, test = record["decoding"], record["test_micro_overall"]
    rules = ", ".join(f"{kind} {rule['rule']} {rule['value']}" for kind, rule in (decoding.get("rules") or {}).items())
    return MODEL_CARD.format(
        command=record["command"], commit=(record["commit"] or "")[:7], train_items_seen=record["train_items_seen"] or 0,
        wall_minutes=record["wall_minutes"], host_speed=record.get("host_bench_b32_items_per_s") or "(not measured)",
        samples=decoding.get("samples"), temperature=decoding.get("temperature"),
        rules=rules or "none", mc=test.get("mc"), bs=test.get("bs"), ss=test.get("ss"), r=test.get("r"),
        slice_n=record["mdc_test_slice"]["items"], slice_f1=record["mdc_test_slice"]["micro_overall"])


def export(checkpoint: str, out: str, corpus: str, slice_items: int = SLICE_ITEMS,
           host_speed: float | None = None) -> dict:
    """Write the builder directory `out` from the run `checkpoint`; returns builder.json's record."""
    out_dir = Path(out).expanduser().resolve()  # Orbax takes absolute paths
    paths.check_writable_dir(out_dir, "--out", keep_folders=False)  # before any work, leaving nothing behind
    paths.check_replaceable(out_dir, "bapjax.export", "a builder directory")
    run_dir = checkpoints.find_run_dir(checkpoint)
    record = builder_record(run_dir, corpus, slice_items, host_speed)
    params, step = checkpoints.load_params(run_dir)
    if out_dir.exists():
        shutil.rmtree(out_dir)
    paths.mark_owned(out_dir, "bapjax.export")
    for name in COPIED:
        run_checks.read_run_file(run_dir, name)  # a damaged file names itself here, not at load time
        shutil.copyfile(run_dir / name, out_dir / name)
    manager = ocp.CheckpointManager(out_dir / "checkpoints" / "best",
                                    options=ocp.CheckpointManagerOptions(max_to_keep=1, create=True))
    try:
        # host arrays: the checkpoint restores onto any number of devices
        state = {"params": jax.device_get(params)}
        manager.save(step, args=ocp.args.Composite(state=ocp.args.StandardSave(state)), force=True)
        manager.wait_until_finished()
    finally:
        manager.close()
    record["step"] = step
    (out_dir / checkpoints.BUILDER_RECORD).write_text(json.dumps(record, indent=1) + "\n")
    (out_dir / "README.md").write_text(model_card(record))
    return record


def main(argv) -> int:
    if len(argv) > 1:
        raise UserError(f"unexpected arguments: {' '.join(argv[1:])}")
    cli.require_flags("checkpoint", "out")
    if FLAGS.slice_items < 1:
        raise UserError(f"--slice_items is {FLAGS.slice_items}; expected an integer >= 1")
    run_eval.use_runs_cpu_devices([FLAGS.checkpoint])  # its checkpoint restores onto the devices it trained on
    record = export(FLAGS.checkpoint, FLAGS.out, FLAGS.corpus or "@mdc", FLAGS.slice_items, FLAGS.host_speed)
    size = sum(f.stat().st_size for f in Path(FLAGS.out).rglob("*") if f.is_file())
    print(f"wrote {FLAGS.out} ({size / 1e6:.1f} MB): step {record['step']}, MDC test "
          f"{record['test_micro_overall'].get('mc')}, first {record['mdc_test_slice']['items']} items "
          f"{record['mdc_test_slice']['micro_overall']}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    cli.run(main, define_flags)
