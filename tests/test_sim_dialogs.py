"""The three dialogue simulators, checked through the corpora they write.

Every item is read back with the MDC reader; its instruction record (the simulator's own account
of what the Architect said) is checked against the world at that moment by code written here,
independently of the generator: the stated relation is parsed from its words, the reference
block is resolved from the blocks and the Builder's yaw, and the target cells must be what the
Builder's actions changed.
"""

import json
import math
import re
from pathlib import Path

import numpy as np
import pytest

from bapjax.corpus import mdc
from bapjax.sim import generate
from bapjax.sim.grounding import NUMBERS
from bapjax.sim.shapes import Shape
from bapjax.sim.structures import constraint_violations
from bapjax.world import grid
from bapjax.world.grid import PLACE, Action, as_structure
from tests.test_sim_spatial import parse_direction_phrase, parse_offset, ref_axes

SIZES = {"train_items": 360, "val_items": 45, "test_items": 41}
EXTREME_CUES = {"top": ("top", "highest", "uppermost"), "bottom": ("bottom", "lowest"), "left": ("left",),
                "right": ("right",), "front": ("front", "nearest", "closest"),
                "back": ("back", "farthest", "furthest")}
SHAPE_WORDS = {"row": ("row", "line", "column", "tower", "stack", "pillar"),
               "diagonal": ("diagonal", "staircase", "stairs", "steps"),
               "plane": ("plane", "floor", "rectangle", "layer", "wall", "square", "platform", "board")}
LAST_CUES = ("last", "previous", "just", "that", "it", "recent")


@pytest.fixture(scope="module", params=["r", "bs", "ss"])
def sim_corpus(request, tmp_path_factory):
    out = tmp_path_factory.mktemp(f"sim_{request.param}")
    stats = generate.generate_corpus(request.param, out, seed=7, processes=2, progress=False, **SIZES)
    corpus = mdc.load_corpus(out, use_cache=False)
    return request.param, out, stats, corpus


# ----------------------------------------------------------------------------------------------
# Independent helpers


def to_world(offset, yaw):
    """Builder (right, up, away) -> world (dx, dy, dz) by trigonometry."""
    (rx, rz), (fx, fz) = ref_axes(yaw)
    r, u, a = offset
    return (round(r * rx + a * fx), u, round(r * rz + a * fz))


def builder_coords(cell, yaw):
    (rx, rz), (fx, fz) = ref_axes(yaw)
    return (cell[0] * rx + cell[2] * rz, cell[1], cell[0] * fx + cell[2] * fz)


EXTREME_AXIS = {"left": (0, -1), "right": (0, 1), "top": (1, 1), "bottom": (1, -1), "front": (2, -1), "back": (2, 1)}


def resolve_reference(ref, prev, history, yaw):
    """The block a referring expression picks out, or None when it is not unique."""
    kind = ref["kind"]
    if kind == "last":
        for event in reversed(history):
            if isinstance(event, Action) and event.type == PLACE and prev.get((event.x, event.y, event.z)) == event.color:
                return (event.x, event.y, event.z)
        return None
    color = grid.color_id(ref["color"]) if ref["color"] else None
    candidates = [c for c, k in prev.items() if color is None or k == color]
    if kind == "color":
        return candidates[0] if len(candidates) == 1 else None
    axis, sgn = EXTREME_AXIS[ref["extreme"]]
    values = [sgn * builder_coords(c, yaw)[axis] for c in candidates]
    best = max(values)
    winners = [c for c, v in zip(candidates, values) if v == best]
    return winners[0] if len(winners) == 1 else None


def add(a, b, k=1):
    return (a[0] + k * b[0], a[1] + k * b[1], a[2] + k * b[2])


def number_in(text, n):
    """Whether `n` is said in digits or as a number word (grounding's table, without "a")."""
    text = re.sub(r"(\d)x(\d)", r"\1 x \2", text.lower())  # "2x3"
    tokens = set(text.replace("-", " ").replace(",", " ").split())
    return str(n) in tokens or any(NUMBERS.get(t) == n for t in tokens if t != "a")


