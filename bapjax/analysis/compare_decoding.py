"""Does a refactor change decoding? Trained runs decoded by COMMIT's commands and by this tree's, compared.

    python -m bapjax.analysis.compare_decoding --commit 68e43b4 --runs RUN_A,RUN_B [--limit 200] [--corpus @mdc]
        [--devices 1,4] [--modes argmax,mass,length,select,own,ensemble] [--keep DIR] [--repo .]

Each tree's own command lines decode the first `--limit` items of the test split of `--corpus` (each
command's `--limit`), every decode in its own process with `PYTHONPATH` and cwd = that tree: `git
archive COMMIT` of the git repository `--repo` (default: the one holding the current directory) for
the old one, that repository's work tree for the new one. The modes (RUN_A: the first of `--runs`):

    argmax    python -m bapjax.predict --checkpoint RUN_A --stop_rule argmax --samples 0
    mass      python -m bapjax.predict --checkpoint RUN_A --stop_rule mass --stop_threshold 0.3 --samples 0
    length    python -m bapjax.predict --checkpoint RUN_A --stop_rule length --stop_threshold 0.5 --samples 0
              (a model with a length head)
    select    python -m bapjax.predict --checkpoint RUN_A --samples 8 --temperature 0.8 --cost 0.1
    own       python -m bapjax.predict --checkpoint RUN with no decoding flag, for each of --runs: the
              decoding its decode.json holds (a vote over draws with a rule per kind of board, if it chose one)
    ensemble  python -m bapjax.ensemble --runs RUN_A,RUN_B,... --rules select:0.075,vote:0.175 --noval --samples 8
              (two runs or more; its predictions/mc_test.jsonl.gz compared decompressed)

each on each of `--devices` CPU XLA devices (`JAX_PLATFORMS=cpu`, `JAX_NUM_CPU_DEVICES`; a run whose
config.cpu_devices is set decodes on that many whatever is asked, so only that count is accepted; each
process reports the count it ran on, and another count is an error). Per (mode, devices) the two trees'
prediction files are compared by sha256. One progress line per decode on stderr; then a table (mode,
devices, each tree's sha256, identical), a line per differing row (how many lines differ, the first
item that does) and, last, a JSON line. Exit status 0 when every row is identical, 1 when one differs,
2 for a mistake in the flags (one line). Two quickstart-sized runs (the frame model) at `--limit 200`:
28 decodes, 20 min on a 2-core host that trained another run meanwhile.
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

MODES = ("argmax", "mass", "length", "select", "own", "ensemble")
PREDICT_FLAGS = {"argmax": ["--stop_rule", "argmax", "--samples", "0"],
                 "mass": ["--stop_rule", "mass", "--stop_threshold", "0.3", "--samples", "0"],
                 "length": ["--stop_rule", "length", "--stop_threshold", "0.5", "--samples", "0"],
                 "select": ["--samples", "8", "--temperature", "0.8", "--cost", "0.1"],
                 "own": []}  # the run's decode.json
ENSEMBLE = ["--rules", "select:0.075,vote:0.175", "--noval", "--samples", "8"]
DEVICES_MARK = "COMPARE_DECODING_DEVICES "

# a command run as `python -m MODULE FLAGS...` would run it, then the count of devices JAX ran it on
LAUNCH = f'''
import runpy, sys
sys.argv = sys.argv[1:]
try:
    runpy.run_module(sys.argv[0], run_name="__main__", alter_sys=True)
except SystemExit as stop:
    if stop.code not in (None, 0):
        raise
import jax
print("{DEVICES_MARK}%d %s" % (jax.local_device_count(), jax.default_backend()), flush=True)
'''


class Mistake(Exception):
    """A user mistake: one line, exit 2."""


class Parser(argparse.ArgumentParser):
    def error(self, message):  # one line, not argparse's usage block
        self.exit(2, f"error: {message}\n")


def digest(path: Path) -> tuple[str, list[bytes]]:
    """The sha256 of a predictions file's bytes (a `.gz` one's decompressed) and its lines."""
    data = gzip.decompress(path.read_bytes()) if path.suffix == ".gz" else path.read_bytes()
    return hashlib.sha256(data).hexdigest(), data.splitlines()


def first_difference(old: list[bytes], new: list[bytes]) -> dict:
    """How two predictions files differ: the lines that differ, the first one (1-based) and its item's id."""
    differ = [i for i in range(max(len(old), len(new))) if i >= len(old) or i >= len(new) or old[i] != new[i]]
    first = differ[0]
    line = old[first] if first < len(old) else new[first]
    try:
        item = json.loads(line).get("item_id")
    except (ValueError, AttributeError):  # not a JSON object
        item = None
    return {"lines_differ": len(differ), "old_lines": len(old), "new_lines": len(new), "first_line": first + 1,
            "first_item": item}


