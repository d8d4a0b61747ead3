"""Ensembles (`bapjax.decoding.mbr` and `on_val`, `python -m bapjax.ensemble`): the vote is the set of
highest minimum-Bayes-risk utility (checked against a brute force over every conflict-free set),
"select" over one member is the run's own choice (`mbr.choose` per item), voted sets are buildable in the order
given, and the command chooses on val, decodes test once and writes what a run writes."""

import collections
import itertools
import json
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest

from bapjax.decoding import mbr, on_val
from bapjax.world import grid as G
from bapjax.world import jsonl

REPO = Path(__file__).resolve().parents[1]


def utility(net, voters, cost):
    return mbr.utility(frozenset(net), [G.net_actions(v) for v in voters], cost)


def brute_force_vote(voters, threshold):
    """The highest-utility set among all sets of the voters' net actions with at most one action
    of each type per cell (the plain reference of `mbr.vote`)."""
    actions = sorted({a for v in voters for a in G.net_actions(v)})
    best, best_value = (), float("-inf")
    for size in range(len(actions) + 1):
        for subset in itertools.combinations(actions, size):
            keys = [(a.type, a.x, a.y, a.z) for a in subset]
            if len(set(keys)) < len(keys):
                continue
            value = utility(subset, voters, threshold)
            if value > best_value + 1e-12:
                best, best_value = subset, value
    return frozenset(best), best_value


def random_voters(rng, count):
    cells = [(0, 1, 0), (1, 1, 0), (-2, 1, 0), (2, 1, 1)]  # on the ground (y = 1): any set is buildable
    voters = []
    for _ in range(count):
        chosen = rng.sample(cells, rng.randint(0, 3))
        voters.append([G.Action(G.PLACE, rng.choice([1, 2]), *cell) for cell in chosen])
    return voters


@pytest.mark.parametrize("threshold", [0.2, 0.3, 0.5])
def test_vote_is_the_set_of_highest_utility(threshold):
    rng = random.Random(0)
    for _ in range(40):
        voters = random_voters(rng, rng.randint(2, 6))
        voted = mbr.vote(voters, threshold)
        _, best_value = brute_force_vote(voters, threshold)
        assert utility(voted, voters, threshold) == pytest.approx(best_value)
        assert len(voted) == len(set(voted))


def test_vote_keeps_the_more_frequent_of_two_colors_in_a_cell():
    red, blue = G.Action(G.PLACE, 1, 0, 1, 0), G.Action(G.PLACE, 2, 0, 1, 0)
    assert mbr.vote([[red], [red], [blue]], 0.2) == [red]
    assert mbr.vote([[red], [blue]], 0.2) == [red]  # a tie: the lower color
    assert mbr.vote([[red], [blue]], 0.5) == []  # neither is predicted by more than half


def test_voted_sets_are_built_in_the_order_given():
    lower, upper = G.Action(G.PLACE, 1, 0, 1, 0), G.Action(G.PLACE, 2, 0, 2, 0)  # y = 1: the ground
    top = G.Action(G.REMOVE, 3, 1, 2, 0)
    start = {(1, 1, 0): 4, (1, 2, 0): 3}
    voters = [[upper, lower, top][::-1], [lower, upper, top]]
    ordered = mbr.vote(voters, 0.5, start)
    assert ordered == [top, lower, upper]
    walk = G.StructureWalk(start)
    for action in ordered:
        assert walk.feasible(action), action
        walk.apply(action)


def test_a_voted_block_nothing_supports_is_left_out_and_a_chain_is_built_in_a_feasible_order():
    pillar = G.Action(G.PLACE, 1, 2, 1, 0)
    chain = [G.Action(G.PLACE, 2, x, 2, 0) for x in (0, 1, 2)]  # held up by the pillar under x = 2 only
    floating = G.Action(G.PLACE, 3, -4, 5, -4)
    voted = mbr.vote([[pillar, *chain, floating]] * 2, 0.5)
    assert voted == [pillar, chain[2], chain[1], chain[0]]
    walk = G.StructureWalk()
    assert all(walk.step(action) for action in voted)  # feasible in the order given


Item = collections.namedtuple("Item", "item_id prev_structure")


