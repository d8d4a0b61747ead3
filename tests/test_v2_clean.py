"""v2 clean test set: annotation records, look-ahead fixes, drop rules, annotator, CLI."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from bapjax.corpus import v2_clean
from bapjax.corpus.v2_clean import Annotation, AnnotationError
from bapjax.evaluation import evaluator, trivial
from bapjax.world import jsonl
from bapjax.world.actions import structure_diff
from bapjax.world.grid import PLACE, Action, Block, as_structure
from bapjax.world.items import BapItem, BuilderPose, ChatTurn

REPO = Path(__file__).resolve().parents[1]


def make_game(game, steps):
    """Items of one game: each step places the given blocks (x, y, z, color) on the last state."""
    items, structure = [], {}
    for k, blocks in enumerate(steps):
        prev = dict(structure)
        actions = tuple(Action(PLACE, c, x, y, z) for x, y, z, c in blocks)
        for a in actions:
            structure[a.cell] = a.color
        items.append(BapItem(
            item_id=f"{game}:{k}", game_id=game, target_id="C1", split="test",
            history=(ChatTurn("Architect", f"step {k}"),),
            prev_structure=tuple(Block(x, y, z, c) for (x, y, z), c in sorted(prev.items())),
            reference_actions=actions,
            next_structure=tuple(Block(x, y, z, c) for (x, y, z), c in sorted(structure.items())),
            builder_pose=BuilderPose(0, 0, 0, 0, 0)))
    return items


def ann(item_id, context="clear", interpretation="unique", structure="correct"):
    return Annotation(item_id, context, interpretation if context == "clear" else None,
                      structure if context == "clear" else None)


def test_build_rules():
    g = make_game("G", [[(0, 1, 0, 1)], [(1, 1, 0, 2)], [(2, 1, 0, 3)], [(3, 1, 0, 4)],
                        [(4, 1, 0, 5)], [(5, 1, 0, 6)], [(5, 2, 0, 6)]])
    h = make_game("H", [[(0, 1, 0, 1)], [(0, 2, 0, 1)]])
    items = g + h
    annotations = {a.item_id: a for a in [
        ann("G:0", interpretation="multiple"),
        ann("G:1", structure="incorrect"),  # run G:1, G:2 fixed by G:3
        ann("G:2", structure="incorrect"),
        ann("G:3"),
        ann("G:4", structure="incorrect"),  # followed by unclear: dropped
        ann("G:5", context="unclear"),
        ann("G:6"),
        ann("H:0", structure="incorrect"),  # last incorrect in game H: H:1 is unclear
        ann("H:1", context="unclear"),
    ]}
    clean, stats = v2_clean.build_clean_set(items, annotations)
    assert [i.item_id for i in clean] == ["G:0", "G:1", "G:2", "G:3", "G:6"]
    assert stats["kept"] == 5 and stats["fixed"] == 2 and stats["kept_correct"] == 3
    assert stats["dropped"] == {"unclear": 2, "incorrect_unfixable": 2, "unannotated": 0}
    assert stats["multiple"] == 1 and stats["unique"] == 4
    by_id = {i.item_id: i for i in clean}
    target = as_structure(g[3].next_structure)
    for fixed in ("G:1", "G:2"):
        item = by_id[fixed]
        assert as_structure(item.next_structure) == target
        assert set(item.reference_actions) == structure_diff(item.prev_structure, target)
        assert item.prev_structure == {i.item_id: i for i in g}[fixed].prev_structure
    assert by_id["G:3"] == g[3]


def test_incorrect_not_followed_directly_is_dropped():
    g = make_game("G", [[(0, 1, 0, 1)], [(1, 1, 0, 2)], [(2, 1, 0, 3)]])
    # G:1 missing from the item list (e.g. filtered out): G:0 is not immediately followed by G:2
    items = [g[0], g[2]]
    annotations = {"G:0": ann("G:0", structure="incorrect"), "G:2": ann("G:2")}
    clean, stats = v2_clean.build_clean_set(items, annotations)
    assert [i.item_id for i in clean] == ["G:2"] and stats["dropped"]["incorrect_unfixable"] == 1


def test_unannotated_items():
    g = make_game("G", [[(0, 1, 0, 1)], [(1, 1, 0, 2)]])
    with pytest.raises(AnnotationError, match="1 of 2 items have no annotation"):
        v2_clean.build_clean_set(g, {"G:0": ann("G:0")})
    clean, stats = v2_clean.build_clean_set(g, {"G:0": ann("G:0")}, skip_unannotated=True)
    assert stats["dropped"]["unannotated"] == 1 and len(clean) == 1


def test_annotation_file_errors(tmp_path):
    path = tmp_path / "a.jsonl"

    def bad(text, pattern):
        path.write_text(text)
        with pytest.raises(AnnotationError, match=pattern):
            v2_clean.read_annotations(path)

    bad('{"item_id": "G:0", "context": "murky"}\n', r"a.jsonl:1: item G:0: field 'context' is 'murky'")
    bad('{"item_id": "G:0", "context": "clear"}\n', r":1: item G:0: missing field 'structure'")
    bad('{"item_id": "G:0", "context": "clear", "structure": "ok"}\n', r"field 'structure' is 'ok'")
    bad('{"context": "clear"}\n', r":1: field 'item_id'")
    bad('{"item_id": "G:0", "context": "unclear"}\n{"item_id": "G:0", "context": "unclear"}\n',
        r":2: item G:0 is annotated twice")
    path.write_text('{"item_id": "G:0", "context": "clear", "structure": "correct"}\n')
    assert v2_clean.read_annotations(path)["G:0"].interpretation == "unique"
    g = make_game("G", [[(0, 1, 0, 1)], [(1, 1, 0, 2)]])
    with pytest.raises(AnnotationError, match="only for empty-board"):
        v2_clean.check_annotations(g, {"G:1": ann("G:1", interpretation="multiple")})


def test_multiple_ids_for_the_evaluator():
    g = make_game("G", [[(0, 1, 0, 1)], [(1, 1, 0, 2)]])
    annotations = {"G:0": ann("G:0", interpretation="multiple")}
    assert v2_clean.multiple_ids(g, annotations) == {"G:0"}
    with pytest.raises(AnnotationError, match="empty-board item"):
        v2_clean.multiple_ids(g, {})
    # An unannotated NEB item is unique; a unique EB item is scored strictly.
    report = evaluator.evaluate_predictions(
        g, {"G:0": [Action(PLACE, 1, 3, 1, 3)], "G:1": list(g[1].reference_actions)},
        multiple=v2_clean.multiple_ids(g, {"G:0": ann("G:0")}))
    assert report["micro"]["EB"]["overall"] == 0.0 and report["micro"]["EB"]["shape"] == 1.0
    report = evaluator.evaluate_predictions(
        g, {"G:0": [Action(PLACE, 1, 3, 1, 3)], "G:1": list(g[1].reference_actions)},
        multiple=v2_clean.multiple_ids(g, annotations))
    assert report["micro"]["EB"]["overall"] == 1.0 and report["counts"]["multiple"] == 1


def test_scripted_annotation_session(tmp_path):
    g = make_game("G", [[(0, 1, 0, 1)], [(1, 1, 0, 2)], [(2, 1, 0, 3)]])
    out = tmp_path / "ann.jsonl"
    answers = iter(["x", "c", "m", "c",  # G:0: bad key re-asked, clear, multiple, correct
                    "c", "i",  # G:1 (NEB: no interpretation question): clear, incorrect
                    "q"])
    shown = []
    assert v2_clean.annotate_items(g, out, ask=lambda prompt: next(answers), show=shown.append) == 2
    records = v2_clean.read_annotations(out)
    assert records["G:0"] == Annotation("G:0", "clear", "multiple", "correct")
    assert records["G:1"] == Annotation("G:1", "clear", "unique", "incorrect")
    assert any("<Architect> step 0" in s for s in shown)
    answers = iter(["u"])  # resumes at G:2
    assert v2_clean.annotate_items(g, out, ask=lambda prompt: next(answers), show=shown.append) == 1
    assert v2_clean.read_annotations(out)["G:2"].context == "unclear"


def test_cli_build_on_mdc_test(mdc_corpus, mdc_path, tmp_path):
    items = mdc_corpus.split("test")
    rng = np.random.default_rng(0)
    records = []
    for item in items:
        u = rng.random()
        if u < 0.1:
            records.append(ann(item.item_id, context="unclear"))
        else:
            interp = "multiple" if item.is_empty_board and rng.random() < 0.5 else "unique"
            records.append(ann(item.item_id, interpretation=interp,
                               structure="incorrect" if u < 0.25 else "correct"))
    annotations = tmp_path / "ann.jsonl"
    v2_clean.write_annotations(annotations, records)
    out, stats_file = tmp_path / "clean.jsonl", tmp_path / "stats.json"
    env = dict(os.environ, PYTHONPATH=str(REPO))
    done = subprocess.run([sys.executable, "-m", "bapjax.corpus.v2_clean", "build", "--corpus", str(mdc_path),
                           "--split", "test", "--annotations", str(annotations), "--out", str(out),
                           "--stats", str(stats_file)], cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr
    stats = json.loads(done.stdout.strip().splitlines()[-1])
    assert stats == json.loads(stats_file.read_text())
    clean = jsonl.read_items(out)
    assert len(clean) == stats["kept"] == stats["kept_correct"] + stats["fixed"]
    assert stats["kept"] + sum(stats["dropped"].values()) == 1616
    assert stats["fixed"] > 0 and stats["multiple"] > 0
    # the oracle scores 1.0 on the clean set, with M taken from the annotations
    predictions = trivial.predict("oracle", clean)
    multiple = v2_clean.multiple_ids(clean, v2_clean.read_annotations(annotations))
    report = evaluator.evaluate_predictions(clean, predictions, multiple=multiple)
    assert report["micro"]["Overall"]["overall"] == 1.0 and report["macro"]["EB"]["shape"] == 1.0
    assert report["counts"]["multiple"] == stats["multiple"]