def records_of(root, item):
    game_dir = Path(root) / "data" / "logs" / f"sim-{item.split}" / "logs" / item.game_id
    return json.loads((game_dir / "instructions.json").read_text())


def segment_turns(item):
    """The chat turns after the Builder's last action in the history (this segment's dialogue)."""
    turns = []
    for event in reversed(item.history):
        if isinstance(event, Action):
            break
        turns.append(event)
    return list(reversed(turns))


# ----------------------------------------------------------------------------------------------
# Tests


def test_exact_item_counts_and_reader(sim_corpus):
    dataset, root, stats, corpus = sim_corpus
    assert corpus.dataset == dataset
    for split, key in (("train", "train_items"), ("val", "val_items"), ("test", "test_items")):
        assert len(corpus.split(split)) == SIZES[key]
        assert stats["splits"][split]["items"] == SIZES[key]
        assert all(item.dataset == dataset for item in corpus.split(split))
    assert corpus.skipped_out_of_region == {"train": 0, "val": 0, "test": 0}


def test_splits_disjoint_by_target(sim_corpus):
    _, root, _, corpus = sim_corpus
    splits = json.loads((Path(root) / "data" / "logs" / "splits.json").read_text())
    seen = {}
    structures = {}
    for split, targets in splits.items():
        for target in targets:
            assert target not in seen, f"{target} in {seen.get(target)} and {split}"
            seen[target] = split
            key = frozenset(mdc.load_gold_structure(Path(root), target).items())
            assert key not in structures or structures[key] == split, f"{target} repeats a structure"
            structures[key] = split
    for split in ("train", "val", "test"):
        assert {i.target_id for i in corpus.split(split)} <= set(splits[split])


def test_games_feasible_end_at_target_and_poses_recorded(sim_corpus):
    dataset, root, _, _ = sim_corpus
    root = Path(root)
    files = mdc.game_files(root)
    assert files
    for path in files:
        raw = json.loads(path.read_text())
        assert all(s["BuilderPosition"] is not None for s in raw["WorldStates"]), path
        assert raw["WorldStates"][0]["ChatHistory"] == ["<Builder> Mission has started."]
        game = mdc.read_game(path)
        current = {}
        for n, state in enumerate(game.world_states[1:], 1):
            before, after = game.world_states[n - 1].blocks, state.blocks
            changed = {c for c in set(before) | set(after) if before.get(c) != after.get(c)}
            assert len(changed) <= 1, f"{path} state {n}: {len(changed)} blocks changed at once"
            if changed:
                cell = changed.pop()
                action = (Action(PLACE, after[cell], *cell) if cell in after
                          else Action(grid.REMOVE, before[cell], *cell))
                reason = grid.infeasibility_reason(current, action)
                assert reason is None, f"{path} state {n}: {reason}"
                current = grid.apply_to_structure(current, action)
        gold = mdc.load_gold_structure(root, game.target_id)
        assert current == gold, f"{path}: the game does not end at its gold structure"
        info = json.loads((path.parent / "instructions.json").read_text())["info"]
        if not info.get("truncated"):
            shapes = [Shape.from_json(s) for s in info.get("shape_records", [])] or None
            assert constraint_violations(gold, shapes) == [], path
            if dataset == "bs":
                assert len(shapes) == 3
            if dataset == "ss":
                assert len(shapes) == 2 and {s.kind for s in shapes} <= {"row", "diagonal", "plane"}


