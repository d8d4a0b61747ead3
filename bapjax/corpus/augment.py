"""Augment MDC training games: paraphrase, permute colors, rotate about the vertical axis.

    python -m bapjax.corpus.augment [--corpus PATH] --seed S --out DIR [--copies 3]

Without ``--corpus``, the MDC wherever ``bapjax.paths.mdc_path`` finds it.

Each training game gets ``--copies`` augmented copies (default 3, the paper's 4x mix:
3,709 original + 3 x 3,709 augmented = 14,836 training items). A copy combines all three
transformations of the paper (section 2.5):

* rotation by k quarter turns about the vertical axis through the build region's center
  (cell (x, z) -> (-z, x) per turn; the Builder's position rotates about (0.5, 0.5), the
  center of the region's cell centers, and its yaw increases by 90 degrees per turn, so every
  block stays where it was relative to the Builder and "to your left" stays true);
* a permutation of the six colors applied to every block, the Builder's inventory and every
  color word in the chat ("red", "Reds", "reddish" ...);
* synonym substitution with the corpus's lexicon ``data/lexicons/synonym_substitutions.json``
  (each eligible word is replaced with probability ``--paraphrase_prob``).

(k, permutation) pairs are drawn per game from the
seed, never the identity and never twice for one game. Every transformation maps items one to one (region, supports and the per-color
inventory are invariant), so each copy has exactly its original's items.

DIR becomes a corpus in the MDC layout that ``bapjax.corpus.mdc.load_corpus(DIR)`` reads: the
training games (hard links to the originals unless ``--noinclude_originals``) plus the copies,
named ``<game>-aug<c>`` so item ids stay distinct while the target id (and so the split) is the
original's; ``splits.json`` lists only the training targets (val and test are never augmented);
``data/augmentation.json`` records the seed and each copy's transformation. The last line
printed is JSON: {"original_items", "augmented_items", "total_items", "games", ...}.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import os
import re
import shutil
import zlib
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np
import orjson
from absl import flags

from bapjax import cli, parallel, paths
from bapjax.corpus import mdc
from bapjax.errors import UserError
from bapjax.world import grid
from bapjax.world.grid import Action, Block
from bapjax.world.items import BapItem, BuilderPose, ChatTurn
from bapjax.world.rotation import (
    rotate_action,
    rotate_block,
    rotate_cell,
    rotate_pose,
    rotate_position,
    rotate_yaw,
)

DEFAULT_COPIES = 3  # augmented copies per MDC training game: the paper's 4x mix with the originals
DEFAULT_PARAPHRASE_PROB = 0.5  # each lexicon word of a copy substituted with this probability
LEXICON_PATH = Path("data") / "lexicons" / "synonym_substitutions.json"
IDENTITY = tuple(range(1, grid.NUM_COLORS + 1))
ALL_PERMUTATIONS = tuple(itertools.permutations(IDENTITY))

_COLOR_WORD = re.compile(r"(?<![A-Za-z])(red|orange|yellow|green|blue|purple)(dish|ish|s)?(?![A-Za-z])",
                         re.IGNORECASE)
_WORD = re.compile(r"(?<![\w'])([A-Za-z0-9]+)(?![\w'])")
_SPEAKER_PREFIX = re.compile(r"^(<\w+>\s?)(.*)$", re.DOTALL)


@dataclasses.dataclass(frozen=True)
class Augmentation:
    """One copy's transformation. ``permutation[c - 1]`` is the new color id of color c."""

    rotation: int  # quarter turns, 0..3
    permutation: tuple[int, ...]
    paraphrase_prob: float
    paraphrase_seed: int

    def to_json(self) -> dict:
        return {"rotation_quarter_turns": self.rotation,
                "color_map": {grid.color_name(c): grid.color_name(self.permutation[c - 1]) for c in IDENTITY},
                "paraphrase_prob": self.paraphrase_prob, "paraphrase_seed": self.paraphrase_seed}


# --------------------------------------------------------------------------------------------
# Geometry and colors


def inverse_permutation(permutation: Sequence[int]) -> tuple[int, ...]:
    inverse = [0] * len(permutation)
    for c, new in enumerate(permutation, 1):
        inverse[new - 1] = c
    return tuple(inverse)


