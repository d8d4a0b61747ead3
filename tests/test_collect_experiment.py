"""bapjax/analysis/collect_experiment.py: results JSON, table and curves come from run directories only."""

import json

import pytest

import configs
from bapjax.analysis import collect_experiment
from bapjax.errors import UserError
from bapjax.evaluation import evaluator, trivial


def _fake_run(root, name, config_arg, reports, invocations, metrics):
    run = root / name
    run.mkdir()
    (run / "config.json").write_text(configs.load(f"configs/{config_arg}").to_json())
    (run / "final_eval.json").write_text(json.dumps(reports))
    (run / "decode.json").write_text(json.dumps({"stop_rule": "mass", "stop_threshold": 0.3}))
    (run / "runs.jsonl").write_text("".join(json.dumps(i) + "\n" for i in invocations))
    (run / "metrics.jsonl").write_text("".join(json.dumps(m) + "\n" for m in metrics))
    return run


def _fake_ensemble(root, name, reports, members, choice, wall_minutes):
    """A `python -m bapjax.ensemble` folder: its ensemble.json (members, the rules chosen) and final_eval.json."""
    run = root / name
    run.mkdir()
    (run / "final_eval.json").write_text(json.dumps(reports))
    (run / "ensemble.json").write_text(json.dumps({
        "command": "python -m bapjax.ensemble --runs ...", "commit": "def456", "members": members, "choice": choice,
        "wall_minutes": wall_minutes}))
    return run


def _invocation(argv, items, seconds, finished=True, commit="abc123"):
    return {"argv": argv, "commit": commit, "wall_seconds": seconds, "items_trained": items, "finished": finished}


def test_collect_rebuilds_rows_from_run_files(tmp_path, mdc_corpus):
    items = mdc_corpus.split("test")[:40]
    oracle = evaluator.evaluate_predictions(items, {i.item_id: trivial.oracle_prediction(i) for i in items})
    empty = evaluator.evaluate_predictions(items, {i.item_id: [] for i in items})
    argv = ["bapjax/train.py", "--config=configs/cpu_experiment.py:mc", "--workdir=runs/exp/mc"]
    mc = _fake_run(tmp_path, "mc", "cpu_experiment.py:mc", {"mc_test": oracle},
                   [_invocation(argv, 640, 90.0, finished=False), _invocation(argv, 320, 30.0)],
                   [{"kind": "val", "step": 10, "loss": 3.0, "mc_val_overall_micro_f1": 0.1},
                    {"kind": "val", "step": 20, "loss": 2.5, "mc_val_overall_micro_f1": 0.2}])
    bert = _fake_run(tmp_path, "bert_cl", "bert.py:cl", {"mc_test": empty}, [_invocation(argv, 960, 60.0)],
                     [{"kind": "val", "step": 30, "loss": 2.0}])

    rows = {run.name: collect_experiment.collect_run(run) for run in (mc, bert)}
    assert rows["mc"]["model"] == "M_mc" and rows["bert_cl"]["model"] == "M'_agg+cl (D, 10 buckets)"
    assert rows["mc"]["train_items_seen"] == 960 and rows["mc"]["invocations"] == 2
    assert rows["mc"]["wall_minutes"] == 2.0
    assert rows["mc"]["command"] == "python -m bapjax.train --config=configs/cpu_experiment.py:mc --workdir=runs/exp/mc"
    assert rows["mc"]["eval"]["mc_test"] == json.loads(json.dumps(oracle))
    assert rows["mc"]["stop_rule"] == {"stop_rule": "mass", "stop_threshold": 0.3}

    markdown = collect_experiment.table(rows)
    mc_line = next(line for line in markdown.splitlines() if line.startswith("| M_mc (`mc`)"))
    cells = [c.strip() for c in mc_line.strip("|").split("|")]
    assert cells[2] == f"{100 * oracle['micro']['Overall']['overall']:.1f}" == "100.0"
    counts = oracle["counts"]
    assert cells[9] == f"{counts['predicted_net_actions']} / {counts['reference_net_actions']}"
    bert_line = next(line for line in markdown.splitlines() if line.startswith("| M'_agg+cl"))
    assert bert_line.split("|")[3].strip() == "0.0"
    assert "paper M'_agg+cl (GPU, Table 6) | | 32.3" in markdown

    breakdown = collect_experiment.breakdown_table(rows)
    eb_line = next(line for line in breakdown.splitlines() if line.startswith("| M_mc (`mc`) | EB"))
    assert eb_line.split("|")[3].strip() == f"{100 * oracle['micro']['EB']['type']:.1f}"
    assert sum(line.startswith("| M'_agg+cl") for line in breakdown.splitlines()) == 3

    assert collect_experiment.plot_curves(rows, tmp_path / "curves.png") == ["mc", "bert_cl"]
    assert (tmp_path / "curves.png").stat().st_size > 1000
    # seeds of one variant share a colour and one legend entry
    seeds = {"mc-s0": rows["mc"], "mc-s1": rows["mc"], "bert_cl-s0": rows["bert_cl"]}
    assert collect_experiment.plot_curves(seeds, tmp_path / "seeds.png") == ["mc (2 runs)", "bert_cl"]