def compare(mode: str, devices: int, old: Path, new: Path) -> dict:
    """One row: the two trees' predictions of one (mode, devices) by sha256."""
    (old_sha, old_lines), (new_sha, new_lines) = digest(old), digest(new)
    row = {"mode": mode, "devices": devices, "old_sha256": old_sha, "new_sha256": new_sha,
           "identical": old_sha == new_sha, "predictions": len(new_lines)}
    if not row["identical"]:
        row["difference"] = first_difference(old_lines, new_lines)
    return row


def table(rows: list[dict]) -> str:
    """The rows as a markdown table: mode | devices | old sha256[:12] | new sha256[:12] | identical."""
    lines = ["| mode | devices | old sha256[:12] | new sha256[:12] | identical |", "|---|---|---|---|---|"]
    lines += [f"| {r['mode']} | {r['devices']} | {r['old_sha256'][:12]} | {r['new_sha256'][:12]} | "
              f"{'yes' if r['identical'] else 'NO'} |" for r in rows]
    return "\n".join(lines)


def differences(rows: list[dict]) -> list[str]:
    """A line per differing row: which, how many lines differ and the first item that does."""
    out = []
    for r in rows:
        if not r["identical"]:
            d = r["difference"]
            out.append(f"differs: {r['mode']} on {r['devices']} device(s): {d['lines_differ']} line(s) of "
                       f"{d['old_lines']} (old) / {d['new_lines']} (new), first line {d['first_line']} "
                       f"(item {d['first_item']})")
    return out


def summary(commit: str, rows: list[dict], extra: dict | None = None) -> dict:
    return {"commit": commit, "identical": all(r["identical"] for r in rows), **(extra or {}), "rows": rows}


def parse_list(text: str, what: str) -> list[str]:
    values = [v.strip() for v in text.split(",") if v.strip()]
    if not values:
        raise Mistake(f"{what} is empty")
    return values


def parse_devices(text: str) -> list[int]:
    counts = []
    for value in parse_list(text, "--devices"):
        if not value.isdigit() or int(value) < 1:
            raise Mistake(f"--devices {text}: {value!r} is not a device count (an integer >= 1)")
        counts.append(int(value))
    return counts


def run_config(run: Path) -> dict | None:
    """The config.json of the run a --runs entry names (its workdir, or a folder inside one), if found."""
    for folder in (run, *run.parents[:3]):
        if (folder / "config.json").is_file():
            try:
                return json.loads((folder / "config.json").read_text())
            except ValueError:
                return None
    return None


def has_length_head(config: dict) -> bool:
    model = config.get("model", {})
    return "length" in model or bool(model.get("length_head"))  # one section per part, or the flat layout


def check_runs(runs: list[Path], modes: list[str], devices: list[int]) -> None:
    """Refuse what the commands could not do as asked: a run that is not there, the mode "length" on a
    model without a length head, a device count other than the one a run's config.cpu_devices imposes."""
    for run in runs:
        if not run.exists():
            raise Mistake(f"--runs {run}: no such run (not a file or folder)")
    configs = {run: run_config(run) for run in runs}
    if "length" in modes and configs[runs[0]] is not None and not has_length_head(configs[runs[0]]):
        raise Mistake(f"--runs {runs[0]}: its model has no length head, so the mode length cannot decode it; "
                      f"leave it out of --modes")
    for run, config in configs.items():
        fixed = int((config or {}).get("cpu_devices", 0) or 0)
        wrong = [d for d in devices if fixed and d != fixed]
        if wrong:
            raise Mistake(f"--runs {run}: its config.cpu_devices is {fixed}, so its commands decode on {fixed} "
                          f"CPU devices whatever is asked; --devices {','.join(map(str, wrong))} cannot be "
                          f"compared (--devices {fixed})")


