"""What a finished run says at its end: where it is, what it trained and kept, its STOP rule, one
headline F1 per test split (`summary_lines`, before the final evaluation's JSON line), and last
the commands to run on it next (`next_commands`); read from the workdir's files, so a rerun of a
finished run can say the same."""

from __future__ import annotations

import json
from typing import Mapping

from etils import epath

from bapjax.data import sources
from bapjax.decoding import DecodeSettings
from bapjax.training import run_checks, run_eval


def _best_step(workdir: epath.Path) -> int | None:
    steps = [int(p.name) for p in (workdir / "checkpoints" / "best").glob("*") if p.name.isdigit()]
    return max(steps) if steps else None


def source_flags(source: Mapping) -> str:
    """The item-source flags of a config's data source, as the commands take them."""
    if source.get("corpus"):
        return f"--corpus {source['corpus']}"
    if source.get("store"):
        return f"--store {source['store']}" + (f" --dataset {source['dataset']}" if source.get("dataset") else "")
    gen = source.get("generate") or {}
    if gen:
        sizes = (gen["train_items"], gen["val_items"], gen["test_items"])
        return f"--corpus {gen.get('out') or sources.generated_entry(gen['dataset'], int(gen['seed']), sizes)}"
    return "--corpus PATH"


def summary_lines(workdir: epath.Path, results: Mapping[str, Mapping]) -> list[str]:
    """The run's summary (before the JSON line of `results`)."""
    config = json.loads(run_checks.last_run_config(workdir).read_text())
    records = run_checks.invocations(workdir)
    last = records[-1] if records else {}
    steps, batch = int(last.get("last_step", 0)), int(config["train"]["batch_size"])
    wall = sum(float(r.get("wall_seconds", 0)) for r in records)
    select_by, best = config["train"].get("select_by", "loss"), _best_step(workdir)
    kept = (f"checkpoints/best step {best} (the best {'val loss' if select_by == 'loss' else select_by})"
            if best is not None else f"the last state, step {steps} (no val split to choose by)")
    chosen = run_eval.read_decode_choice(workdir)
    if chosen is not None:
        rule = f"{DecodeSettings.describe_choice(chosen)} (chosen on {chosen.get('chosen_on', 'val')})"
    else:
        rule = f"{config['eval']['stop_rule']} at {config['eval']['stop_threshold']} (the config's)"
    scores = ", ".join(f"{key.replace('_test', '')} {100 * report['micro']['Overall']['overall']:.1f}"
                       for key, report in results.items() if report.get("micro", {}).get("Overall", {}).get("overall") is not None)
    # a resumed run: the run's totals over all its invocations, then what the last invocation did
    in_all = f" in all, over {len(records)} invocations" if len(records) > 1 else ""
    lines = [f"run finished: {workdir}",
             f"  trained {steps:,} steps ({steps * batch:,} items) in {wall / 60:.1f} min{in_all}; kept {kept}"]
    if in_all:
        first = int(last.get("first_step", 0))
        lines.append(f"  this invocation: steps {first:,} to {steps:,} in {float(last.get('wall_seconds', 0)) / 60:.1f} min")
    lines += [f"  STOP rule {rule}", f"  micro Overall F1 (test): {scores or 'no test split evaluated'}"]
    compiled = [r["compiled"] for r in records if r.get("compiled")]
    if compiled:
        lines.append(f"  compiled {_programs(compiled)}{in_all}"
                     + (f"; this invocation {_programs([last['compiled']])}" if in_all and last.get("compiled") else ""))
    return lines


def _programs(compiled: list[dict]) -> str:
    programs, cached = sum(c["programs"] for c in compiled), sum(c["from_cache"] for c in compiled)
    seconds = sum(c["compile_seconds"] + c["trace_seconds"] for c in compiled)
    return (f"{programs} programs in {seconds / 60:.1f} min, tracing included ({cached} read from the persistent "
            "compilation cache)")


def next_commands(workdir: epath.Path, results: Mapping[str, Mapping]) -> list[str]:
    """The commands to run on the run next, on the first evaluated split (the run's last lines,
    after the JSON line, where a reader looks when it ends); none when nothing was evaluated."""
    first = next(iter(results), None)
    if not first:
        return []
    config = json.loads(run_checks.last_run_config(workdir).read_text())
    name, _, split = first.rpartition("_")
    items = source_flags(config["data"]["sources"].get(name, {}))
    return ["next:",
            f"  python -m bapjax.predict --checkpoint {workdir} {items} --split {split} --out {workdir}/{name}_{split}.jsonl",
            f"  python -m bapjax.report --checkpoint {workdir} {items} --split {split} --out {workdir}/report",
            f"  python -m bapjax.play --checkpoint {workdir}"]
