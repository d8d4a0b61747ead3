"""Play the Architect: instruct a trained Builder in the browser, watch it build, keep the game
(the command: `python -m bapjax.play`).

A local web server (the standard library's ``http.server``, one thread per request; see
docs/play.md for why) serves one page: the build region with the structure and the Builder (walk
and turn it), a chat box for the Architect's line. On send, the server appends the line to the
game's log, builds the BAP item from the log with the corpus reader itself
(`bapjax.corpus.mdc.next_item`: the history, structure and pose the itemizer will give the item),
decodes it with the run's own settings (`bapjax.decoding.runs.RunDecoder`, loaded and compiled once at
start) and returns the predicted actions; the person accepts them, undoes the turn, or fixes the
structure by hand (place or remove one block) before the next instruction.

A game is written from its first instruction or hand edit on, each change as it happens (a page
merely opened makes a game in memory only, so the folder holds no empty games), in the MDC layout
the corpus reader itemizes::

    <out>/data/dataset.json                      {"name": "play"}
    <out>/data/logs/splits.json                  {"test": ["C1", "C2", ...]}  (--games_split; one target per game)
    <out>/data/logs/play-<date>/logs/<game>/postprocessed-observations.json
    <out>/data/logs/play-<date>/logs/<game>/predictions.jsonl    the model's predictions of the game's items
    <out>/data/logs/play-<date>/logs/<game>/play.json            the run, its decoding settings, per-turn record

One world state per event (as the simulators write games): state 0 is the start, then one state
per Architect line and one per Builder action (exactly one block changes), each with the
Builder's pose. So each instruction followed by the accepted actions and hand fixes is one item,
with those actions, in order, as its reference; ``python -m bapjax.corpus.mdc stats --corpus
<out>``, ``bapjax.evaluate`` (with the games' predictions.jsonl) and ``bapjax.report`` read the folder,
and it joins training as ``config.data.sources.<name>.corpus``.

HTTP API (docs/play.md has every route, field and error, and a curl session; JSON bodies; every
mistake is a 4xx with ``{"error": "<one line>"}`` and changes nothing): ``GET /`` the page,
``GET /assets/<name>`` its files (a fixed list), ``GET /api/info``, ``POST /api/games`` (a new
game), ``GET /api/games/<id>``, and ``POST /api/games/<id>/<verb>`` for ``instruction`` {version,
text, pose}, ``accept`` {version, pose}, ``undo`` {version} and ``edit`` {version, pose, type, x,
y, z[, color]}. ``version`` is the game's version the page last saw: a request made on an older
view of the game (another tab) is refused (409). Actions in answers are ``{"type", "color", "x",
"y", "z"}`` objects exactly as a predictions JSONL line holds them (`jsonl.action_records`), blocks
``{"x", "y", "z", "color"}`` as an items file's structures (`grid.block_to_dict`).
"""

from __future__ import annotations

import dataclasses
import datetime
import http.server
import json
import math
import re
import sys
import threading
import time
import urllib.parse
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from bapjax import paths
from bapjax.corpus import mdc
from bapjax.errors import UserError
from bapjax.pages.report_page import ASSETS as REPORT_ASSETS
from bapjax.pages.report_page import THREE_VERSION
from bapjax.sim import writer
from bapjax.world import grid, jsonl
from bapjax.world.grid import Action
from bapjax.world.items import SPLITS, BuilderPose

DATASET = "play"  # data/dataset.json's name: the `dataset` of the played games' items
START_POSE = BuilderPose(0.0, 1.0, -7.0, 0.0, 30.0)  # in front of the region, facing +z, looking down
MAX_INSTRUCTION_CHARS = 500  # MDC Architect lines: 99.9% are shorter than 300 characters
MAX_BODY_BYTES = 16 * 1024  # a request body; the largest valid one is well under 1 KiB
MAX_EVENTS_PER_GAME = 3000  # world states in one game (the longest MDC game has ~1,000)
MAX_GAMES = 500  # games one server process holds (a page makes one per tab)
POSE_LIMITS = {"x": (-20.0, 20.0), "y": (1.0, 20.0), "z": (-20.0, 20.0), "yaw": (-360.0, 360.0),
               "pitch": (-90.0, 90.0)}