def test_members_at_m_keeps_what_at_least_m_members_predict_alone():
    a, b, c = (G.Action(G.PLACE, 1, x, 1, 0) for x in (0, 1, 2))
    alone = [{"x": [a, b]}, {"x": [a]}, {"x": [a, b, c]}]
    pooled = mbr.pool([[one] for one in alone], alone)
    item = [Item("x", ())]
    assert [mbr.combine(pooled, "members", m, item)["x"] for m in (1, 2, 3)] == [[a, b, c], [a, b], [a]]
    with pytest.raises(ValueError, match="needs 1 <= m <= 3"):
        mbr.combine(pooled, "members", 4, item)


def test_select_over_one_member_is_the_runs_own_selection():
    rng = random.Random(1)
    items = [f"i{n}" for n in range(12)]
    passes = [{item: random_voters(rng, 1)[0] for item in items} for _ in range(9)]
    pooled = mbr.pool([passes])
    assert pooled.draws_from == 1 and pooled.passes == passes
    for cost in (0.05, 0.15, 0.3):
        chosen = {i: [one[i] for one in passes][mbr.choose([one[i] for one in passes], cost)] for i in items}
        assert mbr.combine(pooled, "select", cost, [Item(i, ()) for i in items]) == chosen


def test_pool_orders_greedy_passes_first_and_votes_among_greedy_members_without_draws():
    a, b, c = ({"x": [G.Action(G.PLACE, n, 0, 1, 0)]} for n in (1, 2, 3))
    pooled = mbr.pool([[a, b], [c, a]])
    assert pooled.passes == [a, c, b, a] and pooled.draws_from == 2
    # the vote is among the draws only: blocks in three cells, c's predicted by none of the draws
    d, e, f = ({"x": [G.Action(G.PLACE, 1, n, 1, 0)]} for n in (1, 2, 3))
    assert set(mbr.combine(mbr.pool([[d, e], [f, d]]), "vote", 0.4, [Item("x", ())])["x"]) == {
        *d["x"], *e["x"]}
    greedy_only = mbr.pool([[a], [b], [a]])
    assert greedy_only.draws_from == 0
    assert mbr.combine(greedy_only, "vote", 0.5, [Item("x", ())]) == {"x": a["x"]}
    with pytest.raises(ValueError, match="rule must be one of select, vote"):
        mbr.combine(greedy_only, "average", 0.5, [Item("x", ())])


