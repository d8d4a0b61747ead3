"""Generate a synthetic BAP corpus (D_r, D_bs or D_ss) in the MDC layout.

    python -m bapjax.sim.generate --dataset {r,bs,ss} --out DIR --seed S \
        [--train_items N --val_items N --test_items N] [--processes P] [--overwrite]
    python -m bapjax.sim.generate --dataset {r,bs,ss} --seed S --show_games N   (transcripts only)

Defaults are the paper's Table 3 sizes.  Every game is simulated from its own seed
``SeedSequence([seed, dataset, split, game index])``, so the corpus is the same for a seed
whatever the number of processes.  Games are taken in index order; each instruction is one
BAP item; a game whose target equals an earlier game's target (in any split) is skipped, so
the splits share no target structure; the last game of a split is cut after the instruction
that reaches the requested item count exactly (its gold configuration is then what was built).
Target ids: train C100000+, val C200000+, test C300000+ (the game index added).

Progress goes to stderr (items, then rate and ETA after the workers started); the statistics end the
output, the last line JSON.
"""

from __future__ import annotations

import collections
import hashlib
import json
import math
import os
import re
import shutil
import time
from pathlib import Path
from typing import Callable, Sequence

import numpy as np
from absl import flags

from bapjax import cli, parallel, paths
from bapjax.errors import UserError
from bapjax.sim import blocks_dialogs, random_dialogs, shape_dialogs, writer
from bapjax.sim.dialogue import SimGame
from bapjax.sim.planner import PlanningError
from bapjax.sim.structures import StructureError
from bapjax.world.items import SPLITS, TABLE3

SIMULATORS: dict[str, Callable[[np.random.Generator], SimGame]] = {
    "r": random_dialogs.simulate_game,
    "bs": blocks_dialogs.simulate_game,
    "ss": shape_dialogs.simulate_game,
}
DATASET_CODES = {"r": 1, "bs": 2, "ss": 3}
SPLIT_CODES = {"train": 0, "val": 1, "test": 2}
TARGET_BASE = {"train": 100000, "val": 200000, "test": 300000}
MEAN_ITEMS_PER_GAME = {"r": 9.0, "bs": 12.0, "ss": 2.0}  # only sizes the work batches
_TOKEN = re.compile(r"[a-z]+(?:'[a-z]+)?|\d+|[^\sa-z\d]")


MAX_ATTEMPTS = 20
# Bump when the simulators' output for a seed changes (written to data/dataset.json).
SIMULATOR_VERSION = 4  # 2: "in the middle" only near the centre, no doubled "one"; 3: closer, more off-axis poses; 4: MDC-like talk (feedback, acknowledgements, frame questions, shape names, floating/level notes), more split lines


def game_rng(seed: int, dataset: str, split: str, index: int, attempt: int = 0) -> np.random.Generator:
    entropy = [int(seed), DATASET_CODES[dataset], SPLIT_CODES[split], int(index)]
    if attempt:
        entropy.append(int(attempt))
    return np.random.default_rng(np.random.SeedSequence(entropy))


def simulate(dataset: str, seed: int, split: str, index: int) -> SimGame:
    """Game ``index`` of a split; a structure the samplers cannot complete (rare) is redrawn
    from the next attempt's seed, so the result still depends only on the arguments."""
    for attempt in range(MAX_ATTEMPTS):
        try:
            return SIMULATORS[dataset](game_rng(seed, dataset, split, index, attempt))
        except (StructureError, PlanningError):
            continue
    raise RuntimeError(f"{dataset} game {split}/{index} (seed {seed}) failed {MAX_ATTEMPTS} attempts")


def target_key(game: SimGame) -> str:
    return hashlib.sha1(repr(sorted(game.target.items())).encode()).hexdigest()


