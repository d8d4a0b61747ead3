"""bapjax.data.sources: one resolver for every kind of item source, and the derived-corpus cache."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from bapjax import paths
from bapjax.corpus import load, store
from bapjax.data import sources
from bapjax.world import jsonl

REPO = Path(__file__).resolve().parents[1]


def test_cache_entry_names(tmp_path, monkeypatch):
    """One statement of the derived corpora's folder names (sources and build's --work_dir)."""
    monkeypatch.setenv("BAPJAX_CACHE", str(tmp_path))
    assert sources.generated_entry("r", 4, (6, 2, 2)) == tmp_path / "generated" / "r-seed4-6-2-2"
    assert sources.generated_entry("r", 4, (6, 2, 2), tmp_path / "w") == tmp_path / "w" / "r-seed4-6-2-2"
    assert sources.augmented_entry(0, 3, 0.5) == tmp_path / "augmented" / "mc-seed0-copies3-p0.5"


def test_every_path_kind_gives_the_same_items(mdc_path, mdc_corpus, tmp_path):
    """Archive dir, unpacked dir, items JSONL and item store: the same val items."""
    from bapjax.corpus import mdc

    want = [item.item_id for item in mdc_corpus.split("val")]
    assert [i.item_id for i in load.load_split(mdc_path, "val")] == want
    assert [i.item_id for i in load.load_split(mdc.resolve_corpus(mdc_path), "val")] == want
    jsonl.write_items(tmp_path / "val.jsonl", mdc_corpus.split("val")[:30])
    assert [i.item_id for i in load.load_split(tmp_path / "val.jsonl", None)] == want[:30]
    store.write_store(tmp_path / "store", {"val": mdc_corpus.split("val")[:30]})
    assert [i.item_id for i in load.items_from_flags(store=str(tmp_path / "store"), split="val")] == want[:30]
    assert load.load_split(tmp_path / "store", "val", dataset="bs") == []


def test_item_flags_name_the_mistake(mdc_path, tmp_path):
    with pytest.raises(load.SourceError, match="give exactly one of --corpus, --items"):
        load.items_from_flags()
    with pytest.raises(load.SourceError, match=r"got --corpus, --items"):
        load.items_from_flags(corpus=str(mdc_path), items="x.jsonl", split="val")
    with pytest.raises(load.SourceError, match="--corpus needs --split"):
        load.items_from_flags(corpus=str(mdc_path))
    with pytest.raises(load.SourceError, match="no split 'dev'"):
        load.items_from_flags(corpus=str(mdc_path), split="dev")
    with pytest.raises(load.SourceError, match="no such corpus, store or items file"):
        load.items_from_flags(corpus=str(tmp_path / "missing"), split="val")
    with pytest.raises(load.SourceError, match="no manifest.json"):
        load.items_from_flags(store=str(tmp_path), split="val")


def test_an_unfinished_cache_entry_is_rebuilt_and_a_foreign_one_refused(tmp_path, monkeypatch):
    monkeypatch.setenv("BAPJAX_CACHE", str(tmp_path / "cache"))
    sizes = (6, 2, 2)
    entry = tmp_path / "cache" / "generated" / "r-seed4-6-2-2"
    # a build killed half way: the owner marker, some data, no completion marker
    paths.mark_owned(entry, "bapjax.sim.generate")
    (entry / "data" / "logs").mkdir(parents=True)
    (entry / "data" / "logs" / "half-written.json").write_text("{")
    root, reused = sources.generated_corpus("r", 4, sizes, processes=1, progress=False)
    assert root == entry and not reused and (entry / sources.COMPLETE).exists()
    assert not (entry / "data" / "logs" / "half-written.json").exists()
    assert len(load.load_split(root, "train")) == 6
    assert sources.generated_corpus("r", 4, sizes, processes=1, progress=False) == (entry, True)
    # an entry an older simulator wrote is rebuilt with the current one
    meta_path = entry / "data" / "dataset.json"
    meta = json.loads(meta_path.read_text())
    meta_path.write_text(json.dumps({**meta, "simulator_version": meta["simulator_version"] - 1}))
    assert sources.generated_corpus("r", 4, sizes, processes=1, progress=False) == (entry, False)
    assert json.loads(meta_path.read_text())["simulator_version"] == meta["simulator_version"]
    # a folder bapjax did not write is never removed, even where a cache entry should go
    foreign = tmp_path / "cache" / "generated" / "r-seed5-6-2-2"
    (foreign / "data").mkdir(parents=True)
    (foreign / "data" / "mine.txt").write_text("keep")
    with pytest.raises(paths.NotOursError, match="refusing to replace"):
        sources.generated_corpus("r", 5, sizes, processes=1, progress=False)
    assert (foreign / "data" / "mine.txt").read_text() == "keep"


def test_two_processes_asking_for_one_entry_build_it_once(tmp_path):
    code = ("import json, sys; from bapjax.data import sources; "
            "root, reused = sources.generated_corpus('bs', 2, (12, 3, 3), processes=1, progress=False); "
            "print(json.dumps([str(root), reused]))")
    env = dict(os.environ, BAPJAX_CACHE=str(tmp_path / "cache"))
    procs = [subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True, env=env, cwd=REPO) for _ in range(2)]
    results = []
    for proc in procs:
        out, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, err
        results.append(json.loads(out.strip().splitlines()[-1]))
    assert results[0][0] == results[1][0]
    assert sorted(r[1] for r in results) == [False, True]  # one built it, the other waited and reused it
    assert len(load.load_split(results[0][0], "train")) == 12


def test_augment_copies_come_from_the_config(monkeypatch):
    """`--config.data.sources.mc.augment.copies=N` (and `.paraphrase_prob`) reach the augmented corpus
    it trains on."""
    from bapjax import cli
    from bapjax.corpus import augment

    config = cli.load_config("cpu_experiment:mc")
    assert config.data.sources.mc.augment.copies == augment.DEFAULT_COPIES
    cli.apply_overrides(config, ["--config.data.sources.mc.augment.copies=7",
                                 "--config.data.sources.mc.augment.paraphrase_prob=0.25"])
    asked = []

    class Built(Exception):
        pass

    def fake_augmented_corpus(mdc_path, seed, copies, paraphrase_prob, out):
        asked.append((seed, copies, paraphrase_prob))
        raise Built

    monkeypatch.setattr(sources, "augmented_corpus", fake_augmented_corpus)
    with pytest.raises(Built):
        sources.load_source("mc", config.data.sources.mc)
    assert asked == [(0, 7, 0.25)]


def test_a_source_without_data_is_skipped_with_the_reason_and_the_way_to_add_it(monkeypatch):
    """quickstart's mc source names no corpus: the line says why that is fine and how to add it."""
    from bapjax import cli

    monkeypatch.setattr(sources, "load_source", lambda name, source: {"train": [name]})
    lines = []
    data = sources.load_config_sources(cli.load_config("quickstart"), log=lambda message, *args: lines.append(message % args))
    assert sorted(data) == ["bs", "r", "ss"]
    assert ("source mc: skipped: the config gives it no corpus, store or generator (data.sources.mc.corpus is empty), "
            "so the run trains and tests on bs, r, ss only; --config.data.sources.mc.corpus=PATH adds it "
            "(@mdc: the MDC as bapjax finds it)") in lines