ASSETS = Path(__file__).resolve().parent / "play_assets"
# URL name -> file: the only files the server sends (no path from a request reaches the disk).
ASSET_FILES = {
    "play.js": ASSETS / "play.js",
    "play.css": ASSETS / "play.css",
    "report.css": REPORT_ASSETS / "report.css",
    "region3d.js": REPORT_ASSETS / "region3d.js",
    "three.js": REPORT_ASSETS / f"three-{THREE_VERSION}.min.js",
    "three-LICENSE.txt": REPORT_ASSETS / "three-LICENSE.txt",
}
CONTENT_TYPES = {".js": "text/javascript; charset=utf-8", ".css": "text/css; charset=utf-8",
                 ".txt": "text/plain; charset=utf-8"}
_GAME_ID = re.compile(r"^play-C\d+-\d{8}-\d{6}$")


class RequestError(Exception):
    """A request the server refuses: HTTP `status` and a one-line `reason` (nothing changed)."""

    def __init__(self, status: int, reason: str):
        super().__init__(reason)
        self.status = status
        self.reason = reason


class PlayError(UserError):
    """A flag or folder the server cannot start with; the message names it."""


# --------------------------------------------------------------------------------------------
# Request values


def _fields(body: Mapping, required: Sequence[str], optional: Sequence[str] = ()) -> None:
    missing = [f for f in required if f not in body]
    if missing:
        raise RequestError(400, f"missing field(s) {', '.join(map(repr, missing))}")
    unknown = sorted(set(body) - set(required) - set(optional))
    if unknown:
        raise RequestError(400, f"unexpected field(s) {', '.join(map(repr, unknown))}")


def parse_pose(value: Any) -> BuilderPose:
    """A pose {x, y, z, yaw, pitch} within `POSE_LIMITS`."""
    if not isinstance(value, Mapping):
        raise RequestError(400, "field 'pose' must be an object {x, y, z, yaw, pitch}")
    numbers = []
    for name, (low, high) in POSE_LIMITS.items():
        v = value.get(name)
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
            raise RequestError(400, f"field 'pose.{name}' is {v!r}; expected a number")
        if not low <= v <= high:
            raise RequestError(400, f"field 'pose.{name}' is {v}; expected {low:g} to {high:g}")
        numbers.append(float(v))
    unknown = sorted(set(value) - set(POSE_LIMITS))
    if unknown:
        raise RequestError(400, f"field 'pose' has unexpected key(s) {', '.join(map(repr, unknown))}")
    return BuilderPose(*numbers)


def parse_instruction(value: Any) -> str:
    """The Architect's line, whitespace runs (newlines too) made single spaces."""
    if not isinstance(value, str):
        raise RequestError(400, "field 'text' must be a string")
    text = " ".join(value.split())
    if not text:
        raise RequestError(400, "the instruction is empty")
    if len(text) > MAX_INSTRUCTION_CHARS:
        raise RequestError(400, f"the instruction has {len(text)} characters; at most {MAX_INSTRUCTION_CHARS}")
    if any(ord(c) < 32 for c in text):
        raise RequestError(400, "the instruction holds control characters")
    return text


def parse_edit(body: Mapping, structure: Mapping) -> Action:
    """A hand edit {type, x, y, z[, color]} that is feasible on `structure` (a removal takes the
    color of the block it removes)."""
    record = {k: body[k] for k in ("type", "x", "y", "z")}
    record["color"] = body.get("color")
    if record["color"] is None:
        if body["type"] == "place":
            raise RequestError(400, "edit: a placement needs field 'color'")
        cell = tuple(body[k] for k in ("x", "y", "z"))
        known = all(type(v) is int for v in cell) and cell in structure
        record["color"] = grid.color_name(structure[cell]) if known else grid.COLORS[0]  # else refused below
    try:
        action = grid.action_from_dict(record, "edit")
    except ValueError as err:
        raise RequestError(400, str(err)) from None
    reason = grid.infeasibility_reason(structure, action)
    if reason:
        raise RequestError(400, f"edit: {reason}")
    return action