def test_every_instruction_is_grounded(sim_corpus):
    """Parse what the Architect said and check it against the world in the Builder's frame."""
    dataset, root, _, corpus = sim_corpus
    checked = {"relation": 0, "anchor": 0, "reference": 0, "first": 0, "clarification": 0, "mistake": 0,
               "correction": 0}
    cache = {}
    for split in ("train", "val", "test"):
        for item in corpus.split(split):
            if item.game_id not in cache:
                cache[item.game_id] = records_of(root, item)["records"]
            k = int(item.item_id.rsplit(":", 1)[1])
            rec = cache[item.game_id][k]
            where = f"{item.item_id}: {rec['text']!r}"
            prev, nxt = as_structure(item.prev_structure), as_structure(item.next_structure)
            yaw = item.builder_pose.yaw
            assert abs(((yaw + 45) % 90) - 45) <= 42.001, f"{where}: yaw {yaw} is near a quadrant boundary"
            turns = segment_turns(item)
            architect = [t.text.lower() for t in turns if t.speaker == "Architect"]
            instruction = rec["text"].lower()
            lines = [" ".join(line.split()).lower() for line in rec["lines"]]
            assert ", ".join(lines) == " ".join(rec["text"].split()).lower(), where
            assert all(line in architect for line in lines), where
            said = " ".join(architect)
            if rec["clarification"]:
                checked["clarification"] += 1
                assert [t.speaker for t in turns[-3:]] == ["Architect", "Builder", "Architect"], where
                assert turns[-1].text == rec["clarification"][1]
            # what the Builder's actions changed is what the instruction asked for
            placed = {c: v for c, v in nxt.items() if prev.get(c) != v}
            removed = {c for c in prev if c not in nxt}
            targets = [tuple(c) for c in rec["target_cells"]]
            color = grid.color_id(rec["color"])
            if rec.get("mistake"):  # the Builder got the color wrong; the next item corrects it
                checked["mistake"] += 1
                assert placed == {tuple(rec["mistake"]["cell"]): grid.color_id(rec["mistake"]["color"])}, where
                assert targets == [tuple(rec["mistake"]["cell"])] and rec["mistake"]["color"] != rec["color"], where
                nxt_rec = cache[item.game_id][k + 1]
                assert nxt_rec["kind"] == "correction" and nxt_rec["target_cells"] == rec["target_cells"], where
                continue
            if rec["kind"] == "correction":
                checked["correction"] += 1
                assert prev[targets[0]] == grid.color_id(rec["wrong_color"]), where
                assert rec["color"] in said, where  # the block it corrects is the one just placed
            if rec["kind"] == "remove":
                assert not placed and removed == set(targets) and prev[targets[0]] == color, where
            else:
                assert rec["color"] in said, f"{where}: color not stated"
                assert not removed and set(placed) == set(targets), where
                assert all(v == color for v in placed.values()), where
            # the Builder's pose: outside the blocks, near them, looking at the work
            pose = item.builder_pose
            feet = (round(pose.x), round(pose.y), round(pose.z))
            assert feet not in prev and feet not in nxt, where
            everything = list(prev) + list(nxt) + targets
            assert min(math.dist((pose.x, pose.y, pose.z), c) for c in everything) <= 12.5, where
            centre = np.mean(np.asarray(targets, float), axis=0)
            theta = math.radians(yaw)
            view = np.array([-math.sin(theta), math.cos(theta)])
            to_target = np.array([centre[0] - pose.x, centre[2] - pose.z])
            assert view @ to_target > math.cos(math.radians(75)) * np.linalg.norm(to_target), where
            if rec["kind"] == "first":
                checked["first"] += 1
                assert not prev and targets[0][1] == grid.Y_MIN, where
                assert "ground" in instruction or "floor" in instruction, where
                continue
            if rec["kind"] == "shape" and rec["on_ground"]:
                checked["first"] += 1
                assert not prev and min(c[1] for c in targets) == grid.Y_MIN
                assert "ground" in instruction or "floor" in instruction, where
            # the reference block, resolved from the words' meaning
            ref_cell = None
            if rec["ref"]:
                checked["reference"] += 1
                ref = rec["ref"]
                ref_cell = resolve_reference(ref, prev, item.history, yaw)
                assert ref_cell == tuple(ref["cell"]), f"{where}: reference {ref} resolves to {ref_cell}"
                text = ref["text"].lower()
                assert text in said, where
                if ref["color"]:
                    assert ref["color"] in text, where
                if ref["extreme"]:
                    assert any(cue in text for cue in EXTREME_CUES[ref["extreme"]]), where
                if ref["kind"] == "last":
                    assert any(cue in text.split() or cue in text for cue in LAST_CUES), where
            if rec["kind"] == "remove" and rec.get("target_is_ref"):
                assert ref_cell == targets[0], where
                continue
            # the relation to the reference block, parsed from its words
            if rec["relation"]:
                checked["relation"] += 1
                relation = rec["relation"]
                assert relation["text"].lower() in said, where
                offset = parse_offset(relation["text"])
                assert list(offset) == relation["offset"], f"{where}: words say {offset}"
                delta = to_world(offset, yaw)
                if rec["kind"] in ("place", "remove"):
                    assert targets == [add(ref_cell, delta)], where
                elif rec["kind"] == "run":
                    assert targets == [add(ref_cell, delta, k) for k in range(1, rec["count"] + 1)], where
                elif rec["kind"] == "shape":
                    assert tuple(rec["start"]) == add(ref_cell, delta), where
            # Builder-anchored directions, parsed from their words
            if rec["anchor"]:
                checked["anchor"] += 1
                anchor_text = rec["anchor"]["text"].lower()
                assert anchor_text in said, where
                pieces = parse_direction_phrase(anchor_text)
                if rec["kind"] == "run":
                    step = to_world(parse_offset(anchor_text), yaw)
                    assert targets == [add(ref_cell, step, k) for k in range(1, rec["count"] + 1)], where
                elif rec["shape"] == "plane":
                    (d1, n1), (d2, n2) = pieces
                    w1, w2 = to_world(d1, yaw), to_world(d2, yaw)
                    start = tuple(rec["start"])
                    expected = {add(add(start, w1, i), w2, j) for i in range(n1) for j in range(n2)}
                    assert set(targets) == expected, where
                else:
                    step = to_world(parse_offset(anchor_text), yaw)
                    start = tuple(rec["start"])
                    assert set(targets) == {add(start, step, k) for k in range(len(targets))}, where
                    assert number_in(said, len(targets)), f"{where}: length not stated"
            if rec["kind"] == "run":
                assert number_in(said, rec["count"]), f"{where}: count not stated"
            if rec["kind"] == "shape":
                words = SHAPE_WORDS[rec["shape"]]
                assert any(w in instruction for w in words), f"{where}: shape kind not named"
                for size in rec["sizes"]:
                    assert number_in(said, size), f"{where}: size {size} not stated"
    assert checked["reference"] > 0 and checked["first"] > 0
    assert checked["mistake"] == checked["correction"]
    if dataset in ("r", "bs"):
        assert checked["correction"] > 0
    if dataset in ("r", "bs"):
        assert checked["relation"] > 100
    if dataset in ("bs", "ss"):
        assert checked["anchor"] > 10
    if dataset == "ss":
        assert checked["relation"] > 100


