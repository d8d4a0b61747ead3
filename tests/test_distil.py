"""Sequence-level distillation's data (`python -m bapjax.distil`, `bapjax.data.teacher`): the command
writes an ensemble's vote over a source's training items (the items' ids, in their order, as
`bapjax.decoding.Ensemble` predicts them), a stopped run resumes to the very file an uninterrupted
one writes, its bad input is one line and exit 2; a source's teacher block gives training the
teacher's actions as targets (the featurized `actions`, the Builder's frame included), in place of
the references or beside them at a weight, and refuses a teacher that lacks items in one line."""

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from bapjax.data import teacher
from bapjax.world import grid as G
from bapjax.world import jsonl, rotation
from tests.lines import LineReader

REPO = Path(__file__).resolve().parents[1]
LIMIT, CHUNK, SAMPLES = 12, 2, 4  # 6 chunks: a run stopped after the first has several left
RULES = {"EB": ("select", 0.075), "NEB": ("vote", 0.175)}  # the command's default --rules


def command(run, out, *extra) -> list[str]:
    """The tiny run twice as a teacher over the first LIMIT train items of its own source."""
    return [sys.executable, "-m", "bapjax.distil", f"--runs={run},{run}", f"--out={out}", f"--samples={SAMPLES}",
            f"--limit={LIMIT}", f"--chunk_items={CHUNK}", *extra]


def distil(run, out, *extra) -> subprocess.CompletedProcess:
    return subprocess.run(command(run, out, *extra), cwd=REPO, capture_output=True, text=True, timeout=600)


@pytest.fixture(scope="module")
def made(tiny_run, tmp_path_factory) -> Path:
    """A teacher folder, decoded without a stop."""
    out = tmp_path_factory.mktemp("teacher") / "whole"
    done = distil(tiny_run, out)
    assert done.returncode == 0, done.stderr[-3000:]
    summary = done.stderr.strip().splitlines()[-1]
    assert summary.startswith(f"{LIMIT} items of mc train, 2 members, EB select:0.075, NEB vote:0.175 ") and \
        f"{LIMIT} decoded here" in summary and summary.endswith(f"wrote {out}"), summary
    return out


def source_items(run) -> list:
    """The items the teacher decodes: the first LIMIT train items of the run's own mc source."""
    from bapjax.data import sources
    from bapjax.training import checkpoints, run_checks

    config = run_checks.with_defaults(run_checks.read_run_file(checkpoints.find_run_dir(run), "config.json"))
    return sources.load_source("mc", config.data.sources.mc)["train"][:LIMIT]


def test_the_teacher_is_the_ensembles_vote_over_the_sources_train_items(made, tiny_run):
    from bapjax.decoding import Ensemble
    from bapjax.training import run_eval

    items = source_items(tiny_run)
    member = run_eval.load_decoder(str(tiny_run))
    pair = Ensemble([member, member], SAMPLES, 0.8, "inverse_cdf")
    choice = pair.choose(None, [], (), (), RULES)
    expected = {}
    for lo in range(0, LIMIT, CHUNK):  # decoded a chunk at a time, as the command decodes them
        chunk = items[lo:lo + CHUNK]
        expected.update(pair.predict(pair.pool(chunk), choice, chunk))
    path = made / teacher.PREDICTIONS
    assert jsonl.read_predictions(path) == expected  # a predictions file: bapjax.evaluate reads it too
    records = list(teacher.read_chunks(path).records.values())
    assert [r["item_id"] for r in records] == [item.item_id for item in items]
    assert [r["item_digest"] for r in records] == [teacher.item_digest(item) for item in items]
    record = json.loads((made / teacher.RECORD).read_text())
    assert record["finished"] and record["decoded"] == record["items"] == LIMIT
    assert record["defines"]["decoding"] == {"samples": SAMPLES, "temperature": 0.8, "sampler": "inverse_cdf",
                                             "first_draw": 0, "rules": {k: {"rule": r, "value": v}
                                                                        for k, (r, v) in RULES.items()}}
    assert record["defines"]["source"]["name"] == "mc" and record["defines"]["source"]["items"] == LIMIT
    assert [m["step"] for m in record["members"]] == [member.run.step] * 2
    assert all(m["commit"] and m["command"].startswith("python -m bapjax.train") for m in record["members"])
    assert record["commit"] and len(record["invocations"]) == 1 and record["invocations"][0]["items_decoded"] == LIMIT


