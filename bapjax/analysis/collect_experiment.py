"""Rebuild the experiment's results (JSON, markdown table, learning curves) from run directories.

    python -m bapjax.analysis.collect_experiment runs/exp/mc runs/exp/agg runs/exp/cl runs/exp/cl_la \
        [--out results/cpu_experiment]

Each run directory is a finished `python -m bapjax.train` workdir; its name is the row's key.
Nothing is typed by hand: the command and commit come from the run's `runs.jsonl`, the config
from `config.json`, the evaluation from `final_eval.json` (exactly what training printed last),
the STOP rule from `decode.json`, the curves from `metrics.jsonl`. Runs named `<variant>-s<seed>`
(configs/cpu_experiment.py's `<variant>,<seed>`) are seeds of one variant: OUT.json has one record
per variant (its first seed's, plus `"seeds": [{"seed", "micro_overall", "strict_micro",
"wall_minutes", "train_items_seen"}, ...]` on the MDC test split, every seed listed, and their
`"seed_mean"`), and OUT.md a table of the seeds. Writes OUT.json
(``{name: {"command", "commit", "config", "train_items_seen", "wall_minutes", "stop_rule",
"eval": {"mc_test": <evaluator JSON>, "bs_test": ..., ...}}}``), OUT.md (the table beside the
paper's Table 5) and OUT_curves.png (val loss and val micro Overall F1 of every run).
Where the runs kept their MDC test predictions (predictions/mc_test.jsonl, or mc_test.jsonl.gz as
results/runs/ keeps them), each variant also
gets `"mc_test_subgroups"`: micro Overall F1 of NEB test items by what the last instruction says
and by where the build starts (`bapjax.analysis.length_ceiling.breakdown`), seed mean and per seed,
and OUT.md its table (`--corpus`: the MDC the runs were tested on).
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from bapjax import paths  # noqa: E402
from bapjax.analysis import length_ceiling  # noqa: E402
from bapjax.corpus import mdc  # noqa: E402
from bapjax.world import jsonl  # noqa: E402

PREDICTIONS = "mc_test.jsonl"  # a run's MDC test predictions, in its predictions/ folder (or gzip-compressed beside)

# The paper's numbers on each test set (micro Overall fairer F1; D_mc = the clean v2 test set):
# Table 5 (GRU models), Table 6 (M': BERT + Transformer decoder), and for D_mc the macro Overall
# (Table 8) and micro Location F1 (Table 7) where the paper gives them.
PAPER_ROWS = {
    "paper M_mc (GPU, Table 5)": {"bs_test": 35.2, "ss_test": 19.1, "r_test": 12.4, "mc_test": 27.3,
                                  "mc_macro": 28.1, "mc_location": 27.7},
    "paper M_agg (GPU, Table 5)": {"bs_test": 83.4, "ss_test": 68.8, "r_test": 63.6, "mc_test": 30.3},
    "paper M_agg+cl (GPU, Table 5)": {"bs_test": 84.0, "ss_test": 68.8, "r_test": 60.3, "mc_test": 33.0,
                                      "mc_macro": 34.5, "mc_location": 33.6},
    "paper M'_mc (GPU, Table 6)": {"bs_test": 29.1, "ss_test": 17.8, "r_test": 12.0, "mc_test": 23.0},
    "paper M'_agg (GPU, Table 6)": {"bs_test": 70.2, "ss_test": 55.0, "r_test": 36.8, "mc_test": 29.4},
    "paper M'_agg+cl (GPU, Table 6)": {"bs_test": 75.9, "ss_test": 67.4, "r_test": 45.3, "mc_test": 32.3},
}
# Paper Table 7: micro Type, Color, Location, Shape, Overall F1 on the clean D_mc test set.
PAPER_TABLE7 = [("M_mc", "EB", (76.4, 75.2, 53.5, 56.0, 53.2)), ("M_mc", "NEB", (63.8, 60.8, 24.6, 33.8, 24.2)),
                ("M_mc", "Overall", (65.2, 62.4, 27.7, 36.3, 27.3)),
                ("M_agg+cl", "EB", (81.4, 80.0, 61.8, 65.5, 61.6)), ("M_agg+cl", "NEB", (66.0, 63.2, 30.2, 39.4, 29.6)),
                ("M_agg+cl", "Overall", (67.7, 65.0, 33.6, 42.2, 33.0))]
SETS = ("mc_test", "bs_test", "ss_test", "r_test")


def entry_per_line(record: dict) -> str:
    """JSON of a {key: value or {name: entry}} record with one line per entry (a run, an option set, a
    variant's field)."""
    parts = []
    for key, value in record.items():
        if isinstance(value, dict) and value:
            inner = ",\n".join(f"  {json.dumps(name)}: {json.dumps(entry)}" for name, entry in value.items())
            parts.append(f" {json.dumps(key)}: {{\n{inner}\n }}")
        else:
            parts.append(f" {json.dumps(key)}: {json.dumps(value)}")
    return "{\n" + ",\n".join(parts) + "\n}\n"


def collect_run(run: Path) -> dict:
    invocations = [json.loads(line) for line in (run / "runs.jsonl").read_text().splitlines() if line.strip()]
    if not invocations or not invocations[-1]["finished"]:
        raise SystemExit(f"{run}: the run has not finished (runs.jsonl)")
    commits = sorted({i["commit"] for i in invocations})
    decode = json.loads((run / "decode.json").read_text()) if (run / "decode.json").exists() else {}
    config = json.loads((run / "config.json").read_text())
    return {
        "model": model_label(config),
        "command": " ".join(shlex.quote(a) for a in ["python", "-m", "bapjax.train", *invocations[0]["argv"][1:]]),
        "commit": commits[0] if len(commits) == 1 else commits,
        "config": config,
        "train_items_seen": sum(i["items_trained"] for i in invocations),
        "wall_minutes": round(sum(i["wall_seconds"] for i in invocations) / 60, 1),
        "invocations": len(invocations),
        "stop_rule": {k: decode.get(k) for k in ("stop_rule", "stop_threshold", "samples", "temperature", "cost")
                      if k in decode} if decode else None,
        "eval": json.loads((run / "final_eval.json").read_text()),
    }


def model_label(config: dict) -> str:
    """The paper's name for a run, read from its config (not its directory name)."""
    model = config.get("model", {})
    encoder = (model.get("text") or {}).get("encoder") or model.get("text_encoder", "gru")  # parts; flat up to 57cc1b0
    prime = "'" if encoder != "gru" else ""  # a frozen encoder ("minilm"; "frozen" before 2026-11-24)
    synthetic = any(name != "mc" and "train" in (source.get("splits") or ("train",))
                    for name, source in config.get("data", {}).get("sources", {}).items())
    curriculum = config.get("curriculum", {}) or {}
    label = f"M{prime}_" + ("agg" if synthetic else "mc")
    if curriculum.get("metric"):
        every = ", ".join(curriculum.get("every_stage") or ())
        label += (f"+cl ({curriculum['metric']}, {curriculum.get('num_buckets')} buckets"
                  + (f", {every} in every stage)" if every else ")"))
    return label


def variant_of(name: str) -> str:
    """`cl-s1` -> `cl`; a name without a seed suffix is its own variant."""
    head, sep, tail = name.rpartition("-s")
    return head if sep and tail.isdigit() else name


def seed_record(row: dict) -> dict:
    mc = row["eval"].get("mc_test", {})
    return {"seed": row["config"].get("seed", 0), "micro_overall": mc.get("micro", {}).get("Overall", {}).get("overall"),
            "strict_micro": mc.get("strict_micro"), "wall_minutes": row["wall_minutes"],
            "train_items_seen": row["train_items_seen"], "run": row["run"]}


def by_variant(results: dict) -> dict:
    """{variant: the first seed's record + "seeds" (every seed's MDC test figures) + "seed_mean"}."""
    groups: dict[str, list[dict]] = {}
    for name, row in results.items():
        groups.setdefault(variant_of(name), []).append({**row, "run": name})
    out = {}
    for variant, rows in groups.items():
        rows.sort(key=lambda r: r["config"].get("seed", 0))
        seeds = [seed_record(r) for r in rows]
        mean = {key: (sum(s[key] for s in seeds) / len(seeds) if all(s[key] is not None for s in seeds) else None)
                for key in ("micro_overall", "strict_micro", "wall_minutes")}
        out[variant] = {**{k: v for k, v in rows[0].items() if k != "run"}, "seeds": seeds, "seed_mean": mean}
    return out


def seeds_table(variants: dict) -> str:
    lines = ["| variant | model | seeds | D_mc micro Overall, mean (per seed) | D_mc strict, mean (per seed) | minutes per run |",
             "|---|---|---:|---:|---:|---:|"]
    for variant, row in variants.items():
        seeds, mean = row["seeds"], row["seed_mean"]
        lines.append(f"| `{variant}` | {row['model']} | {len(seeds)} | {_pct(mean['micro_overall'])} "
                     f"({', '.join(_pct(s['micro_overall']) for s in seeds)}) | {_pct(mean['strict_micro'])} "
                     f"({', '.join(_pct(s['strict_micro']) for s in seeds)}) | "
                     f"{', '.join(str(s['wall_minutes']) for s in seeds)} |")
    return "\n".join(lines)


def _pct(value) -> str:
    return "-" if value is None else f"{100 * value:.1f}"


def table(results: dict) -> str:
    lines = ["| model | items seen | D_mc micro Overall | D_mc macro Overall | D_mc Location (micro) | "
             "D_mc strict (legacy) | D_bs | D_ss | D_r | predicted / reference net actions (D_mc) | minutes |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for name, row in results.items():
        ev = row["eval"]
        mc = ev.get("mc_test", {})
        counts = mc.get("counts", {})
        synthetic = [_pct(ev[s]["micro"]["Overall"]["overall"]) if s in ev else "-" for s in SETS[1:]]
        lines.append(
            f"| {row['model']} (`{name}`) | {row['train_items_seen']:,} | {_pct(mc.get('micro', {}).get('Overall', {}).get('overall'))} | "
            f"{_pct(mc.get('macro', {}).get('Overall', {}).get('overall'))} | "
            f"{_pct(mc.get('micro', {}).get('Overall', {}).get('location'))} | {_pct(mc.get('strict_micro'))} | "
            + " | ".join(synthetic)
            + f" | {counts.get('predicted_net_actions', '-')} / {counts.get('reference_net_actions', '-')} | "
            f"{row['wall_minutes']} |")
    for name, paper in PAPER_ROWS.items():
        lines.append(f"| {name} | | {paper['mc_test']} | {paper.get('mc_macro', '')} | {paper.get('mc_location', '')} | | "
                     f"{paper['bs_test']} | {paper['ss_test']} | {paper['r_test']} | | |")
    return "\n".join(lines)


def breakdown_table(results: dict) -> str:
    """D_mc micro F1 of every metric on EB, NEB and Overall (the shape of the paper's Table 7)."""
    metrics = ("type", "color", "location", "shape", "overall")
    lines = ["| model | subset | " + " | ".join(m.capitalize() for m in metrics) + " |",
             "|---|---|" + "---:|" * len(metrics)]
    for name, row in results.items():
        micro = row["eval"].get("mc_test", {}).get("micro", {})
        for subset in ("EB", "NEB", "Overall"):
            if subset in micro:
                lines.append(f"| {row['model']} (`{name}`) | {subset} | "
                             + " | ".join(_pct(micro[subset].get(m)) for m in metrics) + " |")
    for model, subset, values in PAPER_TABLE7:
        lines.append(f"| paper {model} (GPU, Table 7) | {subset} | " + " | ".join(str(v) for v in values) + " |")
    return "\n".join(lines)


SUBGROUPS = ("instruction: horizontal", "instruction: vertical only", "instruction: neither",
             "start: at or next to the last action", "start: 2+ cells away")


def add_subgroups(variants: dict, runs: dict[str, Path], items: list) -> None:
    """Each variant's `"mc_test_subgroups"` {subset: {"seed_mean", "per_seed", "items"}} from its
    runs' MDC test predictions (variants whose runs lack them are left as they are)."""
    for variant, row in variants.items():
        files = [jsonl.stored(runs[seed["run"]] / "predictions" / PREDICTIONS) for seed in row["seeds"]]
        if not all(path.exists() for path in files):
            continue
        rows = [length_ceiling.breakdown(items, jsonl.read_predictions(path)) for path in files]
        groups = {}
        for subset in SUBGROUPS:  # an empty subset has no F1 (None)
            per_seed = [r[subset].get("micro_overall") for r in rows]
            groups[subset] = {"items": rows[0][subset]["items"], "per_seed": per_seed,
                              "seed_mean": None if None in per_seed else sum(per_seed) / len(per_seed)}
        row["mc_test_subgroups"] = groups


def subgroups_table(variants: dict) -> str:
    present = {v: row["mc_test_subgroups"] for v, row in variants.items() if "mc_test_subgroups" in row}
    if not present:
        return ""
    first = next(iter(present.values()))
    lines = ["| variant | " + " | ".join(f"{s.split(': ')[1]} ({first[s]['items']} items)" for s in SUBGROUPS) + " |",
             "|---|" + "---:|" * len(SUBGROUPS)]
    for variant, groups in present.items():
        lines.append(f"| `{variant}` | " + " | ".join(
            f"{_pct(groups[s]['seed_mean'])} ({', '.join(_pct(v) for v in groups[s]['per_seed'])})" for s in SUBGROUPS)
            + " |")
    return ("\n\nD_mc test NEB items, micro Overall F1 by the last Architect turn's words (horizontal: left, right, "
            "front, behind; vertical only: top, above, below, under) and by where the reference starts against the "
            "Builder's last action; seed mean (per seed):\n\n" + "\n".join(lines))


def plot_curves(runs: dict[str, Path], out: Path) -> None:
    """Train loss, val loss and decoded MDC val F1 against training items, one line per run."""
    fig, axes = plt.subplots(1, 3, figsize=(15, 4))
    decoded = set()  # each run's eval.val_decode_items (0: all val items)
    for name, run in runs.items():
        rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines() if line.strip()]
        config = json.loads((run / "config.json").read_text())
        batch = config["train"]["batch_size"]
        decoded.add(int(config.get("eval", {}).get("val_decode_items", 0)))
        train = [(r["step"] * batch, r["loss"]) for r in rows if r["kind"] == "train" and "loss" in r]
        val = [r for r in rows if r["kind"] == "val"]
        loss = [(r["step"] * batch, r["loss"]) for r in val if "loss" in r]
        f1 = [(r["step"] * batch, 100 * r["mc_val_overall_micro_f1"]) for r in val if "mc_val_overall_micro_f1" in r]
        for ax, points, style in ((axes[0], train, "-"), (axes[1], loss, "o-"), (axes[2], f1, "o-")):
            if points:
                ax.plot(*zip(*points), style, label=name, markersize=3, linewidth=1)
    axes[0].set(xlabel="training items", ylabel="train loss (per action, log window)")
    axes[1].set(xlabel="training items", ylabel="val loss (the run's val sets)")
    items = ", ".join("all items" if n == 0 else f"{n} items" for n in sorted(decoded))
    axes[2].set(xlabel="training items", ylabel=f"MDC val micro Overall F1 ({items}, %)")
    for ax in axes:
        if ax.lines:
            ax.legend()
    fig.tight_layout()
    fig.savefig(out, dpi=100)
    plt.close(fig)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", nargs="+", help="finished training workdirs (their names are the row keys)")
    parser.add_argument("--out", default="results/cpu_experiment", help="output path without extension")
    parser.add_argument("--corpus", default="@mdc", help="the MDC whose test split the runs' predictions are of")
    args = parser.parse_args()
    runs = {Path(r).name: Path(r) for r in args.runs}
    results = {name: collect_run(run) for name, run in runs.items()}
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    variants = by_variant(results)
    if any(jsonl.stored(run / "predictions" / PREDICTIONS).exists() for run in runs.values()):
        add_subgroups(variants, runs, mdc.load_corpus(paths.mdc_path(args.corpus)).split("test"))
    out.with_suffix(".json").write_text(entry_per_line(variants))  # one line per variant's field
    markdown = (table(results) + "\n\nSeeds (MDC test split, paper baseline: strict 21.2):\n\n" + seeds_table(variants)
                + "\n\nD_mc test, micro F1 by metric and subset:\n\n" + breakdown_table(results)
                + subgroups_table(variants))
    out.with_suffix(".md").write_text(markdown + "\n")
    unlogged = [name for name, run in runs.items() if not (run / "metrics.jsonl").exists()]
    if unlogged:  # results/runs/ keeps each run's final files, not its per-step log
        print(f"note: no metrics.jsonl in {', '.join(unlogged)}: learning curves not drawn", file=sys.stderr)
    else:
        plot_curves(runs, out.parent / f"{out.name}_curves.png")
    print(markdown)
    print(json.dumps({name: {s: row["eval"].get(s, {}).get("micro", {}).get("Overall", {}).get("overall")
                             for s in SETS} for name, row in results.items()}))


if __name__ == "__main__":
    main()