# --------------------------------------------------------------------------------------------
# One game, written as it goes


@dataclasses.dataclass
class Turn:
    """One Architect instruction: the world state it was written in, the item it opened, what the
    model predicted for it."""

    state: int  # index of the instruction's world state
    item_id: str
    predicted: list[Action]
    decode_ms: float


def _now() -> str:
    return datetime.datetime.now().strftime("%Y-%m-%d %H:%M:%S")


class PlayedGame:
    """A game's world states (as written), its pending prediction and its turns; every method is
    called with `lock` held (`PlayServer` does). Nothing is on disk until the first `save`, which
    also calls `register` (the server lists the game's target in splits.json)."""

    def __init__(self, game_id: str, target_id: str, directory: Path, split: str, meta: dict,
                 register: Callable[["PlayedGame"], None]):
        self.lock = threading.Lock()
        self.game_id, self.target_id, self.directory, self.split = game_id, target_id, directory, split
        self.meta = meta
        self.register = register
        self.saved = False  # written to disk (from its first instruction or edit on)
        self.item_count = 0
        self.states: list[dict] = []
        self.events: list[list] = []  # per state: ["start"], ["A", text], or ["model"|"hand", *action]
        self.chat: list[str] = [writer.START_LINE]
        self.structure: dict = {}
        self.pose = START_POSE
        self.turns: list[Turn] = []
        self.pending: list[Action] | None = None  # the last turn's prediction, not yet accepted
        self.version = 0
        self.started = time.time()
        self._emit(["start"], START_POSE)

    @property
    def log_path(self) -> Path:
        return self.directory / "postprocessed-observations.json"

    # the log

    def _check_room(self, events: int) -> None:
        if len(self.states) + events > MAX_EVENTS_PER_GAME:
            raise RequestError(409, f"the game would have more than {MAX_EVENTS_PER_GAME} events, the most one game "
                                    "holds; start a new one")

    def _emit(self, event: list, pose: BuilderPose) -> None:
        """One world state: the chat and structure as they are now, after `event`."""
        self.pose = pose
        state = writer.world_state(pose, self.chat, writer.blocks_json(self.structure),
                                   writer.inventory_json(self.structure), _now())
        state["PlayEvent"] = event[0]  # the reader ignores it; says who did what (model or hand)
        self.states.append(state)
        self.events.append(event)

    def _add_action(self, kind: str, action: Action, pose: BuilderPose) -> None:
        self.structure = grid.apply_to_structure(self.structure, action)
        self._emit([kind, *map(int, action)], pose)

    def _truncate(self, length: int) -> None:
        """Back to the first `length` world states (undo)."""
        del self.states[length:]
        del self.events[length:]
        self.chat = list(self.states[-1]["ChatHistory"])
        self.structure = grid.apply_sequence({}, [Action(*e[1:]) for e in self.events if e[0] in ("model", "hand")])
        self.pose = BuilderPose(*(self.states[-1]["BuilderPosition"][k] for k in ("X", "Y", "Z", "Yaw", "Pitch")))
        self.turns = [t for t in self.turns if t.state < length]

    def save(self) -> None:
        """The log, the predictions of the game's items and play.json, each replaced whole; the
        first save also lists the game in splits.json."""
        self.directory.mkdir(parents=True, exist_ok=True)
        log = {"WorldStates": self.states, "NumFixedViewers": 0, "TimeElapsed": round(time.time() - self.started, 1),
               "Player": "bapjax.play"}
        paths.write_atomically(self.log_path, lambda p: p.write_text(json.dumps(log)), f"the game log {self.log_path}")
        items, _ = mdc.itemize_game(self.read(), self.split, DATASET)
        ids = {item.item_id for item in items}
        predicted = {t.item_id: t.predicted for t in self.turns}  # a later turn with the same item replaces
        predicted = {item_id: acts for item_id, acts in predicted.items() if item_id in ids}
        target = self.directory / "predictions.jsonl"
        paths.write_atomically(target, lambda p: jsonl.write_predictions(p, predicted), f"the predictions {target}")
        record = {**self.meta, "game_id": self.game_id, "split": self.split, "items": len(items),
                  "turns": [{"state": t.state, "item_id": t.item_id, "decode_ms": round(t.decode_ms, 1),
                             "predicted": [grid.action_to_dict(a) for a in t.predicted]} for t in self.turns]}
        target = self.directory / "play.json"
        paths.write_atomically(target, lambda p: p.write_text(json.dumps(record, indent=1)), f"{target}")
        self.item_count = len(items)
        if not self.saved:
            self.register(self)
            self.saved = True

    def read(self) -> mdc.Game:
        """The game as the corpus reader reads it from disk."""
        return mdc.read_game(self.log_path)

    def check_version(self, body: Mapping) -> None:
        version = body.get("version")
        if isinstance(version, bool) or not isinstance(version, int):
            raise RequestError(400, "field 'version' must be an integer (the game's version the page shows)")
        if version != self.version:
            raise RequestError(409, f"game {self.game_id} changed elsewhere (version {self.version}, this request "
                                    f"was made on version {version}); reload it")

    def _no_pending(self, what: str) -> None:
        if self.pending is not None:
            raise RequestError(409, f"{what}: accept or undo the Builder's predicted actions first")

    # the moves

    def instruct(self, text: str, pose: BuilderPose, decode) -> Turn:
        """Append the Architect's line, decode the item it opens; on a decoding failure the line is
        taken back (the game is as before)."""
        self._no_pending("instruction")
        self._check_room(1)
        length = len(self.states)
        self.chat.append(f"<Architect> {text}")
        try:
            self._emit(["A", text], pose)
            self.save()
            item = mdc.next_item(self.read(), self.split, DATASET)
            if item is None:  # edits are checked, so the structure never leaves the region
                raise RequestError(500, "the structure has a block outside the build region")
            start = time.perf_counter()
            predicted = list(decode(item))
            turn = Turn(length, item.item_id, predicted, 1000 * (time.perf_counter() - start))
        except BaseException:
            self._truncate(length)
            self.save()
            raise
        self.turns.append(turn)
        self.pending = predicted
        self.version += 1
        self.save()
        return turn

    def accept(self, pose: BuilderPose) -> None:
        if self.pending is None:
            raise RequestError(409, "accept: no predicted actions are waiting")
        self._check_room(len(self.pending))
        for action in self.pending:
            self._add_action("model", action, pose)
        self.pending = None
        self.version += 1
        self.save()

    def undo(self) -> None:
        """Take back the last turn: its instruction, and its predicted, accepted and hand-made
        actions."""
        if not self.turns:
            raise RequestError(409, "undo: no instruction to take back")
        self._truncate(self.turns[-1].state)
        self.pending = None
        self.version += 1
        self.save()

    def edit(self, action: Action, pose: BuilderPose) -> None:
        self._no_pending("edit")
        self._check_room(1)
        self._add_action("hand", action, pose)
        self.version += 1
        self.save()

    def view(self) -> dict:
        """What the page shows: the structure, the pose, the events (chat lines and actions, with
        who made each), the pending prediction (docs/play.md, "The game object")."""
        last = self.turns[-1] if self.turns else None
        return {
            "game_id": self.game_id, "version": self.version, "split": self.split,
            "folder": str(self.directory), "saved": self.saved, "items": self.item_count,
            "structure": [grid.block_to_dict(b) for b in grid.as_blocks(self.structure)],
            "pose": dict(zip(POSE_LIMITS, self.pose)),
            "events": [event_record(e) for e in self.events[1:]],
            "pending": None if self.pending is None else {
                "item_id": last.item_id, "actions": jsonl.action_records(self.pending),
                "decode_ms": round(last.decode_ms, 1)},
            "can_undo": bool(self.turns),
        }