def test_a_stopped_run_resumes_to_the_same_file(made, tiny_run, tmp_path):
    out = tmp_path / "stopped"
    child = subprocess.Popen(command(tiny_run, out), cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                             text=True)
    try:
        LineReader(child.stderr).wait_for(rf"^chunk 1/{LIMIT // CHUNK}: ", timeout=300)
    finally:
        child.kill()  # as a lost machine: no handler runs
        child.wait()
    path = out / teacher.PREDICTIONS
    kept = len(teacher.read_chunks(path).records)
    assert CHUNK <= kept < LIMIT and kept % CHUNK == 0
    with open(path, "ab") as handle:  # and a chunk cut short while it was written
        handle.write(teacher.chunk_bytes([{"item_id": "x", "actions": []}])[:20])
    done = distil(tiny_run, out)
    assert done.returncode == 0, done.stderr[-3000:]
    assert f"{path}: cut a damaged last chunk (20 bytes)" in done.stderr
    assert f"{kept} of {LIMIT} items decoded already; {LIMIT - kept} to go" in done.stderr
    assert path.read_bytes() == (made / teacher.PREDICTIONS).read_bytes()
    record = json.loads((out / teacher.RECORD).read_text())
    assert record["finished"] and [one["items_decoded"] for one in record["invocations"]] == [kept, LIMIT - kept]
    again = distil(tiny_run, out)  # finished: nothing decoded, nothing written
    assert again.returncode == 0 and again.stderr.strip().splitlines()[-1].startswith(f"{out} holds this teacher")
    assert json.loads((out / teacher.RECORD).read_text()) == record


def test_bad_input_is_one_line_and_exit_2(made, tiny_run, tmp_path):
    (tmp_path / "afile").write_text("a file where a folder must be\n")
    (tmp_path / "damaged").mkdir()
    (tmp_path / "damaged" / teacher.RECORD).write_text("{")
    cases = [
        ((tiny_run, tmp_path / "new", "--chunk_items=0"), "--chunk_items is 0"),
        ((tiny_run, tmp_path / "new", "--rules=select:0.1"), "--rules"),
        ((tmp_path / "none", tmp_path / "new"), f"--runs: {tmp_path / 'none'}: no config.json"),
        ((tiny_run, tmp_path / "afile" / "t"), f"--out {tmp_path / 'afile' / 't'}: cannot write"),
        ((tiny_run, tmp_path / "damaged"), f"--out {tmp_path / 'damaged'}: {tmp_path / 'damaged' / teacher.RECORD} "
                                           "does not parse"),
        ((tiny_run, made, "--samples=8"), f"--out {made}: holds another teacher (teacher.json: decoding.samples 4 "
                                          "there, 8 here)"),
        ((tiny_run, made, "--source=bs"), "--source bs: the config of"),
    ]
    before = (made / teacher.PREDICTIONS).read_bytes()
    for args, message in cases:
        done = distil(*args)
        assert done.returncode == 2 and done.stderr.count("\n") == 1, (args, done.stderr[-2000:])
        assert done.stderr.startswith(f"error: {message}"), (args, done.stderr)
    assert not (tmp_path / "new").exists() and (made / teacher.PREDICTIONS).read_bytes() == before


def teacher_folder(tmp_path: Path, items, actions: dict) -> Path:
    """A finished teacher folder predicting `actions` {item_id: [Action]} for `items`, as the command writes it."""
    folder = tmp_path / "teacher"
    folder.mkdir()
    teacher.append_chunk(folder / teacher.PREDICTIONS, [teacher.record_of(it, actions[it.item_id]) for it in items])
    (folder / teacher.RECORD).write_text(json.dumps({"defines": {}, "finished": "2026-01-01T00:00:00"}))
    return folder


