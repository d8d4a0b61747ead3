"""Does a refactor change training? A tiny run trained by COMMIT's code and by this tree's, compared.

    python -m bapjax.analysis.compare_training --commit 3b301ad [--config cpu_experiment:cl] [--steps 6] [--repo .]

Each tree trains the same tiny run in its own process (`PYTHONPATH` = that tree: `git archive COMMIT`
of the git repository `--repo` (default: the one holding the current directory) for the old one,
that repository's work tree for the new one; each loads the config by name as the CLI does):
the config's data sources cut to 48/8/8 items, a 1-layer model of width 8-16 (in the model
section's layout of each tree: flat fields, or one sub-section per part), 6
steps of 8, the STOP rule chosen on val and the final decode of the MDC test items, in a
temporary workdir with the shared caches. Prints whether every parameter is bit-identical (an
embedding table rounded to more rows, `model.text.vocab_multiple`, on the rows both have, its others
zero), the largest difference, and each run's MDC test figures. The last line is JSON. Runs bit-identical only
on one machine, like any training.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from bapjax import paths

RUN = '''
import json, sys
import jax, numpy as np
try:
    from bapjax.cli import load_config
except ImportError:  # a tree before bapjax.cli's loader
    import configs
    load_config = configs.load
if sys.argv[4] == "package":
    from bapjax.training import checkpoints
    from bapjax.training import loop as train
else:  # a tree before the package layout (flat modules)
    from bapjax import checkpoints, train
config_name, steps, out = sys.argv[1], int(sys.argv[2]), sys.argv[3]
config = load_config(config_name)
if "world" in config.model:  # one sub-section per part
    if "embedding_dim" in config.model.text:
        config.model.text.embedding_dim = 8
    config.model.text.hidden = 16
    config.model.world.update(dict(features=8, layers=1))
    config.model.decoder.update(dict(action_embedding=16, hidden=16))
    config.model.heads.hidden = 16
else:  # the flat model section of older trees
    config.model.update(dict(embedding_dim=8, text_hidden=16, world_features=8, world_layers=1,
                             action_embedding=16, decoder_hidden=16, head_hidden=16))
(config.model if "glove" in config.model else config.train).glove = False  # model.glove before 2026-11-24
for source in config.data.sources.values():
    source.max_train_items, source.max_val_items, source.max_test_items = 48, 8, 8
if "augment" in config.data.sources.get("mc", {}):
    config.data.sources.mc.augment.enabled = False
config.features.max_text_tokens = 24
config.features.max_actions = 3
config.train.update(dict(batch_size=8, max_steps=steps, eval_every_steps=3, log_every_steps=3))
config.eval.update(dict(val_decode_items=-1, final_splits=("mc:test",), batch_size=8, stop_thresholds=(0.3,)))
if config.train.get("select_by", "loss") != "loss":  # no val decoding here, so the checkpoint rule is val loss
    config.train.select_by = "loss"
result = train.train_and_evaluate(config, out + "/run")
params, step = checkpoints.load_params(out + "/run/checkpoints/latest")
np.savez(out + "/params.npz", **{jax.tree_util.keystr(k): np.asarray(v)
                                 for k, v in jax.tree_util.tree_leaves_with_path(params)})
report = result["mc_test"]
print("RESULT " + json.dumps({"step": step, "micro_overall": report["micro"]["Overall"]["overall"],
                              "strict_micro": report["strict_micro"], "counts": report["counts"]}))
'''


def common_rows(old, new):
    """The two trees' arrays of one parameter as compared: as they are where their shapes agree; an
    embedding table with more rows than the other's (`model.text.vocab_multiple`) compares on the rows
    both have when every row past them is zero (it is never read); None otherwise (not the same tree)."""
    if old.shape == new.shape:
        return old, new
    if old.ndim != new.ndim or old.ndim == 0 or old.shape[1:] != new.shape[1:]:
        return None
    rows = min(len(old), len(new))
    longer = old if len(old) > rows else new
    return (old[:rows], new[:rows]) if not longer[rows:].any() else None


def train_tree(tree: Path, config: str, steps: int, out: Path) -> dict:
    out.mkdir(parents=True)
    layout = "package" if (tree / "bapjax" / "training").is_dir() else "flat"
    done = subprocess.run([sys.executable, "-c", RUN, config, str(steps), str(out), layout], cwd=str(tree),
                          env={**os.environ, "PYTHONPATH": str(tree)}, capture_output=True, text=True)
    lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    if done.returncode or not lines:
        raise SystemExit(f"error: the run of {tree} failed:\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}")
    return json.loads(lines[-1][len("RESULT "):])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--commit", required=True, help="the code to compare this tree with")
    parser.add_argument("--config", default="cpu_experiment:cl", help="configs.load name (default: the curriculum with cpu_experiment's default model: the frame model "
                             "today, the once model from 8109a59, the per-step FiLM model before; across a change of "
                             "default name the model, e.g. cpu_experiment:cl,0,once, or compare bert:cl)")
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--repo", default=".", help="a directory of the git repository whose work tree is compared "
                        "with --commit (default: the current directory's)")
    args = parser.parse_args()
    top = subprocess.run(["git", "-C", args.repo, "rev-parse", "--show-toplevel"], capture_output=True, text=True)
    if top.returncode:
        parser.exit(2, f"error: --repo {args.repo}: not in a git repository ({top.stderr.strip()})\n")
    repo = Path(top.stdout.strip())

    os.environ.setdefault("BAPJAX_MDC", str(paths.mdc_path()))  # the old tree finds the MDC beside this one
    import numpy as np

    with tempfile.TemporaryDirectory(prefix="bapjax-compare-") as tmp:
        old_tree = Path(tmp) / "tree"
        old_tree.mkdir()
        archive = subprocess.run(["git", "-C", str(repo), "archive", args.commit], capture_output=True)
        if archive.returncode:
            parser.exit(2, f"error: --commit {args.commit}: git archive failed in {repo} "
                           f"({archive.stderr.decode(errors='replace').strip().splitlines()[-1:]})\n")
        subprocess.run(["tar", "-x", "-C", str(old_tree)], input=archive.stdout, check=True)
        results = {"baseline": train_tree(old_tree, args.config, args.steps, Path(tmp) / "old"),
                   "current": train_tree(repo, args.config, args.steps, Path(tmp) / "new")}
        old, new = np.load(Path(tmp) / "old" / "params.npz"), np.load(Path(tmp) / "new" / "params.npz")
        same_tree = sorted(old.files) == sorted(new.files)
        pairs = [common_rows(old[k], new[k]) for k in old.files] if same_tree else []
        same_tree = same_tree and all(pair is not None for pair in pairs)
        worst = max(float(np.abs(a - b).max()) for a, b in pairs) if same_tree else None
        identical = same_tree and all(np.array_equal(a, b) for a, b in pairs)
    summary = {"commit": args.commit, "config": args.config, "steps": args.steps, "same_tree": same_tree,
               "bit_identical_params": identical, "max_param_diff": worst, **results}
    print(f"{args.commit} vs this tree, {args.config}, {args.steps} steps: parameters "
          f"{'bit-identical' if identical else f'differ (largest {worst})'}; MDC test "
          f"{results['baseline']['micro_overall']:.4f} vs {results['current']['micro_overall']:.4f}")
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
