"""Augmentation keeps games valid: items map one to one, colors swap in chat and blocks together,
blocks stay in the region, feasibility is unchanged, and a rotated game rotated back is the original."""

import collections
import json
import math
import re
import subprocess
import sys

import numpy as np
import pytest

from bapjax.corpus import augment, mdc
from bapjax.world import grid
from bapjax.world.grid import apply_sequence, as_structure
from tests.conftest import REPO

NUM_GAMES = 6


@pytest.fixture(scope="module")
def train_games(mdc_corpus):
    root = mdc_corpus.root
    splits = mdc.read_splits(root)
    files = [p for p in mdc.game_files(root) if splits.get(mdc.target_of_game(p.parent.name)) == "train"]
    rng = np.random.default_rng(0)
    picked = [files[i] for i in sorted(rng.choice(len(files), NUM_GAMES, replace=False))]
    return [(p, json.loads(p.read_text())) for p in picked]


def _write_game(tmp_path, game_id, record):
    path = tmp_path / "logs" / game_id / "postprocessed-observations.json"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(record))
    return mdc.read_game(path)


def _infeasible_count(item):
    structure = as_structure(item.prev_structure)
    count = 0
    for action in item.reference_actions:
        count += not grid.is_feasible(structure, action)
        structure = grid.apply_to_structure(structure, action)
    return count


def _approx_equal(a, b, path="record"):
    if isinstance(a, dict):
        assert isinstance(b, dict) and a.keys() == b.keys(), path
        for k in a:
            _approx_equal(a[k], b[k], f"{path}.{k}")
    elif isinstance(a, list):
        assert isinstance(b, list) and len(a) == len(b), path
        for n, (x, y) in enumerate(zip(a, b)):
            _approx_equal(x, y, f"{path}[{n}]")
    elif path.endswith(".Yaw"):  # an angle: equal modulo 360
        assert math.isclose((float(a) - float(b) + 180.0) % 360.0, 180.0, abs_tol=1e-6), (path, a, b)
    elif isinstance(a, float) or isinstance(b, float):
        assert math.isclose(float(a), float(b), abs_tol=1e-6), (path, a, b)
    else:
        assert a == b, (path, a, b)


def test_cell_rotation_maps_region_to_itself_and_matches_position_rotation():
    cells = [(x, z) for x in range(grid.X_MIN, grid.X_MAX + 1) for z in range(grid.Z_MIN, grid.Z_MAX + 1)]
    for k in range(4):
        rotated = {augment.rotate_cell(x, z, k) for x, z in cells}
        assert rotated == set(cells)
        for x, z in cells:
            # The cell's center rotates like a continuous position.
            cx, cz = augment.rotate_position(x + 0.5, z + 0.5, k)
            rx, rz = augment.rotate_cell(x, z, k)
            assert math.isclose(cx, rx + 0.5) and math.isclose(cz, rz + 0.5)
    assert augment.rotate_cell(3, -1, 4) == (3, -1)


@pytest.mark.parametrize("yaw", [0.0, 33.0, -170.0, 179.5])
def test_yaw_follows_the_rotation(yaw):
    for k in range(4):
        # Minecraft gaze direction (-sin yaw, cos yaw) must rotate like positions about the origin.
        gx, gz = -math.sin(math.radians(yaw)), math.cos(math.radians(yaw))
        for _ in range(k):
            gx, gz = -gz, gx
        new = math.radians(augment.rotate_yaw(yaw, k))
        assert math.isclose(-math.sin(new), gx, abs_tol=1e-9) and math.isclose(math.cos(new), gz, abs_tol=1e-9)
        assert k == 0 or -180.0 <= augment.rotate_yaw(yaw, k) < 180.0


def test_color_words_are_permuted_with_their_forms():
    perm = (2, 3, 4, 5, 6, 1)  # red->orange, ..., purple->red
    text = "Put Reds on the RED one, a reddish blue; purples and greenish. redo the credit"
    out = augment.permute_color_words(text, perm)
    assert out == "Put Oranges on the ORANGE one, a orangeish purple; reds and blueish. redo the credit"
    assert augment.color_words(out) == [perm[c - 1] for c in augment.color_words(text)]