def transform_block(block: Block, aug: Augmentation) -> Block:
    block = rotate_block(block, aug.rotation)
    return block._replace(color=aug.permutation[block.color - 1])


def transform_action(action: Action, aug: Augmentation) -> Action:
    action = rotate_action(action, aug.rotation)
    return action._replace(color=aug.permutation[action.color - 1])


def transform_pose(pose: BuilderPose, aug: Augmentation) -> BuilderPose:
    return rotate_pose(pose, aug.rotation)


def transform_cell(x: int, z: int, aug: Augmentation) -> tuple[int, int]:
    return rotate_cell(x, z, aug.rotation)


def transform_position(x: float, z: float, aug: Augmentation) -> tuple[float, float]:
    return rotate_position(x, z, aug.rotation)


def transform_yaw(yaw: float, aug: Augmentation) -> float:
    return rotate_yaw(yaw, aug.rotation)


def _match_case(word: str, like: str) -> str:
    if like.isupper() and len(like) > 1:
        return word.upper()
    if like[:1].isupper():
        return word[:1].upper() + word[1:]
    return word


def permute_color_words(text: str, permutation: Sequence[int]) -> str:
    """Every color word (and its plural / -ish form) replaced by its permuted color."""

    def replace(match: re.Match) -> str:
        old = match.group(1).lower()
        new = grid.color_name(permutation[grid.color_id(old) - 1])
        suffix = (match.group(2) or "").lower()
        if suffix in ("ish", "dish"):
            suffix = "dish" if new == "red" else "ish"
        return _match_case(new + suffix, match.group(0))

    return _COLOR_WORD.sub(replace, text)


def color_words(text: str) -> list[int]:
    """Color ids of the color words of a text, in order (for checks)."""
    return [grid.color_id(m.group(1).lower()) for m in _COLOR_WORD.finditer(text)]


def paraphrase(text: str, lexicon: Mapping[str, Sequence[str]], rng: np.random.Generator,
               prob: float) -> tuple[str, int]:
    """Synonym substitution: each lexicon word replaced with probability ``prob``."""
    count = 0

    def replace(match: re.Match) -> str:
        nonlocal count
        word = match.group(1)
        options = lexicon.get(word.lower())
        if not options or rng.random() >= prob:
            return word
        count += 1
        return _match_case(str(options[rng.integers(len(options))]), word)

    return _WORD.sub(replace, text), count


def load_lexicon(root: Path) -> dict[str, list[str]]:
    path = root / LEXICON_PATH
    try:
        lexicon = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as err:
        raise mdc.CorpusError(f"{path}: cannot read the synonym lexicon ({err})") from err
    if not isinstance(lexicon, dict) or not all(isinstance(v, list) for v in lexicon.values()):
        raise mdc.CorpusError(f"{path}: expected {{word: [synonyms]}}")
    for word, synonyms in lexicon.items():
        for w in (word, *synonyms):
            if _COLOR_WORD.search(str(w)):
                raise mdc.CorpusError(f"{path}: the lexicon entry {word!r} involves color word {w!r}, "
                                      "which would break the color permutation")
    return {k.lower(): [str(s) for s in v] for k, v in lexicon.items()}


# --------------------------------------------------------------------------------------------
# Games


class _ChatAugmenter:
    """Augments each distinct chat line once, so the cumulative ChatHistory stays consistent."""

    def __init__(self, aug: Augmentation, lexicon: Mapping[str, Sequence[str]]):
        self.aug = aug
        self.lexicon = lexicon
        self.rng = np.random.default_rng(aug.paraphrase_seed)
        self.lines: dict[tuple[int, str], str] = {}
        self.substitutions = 0

    def line(self, index: int, line: str) -> str:
        key = (index, line)
        out = self.lines.get(key)
        if out is None:
            match = _SPEAKER_PREFIX.match(line)
            prefix, text = (match.group(1), match.group(2)) if match else ("", line)
            # Keep the system line the itemizer's readers may look for.
            if text != "Mission has started.":
                text = permute_color_words(text, self.aug.permutation)
                if self.aug.paraphrase_prob > 0:
                    text, count = paraphrase(text, self.lexicon, self.rng, self.aug.paraphrase_prob)
                    self.substitutions += count
            out = prefix + text
            self.lines[key] = out
        return out