def test_collect_refuses_an_unfinished_run(tmp_path):
    argv = ["bapjax/train.py", "--config=configs/cpu_experiment.py:agg"]
    run = _fake_run(tmp_path, "agg", "cpu_experiment.py:agg", {}, [_invocation(argv, 320, 30.0, finished=False)], [])
    with pytest.raises(UserError, match="has not finished"):
        collect_experiment.collect_run(run)


def test_seeds_of_a_variant_are_listed_with_their_mean(tmp_path, mdc_corpus):
    items = mdc_corpus.split("test")[:30]
    oracle = evaluator.evaluate_predictions(items, {i.item_id: trivial.oracle_prediction(i) for i in items})
    empty = evaluator.evaluate_predictions(items, {i.item_id: [] for i in items})
    rows = {}
    for name, arg, report, seconds in (("cl-s0", "cl", oracle, 60.0), ("cl-s1", "cl,1", empty, 120.0),
                                       ("mc-s0", "mc", empty, 30.0)):
        argv = ["bapjax/train.py", f"--config=configs/cpu_experiment.py:{arg}"]
        run = _fake_run(tmp_path, name, f"cpu_experiment.py:{arg}", {"mc_test": report}, [_invocation(argv, 320, seconds)], [])
        rows[name] = collect_experiment.collect_run(run)
    variants = collect_experiment.by_variant(rows)
    assert list(variants) == ["cl", "mc"]
    seeds = variants["cl"]["seeds"]
    assert [s["seed"] for s in seeds] == [0, 1] and [s["run"] for s in seeds] == ["cl-s0", "cl-s1"]
    assert seeds[0]["micro_overall"] == 1.0 and seeds[1]["micro_overall"] == 0.0
    assert variants["cl"]["seed_mean"]["micro_overall"] == 0.5 and variants["cl"]["seed_mean"]["wall_minutes"] == 1.5
    assert variants["cl"]["seed_mean"]["strict_micro"] == (oracle["strict_micro"] + empty["strict_micro"]) / 2
    line = next(l for l in collect_experiment.seeds_table(variants).splitlines() if l.startswith("| `cl`"))
    assert "| 2 | 50.0 (100.0, 0.0) |" in line

    # the subgroup breakdown of the variants whose runs kept their MDC test predictions (plain as a
    # run writes them, or gzip-compressed as a kept record holds them)
    from bapjax.world import jsonl

    for name, predict, file in (("cl-s0", trivial.oracle_prediction, "mc_test.jsonl"),
                                ("cl-s1", lambda i: [], "mc_test.jsonl.gz")):
        (tmp_path / name / "predictions").mkdir()
        jsonl.write_predictions(tmp_path / name / "predictions" / file, {i.item_id: predict(i) for i in items})
    runs = {name: tmp_path / name for name in rows}
    collect_experiment.add_subgroups(variants, runs, items)
    assert "mc_test_subgroups" not in variants["mc"]  # mc-s0 kept no predictions
    groups = variants["cl"]["mc_test_subgroups"]
    assert set(groups) == set(collect_experiment.SUBGROUPS)
    neb = [i for i in items if i.prev_structure]
    assert sum(groups[s]["items"] for s in collect_experiment.SUBGROUPS[:3]) == len(neb)
    for subset, group in groups.items():
        if group["items"]:
            assert group["per_seed"] == [1.0, 0.0] and group["seed_mean"] == 0.5, subset
    assert "| `cl` | " in collect_experiment.subgroups_table(variants)


