"""Rebuild the experiment's results (JSON, markdown tables, learning curves) from run directories.

    python -m bapjax.analysis.collect_experiment runs/exp/mc-frame-s{0,1,2} runs/exp/agg-frame-s{0,1,2} \
        [--out results/cpu_experiment] [--keep results/runs] [--host_speed ITEMS_PER_S] [--corpus @mdc] \
        [--bootstrap 2000] [--seed 0] [--reference VARIANT] [--baseline VARIANT] [--paired VARIANT,VARIANT ...]

Each run directory is a finished `python -m bapjax.train` workdir, a run kept in results/ (its
compact `record.json`, `run_record`) or a `python -m bapjax.ensemble` folder (its ensemble.json
names the members, their minutes and items, and the rule chosen on val; its `wall_minutes` are the
members' runs plus the ensemble's decoding); its name is the row's key. Nothing is typed by hand: a
workdir's record is built from its `runs.jsonl` (command, commit, minutes), `config.json` (digest,
differences from the defaults), `decode.json` and `metrics.jsonl` (the curve's points), the
evaluation read from `final_eval.json` (exactly what training printed last). `--keep DIR` writes
each run as results/ keeps it (DIR/<run>/: record.json or ensemble.json, final_eval.json,
predictions/*.jsonl.gz), so the collection can be rebuilt from the kept copies alone. Runs named
`<variant>-s<seed>` (configs/cpu_experiment.py writes `<variant>-<model>-s<seed>`) are seeds of one
variant.

OUT.json: ``{"command", "bootstrap", "variants": {variant: record}}``. A variant's record is its
first seed's (``"model", "command", "commit", "config_changes", "train_items_seen", "wall_minutes",
"stop_rule", "eval": {"mc_test": <evaluator JSON>, "bs_test": ..., ...}``) plus ``"seeds": [{"seed",
"micro_overall", "strict_micro", "wall_minutes", "train_items_seen", "run", "test": {"mc", "bs", "ss",
"r"}}, ...]`` (MDC test figures, and micro Overall on every test set the run decoded), every seed
listed, their ``"seed_mean"`` and ``"seed_sd"`` (standard deviation over seeds, None for one seed)
and ``"test_sets"`` (each test set's seed mean and interval, below). OUT.md: the command that wrote
it, the runs beside the paper's Table 5, the seeds table, the differences, Table 4's shape and the
breakdowns; OUT_curves.png: train loss, val loss and decoded val F1 of every run.

Where the runs kept their MDC test predictions (predictions/mc_test.jsonl, or mc_test.jsonl.gz as
results/runs/ keeps them; `--corpus`: the MDC the runs were tested on), they are rescored and must
reproduce their final_eval.json's mc_test exactly (otherwise: one error line naming the file).
From their per-item fairer counts:

* intervals (`--bootstrap N` replicates, `--seed`; 0: none): each variant whose every seed kept its
  predictions gets ``"micro_overall_interval"``, the 95% interval of its seed-mean micro Overall F1
  by the two-level bootstrap of `bapjax.analysis.bootstrap` (items resampled once per replicate for
  every run, seeds resampled per variant), and ``"bootstrap"`` holds the differences of seed means
  with their intervals: every variant minus the reference (`--reference`, default the first M_agg
  variant) and the reference minus the baseline (`--baseline`, default the first M_mc variant), each
  beside the paper's difference; variants named together by `--paired` (the same models seed for
  seed, e.g. runs and one-member ensembles of those runs) draw their seeds together, so their
  difference is resampled seed by seed (``"paired"`` lists the groups);
* ``"seed_spread"`` per variant of >= 2 such seeds: its seed SD split into the item x seed part (which
  items each seed gets right) and the rest, on the same replicates (`bapjax.analysis.bootstrap.spread`);
* ``"mc_test_subgroups"`` per variant: micro Overall F1 of NEB test items by what the last
  instruction says and by where the build starts (`bapjax.analysis.error_analysis.breakdown`),
  seed mean and per seed;
* ``"test_sets"`` per variant: the MDC's interval as above, and each simulated test set's (bs, ss, r) over the
  seeds that kept its predictions, rescored on the split the run generated (`run_test_items`: its data
  source rebuilt from the record) with a bootstrap over each seed's own items and the seeds
  (`bapjax.analysis.bootstrap.own_items`).
"""

from __future__ import annotations

import argparse
import json
import shlex
import statistics
import sys
from collections import Counter
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from bapjax import cli, paths  # noqa: E402
from bapjax.analysis import bootstrap, error_analysis  # noqa: E402
from bapjax.corpus import mdc  # noqa: E402
from bapjax.data import sources  # noqa: E402
from bapjax.errors import UserError  # noqa: E402
from bapjax.evaluation import evaluator  # noqa: E402
from bapjax.training import run_config  # noqa: E402
from bapjax.world import jsonl  # noqa: E402