def test_paraphrase_substitutes_only_lexicon_words(mdc_corpus):
    lexicon = augment.load_lexicon(mdc_corpus.root)
    text = "Okay, place two blocks under the tower. don't remove it"
    out, count = augment.paraphrase(text, lexicon, np.random.default_rng(0), prob=1.0)
    before, after = re.findall(r"[\w']+|\W", text), re.findall(r"[\w']+|\W", out)
    assert len(before) == len(after)
    changed = [(a, b) for a, b in zip(before, after) if a != b]
    assert len(changed) == count > 0
    for old, new in changed:
        assert new.lower() in lexicon[old.lower()]
    assert "don't" in out  # words inside contractions are left alone
    assert augment.paraphrase(text, lexicon, np.random.default_rng(0), prob=0.0) == (text, 0)


def test_draws_are_distinct_non_identity_and_seeded():
    draws = augment.draw_augmentations("B1-A2-C3-4", seed=7, copies=20, paraphrase_prob=0.5)
    keys = [(a.rotation, a.permutation) for a in draws]
    assert len(set(keys)) == 20 and (0, augment.IDENTITY) not in keys
    assert draws == augment.draw_augmentations("B1-A2-C3-4", seed=7, copies=20, paraphrase_prob=0.5)
    assert draws != augment.draw_augmentations("B1-A2-C3-4", seed=8, copies=20, paraphrase_prob=0.5)


def test_rotated_and_permuted_game_transformed_back_is_the_original(train_games):
    rng = np.random.default_rng(1)
    for path, raw in train_games:
        k = int(rng.integers(1, 4))
        perm = augment.ALL_PERMUTATIONS[int(rng.integers(len(augment.ALL_PERMUTATIONS)))]
        forward = augment.Augmentation(k, perm, 0.0, 0)
        back = augment.Augmentation(4 - k, augment.inverse_permutation(perm), 0.0, 0)
        there, _ = augment.augment_raw_game(raw, forward, {}, str(path))
        assert there != raw
        again, _ = augment.augment_raw_game(there, back, {}, str(path))
        _approx_equal(again, raw)


def test_augmented_games_yield_the_transformed_items(train_games, tmp_path):
    checked = 0
    for path, raw in train_games:
        original = mdc.read_game(path)
        items, skipped = mdc.itemize_game(original, "train")
        for copy, aug in enumerate(augment.draw_augmentations(original.game_id, 3, 3, 0.0), 1):
            record, subs = augment.augment_raw_game(raw, aug, {}, str(path))
            assert subs == 0
            game_id = augment.augmented_game_id(original.game_id, copy)
            game = _write_game(tmp_path / f"c{copy}", game_id, record)
            assert game.target_id == original.target_id
            new_items, new_skipped = mdc.itemize_game(game, "train")
            assert (len(new_items), new_skipped) == (len(items), skipped)
            for item, new in zip(items, new_items):
                want = augment.transform_item(item, aug, copy)
                assert new.item_id == want.item_id
                assert new.prev_structure == want.prev_structure
                assert new.next_structure == want.next_structure
                # Placements of one logged transition are ordered by coordinates, which a rotation
                # reorders; the multiset and the resulting structure are what must agree.
                assert sorted(new.reference_actions) == sorted(want.reference_actions)
                assert as_structure(new.next_structure) == apply_sequence(new.prev_structure, new.reference_actions)
                assert new.dialogue == want.dialogue
                assert np.allclose(new.builder_pose, want.builder_pose)
                assert _infeasible_count(new) == _infeasible_count(item)
                for block in new.prev_structure + new.next_structure:
                    assert grid.in_region(block.x, block.y, block.z)
                # Chat colors and block colors are swapped together.
                for old_turn, new_turn in zip(item.dialogue, new.dialogue):
                    assert augment.color_words(new_turn.text) == [
                        aug.permutation[c - 1] for c in augment.color_words(old_turn.text)]
                old_colors = collections.Counter(b.color for b in item.next_structure)
                new_colors = collections.Counter(b.color for b in new.next_structure)
                assert new_colors == {aug.permutation[c - 1]: n for c, n in old_colors.items()}
                checked += 1
    assert checked > 50


def test_paraphrased_copy_keeps_chat_line_structure(train_games, mdc_corpus, tmp_path):
    lexicon = augment.load_lexicon(mdc_corpus.root)
    path, raw = train_games[0]
    aug = augment.Augmentation(0, augment.IDENTITY, 1.0, 5)
    record, subs = augment.augment_raw_game(raw, aug, lexicon, str(path))
    assert subs > 0
    for old, new in zip(raw["WorldStates"], record["WorldStates"]):
        assert len(old["ChatHistory"]) == len(new["ChatHistory"])
        for a, b in zip(old["ChatHistory"], new["ChatHistory"]):
            assert a.split(">")[0] == b.split(">")[0]  # speaker prefix kept
    # A line keeps one paraphrase across the cumulative histories.
    last = record["WorldStates"][-1]["ChatHistory"]
    for state in record["WorldStates"]:
        assert state["ChatHistory"] == last[:len(state["ChatHistory"])]


