"""The CPU model options measured on MDC val at one item budget.

    python -m bapjax.analysis.collect_ablation runs/abl/base runs/abl/film ... [--out results/cpu_ablation]

Each argument is a finished `python -m bapjax.train` workdir of the same data and item budget
that evaluated `mc:val` at the end (`--config.eval.final_splits="('mc:val',)"`; the test split is
not decoded while options are chosen). A row: the model fields, feature settings and optimizer settings that differ from the first run, MDC val micro Overall / Location / strict F1 (the final evaluation, best-val-loss checkpoint,
STOP rule chosen on val), the lowest val loss, training items, and the training rate the run
logged (its mean over the run, machine load included: compare rates with
`benchmarks/bench_train.py --compare_config`, not with this column). Writes OUT.json and OUT.md.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from bapjax.analysis.collect_experiment import collect_run

TRAIN_FIELDS = ("learning_rate", "schedule", "warmup_steps", "final_lr_fraction", "weight_decay", "batch_size")


def ablation_row(run: Path, reference_model: dict | None, reference_train: dict | None = None,
                 reference_features: dict | None = None) -> dict:
    record = collect_run(run)
    model = record["config"]["model"]
    lines = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines() if line.strip()]
    val_losses = [line["loss"] for line in lines if line["kind"] == "val" and "loss" in line]
    rates = [line["items_per_s"] for line in lines if line["kind"] == "train" and "items_per_s" in line]
    report = record["eval"].get("mc_val")
    if report is None:
        raise SystemExit(f"{run}: final_eval.json has no mc_val (train with --config.eval.final_splits=\"('mc:val',)\")")
    from bapjax.models.builder import model_defaults

    defaults = model_defaults()  # a field newer than the reference run has its default there
    changed = {k: v for k, v in model.items()
               if reference_model is not None and reference_model.get(k, defaults.get(k)) != v}
    for key in TRAIN_FIELDS:  # the optimizer settings an option may come with
        value = record["config"]["train"].get(key)
        if reference_train is not None and reference_train.get(key) != value:
            changed[f"train.{key}"] = value
    for key, value in record["config"].get("features", {}).items():  # e.g. features.max_text_tokens
        if reference_features is not None and reference_features.get(key) != value:
            changed[f"features.{key}"] = value
    return {"options": changed, "command": record["command"], "commit": record["commit"],
            "train_items_seen": record["train_items_seen"], "wall_minutes": record["wall_minutes"],
            "stop_rule": record["stop_rule"],
            "mc_val_micro_overall": report["micro"]["Overall"]["overall"],
            "mc_val_micro_location": report["micro"]["Overall"]["location"],
            "mc_val_strict_micro": report["strict_micro"],
            "best_val_loss": min(val_losses) if val_losses else None,
            "logged_items_per_s": rates[-1] if rates else None}


def markdown(rows: dict) -> str:
    out = ["| run | options (vs the first run) | MDC val micro Overall F1 | Location F1 | strict F1 | best val loss "
           "| train items | logged items/s |", "|---|---|---|---|---|---|---|---|"]
    for name, r in rows.items():
        options = ", ".join(f"{k}={v}" for k, v in r["options"].items()) or "(reference)"
        out.append(f"| {name} | {options} | {100 * r['mc_val_micro_overall']:.1f} | {100 * r['mc_val_micro_location']:.1f} "
                   f"| {100 * r['mc_val_strict_micro']:.1f} | {r['best_val_loss']:.4f} | {r['train_items_seen']:,} "
                   f"| {r['logged_items_per_s']:.1f} |")
    return "\n".join(out) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("runs", nargs="+", type=Path)
    parser.add_argument("--out", default="results/cpu_ablation")
    args = parser.parse_args()
    rows, reference = {}, None
    for run in args.runs:
        config = json.loads((run / "config.json").read_text())
        if reference is None:
            reference = config
        rows[run.name] = ablation_row(run, reference["model"], reference["train"], reference.get("features"))
    Path(f"{args.out}.json").write_text(json.dumps(rows, indent=1) + "\n")
    Path(f"{args.out}.md").write_text(markdown(rows))
    print(markdown(rows))


if __name__ == "__main__":
    main()