def augment_raw_game(raw: Mapping[str, Any], aug: Augmentation, lexicon: Mapping[str, Sequence[str]],
                     where: str = "game") -> tuple[dict, int]:
    """A postprocessed-observations record transformed; returns (record, substitutions)."""
    if not isinstance(raw, Mapping) or not isinstance(raw.get("WorldStates"), list):
        raise mdc.CorpusError(f"{where}: missing key 'WorldStates' (a list of world states)")
    chat = _ChatAugmenter(aug, lexicon)
    out = {k: v for k, v in raw.items() if k != "WorldStates"}
    states = []
    for n, state in enumerate(raw["WorldStates"]):
        at = f"{where}: WorldStates[{n}]"
        state = dict(state)
        pose = state.get("BuilderPosition")
        if pose is not None:
            try:
                x, z = transform_position(float(pose["X"]), float(pose["Z"]), aug)
                state["BuilderPosition"] = {**pose, "X": x, "Z": z, "Yaw": transform_yaw(float(pose["Yaw"]), aug)}
            except (KeyError, TypeError, ValueError) as err:
                raise mdc.CorpusError(f"{at}: BuilderPosition lacks X, Z or Yaw ({err!r})") from err
        blocks = []
        for b, block in enumerate(state.get("BlocksInGrid") or []):
            try:
                coords = block["AbsoluteCoordinates"]
                x, z = transform_cell(int(coords["X"]), int(coords["Z"]), aug)
                color = aug.permutation[grid.color_id(block["Type"]) - 1]
            except (KeyError, TypeError, ValueError) as err:
                raise mdc.CorpusError(f"{at}: BlocksInGrid[{b}]: {err!r}") from err
            # PerspectiveCoordinates are relative to the Builder, which turned with the world (bapjax
            # computes its Builder-frame channels from the pose, never from these logged fields).
            blocks.append({**block, "AbsoluteCoordinates": {**coords, "X": x, "Z": z},
                           "Type": grid.mdc_block_type(color)})
        state["BlocksInGrid"] = blocks
        inventory = []
        for slot in state.get("BuilderInventory") or []:
            slot = dict(slot)
            if "Type" in slot:
                try:
                    slot["Type"] = grid.mdc_block_type(aug.permutation[grid.color_id(slot["Type"]) - 1])
                except ValueError:
                    pass  # not a colored block; keep it as logged
            inventory.append(slot)
        if "BuilderInventory" in state:
            state["BuilderInventory"] = inventory
        state["ChatHistory"] = [chat.line(i, str(line)) for i, line in enumerate(state.get("ChatHistory") or [])]
        states.append(state)
    out["WorldStates"] = states
    return out, chat.substitutions


def _stable_hash(text: str) -> int:
    return zlib.crc32(text.encode("utf-8"))


def draw_augmentations(game_id: str, seed: int, copies: int, paraphrase_prob: float) -> list[Augmentation]:
    """``copies`` distinct non-identity (rotation, permutation) pairs for one game, from the seed."""
    if copies > 4 * len(ALL_PERMUTATIONS) - 1:
        raise ValueError(f"at most {4 * len(ALL_PERMUTATIONS) - 1} distinct copies per game")
    rng = np.random.default_rng([seed, _stable_hash(game_id)])
    used = {(0, IDENTITY)}
    out = []
    while len(out) < copies:
        rotation = int(rng.integers(4))
        permutation = ALL_PERMUTATIONS[int(rng.integers(len(ALL_PERMUTATIONS)))]
        if (rotation, permutation) in used:
            continue
        used.add((rotation, permutation))
        out.append(Augmentation(rotation, permutation, paraphrase_prob, int(rng.integers(2**31))))
    return out


def augmented_game_id(game_id: str, copy: int) -> str:
    return f"{game_id}-aug{copy}"


