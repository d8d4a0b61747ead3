"""Read the Minecraft Dialogue Corpus (or a simulator corpus in its layout) into BAP items.

    python -m bapjax.corpus.mdc stats  [--corpus PATH]
    python -m bapjax.corpus.mdc export [--corpus PATH] --split S --out FILE
    python -m bapjax.corpus.mdc fetch  --out DIR [--url URL] [--sha256 HEX]   (bapjax.corpus.fetch)

PATH is the corpus directory (the one holding ``data/``, e.g. a clone of the public repository),
its ``data/`` directory, the ``.tar.xz`` archive, or a directory holding exactly one such archive;
without --corpus, the MDC wherever ``bapjax.paths.mdc_path`` finds it.
An archive is unpacked once into the cache directory (``$BAPJAX_CACHE`` or ``~/.cache/bapjax``),
and the itemized corpus is cached there too, so a second load does not reparse any game.

The extraction rule (the one that gives the paper's item counts, train 3709 / val 1331 / test
1616: docs/corpus.md) in one place: ``game_timeline``
turns world states into action/chat events, ``itemize_game`` cuts items from the events.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import multiprocessing
import os
import pickle
import re
import shutil
import sys
import tarfile
import tempfile
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Iterable, Sequence

import orjson
from absl import flags, logging

from bapjax import cli, paths
from bapjax.corpus import fetch
from bapjax.corpus.itemized import ItemizedCorpus, describe
from bapjax.errors import UserError
from bapjax.paths import build_lock, cache_root, resolve_path
from bapjax.world import grid, jsonl
from bapjax.world.grid import PLACE, REMOVE, Action, apply_sequence, as_blocks
from bapjax.world.items import SPLITS, BapItem, BuilderPose, ChatTurn

# Bump when the itemizer's output changes, so stale caches are not reused.
ITEMIZER_VERSION = 5
_CHAT_LINE = re.compile(r"^<(\w+)>\s?(.*)$", re.DOTALL)
_TARGET_IN_GAME = re.compile(r"(?:^|-)(C\d+)(?:-|$)")


class CorpusError(UserError):
    """A corpus file is missing or malformed; the message names the file."""


@dataclasses.dataclass(frozen=True)
class WorldState:
    blocks: dict  # {(x, y, z): color}; may hold cells outside the build region
    chat: tuple[str, ...]
    pose: BuilderPose


@dataclasses.dataclass(frozen=True)
class Game:
    game_id: str  # the game directory name
    target_id: str  # "C<n>"
    path: Path
    world_states: tuple[WorldState, ...]  # states with a null BuilderPosition already dropped


# --------------------------------------------------------------------------------------------
# Locating and unpacking the corpus


def _unpack_archive(archive: Path) -> Path:
    """Unpack once into the cache; returns the directory holding ``data/``. An unpacked entry
    whose files no longer match its completion record is moved aside and unpacked again."""
    target = cache_root() / f"corpus-{paths.file_sha256(archive)[:16]}"
    if _unpacked_problem(target) is None:
        return target
    paths.writable_cache()
    with build_lock(target):
        problem = _unpacked_problem(target)  # another process may have unpacked it while we waited
        if problem is None:
            return target
        if problem is not _ABSENT:
            paths.set_aside(target, problem, f"the unpacked corpus archive {archive.name}")
        for stale in target.parent.glob(f".unpack-{target.name}-*"):  # left by a killed unpack
            shutil.rmtree(stale, ignore_errors=True)
        return _unpack_locked(archive, target)


_ABSENT = "not unpacked"
_LEGACY_COMPLETE = ".complete"  # the marker of an older bapjax's unpack: complete, no file record


def _unpacked_problem(target: Path) -> str | None:
    """None when `target` is a finished unpack that still holds what it recorded."""
    if paths.is_sealed(target):
        return paths.seal_problem(target)
    return None if (target / _LEGACY_COMPLETE).exists() else _ABSENT


def _unpack_locked(archive: Path, target: Path) -> Path:
    logging.info("unpacking %s into %s (once)", archive, target)
    staging = Path(tempfile.mkdtemp(prefix=f".unpack-{target.name}-", dir=target.parent))
    try:
        with tarfile.open(archive, "r:*") as tar:
            tar.extractall(staging, filter="data")
        roots = [p.parents[2] for p in staging.rglob("data/logs/splits.json")]
        if len(roots) != 1:
            raise CorpusError(f"{archive}: expected one data/logs/splits.json inside, found {len(roots)}")
        paths.seal(roots[0], archive=str(archive))
        if target.exists():
            shutil.rmtree(target)
        roots[0].rename(target)
    except (tarfile.TarError, OSError, EOFError) as err:
        full = paths.no_space_error(err)
        if full is not None:
            raise paths.NoSpaceError(paths.describe_no_space(full, target, f"the unpacked corpus archive {archive.name}")) from None
        raise CorpusError(f"{archive}: cannot unpack the corpus archive: {err}") from err
    finally:
        if staging.exists():
            shutil.rmtree(staging, ignore_errors=True)
    return target


def resolve_corpus(path: str | os.PathLike) -> Path:
    """The directory that holds ``data/logs/splits.json`` for any accepted form of PATH
    (``paths.MDC`` is the MDC wherever ``paths.mdc_path`` finds it)."""
    given = path
    path = resolve_path(path)
    if not path.exists():
        raise CorpusError(f"corpus path {given} does not exist")
    if path.is_file():
        if path.name.endswith((".tar.xz", ".tar.gz", ".tgz", ".tar")):
            return _unpack_archive(path)
        raise CorpusError(f"corpus path {path} is a file but not a .tar.xz archive")
    if (path / "data" / "logs" / "splits.json").exists():
        return path
    if (path / "logs" / "splits.json").exists() and path.name == "data":
        return path.parent
    archives = sorted(path.glob("*.tar.xz"))
    if len(archives) == 1:
        return _unpack_archive(archives[0])
    raise CorpusError(
        f"corpus path {path} holds neither data/logs/splits.json nor exactly one .tar.xz archive"
    )


def corpus_dataset_name(root: Path) -> str:
    """The data set tag: 'mc' for the MDC, or the name a simulator wrote in data/dataset.json."""
    meta = root / "data" / "dataset.json"
    if meta.exists():
        try:
            return str(json.loads(meta.read_text())["name"])
        except (json.JSONDecodeError, KeyError) as err:
            raise CorpusError(f"{meta}: expected JSON with a 'name' field ({err})") from err
    return "mc"


def read_splits(root: Path) -> dict[str, str]:
    """{target id: split} from data/logs/splits.json."""
    path = root / "data" / "logs" / "splits.json"
    try:
        splits = json.loads(path.read_text())
    except json.JSONDecodeError as err:
        raise CorpusError(f"{path}: not valid JSON ({err})") from err
    except OSError as err:
        raise CorpusError(f"{path}: cannot read the splits file ({err})") from err
    if not isinstance(splits, dict):
        raise CorpusError(f"{path}: expected an object {{split: [target ids]}}")
    target_split = {}
    for split, targets in splits.items():
        for target in targets:
            if target in target_split:
                raise CorpusError(f"{path}: target {target} is in both {target_split[target]} and {split}")
            target_split[target] = split
    return target_split


def game_files(root: Path) -> list[Path]:
    return sorted((root / "data" / "logs").glob("*/logs/*/postprocessed-observations.json"))


def target_of_game(game_id: str) -> str:
    match = _TARGET_IN_GAME.search(game_id)
    if not match:
        raise CorpusError(f"game directory {game_id} names no target C<number>")
    return match.group(1)


# --------------------------------------------------------------------------------------------
# Reading one game


def _parse_pose(raw, where: str) -> BuilderPose | None:
    if raw is None:
        return None
    try:
        return BuilderPose(*(float(raw[k]) for k in ("X", "Y", "Z", "Yaw", "Pitch")))
    except (KeyError, TypeError, ValueError) as err:
        raise CorpusError(f"{where}: BuilderPosition lacks X, Y, Z, Yaw or Pitch ({err!r})") from err


def _parse_blocks(raw, where: str) -> dict:
    blocks = {}
    if not isinstance(raw, list):
        raise CorpusError(f"{where}: BlocksInGrid is not a list")
    for n, block in enumerate(raw):
        try:
            coords = block["AbsoluteCoordinates"]
            cell = (int(coords["X"]), int(coords["Y"]), int(coords["Z"]))
            color = grid.color_id(block["Type"])
        except (KeyError, TypeError) as err:
            raise CorpusError(f"{where}: BlocksInGrid[{n}] lacks {err}") from err
        except ValueError as err:
            raise CorpusError(f"{where}: BlocksInGrid[{n}]: {err}") from err
        blocks[cell] = color
    return blocks


def read_game(path: str | os.PathLike) -> Game:
    """Parse one postprocessed-observations.json; errors name the file and the state."""
    path = Path(path)
    game_id = path.parent.name
    try:
        raw = orjson.loads(path.read_bytes())
    except orjson.JSONDecodeError as err:
        raise CorpusError(f"{path}: not valid JSON ({err})") from err
    except OSError as err:
        raise CorpusError(f"{path}: cannot read the game log ({err})") from err
    if not isinstance(raw, dict) or not isinstance(raw.get("WorldStates"), list):
        raise CorpusError(f"{path}: missing key 'WorldStates' (a list of world states)")
    states = []
    for n, state in enumerate(raw["WorldStates"]):
        where = f"{path}: WorldStates[{n}]"
        if not isinstance(state, dict):
            raise CorpusError(f"{where} is not an object")
        for key in ("BuilderPosition", "ChatHistory", "BlocksInGrid"):
            if key not in state:
                raise CorpusError(f"{where}: missing key {key!r}")
        pose = _parse_pose(state["BuilderPosition"], where)
        if pose is None:
            continue
        if not isinstance(state["ChatHistory"], list):
            raise CorpusError(f"{where}: ChatHistory is not a list")
        states.append(WorldState(_parse_blocks(state["BlocksInGrid"], where),
                                 tuple(str(line) for line in state["ChatHistory"]), pose))
    return Game(game_id, target_of_game(game_id), path, tuple(states))


# --------------------------------------------------------------------------------------------
# Events and items


def parse_chat_line(line: str) -> ChatTurn:
    match = _CHAT_LINE.match(line)
    if match:
        return ChatTurn(match.group(1), match.group(2))
    return ChatTurn("", line)


def order_placements(structure: dict, placements: Sequence[Action]) -> list[Action]:
    """Order one transition's placements so each is supported where possible, lower y first.

    Greedy: repeatedly take the first placement in (y, x, z, color) order that is on the ground
    or face-adjacent to a block; if none is, take the first one as recorded (kept, never dropped).
    """
    remaining = sorted(placements, key=lambda a: (a.y, a.x, a.z, a.color))
    walk = grid.StructureWalk(structure)
    while remaining:
        pick = 0
        for n, action in enumerate(remaining):
            if grid.supported(walk.structure, *action.cell):
                pick = n
                break
        walk.apply(remaining.pop(pick))
    return walk.applied


def transition_actions(before: dict, after: dict) -> list[Action]:
    """One logged transition as actions: placements (ordered for support), then removals.

    A cell whose color changed is a removal of the old block then a placement of the new one;
    that removal goes first so the placement is into an empty cell.
    """
    recolored = sorted(c for c in after if c in before and before[c] != after[c])
    first = [Action(REMOVE, before[c], *c) for c in recolored]
    placed = [Action(PLACE, color, *cell) for cell, color in after.items()
              if cell not in before]
    placed += [Action(PLACE, after[c], *c) for c in recolored]
    removed = sorted(
        (Action(REMOVE, color, *cell) for cell, color in before.items() if cell not in after),
        key=lambda a: (a.x, a.y, a.z, a.color),
    )
    start = apply_sequence(before, first)
    return first + order_placements(start, placed) + removed


def game_timeline(game: Game) -> list[tuple[object, int]]:
    """Events (Action or ChatTurn, index of the world state that produced it), in order.

    As the original BAP loader does, the walk starts at the second kept world state: it
    contributes its whole chat history, with the blocks already on its grid placed first
    (normally none; a handful of MDC games have one). Each later state contributes its
    transition's actions, then its new chat lines. This reproduces the paper's item counts.
    """
    events: list[tuple[object, int]] = []
    if len(game.world_states) < 2:
        return events
    first = game.world_states[1]
    events += [(a, 1) for a in transition_actions({}, first.blocks)]
    events += [(parse_chat_line(line), 1) for line in first.chat]
    for n in range(2, len(game.world_states)):
        before, after = game.world_states[n - 1], game.world_states[n]
        events += [(a, n) for a in transition_actions(before.blocks, after.blocks)]
        events += [(parse_chat_line(line), n) for line in after.chat[len(before.chat):]]
    return events


def _out_of_region_count(structure: dict) -> int:
    return sum(1 for cell in structure if not grid.in_region(*cell))


def itemize_game(game: Game, split: str, dataset: str = "mc") -> tuple[list[BapItem], int]:
    """BAP items of one game, and how many were skipped for blocks outside the build region."""
    items, skipped, _ = _itemize(game, split, dataset)
    return items, skipped


def next_item(game: Game, split: str, dataset: str = "mc") -> BapItem | None:
    """The item the Builder's next actions would make, if they were logged after the game's
    last event: its history, structure and pose as `itemize_game` will give them, its id the one
    it will get; no reference actions yet (``bapjax.play`` decodes it). None when the structure
    has a block outside the build region (`itemize_game` would skip the item)."""
    items, _, (history, structure, pose) = _itemize(game, split, dataset)
    if _out_of_region_count(structure):
        return None
    blocks = as_blocks(structure)
    return BapItem(item_id=f"{game.game_id}:{len(items)}", game_id=game.game_id, target_id=game.target_id,
                   split=split, history=history, prev_structure=blocks, reference_actions=(),
                   next_structure=blocks, builder_pose=pose, dataset=dataset)


def _itemize(game: Game, split: str, dataset: str):
    """(items, skipped, (history, structure, pose) after the game's last event)."""
    events = game_timeline(game)
    items: list[BapItem] = []
    skipped = 0
    structure: dict = {}
    history: list = []
    pose = game.world_states[min(1, len(game.world_states) - 1)].pose if game.world_states else BuilderPose(0, 0, 0, 0, 0)
    n = 0
    while n < len(events):
        event, state_index = events[n]
        if isinstance(event, ChatTurn):
            history.append(event)
            pose = game.world_states[state_index].pose
            n += 1
            continue
        # A maximal run of action events starting here.
        end = n
        while end < len(events) and isinstance(events[end][0], Action):
            end += 1
        run = [e for e, _ in events[n:end]]
        before = structure
        outside = _out_of_region_count(before) > 0
        for action in run:
            structure = apply_sequence(structure, [action])
            outside = outside or _out_of_region_count(structure) > 0
        if outside:
            skipped += 1
        else:
            items.append(BapItem(
                item_id=f"{game.game_id}:{len(items)}",
                game_id=game.game_id,
                target_id=game.target_id,
                split=split,
                history=tuple(history),
                prev_structure=as_blocks(before),
                reference_actions=tuple(run),
                next_structure=as_blocks(structure),
                builder_pose=pose,
                dataset=dataset,
            ))
        history.extend(run)
        n = end
    return items, skipped, (tuple(history), structure, pose)


# --------------------------------------------------------------------------------------------
# The whole corpus, cached


def _corpus_fingerprint(root: Path, files: Sequence[Path]) -> str:
    digest = hashlib.sha256(f"v{ITEMIZER_VERSION}".encode())
    for path in [root / "data" / "logs" / "splits.json", *files]:
        st = path.stat()
        digest.update(f"{path.relative_to(root)}:{st.st_size}:{st.st_mtime_ns}\n".encode())
    meta = root / "data" / "dataset.json"
    if meta.exists():
        digest.update(meta.read_bytes())
    return digest.hexdigest()[:20]


def _itemize_file(args):
    path, split, dataset = args
    return itemize_game(read_game(path), split, dataset)


def itemize_corpus(root: Path, processes: int = 1, progress: bool = False) -> ItemizedCorpus:
    """Parse and itemize every game whose target is in splits.json (no cache)."""
    target_split = read_splits(root)
    dataset = corpus_dataset_name(root)
    files = game_files(root)
    if not files:
        raise CorpusError(f"{root}: no game logs under data/logs/*/logs/*/postprocessed-observations.json")
    jobs = []
    for path in files:
        target = target_of_game(path.parent.name)
        if target in target_split:
            jobs.append((path, target_split[target], dataset))
    items = {s: [] for s in dict.fromkeys([*SPLITS, *sorted(set(target_split.values()))])}
    skipped = {s: 0 for s in items}
    games = {s: 0 for s in items}
    rule = cli.Progress(len(jobs), "games")
    if processes > 1:
        with multiprocessing.get_context("spawn").Pool(processes) as pool:
            results = pool.imap(_itemize_file, jobs, chunksize=4)
            results = list(_with_progress(results, rule, progress))
    else:
        results = list(_with_progress(map(_itemize_file, jobs), rule, progress))
    for (path, split, _), (game_items, game_skipped) in zip(jobs, results):
        items[split].extend(game_items)
        skipped[split] += game_skipped
        games[split] += 1
    items = {s: v for s, v in items.items() if v or s in SPLITS}
    return ItemizedCorpus(root, dataset, items, skipped, games)


def _with_progress(results: Iterable, rule: cli.Progress, progress: bool):
    for n, result in enumerate(results, 1):
        if progress:
            rule.show(n, "itemize")
        yield result


def load_corpus(path: str | os.PathLike, use_cache: bool = True, processes: int | None = None,
                progress: bool = False, _heal: bool = True) -> ItemizedCorpus:
    """Itemized corpus from any accepted PATH, through the on-disk cache. A damaged item cache
    file, or an unpacked archive whose games no longer parse, is moved aside (one warning) and
    rebuilt; a corpus the user gave is never touched."""
    root = resolve_corpus(path)
    files = game_files(root)
    cache_file = cache_root() / "items" / f"{_corpus_fingerprint(root, files)}.pkl"
    if use_cache and cache_file.exists():
        try:
            with open(cache_file, "rb") as f:
                corpus = pickle.load(f)
            if not isinstance(corpus, ItemizedCorpus):
                raise TypeError(f"holds a {type(corpus).__name__}, not an itemized corpus")
            corpus.root = root
            return corpus
        except Exception as err:  # noqa: BLE001 (a damaged pickle raises many types; it is rebuilt)
            paths.set_aside(cache_file, f"unreadable: {type(err).__name__}: {err}", "the item cache")
    if use_cache:
        paths.writable_cache("items")  # before the itemizing, not after it
    if processes is None:
        processes = 1  # measured: JSON parsing dominates and shipping items back costs more
    try:
        corpus = itemize_corpus(root, processes=processes, progress=progress)
    except CorpusError as err:
        if not (_heal and _is_unpacked_entry(root) and str(root) in str(err)):
            raise  # a mistake in a corpus the user gave stands
        with build_lock(root):
            if root.exists():
                paths.set_aside(root, str(err).replace(f"{root}/", ""), "the unpacked corpus archive")
        return load_corpus(path, use_cache, processes, progress, _heal=False)
    if use_cache:
        cache_file.parent.mkdir(parents=True, exist_ok=True)

        def dump(partial: Path) -> None:
            with open(partial, "wb") as f:
                pickle.dump(corpus, f, protocol=pickle.HIGHEST_PROTOCOL)

        paths.write_atomically(cache_file, dump, "the item cache")
    return corpus


def _is_unpacked_entry(root: Path) -> bool:
    """Whether `root` is an archive this module unpacked into the cache (so it may be healed)."""
    return root.name.startswith("corpus-") and paths.in_cache(root) and root.parent.resolve() == cache_root().resolve()


def read_gold_xml(path: str | os.PathLike) -> dict:
    """{cell: color} from a gold configuration file of <DrawBlock type=... x= y= z=/> elements
    (x and z offset by +100), with or without an enclosing root element (the MDC files have
    none, which a strict XML parser rejects)."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as err:
        raise CorpusError(f"{path}: cannot read the gold configuration ({err})") from err
    text = "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("<?xml"))
    try:
        root = ET.fromstring(f"<root>{text}</root>")
    except ET.ParseError as err:
        raise CorpusError(f"{path}: not a gold configuration ({err})") from err
    blocks = {}
    for n, node in enumerate(root.iter("DrawBlock")):
        try:
            cell = (int(node.get("x")) - 100, int(node.get("y")), int(node.get("z")) - 100)
            blocks[cell] = grid.color_id(node.get("type"))
        except (TypeError, ValueError) as err:
            raise CorpusError(f"{path}: DrawBlock {n}: {err}") from err
    return blocks


def load_gold_structure(root: Path, target_id: str) -> dict:
    """Target structure {(x, y, z): color} of C<n> from data/gold-configurations/C<n>.xml."""
    return read_gold_xml(Path(root) / "data" / "gold-configurations" / f"{target_id}.xml")


# --------------------------------------------------------------------------------------------
# CLI

FLAGS = flags.FLAGS


def define_flags() -> None:
    """Flags exist only when this module is the program, so other CLIs can import it freely."""
    cli.define_item_source_flags("corpus", "split")  # stats/export: --corpus defaults to the MDC
    cli.flag("string", "out", None, "export: output JSONL file ('-' for stdout); fetch: the folder to create.")
    cli.flag("bool", "no_cache", False, "Reparse every game instead of using the item cache.")
    cli.flag("bool", "describe", False, "stats: also what each split's items are made of (actions per item, "
             "board sizes, instruction lengths; bapjax.corpus.itemized.describe), as JSON.")
    cli.flag("string", "url", None, "fetch: the archive to read (default: the pinned public one; file:// works).")
    cli.flag("string", "sha256", None, "fetch: also require this sha256 of the whole download.")


def fetch_main() -> int:
    if not FLAGS.out:
        raise UserError("fetch needs --out DIR (the folder to create)")
    done = fetch.fetch(FLAGS.out, FLAGS.url or fetch.DEFAULT_URL, FLAGS.sha256)
    print(f"fetched the MDC into {done['out']}: {done['files']} files, each matching bapjax's pinned sha256 "
          f"(download sha256 {done['sha256']}); use it with `export {paths.MDC_ENV}={done['out']}` "
          f"or --corpus {done['out']}")
    print(json.dumps(done))
    return 0


def main(argv: Sequence[str]) -> int:
    if len(argv) != 2 or argv[1] not in ("stats", "export", "fetch"):
        raise UserError("usage: python -m bapjax.corpus.mdc {stats|export|fetch} [--corpus PATH] ...")
    if argv[1] == "fetch":
        return fetch_main()
    if argv[1] == "export":
        cli.require_flags("split", "out", of=" by export")
        paths.check_output_file(FLAGS.out, "--out")
    corpus_path = paths.mdc_path(FLAGS.corpus)
    corpus = load_corpus(corpus_path, use_cache=not FLAGS.no_cache, progress=True)
    if argv[1] == "stats":
        stats = corpus.stats()
        for split, s in stats.items():
            print(f"{split:>6}: {s['items']:5d} items ({s['empty_board']} empty-board) from "
                  f"{s['games']} games, mean {s['mean_actions']:.2f} actions, "
                  f"{s['skipped_out_of_region']} skipped (blocks outside the build region)")
        print(json.dumps(stats))
        if FLAGS.describe:
            print(json.dumps({split: describe(items) for split, items in corpus.items.items()}))
        return 0
    if FLAGS.split not in corpus.items:
        raise UserError(f"--split {FLAGS.split}: not a split of {corpus_path} ({', '.join(corpus.items)})")
    items = corpus.split(FLAGS.split)
    if FLAGS.out == "-":
        for item in items:
            sys.stdout.write(json.dumps(item.to_json()) + "\n")
    else:
        jsonl.write_items(FLAGS.out, items)
        print(f"wrote {len(items)} {FLAGS.split} items to {FLAGS.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    cli.run(main, define_flags)