def student_config(mdc_path, teacher_path, mode: str, weight: float = 1.0):
    """test_train's tiny config on the first LIMIT MDC train items, featurized in the Builder's frame."""
    from tests.test_train import tiny_config

    config = tiny_config("unused")
    mc = config.data.sources.mc
    mc.corpus, mc.max_train_items = str(mdc_path), LIMIT
    mc.teacher.update(dict(path=str(teacher_path), mode=mode, weight=weight))
    config.features.builder_frame = True
    return config


def featurized_targets(actions, item, slots: int) -> list[int]:
    """The action ids an item's targets `actions` (world coordinates) become in the Builder's frame."""
    turns = rotation.builder_frame_turns(item.builder_pose.yaw)
    ids = [G.encode_action(rotation.rotate_action(a, turns)) for a in actions][:slots]
    return ids + [G.STOP] * (slots - len(ids))


@pytest.mark.parametrize("mode", ["replace", "mix"])
def test_a_source_teacher_replaces_or_mixes_the_training_targets(made, mdc_path, mode):
    from bapjax.data import input_pipeline, sources
    from bapjax.text.vocab import Vocabulary

    config = student_config(mdc_path, made, mode, weight=0.25)
    data = sources.load_config_sources(config, log=lambda *args: None)
    references = data["mc"]["train"]
    assert len(references) == LIMIT
    taught = jsonl.read_predictions(made / teacher.PREDICTIONS)
    assert any(len(actions) > 1 for actions in taught.values())
    lines = []
    items, weights = sources.train_items(config, data, log=lambda message, *args: lines.append(message % args))
    assert len(lines) == 1 and "12 training items take its targets" in lines[0]
    feature_config = input_pipeline.FeatureConfig.from_config(config)
    slots = feature_config.num_action_slots
    iterator = input_pipeline.DataIterator(items, Vocabulary.build(references), feature_config, batch_size=len(items),
                                           seed=0, shuffle=False, weights=weights)
    batch = next(iterator)
    # the teacher's actions, or the reference where it predicts none (every item has an action)
    expected = [featurized_targets(taught[it.item_id] or it.reference_actions, it, slots) for it in references]
    if mode == "replace":
        assert batch["actions"].tolist() == expected and batch["weight"].tolist() == [0.25] * LIMIT
    else:  # the references first (as without a teacher), then the teacher's copies
        assert batch["actions"].tolist() == [featurized_targets(it.reference_actions, it, slots)
                                             for it in references] + expected
        assert batch["weight"].tolist() == [1.0] * LIMIT + [0.25] * LIMIT
    assert [it.reference_actions for it in data["mc"]["val"]] == [
        it.reference_actions for it in sources.load_source("mc", config.data.sources.mc)["val"]]