def test_model_label_names_the_data_sets_kept_in_every_stage():
    config = {"data": {"sources": {"mc": {}, "bs": {"splits": ["train", "val", "test"]}}},
              "curriculum": {"metric": "D", "num_buckets": 10, "every_stage": ["mc"]}}
    assert collect_experiment.model_label(config) == "M_agg+cl (D, 10 buckets, mc in every stage)"
    config["curriculum"]["every_stage"] = []
    assert collect_experiment.model_label(config) == "M_agg+cl (D, 10 buckets)"


def test_the_collections_json_has_one_line_per_entry_and_reads_back():
    record = {"command": "python -m x", "runs": {"a-s0": {"f1": 0.5, "subgroups": {"all": {"items": 3}}}, "b": {}},
              "option_sets": {}}
    text = collect_experiment.entry_per_line(record)
    assert json.loads(text) == record
    assert len(text.splitlines()) == 8  # {, command, runs: {, 2 runs, }, option_sets, }


def test_the_command_rescores_the_kept_predictions_and_gives_intervals(tmp_path, mdc_path, mdc_corpus, capsys):
    """Runs with kept MDC test predictions: every run rescored to its final_eval.json (a changed one is
    refused in one line, exit 2), each variant's seed mean with its two-level interval and seed SD,
    the differences against the M_agg variant, the command on OUT.md's first line, and the missing
    learning curves named instead of drawn."""
    from bapjax.world import jsonl

    items = mdc_corpus.split("test")
    every_third, every_second = {i.item_id for i in items[::3]}, {i.item_id for i in items[::2]}
    predictors = {"agg-s0": trivial.oracle_prediction,
                  "agg-s1": lambda i: [] if i.item_id in every_third else trivial.oracle_prediction(i),
                  "mc-s0": lambda i: [] if i.item_id in every_second else trivial.oracle_prediction(i)}
    runs = []
    for name, predict in predictors.items():
        predictions = {i.item_id: predict(i) for i in items}
        arg = name.replace("-s", ",")
        argv = ["bapjax/train.py", f"--config=configs/cpu_experiment.py:{arg}"]
        run = _fake_run(tmp_path, name, f"cpu_experiment.py:{arg}",
                        {"mc_test": evaluator.evaluate_predictions(items, predictions)}, [_invocation(argv, 320, 60.0)], [])
        (run / "metrics.jsonl").unlink()  # as a kept record holds them
        (run / "predictions").mkdir()
        jsonl.write_predictions(run / "predictions" / "mc_test.jsonl.gz", predictions)
        runs.append(str(run))
    out = tmp_path / "out" / "experiment"
    args = [*runs, "--out", str(out), "--corpus", str(mdc_path), "--bootstrap", "300", "--seed", "1"]
    assert collect_experiment.main(args) == 0
    record = json.loads(out.with_suffix(".json").read_text())
    assert record["command"] == "python -m bapjax.analysis.collect_experiment " + " ".join(args)
    assert out.with_suffix(".md").read_text().splitlines()[0] == f"`{record['command']}`"
    boot, variants = record["bootstrap"], record["variants"]
    assert (boot["samples"], boot["seed"], boot["items"], boot["reference"], boot["baseline"]) == (300, 1, len(items),
                                                                                                   "agg", "mc")
    agg = variants["agg"]
    low, high = agg["micro_overall_interval"]
    per_seed = [s["micro_overall"] for s in agg["seeds"]]
    assert per_seed[0] == 1.0 and per_seed[1] < 1.0
    assert low < agg["seed_mean"]["micro_overall"] < high <= 1.0 and agg["seed_sd"]["micro_overall"] > 0
    assert variants["mc"]["seed_sd"]["micro_overall"] is None and "seed_spread" not in variants["mc"]  # one seed
    split = agg["seed_spread"]  # the seeds' SD split on the same replicates
    assert split["seed_sd"] == pytest.approx(agg["seed_sd"]["micro_overall"], abs=1e-12)
    assert split["interaction_sd"] > 0 and split["model_sd"] > 0  # agg-s1 loses a third of the items: both
    assert split["seed_sd"] ** 2 == pytest.approx(split["interaction_sd"] ** 2 + split["model_sd"] ** 2, abs=1e-12)
    diff = boot["differences"]["agg - mc"]
    assert diff["interval"][0] > 0 and diff["paper"] == 0.03 and diff["models"] == ["M_agg", "M_mc"]
    markdown = out.with_suffix(".md").read_text()
    assert "| `agg` - `mc` | M_agg - M_mc | " in markdown
    assert f"| `agg` | M_agg | 2 | {100 * agg['seed_mean']['micro_overall']:.1f} [{100 * low:.1f}, {100 * high:.1f}]" \
        in markdown
    assert (f"| {100 * split['seed_sd']:.1f} ({100 * split['interaction_sd']:.1f} / {100 * split['model_sd']:.1f}) |"
            in markdown)
    assert "Learning curves (experiment_curves.png): not drawn, no curve points in agg-s0, agg-s1, mc-s0." in markdown
    capsys.readouterr()

    assert collect_experiment.main([*args, "--reference", "mc", "--baseline", "agg"]) == 0  # either way round
    swapped = json.loads(out.with_suffix(".json").read_text())["bootstrap"]
    assert (swapped["reference"], swapped["baseline"], list(swapped["differences"])) == ("mc", "agg", ["mc - agg"])
    assert swapped["differences"]["mc - agg"]["mean"] == pytest.approx(-diff["mean"], abs=1e-12)
    capsys.readouterr()

    for wrong, line in (([*args, "--reference", "cl"], "error: --reference cl: not a variant of these runs (agg, mc)"),
                        ([*args, "--baseline", "cl"], "error: --baseline cl: not a variant of these runs (agg, mc)"),
                        ([*args, "--reference", "agg", "--baseline", "agg"], "error: --baseline agg: the reference"),
                        ([*args[:-2], "--bootstrap", "-1"], "error: --bootstrap -1: the number of replicates is 0"),
                        ([str(tmp_path), *args[1:]], f"error: {tmp_path}: neither a training workdir (runs.jsonl), "
                                                     "a kept run (record.json) nor an ensemble (ensemble.json)")):
        with pytest.raises(SystemExit) as exit_status:
            collect_experiment.main(wrong)
        assert exit_status.value.code == 2 and capsys.readouterr().err.startswith(line), wrong
    final_eval = tmp_path / "mc-s0" / "final_eval.json"
    changed = json.loads(final_eval.read_text())
    changed["mc_test"]["micro"]["Overall"]["overall"] += 0.01
    final_eval.write_text(json.dumps(changed))
    with pytest.raises(SystemExit) as exit_status:
        collect_experiment.main(args)
    error = capsys.readouterr().err
    assert exit_status.value.code == 2 and error.count("\n") == 1
    assert error.startswith(f"error: {tmp_path / 'mc-s0' / 'predictions' / 'mc_test.jsonl.gz'}: rescored")