PREDICTIONS = "mc_test.jsonl"  # a run's MDC test predictions, in its predictions/ folder (or gzip-compressed beside)
ENSEMBLE = "ensemble.json"  # what marks a `python -m bapjax.ensemble` folder

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
# Paper Table 4: models trained on one data set (or all: M_agg), micro Overall fairer F1 on each test set.
PAPER_TABLE4 = {"M_mc": {"bs": 35.2, "ss": 19.1, "r": 12.4, "mc": 27.3}, "M_bs": {"bs": 83.9, "ss": 12.9, "r": 44.9, "mc": 6.3},
                "M_ss": {"bs": 11.3, "ss": 75.4, "r": 7.9, "mc": 9.1}, "M_r": {"bs": 43.8, "ss": 10.1, "r": 64.4, "mc": 7.7},
                "M_agg": {"bs": 83.4, "ss": 68.8, "r": 63.6, "mc": 30.3}}


def entry_per_line(record: dict, levels: int = 2) -> str:
    """JSON of a record of records with one line per entry of its first `levels` levels of dicts
    (levels 2: a run, an option set, a variant's field per line)."""

    def lines(value, depth: int) -> str:
        if not isinstance(value, dict) or not value or depth == levels:
            return json.dumps(value)
        pad = " " * depth
        inner = ",\n".join(f"{pad} {json.dumps(key)}: {lines(entry, depth + 1)}" for key, entry in value.items())
        return f"{{\n{inner}\n{pad}}}"

    return lines(record, 0) + "\n"


RECORD = "record.json"  # a kept run's compact record (`run_record`), in place of its workdir's files
CURVE_POINTS = 30  # train-loss points a record keeps (every eval's point is kept)


