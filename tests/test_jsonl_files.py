"""The JSONL files on disk (`bapjax.world.jsonl`): gzip by the `.gz` name, read as plainly as
plain text by every command; an empty, binary or damaged file refused in one line naming it."""

from __future__ import annotations

import gzip
import os
import subprocess
import sys
from pathlib import Path

import pytest

from bapjax.corpus import load
from bapjax.world import jsonl
from bapjax.world.grid import PLACE, REMOVE, Action

REPO = Path(__file__).resolve().parents[1]


def _cli(*args):
    env = dict(os.environ, PYTHONPATH=str(REPO))
    return subprocess.run([sys.executable, *args], cwd=REPO, env=env, capture_output=True, text=True, timeout=300)


def test_gzip_round_trip_is_deterministic(tmp_path):
    want = {"a:0": [Action(PLACE, 2, 0, 1, 0), Action(REMOVE, 2, 0, 1, 0)], "a:1": []}
    plain, packed, again = tmp_path / "p.jsonl", tmp_path / "p.jsonl.gz", tmp_path / "q.jsonl.gz"
    jsonl.write_predictions(plain, want)
    jsonl.write_predictions(packed, want)
    jsonl.write_predictions(again, want)
    assert gzip.decompress(packed.read_bytes()) == plain.read_bytes()
    assert packed.read_bytes() == again.read_bytes()  # no file name or time in the header
    assert packed.read_bytes()[4:8] == b"\0\0\0\0"
    assert jsonl.read_predictions(packed) == jsonl.read_predictions(plain) == want
    assert jsonl.stored(tmp_path / "q.jsonl") == again and jsonl.stored(plain) == plain


def test_an_items_file_may_be_gzip(tmp_path, mdc_corpus):
    items = mdc_corpus.split("test")[:5]
    jsonl.write_items(tmp_path / "items.jsonl.gz", items)
    assert [i.to_json() for i in load.load_split(tmp_path / "items.jsonl.gz", None)] == [i.to_json() for i in items]


def test_empty_binary_and_damaged_files_are_named_in_one_line(tmp_path):
    empty, blank, binary = tmp_path / "empty.jsonl", tmp_path / "blank.jsonl", tmp_path / "bin.jsonl"
    empty.write_text("")
    blank.write_text("\n \n")
    binary.write_bytes(bytes(range(256)) * 4)
    for path in (empty, blank):
        with pytest.raises(jsonl.FormatError, match=rf"^{path}: the file is empty \(no predictions in it\)$"):
            jsonl.read_predictions(path)
    assert jsonl.read_annotations(empty, allow_empty=True) == {}
    with pytest.raises(jsonl.FormatError, match=rf"^{binary}: not a UTF-8 JSONL file of items \(line 1 is binary"):
        jsonl.read_items(binary)
    packed = tmp_path / "p.jsonl"
    packed.write_bytes(gzip.compress(b'{"item_id": "a:0", "actions": []}\n'))
    with pytest.raises(jsonl.FormatError, match="it is gzip data: name it p.jsonl.gz"):
        jsonl.read_predictions(packed)
    misnamed = tmp_path / "m.jsonl.gz"
    misnamed.write_text('{"item_id": "a:0", "actions": []}\n')
    with pytest.raises(jsonl.FormatError, match=rf"^{misnamed}: not a gzip file of predictions, or a damaged one"):
        jsonl.read_predictions(misnamed)
    cut = tmp_path / "cut.jsonl.gz"
    cut.write_bytes(gzip.compress(b'{"item_id": "a:0", "actions": []}\n' * 200)[:40])
    with pytest.raises(jsonl.FormatError, match=rf"^{cut}: not a gzip file of predictions, or a damaged one"):
        jsonl.read_predictions(cut)


def test_evaluate_refuses_an_empty_or_binary_input_file(tmp_path, mdc_corpus):
    empty, binary = tmp_path / "empty.jsonl", tmp_path / "binary.jsonl"
    empty.write_text("")
    binary.write_bytes(bytes(range(256)) * 4)
    predictions, items, item_less = tmp_path / "p.jsonl", tmp_path / "items.jsonl", tmp_path / "item_less.jsonl"
    predictions.write_text('{"item_id": "a:0", "actions": []}\n')
    jsonl.write_items(items, mdc_corpus.split("test")[:3])
    item_less.write_text("{}\n")
    cases = [
        (("--items", empty, "--predictions", predictions), f"error: {empty}: the file is empty (no items in it)"),
        (("--items", binary, "--predictions", predictions),
         f"error: {binary}: not a UTF-8 JSONL file of items (line 1 is binary data)"),
        (("--items", items, "--predictions", empty), f"error: {empty}: the file is empty (no predictions in it)"),
        (("--items", item_less, "--predictions", predictions), f"error: {item_less}:1: missing field 'item_id'"),
    ]
    for args, line in cases:
        done = _cli("-m", "bapjax.evaluate", *map(str, args))
        assert done.returncode == 2 and done.stderr.strip().splitlines() == [line], done.stderr


def test_evaluate_reads_gzip_predictions_as_plain_ones(tmp_path, mdc_path, mdc_corpus):
    from bapjax.evaluation import trivial

    items = mdc_corpus.split("test")
    predictions = {i.item_id: trivial.oracle_prediction(i) if n % 3 else [] for n, i in enumerate(items)}
    packed, plain = tmp_path / "mc_test.jsonl.gz", tmp_path / "mc_test.jsonl"
    jsonl.write_predictions(packed, predictions)
    jsonl.write_predictions(plain, predictions)
    tables = []
    for path in (packed, plain):
        done = _cli("-m", "bapjax.evaluate", "--corpus", str(mdc_path), "--split", "test", "--predictions", str(path),
                    "--nocompilation_cache")
        assert done.returncode == 0, done.stderr
        tables.append(done.stdout)
    assert tables[0] == tables[1] and "Micro F1" in tables[0]