def test_augmenting_shows_its_progress_on_stderr(train_games, mdc_corpus, tmp_path, capsys):
    """The step's games and then the itemizing of what it wrote, each in `cli.Progress` lines
    (rate and ETA; the last line the time and rate), with library logs left quiet."""
    logs = mdc_corpus.root / "data" / "logs"
    mini = tmp_path / "mini"
    for path, _ in train_games[:3]:
        copy = mini / "data" / "logs" / path.relative_to(logs)
        copy.parent.mkdir(parents=True)
        copy.write_bytes(path.read_bytes())
    targets = sorted({mdc.target_of_game(path.parent.name) for path, _ in train_games[:3]})
    (mini / "data" / "logs" / "splits.json").write_text(json.dumps({"train": targets, "val": [], "test": []}))
    capsys.readouterr()
    augment.augment_games(mini, tmp_path / "out", seed=0, copies=1, paraphrase_prob=0.0, processes=1)
    lines = capsys.readouterr().err.splitlines()
    games, items = [[line for line in lines if line.startswith(f"{label}: ")] for label in ("augment", "itemize")]
    assert games[0].startswith("augment: 1/3 games in ") and "rate and ETA from the next line" in games[0]
    assert re.fullmatch(r"augment: 3/3 games in \d+ s \([\d.]+ games/s\)", games[-1]), games
    assert items[-1].startswith("itemize: 6/6 games in ") and "next line" not in items[-1], items
    assert set(lines) == set(games + items), lines  # nothing else


@pytest.mark.slow
def test_cli_writes_the_paper_4x_mix(mdc_path, tmp_path):
    out = tmp_path / "aug"
    result = subprocess.run(
        [sys.executable, "-m", "bapjax.corpus.augment", "--corpus", str(mdc_path), "--seed", "0",
         "--out", str(out)], capture_output=True, text=True, cwd=REPO, check=True)
    stats = json.loads(result.stdout.strip().splitlines()[-1])
    assert stats["original_items"] == 3709 and stats["augmented_items"] == 3 * 3709
    corpus = mdc.load_corpus(out, use_cache=False)
    train = corpus.split("train")
    assert len(train) == 14836
    assert not corpus.items.get("val") and not corpus.items.get("test")
    ids = [i.item_id for i in train]
    assert len(set(ids)) == len(ids)
    per_game = collections.Counter(i.game_id.split("-aug")[0] for i in train)
    originals = {i.item_id: i for i in mdc.load_corpus(mdc_path).split("train")}
    assert per_game == collections.Counter({g: 4 * n for g, n in collections.Counter(
        i.game_id for i in originals.values()).items()})
    # Every augmented item is valid: in the region, same feasibility as its original, same sizes.
    for item in train:
        source = originals[item.item_id.replace(item.game_id, item.game_id.split("-aug")[0])]
        assert _infeasible_count(item) == _infeasible_count(source)
        assert len(item.reference_actions) == len(source.reference_actions)
        assert len(item.prev_structure) == len(source.prev_structure)
        for block in item.prev_structure + item.next_structure:
            assert grid.in_region(block.x, block.y, block.z)


def test_cli_refuses_to_replace_a_corpus_it_did_not_write(mdc_path, tmp_path):
    """--out at a folder with game logs that bapjax did not write (a copy of the MDC, or the MDC
    itself): one line, exit 2, nothing deleted."""
    foreign = tmp_path / "copy"
    (foreign / "data" / "logs").mkdir(parents=True)
    (foreign / "data" / "logs" / "splits.json").write_text("{}")
    for out in (foreign, mdc.resolve_corpus(mdc_path)):
        result = subprocess.run(
            [sys.executable, "-m", "bapjax.corpus.augment", "--corpus", str(mdc_path), "--seed", "0",
             "--out", str(out)], capture_output=True, text=True, cwd=REPO, timeout=300)
        assert result.returncode == 2, result.stderr
        assert len(result.stderr.strip().splitlines()) == 1 and str(out) in result.stderr
    assert (foreign / "data" / "logs" / "splits.json").read_text() == "{}"
    assert (mdc.resolve_corpus(mdc_path) / "data" / "logs" / "splits.json").exists()
