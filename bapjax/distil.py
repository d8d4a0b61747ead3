"""Teacher outputs for sequence-level distillation: an ensemble's predictions over a data source's
training items, the targets a student trains on (`config.data.sources.<name>.teacher`,
`bapjax.data.teacher`).

    python -m bapjax.distil --runs pretrained,runs/exp/cl_la-frame-s12 --out runs/teacher/mc-train-pair
    python -m bapjax.distil --runs runs/a,runs/b --config=configs/cpu_experiment.py:cl_la --source mc --out DIR

Each `--runs` entry is what `bapjax.ensemble --runs` takes (a finished workdir, one kept step, or
`pretrained`), and the items are decoded as that command decodes them (`bapjax.decoding.Ensemble`):
every member's greedy pass and `--samples` draws at `--temperature` with `--sampler`, pooled, then
the two `--rules` fixed beforehand (the items on an empty board, then the others), with no choice on
val; each member featurizes the items as it was trained to (its Builder's frame included) and the
predictions are in the items' world coordinates. The defaults are the pair decoding of
results/runs/cl_la-pair-s0 (128 draws per member at 0.8, inverse_cdf, EB select 0.075, NEB vote
0.175). The items are the train split of the source `--source` (default mc) of `--config` (default:
the first run's own config, the items it trained on), loaded as training loads them
(`bapjax.data.sources.load_source`: the augmented MDC, 14,836 items, for the MDC configs), the
first `--limit` of them when given.

`--out` receives predictions.jsonl.gz (a record per item: its id, the actions, the item's digest)
and teacher.json (each run's provenance as ensemble.json records it, the decoding, the source, the
code version and each invocation with its dates and minutes). The predictions are written a chunk
of `--chunk_items` items at a time, so a stopped command run again with the same flags goes on
where it stopped: the items of whole chunks are kept, a damaged last chunk is cut (and named), and
the file it ends with is the one an uninterrupted run writes. A folder holding another teacher
(teacher.json with other runs, decoding, items or chunks) is refused.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

from absl import flags

from bapjax import cli, ensemble, paths
from bapjax.corpus import load
from bapjax.data import sources, teacher
from bapjax.decoding import SAMPLERS, DecodeSettings, Ensemble
from bapjax.errors import UserError
from bapjax.training import checkpoints, run_checks, run_eval

FLAGS = flags.FLAGS

RULES = ("select:0.075", "vote:0.175")  # EB, NEB: the best on the pooled val of six agg runs (docs/training.md)


def define_flags() -> None:
    cli.flag("list", "runs", None, "The teacher: finished training workdirs (or `pretrained`), comma-separated, "
             "decoded together as python -m bapjax.ensemble decodes them.")
    cli.flag("string", "out", None, "Output folder (predictions.jsonl.gz, teacher.json); run again to resume.")
    cli.define_config_flag("A training config whose --source train items are decoded (default: the first run's own "
                           "config, the items it trained on):")
    cli.flag("string", "source", "mc", "The data source of the config whose train items are decoded.")
    cli.flag("integer", "samples", 128, "Draws per member.")
    cli.flag("float", "temperature", 0.8, "Temperature of the draws.")
    cli.flag("enum", "sampler", "inverse_cdf", "How the draws pick each action.", enum_values=list(SAMPLERS))
    cli.flag("list", "rules", list(RULES), "Two rules RULE:VALUE, for the items on an empty board, then for the others.")
    cli.flag("integer", "limit", 0, "Only the first N train items of the source (0: all).")
    cli.flag("integer", "chunk_items", 512, "Items decoded and written at a time (what a stopped run loses at most).")


def now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime())


def run_dirs(runs) -> list:
    """Each `--runs` entry's workdir (UserError naming the flag: one that is not a run)."""
    try:
        return [checkpoints.find_run_dir(run) for run in runs]
    except checkpoints.CheckpointError as err:
        raise UserError(f"--runs: {err}") from None


def existing_record(out: Path) -> dict | None:
    """The teacher.json `out` holds (None: a new folder); UserError for a folder holding predictions
    without it."""
    if (out / teacher.RECORD).exists():
        return teacher.read_record(out, f"--out {out}")
    if (out / teacher.PREDICTIONS).exists():
        raise UserError(f"--out {out}: holds {teacher.PREDICTIONS} without {teacher.RECORD}; choose another folder")
    return None