@pytest.mark.slow  # trains two runs, then the command decodes val and test, ~3 min: -m slow
def test_the_command_chooses_on_val_and_decodes_test_once(tmp_path, mdc_path, monkeypatch):
    from bapjax.evaluation import evaluator
    from bapjax.training import loop
    from tests.test_end_to_end import tiny_run_config

    monkeypatch.setenv("BAPJAX_CACHE", str(tmp_path / "cache"))
    runs = []
    for seed in (0, 1):
        config = tiny_run_config(mdc_path)
        config.seed = seed
        config.eval.final_splits = ("mc:test",) if seed == 0 else ()  # a member need not decode test itself
        if seed == 1:
            config.train.init_from = str(runs[0])  # a branch of the first member: its minutes count once
        runs.append(tmp_path / f"run{seed}")
        loop.train_and_evaluate(config, runs[-1])
    # a member's draws follow the temperature asked for, not the one its compiled decoder was built with
    from bapjax.corpus import mdc
    from bapjax.decoding import mbr, on_val
    from bapjax.training import run_eval

    val = list(mdc.load_corpus(mdc_path).split("val"))[:8]
    member = run_eval.load_decoder(str(runs[0]))
    cold, hot = (member.passes(val, samples=2, temperature=t) for t in (1e-4, 50.0))
    assert cold[1] == cold[2] == cold[0] and hot[1:] != cold[1:]
    env = {**os.environ, "BAPJAX_CACHE": str(tmp_path / "cache")}
    out = tmp_path / "ens"
    command = [sys.executable, "-m", "bapjax.ensemble", f"--runs={runs[0]},{runs[1]}", f"--corpus={mdc_path}",
               "--samples=2", "--limit=8", "--costs=0.1", "--thresholds=0.3,0.5", f"--out={out}"]
    result = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    record = json.loads((out / "ensemble.json").read_text())
    candidates = record["choice"]["candidates"]
    assert [(r["rule"], r["value"]) for r in candidates] == [
        ("select", 0.1), ("vote", 0.3), ("vote", 0.5), ("members", 1), ("members", 2)]
    for row in candidates:  # the counts per kind of board add up to the row's micro F1
        assert on_val.micro_f1(list(row["counts"].values())) == pytest.approx(row["micro_overall"], abs=1e-9)
    pairs = {(eb["rule"], eb["value"], neb["rule"], neb["value"]): on_val.micro_f1([eb["counts"]["EB"],
                                                                                       neb["counts"]["NEB"]])
             for eb in candidates for neb in candidates}
    best = max(pairs.values())
    chosen = record["choice"]
    assert pairs[(chosen["EB"]["rule"], chosen["EB"]["value"], chosen["NEB"]["rule"], chosen["NEB"]["value"])] == best
    assert chosen["micro_overall"] == pytest.approx(best) and best >= max(r["micro_overall"] for r in candidates) - 1e-12
    assert record["val_items"] == record["test_items"] == 8 and record["minutes"]["total"] > 0
    assert [m["seed"] for m in record["members"]] == [0, 1] and all(m["items_trained"] > 0 for m in record["members"])
    assert record["members"][0]["init_from"] == [] and [t["run"] for t in record["members"][1]["init_from"]] == [
        str(runs[0])] and record["members"][1]["init_from"][0]["wall_minutes"] == record["members"][0]["wall_minutes"]
    assert record["wall_minutes"] == pytest.approx(
        record["minutes"]["total"] + sum(m["wall_minutes"] for m in record["members"]), abs=0.02)
    # a member alone in the ensemble decodes as its own run does (the decoding its decode.json chose)
    own = json.loads((runs[0] / "final_eval.json").read_text())["mc_test"]["micro"]["Overall"]["overall"]
    assert record["alone"][str(runs[0])]["test"]["micro_overall"] == pytest.approx(own, abs=1e-12)

    items = list(mdc.load_corpus(mdc_path).split("test"))[:8]
    predictions = jsonl.read_predictions(out / "predictions" / "mc_test.jsonl.gz")
    report = evaluator.evaluate_predictions(items, predictions, drop_infeasible=False)
    assert json.loads((out / "final_eval.json").read_text())["mc_test"]["micro"] == json.loads(
        json.dumps(report["micro"]))
    again = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert again.returncode == 2 and again.stderr.strip().splitlines()[-1].startswith(f"error: --out {out}: holds")
    # --notest: the choice on val alone, the same as with the test split, which stays untouched
    val_out = tmp_path / "ens_val"
    done = subprocess.run([*command[:-1], f"--out={val_out}", "--notest"], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    val_record = json.loads((val_out / "ensemble.json").read_text())
    assert val_record["test"] is None and val_record["test_items"] == 0 and not (val_out / "final_eval.json").exists()
    assert val_record["choice"] == record["choice"]
    # a kept step of a run as a member beside the run itself
    step = min(int(p.name) for p in (runs[0] / "checkpoints" / "latest").iterdir() if p.name.isdigit())
    kept = runs[0] / "checkpoints" / "latest" / str(step)
    steps_out = tmp_path / "ens_steps"
    done = subprocess.run([*command[:-1], f"--runs={runs[0]},{kept}", "--notest",
                           f"--out={steps_out}"], cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    steps_record = json.loads((steps_out / "ensemble.json").read_text())
    assert [m["step"] for m in steps_record["members"]][1] == step
    assert steps_record["wall_minutes"] == pytest.approx(
        steps_record["minutes"]["total"] + record["members"][0]["wall_minutes"], abs=0.02)  # one run behind both
    second = run_eval.load_decoder(str(kept))
    passes = second.passes(val, samples=2)
    assert steps_record["alone"][str(kept)]["val"]["micro_overall"] == pytest.approx(
        on_val.score(val, second.alone(passes, val))["micro_overall"], abs=1e-12)
    # --rules fixed at the pair chosen on val: only scored there, the same test predictions
    rules = ",".join(f"{chosen[kind]['rule']}:{chosen[kind]['value']:g}" for kind in mbr.BOARDS)
    fixed = tmp_path / "ens_fixed"
    done = subprocess.run([*command[:-1], f"--out={fixed}", f"--rules={rules}"], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    fixed_record = json.loads((fixed / "ensemble.json").read_text())
    assert fixed_record["choice"]["fixed"] and len(fixed_record["choice"]["candidates"]) == 2
    assert {kind: fixed_record["choice"][kind] for kind in mbr.BOARDS} == {kind: chosen[kind]
                                                                                for kind in mbr.BOARDS}
    assert fixed_record["choice"]["micro_overall"] == pytest.approx(chosen["micro_overall"], abs=1e-12)
    assert jsonl.read_predictions(fixed / "predictions" / "mc_test.jsonl.gz") == predictions
    # --noval with them: the test split alone, the same predictions, nothing scored on val
    unscored = tmp_path / "ens_noval"
    done = subprocess.run([*command[:-1], f"--out={unscored}", f"--rules={rules}", "--noval"], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    noval_record = json.loads((unscored / "ensemble.json").read_text())
    assert noval_record["val_items"] == 0 and "val_decode" not in noval_record["minutes"]
    assert noval_record["choice"] == {**{kind: chosen[kind] for kind in mbr.BOARDS}, "micro_overall": None,
                                      "candidates": [], "fixed": True}
    assert all(set(splits) == {"test"} for splits in noval_record["alone"].values())
    assert jsonl.read_predictions(unscored / "predictions" / "mc_test.jsonl.gz") == predictions
    assert noval_record["test"] == fixed_record["test"]

    def refused(*extra):  # a mistaken command: its exit status and its last line
        done = subprocess.run([*command[:-1], f"--out={tmp_path / 'refused'}", *extra], cwd=REPO, env=env,
                              capture_output=True, text=True, timeout=600)
        return done.returncode, done.stderr.strip().splitlines()[-1]

    for extra, message in ((["--noval"], "--noval needs --rules"),
                           ([f"--rules={rules}", "--noval", "--notest"], "--noval with --notest")):
        code, last = refused(*extra)
        assert code == 2 and last.startswith(f"error: {message}"), last
    for bad, message in (("select:0.1", "expected two rules"), ("select:x,vote:0.2", "with a number"),
                         ("average:0.1,vote:0.2", "must be one of"), ("members:3,vote:0.2", "1 <= m <= 2")):
        code, last = refused(f"--rules={bad}")
        assert code == 2 and last.startswith("error: --rules") and message in last, last
    assert not (tmp_path / "refused").exists()


def _choice(counts: dict) -> dict:
    """An ensemble's val choice record with these fairer counts per rule and board."""
    return {"candidates": [{"rule": rule, "value": value, "counts": boards} for (rule, value), boards in counts.items()]}


def test_the_pooled_choice_sums_the_counts_of_every_ensemble():
    """Two ensembles whose own best rules differ: the pooled pair is the best of the summed counts
    (a plain enumeration of the four pairs)."""
    first = _choice({("select", 0.1): {"EB": [50, 100, 100], "NEB": [10, 80, 100]},
                     ("vote", 0.2): {"EB": [40, 100, 100], "NEB": [30, 60, 100]}})
    second = _choice({("select", 0.1): {"EB": [60, 100, 100], "NEB": [20, 90, 100]},
                      ("vote", 0.2): {"EB": [75, 100, 100], "NEB": [22, 80, 100]}})
    pooled = on_val.pooled_choice([first, second])
    plain = {}
    for eb in (("select", 0.1), ("vote", 0.2)):
        for neb in (("select", 0.1), ("vote", 0.2)):
            tp = predicted = reference = 0
            for choice in (first, second):
                rows = {(r["rule"], r["value"]): r["counts"] for r in choice["candidates"]}
                for counts in (rows[eb]["EB"], rows[neb]["NEB"]):
                    tp, predicted, reference = tp + counts[0], predicted + counts[1], reference + counts[2]
            plain[(eb, neb)] = 2 * tp / (predicted + reference)
    best = max(plain, key=plain.get)
    assert ((pooled["EB"]["rule"], pooled["EB"]["value"]), (pooled["NEB"]["rule"], pooled["NEB"]["value"])) == best
    assert pooled["micro_overall"] == pytest.approx(plain[best])
    assert [round(row[0], 12) for row in pooled["ranking"]] == sorted((round(v, 12) for v in plain.values()),
                                                                      reverse=True)


def test_an_exported_builder_is_a_member_with_its_runs_provenance():
    """`pretrained` (a builder directory, `bapjax.export`) has no runs.jsonl: its builder.json names the run."""
    from bapjax import ensemble
    from bapjax.training import checkpoints

    built = json.loads((checkpoints.PRETRAINED_DIR / checkpoints.BUILDER_RECORD).read_text())
    assert ensemble.provenance(checkpoints.PRETRAINED_DIR, "--runs pretrained") == {
        "command": built["command"], "commit": built["commit"], "items_trained": built["train_items_seen"],
        "wall_minutes": built["wall_minutes"]}
    assert built["command"].startswith("python -m bapjax.train") and built["train_items_seen"] > 0
