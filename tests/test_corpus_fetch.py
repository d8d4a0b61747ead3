"""Getting the MDC as a user outside this workspace would: `python -m bapjax.corpus.mdc fetch`
(offline, through file:// URLs to the archive the tests use), and a folder laid out as the public
repository's ``data/`` itemizing to the paper's counts."""

import filecmp
import hashlib
import io
import json
import os
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from bapjax import paths
from bapjax.corpus import fetch, mdc
from tests.conftest import REPO

PREFIX = f"minecraft-bap-models-{fetch.PINNED_COMMIT}"  # the top folder of GitHub's archive


def _leftovers(parent: Path, name: str) -> list[Path]:
    return sorted(parent.glob(f"{name}*")) + sorted(parent.glob(f".{name}.fetch-*"))


def _tar_with(path: Path, members: dict[str, bytes]) -> Path:
    with tarfile.open(path, "w") as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


def test_the_pinned_checksums_are_the_archive_the_tests_use(mdc_archive):
    """The manifest pins every file of the tested archive (and is pinned itself)."""
    assert paths.file_sha256(mdc_archive) == fetch.TESTED_ARCHIVE_SHA256
    manifest = fetch.read_manifest()
    root = mdc.resolve_corpus(mdc_archive)
    files = sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file() and p.name not in (paths.COMPLETE, ".complete"))
    assert sorted(manifest) == files and len(files) == 739
    for name in ("LICENSE.txt", "data/logs/splits.json", "data/lexicons/synonym_substitutions.json"):
        assert manifest[name] == hashlib.sha256((root / name).read_bytes()).hexdigest()
    assert fetch.DEFAULT_URL.startswith(paths.MDC_REPOSITORY) and fetch.PINNED_COMMIT in fetch.DEFAULT_URL


def test_fetch_from_a_file_url_gives_the_corpus(mdc_archive, tmp_path):
    out = tmp_path / "mdc"
    lines = []
    done = fetch.fetch(out, mdc_archive.as_uri(), sha256=fetch.TESTED_ARCHIVE_SHA256, report=lines.append)
    assert done["files"] == 739 and done["tested_archive"] and done["sha256"] == fetch.TESTED_ARCHIVE_SHA256
    assert any("739 corpus files verified" in line and "(100%)" in line for line in lines), lines
    assert mdc.resolve_corpus(out) == out
    unpacked = mdc.resolve_corpus(mdc_archive)
    manifest = fetch.read_manifest()
    for name in manifest:
        assert filecmp.cmp(out / name, unpacked / name, shallow=False), name
    with tarfile.open(mdc_archive) as tar:  # each file keeps its archive time, as tar sets it (the item cache keys on it)
        mtimes = {fetch.corpus_name(m.name, manifest): m.mtime for m in tar if m.isfile()}
    changed = [name for name in manifest if (out / name).stat().st_mtime != mtimes[name]]
    assert not changed, f"{len(changed)} files without their archive time, e.g. {changed[:3]}"
    assert _leftovers(tmp_path, "mdc") == [out]
    counts = {s: len(mdc.load_corpus(out).split(s)) for s in ("train", "val", "test")}
    assert counts == {"train": 3709, "val": 1331, "test": 1616}
    with pytest.raises(fetch.FetchError, match="exists and is not an empty folder"):
        fetch.fetch(out, mdc_archive.as_uri(), report=lines.append)