def _write_json(path: Path, record: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".tmp{os.getpid()}")
    tmp.write_bytes(orjson.dumps(record))
    tmp.replace(path)


def _link_or_copy(src: Path, dst: Path) -> None:
    dst.parent.mkdir(parents=True, exist_ok=True)
    if dst.exists():
        dst.unlink()
    try:
        os.link(src, dst)
    except OSError:
        shutil.copy2(src, dst)


def _augment_one(job) -> list[dict]:
    path, game_rel, game_id, augs, lexicon, out_logs = job
    try:
        raw = orjson.loads(Path(path).read_bytes())
    except (OSError, orjson.JSONDecodeError) as err:
        raise mdc.CorpusError(f"{path}: cannot read the game log ({err})") from err
    records = []
    for copy, aug in enumerate(augs, 1):
        new_id = augmented_game_id(game_id, copy)
        record, substitutions = augment_raw_game(raw, aug, lexicon, where=str(path))
        _write_json(out_logs / game_rel.parent.parent / new_id / "postprocessed-observations.json", record)
        records.append({"game": new_id, "source_game": game_id, "copy": copy,
                        "substitutions": substitutions, **aug.to_json()})
    return records


WRITER = "bapjax.corpus.augment"  # the owner marker (bapjax.paths) of the folders it writes


def augment_games(corpus: str | os.PathLike, out_dir: str | os.PathLike, seed: int, copies: int = DEFAULT_COPIES,
                  paraphrase_prob: float = DEFAULT_PARAPHRASE_PROB, include_originals: bool = True,
                  processes: int | None = None, progress: bool = True, split: str = "train") -> dict:
    """Write the augmented training corpus to ``out_dir``; returns item counts and settings."""
    root = mdc.resolve_corpus(corpus)
    out_root = Path(out_dir)
    lexicon = load_lexicon(root) if paraphrase_prob > 0 else {}
    target_split = mdc.read_splits(root)
    train_targets = sorted({t for t, s in target_split.items() if s == split},
                           key=lambda t: int(t[1:]) if t[1:].isdigit() else t)
    logs = root / "data" / "logs"
    out_logs = out_root / "data" / "logs"
    if out_root.resolve() == root.resolve():
        raise mdc.CorpusError(f"{out_root}: the output directory is the corpus being augmented; pick another")
    if out_logs.exists():
        if paths.owner_of(out_root) != WRITER and not (out_root / "data" / "augmentation.json").exists():
            paths.check_replaceable(out_root, WRITER, "this corpus")
        shutil.rmtree(out_logs)
    paths.mark_owned(out_root, WRITER)
    jobs = []
    for path in mdc.game_files(root):
        game_id = path.parent.name
        if target_split.get(mdc.target_of_game(game_id)) != split:
            continue
        game_rel = path.relative_to(logs)
        if include_originals:
            _link_or_copy(path, out_logs / game_rel)
        jobs.append((path, game_rel, game_id, draw_augmentations(game_id, seed, copies, paraphrase_prob),
                     lexicon, out_logs))
    if not jobs:
        raise mdc.CorpusError(f"{root}: no {split} games to augment")
    processes = processes or min(os.cpu_count() or 1, 4)
    rule = cli.Progress(len(jobs), "games")
    records: list[dict] = []
    if processes > 1:
        with parallel.pool_context().Pool(processes) as pool:
            results = pool.imap(_augment_one, jobs, chunksize=4)
            for n, result in enumerate(results, 1):
                records.extend(result)
                _log_progress(n, rule, progress)
    else:
        for n, job in enumerate(jobs, 1):
            records.extend(_augment_one(job))
            _log_progress(n, rule, progress)
    _write_json(out_logs / "splits.json", {"train": train_targets, "val": [], "test": []})
    _write_json(out_root / "data" / "dataset.json", {"name": mdc.corpus_dataset_name(root)})
    lexicon_out = out_root / LEXICON_PATH
    if (root / LEXICON_PATH).exists():
        lexicon_out.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(root / LEXICON_PATH, lexicon_out)
    augmented = mdc.load_corpus(out_root, progress=progress)
    original = mdc.load_corpus(root)
    original_items = len(original.split(split))
    total_items = len(augmented.split("train"))
    stats = {
        "original_items": original_items if include_originals else 0,
        "augmented_items": total_items - (original_items if include_originals else 0),
        "total_items": total_items,
        "source_items": original_items,
        "games": len(jobs),
        "augmented_games": len(records),
        "copies": copies,
        "seed": seed,
        "paraphrase_prob": paraphrase_prob,
        "substitutions": sum(r["substitutions"] for r in records),
        "source": str(root),
        "out": str(out_root),
    }
    _write_json(out_root / "data" / "augmentation.json", {**stats, "games_written": records})
    return stats