def test_an_ensemble_is_a_row_whose_minutes_are_its_members_runs_and_its_decoding(tmp_path, mdc_path, mdc_corpus):
    """A `python -m bapjax.ensemble` folder beside training runs: its rows come from ensemble.json
    (members' minutes and items, the rule chosen on val) and final_eval.json, its kept predictions
    are rescored, and its seeds (the `-s<k>` names) get an interval and a difference against M_agg."""
    from bapjax.world import jsonl

    items = mdc_corpus.split("test")
    every_third = {i.item_id for i in items[::3]}
    runs = []
    for name, predict in (("agg-s0", lambda i: [] if i.item_id in every_third else trivial.oracle_prediction(i)),
                          ("ens-s0", trivial.oracle_prediction), ("ens-s1", trivial.oracle_prediction)):
        predictions = {i.item_id: predict(i) for i in items}
        report = {"mc_test": evaluator.evaluate_predictions(items, predictions)}
        if name.startswith("agg"):
            argv = ["bapjax/train.py", "--config=configs/cpu_experiment.py:agg,0"]
            run = _fake_run(tmp_path, name, "cpu_experiment.py:agg,0", report, [_invocation(argv, 320, 60.0)], [])
            (run / "metrics.jsonl").unlink()
        else:
            members = [{"run": f"runs/ens/agg-m{k}", "step": 3000, "seed": k, "commit": "abc123", "items_trained": 96000,
                        "command": f"python -m bapjax.train --config=configs/cpu_ensemble.py:{k}", "wall_minutes": 8.0}
                       for k in range(4)]
            run = _fake_ensemble(tmp_path, name, report, members,
                                 {"rule": "vote", "value": 0.15, "candidates": []} if name == "ens-s1" else
                                 {"EB": {"rule": "select", "value": 0.1}, "NEB": {"rule": "vote", "value": 0.15},
                                  "candidates": []}, 35.04)
        (run / "predictions").mkdir()
        jsonl.write_predictions(run / "predictions" / "mc_test.jsonl.gz", predictions)
        runs.append(str(run))
    out = tmp_path / "out" / "experiment"
    assert collect_experiment.main([*runs, "--out", str(out), "--corpus", str(mdc_path), "--bootstrap", "200"]) == 0
    record = json.loads(out.with_suffix(".json").read_text())
    ens = record["variants"]["ens"]
    assert ens["model"] == "ensemble of 4 (configs/cpu_ensemble.py)"  # the variant's; the rules are each seed's
    assert ens["rules"] == "EB select at 0.1, NEB vote at 0.15"
    assert "| ensemble of 4 (configs/cpu_ensemble.py); vote at 0.15 (`ens-s1`) |" in out.with_suffix(".md").read_text()
    assert collect_experiment.member_config("python -m bapjax.train --config=configs/cpu_experiment.py:agg,3") == \
        "configs/cpu_experiment.py:agg"
    assert collect_experiment.member_config("python -m bapjax.train --config=configs/x.py:0,full --config.a=1") == \
        "configs/x.py:full"
    assert ens["stop_rule"] == {"EB": {"rule": "select", "value": 0.1}, "NEB": {"rule": "vote", "value": 0.15}}
    assert [s["seed"] for s in ens["seeds"]] == [0, 1] and ens["seed_mean"]["wall_minutes"] == 35.0
    assert ens["train_items_seen"] == 4 * 96000 and ens["seed_mean"]["micro_overall"] == 1.0
    assert record["bootstrap"]["reference"] == "agg" and "ens - agg" in record["bootstrap"]["differences"]
    assert "not drawn, no curve points in agg-s0." in out.with_suffix(".md").read_text()  # ensembles have no curves


