"""Grounding of the simulators' output, read from the exported JSONL only (bapjax.sim.grounding).

The checker never sees the simulators' records: it parses the chat of each exported item,
resolves the instruction in the Builder's frame and compares it with the net reference actions.
"""

import dataclasses
import json
import subprocess
import sys

import pytest

from bapjax.corpus import mdc
from bapjax.sim import generate, grounding
from bapjax.world import jsonl
from bapjax.world.grid import Action
from bapjax.world.items import TABLE3


def exported_items(dataset, root, split="train", seed=11, **sizes):
    """Generate a corpus, export a split as JSONL (as users do) and read the JSONL back."""
    generate.generate_corpus(dataset, root, seed=seed, processes=1, progress=False, **sizes)
    path = root / f"{split}.jsonl"
    jsonl.write_items(path, mdc.load_corpus(root, use_cache=False).split(split))
    return jsonl.read_items(path)


@pytest.fixture(scope="module", params=["r", "bs", "ss"])
def small_export(request, tmp_path_factory):
    root = tmp_path_factory.mktemp(f"ground_{request.param}")
    return request.param, exported_items(request.param, root, train_items=400, val_items=10, test_items=10)


def test_every_parsed_instruction_is_correct(small_export):
    dataset, items = small_export
    checks = grounding.check_items(items)
    summary = grounding.summarize(checks)
    wrong = [c for c in checks if c.parsed and not c.correct]
    assert not wrong, f"{dataset}: {wrong[0].item_id} ({wrong[0].kind}): {wrong[0].reason}\n{wrong[0].text}"
    assert summary["parsed_share"] >= 0.9, summary
    assert summary["correct"] == summary["parsed"] > 300
    kinds = summary["kinds"]
    expected = {"r": {"first", "place", "remove"}, "bs": {"first", "place", "run"}, "ss": {"shape"}}[dataset]
    assert expected <= {k for k, v in kinds.items() if v["correct"] > 0}, kinds
    if dataset in ("r", "bs"):  # Builder mistakes are recognized by the correction that follows
        assert kinds.get("mistake", {}).get("items", 0) == kinds.get("correction", {}).get("correct", -1)


def test_a_wrong_reference_action_is_caught(small_export):
    """The checker can fail: move the last reference action of every checked placement by one
    cell (or recolor it) and the item is flagged incorrect (or, at least, no longer correct)."""
    dataset, items = small_export
    checks = grounding.check_items(items)
    flagged = 0
    for item, check in zip(items, checks):
        if not (check.parsed and check.correct) or check.kind in ("remove", "correction"):
            continue
        last = item.reference_actions[-1]
        moved = Action(last.type, last.color, last.x, last.y + 1, last.z) if last.y < 9 else \
            Action(last.type, last.color, last.x, last.y - 1, last.z)
        recolored = Action(last.type, last.color % 6 + 1, last.x, last.y, last.z)
        for wrong in (moved, recolored):
            bad = dataclasses.replace(item, reference_actions=item.reference_actions[:-1] + (wrong,))
            again = grounding.check_item(bad)
            assert not again.correct, f"{item.item_id}: {wrong} still judged correct ({again.reason})"
            flagged += 1
        if flagged >= 120:
            break
    assert flagged >= 100


def test_cli_reports_shares_and_names_a_bad_flag(tmp_path):
    root = tmp_path / "r"
    exported_items("r", root, train_items=40, val_items=5, test_items=5)
    out = subprocess.run([sys.executable, "-m", "bapjax.sim.grounding", "--items", str(root / "train.jsonl")],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    summary = json.loads(out.stdout.strip().splitlines()[-1])
    assert summary["items"] + summary["mistakes_not_checked"] == 40 and summary["correct"] == summary["parsed"]
    corpus = subprocess.run([sys.executable, "-m", "bapjax.sim.grounding", "--corpus", str(root)],
                            capture_output=True, text=True, timeout=120)  # --split: train by default
    assert corpus.returncode == 0, corpus.stderr
    assert json.loads(corpus.stdout.strip().splitlines()[-1]) == summary
    bad = subprocess.run([sys.executable, "-m", "bapjax.sim.grounding", "--items", str(tmp_path / "nope.jsonl")],
                         capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and "nope.jsonl" in bad.stderr and "Traceback" not in bad.stderr


@pytest.mark.slow
@pytest.mark.parametrize("dataset", ["r", "bs", "ss"])
def test_full_size_train_split_is_grounded(dataset, tmp_path):
    """Table 3 train sizes (D_r 15,825, D_bs 9,890, D_ss 11,868 items), from the JSONL export."""
    train, _, _ = TABLE3[dataset]
    items = exported_items(dataset, tmp_path, seed=0, train_items=train, val_items=1, test_items=1)
    summary = grounding.summarize(grounding.check_items(items))
    assert summary["items"] + summary["mistakes_not_checked"] == train
    assert summary["parsed_share"] >= 0.9 and summary["correct"] == summary["parsed"], summary
