"""Is a decoding refactor free? The StableHLO of a trained run's compiled decoder in each kernel mode,
from two trees, compared: the same program text, or the same operations in another order, costs the
same to run.

    python -m benchmarks.decoder_programs --run RUN --compare_to 33b1e10

writes, in a process of each tree (`git archive COMMIT`, then this one; cwd and PYTHONPATH that tree),
<mode>.mlir (the module's name blanked) for greedy, forced lengths, one draw, 4 draws and forced
lengths with 4 draws, on the run's first 64 MDC test items (a kernel that takes a `kernel.Mode`, or
one before it, whose mode followed the arrays passed; the commit must have `bapjax/decoding/`), then
prints per mode: identical text, the same operations in another order (the lines' multiset with SSA
names blanked), or the lines only one side has. `--out DIR` alone writes this tree's programs there;
`--compare OLD_DIR NEW_DIR` compares two such folders.
"""

from __future__ import annotations

import argparse
import collections
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

MODES = ("greedy", "forced", "one_draw", "4_draws", "forced_4_draws")


def write_programs(run: str, out: Path) -> None:
    import numpy as np

    from bapjax.corpus import load
    from bapjax.data import input_pipeline
    from bapjax.decoding import decode, kernel
    from bapjax.training import run_eval

    dec = run_eval.load_decoder(run)
    items = load.first_items(load.load_split("@mdc", "test"), 64)
    features = input_pipeline.featurize_items(items, dec.run.vocab, dec.feature_config)
    expanded = input_pipeline.expand_batch(features, np.arange(len(items)), dec.feature_config)
    batch = {k: expanded[k] for k in decode.decode_keys(dec.run.model)}
    keys = np.stack([kernel.sample_keys(k, [i.item_id for i in items]) for k in range(4)], axis=1)
    lengths = np.full(len(items), 3, np.int32)
    fn, params = dec.decode_fn, dec.params
    if hasattr(kernel, "Mode"):
        mode = kernel.Mode
        lowered = [fn.lower(params, batch, mode()), fn.lower(params, batch, mode(forced=True), lengths=lengths),
                   fn.lower(params, batch, mode(draws=1), sample_keys=keys[:, :1]),
                   fn.lower(params, batch, mode(draws=4), sample_keys=keys),
                   fn.lower(params, batch, mode(draws=4, forced=True), lengths=lengths, sample_keys=keys)]
    else:
        lowered = [fn.lower(params, batch), fn.lower(params, batch, lengths=lengths),
                   fn.lower(params, batch, sample_keys=keys[:, 0]), fn.lower(params, batch, sample_keys=keys),
                   fn.lower(params, batch, lengths=lengths, sample_keys=keys)]
    if not Path(kernel.__file__).resolve().is_relative_to(Path.cwd().resolve()):
        raise SystemExit(f"error: {Path.cwd()}: its bapjax.decoding was not imported ({kernel.__file__} was)")
    out.mkdir(parents=True, exist_ok=True)
    for name, one in zip(MODES, lowered):
        (out / f"{name}.mlir").write_text(re.sub(r"module @\S+", "module @M", one.as_text()))
    print(f"wrote {len(MODES)} programs of {run} to {out}")


def compare(old: Path, new: Path) -> None:
    def lines(path: Path) -> collections.Counter:
        return collections.Counter(re.sub(r"%[\w#]+", "%_", line).strip() for line in path.read_text().splitlines())

    for name in MODES:
        a, b = (d / f"{name}.mlir" for d in (old, new))
        if a.read_text() == b.read_text():
            print(f"{name}: identical program")
            continue
        only_old, only_new = lines(a) - lines(b), lines(b) - lines(a)
        if not only_old and not only_new:
            print(f"{name}: the same operations in another order")
            continue
        print(f"{name}: {sum(only_old.values())} lines only in {old}, {sum(only_new.values())} only in {new}:")
        for line in list(only_old)[:5]:
            print(f"  - {line[:160]}")
        for line in list(only_new)[:5]:
            print(f"  + {line[:160]}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run", help="a finished training run's workdir")
    parser.add_argument("--out", type=Path, help="where this tree's programs are written")
    parser.add_argument("--compare", nargs=2, type=Path, metavar=("OLD_DIR", "NEW_DIR"))
    parser.add_argument("--compare_to", default="", help="a git commit whose programs this tree's are compared with")
    args = parser.parse_args()
    if args.compare:
        compare(*args.compare)
    elif args.run and args.compare_to:
        with tempfile.TemporaryDirectory() as tmp:
            archive = subprocess.run(["git", "-C", str(REPO), "archive", args.compare_to], capture_output=True)
            if archive.returncode:
                parser.error(f"--compare_to {args.compare_to}: {archive.stderr.decode().strip()}")
            old = Path(tmp) / "tree"
            old.mkdir()
            subprocess.run(["tar", "-x", "-C", str(old)], input=archive.stdout, check=True)
            from bapjax import paths

            run = str(Path(args.run).resolve())
            env = {**os.environ, paths.MDC_ENV: str(paths.mdc_path())}  # the copy finds this tree's corpus
            for tree, out in ((old, Path(tmp) / "old"), (REPO, Path(tmp) / "new")):
                subprocess.run([sys.executable, str(Path(__file__).resolve()), "--run", run, "--out", str(out)],
                               cwd=str(tree), env={**env, "PYTHONPATH": str(tree)}, check=True)
            compare(Path(tmp) / "old", Path(tmp) / "new")
    elif args.run and args.out:
        write_programs(args.run, args.out)
    else:
        parser.error("give --run with --compare_to COMMIT (or --out DIR: this tree's programs), "
                     "or --compare OLD_DIR NEW_DIR")


if __name__ == "__main__":
    main()
