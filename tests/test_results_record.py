"""The kept record: every seed of results/cpu_experiment.json, results/cpu_best.json and
results/cpu_tables.json (when it is there) rescores, from its run's kept MDC test predictions,
to exactly the figures the record and its run's final_eval.json state. The only test that reads
results/; the others build what they need."""

import json
from pathlib import Path

import pytest

from bapjax.evaluation import evaluator
from bapjax.world import jsonl

RESULTS = Path(__file__).resolve().parents[1] / "results"
# The records (`python -m bapjax.analysis.collect_experiment` output: {"command", "bootstrap",
# "variants": {variant: {..., "seeds": [{"seed", "run", "micro_overall", "strict_micro", ...}]}}});
# cpu_tables.json's seeds also hold "test": {"mc", "bs", "ss", "r"}, of which "mc" is the MDC's.
RECORDS = ("cpu_experiment.json", "cpu_best.json", "cpu_tables.json")


_REPORTS: dict[str, dict] = {}  # a run listed by two records is rescored once


def _rescored(run: str, items: list) -> dict:
    """The report of results/runs/<run>/predictions/mc_test.jsonl.gz on `items`, as JSON reads it back."""
    if run not in _REPORTS:
        predictions = RESULTS / "runs" / run / "predictions" / "mc_test.jsonl.gz"
        report, _, _ = evaluator.evaluate_items(items, jsonl.read_predictions(predictions))
        _REPORTS[run] = json.loads(json.dumps(report))
    return _REPORTS[run]


def _recorded_figures(seed: dict) -> list[tuple[str, str, object]]:
    """(where, metric, value) of each MDC test figure a record's seed entry states."""
    figures = [("seed", key, seed[key]) for key in ("micro_overall", "strict_micro") if key in seed]
    mc = seed.get("test", {}).get("mc") if isinstance(seed.get("test"), dict) else None
    if isinstance(mc, dict):
        figures += [("test.mc", key, mc[key]) for key in ("micro_overall", "strict_micro") if key in mc]
    elif mc is not None:
        figures.append(("test.mc", "micro_overall", mc))
    return figures


@pytest.mark.parametrize("name", RECORDS)
def test_every_recorded_seed_rescores_to_its_figures(name, mdc_corpus):
    record_path = RESULTS / name
    if not record_path.is_file():
        pytest.skip(f"results/{name} is not in this checkout")
    record = json.loads(record_path.read_text())
    items = mdc_corpus.split("test")
    seeds = [(variant, seed) for variant, entry in record["variants"].items() for seed in entry["seeds"]]
    assert seeds, f"results/{name} lists no seeds"
    for variant, seed in seeds:
        run = RESULTS / "runs" / seed["run"]
        where = f"results/{name} {variant} seed {seed['seed']} ({seed['run']})"
        predictions = run / "predictions" / "mc_test.jsonl.gz"
        assert predictions.is_file(), f"{where}: its predictions {predictions} are missing"
        report = _rescored(seed["run"], items)
        assert report == json.loads((run / "final_eval.json").read_text())["mc_test"], \
            f"{where}: {predictions} does not rescore to final_eval.json's mc_test"
        rescored = {"micro_overall": report["micro"]["Overall"]["overall"], "strict_micro": report["strict_micro"]}
        figures = _recorded_figures(seed)
        assert {key for _, key, _ in figures} == {"micro_overall", "strict_micro"}, f"{where}: {seed}"
        for part, key, value in figures:
            assert value == rescored[key], f"{where}: {part} {key} {value} is not the rescored {rescored[key]}"


@pytest.mark.slow  # regenerates each seed's full-size D_bs, D_ss and D_r (~1-2 min a seed): -m slow
def test_the_tables_simulated_test_sets_rescore_on_each_runs_own_split():
    """results/cpu_tables.json: every seed's D_bs, D_ss, D_r figure is its kept predictions rescored on the
    test split its run generated (regenerated from the run's record, `collect_experiment.run_test_items`)."""
    from bapjax.analysis import collect_experiment

    record_path = RESULTS / "cpu_tables.json"
    if not record_path.is_file():
        pytest.skip("results/cpu_tables.json is not in this checkout")
    record = json.loads(record_path.read_text())
    for variant, entry in record["variants"].items():
        for seed in entry["seeds"]:
            run = RESULTS / "runs" / seed["run"]
            kept = collect_experiment.run_record(run)
            final = json.loads((run / "final_eval.json").read_text())
            for name in ("bs", "ss", "r"):
                where = f"results/cpu_tables.json {variant} seed {seed['seed']} ({seed['run']}) {name}"
                predictions = run / "predictions" / f"{name}_test.jsonl.gz"
                assert predictions.is_file(), f"{where}: its predictions {predictions} are missing"
                items = collect_experiment.run_test_items({**kept, "run": seed["run"]}, name)
                report, _, _ = evaluator.evaluate_items(items, jsonl.read_predictions(predictions))
                assert json.loads(json.dumps(report)) == final[f"{name}_test"], f"{where}: not final_eval.json's"
                assert seed["test"][name] == report["micro"]["Overall"]["overall"], f"{where}: not the record's"