def test_mdc_stats_cli(sim_corpus, tmp_path):
    import os
    import subprocess
    import sys

    _, root, _, _ = sim_corpus
    env = dict(os.environ, BAPJAX_CACHE=str(tmp_path / "cache"))
    result = subprocess.run([sys.executable, "-m", "bapjax.corpus.mdc", "stats", "--corpus", str(root)],
                            capture_output=True, text=True, env=env, timeout=300)
    assert result.returncode == 0, result.stderr
    stats = json.loads(result.stdout.strip().splitlines()[-1])
    assert stats["train"]["items"] == SIZES["train_items"]
    assert stats["test"]["items"] == SIZES["test_items"]


def test_no_doubled_one_and_middle_only_near_the_centre(sim_corpus):
    """Two template bugs stay fixed: "the purple one one to the right" (a doubled "one"), and
    "somewhere in the middle" for a first block far from the centre."""
    from bapjax.sim import language
    from bapjax.world.items import ChatTurn

    for item in sim_corpus[3].split("train"):
        architect = [e.text for e in item.history if isinstance(e, ChatTurn) and e.speaker == "Architect"]
        assert not any(" one one " in f" {line.lower()} " for line in architect), architect
        if architect and "in the middle" in architect[-1]:
            first = item.reference_actions[0]
            assert max(abs(first.x), abs(first.z)) <= language.MIDDLE_RADIUS, (architect[-1], first)