def source_items(config, name: str, what: str) -> tuple[dict, list]:
    """(the source's config block, its train items) of `config`'s source `name`."""
    block = config.data.sources.get(name, None)
    if block is None or not sources.source_is_set(block):
        used = [n for n, s in config.data.sources.items() if sources.source_is_set(s)]
        raise UserError(f"--source {name}: {what} has no such source (its sources: {', '.join(used) or 'none'})")
    items = load.first_items(sources.load_source(name, block)["train"], FLAGS.limit)
    if not items:
        raise UserError(f"--source {name}: {what} gives it no train items")
    return {key: value for key, value in block.to_dict().items() if key != "teacher"}, items  # what makes the items


def _indexed(value):
    """`value` with every list a dict by index, so that a field in a list has a dotted name."""
    if isinstance(value, dict):
        return {key: _indexed(v) for key, v in value.items()}
    if isinstance(value, list):
        return {str(i): _indexed(v) for i, v in enumerate(value)}
    return value


def differences(old: dict, new: dict) -> str:
    """The fields where two teachers' "defines" differ, in a few words."""
    fields = run_checks.differing_fields(_indexed(old), _indexed(new))
    shown = [f"{key} {theirs!r} there, {mine!r} here" for key, theirs, mine in fields[:3]]
    return "; ".join(shown) + (f"; and {len(fields) - 3} more" if len(fields) > 3 else "")