def test_a_teacher_lacking_items_or_made_for_others_is_one_line(tmp_path, mdc_path):
    from bapjax import sharding
    from bapjax.data import sources
    from bapjax.training import run_checks

    config = student_config(mdc_path, "", "replace")
    data = sources.load_config_sources(config, log=lambda *args: None)
    items = data["mc"]["train"]
    place = G.Action(G.PLACE, 1, 0, 1, 0)
    folder = teacher_folder(tmp_path, items[:-3], {it.item_id: [place] for it in items})
    config.data.sources.mc.teacher.path = str(folder)
    with pytest.raises(teacher.TeacherError) as lacking:
        sources.train_items(config, data)
    assert str(lacking.value) == (
        f"--config.data.sources.mc.teacher.path={folder}: {folder / teacher.PREDICTIONS} lacks 3 of the source's "
        f"{LIMIT} training items (first: {items[-3].item_id}); decode them with python -m bapjax.distil on this source")
    other = tmp_path / "other"
    other.mkdir()
    changed = [dataclasses.replace(items[0], item_id=it.item_id) for it in items]  # item 0's content under every id
    config.data.sources.mc.teacher.path = str(teacher_folder(other, changed, {it.item_id: [place] for it in items}))
    with pytest.raises(teacher.TeacherError, match=rf"{LIMIT - 1} of the source's {LIMIT} training items were decoded "
                                                   "from other content of the same id"):
        sources.train_items(config, data)
    # an item the teacher predicts no action for keeps its reference
    whole = tmp_path / "whole"
    whole.mkdir()
    config.data.sources.mc.teacher.path = str(teacher_folder(whole, items, {it.item_id: [place] if n else []
                                                                            for n, it in enumerate(items)}))
    taught, weights = sources.train_items(config, data)
    assert taught[0] == items[0] and weights.tolist() == [1.0] * LIMIT
    assert all(it.reference_actions == (place,) and set(it.next_structure) == set(before.prev_structure) | {
        G.Block(0, 1, 0, 1)} for it, before in zip(taught[1:], items[1:]))
    # the block's fields, checked with the config before any data is read
    mesh = sharding.data_mesh()
    for field, value, message in (("mode", "blend", "expected replace or mix"), ("weight", 0.0, "expected a number > 0"),
                                  ("path", str(tmp_path), "holds no teacher.json")):
        bad = student_config(mdc_path, folder, "replace")
        bad.data.sources.mc.teacher[field] = value
        with pytest.raises(teacher.TeacherError, match=f"^--config.data.sources.mc.teacher.{field}="):
            run_checks.validate_config(run_checks.with_defaults(bad), mesh)
        with pytest.raises(teacher.TeacherError, match=message):
            run_checks.validate_config(run_checks.with_defaults(bad), mesh)


def test_training_takes_the_teachers_targets(made, mdc_path, tmp_path, monkeypatch, capsys):
    """A tiny run trains on a mixed teacher end to end; the train command refuses a bad block in one line."""
    from bapjax.training import loop

    monkeypatch.setenv("BAPJAX_CACHE", str(tmp_path / "cache"))
    config = student_config(mdc_path, made, "mix", weight=0.5)
    config.train.update(dict(max_steps=2, eval_every_steps=2))
    loop.train_and_evaluate(config, tmp_path / "student")
    logged = capsys.readouterr().out
    assert f"config.data.sources.mc.teacher: {made} (mix, weight 0.5): {LIMIT} training items take its targets" in logged
    assert "(0.7 passes over all training items)" in logged  # 2 steps of 8 over the 2 x 12 items
    saved = json.loads((tmp_path / "student" / "config.json").read_text())["data"]["sources"]["mc"]["teacher"]
    assert saved == {"path": str(made), "mode": "mix", "weight": 0.5}
    done = subprocess.run([sys.executable, "-m", "bapjax.train", "--config=cpu", f"--workdir={tmp_path / 'refused'}",
                           "--config.data.sources.mc.teacher.mode=blend"], cwd=REPO, capture_output=True, text=True,
                          timeout=300, env={**os.environ, "BAPJAX_CACHE": str(tmp_path / "cache")})
    assert (done.returncode, done.stderr) == (
        2, "error: --config.data.sources.mc.teacher.mode='blend': expected replace or mix\n"), done.stderr[-2000:]


def test_the_kept_teacher_is_whole_and_the_kd_configs_read_it():
    """results/teacher/mc-train-pair (what configs/cpu_experiment.py:kd_la and kd_mix train on): every
    item of its source once, in whole chunks, and its record names the pair and the decoding."""
    from configs import cpu_experiment

    folder = Path(__file__).resolve().parents[1] / cpu_experiment.TEACHER
    record = teacher.read_record(folder, "TEACHER")
    chunks = teacher.read_chunks(folder / "predictions.jsonl.gz")
    assert chunks.damaged_bytes == 0
    assert len(chunks.records) == record["defines"]["source"]["items"] == 14836
    assert [m["seed"] for m in record["members"]] == [11, 12]
    assert record["defines"]["decoding"]["samples"] == 128
    for variant, mode in cpu_experiment.TEACHER_MODES.items():
        block = cpu_experiment.get_config(variant).data.sources.mc.teacher
        assert (block.path, block.mode) == (cpu_experiment.TEACHER, mode)
