"""The CPU model options measured on MDC val at one item budget.

    python -m bapjax.analysis.collect_ablation runs/abl/base-s0 runs/abl/base-s1 runs/abl/film-s0 ... \
      [--out results/cpu_ablation] [--bootstrap 1000]

Each argument is a finished `python -m bapjax.train` workdir of the same data and item budget
that evaluated `mc:val` at the end (`--config.eval.final_splits="('mc:val',)"`; the test split is
not decoded while options are chosen). A row: the model fields, feature settings and optimizer
settings that differ from the first run, MDC val micro Overall / Location / strict F1 (the final
evaluation, the kept checkpoint, STOP rule chosen on val), the lowest val loss, training items,
and the training rate the run logged (its mean over the run, machine load included: compare
rates with `benchmarks/bench_train.py --compare_config`, not with this column).

From each run's MDC val predictions (predictions/mc_val.jsonl) also: micro Overall F1 of NEB
items by what the last instruction says and by where the build starts
(`bapjax.analysis.length_ceiling.breakdown`), predicted / reference net actions. Runs with the
same options (seeds) form an option set: its row holds the seed means, and the two-level
bootstrap of `bootstrap.two_level` (the val items resampled, paired across runs, and each set's
seeds resampled) gives the 95% interval of its difference to the first run's set. An option is a
model, feature, optimizer (`TRAIN_FIELDS`) or curriculum field that differs from the first run's.
Writes OUT.json and OUT.md.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

from bapjax import paths
from bapjax.analysis import bootstrap, length_ceiling
from bapjax.analysis.collect_experiment import collect_run, entry_per_line
from bapjax.corpus import mdc
from bapjax.data.input_pipeline import feature_defaults
from bapjax.evaluation import evaluator
from bapjax.models.builder import model_defaults
from bapjax.world import jsonl

TRAIN_FIELDS = ("learning_rate", "schedule", "warmup_steps", "final_lr_fraction", "weight_decay", "batch_size")


def dotted(section: dict, prefix: str = "") -> dict:
    """A nested config section as one level of dotted keys ({"world": {"film": True}} -> {"world.film": True})."""
    out = {}
    for key, value in section.items():
        if isinstance(value, dict):
            out.update(dotted(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


def ablation_row(run: Path, reference_model: dict | None, reference_train: dict | None = None,
                 reference_features: dict | None = None, reference_curriculum: dict | None = None) -> dict:
    record = collect_run(run)
    model = record["config"]["model"]
    lines = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines() if line.strip()]
    val_losses = [line["loss"] for line in lines if line["kind"] == "val" and "loss" in line]
    rates = [line["items_per_s"] for line in lines if line["kind"] == "train" and "items_per_s" in line]
    report = record["eval"].get("mc_val")
    if report is None:
        raise SystemExit(f"{run}: final_eval.json has no mc_val (train with --config.eval.final_splits=\"('mc:val',)\")")
    model = dotted(model)  # a model section of parts: its fields as "world.features", ...
    reference = dotted(reference_model or {})
    # a field newer than the reference run has its default there (a flat section predates the parts)
    defaults = dotted(model_defaults(model["name"])) if "name" in model else {}
    changed = {k: v for k, v in model.items()
               if reference_model is not None and reference.get(k, defaults.get(k)) != v}
    for key in TRAIN_FIELDS:  # the optimizer settings an option may come with
        value = record["config"]["train"].get(key)
        if reference_train is not None and reference_train.get(key) != value:
            changed[f"train.{key}"] = value
    feature_fields = feature_defaults()  # a field newer than the reference run has its default there
    for key, value in record["config"].get("features", {}).items():  # e.g. features.max_text_tokens
        if reference_features is not None and reference_features.get(key, feature_fields.get(key)) != value:
            changed[f"features.{key}"] = value
    for key, value in record["config"].get("curriculum", {}).items():  # e.g. curriculum.metric: "L_A"
        if reference_curriculum is not None and reference_curriculum.get(key) != value:
            changed[f"curriculum.{key}"] = value
    return {"options": changed, "command": record["command"], "commit": record["commit"],
            "train_items_seen": record["train_items_seen"], "wall_minutes": record["wall_minutes"],
            "stop_rule": record["stop_rule"],
            "mc_val_micro_overall": report["micro"]["Overall"]["overall"],
            "mc_val_micro_location": report["micro"]["Overall"]["location"],
            "mc_val_strict_micro": report["strict_micro"],
            "best_val_loss": min(val_losses) if val_losses else None,
            "logged_items_per_s": rates[-1] if rates else None}


SUBGROUPS = (("instruction: horizontal", "horizontal words"), ("instruction: vertical only", "vertical only"),
             ("instruction: neither", "neither"), ("start: at or next to the last action", "start at/next to last"),
             ("start: 2+ cells away", "start 2+ away"))


def val_breakdown(run: Path, items: list) -> dict:
    """The subgroup rows (`length_ceiling.breakdown`) and per-item fairer counts (tp, n_pred,
    n_ref, in `items`' order) of a run's MDC val predictions."""
    path = jsonl.stored(run / "predictions" / "mc_val.jsonl")
    if not path.exists():
        raise SystemExit(f"{run}: no {path.name} (train with --config.eval.final_splits=\"('mc:val',)\")")
    predictions = jsonl.read_predictions(path)
    _, scores, _ = evaluator.evaluate_items(items, predictions)
    return {"subgroups": length_ceiling.breakdown(items, predictions),
            "per_item": {"tp": scores.fair_tp, "n_pred": scores.n_pred, "n_ref": scores.n_ref}}


def option_sets(rows: dict) -> dict:
    """{label: [run names]} of runs with the same options, in first-seen order."""
    sets: dict = {}
    for name, row in rows.items():
        label = ", ".join(f"{k}={v}" for k, v in row["options"].items()) or "(reference)"
        sets.setdefault(label, []).append(name)
    return sets


def compare_sets(rows: dict, per_item: dict, samples: int, seed: int = 0) -> dict:
    """Per option set: seed means of the row's figures, and with `samples` > 0 the 95% interval of
    its seed-mean micro Overall F1 minus the first set's by the two-level bootstrap
    (`bootstrap.two_level`: the val items resampled once per replicate for every run, each set's
    seeds resampled; with one seed per set, over the items alone)."""
    sets = option_sets(rows)
    first = next(iter(sets))
    boot = (bootstrap.two_level({label: [per_item[name] for name in names] for label, names in sets.items()},
                                [(label, first) for label in sets], samples, seed) if samples else None)
    out = {}
    for label, names in sets.items():
        mean = lambda key: float(np.mean([rows[name][key] for name in names]))  # noqa: E731
        entry = {"runs": names, "seeds": [rows[name]["seed"] for name in names],
                 **{key: mean(key) for key in ("mc_val_micro_overall", "mc_val_micro_location", "mc_val_strict_micro",
                                               "best_val_loss", "predicted_net", "reference_net")},
                 "subgroups": {short: float(np.mean([rows[name]["subgroups"][key]["micro_overall"] for name in names]))
                               for key, short in SUBGROUPS}}
        if samples:
            diff = boot["differences"][f"{label} - {first}"]
            entry["difference_to_first"] = {key: diff[key] for key in ("interval", "share_above_0")}
        out[label] = entry
    return out


def sets_markdown(sets: dict, samples: int) -> str:
    out = ["| options (vs the first run) | seeds | MDC val micro Overall F1 (seed mean) | vs first: 95% interval "
           f"({samples} resamplings of the items, paired, and the seeds) | Location | strict | " + " | ".join(s for _, s in SUBGROUPS)
           + " | predicted / reference net |",
           "|---|---|---:|---|---:|---:|" + "---:|" * len(SUBGROUPS) + "---:|"]
    for label, e in sets.items():
        diff = e.get("difference_to_first")
        interval = "-" if diff is None or label == next(iter(sets)) else (
            f"{100 * diff['interval'][0]:+.1f} to {100 * diff['interval'][1]:+.1f}")
        out.append(f"| {label} | {', '.join(map(str, e['seeds']))} | {100 * e['mc_val_micro_overall']:.1f} | {interval} "
                   f"| {100 * e['mc_val_micro_location']:.1f} | {100 * e['mc_val_strict_micro']:.1f} | "
                   + " | ".join(f"{100 * v:.1f}" for v in e["subgroups"].values())
                   + f" | {e['predicted_net']:.0f} / {e['reference_net']:.0f} |")
    return "\n".join(out) + "\n"


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
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", nargs="+", type=Path)
    parser.add_argument("--out", default="results/cpu_ablation")
    parser.add_argument("--corpus", default="@mdc", help="the MDC the runs were validated on")
    parser.add_argument("--bootstrap", type=int, default=1000, help="bootstrap replicates (0: none)")
    args = parser.parse_args()
    items = mdc.load_corpus(paths.mdc_path(args.corpus)).split("val")
    rows, per_item, reference = {}, {}, None
    for run in args.runs:
        config = json.loads((run / "config.json").read_text())
        if reference is None:
            reference = config
        rows[run.name] = ablation_row(run, reference["model"], reference["train"], reference.get("features"),
                                     reference.get("curriculum", {}))
        rows[run.name]["seed"] = config.get("seed")
        found = val_breakdown(run, items)
        per_item[run.name] = found["per_item"]
        rows[run.name]["subgroups"] = found["subgroups"]
        rows[run.name]["predicted_net"] = found["subgroups"]["all"]["predicted_net"]
        rows[run.name]["reference_net"] = found["subgroups"]["all"]["reference_net"]
    sets = compare_sets(rows, per_item, args.bootstrap)
    command = "python -m bapjax.analysis.collect_ablation " + " ".join(sys.argv[1:])
    Path(f"{args.out}.json").write_text(entry_per_line({"command": command, "runs": rows, "option_sets": sets}))
    text = f"`{command}`\n\nOption sets (seed means):\n\n{sets_markdown(sets, args.bootstrap)}\nRuns:\n\n{markdown(rows)}"
    Path(f"{args.out}.md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