def event_record(event: list) -> dict:
    """An event as the API answers it: ``{"by": "architect", "text"}``, or ``{"by": "model" |
    "hand", "action": {type, color, x, y, z}}`` (an accepted predicted action, a hand edit)."""
    if event[0] == "A":
        return {"by": "architect", "text": event[1]}
    return {"by": event[0], "action": grid.action_to_dict(Action(*event[1:]))}  # as jsonl.action_records


# --------------------------------------------------------------------------------------------
# The server's state: the run, the games, the output folder


def default_games_folder() -> Path:
    """Where games go without --out: ``play-games/`` in the cache root (`paths.cache_root`), one
    place whatever directory the server starts from (a checkpoint's workdir may be read-only)."""
    return paths.cache_root() / "play-games"


def games_folder(out: str | Path | None, split: str) -> Path:
    """The folder games are written to (`out`, else `default_games_folder`), made ready before
    the run loads: a folder that takes files (`paths.check_writable_dir`), empty or holding played
    games (never another corpus), with its dataset.json and splits.json; `split` is the one the
    games are listed under. Mistakes are one line naming the flag."""
    if split not in SPLITS:
        raise PlayError(f"--games_split {split!r}: expected one of {', '.join(SPLITS)}")
    folder = Path(out).expanduser().resolve() if out else default_games_folder()
    meta = folder / "data" / "dataset.json"
    splits = folder / "data" / "logs" / "splits.json"
    if folder.exists() and not folder.is_dir():
        raise PlayError(f"--out {folder}: a file, not a folder")
    paths.check_writable_dir(folder, "--out")
    if splits.exists():
        try:
            name = json.loads(meta.read_text())["name"]
            json.loads(splits.read_text())
        except (OSError, ValueError, KeyError, TypeError) as err:
            raise PlayError(f"--out {folder}: holds a corpus whose data/dataset.json or splits.json "
                            f"does not read as a played-games folder ({type(err).__name__}: {err})") from None
        if name != DATASET:
            raise PlayError(f"--out {folder}: holds the corpus {name!r}, not played games; give another folder")
    (folder / "data" / "logs").mkdir(parents=True, exist_ok=True)
    if not meta.exists():
        meta.write_text(json.dumps({"name": DATASET, "writer": "bapjax.play"}, indent=1))
    if not splits.exists():
        paths.write_atomically(splits, lambda p: p.write_text(json.dumps({s: [] for s in SPLITS})), str(splits))
    return folder


