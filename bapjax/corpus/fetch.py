"""Get the Minecraft Dialogue Corpus from its public source, verified file by file, unpacked atomically.

    python -m bapjax.corpus.mdc fetch --out DIR [--url URL] [--sha256 HEX]

The corpus is published in ``data/`` of github.com/prashant-jayan21/minecraft-bap-models (the ACL
2020 BAP models; University of Illinois/NCSA Open Source License). The default URL is GitHub's
archive of that repository at a pinned commit (`PINNED_COMMIT`, about 2 GB unpacked, mostly
augmented data and raw logs bapjax does not read). GitHub builds such archives on request, so
their bytes are not what bapjax pins: it pins the sha256 of each of the 739 corpus files it keeps
(`mdc_files.sha256`, itself pinned by `MANIFEST_SHA256`): LICENSE.txt, ``data/logs`` (splits,
per-day dialogue text, each game's ``postprocessed-observations.json``), the gold configurations
and the synonym lexicon. The archive the tests use (`TESTED_ARCHIVE_SHA256`, the same 739 files)
passes the same check, so ``--url file:///.../minecraft-dialogue-corpus.tar.xz`` works too.
``--sha256`` additionally pins the whole download.

The archive is streamed: only the corpus files are written, each checked as it arrives, into a
hidden staging folder beside DIR that becomes DIR by one rename once every file has matched. A
failed, refused or interrupted fetch leaves no DIR and no parent folder it created (a staging
folder left by a killed process is removed by the next fetch).
"""

from __future__ import annotations

import hashlib
import json
import lzma
import os
import shutil
import sys
import tarfile
import tempfile
import time
import urllib.error
import urllib.request
import zlib
from pathlib import Path, PurePosixPath
from typing import Callable

from bapjax import paths
from bapjax.errors import UserError

WRITER = "bapjax.corpus.fetch"
PINNED_COMMIT = "48044a2f1fe76c8cad7384b71f216bbbbf55deb3"  # the repository's last commit (2020-07-06)
DEFAULT_URL = f"{paths.MDC_REPOSITORY}/archive/{PINNED_COMMIT}.tar.gz"
# minecraft-dialogue-corpus.tar.xz: the 739 files below repacked (screenshots, raw observations,
# per-game text logs and the augmented data left out); what bapjax's tests and CI read.
TESTED_ARCHIVE_SHA256 = "a24205f69cceb8ead876d553321f530ba64ffba76d0601136f3f14a3f959ceb9"
MANIFEST = Path(__file__).with_name("mdc_files.sha256")
MANIFEST_SHA256 = "30e814d03748ee78741cc1d99ff1489d5c813da63323893599de786c7acbbaaf"
RECORD = ".bapjax-fetch.json"  # in DIR: where it came from
PROGRESS_SECONDS = 2.0
CHUNK = 1 << 20


class FetchError(UserError):
    """A download that cannot be read or does not match the pinned checksums; nothing is written."""


def read_manifest() -> dict[str, str]:
    """{path inside the corpus: sha256} of every file a fetch keeps."""
    text = MANIFEST.read_bytes()
    if hashlib.sha256(text).hexdigest() != MANIFEST_SHA256:
        raise RuntimeError(f"{MANIFEST} does not match MANIFEST_SHA256: the pinned checksums were edited")
    manifest = {}
    for line in text.decode().splitlines():
        digest, name = line.split("  ", 1)
        manifest[name] = digest
    return manifest


def corpus_name(member: str, manifest: dict[str, str]) -> str | None:
    """The corpus path of an archive member, or None when a fetch does not keep it. Members are
    taken as they are (``data/...``, as in the tested archive) or below one top folder (as in
    GitHub's ``minecraft-bap-models-<commit>/data/...``)."""
    parts = [p for p in PurePosixPath(member).parts if p not in (".", "/")]
    for candidate in ("/".join(parts), "/".join(parts[1:])):
        if candidate in manifest:
            return candidate
    return None


class _Download:
    """The response as a file object for tarfile: hashes every byte and reports progress."""

    def __init__(self, response, total: int | None, report: Callable[[str], None]):
        self.response, self.total, self.report = response, total, report
        self.sha256 = hashlib.sha256()
        self.size = 0
        self.files = 0
        self.start = self.last = time.monotonic()

    def read(self, n: int = -1) -> bytes:
        data = self.response.read(n)
        self.sha256.update(data)
        self.size += len(data)
        if time.monotonic() - self.last >= PROGRESS_SECONDS:
            self.progress()
        return data

    def drain(self) -> None:
        """Read what the tar reader left (trailer, padding) so the sha256 covers the whole file."""
        while self.read(CHUNK):
            pass

    def progress(self) -> None:
        self.last = time.monotonic()
        rate = self.size / max(self.last - self.start, 1e-9) / 1e6
        share = f" of {self.total / 1e6:.1f} MB ({100 * self.size / self.total:.0f}%)" if self.total else ""
        self.report(f"fetch: {self.size / 1e6:.1f} MB{share} read, {rate:.1f} MB/s, "
                    f"{self.files} corpus files verified")