def game_summary(game: SimGame) -> dict:
    """What the statistics need from one game."""
    segments = []
    for n, segment in enumerate(game.segments):
        record = segment.record
        relation = record.get("relation")
        segments.append((len(segment.actions), n == 0, relation["type"] if relation else None,
                         record.get("anchor") is not None, record.get("omitted"), record["kind"],
                         any(speaker == "Builder" for speaker, _ in segment.after)))
    tokens = set()
    for segment in game.segments:
        for _, text in segment.lines + segment.after:
            tokens.update(_TOKEN.findall(text.lower()))
    for _, text in game.opening + game.closing:
        tokens.update(_TOKEN.findall(text.lower()))
    return {"segments": segments, "shapes": list(game.info.get("shapes", [])), "tokens": tokens,
            "target_blocks": len(game.target)}


def _work(args):
    dataset, seed, split, index = args
    game = simulate(dataset, seed, split, index)
    target_id = f"C{TARGET_BASE[split] + index}"
    return index, len(game.segments), target_key(game), game_summary(game), writer.render_game(game, target_id)


class _Progress:
    """A progress line on stderr at most every 2 s (`cli.Progress.show`: the rate and ETA measured
    after the worker processes started), none when not `enabled`."""

    def __init__(self, total: int, enabled: bool, label: str):
        self.rule, self.enabled, self.label = cli.Progress(total), enabled, label

    def update(self, done: int, force: bool = False) -> None:
        if self.enabled:
            self.rule.show(done, self.label, every=2.0, force=force)


WRITER = "bapjax.sim.generate"  # the owner marker (bapjax.paths) of the folders it writes


def _generated_here(root: Path) -> bool:
    """Whether bapjax.sim.generate wrote `root`: its owner marker, or (corpora from before the
    marker) the generator named in data/dataset.json."""
    if paths.owner_of(root) == WRITER:
        return True
    try:
        return json.loads((root / "data" / "dataset.json").read_text()).get("generator") == WRITER
    except (OSError, ValueError, AttributeError):
        return False