def main(argv) -> int:
    if len(argv) > 1:
        raise UserError(f"unexpected arguments: {' '.join(argv[1:])}")
    started = time.time()
    cli.require_flags("runs", "out")
    DecodeSettings.check_flags(FLAGS.samples, FLAGS.temperature)
    if FLAGS.samples < 1:
        raise UserError(f"--samples is {FLAGS.samples}; the vote needs draws: an integer >= 1")
    rules = DecodeSettings.parse_rules(FLAGS.rules, len(FLAGS.runs))
    load.check_limit(FLAGS.limit)
    if FLAGS.chunk_items < 1:
        raise UserError(f"--chunk_items is {FLAGS.chunk_items}; expected an integer >= 1")
    out = Path(FLAGS.out)
    paths.check_writable_dir(out, "--out", keep_folders=False)  # made when the first file is written
    before = existing_record(out)
    dirs = run_dirs(FLAGS.runs)
    run_eval.use_runs_cpu_devices(FLAGS.runs)
    if FLAGS.config is not None:
        config, what = run_checks.with_defaults(FLAGS.config), "--config"
    else:
        config, what = run_checks.with_defaults(run_checks.read_run_file(dirs[0], "config.json")), \
            f"the config of {FLAGS.runs[0]}"
    block, items = source_items(config, FLAGS.source, what)
    decoding = {"samples": FLAGS.samples, "temperature": FLAGS.temperature, "sampler": FLAGS.sampler, "first_draw": 0,
                "rules": {kind: {"rule": rule, "value": value} for kind, (rule, value) in rules.items()}}
    defines = {"members": [{"run_dir": os.path.abspath(str(d)), "step": None} for d in dirs],
               "decoding": decoding, "chunk_items": FLAGS.chunk_items,
               "source": {"name": FLAGS.source, "split": "train", "block": block, "limit": FLAGS.limit,
                          "items": len(items)}}

    def refuse_another() -> None:
        """--out holding a teacher of other `defines`: first before the runs are loaded (their steps
        not compared), then with their steps."""
        if before is None:
            return
        known, theirs = json.loads(json.dumps(defines)), before["defines"]
        if known["members"][0]["step"] is None:
            theirs = {**theirs, "members": [{**m, "step": None} for m in theirs.get("members", [])]}
        if known != theirs:
            raise UserError(f"--out {out}: holds another teacher ({teacher.RECORD}: {differences(theirs, known)}); "
                            "choose another folder, or the flags it was made with to resume it")

    refuse_another()
    predictions_path = out / teacher.PREDICTIONS
    found = teacher.read_chunks(predictions_path)
    digests = {item.item_id: teacher.item_digest(item) for item in items}
    foreign = [i for i, record in found.records.items() if digests.get(i) != record.get("item_digest")]
    if foreign:
        raise UserError(f"--out {out}: {teacher.PREDICTIONS} holds {len(foreign)} records of other items (first: "
                        f"{foreign[0]}) than this source's; choose another folder")
    commit = run_checks.code_version()
    members = [run_eval.load_decoder(run) for run in FLAGS.runs]
    defines["members"] = [{**m, "step": member.run.step} for m, member in zip(defines["members"], members)]
    refuse_another()
    if before is not None and before.get("finished") and not found.damaged_bytes and len(found.records) == len(items):
        print(f"{out} holds this teacher, finished ({len(items)} items, {before['finished']})", file=sys.stderr)
        return 0
    recorded = [ensemble.member_record(path, member) for path, member in zip(FLAGS.runs, members)]
    if found.damaged_bytes:
        with open(predictions_path, "r+b") as handle:
            handle.truncate(found.good_bytes)
        print(f"{predictions_path}: cut a damaged last chunk ({found.damaged_bytes} bytes); its items are decoded "
              "again", file=sys.stderr, flush=True)
    done = set(found.records)
    record = {"command": "python -m bapjax.distil " + " ".join(sys.argv[1:]), "commit": commit, "defines": defines,
              "members": recorded, "config": what, "items": len(items), "predictions": teacher.PREDICTIONS,
              "started": now(), "finished": None, "decoded": len(done), "invocations": []}
    if before is not None:
        record.update({key: before[key] for key in ("command", "commit", "started", "invocations") if key in before})
    invocation = {"command": "python -m bapjax.distil " + " ".join(sys.argv[1:]), "commit": commit, "started": now(),
                  "items_decoded": 0, "minutes": 0.0}
    record["invocations"].append(invocation)

    def write_record() -> None:
        invocation["minutes"] = round((time.time() - started) / 60, 2)
        record["wall_minutes"] = round(sum(float(one["minutes"]) for one in record["invocations"]), 2)
        paths.write_atomically(out / teacher.RECORD, lambda p: p.write_text(json.dumps(record, indent=1) + "\n"),
                               "the teacher's record")

    chunks = [items[lo:lo + FLAGS.chunk_items] for lo in range(0, len(items), FLAGS.chunk_items)]
    todo = [[item for item in chunk if item.item_id not in done] for chunk in chunks]
    left = sum(len(chunk) for chunk in todo)
    if done:
        print(f"{out}: {len(done)} of {len(items)} items decoded already; {left} to go", file=sys.stderr, flush=True)
    out.mkdir(parents=True, exist_ok=True)
    write_record()
    teaching = Ensemble(members, FLAGS.samples, FLAGS.temperature, FLAGS.sampler)
    choice = teaching.choose(None, [], (), (), rules)
    progress = cli.Progress(left)
    decoded = 0
    for number, chunk in enumerate(todo, 1):
        if not chunk:
            continue
        predicted = teaching.predict(teaching.pool(chunk), choice, chunk)
        teacher.append_chunk(predictions_path, [teacher.record_of(item, predicted[item.item_id]) for item in chunk])
        decoded += len(chunk)
        invocation["items_decoded"] = decoded
        record["decoded"] = len(done) + decoded
        write_record()
        print(f"chunk {number}/{len(chunks)}: {progress.line(decoded)}", file=sys.stderr, flush=True)
    final = teacher.read_chunks(predictions_path).records
    if set(final) != set(digests):
        raise UserError(f"{predictions_path}: holds {len(final)} records, {len(items)} expected; run the command again")
    record["finished"] = now()
    write_record()
    actions = [len(r["actions"]) for r in final.values()]
    minutes = (time.time() - started) / 60
    measured = progress.measure(decoded) if decoded else None  # compilation and loading left out
    rate = f" ({measured[0]:.2f} items/s decoding)" if measured else ""
    print(f"{len(items)} items of {FLAGS.source} train, {len(members)} members, EB {FLAGS.rules[0]}, NEB {FLAGS.rules[1]} "
          f"({FLAGS.samples} draws each at T {FLAGS.temperature:g}): {decoded} decoded here in {minutes:.1f} min{rate}, "
          f"{len(done)} before; {sum(actions) / len(actions):.2f} actions per item, {actions.count(0)} with none; "
          f"wrote {out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    cli.run(main, define_flags)