def _stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def _copy_verified(source, dest: Path) -> str:
    """Write one archive member to `dest`; its sha256."""
    digest = hashlib.sha256()
    with open(dest, "wb") as out:
        for chunk in iter(lambda: source.read(CHUNK), b""):
            digest.update(chunk)
            out.write(chunk)
    return digest.hexdigest()


def _open(url: str, nothing: str):
    try:
        response = urllib.request.urlopen(url, timeout=60)
    except (urllib.error.URLError, OSError, ValueError) as err:
        raise FetchError(f"cannot download {url} ({getattr(err, 'reason', err)}); {nothing}. An archive "
                         "downloaded elsewhere is read with --url file:///path/to/archive") from None
    length = response.headers.get("Content-Length")
    return response, int(length) if length and length.isdigit() else None


def fetch(out: str | os.PathLike, url: str = DEFAULT_URL, sha256: str | None = None,
          report: Callable[[str], None] = _stderr) -> dict:
    """Download `url`, keep the corpus files that match the pinned sha256s, and make `out` hold
    them (LICENSE.txt and data/), all at once or not at all. Returns what was fetched."""
    out = Path(out).expanduser().absolute()
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise FetchError(f"--out {out}: exists and is not an empty folder; give a new folder")
    if sha256 is not None and (len(sha256) != 64 or any(c not in "0123456789abcdef" for c in sha256.lower())):
        raise FetchError(f"--sha256 {sha256}: expected 64 hexadecimal digits")
    manifest = read_manifest()
    created = [folder for folder in out.parents if not folder.exists()]  # removed again when the fetch fails
    paths.check_writable_dir(out.parent, "--out", output=out)
    for stale in out.parent.glob(f".{out.name}.fetch-*"):  # left by a killed fetch
        if paths.owner_of(stale) == WRITER:
            shutil.rmtree(stale, ignore_errors=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{out.name}.fetch-", dir=out.parent))
    nothing = f"nothing was written to {out}"
    try:
        umask = os.umask(0)
        os.umask(umask)
        staging.chmod(0o777 & ~umask)  # mkdtemp's 0700 would make DIR private
        paths.mark_owned(staging, WRITER)
        response, total = _open(url, nothing)
        report(f"fetch: reading {url}" + (f" ({total / 1e6:.1f} MB)" if total else ""))
        download = _Download(response, total, report)
        found = set()
        try:
            with response, tarfile.open(fileobj=download, mode="r|*") as tar:
                for member in tar:
                    name = corpus_name(member.name, manifest)
                    if name is None or not member.isfile():
                        continue
                    dest = staging / name
                    dest.parent.mkdir(parents=True, exist_ok=True)
                    digest = _copy_verified(tar.extractfile(member), dest)
                    os.utime(dest, (member.mtime, member.mtime))  # as tar does (and the item cache keys on it)
                    if digest != manifest[name]:
                        raise FetchError(f"{url}: {name} has sha256 {digest}, expected {manifest[name]} "
                                         f"(a corrupted download or another version of the corpus); {nothing}")
                    found.add(name)
                    download.files += 1
                download.drain()
        except (tarfile.TarError, lzma.LZMAError, zlib.error, EOFError, OSError) as err:
            raise FetchError(f"{url}: not a readable corpus archive ({err}); {nothing}") from None
        missing = sorted(set(manifest) - found)
        if missing:
            raise FetchError(f"{url}: {len(missing)} of the {len(manifest)} corpus files are missing "
                             f"(first: {missing[0]}); {nothing}")
        whole = download.sha256.hexdigest()
        if sha256 is not None and whole != sha256.lower():
            raise FetchError(f"{url}: sha256 {whole}, expected {sha256.lower()} (--sha256); {nothing}")
        download.progress()
        record = {"url": url, "sha256": whole, "files": len(found), "manifest_sha256": MANIFEST_SHA256,
                  "tested_archive": whole == TESTED_ARCHIVE_SHA256}
        (staging / RECORD).write_text(json.dumps(record, indent=1) + "\n")
        if out.exists():
            out.rmdir()  # empty (checked above)
        os.rename(staging, out)
        created = []
        return {"out": str(out), **record}
    finally:
        if staging.exists():
            shutil.rmtree(staging, ignore_errors=True)
        for folder in created:  # deepest first: the parents this fetch made for DIR
            try:
                folder.rmdir()
            except OSError:  # not empty: something else was written there meanwhile
                break
