"""The item store: round trip, random access, manifest hashes, dataset tags, clear errors."""

import dataclasses
import json

import numpy as np
import pytest

from bapjax.corpus import store


@pytest.fixture(scope="module")
def mdc_splits(mdc_corpus):
    return {"train": mdc_corpus.split("train")[:400], "val": mdc_corpus.split("val")[:150]}


@pytest.fixture(scope="module")
def built(mdc_splits, tmp_path_factory):
    path = tmp_path_factory.mktemp("store")
    tagged = dict(mdc_splits)
    # A second data set whose items reuse the same ids, as synthetic corpora do.
    tagged["train"] = list(tagged["train"]) + [dataclasses.replace(i, dataset="bs") for i in mdc_splits["train"][:50]]
    manifest = store.write_store(path, tagged, sources={"mc": {"path": "mdc"}}, seeds={"augment": 0})
    return path, tagged, manifest


def test_round_trip_and_random_access(built):
    path, splits, manifest = built
    opened = store.ItemStore(path)
    assert opened.split_names == ["train", "val"]
    for name, items in splits.items():
        split = opened.split(name)
        assert len(split) == len(items) == manifest["splits"][name]["items"]
        assert list(split) == list(items)
        rng = np.random.default_rng(0)
        for n in rng.choice(len(items), 30):
            assert split[int(n)] == items[n]
        assert split[-1] == items[-1]
        np.testing.assert_array_equal(split.datasets, [i.dataset for i in items])
    train = opened.split("train")
    assert manifest["splits"]["train"]["by_dataset"] == {"bs": 50, "mc": 400}
    assert len(train.items("bs")) == 50 and all(i.dataset == "bs" for i in train.items("bs"))
    assert train.indices("bs").tolist() == list(range(400, 450))
    assert train.take([3, 0, 420]) == [splits["train"][3], splits["train"][0], splits["train"][420]]
    with pytest.raises(IndexError, match="out of range"):
        train[len(train)]
    with pytest.raises(KeyError, match="split 'test'"):
        opened.split("test")


def test_manifest_hashes_verify_and_detect_corruption(built, tmp_path):
    path, splits, manifest = built
    store.ItemStore(path).verify()
    # Same items give the same content hash; a changed item changes it.
    again = store.write_store(tmp_path / "again", splits)
    assert again["splits"]["val"]["content_sha256"] == manifest["splits"]["val"]["content_sha256"]
    changed = dict(splits)
    changed["val"] = [dataclasses.replace(splits["val"][0], target_id="C999")] + list(splits["val"][1:])
    other = store.write_store(tmp_path / "other", changed)
    assert other["splits"]["val"]["content_sha256"] != manifest["splits"]["val"]["content_sha256"]
    # Flip one byte of a record: verify and reading that record fail, naming the file.
    data = bytearray((tmp_path / "again" / "val.items").read_bytes())
    data[10] ^= 0xFF
    (tmp_path / "again" / "val.items").write_bytes(bytes(data))
    with pytest.raises(store.StoreError, match="val.items"):
        store.ItemStore(tmp_path / "again").verify()


def test_duplicates_and_bad_manifest_are_clear_errors(mdc_splits, tmp_path):
    items = mdc_splits["val"][:3]
    with pytest.raises(store.StoreError, match="appears twice"):
        store.write_store(tmp_path / "dup", {"val": [*items, items[0]]})
    store.write_store(tmp_path / "ok", {"val": items})
    with pytest.raises(FileExistsError):
        store.write_store(tmp_path / "ok", {"val": items})
    manifest = json.loads((tmp_path / "ok" / "manifest.json").read_text())
    manifest["format"] = "other"
    (tmp_path / "ok" / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(store.StoreError, match="manifest.json: format"):
        store.ItemStore(tmp_path / "ok")
    with pytest.raises(store.StoreError, match="was the build finished"):
        store.ItemStore(tmp_path / "missing")


def test_build_assembles_tagged_synthetic_sets_and_reuses_sources(tmp_path):
    from bapjax.data import training_set
    from bapjax.text.vocab import Vocabulary

    sizes = {"bs": (40, 10, 10), "r": (30, 8, 6)}
    manifest = training_set.build_store(tmp_path / "store", None, seed=3, datasets=("bs", "r"), sizes=sizes,
                                 work_dir=tmp_path / "work", processes=1)
    opened = store.ItemStore(tmp_path / "store")
    for split, column in zip(training_set.SPLITS, range(3)):
        assert manifest["splits"][split]["by_dataset"] == {d: sizes[d][column] for d in sizes}
        items = opened.split(split).items()
        assert {i.dataset for i in items} == {"bs", "r"}
        assert all(i.split == split for i in items)
    assert manifest["sources"]["bs"]["seed"] == 3 and manifest["sources"]["r"]["requested"] == [30, 8, 6]
    # --work_dir holds the entries under the cache's names (bapjax.data.sources names them once).
    from bapjax.data import sources

    assert manifest["sources"]["r"]["corpus"] == str(sources.generated_entry("r", 3, (30, 8, 6), tmp_path / "work"))
    assert training_set.size_table(manifest)["bs"]["train"] == [40, 9890]
    vocab = Vocabulary.load(tmp_path / "store" / "vocab.json")
    assert vocab.size == manifest["vocabulary"]["size"]
    # A second build with the same seed and sizes reuses the generated corpora and gives the same items.
    again = training_set.build_store(tmp_path / "store2", None, seed=3, datasets=("bs", "r"), sizes=sizes,
                              work_dir=tmp_path / "work", processes=1)
    assert manifest["sources"]["bs"]["reused"] is False and again["sources"]["bs"]["reused"] is True
    for split in training_set.SPLITS:
        assert again["splits"][split]["content_sha256"] == manifest["splits"][split]["content_sha256"]
    with pytest.raises(ValueError, match="sizes are for the synthetic sets"):
        training_set.parse_sizes("mc=1:2:3")


@pytest.mark.slow
def test_build_with_augmented_mdc(mdc_path, tmp_path):
    from bapjax.data import training_set

    manifest = training_set.build_store(tmp_path / "store", str(mdc_path), seed=0, datasets=("mc", "ss"),
                                 sizes={"ss": (20, 4, 4)}, processes=1)
    assert manifest["splits"]["train"]["by_dataset"] == {"mc": 14836, "ss": 20}
    assert manifest["splits"]["val"]["by_dataset"] == {"mc": 1331, "ss": 4}
    assert manifest["splits"]["test"]["by_dataset"] == {"mc": 1616, "ss": 4}
    store.ItemStore(tmp_path / "store").verify()


def test_fast_decoder_matches_validating_decoder_and_names_bad_fields(mdc_corpus):
    from bapjax.world.items import BapItem

    for item in mdc_corpus.split("test")[:300]:
        record = json.loads(store.item_record(item))
        fast = store.item_from_record(record, "r")
        assert fast == item
        try:
            assert BapItem.from_json(record, "r") == fast
        except ValueError as err:  # a history action outside the region: only the store accepts it
            assert "outside the build region" in str(err)
    record = json.loads(store.item_record(mdc_corpus.split("test")[0]))
    record["reference_actions"][0]["color"] = "pink"
    with pytest.raises(store.StoreError, match="reference_actions\\[0\\].*color"):
        store.item_from_record(record, "rec")
    del record["builder_pose"]
    with pytest.raises(store.StoreError, match="rec"):
        store.item_from_record(record, "rec")