def child_env(tree: Path, devices: int) -> dict:
    flags = [f for f in os.environ.get("XLA_FLAGS", "").split() if "xla_force_host_platform_device_count" not in f]
    return {**os.environ, "PYTHONPATH": str(tree), "JAX_PLATFORMS": "cpu", "JAX_NUM_CPU_DEVICES": str(devices),
            "XLA_FLAGS": " ".join(flags)}


def decode(tree: Path, module: str, flags: list[str], devices: int, what: str, log: Path) -> float:
    """Run `python -m module flags` of `tree` on `devices` CPU devices, its output kept in `log`; its
    seconds. A failure ends the comparison: its own one-line mistake as ours (exit 2), anything else
    with the end of its output (exit 1)."""
    began = time.time()
    done = subprocess.run([sys.executable, "-c", LAUNCH, module, *flags], cwd=str(tree),
                          env=child_env(tree, devices), capture_output=True, text=True)
    seconds = time.time() - began
    log.write_text(done.stdout + done.stderr)
    command = f"python -m {module} {' '.join(flags)}"
    if done.returncode:
        errors = [line for line in done.stderr.splitlines() if line.startswith("error: ")]
        if done.returncode == 2 and errors:
            raise Mistake(f"{what}: `{command}` refused: {errors[-1][len('error: '):]}")
        raise SystemExit(f"error: {what}: `{command}` failed (exit {done.returncode}):\n"
                         f"{done.stdout[-2000:]}\n{done.stderr[-3000:]}")
    marks = [line.split() for line in done.stdout.splitlines() if line.startswith(DEVICES_MARK)]
    ran_on = int(marks[-1][1]) if marks else None
    if ran_on != devices:
        raise SystemExit(f"error: {what}: `{command}` decoded on {ran_on} device(s), not {devices} "
                         f"(config.cpu_devices or JAX settings of that tree)")
    return seconds


def plan(modes: list[str], runs: list[Path], corpus: str, limit: int) -> list[tuple[str, str, list[str], str]]:
    """(row name, module, flags without the output, output file name) per row of a device count."""
    items = ["--corpus", corpus, "--limit", str(limit)]
    rows = []
    for mode in modes:
        if mode == "ensemble":
            rows.append((mode, "bapjax.ensemble", ["--runs", ",".join(map(str, runs)), *items, *ENSEMBLE],
                         "ensemble"))
            continue
        for i, run in enumerate(runs if mode == "own" else runs[:1]):
            name = f"own {run.name}" if mode == "own" else mode
            rows.append((name, "bapjax.predict", ["--checkpoint", str(run), *items, "--split", "test", *PREDICT_FLAGS[mode]],
                         f"{mode}{i if mode == 'own' else ''}.jsonl"))
    return rows


def predictions_file(module: str, out: Path) -> Path:
    """Where a command given `--out out` writes its predictions."""
    return out / "predictions" / "mc_test.jsonl.gz" if module == "bapjax.ensemble" else out


def main(argv: list[str] | None = None) -> int:
    parser = Parser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--commit", required=True, help="the code to compare this tree with")
    parser.add_argument("--runs", required=True, help="trained runs (workdirs) loadable by both trees, "
                        "comma-separated: the first for every mode, each for 'own', all for 'ensemble'")
    parser.add_argument("--limit", type=int, default=200, help="the first N test items (0: all; default 200)")
    parser.add_argument("--corpus", default="@mdc", help="the corpus whose test split is decoded (default @mdc)")
    parser.add_argument("--devices", default="1,4", help="CPU XLA device counts, comma-separated (default 1,4)")
    parser.add_argument("--modes", default=None, help=f"comma-separated, of {', '.join(MODES)} "
                        "(default: all; 'ensemble' only with two runs or more)")
    parser.add_argument("--keep", default="", help="a new folder to keep every decode's predictions in "
                        "(default: a temporary one, removed)")
    parser.add_argument("--repo", default=".", help="a directory of the git repository whose work tree is compared "
                        "with --commit (default: the current directory's)")
    args = parser.parse_args(argv)
    try:
        return compare_trees(args)
    except Mistake as err:
        parser.exit(2, f"error: {err}\n")