def generate_corpus(dataset: str, out_dir, seed: int = 0, train_items: int | None = None,
                    val_items: int | None = None, test_items: int | None = None,
                    processes: int | None = None, progress: bool = True, overwrite: bool = False) -> dict:
    """Simulate and write a corpus with exactly the requested number of items per split;
    returns its statistics (see ``corpus_statistics``)."""
    if dataset not in SIMULATORS:
        raise ValueError(f"unknown dataset {dataset!r}; expected one of {sorted(SIMULATORS)}")
    defaults = TABLE3[dataset]
    requested = {s: int(n if n is not None else d)
                 for s, n, d in zip(SPLITS, (train_items, val_items, test_items), defaults)}
    for split, n in requested.items():
        if n < 0:
            raise ValueError(f"{split}_items is {n}; expected >= 0")
    if int(seed) < 0:
        raise ValueError(f"seed is {seed}; expected >= 0")
    if processes is not None and int(processes) < 1:
        raise ValueError(f"processes is {processes}; expected >= 1")
    root = Path(out_dir)
    if (root / "data").exists():
        if not overwrite:
            raise FileExistsError(f"{root / 'data'} exists; --overwrite replaces it")
        if not _generated_here(root):
            paths.check_replaceable(root, WRITER, "this corpus")
        shutil.rmtree(root / "data")
    paths.mark_owned(root, WRITER)
    (root / "data" / "gold-configurations").mkdir(parents=True, exist_ok=True)
    processes = int(processes or os.cpu_count() or 1)
    total = sum(requested.values())
    bar = _Progress(total, progress, f"generate {dataset}")
    seen_targets: set[str] = set()
    summaries = {s: [] for s in SPLITS}
    splits = {s: [] for s in SPLITS}
    skipped_duplicates = 0
    done_before = 0
    start = time.time()
    pool = parallel.pool_context().Pool(processes) if processes > 1 else None
    try:
        for split in SPLITS:
            needed = requested[split]
            have = 0
            index = 0
            while have < needed:
                estimate = math.ceil((needed - have) / MEAN_ITEMS_PER_GAME[dataset] * 1.1) + processes
                batch = [(dataset, seed, split, i) for i in range(index, index + min(estimate, 2000))]
                index += len(batch)
                chunk = max(1, min(16, len(batch) // (processes * 4) or 1))
                results = pool.imap(_work, batch, chunksize=chunk) if pool else map(_work, batch)
                for game_index, num_items, key, summary, files in results:
                    if have >= needed:
                        continue  # drain the rest of the batch
                    if key in seen_targets:
                        skipped_duplicates += 1
                        continue
                    target_id = f"C{TARGET_BASE[split] + game_index}"
                    if have + num_items > needed:
                        game = simulate(dataset, seed, split, game_index).truncated(needed - have)
                        key = target_key(game)
                        if key in seen_targets:
                            skipped_duplicates += 1
                            continue
                        summary, files = game_summary(game), writer.render_game(game, target_id)
                        summary["truncated"] = True
                        num_items = needed - have
                    seen_targets.add(key)
                    writer.write_rendered(root, split, target_id, game_index, files)
                    splits[split].append(target_id)
                    summaries[split].append(summary)
                    have += num_items
                    bar.update(done_before + have)
            done_before += have
    finally:
        if pool is not None:
            pool.close()
            pool.join()
    elapsed = time.time() - start
    bar.update(done_before, force=True)
    stats = corpus_statistics(dataset, summaries)
    stats["seconds"] = round(elapsed, 2)
    stats["items_per_second"] = round(total / elapsed, 1) if elapsed > 0 else None
    stats["skipped_duplicate_targets"] = skipped_duplicates
    stats["processes"] = processes
    stats["seed"] = seed
    writer.write_corpus_meta(root, dataset, splits, {
        "seed": seed, "requested_items": requested, "games": {s: len(v) for s, v in splits.items()},
        "generator": "bapjax.sim.generate", "simulator_version": SIMULATOR_VERSION})
    stats["out"] = str(root)
    return stats


def corpus_statistics(dataset: str, summaries: dict[str, list[dict]]) -> dict:
    """Items, mean actions, EB share, relation-type / anchor / shape-type counts, vocabulary size."""
    out = {"dataset": dataset, "splits": {}}
    vocabulary = set()
    relation_types = collections.Counter()
    shape_types = collections.Counter()
    kinds = collections.Counter()
    omitted = collections.Counter()
    anchors = 0
    confirmations = 0
    for split, games in summaries.items():
        actions = []
        empty_board = 0
        for game in games:
            vocabulary |= game["tokens"]
            shape_types.update(game["shapes"])
            for num_actions, eb, rtype, has_anchor, omit, kind, confirmed in game["segments"]:
                actions.append(num_actions)
                empty_board += eb
                relation_types[rtype or "none"] += 1
                anchors += has_anchor
                kinds[kind] += 1
                confirmations += confirmed
                if omit:
                    omitted[omit] += 1
        out["splits"][split] = {
            "items": len(actions), "games": len(games),
            "mean_actions": round(float(np.mean(actions)), 3) if actions else 0.0,
            "empty_board_share": round(empty_board / len(actions), 4) if actions else 0.0,
            "truncated_games": sum(1 for g in games if g.get("truncated")),
        }
    all_items = sum(s["items"] for s in out["splits"].values())
    out["items"] = all_items
    out["relation_types"] = dict(sorted(relation_types.items()))
    out["anchored_instructions"] = anchors
    out["instruction_kinds"] = dict(sorted(kinds.items()))
    out["shape_types"] = dict(sorted(shape_types.items()))
    out["clarifications"] = dict(sorted(omitted.items()))
    out["confirmations"] = confirmations
    out["vocabulary_size"] = len(vocabulary)
    return out


def format_game(game: SimGame, name: str = "") -> str:
    """A readable transcript: chat lines with the Builder's yaw, action counts, grounded kinds."""
    lines = [f"### {name} target {len(game.target)} blocks, shapes {game.info.get('shapes') or '-'}"]
    lines += [f"<{speaker}> {text}" for speaker, text in game.opening]
    for segment in game.segments:
        record = segment.record
        relation = record.get("relation")
        tag = record["kind"] + (f", {relation['type']} {tuple(relation['offset'])}" if relation else "")
        if record.get("anchor"):
            tag += f", anchor {[tuple(d) for d in record['anchor']['dirs']]}"
        for n, (speaker, text) in enumerate(segment.lines):
            suffix = f"    (yaw {segment.pose.yaw:.0f}; {tag})" if n == 0 else ""
            lines.append(f"<{speaker}> {text}{suffix}")
        count = len(segment.actions)
        lines.append(f"    [Builder: {count} action{'s' if count != 1 else ''}]")
        lines += [f"<{speaker}> {text}" for speaker, text in segment.after]
    lines += [f"<{speaker}> {text}" for speaker, text in game.closing]
    return "\n".join(lines)


def format_statistics(stats: dict) -> str:
    lines = [f"dataset {stats['dataset']}: {stats['items']} items in {stats.get('seconds', '?')} s "
             f"({stats.get('items_per_second', '?')} items/s, {stats.get('processes', '?')} processes)"]
    for split, s in stats["splits"].items():
        lines.append(f"  {split:>5}: {s['items']:6d} items from {s['games']} games, mean {s['mean_actions']:.2f} "
                     f"actions, EB share {100 * s['empty_board_share']:.1f}%")
    lines.append(f"  relation types: {stats['relation_types']}; Builder-anchored: {stats['anchored_instructions']}")
    lines.append(f"  instruction kinds: {stats['instruction_kinds']}")
    lines.append(f"  shape types: {stats['shape_types'] or '-'}")
    lines.append(f"  clarifications: {stats['clarifications']}; confirmations: {stats['confirmations']}")
    lines.append(f"  vocabulary size: {stats['vocabulary_size']}")
    return "\n".join(lines)


FLAGS = flags.FLAGS


def define_flags() -> None:
    cli.flag("enum", "dataset", None, "Which simulator: r, bs or ss.", enum_values=sorted(SIMULATORS))
    cli.flag("string", "out", None, "Output corpus directory (gets data/...).")
    cli.flag("integer", "seed", 0, "Random seed (the corpus depends only on it and the sizes).")
    cli.flag("integer", "train_items", None, "Training items (default: Table 3).")
    cli.flag("integer", "val_items", None, "Validation items (default: Table 3).")
    cli.flag("integer", "test_items", None, "Test items (default: Table 3).")
    cli.flag("integer", "processes", None, "Worker processes (default: every core).")
    cli.flag("bool", "overwrite", False, "Replace an existing OUT/data.")
    cli.flag("bool", "progress", True, "Progress lines on stderr.")
    cli.flag("integer", "show_games", 0, "Only print the transcripts of this many training games "
             "of the seed (no corpus is written; --out not needed).")


def check_flags() -> None:
    """Out-of-range values are refused before anything is written."""
    if FLAGS.seed < 0:
        raise UserError(f"--seed is {FLAGS.seed}; expected an integer >= 0")
    if FLAGS.processes is not None and FLAGS.processes < 1:
        raise UserError(f"--processes is {FLAGS.processes}; expected an integer >= 1 (or leave it out)")
    for name in ("train_items", "val_items", "test_items", "show_games"):
        if (FLAGS[name].value or 0) < 0:
            raise UserError(f"--{name} is {FLAGS[name].value}; expected an integer >= 0")


def main(argv: Sequence[str]) -> int:
    if len(argv) > 1:
        raise UserError(f"unexpected arguments {argv[1:]}")
    check_flags()
    if FLAGS.dataset and FLAGS.show_games > 0:
        for index in range(FLAGS.show_games):
            game = simulate(FLAGS.dataset, FLAGS.seed, "train", index)
            print(format_game(game, f"{FLAGS.dataset} seed {FLAGS.seed} train game {index}:"))
            print()
        return 0
    cli.require_flags("dataset", "out")
    paths.check_writable_dir(FLAGS.out, "--out")
    try:
        stats = generate_corpus(FLAGS.dataset, FLAGS.out, FLAGS.seed, FLAGS.train_items, FLAGS.val_items,
                                FLAGS.test_items, processes=FLAGS.processes, progress=FLAGS.progress,
                                overwrite=FLAGS.overwrite)
    except (FileExistsError, ValueError) as err:
        raise UserError(str(err)) from None
    print(format_statistics(stats))
    print(json.dumps(stats))
    return 0


if __name__ == "__main__":
    cli.run(main, define_flags)