class PlayServer:
    """The loaded run and the games of one server process. A lock per game (a page's requests on
    its game run one at a time) and one around decoding (one model, one thread at a time)."""

    def __init__(self, checkpoint: str, out: str | Path | None, split: str = "test", decoder=None,
                 samples: int | None = None):
        self.out = games_folder(out, split)
        self.split = split
        if decoder is None:
            decoder = load_decoder(checkpoint, samples)
        self.decoder = decoder
        settings = decoder.settings
        self.meta = {"checkpoint": str(checkpoint), "run_dir": str(decoder.run.run_dir), "step": int(decoder.run.step),
                     "parameters": _count_parameters(getattr(decoder.run, "params", None)),
                     "decode": dataclasses.asdict(settings)}
        self.games: dict[str, PlayedGame] = {}
        self.games_lock = threading.Lock()
        self.decode_lock = threading.Lock()
        self.warm_ms = self._warm_up()

    def _warm_up(self) -> float:
        """Decode one item, so the first instruction does not wait for compilation."""
        states = (mdc.WorldState({}, (writer.START_LINE,), START_POSE),
                  mdc.WorldState({}, (writer.START_LINE, "<Architect> place a red block"), START_POSE))
        item = mdc.next_item(mdc.Game("warm-up-C0", "C0", self.out, states), self.split, DATASET)
        start = time.perf_counter()
        self.decode(item)
        return 1000 * (time.perf_counter() - start)

    def decode(self, item) -> list[Action]:
        with self.decode_lock:
            return self.decoder.predict([item])[item.item_id]

    @property
    def splits_path(self) -> Path:
        return self.out / "data" / "logs" / "splits.json"

    def new_game(self) -> PlayedGame:
        """A game in memory: its target id is the next after those in splits.json and those of
        this server's games (written or not); nothing is written until it is played."""
        with self.games_lock:
            if len(self.games) >= MAX_GAMES:
                raise RequestError(503, f"this server holds {MAX_GAMES} games, the most it keeps; restart it")
            splits = json.loads(self.splits_path.read_text())
            taken = [t for targets in splits.values() for t in targets] + [g.target_id for g in self.games.values()]
            numbers = [int(t[1:]) for t in taken if re.fullmatch(r"C\d+", t)]
            target = f"C{max(numbers, default=0) + 1}"
            now = datetime.datetime.now()
            game_id = f"play-{target}-{now:%Y%m%d-%H%M%S}"
            directory = self.out / "data" / "logs" / f"play-{now:%Y-%m-%d}" / "logs" / game_id
            game = PlayedGame(game_id, target, directory, self.split, self.meta, self.register)
            self.games[game_id] = game
            return game

    def register(self, game: PlayedGame) -> None:
        """List a game's target under the server's split in splits.json (at its first save)."""
        with self.games_lock:
            splits = json.loads(self.splits_path.read_text())
            splits.setdefault(self.split, []).append(game.target_id)
            paths.write_atomically(self.splits_path, lambda p: p.write_text(json.dumps(splits)), str(self.splits_path))

    def game(self, game_id: str) -> PlayedGame:
        if not _GAME_ID.match(game_id) or game_id not in self.games:
            raise RequestError(404, f"no game {game_id[:80]!r} on this server (a game lives as long as the server "
                                    "that started it)")
        return self.games[game_id]

    def info(self) -> dict:
        return {**self.meta, "split": self.split, "out": str(self.out), "warm_up_ms": round(self.warm_ms, 1),
                "colors": list(grid.COLORS), "region": {"x": [grid.X_MIN, grid.X_MAX], "y": [grid.Y_MIN, grid.Y_MAX],
                                                         "z": [grid.Z_MIN, grid.Z_MAX]},
                "start_pose": dict(zip(POSE_LIMITS, START_POSE)), "pose_limits": POSE_LIMITS,
                "max_instruction_chars": MAX_INSTRUCTION_CHARS, "three": THREE_VERSION,
                "builder_speaks": False}

    # requests

    def handle(self, method: str, path: str, body: Any) -> dict:
        """The API: (method, path, parsed JSON body) -> the JSON answer, or RequestError."""
        parts = path.strip("/").split("/")
        if parts == ["api", "info"] and method == "GET":
            return self.info()
        if parts == ["api", "games"] and method == "POST":
            _fields(body, ())
            game = self.new_game()
            with game.lock:
                return game.view()
        if len(parts) in (3, 4) and parts[:2] == ["api", "games"]:
            game = self.game(parts[2])
            verb = parts[3] if len(parts) == 4 else None
            if verb is None and method == "GET":
                with game.lock:
                    return game.view()
            if verb is None:
                raise RequestError(405, f"{method} {path[:100]}: a game is read with GET")
            if verb not in ("instruction", "accept", "undo", "edit"):
                raise RequestError(404, f"{method} {path[:100]}: not a request this server answers")
            if method != "POST":
                raise RequestError(405, f"{method} {path[:100]}: send it with POST")
            with game.lock:
                return self._move(game, verb, body)
        raise RequestError(404, f"{method} {path[:100]}: not a request this server answers")

    def _move(self, game: PlayedGame, verb: str, body: Mapping) -> dict:
        if verb == "instruction":
            _fields(body, ("version", "text", "pose"))
            game.check_version(body)
            text, pose = parse_instruction(body["text"]), parse_pose(body["pose"])
            turn = game.instruct(text, pose, self.decode)
            return {**game.view(), "predicted": jsonl.action_records(turn.predicted),
                    "decode_ms": round(turn.decode_ms, 1)}
        if verb == "accept":
            _fields(body, ("version", "pose"))
            game.check_version(body)
            game.accept(parse_pose(body["pose"]))
        elif verb == "undo":
            _fields(body, ("version",))
            game.check_version(body)
            game.undo()
        else:
            _fields(body, ("version", "pose", "type", "x", "y", "z"), ("color",))
            game.check_version(body)
            pose = parse_pose(body["pose"])
            game.edit(parse_edit(body, game.structure), pose)
        return game.view()