def compare_trees(args) -> int:
    if args.limit < 0:
        raise Mistake(f"--limit is {args.limit}; expected an integer >= 0 (0: all)")
    devices = parse_devices(args.devices)
    runs = [Path(run).expanduser().resolve() for run in parse_list(args.runs, "--runs")]
    modes = list(MODES) if args.modes is None else parse_list(args.modes, "--modes")
    unknown = [mode for mode in modes if mode not in MODES]
    if unknown:
        raise Mistake(f"--modes: unknown {', '.join(unknown)} (known: {', '.join(MODES)})")
    if "ensemble" in modes and len(runs) < 2:
        if args.modes is not None:
            raise Mistake("--modes ensemble needs two runs or more in --runs")
        modes.remove("ensemble")
    check_runs(runs, modes, devices)
    top = subprocess.run(["git", "-C", args.repo, "rev-parse", "--show-toplevel"], capture_output=True, text=True)
    if top.returncode:
        raise Mistake(f"--repo {args.repo}: not in a git repository ({top.stderr.strip()})")
    repo = Path(top.stdout.strip())
    sha = subprocess.run(["git", "-C", str(repo), "rev-parse", "--verify", "--quiet", f"{args.commit}^{{commit}}"],
                         capture_output=True, text=True)
    if sha.returncode:
        raise Mistake(f"--commit {args.commit}: no such commit in {repo}")
    corpus = args.corpus
    from bapjax import paths  # light: no JAX

    try:
        if corpus == paths.MDC:
            os.environ.setdefault("BAPJAX_MDC", str(paths.mdc_path()))  # the old tree finds the MDC beside this one
        else:
            corpus = str(paths.resolve_path(corpus))
            if not Path(corpus).exists():
                raise Mistake(f"--corpus {args.corpus}: no such file or folder")
    except paths.MdcNotFoundError as err:
        raise Mistake(f"--corpus {args.corpus}: {err}") from None
    keep = Path(args.keep).expanduser().resolve() if args.keep else None
    if keep is not None and keep.exists() and any(keep.iterdir()):
        raise Mistake(f"--keep {args.keep}: not empty; name a new folder")

    began = time.time()
    with tempfile.TemporaryDirectory(prefix="bapjax-compare-decoding-") as tmp:
        old_tree = Path(tmp) / "tree"
        old_tree.mkdir()
        archive = subprocess.run(["git", "-C", str(repo), "archive", sha.stdout.strip()], capture_output=True)
        if archive.returncode:
            raise Mistake(f"--commit {args.commit}: git archive failed in {repo} "
                          f"({archive.stderr.decode(errors='replace').strip()})")
        subprocess.run(["tar", "-x", "-C", str(old_tree)], input=archive.stdout, check=True)
        outputs = keep or Path(tmp) / "out"
        rows = []
        for name, module, flags, file_name in plan(modes, runs, corpus, args.limit):
            for count in devices:
                found = {}
                for tree_name, tree in (("old", old_tree), ("new", repo)):
                    out = outputs / f"{tree_name}-{count}dev" / file_name
                    out.parent.mkdir(parents=True, exist_ok=True)
                    found[tree_name] = predictions_file(module, out)
                    what = f"{name}, {count} device(s), {tree_name} tree"
                    seconds = decode(tree, module, [*flags, "--out", str(out)], count, what,
                                     log=out.parent / f"{out.name}.log")
                    print(f"{what}: {seconds:.0f} s", file=sys.stderr, flush=True)
                    found[f"{tree_name}_seconds"] = round(seconds, 1)
                row = compare(name, count, found["old"], found["new"])
                rows.append({**row, "old_seconds": found["old_seconds"], "new_seconds": found["new_seconds"]})
    result = summary(args.commit, rows, {"commit_sha": sha.stdout.strip(), "runs": [str(r) for r in runs],
                                         "corpus": args.corpus, "limit": args.limit, "devices": devices,
                                         "minutes": round((time.time() - began) / 60, 1)})
    print(table(rows))
    for line in differences(rows):
        print(line)
    same = sum(r["identical"] for r in rows)
    print(f"{args.commit} vs this tree: {same} of {len(rows)} rows identical ({result['minutes']} min)")
    print(json.dumps(result))
    return 0 if result["identical"] else 1


if __name__ == "__main__":
    sys.exit(main())