def test_paired_variants_draw_their_seeds_together(tmp_path, mdc_path, mdc_corpus, capsys):
    """Two seeds' runs and one-member ensembles of the same runs that get one more item right:
    `--paired agg,vote` compares them seed by seed (the difference's interval at or above 0), where
    unpaired the seeds' spread swamps it; a group of unknown variants or other seeds is refused in one line."""
    from bapjax.world import jsonl

    items = mdc_corpus.split("test")
    dropped = {0: {i.item_id for i in items[::3]}, 1: {i.item_id for i in items[::2]}}  # seeds far apart
    runs = []
    for seed in (0, 1):
        for name in (f"agg-s{seed}", f"vote-s{seed}"):
            kept = dropped[seed] - ({items[0].item_id} if name.startswith("vote") else set())
            predictions = {i.item_id: [] if i.item_id in kept else trivial.oracle_prediction(i) for i in items}
            report = {"mc_test": evaluator.evaluate_predictions(items, predictions)}
            if name.startswith("agg"):
                argv = ["bapjax/train.py", f"--config=configs/cpu_experiment.py:agg,{seed}"]
                run = _fake_run(tmp_path, name, f"cpu_experiment.py:agg,{seed}", report, [_invocation(argv, 320, 60.0)],
                                [])
                (run / "metrics.jsonl").unlink()
            else:
                member = {"run": f"runs/exp/agg-frame-s{seed}", "step": 6000, "seed": seed, "commit": "abc123",
                          "items_trained": 192000, "wall_minutes": 18.0,
                          "command": f"python -m bapjax.train --config=configs/cpu_experiment.py:agg,{seed}"}
                run = _fake_ensemble(tmp_path, name, report, [member],
                                     {"EB": {"rule": "select", "value": 0.1}, "NEB": {"rule": "vote", "value": 0.15},
                                      "candidates": []}, 21.0)
            (run / "predictions").mkdir()
            jsonl.write_predictions(run / "predictions" / "mc_test.jsonl.gz", predictions)
            runs.append(str(run))
    out = tmp_path / "out" / "paired"
    args = [*runs, "--out", str(out), "--corpus", str(mdc_path), "--bootstrap", "300"]
    gains = {}
    for how, extra in (("unpaired", []), ("paired", ["--paired", "agg,vote"])):
        assert collect_experiment.main([*args, *extra]) == 0
        boot = json.loads(out.with_suffix(".json").read_text())["bootstrap"]
        gains[how] = boot["differences"]["vote - agg"]
        assert boot.get("paired") == ([["agg", "vote"]] if extra else None)
    assert gains["paired"]["mean"] == gains["unpaired"]["mean"] > 0
    assert gains["paired"]["interval"][0] >= 0 > gains["unpaired"]["interval"][0]
    assert "`agg`, `vote` hold the same models seed for seed (`--paired`)" in out.with_suffix(".md").read_text()
    capsys.readouterr()
    for paired, line in (("agg,ens", "error: --paired agg,ens: ens is not a variant of these runs (agg, vote)"),
                         ("agg", "error: --paired agg: expected two or more variants")):
        with pytest.raises(SystemExit) as exit_status:
            collect_experiment.main([*args, "--paired", paired])
        assert exit_status.value.code == 2 and capsys.readouterr().err.startswith(line), paired
    with pytest.raises(SystemExit) as exit_status:
        collect_experiment.main([*[r for r in args if not r.endswith("vote-s1")], "--paired", "agg,vote"])
    assert exit_status.value.code == 2
    assert capsys.readouterr().err.startswith("error: --paired agg,vote: the variants hold different seeds "
                                              "(agg: 0, 1; vote: 0)")