def _flat(values: dict, prefix: str = "") -> dict:
    out = {}
    for key, value in values.items():
        if isinstance(value, dict) and value:
            out.update(_flat(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


def config_changes(config: dict) -> dict:
    """{dotted field: value} of the fields where a run's config.json differs from (or is absent
    from) `run_config.base_config()`; a default field the config lacks is not listed."""
    defaults = _flat(json.loads(run_config.base_config().to_json_best_effort()))
    return {key: value for key, value in _flat(config).items() if key not in defaults or defaults[key] != value}


def run_record(run: Path, host_speed: float | None = None) -> dict:
    """A finished training workdir as one compact record: its command, commit(s), config digest and
    differences from the defaults, wall minutes with the run's own median training items/s (and the
    host's `benchmarks/bench_train.py` batch-32 items/s where given), the decoding chosen on val
    (decode.json) and the learning curve's points (every eval; the train loss at `CURVE_POINTS`
    steps). A kept run's record.json is read back as it is."""
    if (run / RECORD).is_file():
        return json.loads((run / RECORD).read_text())
    invocations = [json.loads(line) for line in (run / "runs.jsonl").read_text().splitlines() if line.strip()]
    if not invocations or not invocations[-1]["finished"]:
        raise UserError(f"{run}: the run has not finished (runs.jsonl)")
    commits = sorted({i["commit"] for i in invocations})
    config = json.loads((run / "config.json").read_text())
    rows = ([json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines() if line.strip()]
            if (run / "metrics.jsonl").exists() else [])
    batch = int(config["train"]["batch_size"])
    train = [r for r in rows if r["kind"] == "train" and "loss" in r]
    every = max(1, -(-len(train) // CURVE_POINTS))
    val_keys = sorted({k for r in rows if r["kind"] == "val" for k in r if k == "loss" or k.endswith("_f1")})
    speeds = sorted(r["items_per_s"] for r in train[1:] if "items_per_s" in r)  # the first window compiles
    return {
        "kind": "run",
        "model": model_label(config),
        "seed": config.get("seed", 0),
        "command": " ".join(shlex.quote(a) for a in ["python", "-m", "bapjax.train", *invocations[0]["argv"][1:]]),
        "commit": commits[0] if len(commits) == 1 else commits,
        "started": invocations[0].get("started"),
        "config_sha256": invocations[-1].get("config_sha256"),
        "config_changes": config_changes(config),
        "train_items_seen": sum(i["items_trained"] for i in invocations),
        "wall_minutes": round(sum(i["wall_seconds"] for i in invocations) / 60, 1),
        "invocations": len(invocations),
        "train_items_per_s_median": round(speeds[len(speeds) // 2], 1) if speeds else None,
        "host_bench_b32_items_per_s": host_speed,
        "decode": json.loads((run / "decode.json").read_text()) if (run / "decode.json").exists() else None,
        "curve": {"batch_size": batch,
                  "train": {"columns": ["step", "loss"],
                            "points": [[r["step"], round(r["loss"], 5)] for r in train[every - 1::every]]},
                  "val": {"columns": ["step", *val_keys],
                          "points": [[r["step"], *(None if r.get(k) is None else round(r[k], 5) for k in val_keys)]
                                     for r in rows if r["kind"] == "val"]}},
    }


def collect_run(run: Path, host_speed: float | None = None) -> dict:
    record = run_record(run, host_speed)
    decode = record.get("decode") or {}
    return {**record,
            "stop_rule": {k: decode.get(k) for k in ("stop_rule", "stop_threshold", "samples", "temperature",
                                                              "cost", "rules") if k in decode} if decode else None,
            "eval": json.loads((run / "final_eval.json").read_text())}


def keep(run: Path, row: dict, into: Path) -> Path:
    """`run` as results/ keeps it, under `into`/<name>: its compact record (record.json; an
    ensemble's ensemble.json as it is), final_eval.json (one line per test set) and its predictions
    gzip-compressed. A run
    read from there (a kept record listed again) is left as it is."""
    target = into / run.name
    if target.resolve() == run.resolve():
        return target
    (target / "predictions").mkdir(parents=True, exist_ok=True)
    if (run / ENSEMBLE).is_file():
        (target / ENSEMBLE).write_text((run / ENSEMBLE).read_text())
    else:
        (target / RECORD).write_text(entry_per_line({k: v for k, v in row.items() if k not in ("eval", "stop_rule")},
                                                    levels=1))
    # one line per test set: the same JSON as the run's file, a few lines instead of hundreds
    (target / "final_eval.json").write_text(entry_per_line(json.loads((run / "final_eval.json").read_text()),
                                                           levels=1))
    for path in sorted((run / "predictions").glob("*.jsonl*")):
        name = path.name if path.name.endswith(".gz") else path.name + ".gz"
        jsonl.write_predictions(target / "predictions" / name, jsonl.read_predictions(path))
    return target


def collect_ensemble(run: Path) -> dict:
    """A `python -m bapjax.ensemble` folder as a row: its ensemble.json (members with their
    minutes and items, the rule chosen on val) and final_eval.json; its seed is the name's
    `-s<seed>` suffix (an ensemble's members have their own seeds). Its rules: one for the items on
    an empty board and one for the others, or one for all (ensembles of older code)."""
    record = json.loads((run / ENSEMBLE).read_text())
    members = record["members"]
    configs = sorted({member_config(m["command"]) for m in members})
    choice = record["choice"]
    rules = {kind: choice[kind] for kind in ("EB", "NEB") if kind in choice} or {"all": choice}  # one rule: older
    chosen = ", ".join(f"{'' if kind == 'all' else kind + ' '}{r['rule']} at {r['value']:g}" for kind, r in rules.items())
    return {
        "model": f"ensemble of {len(members)} ({', '.join(configs)})", "rules": chosen,
        "command": record["command"], "commit": record["commit"],
        "seed": name_parts(run.name)[1] or 0,
        "train_items_seen": sum(m["items_trained"] for m in members),
        "wall_minutes": round(record["wall_minutes"], 1), "invocations": 1,
        "stop_rule": {kind: {"rule": r["rule"], "value": r["value"]} for kind, r in rules.items()},
        "members": members,
        "eval": json.loads((run / "final_eval.json").read_text()),
    }


def member_config(command: str) -> str:
    """The config an ensemble member's training command names, less its seed: `... --config=configs/x.py:agg,3`
    -> `configs/x.py:agg` (an argument of digits only is a seed: `configs/x.py:3` -> `configs/x.py`)."""
    path, _, arg = command.split("--config=")[-1].split()[0].partition(":")
    kept = [token for token in arg.split(",") if token and not token.isdigit()]
    return f"{path}:{','.join(kept)}" if kept else path


def model_label(config: dict) -> str:
    """The paper's name for a run, read from its config (not its directory name)."""
    model = config.get("model", {})
    encoder = (model.get("text") or {}).get("encoder") or model.get("text_encoder", "gru")  # parts; flat up to 57cc1b0
    prime = "'" if encoder != "gru" else ""  # a frozen encoder ("minilm"; "frozen" before 2026-11-24)
    trained = [name for name, source in config.get("data", {}).get("sources", {}).items()
               if "train" in (source.get("splits") or ("train",))]
    curriculum = config.get("curriculum", {}) or {}
    label = f"M{prime}_" + (trained[0] if len(trained) == 1 else "agg" if trained else "mc")
    if curriculum.get("metric"):
        every = ", ".join(curriculum.get("every_stage") or ())
        label += (f"+cl ({curriculum['metric']}, {curriculum.get('num_buckets')} buckets"
                  + (f", {every} in every stage)" if every else ")"))
    return label


def name_parts(name: str) -> tuple[str, int | None]:
    """A run's name as (variant, seed): `cl-s1` -> (`cl`, 1); a name without a seed suffix is its
    own variant, of no seed."""
    head, sep, tail = name.rpartition("-s")
    return (head, int(tail)) if sep and tail.isdigit() else (name, None)


def variant_of(name: str) -> str:
    """`cl-s1` -> `cl` (`name_parts`)."""
    return name_parts(name)[0]


def seed_record(row: dict) -> dict:
    """A seed's figures: MDC test micro Overall and strict, its minutes and items, and `test`: micro Overall
    on each test set its final evaluation holds ({"mc", "bs", "ss", "r"})."""
    mc = row["eval"].get("mc_test", {})
    return {"seed": row.get("seed", 0), "micro_overall": mc.get("micro", {}).get("Overall", {}).get("overall"),
            "strict_micro": mc.get("strict_micro"), "wall_minutes": row["wall_minutes"],
            "train_items_seen": row["train_items_seen"], "run": row["run"],
            "test": {key[:-len("_test")]: row["eval"][key]["micro"]["Overall"]["overall"] for key in SETS
                     if key in row["eval"]}}


def by_variant(results: dict) -> dict:
    """{variant: the first seed's record + "seeds" (every seed's MDC test figures), "seed_mean" and
    "seed_sd"}."""
    groups: dict[str, list[dict]] = {}
    for name, row in results.items():
        groups.setdefault(variant_of(name), []).append({**row, "run": name})
    out = {}
    for variant, rows in groups.items():
        rows.sort(key=lambda r: r.get("seed", 0))
        seeds = [seed_record(r) for r in rows]
        known = lambda key: all(s[key] is not None for s in seeds)  # noqa: E731
        mean = {key: (sum(s[key] for s in seeds) / len(seeds) if known(key) else None)
                for key in ("micro_overall", "strict_micro", "wall_minutes")}
        sd = {key: (statistics.stdev(s[key] for s in seeds) if known(key) and len(seeds) > 1 else None)
              for key in ("micro_overall", "strict_micro")}
        first = {k: v for k, v in rows[0].items() if k not in ("run", "curve", "decode", "members")}  # per run: its record
        out[variant] = {**first, "seeds": seeds, "seed_mean": mean,
                        "seed_sd": sd}
    return out


def seeds_table(variants: dict) -> str:
    """One row per variant: micro Overall's seed mean with its 95% interval where the variant has one,
    the seed standard deviation, every seed's figure; strict likewise without the interval."""
    lines = ["| variant | model | seeds | D_mc micro Overall, mean [95% interval] (per seed) | seed SD "
             "(item x seed / rest) | D_mc strict, mean (per seed) | strict seed SD | minutes per run |",
             "|---|---|---:|---:|---:|---:|---:|---:|"]
    for variant, row in variants.items():
        seeds, mean, sd = row["seeds"], row["seed_mean"], row["seed_sd"]
        low_high = row.get("micro_overall_interval")
        interval = f" [{_pct(low_high[0])}, {_pct(low_high[1])}]" if low_high else ""
        split = row.get("seed_spread")
        split = f" ({_pct(split['interaction_sd'])} / {_pct(split['model_sd'])})" if split else ""
        lines.append(f"| `{variant}` | {row['model']} | {len(seeds)} | {_pct(mean['micro_overall'])}{interval} "
                     f"({', '.join(_pct(s['micro_overall']) for s in seeds)}) | {_pct(sd['micro_overall'])}{split} | "
                     f"{_pct(mean['strict_micro'])} ({', '.join(_pct(s['strict_micro']) for s in seeds)}) | "
                     f"{_pct(sd['strict_micro'])} | {', '.join(str(s['wall_minutes']) for s in seeds)} |")
    return "\n".join(lines)


def rescore(path: Path, items: list, recorded: dict | None, where: str) -> dict:
    """Per-item fairer Overall counts {"tp", "n_pred", "n_ref"} of the predictions file `path` on `items`,
    which must reproduce `recorded` (the run's final_eval.json entry) exactly; else one error naming the
    file, both figures and `where` the record is."""
    report, scores, _ = evaluator.evaluate_items(items, jsonl.read_predictions(path))
    if json.loads(json.dumps(report)) != recorded:
        found = (recorded or {}).get("micro", {}).get("Overall", {}).get("overall")
        raise UserError(f"{path}: rescored on {where[0]}, micro Overall {report['micro']['Overall']['overall']} is "
                        f"not the {found} of {where[1]} (another corpus, or the file was changed)")
    return {"tp": scores.fair_tp, "n_pred": scores.n_pred, "n_ref": scores.n_ref}


def rescored_counts(runs: dict[str, Path], results: dict, items: list) -> dict[str, dict]:
    """{run: per-item fairer Overall counts {"tp", "n_pred", "n_ref"} in `items`' order} of the runs
    that kept their MDC test predictions; each must rescore to exactly its final_eval.json's mc_test."""
    counts = {}
    for name, run in runs.items():
        path = jsonl.stored(run / "predictions" / PREDICTIONS)
        if path.exists():
            counts[name] = rescore(path, items, results[name]["eval"].get("mc_test"),
                                   ("the test split of --corpus", f"{run / 'final_eval.json'}'s mc_test"))
    return counts


def compared_variants(variants: dict, reference: str | None = None,
                      baseline: str | None = None) -> tuple[str, str | None]:
    """(the reference: `reference`, else the first M_agg variant, else the first variant; the
    baseline: `baseline`, else the first M_mc variant other than the reference, or None)."""
    for flag, name in (("--reference", reference), ("--baseline", baseline)):
        if name is not None and name not in variants:
            raise UserError(f"{flag} {name}: not a variant of these runs ({', '.join(variants)})")
    if baseline is not None and baseline == reference:
        raise UserError(f"--baseline {baseline}: the reference itself")
    plain = lambda row: row["model"].replace("'", "")  # noqa: E731 (M'_agg is compared like M_agg)
    if reference is None:
        reference = next((v for v, row in variants.items() if plain(row) == "M_agg"), next(iter(variants)))
    if baseline is None:
        baseline = next((v for v, row in variants.items() if plain(row) == "M_mc" and v != reference), None)
    return reference, baseline


def paired_groups(variants: dict, texts: list[str]) -> list[list[str]]:
    """`--paired A,B` (repeatable) as groups of variants whose runs are the same models, seed for
    seed (e.g. one set of runs decoded two ways): every name a variant of these runs, each in one
    group, and the same seeds in each group."""
    groups, seen = [], set()
    for text in texts:
        group = [name for name in text.split(",") if name]
        if len(group) < 2:
            raise UserError(f"--paired {text}: expected two or more variants, comma-separated")
        for name in group:
            if name not in variants:
                raise UserError(f"--paired {text}: {name} is not a variant of these runs ({', '.join(variants)})")
            if name in seen:
                raise UserError(f"--paired {text}: {name} is already in another group")
            seen.add(name)
        seeds = {name: [s["seed"] for s in variants[name]["seeds"]] for name in group}
        if len({tuple(v) for v in seeds.values()}) > 1:
            listed = "; ".join(f"{name}: {', '.join(map(str, v))}" for name, v in seeds.items())
            raise UserError(f"--paired {text}: the variants hold different seeds ({listed})")
        groups.append(group)
    return groups


def add_intervals(variants: dict, counts: dict, samples: int, seed: int, reference: str | None,
                  baseline: str | None = None, paired: list[list[str]] = ()) -> dict:
    """The two-level bootstrap of the variants whose every seed kept its predictions: sets their
    "micro_overall_interval" and returns OUT.json's "bootstrap" record (the differences of seed
    means: the reference minus the baseline, every other variant minus the reference); the variants
    of a `paired` group (`paired_groups`) draw their seeds together."""
    reference, baseline = compared_variants(variants, reference, baseline)
    complete = {v: [counts[s["run"]] for s in row["seeds"]] for v, row in variants.items()
                if all(s["run"] in counts for s in row["seeds"])}
    pairs = [(reference, baseline)] if baseline else []
    pairs += [(v, reference) for v in variants if v not in (reference, baseline)]
    pairs = [(a, b) for a, b in pairs if a in complete and b in complete]
    paired = [group for group in paired if all(v in complete for v in group)]
    record = {"samples": samples, "seed": seed, "reference": reference, "baseline": baseline,
              **({"paired": paired} if paired else {}),
              "without_intervals": [v for v in variants if v not in complete], "differences": {}}
    if not complete or not samples:
        return record
    boot = bootstrap.two_level(complete, pairs, samples, seed, paired)
    record["items"] = boot["items"]
    for variant, result in boot["variants"].items():
        assert result["mean"] == variants[variant]["seed_mean"]["micro_overall"], variant  # the rescored counts' F1
        variants[variant]["micro_overall_interval"] = result["interval"]
        if "spread" in result:
            variants[variant]["seed_spread"] = result["spread"]
    for (a, b), (name, diff) in zip(pairs, boot["differences"].items()):
        paper = [paper_micro(variants[v]["model"]) for v in (a, b)]
        record["differences"][name] = {**diff, "models": [variants[a]["model"], variants[b]["model"]],
                                       "paper": None if None in paper else round((paper[0] - paper[1]) / 100, 3)}
    return record


def paper_micro(model: str) -> float | None:
    """The paper's D_mc micro Overall of a model label (`model_label`'s): M_agg+cl (L_A, ...) is its
    M_agg+cl, M'_... its Table 6."""
    base = model.split(" (")[0]
    for table_name in ("Table 5", "Table 6"):
        row = PAPER_ROWS.get(f"paper {base} (GPU, {table_name})")
        if row:
            return row["mc_test"]
    return None


def differences_table(record: dict) -> str:
    if not record["differences"]:
        return ""
    lines = ["| difference | models | seed means | 95% interval | replicates > 0 | paper (GPU, its clean test set) "
             "| paper's difference inside the interval |", "|---|---|---:|---:|---:|---:|---|"]
    signed = lambda value: f"{100 * value:+.1f}"  # noqa: E731
    for name, d in record["differences"].items():
        a, b = name.split(" - ")
        low, high = d["interval"]
        paper = "-" if d["paper"] is None else signed(d["paper"])
        inside = "-" if d["paper"] is None else ("yes" if low <= d["paper"] <= high else "no")
        lines.append(f"| `{a}` - `{b}` | {d['models'][0]} - {d['models'][1]} | {signed(d['mean'])} | "
                     f"[{signed(low)}, {signed(high)}] | {100 * d['share_above_0']:.1f}% | {paper} | {inside} |")
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
            f"| {row['model']}{'; ' + row['rules'] if 'rules' in row else ''} (`{name}`) | {row['train_items_seen']:,} | "
            f"{_pct(mc.get('micro', {}).get('Overall', {}).get('overall'))} | "
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


def run_test_items(row: dict, name: str) -> list:
    """The test items of the simulated set `name` as the run generated them: its data source, rebuilt from the
    record's config differences (a simulated set's every field differs from the defaults, which have none)."""
    prefix = f"data.sources.{name}."
    source: dict = {}
    for key, value in (row.get("config_changes") or {}).items():
        if key.startswith(prefix):
            *parents, last = key[len(prefix):].split(".")
            node = source
            for part in parents:
                node = node.setdefault(part, {})
            node[last] = value
    if not source.get("generate"):
        raise UserError(f"{row['run']}: its record names no simulated {name} source to rescore {name}_test with")
    return sources.load_source(name, {**source, "splits": ("test",)})["test"]


def rescored_sets(runs: dict[str, Path], results: dict) -> dict[str, dict[str, dict]]:
    """{set: {run: per-item fairer Overall counts}} of the simulated test sets (bs, ss, r) whose predictions a
    run kept (predictions/<set>_test.jsonl, or .gz); each must rescore exactly to its final_eval.json's."""
    out: dict[str, dict[str, dict]] = {}
    for key in SETS[1:]:
        name = key[:-len("_test")]
        for run_name, run in runs.items():
            path = jsonl.stored(run / "predictions" / f"{key}.jsonl")
            if not path.exists():
                continue
            items = run_test_items({**results[run_name], "run": run_name}, name)
            out.setdefault(name, {})[run_name] = rescore(path, items, results[run_name]["eval"].get(key), (
                f"the run's own {name} test split", f"{run / 'final_eval.json'}'s {key}"))
    return out


def add_set_intervals(variants: dict, set_counts: dict, samples: int, seed: int) -> None:
    """Each variant's `"test_sets"` {set: {"mean", "interval", "seeds"}}: the MDC's from the two-level bootstrap
    (shared items), a simulated set's from `bootstrap.own_items` (each seed's own test split) over the seeds that
    kept predictions of it ("seeds": how many; a run decoded on the MDC alone counts in the MDC's cell only)."""
    for row in variants.values():
        sets = {}
        if row.get("micro_overall_interval"):
            sets["mc"] = {"mean": row["seed_mean"]["micro_overall"], "interval": row["micro_overall_interval"],
                          "seeds": len(row["seeds"])}
        for name, by_run in set_counts.items():
            runs = [s["run"] for s in row["seeds"] if s["run"] in by_run]
            if samples and runs:
                boot = bootstrap.own_items([by_run[r] for r in runs], samples, seed)
                sets[name] = {"mean": boot["mean"], "interval": boot["interval"], "seeds": len(runs)}
        if sets:
            row["test_sets"] = sets


def sets_table(variants: dict) -> str:
    """Table 4's shape: a row per variant, micro Overall fairer F1 on each test set (mean [95% interval],
    seeds), then the paper's rows."""
    present = {v: row for v, row in variants.items() if row.get("test_sets")}
    if not present:
        return ""
    lines = ["| variant | model | D_bs | D_ss | D_r | D_mc |", "|---|---|---:|---:|---:|---:|"]
    for variant, row in present.items():
        cells = []
        for name in ("bs", "ss", "r", "mc"):
            cell = row["test_sets"].get(name)
            cells.append("-" if cell is None else f"{_pct(cell['mean'])} [{_pct(cell['interval'][0])}, "
                                                  f"{_pct(cell['interval'][1])}] ({cell['seeds']})")
        lines.append(f"| `{variant}` | {row['model']} | " + " | ".join(cells) + " |")
    for model, paper in PAPER_TABLE4.items():
        lines.append(f"| paper {model} (GPU, Table 4) | | " + " | ".join(str(paper[n]) for n in ("bs", "ss", "r", "mc"))
                     + " |")
    return ("Every test set, micro Overall fairer F1 (the paper's Table 4), mean [95% interval] (seeds); a simulated "
            "set's interval resamples each seed's own test split and the seeds:\n\n" + "\n".join(lines))


def add_subgroups(variants: dict, runs: dict[str, Path], items: list) -> None:
    """Each variant's `"mc_test_subgroups"` {subset: {"seed_mean", "per_seed", "items"}} from its
    runs' MDC test predictions (variants whose runs lack them are left as they are)."""
    for variant, row in variants.items():
        files = [jsonl.stored(runs[seed["run"]] / "predictions" / PREDICTIONS) for seed in row["seeds"]]
        if not all(path.exists() for path in files):
            continue
        rows = [error_analysis.breakdown(items, jsonl.read_predictions(path)) for path in files]
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


def plot_curves(runs: dict[str, dict], out: Path) -> list[str]:
    """Train loss, val loss and decoded MDC val F1 against training items: one line per run, one colour and
    one legend entry per variant (its seeds' runs), so a collection of many seeds stays readable. Returns the
    legend entries of the three panels, each once."""
    fig, axes = plt.subplots(1, 3, figsize=(15, 4))
    variants = Counter(name_parts(name)[0] for name in runs)
    colors = {variant: f"C{i % 10}" for i, variant in enumerate(variants)}
    decoded = set()  # each run's eval.val_decode_items (0: all val items)
    for name, row in runs.items():
        variant = name_parts(name)[0]
        label = variant if variants[variant] == 1 else f"{variant} ({variants[variant]} runs)"
        curve = row["curve"]
        batch = curve["batch_size"]
        decoded.add(int(row.get("config_changes", {}).get("eval.val_decode_items", 0)))
        columns = curve["val"]["columns"]
        val = [dict(zip(columns, point)) for point in curve["val"]["points"]]
        train = [(step * batch, loss) for step, loss in curve["train"]["points"]]
        loss = [(r["step"] * batch, r["loss"]) for r in val if r.get("loss") is not None]
        f1_key = next((k for k in columns if k.endswith("_val_overall_micro_f1")), None)
        f1 = [(r["step"] * batch, 100 * r[f1_key]) for r in val if f1_key and r.get(f1_key) is not None]
        for ax, points, style in ((axes[0], train, "-"), (axes[1], loss, "o-"), (axes[2], f1, "o-")):
            if points:
                ax.plot(*zip(*points), style, label=label, color=colors[variant], markersize=3, linewidth=1, alpha=0.8)
    axes[0].set(xlabel="training items", ylabel="train loss (per action, log window)")
    axes[1].set(xlabel="training items", ylabel="val loss (the run's val sets)")
    items = ", ".join("all items" if n == 0 else f"{n} items" for n in sorted(decoded))
    axes[2].set(xlabel="training items", ylabel=f"decoded val micro Overall F1 ({items}, %)")
    entries = {}
    for ax in axes:
        if ax.lines:
            lines, labels = ax.get_legend_handles_labels()
            handles = dict(zip(labels, lines))  # one line per label: a variant's runs share their colour
            ax.legend(handles.values(), handles.keys())
            entries.update(dict.fromkeys(handles))
    fig.tight_layout()
    fig.savefig(out, dpi=100)
    plt.close(fig)
    return list(entries)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", nargs="+", help="finished training workdirs (their names are the row keys)")
    parser.add_argument("--out", default="results/cpu_experiment", help="output path without extension")
    parser.add_argument("--corpus", default="@mdc", help="the MDC whose test split the runs' predictions are of")
    parser.add_argument("--bootstrap", type=int, default=2000,
                        help="two-level bootstrap replicates of the intervals (0: no intervals)")
    parser.add_argument("--seed", type=int, default=0, help="the bootstrap's random seed")
    parser.add_argument("--reference", default=None,
                        help="the variant the others are compared with (default: the first M_agg variant)")
    parser.add_argument("--baseline", default=None,
                        help="the variant the reference is compared with (default: the first M_mc variant)")
    parser.add_argument("--keep", default=None, metavar="DIR",
                        help="also write each run as results/ keeps it, DIR/<run>/: its compact record, final_eval.json "
                             "and its predictions gzip-compressed (e.g. --keep results/runs)")
    parser.add_argument("--host_speed", type=float, default=None, metavar="ITEMS_PER_S",
                        help="this host's `python benchmarks/bench_train.py` batch-32 items/s, written into the records "
                             "of runs collected from their workdirs (a time means little without it)")
    parser.add_argument("--paired", action="append", default=[], metavar="A,B",
                        help="variants whose runs are the same models seed for seed (e.g. one set of runs decoded "
                             "two ways): the bootstrap draws their seeds together; repeat for more groups")
    args = parser.parse_args(argv)
    command = " ".join(["python", "-m", "bapjax.analysis.collect_experiment",
                        *map(shlex.quote, sys.argv[1:] if argv is None else argv)])
    try:
        return collect(args, command)
    except UserError as err:
        cli.fail(str(err))


def collect(args: argparse.Namespace, command: str) -> int:
    if args.bootstrap < 0:
        raise UserError(f"--bootstrap {args.bootstrap}: the number of replicates is 0 (no intervals) or more")
    for run in args.runs:
        if not any((Path(run) / name).is_file() for name in ("runs.jsonl", RECORD, ENSEMBLE)):
            raise UserError(f"{run}: neither a training workdir (runs.jsonl), a kept run ({RECORD}) nor an ensemble "
                            f"({ENSEMBLE})")
    runs = {Path(r).name: Path(r) for r in args.runs}
    out = Path(args.out)
    paths.check_writable_dir(out.parent, "--out", output=args.out)
    if args.keep:
        paths.check_writable_dir(Path(args.keep), "--keep")
    results = {name: collect_ensemble(run) if (run / ENSEMBLE).is_file() else collect_run(run, args.host_speed)
               for name, run in runs.items()}
    variants = by_variant(results)
    compared_variants(variants, args.reference, args.baseline)  # a wrong --reference or --baseline: refused first
    paired = paired_groups(variants, args.paired)
    counts = {}
    if any(jsonl.stored(run / "predictions" / PREDICTIONS).exists() for run in runs.values()):
        items = mdc.load_corpus(paths.mdc_path(args.corpus)).split("test")
        counts = rescored_counts(runs, results, items)
        add_subgroups(variants, runs, items)
    boot = add_intervals(variants, counts, args.bootstrap, args.seed, args.reference, args.baseline, paired)
    add_set_intervals(variants, rescored_sets(runs, results), args.bootstrap, args.seed)
    out.with_suffix(".json").write_text(entry_per_line({"command": command, "bootstrap": boot, "variants": variants}, levels=3))
    kept = (f"the MDC test predictions of {len(counts)} of the {len(runs)} runs rescore to them exactly (checked by "
            "this command)" if counts else "no run kept its MDC test predictions: nothing was rescored")
    markdown = [f"`{command}`", f"Each run's figures are its final_eval.json's; {kept}.", table(results),
                "Seeds (MDC test split, paper baseline: strict 21.2)" + intervals_note(boot) + ":", seeds_table(variants)]
    if boot["differences"]:
        markdown += ["Differences of seed means, micro Overall fairer F1 on the MDC test split (the same replicates; "
                     "the paper's differences are between single runs on its clean v2 test set, which is not public):",
                     differences_table(boot)]
    if boot["without_intervals"] and args.bootstrap:
        markdown.append(f"No intervals for {', '.join(boot['without_intervals'])}: not every seed kept its MDC test "
                        "predictions.")
    if sets_table(variants):
        markdown.append(sets_table(variants))
    markdown += ["D_mc test, micro F1 by metric and subset:", breakdown_table(results) + subgroups_table(variants)]
    trained = {name: row for name, row in results.items() if "curve" in row}  # ensembles: no curves of their own
    unlogged = [name for name, row in trained.items()
                if not row["curve"]["train"]["points"] and not row["curve"]["val"]["points"]]
    if unlogged:  # a workdir without metrics.jsonl
        markdown.append(f"Learning curves ({out.name}_curves.png): not drawn, no curve points in {', '.join(unlogged)}.")
    elif trained:
        plot_curves(trained, out.parent / f"{out.name}_curves.png")
    if args.keep:
        for name, run in runs.items():
            keep(run, results[name], Path(args.keep))
    text = "\n\n".join(markdown)
    out.with_suffix(".md").write_text(text + "\n")
    print(text)
    print(json.dumps({name: {s: row["eval"].get(s, {}).get("micro", {}).get("Overall", {}).get("overall")
                             for s in SETS} for name, row in results.items()}))
    return 0


def intervals_note(boot: dict) -> str:
    if "items" not in boot:
        return ""
    return (f"; 95% intervals of the seed mean by a two-level bootstrap, {boot['samples']} replicates (seed "
            f"{boot['seed']}): each replicate draws the {boot['items']:,} test items with replacement once for every "
            "run, and each variant's seeds with replacement; its value is the mean over the drawn seeds of micro F1 "
            "of their summed counts on the drawn items; seed SD: standard deviation over the seeds, and in brackets "
            "the part which items each seed gets right explains (item x seed: half the bootstrap variance of two "
            "seeds' paired difference, over pairs) and the rest (seeds better or worse overall), "
            "`bapjax.analysis.bootstrap.spread`"
            + "".join(f"; {', '.join(f'`{v}`' for v in group)} hold the same models seed for seed (`--paired`): "
                      "their seeds are drawn together" for group in boot.get("paired", ())))


if __name__ == "__main__":
    sys.exit(main())