def _count_parameters(params) -> int:
    import jax  # loaded with the model already

    return int(sum(leaf.size for leaf in jax.tree_util.tree_leaves(params))) if params is not None else 0


def load_decoder(checkpoint: str, samples: int | None = None):
    """The run, loaded once (`bapjax.decoding.runs.RunDecoder`, the run's own decoding settings,
    `samples` draws per request if given); one item is decoded at a time, so one slot."""
    from bapjax.training import run_eval  # the model code, loaded only when serving

    try:
        decoder = run_eval.load_decoder(checkpoint, slots=1, samples=samples)
    except UserError as err:  # names the run's path already
        raise PlayError(f"--checkpoint: {err}" if str(checkpoint) in str(err) else f"--checkpoint {checkpoint}: {err}") from None
    except Exception as err:  # noqa: BLE001 (a damaged run raises many types; one line names it)
        raise PlayError(f"--checkpoint {checkpoint}: cannot load the run ({type(err).__name__}: "
                        f"{str(err).splitlines()[0] if str(err) else ''})") from None
    return decoder


# --------------------------------------------------------------------------------------------
# HTTP

_PAGE = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>bapjax play</title>
<link rel="stylesheet" href="/assets/report.css">
<link rel="stylesheet" href="/assets/play.css">
</head><body>
<header><h1>bapjax play: instruct the Builder</h1><span class="meta" id="meta"></span></header>
<main>
<section id="view">
<div id="scenewrap"><canvas id="scene"></canvas><div id="labels"></div><div id="scene-wait">3D view: starting WebGL&hellip;</div>
<div id="legend"><span class="sw" style="border-color:#d97706;background:#fde68a"></span>the Builder's predicted actions
(removal: wire box with a cross) &middot; <b>click</b> the scene to <span id="mode-word">place</span> a block</div>
<div id="scenebtns">
<span class="grp" title="edit the structure by hand: click a block face or the ground">
<label><input type="radio" name="mode" value="place" checked> place</label>
<label><input type="radio" name="mode" value="remove"> remove</label>
<span id="palette"></span></span>
<button id="view-builder" type="button" title="the Builder's own view (its eyes, yaw and pitch)">Builder's eyes</button>
<button id="view-reset" type="button" title="camera behind the Builder">overview</button>
</div>
<div id="walk" title="walk and turn the Builder (keys in brackets, outside the chat box)">
<button data-move="left" title="step left (A)">&#8592;</button><button data-move="forward" title="step forward (W)">&#8593;</button>
<button data-move="back" title="step back (S)">&#8595;</button><button data-move="right" title="step right (D)">&#8594;</button>
<button data-move="turn-left" title="turn left (Q)">&#10226;</button><button data-move="turn-right" title="turn right (E)">&#10227;</button>
<button data-move="up" title="fly up (R)">up</button><button data-move="down" title="down (F)">down</button>
<button data-move="look-up" title="look up (T)">look &#8593;</button><button data-move="look-down" title="look down (G)">look &#8595;</button>
<span id="pose"></span></div>
</div>
<div id="status" role="status"></div>
</section>
<section id="side">
<div id="dialogue"></div>
<div id="turn"><div id="predicted"></div>
<div id="turnbtns"><button id="accept" type="button" disabled>accept</button>
<button id="undo" type="button" disabled title="take back the last instruction and what followed it">undo the turn</button></div></div>
<form id="chat"><textarea id="text" rows="2" maxlength="@@max_chars@@" placeholder="Architect: e.g. put a red block left of the blue one"></textarea>
<button id="send" type="submit">send</button></form>
</section>
</main>
<footer><span id="gameinfo"></span> &middot; bapjax play &middot; three.js r@@three_revision@@ (MIT license, /assets/three-LICENSE.txt)</footer>
<script src="/assets/three.js"></script>
<script src="/assets/region3d.js"></script>
<script src="/assets/play.js"></script>
</body></html>
"""


def page_html() -> str:
    parts = {"max_chars": str(MAX_INSTRUCTION_CHARS), "three_revision": THREE_VERSION.split(".")[1]}
    return re.sub(r"@@(\w+)@@", lambda m: parts[m.group(1)], _PAGE)


class Handler(http.server.BaseHTTPRequestHandler):
    """One request: the page, an asset, or the API (`PlayServer.handle`); every refusal is JSON
    {"error": reason} with a 4xx status, and the server goes on."""

    server_version = "bapjax-play"
    timeout = 30  # a client that stops sending mid-request frees its thread
    play: PlayServer  # set on the class `serve` makes

    def log_message(self, format, *args):  # noqa: A002 (the base class's name)
        sys.stderr.write(f"{self.address_string()} {format % args}\n")

    def _send(self, status: int, payload: bytes, content_type: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(payload)))
        self.send_header("Cache-Control", "no-store")
        self.send_header("X-Content-Type-Options", "nosniff")
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(payload)

    def _json(self, status: int, value: Any) -> None:
        self._send(status, json.dumps(value).encode(), "application/json")

    def _error(self, status: int, reason: str) -> None:
        self._json(status, {"error": reason})

    def _body(self) -> Any:
        length = self.headers.get("Content-Length")
        if self.headers.get("Transfer-Encoding"):
            raise RequestError(411, "send the body with a Content-Length (no chunked transfer)")
        if length is None:
            return {}
        if not length.isdigit():
            raise RequestError(400, f"Content-Length {length[:40]!r} is not a number")
        if int(length) > MAX_BODY_BYTES:
            self.close_connection = True  # the body is not read
            raise RequestError(413, f"request body of {int(length)} bytes; at most {MAX_BODY_BYTES}")
        raw = self.rfile.read(int(length))
        if len(raw) < int(length):
            self.close_connection = True
            raise RequestError(400, "the request body ended early")
        if not raw.strip():
            return {}
        try:
            body = json.loads(raw)
        except (ValueError, UnicodeDecodeError, RecursionError) as err:
            raise RequestError(400, f"the request body is not valid JSON ({type(err).__name__}: {err})") from None
        if not isinstance(body, dict):
            raise RequestError(400, "the request body must be a JSON object")
        return body

    def _dispatch(self, method: str) -> None:
        try:
            url = urllib.parse.urlsplit(self.path)
            path = url.path
            if method in ("GET", "HEAD") and path in ("/", "/index.html"):
                return self._send(200, page_html().encode(), "text/html; charset=utf-8")
            if method in ("GET", "HEAD") and path.startswith("/assets/"):
                name = path[len("/assets/"):]
                if name not in ASSET_FILES:
                    raise RequestError(404, f"no asset {name[:80]!r} (the page's assets: {', '.join(ASSET_FILES)})")
                file = ASSET_FILES[name]
                return self._send(200, file.read_bytes(), CONTENT_TYPES[file.suffix])
            if not path.startswith("/api/"):
                raise RequestError(404, f"{method} {path[:100]}: no such page")
            body = self._body() if method == "POST" else {}
            return self._json(200, self.play.handle(method, path, body))
        except RequestError as err:
            return self._error(err.status, err.reason)
        except paths.NoSpaceError as err:
            return self._error(507, str(err))
        except Exception as err:  # noqa: BLE001 (a bug: answered, logged, and the server goes on)
            import traceback

            traceback.print_exc()
            return self._error(500, f"internal error: {type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}")

    def do_GET(self):  # noqa: N802 (http.server's names)
        self._dispatch("GET")

    def do_HEAD(self):  # noqa: N802
        self._dispatch("HEAD")

    def do_POST(self):  # noqa: N802
        self._dispatch("POST")

    def _not_allowed(self):
        self.close_connection = True
        self._error(405, f"{self.command}: this server answers GET and POST only")

    do_PUT = do_DELETE = do_PATCH = do_OPTIONS = _not_allowed


class Server(http.server.ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 64


def make_server(play: PlayServer | None, host: str = "127.0.0.1", port: int = 0) -> Server:
    """The HTTP server (bound, not yet serving) for `play` (or for the one set later as
    ``server.RequestHandlerClass.play``); port 0 takes a free port."""
    handler = type("PlayHandler", (Handler,), {"play": play})
    try:
        return Server((host, port), handler)
    except OSError as err:
        raise PlayError(f"--host {host} --port {port}: cannot listen there ({err.strerror or err})") from None