def test_a_kept_record_collects_as_its_workdir_did(tmp_path, mdc_corpus):
    """`--keep`: a run becomes record.json (command, commit, config differences, minutes, decode choice,
    curve points), final_eval.json and gzipped predictions; collecting the kept copy gives the same row,
    and its curves are drawn from the record."""
    from bapjax.world import jsonl

    items = mdc_corpus.split("test")[:20]
    oracle = evaluator.evaluate_predictions(items, {i.item_id: trivial.oracle_prediction(i) for i in items})
    argv = ["bapjax/train.py", "--config=configs/cpu_experiment.py:agg,3"]
    metrics = [{"kind": "train", "step": 10 * k, "loss": 5.0 - k / 10, "items_per_s": 100.0 + k} for k in range(1, 80)]
    metrics += [{"kind": "val", "step": 400, "loss": 2.5, "mc_val_overall_micro_f1": 0.2},
                {"kind": "val", "step": 790, "loss": 2.2, "mc_val_overall_micro_f1": 0.25}]
    run = _fake_run(tmp_path / "work" if (tmp_path / "work").mkdir() is None else None, "agg-frame-s3",
                    "cpu_experiment.py:agg,3", {"mc_test": oracle}, [_invocation(argv, 25280, 600.0)], metrics)
    (run / "predictions").mkdir()
    jsonl.write_predictions(run / "predictions" / "mc_test.jsonl", {i.item_id: trivial.oracle_prediction(i) for i in items})
    row = collect_experiment.collect_run(run, host_speed=64.4)
    kept = collect_experiment.keep(run, row, tmp_path / "kept")
    assert sorted(p.name for p in kept.iterdir()) == ["final_eval.json", "predictions", "record.json"]
    assert [p.name for p in (kept / "predictions").iterdir()] == ["mc_test.jsonl.gz"]
    record = json.loads((kept / "record.json").read_text())
    assert record["seed"] == 3 and record["host_bench_b32_items_per_s"] == 64.4 and record["wall_minutes"] == 10.0
    assert record["config_changes"]["seed"] == 3 and "train.batch_size" not in record["config_changes"]
    assert record["config_changes"]["train.learning_rate"] == 0.002
    assert len(record["curve"]["train"]["points"]) <= collect_experiment.CURVE_POINTS
    assert record["curve"]["val"] == {"columns": ["step", "loss", "mc_val_overall_micro_f1"],
                                      "points": [[400, 2.5, 0.2], [790, 2.2, 0.25]]}
    assert record["train_items_per_s_median"] == 141.0  # the first window (compiling) left out
    again = collect_experiment.collect_run(kept)
    assert {k: v for k, v in again.items()} == {k: v for k, v in row.items()}
    assert jsonl.read_predictions(kept / "predictions" / "mc_test.jsonl.gz") == jsonl.read_predictions(
        run / "predictions" / "mc_test.jsonl")
    assert collect_experiment.plot_curves({"agg-frame-s3": again}, tmp_path / "c.png") == ["agg-frame"]
    # a kept record listed again with the same --keep is left as it is (not rewritten from itself)
    before = {p: p.read_bytes() for p in kept.rglob("*") if p.is_file()}
    assert collect_experiment.keep(kept, again, tmp_path / "kept") == kept
    assert {p: p.read_bytes() for p in kept.rglob("*") if p.is_file()} == before