def _log_progress(n: int, rule: cli.Progress, progress: bool) -> None:
    if progress:
        rule.show(n, "augment")


# --------------------------------------------------------------------------------------------
# Item-level view (what the augmented game's items must equal; used by the tests)


def transform_item(item: BapItem, aug: Augmentation, copy: int) -> BapItem:
    """The item the augmented game should yield, text color-permuted but not paraphrased."""
    def text(line: str) -> str:
        if line == "Mission has started.":
            return line
        return permute_color_words(line, aug.permutation)

    history = tuple(transform_action(e, aug) if isinstance(e, Action) else ChatTurn(e.speaker, text(e.text))
                    for e in item.history)
    game_id = augmented_game_id(item.game_id, copy)
    return dataclasses.replace(
        item, item_id=f"{game_id}:{item.item_id.rsplit(':', 1)[1]}", game_id=game_id, history=history,
        prev_structure=tuple(sorted(transform_block(b, aug) for b in item.prev_structure)),
        reference_actions=tuple(transform_action(a, aug) for a in item.reference_actions),
        next_structure=tuple(sorted(transform_block(b, aug) for b in item.next_structure)),
        builder_pose=transform_pose(item.builder_pose, aug))


# --------------------------------------------------------------------------------------------
# CLI

FLAGS = flags.FLAGS


def define_flags() -> None:
    cli.define_item_source_flags("corpus")  # default: the MDC
    cli.flag("string", "out", None, "Output corpus directory (its data/logs is replaced).")
    cli.flag("integer", "seed", 0, "Seed for every random choice.")
    cli.flag("integer", "copies", DEFAULT_COPIES, "Augmented copies per training game (3 gives the paper's 4x mix).")
    cli.flag("float", "paraphrase_prob", DEFAULT_PARAPHRASE_PROB, "Probability of substituting each lexicon word.")
    cli.flag("bool", "include_originals", True, "Also put (hard links to) the original training games in OUT.")
    cli.flag("integer", "processes", None, "Worker processes (default: min(cpus, 4)).")


def main(argv: Sequence[str]) -> int:
    if len(argv) > 1:
        raise UserError(f"unexpected arguments: {argv[1:]}")
    if not FLAGS.out:
        raise UserError("usage: python -m bapjax.corpus.augment [--corpus PATH] --seed S --out DIR")
    if FLAGS.seed < 0:
        raise UserError(f"--seed is {FLAGS.seed}; expected an integer >= 0")
    if FLAGS.copies < 1:
        raise UserError(f"--copies is {FLAGS.copies}; expected an integer >= 1")
    if not 0.0 <= FLAGS.paraphrase_prob <= 1.0:
        raise UserError(f"--paraphrase_prob is {FLAGS.paraphrase_prob}; expected a value in [0, 1]")
    if FLAGS.processes is not None and FLAGS.processes < 1:
        raise UserError(f"--processes is {FLAGS.processes}; expected an integer >= 1 (or leave it out)")
    paths.check_writable_dir(FLAGS.out, "--out")
    stats = augment_games(paths.mdc_path(FLAGS.corpus), FLAGS.out, FLAGS.seed, FLAGS.copies, FLAGS.paraphrase_prob,
                          FLAGS.include_originals, FLAGS.processes)
    print(f"wrote {stats['augmented_games']} augmented games ({stats['augmented_items']} items) and "
          f"{stats['original_items']} original items to {stats['out']}: {stats['total_items']} training items")
    print(json.dumps(stats))
    return 0


if __name__ == "__main__":
    cli.run(main, define_flags)
