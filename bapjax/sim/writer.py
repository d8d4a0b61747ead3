"""Write simulated games as a corpus in the MDC layout, so ``bapjax.corpus.mdc`` reads it unchanged.

Layout (one directory per split "day"):

    <out>/data/dataset.json                                          {"name": "r"|"bs"|"ss", ...}
    <out>/data/logs/splits.json                                      {"train": [C...], "val": [...], "test": [...]}
    <out>/data/logs/sim-<split>/logs/<dataset>-B0-A0-C<id>-<n>/postprocessed-observations.json
    <out>/data/logs/sim-<split>/logs/<dataset>-B0-A0-C<id>-<n>/instructions.json   (grounded records; the reader ignores it)
    <out>/data/gold-configurations/C<id>.xml                          (x, z offset by +100, as the MDC)

The gold files hold the MDC's ``<DrawBlock .../>`` lines inside one ``<GoldConfiguration>`` root
element (the MDC's own files have no root element, which XML parsers reject).

World states follow the itemizer's rule: state 0 is the empty world with the chat
["<Builder> Mission has started."]; then one state per chat line and one state per Builder
action (exactly one block changes), each with the Builder's pose of its segment.  So every
instruction (with its clarification turns) followed by the Builder's actions is one BAP item,
and the item's pose is the pose the instruction was written for.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import orjson

from bapjax.sim.dialogue import SimGame
from bapjax.world import grid

START_LINE = "<Builder> Mission has started."
GOLD_OFFSET = 100


def pose_json(pose) -> dict:
    return {"X": float(pose.x), "Y": float(pose.y), "Z": float(pose.z), "Yaw": float(pose.yaw),
            "Pitch": float(pose.pitch)}


_BLOCK_TYPES = ("",) + tuple(grid.mdc_block_type(c) for c in range(1, grid.NUM_COLORS + 1))


def blocks_json(structure: dict) -> list:
    return [{"AbsoluteCoordinates": {"X": x, "Y": y, "Z": z}, "Type": _BLOCK_TYPES[color]}
            for (x, y, z), color in sorted(structure.items())]


def inventory_json(structure: dict) -> list:
    counts = [0] * (grid.NUM_COLORS + 1)
    for color in structure.values():
        counts[color] += 1
    return [{"Index": c - 1, "Type": _BLOCK_TYPES[c], "Quantity": grid.INVENTORY_PER_COLOR - counts[c]}
            for c in range(1, grid.NUM_COLORS + 1)]


def world_state(pose, chat: list[str], blocks: list, inventory: list, timestamp: str) -> dict:
    """One entry of a log's WorldStates: the pose, the whole chat so far, the blocks (`blocks_json`),
    the inventory (`inventory_json`) and the time (also what ``bapjax.play`` writes)."""
    return {"BuilderPosition": pose_json(pose), "ChatHistory": list(chat), "BlocksInGrid": blocks,
            "BuilderInventory": inventory, "Timestamp": timestamp}


def _timestamp(second: int) -> str:
    minutes, seconds = divmod(second, 60)
    hours, minutes = divmod(minutes, 60)
    return f"2026-01-01 {hours % 24:02d}:{minutes:02d}:{seconds:02d}"


def game_world_states(game: SimGame) -> list[dict]:
    """The WorldStates list of one game (see the module docstring for the rule)."""
    states = []
    chat: list[str] = [START_LINE]
    structure: dict = {}
    clock = 0

    cached = {"structure": None, "blocks": None, "inventory": None}

    def emit(pose):
        nonlocal clock
        if cached["structure"] is not structure:  # the lists are shared until the world changes
            cached.update(structure=structure, blocks=blocks_json(structure),
                          inventory=inventory_json(structure))
        states.append(world_state(pose, chat, cached["blocks"], cached["inventory"], _timestamp(clock)))
        clock += 3

    emit(game.start_pose)
    for speaker, text in game.opening:
        chat.append(f"<{speaker}> {text}")
        emit(game.start_pose)
    pose = game.start_pose
    for n, segment in enumerate(game.segments):
        if not segment.actions:
            raise ValueError(f"game segment {n} has no Builder actions; it would not be a BAP item")
        pose = segment.pose
        for speaker, text in segment.lines:
            chat.append(f"<{speaker}> {' '.join(text.split())}")
            emit(pose)
        for action in segment.actions:
            structure = grid.apply_to_structure(structure, action)
            emit(pose)
        for speaker, text in segment.after:
            chat.append(f"<{speaker}> {' '.join(text.split())}")
            emit(pose)
    for speaker, text in game.closing:
        chat.append(f"<{speaker}> {text}")
        emit(pose)
    return states


def gold_xml(structure: dict) -> str:
    lines = [f'<DrawBlock type="cwcmod:{grid.mdc_block_type(color)}" x="{x + GOLD_OFFSET}" y="{y}" '
             f'z="{z + GOLD_OFFSET}"/>' for (x, y, z), color in sorted(structure.items(), key=lambda kv: (kv[0][1], kv[0][0], kv[0][2]))]
    return "<GoldConfiguration>\n" + "".join(line + "\n" for line in lines) + "</GoldConfiguration>\n"


def game_dir_name(dataset: str, target_id: str, game_index: int) -> str:
    """Game directory name; the data set prefix keeps item ids unique across mixed sets."""
    return f"{dataset}-B0-A0-{target_id}-{game_index}"


def render_game(game: SimGame, target_id: str) -> dict[str, bytes]:
    """The three files of one game as bytes: the log, the grounded records, the gold XML."""
    return {
        "observations": orjson.dumps({"WorldStates": game_world_states(game), "NumFixedViewers": 0,
                                      "TimeElapsed": 0, "Simulator": game.dataset},
                                     option=orjson.OPT_SERIALIZE_NUMPY),
        "instructions": orjson.dumps({"dataset": game.dataset, "target_id": target_id, "info": game.info,
                                      "records": [s.record for s in game.segments]},
                                     option=orjson.OPT_SERIALIZE_NUMPY),
        "gold": gold_xml(game.target).encode("utf-8"),
        "dataset": game.dataset,
    }


def write_rendered(root: Path, split: str, target_id: str, game_index: int, files: dict[str, bytes]) -> Path:
    """Write a rendered game under ``root``; returns its game directory."""
    root = Path(root)
    game_dir = root / "data" / "logs" / f"sim-{split}" / "logs" / game_dir_name(
        files["dataset"], target_id, game_index)
    game_dir.mkdir(parents=True, exist_ok=True)
    (game_dir / "postprocessed-observations.json").write_bytes(files["observations"])
    (game_dir / "instructions.json").write_bytes(files["instructions"])
    gold_dir = root / "data" / "gold-configurations"
    gold_dir.mkdir(parents=True, exist_ok=True)
    (gold_dir / f"{target_id}.xml").write_bytes(files["gold"])
    return game_dir


def write_game(root: Path, split: str, target_id: str, game_index: int, game: SimGame) -> Path:
    """Write one game's log, its grounded records and its gold configuration; returns the game dir."""
    return write_rendered(root, split, target_id, game_index, render_game(game, target_id))


def write_corpus_meta(root: Path, dataset: str, splits: dict[str, list[str]], meta: dict) -> None:
    """splits.json and dataset.json, written last (after every game) so a half-written corpus
    is not mistaken for a complete one."""
    logs = Path(root) / "data" / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    tmp = logs / f".splits.json.tmp{os.getpid()}"
    tmp.write_text(json.dumps(splits))
    tmp.replace(logs / "splits.json")
    (Path(root) / "data" / "dataset.json").write_text(json.dumps({"name": dataset, **meta}, indent=1))


def read_records(game_dir: Path) -> dict:
    """The grounded instruction records written beside a game log."""
    with open(Path(game_dir) / "instructions.json", encoding="utf-8") as f:
        return json.load(f)