def test_a_single_set_model_is_named_by_its_set():
    config = {"data": {"sources": {"mc": {"splits": ["test"]}, "ss": {"splits": ["train", "val", "test"]},
                                   "r": {"splits": ["test"]}}}}
    assert collect_experiment.model_label(config) == "M_ss"
    config["data"]["sources"]["mc"]["splits"] = ["train", "val", "test"]
    assert collect_experiment.model_label(config) == "M_agg"


def test_simulated_test_sets_rescore_on_the_runs_own_split(tmp_path):
    """A run's simulated test split is regenerated from its record (the source's generate block, its seed)
    and its kept predictions rescore to its final_eval.json; the seeds' own splits give the interval."""
    from bapjax.training import run_config
    from bapjax.world import jsonl

    rows, runs = {}, {}
    for seed in (0, 1):
        config = configs.load("configs/cpu_experiment.py:ss", [f"--config.seed={seed}"])
        config.data.sources.ss = run_config.generated_source("ss", 6, 2, 8, seed=seed)
        row = {"run": f"ss-frame-s{seed}", "config_changes": collect_experiment.config_changes(config.to_dict())}
        items = collect_experiment.run_test_items(row, "ss")
        assert len(items) == 8 and all(i.dataset == "ss" for i in items)
        predictions = {i.item_id: (trivial.oracle_prediction(i) if seed == 0 or k % 2 else []) for k, i in enumerate(items)}
        report = evaluator.evaluate_predictions(items, predictions)
        run = tmp_path / row["run"]
        (run / "predictions").mkdir(parents=True)
        jsonl.write_predictions(run / "predictions" / "ss_test.jsonl.gz", predictions)
        rows[row["run"]] = {**row, "seed": seed, "eval": {"ss_test": json.loads(json.dumps(report))},
                            "wall_minutes": 1.0, "train_items_seen": 0, "model": "M_ss"}
        runs[row["run"]] = run
    counts = collect_experiment.rescored_sets(runs, rows)
    assert set(counts) == {"ss"} and set(counts["ss"]) == set(runs)
    variants = collect_experiment.by_variant(rows)
    collect_experiment.add_set_intervals(variants, counts, samples=200, seed=0)
    cell = variants["ss-frame"]["test_sets"]["ss"]
    assert cell["seeds"] == 2 and cell["mean"] == pytest.approx((1.0 + rows["ss-frame-s1"]["eval"]["ss_test"]["micro"]
                                                                 ["Overall"]["overall"]) / 2)
    assert cell["interval"][0] < cell["mean"] < cell["interval"][1] <= 1.0
    assert [s["test"] for s in variants["ss-frame"]["seeds"]][0] == {"ss": 1.0}
    assert "| `ss-frame` | M_ss | - | " in collect_experiment.sets_table(variants)
    # a third seed decoded on the MDC alone: the ss cell keeps the two seeds that decoded ss
    rows["ss-frame-s2"] = {**rows["ss-frame-s1"], "run": "ss-frame-s2", "seed": 2, "eval": {}}
    variants = collect_experiment.by_variant(rows)
    collect_experiment.add_set_intervals(variants, counts, samples=200, seed=0)
    assert len(variants["ss-frame"]["seeds"]) == 3 and variants["ss-frame"]["test_sets"]["ss"] == cell
    del rows["ss-frame-s2"]
    rows["ss-frame-s1"]["eval"]["ss_test"]["micro"]["Overall"]["overall"] = 0.5  # a record that does not match
    with pytest.raises(UserError, match="ss_test.jsonl.gz: rescored on the run's own ss test split"):
        collect_experiment.rescored_sets(runs, rows)