def test_a_corrupted_copy_is_refused_and_leaves_nothing(mdc_archive, tmp_path):
    corrupted = tmp_path / "corrupted.tar.xz"
    data = bytearray(mdc_archive.read_bytes())
    data[len(data) // 8] ^= 0xFF  # inside the compressed stream, an eighth of the way in
    corrupted.write_bytes(bytes(data))
    (tmp_path / "out").mkdir()
    with pytest.raises(fetch.FetchError, match=r"corrupted\.tar\.xz: .*nothing was written to"):
        fetch.fetch(tmp_path / "out" / "mdc", corrupted.as_uri(), report=lambda line: None)
    assert _leftovers(tmp_path / "out", "mdc") == []


def test_a_changed_or_missing_file_is_refused(tmp_path):
    """Members below GitHub's top folder are recognized; one whose bytes differ from the pinned
    sha256 stops the fetch; an archive that lacks corpus files is refused too."""
    manifest = fetch.read_manifest()
    tampered = _tar_with(tmp_path / "tampered.tar", {f"{PREFIX}/data/logs/splits.json": b'{"train": []}'})
    with pytest.raises(fetch.FetchError, match=r"data/logs/splits.json has sha256 [0-9a-f]{64}, expected "
                       + manifest["data/logs/splits.json"]):
        fetch.fetch(tmp_path / "a", tampered.as_uri(), report=lambda line: None)
    # through the CLI: one line, exit 2, nothing written
    done = subprocess.run([sys.executable, "-m", "bapjax.corpus.mdc", "fetch", "--out", str(tmp_path / "a"),
                           "--url", tampered.as_uri()], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert done.returncode == 2, done.stderr
    errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "splits.json has sha256" in errors[0] and "Traceback" not in done.stderr
    wrong_pin = _tar_with(tmp_path / "other.tar", {"README.md": b"not the corpus"})
    with pytest.raises(fetch.FetchError, match="739 of the 739 corpus files are missing"):
        fetch.fetch(tmp_path / "b", wrong_pin.as_uri(), report=lambda line: None)
    with pytest.raises(fetch.FetchError, match="cannot download file:"):
        fetch.fetch(tmp_path / "c", (tmp_path / "absent.tar.xz").as_uri(), report=lambda line: None)
    with pytest.raises(fetch.FetchError, match="--sha256 xyz: expected 64 hexadecimal digits"):
        fetch.fetch(tmp_path / "d", wrong_pin.as_uri(), sha256="xyz", report=lambda line: None)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["other.tar", "tampered.tar"]


def test_offline_the_error_names_the_url_and_the_file_route_and_leaves_nothing(tmp_path):
    """No network (a port nothing listens on): one line naming the URL tried (not a --url the user
    never gave) and how to read an archive downloaded elsewhere; no DIR and no parent made for it."""
    out = tmp_path / "new" / "deeper" / "mdc"
    done = subprocess.run([sys.executable, "-m", "bapjax.corpus.mdc", "fetch", "--out", str(out),
                           "--url", "http://127.0.0.1:9/x.tar.gz"], cwd=REPO, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 2, done.stderr
    assert done.stderr.count("\n") == 1 and done.stderr.startswith("error: cannot download http://127.0.0.1:9/x.tar.gz (")
    assert f"nothing was written to {out}" in done.stderr and "--url file:///path/to/archive" in done.stderr
    assert list(tmp_path.iterdir()) == []


def test_an_interrupted_unpack_leaves_nothing(mdc_archive, tmp_path, monkeypatch):
    """Ctrl-C half way: no DIR and no staging folder. A staging folder a killed fetch left
    behind is removed by the next fetch (only one bapjax wrote)."""
    calls = {"n": 0}
    original = fetch._copy_verified

    def interrupted(source, dest):
        calls["n"] += 1
        if calls["n"] == 60:
            raise KeyboardInterrupt
        return original(source, dest)

    monkeypatch.setattr(fetch, "_copy_verified", interrupted)
    with pytest.raises(KeyboardInterrupt):
        fetch.fetch(tmp_path / "mdc", mdc_archive.as_uri(), report=lambda line: None)
    assert calls["n"] == 60 and _leftovers(tmp_path, "mdc") == []
    monkeypatch.setattr(fetch, "_copy_verified", original)
    killed = tmp_path / ".mdc.fetch-killed"
    paths.mark_owned(killed, fetch.WRITER)
    (killed / "data").mkdir()
    foreign = tmp_path / ".mdc.fetch-foreign"
    foreign.mkdir()
    refused = _tar_with(tmp_path / "none.tar", {"README.md": b"not the corpus"})
    with pytest.raises(fetch.FetchError, match="missing"):
        fetch.fetch(tmp_path / "mdc", refused.as_uri(), report=lambda line: None)
    assert not killed.exists() and foreign.exists() and not (tmp_path / "mdc").exists()


def _public_layout(mdc_archive, clone: Path) -> Path:
    """A folder laid out as a clone of the public repository: data/logs with each game's raw
    observations and text log beside postprocessed-observations.json, data/augmented (synthetic
    games whose targets C<n>_<k> are in no split), code, models; the corpus files hard-linked."""
    root = mdc.resolve_corpus(mdc_archive)
    for name in fetch.read_manifest():
        dest = clone / name
        dest.parent.mkdir(parents=True, exist_ok=True)
        try:
            os.link(root / name, dest)
        except OSError:
            shutil.copy2(root / name, dest)
    for game in mdc.game_files(clone):
        (game.parent / "raw-observations.json").write_text('{"WorldStates": []}')
        (game.parent / "log.txt").write_text("Time elapsed: 0:10:00\n")
    game = mdc.game_files(clone)[0]  # e.g. data-3-30/logs/B1-A3-C1-1522435497386
    builder, architect, target, stamp = game.parent.name.split("-")
    aug = clone / "data" / "augmented" / "logs" / game.parents[2].name / "logs" / f"{builder}-{architect}-{target}_0-{stamp}"
    aug.mkdir(parents=True)
    shutil.copy(game, aug / "postprocessed-observations.json")
    (clone / "data" / "augmented" / "logs" / "splits.json").write_text(json.dumps({"train": [f"{target}_0"]}))
    (clone / "data" / "augmented" / "gold-configurations").mkdir(parents=True)
    shutil.copy(clone / "data" / "gold-configurations" / f"{target}.xml",
                clone / "data" / "augmented" / "gold-configurations" / f"{target}_0.xml")
    (clone / "python").mkdir()
    (clone / "python" / "data_loader.py").write_text("# the original loader\n")
    (clone / "models" / "sota_on_original_data").mkdir(parents=True)
    (clone / "README.md").write_text("# Introduction\n")
    return clone


def test_a_public_repository_layout_itemizes_to_the_paper_counts(mdc_archive, tmp_path):
    clone = _public_layout(mdc_archive, tmp_path / "minecraft-bap-models")
    assert mdc.resolve_corpus(clone) == clone and mdc.resolve_corpus(clone / "data") == clone
    assert len(list((clone / "data" / "augmented").rglob("postprocessed-observations.json"))) == 1
    corpus = mdc.load_corpus(clone, use_cache=False)  # parsed again, not the archive's cache entry
    want = mdc.load_corpus(mdc_archive)
    for split, count in (("train", 3709), ("val", 1331), ("test", 1616)):
        assert [i.item_id for i in corpus.split(split)] == [i.item_id for i in want.split(split)]
        assert len(corpus.split(split)) == count
    assert corpus.stats() == want.stats()


@pytest.mark.slow
def test_fetch_from_an_archive_laid_out_as_github_builds_it(mdc_archive, tmp_path):
    """The default URL's form: everything below minecraft-bap-models-<commit>/, with augmented
    data, raw logs and code around the corpus; only the 739 corpus files are kept."""
    clone = _public_layout(mdc_archive, tmp_path / "clone")
    archive = tmp_path / f"{fetch.PINNED_COMMIT}.tar.gz"
    with tarfile.open(archive, "w:gz", compresslevel=1) as tar:
        tar.add(clone, arcname=PREFIX)
    out = tmp_path / "mdc"
    whole = paths.file_sha256(archive)
    with pytest.raises(fetch.FetchError, match=f"sha256 {whole}, expected 0{{64}} \\(--sha256\\)"):
        fetch.fetch(out, archive.as_uri(), sha256="0" * 64, report=lambda line: None)
    assert _leftovers(tmp_path, "mdc") == []
    done = fetch.fetch(out, archive.as_uri(), sha256=whole, report=lambda line: None)
    assert done["files"] == 739 and not done["tested_archive"] and done["sha256"] == whole
    kept = sorted(str(p.relative_to(out)) for p in out.rglob("*") if p.is_file())
    assert kept == sorted([*fetch.read_manifest(), fetch.RECORD, paths.OWNER_MARKER])
    assert {s: len(mdc.load_corpus(out).split(s)) for s in ("train", "val", "test")} == {
        "train": 3709, "val": 1331, "test": 1616}


def _found_nowhere(tmp_path: Path, monkeypatch) -> Path:
    """No $BAPJAX_MDC, no ../shared/mdc, an empty cache (as on a fresh machine); the tests' fetched copy's place."""
    monkeypatch.delenv(paths.MDC_ENV, raising=False)
    monkeypatch.setattr(paths, "shared_mdc", lambda: tmp_path / "shared" / "mdc")
    monkeypatch.setenv("BAPJAX_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache" / "mdc-fetched"


def test_the_corpus_fixture_fetches_the_mdc_once_when_it_is_found_nowhere(tmp_path, monkeypatch):
    from tests import conftest

    target = _found_nowhere(tmp_path, monkeypatch)
    calls, lines = [], []

    def fake_fetch(out, url=fetch.DEFAULT_URL, sha256=None, report=None):
        calls.append((Path(out), url))
        (Path(out) / "data").mkdir(parents=True)
        return {"out": str(out)}

    monkeypatch.setattr(fetch, "fetch", fake_fetch)
    assert conftest.fetched_mdc() == target
    assert conftest.find_or_fetch_mdc(report=lines.append) == (target, True)
    assert calls == [(target, fetch.DEFAULT_URL)]
    assert len(lines) == 1 and f"fetching it once into {target}" in lines[0]
    assert conftest.find_or_fetch_mdc(report=lines.append) == (target, True) and len(calls) == 1  # once
    shared = tmp_path / "shared" / "mdc"
    shared.mkdir(parents=True)  # found where every command finds it: that one, nothing fetched
    assert conftest.find_or_fetch_mdc(report=lines.append) == (shared, False) and len(calls) == 1
    monkeypatch.setenv(paths.MDC_ENV, str(tmp_path / "absent"))  # pointed nowhere: said so, not fetched over
    with pytest.raises(conftest.MdcUnavailable, match=r"^\$BAPJAX_MDC=.*absent: no such file or folder"):
        conftest.find_or_fetch_mdc(report=lines.append)
    assert len(calls) == 1


def test_offline_the_corpus_fixture_fails_in_one_line_saying_how_to_get_it(tmp_path, monkeypatch):
    from tests import conftest

    target = _found_nowhere(tmp_path, monkeypatch)
    monkeypatch.setattr(fetch, "DEFAULT_URL", "http://127.0.0.1:9/x.tar.gz")  # a port nothing listens on
    with pytest.raises(conftest.MdcUnavailable) as err:
        conftest.find_or_fetch_mdc(report=lambda line: None)
    message = str(err.value)
    assert "\n" not in message and message.startswith("the corpus tests need the MDC: $BAPJAX_MDC is unset")
    for needed in (f"fetching it into {target} failed (cannot download http://127.0.0.1:9/x.tar.gz",
                   "`python -m bapjax.corpus.mdc fetch --out DIR` and `export BAPJAX_MDC=DIR`"):
        assert needed in message, needed
    assert not target.exists()


def test_the_corpus_fixture_fetch_is_the_pinned_one(mdc_archive, tmp_path, monkeypatch):
    """The fixture's fetch is `python -m bapjax.corpus.mdc fetch`'s: every pinned file, checked."""
    from tests import conftest

    target = _found_nowhere(tmp_path, monkeypatch)
    monkeypatch.setattr(fetch, "DEFAULT_URL", mdc_archive.as_uri())
    assert conftest.find_or_fetch_mdc(report=lambda line: None) == (target, True)
    record = json.loads((target / fetch.RECORD).read_text())
    assert record["files"] == 739 and record["tested_archive"] and mdc.resolve_corpus(target) == target
