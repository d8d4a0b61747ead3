"""bapjax.play: the Architect's page and its server.

Fast, without a model (a stand-in decoder behind the real HTTP server): games itemize to exactly
the items the server decoded, two tabs play side by side, hostile requests get a 4xx with a
reason and change nothing, a game only opened writes nothing. With a tiny trained run: the page in
headless Chromium (type, watch the predicted blocks, place one by hand, instruct again), then the
saved folder through `mdc stats`, `bapjax.evaluate` and `bapjax.report`; docs/play.md's curl
session against `python -m bapjax.play`, which prints one `loaded` line; a checkpoint that does
not load stops the command with exit 2."""

import contextlib
import http.client
import json
import os
import re
import shutil
import subprocess
import sys
import threading
import types
from pathlib import Path

import pytest

from bapjax.corpus import mdc
from bapjax.decoding.settings import DecodeSettings
from bapjax.evaluation import evaluator
from bapjax.pages import browser, play_server
from bapjax.world import grid, jsonl
from bapjax.world.grid import Action

REPO = Path(__file__).resolve().parents[1]
POSE = {"x": 0.0, "y": 1.0, "z": -7.0, "yaw": 0.0, "pitch": 30.0}


# --------------------------------------------------------------------------------------------
# The reader's next item is the item the log becomes


def test_next_item_is_the_item_the_logged_actions_make(mdc_path):
    """For every item of 12 MDC games: the game cut just before the item's actions gives, by
    `mdc.next_item`, that item without its reference (same id, history, structure, pose)."""
    root = mdc.resolve_corpus(mdc_path)
    checked = 0
    for path in mdc.game_files(root)[::45][:12]:
        game = mdc.read_game(path)
        items, _ = mdc.itemize_game(game, "test")
        events = mdc.game_timeline(game)
        starts = []  # world state index of each run's first action
        for n, (event, state) in enumerate(events):
            if isinstance(event, Action) and (n == 0 or not isinstance(events[n - 1][0], Action)):
                starts.append(state)
        by_id = {item.item_id: item for item in items}
        for state in starts:
            if state < 2:  # the first kept state's blocks: no earlier state to cut at
                continue
            cut = mdc.Game(game.game_id, game.target_id, game.path, game.world_states[:state])
            pending = mdc.next_item(cut, "test")
            if pending is None or pending.item_id not in by_id:
                continue  # skipped for blocks outside the region
            item = by_id[pending.item_id]
            if item.reference_actions and item.history == pending.history:
                assert (pending.prev_structure, pending.builder_pose) == (item.prev_structure, item.builder_pose)
                checked += 1
            else:  # the cut fell inside a run split by an out-of-region skip; then the ids differ
                assert pending.history != item.history
        assert checked
    assert checked > 100


# --------------------------------------------------------------------------------------------
# A stand-in decoder behind the real HTTP server


class RowDecoder:
    """Places on the first two free ground cells of row z = 0 (x from -5), in a color that changes with
    the history: deterministic and feasible, so the games' items are known."""

    settings = DecodeSettings(max_actions=20, min_actions=1, slots=1)
    run = types.SimpleNamespace(run_dir="stand-in", step=0)

    def __init__(self):
        self.items = []

    def predict(self, items):
        (item,) = items
        self.items.append(item)
        walk = grid.StructureWalk(item.prev_structure)
        out = []
        for x in range(-5, 6):
            action = Action(grid.PLACE, 1 + len(item.history) % 6, x, 1, 0)
            if len(out) < 2 and walk.step(action):
                out.append(action)
        return {item.item_id: out}


@pytest.fixture
def stand_in(tmp_path, monkeypatch):
    """(PlayServer with RowDecoder, its URL host and port); the HTTP server runs in a thread."""
    monkeypatch.setenv("BAPJAX_CACHE", str(tmp_path / "cache"))
    server = play_server.PlayServer("stand-in", tmp_path / "games", "test", decoder=RowDecoder())
    http_server = play_server.make_server(server, "127.0.0.1", 0)
    thread = threading.Thread(target=http_server.serve_forever, daemon=True)
    thread.start()
    yield server, http_server.server_address[:2]
    http_server.shutdown()
    http_server.server_close()


def request(address, method, path, body=None, raw: bytes | None = None, headers=None):
    """(status, JSON answer) of one request."""
    conn = http.client.HTTPConnection(*address, timeout=30)
    data = raw if raw is not None else (None if body is None else json.dumps(body).encode())
    conn.request(method, path, body=data, headers=headers or {})
    response = conn.getresponse()
    payload = response.read()
    conn.close()
    try:
        return response.status, json.loads(payload)
    except ValueError:
        return response.status, payload


def move(address, game, verb, **fields):
    status, answer = request(address, "POST", f"/api/games/{game['game_id']}/{verb}", {"version": game["version"], **fields})
    assert status == 200, answer
    return answer


def test_a_played_game_itemizes_to_the_items_the_server_decoded(stand_in):
    server, address = stand_in
    status, game = request(address, "POST", "/api/games", {})
    assert status == 200 and game["items"] == 0
    game = move(address, game, "instruction", text="two blocks  in a\nrow please", pose=POSE)
    first = [grid.action_from_dict(a) for a in game["predicted"]]
    assert game["pending"]["actions"] == game["predicted"] == jsonl.action_records(first)
    assert len(first) == 2 and game["pending"]["item_id"] == f"{game['game_id']}:0"
    game = move(address, game, "accept", pose=POSE)
    game = move(address, game, "edit", pose=POSE, type="place", x=-5, y=2, z=0, color="purple")
    game = move(address, game, "edit", pose=POSE, type="remove", x=-4, y=1, z=0)  # the color is the block's
    turned = dict(POSE, x=3.0, yaw=90.0)
    game = move(address, game, "instruction", text="more", pose=turned)
    second = [grid.action_from_dict(a) for a in game["predicted"]]
    game = move(address, game, "accept", pose=turned)
    # a third turn taken back: instruction, accepted actions and all
    game = move(address, game, "instruction", text="and a third", pose=POSE)
    game = move(address, game, "accept", pose=POSE)
    assert game["items"] == 3
    game = move(address, game, "undo")
    assert game["items"] == 2 and game["events"][-1]["by"] == "model"
    assert game["structure"] == [grid.block_to_dict(b) for b in
                                 grid.as_blocks(grid.apply_sequence({}, first + hand_actions(first) + second))]
    assert [e["by"] for e in game["events"]] == ["architect", "model", "model", "hand", "hand", "architect",
                                                 "model", "model"]
    assert game["events"][3] == {"by": "hand", "action": {"type": "place", "color": "purple", "x": -5, "y": 2, "z": 0}}

    corpus = mdc.load_corpus(server.out)
    items = corpus.split("test")
    hand = hand_actions(first)
    assert [it.item_id for it in items] == [f"{game['game_id']}:0", f"{game['game_id']}:1"]
    assert list(items[0].reference_actions) == first + hand
    assert list(items[1].reference_actions) == second
    assert all(it.dataset == "play" for it in items)
    # what the server decoded is what the reader itemizes (less the reference), pose included
    decoded = {item.item_id: item for item in server.decoder.items}
    for item in items:
        seen = decoded[item.item_id]
        assert (seen.history, seen.prev_structure, seen.builder_pose) == (
            item.history, item.prev_structure, item.builder_pose)
    assert items[1].builder_pose == play_server.BuilderPose(3.0, 1.0, -7.0, 90.0, 30.0)
    assert [e.text for e in items[1].dialogue] == ["Mission has started.", "two blocks in a row please", "more"]
    # the game's predictions.jsonl: the decoded actions of its items (not of the undone turn)
    folder = Path(game["folder"])
    predicted = jsonl.read_predictions(folder / "predictions.jsonl")
    assert predicted == {items[0].item_id: first, items[1].item_id: second}
    report = evaluator.evaluate_predictions(items, predicted)
    assert report["counts"]["items"] == 2
    record = json.loads((folder / "play.json").read_text())
    assert record["items"] == 2 and [t["item_id"] for t in record["turns"]] == list(predicted)


def hand_actions(first):
    """The two hand edits of the played game above, after its first accepted actions."""
    return [Action(grid.PLACE, 6, -5, 2, 0), Action(grid.REMOVE, first[1].color, -4, 1, 0)]


def test_a_game_only_opened_writes_nothing(stand_in):
    """POST /api/games makes a game in memory; its first edit or instruction writes it and lists
    its target in splits.json (targets numbered in the order the games were made)."""
    server, address = stand_in
    splits = server.out / "data" / "logs" / "splits.json"
    listed = splits.read_text()
    games = [request(address, "POST", "/api/games")[1] for _ in range(2)]
    assert [g["saved"] for g in games] == [False, False] and games[0]["folder"] != games[1]["folder"]
    assert request(address, "GET", f"/api/games/{games[0]['game_id']}")[1] == games[0]
    assert not any(Path(g["folder"]).exists() for g in games)
    assert sorted(p.name for p in (server.out / "data" / "logs").iterdir()) == ["splits.json"]
    assert splits.read_text() == listed
    edited = move(address, games[1], "edit", pose=POSE, type="place", x=0, y=1, z=0, color="red")
    assert edited["saved"] and (Path(edited["folder"]) / "postprocessed-observations.json").is_file()
    assert not Path(games[0]["folder"]).exists()
    assert json.loads(splits.read_text())["test"] == ["C2"]
    instructed = move(address, games[0], "instruction", text="hi", pose=POSE)
    assert json.loads(splits.read_text())["test"] == ["C2", "C1"]
    move(address, instructed, "accept", pose=POSE)
    assert {it.game_id for it in mdc.load_corpus(server.out).split("test")} == {g["game_id"] for g in games}


def test_two_tabs_play_side_by_side(stand_in):
    """Two games moved by two threads at once, and a stale tab on one game: each game's log holds
    exactly its own moves."""
    server, address = stand_in
    games = [request(address, "POST", "/api/games", {})[1] for _ in range(2)]
    assert games[0]["game_id"] != games[1]["game_id"]
    errors = []

    def play_turns(game, word):
        try:
            for n in range(4):
                game = move(address, game, "instruction", text=f"{word} {n}", pose=POSE)
                game = move(address, game, "accept", pose=POSE)
        except AssertionError as err:
            errors.append(err)

    threads = [threading.Thread(target=play_turns, args=(g, w)) for g, w in zip(games, ("left", "right"))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    items = mdc.load_corpus(server.out).split("test")
    for game, word in zip(games, ("left", "right")):
        own = [it for it in items if it.game_id == game["game_id"]]
        assert len(own) == 4
        assert [t.text for t in own[-1].dialogue][1:] == [f"{word} {n}" for n in range(4)]
    # a second tab on the same game, one version behind: refused, nothing changes
    _, now = request(address, "GET", f"/api/games/{games[0]['game_id']}")
    stale = dict(now, version=now["version"] - 1)
    status, answer = request(address, "POST", f"/api/games/{now['game_id']}/instruction",
                             {"version": stale["version"], "text": "stale", "pose": POSE})
    assert status == 409 and "changed elsewhere" in answer["error"]
    assert request(address, "GET", f"/api/games/{now['game_id']}")[1] == now


def test_hostile_and_malformed_requests_get_a_4xx_with_a_reason(stand_in):
    server, address = stand_in
    _, game = request(address, "POST", "/api/games", {})
    gid = game["game_id"]
    game_path = f"/api/games/{gid}"
    folder = Path(game["folder"])
    v = game["version"]
    cases = [
        ("POST", f"{game_path}/instruction", b"{not json", {}, 400, "not valid JSON"),
        ("POST", f"{game_path}/instruction", b"[1, 2]", {}, 400, "JSON object"),
        ("POST", f"{game_path}/instruction", b"\xff\xfe", {}, 400, "not valid JSON"),
        ("POST", f"{game_path}/instruction", b"x" * (play_server.MAX_BODY_BYTES + 1), {}, 413, "at most"),
        ("POST", f"{game_path}/instruction", b"{}", {"Content-Length": "abc"}, 400, "Content-Length"),
        ("POST", f"{game_path}/instruction", b"", {"Content-Length": str(10**9)}, 413, "at most"),
        ("POST", f"{game_path}/instruction", b"[" * 8000 + b"]" * 8000, {}, 400, "not valid JSON"),
        ("POST", f"{game_path}/instruction", b'{"version": 0, "text": "' + "é".encode() * 3000 + b'", "pose": {}}', {},
         400, "3000 characters; at most 500"),
        ("GET", "/assets/../bapjax/play.py", None, {}, 404, "no asset"),
        ("GET", "/assets/../../../../etc/passwd", None, {}, 404, "no asset"),
        ("GET", "/assets/%2e%2e/%2e%2e/play.py", None, {}, 404, "no asset"),
        ("GET", "/assets/report.js", None, {}, 404, "no asset"),
        ("GET", "/../../etc/passwd", None, {}, 404, "no such page"),
        ("GET", "/api/games/../../etc/passwd", None, {}, 404, ""),
        ("GET", "/api/games/play-C999-20260101-000000", None, {}, 404, "no game"),
        ("POST", "/api/games/nope/instruction", {"version": v, "text": "hi", "pose": POSE}, {}, 404, "no game"),
        ("POST", f"{game_path}/fly", {"version": v}, {}, 404, "not a request"),
        ("PUT", game_path, {}, {}, 405, "GET and POST only"),
        ("DELETE", game_path, None, {}, 405, "GET and POST only"),
        ("GET", f"{game_path}/instruction", None, {}, 405, "POST"),
        ("POST", f"{game_path}/instruction", {"version": v, "text": "", "pose": POSE}, {}, 400, "empty"),
        ("POST", f"{game_path}/instruction", {"version": v, "text": " \n\t ", "pose": POSE}, {}, 400, "empty"),
        ("POST", f"{game_path}/instruction", {"version": v, "text": "x" * 501, "pose": POSE}, {}, 400, "at most 500"),
        ("POST", f"{game_path}/instruction", {"version": v, "text": 7, "pose": POSE}, {}, 400, "string"),
        ("POST", f"{game_path}/instruction", {"version": v, "text": "a\x00b", "pose": POSE}, {}, 400, "control"),
        ("POST", f"{game_path}/instruction", {"version": v, "pose": POSE}, {}, 400, "missing field(s) 'text'"),
        ("POST", f"{game_path}/instruction", {"version": v, "text": "hi", "pose": POSE, "x": 1}, {}, 400, "unexpected"),
        ("POST", f"{game_path}/instruction", {"version": "0", "text": "hi", "pose": POSE}, {}, 400, "version"),
        ("POST", f"{game_path}/instruction", {"version": v + 1, "text": "hi", "pose": POSE}, {}, 409, "changed elsewhere"),
        ("POST", f"{game_path}/instruction", {"version": v, "text": "hi", "pose": dict(POSE, x=1e9)}, {}, 400, "pose.x"),
        ("POST", f"{game_path}/instruction", {"version": v, "text": "hi", "pose": dict(POSE, yaw=None)}, {}, 400, "pose.yaw"),
        ("POST", f"{game_path}/instruction", {"version": v, "text": "hi", "pose": [0, 1, 2]}, {}, 400, "pose"),
        ("POST", f"{game_path}/instruction", b'{"version": 0, "text": "hi", "pose": {"x": NaN, "y": 1, "z": 0, "yaw": 0, "pitch": 0}}',
         {}, 400, "pose.x"),
        ("POST", f"{game_path}/edit", {"version": v, "pose": POSE, "type": "place", "x": 6, "y": 1, "z": 0, "color": "red"},
         {}, 400, "outside the build region"),
        ("POST", f"{game_path}/edit", {"version": v, "pose": POSE, "type": "place", "x": 0, "y": 0, "z": 0, "color": "red"},
         {}, 400, "outside the build region"),
        ("POST", f"{game_path}/edit", {"version": v, "pose": POSE, "type": "place", "x": 0, "y": 3, "z": 0, "color": "red"},
         {}, 400, "neither on the ground nor next to a block"),
        ("POST", f"{game_path}/edit", {"version": v, "pose": POSE, "type": "place", "x": 0, "y": 1, "z": 0, "color": "pink"},
         {}, 400, "unknown color"),
        ("POST", f"{game_path}/edit", {"version": v, "pose": POSE, "type": "place", "x": 0.5, "y": 1, "z": 0, "color": "red"},
         {}, 400, "integer"),
        ("POST", f"{game_path}/edit", {"version": v, "pose": POSE, "type": "remove", "x": 0, "y": 1, "z": 0}, {}, 400, "empty cell"),
        ("POST", f"{game_path}/edit", {"version": v, "pose": POSE, "type": "remove", "x": [0], "y": 1, "z": 0}, {}, 400, "integer"),
        ("POST", f"{game_path}/edit", {"version": v, "pose": POSE, "type": "paint", "x": 0, "y": 1, "z": 0}, {}, 400, "'type'"),
        ("POST", f"{game_path}/accept", {"version": v, "pose": POSE}, {}, 409, "no predicted actions"),
        ("POST", f"{game_path}/undo", {"version": v}, {}, 409, "no instruction"),
        ("POST", "/api/games", {"evil": True}, {}, 400, "unexpected"),
    ]
    for method, path, body, headers, expected, reason in cases:
        raw = body if isinstance(body, bytes) else None
        status, answer = request(address, method, path, None if raw is not None else body, raw=raw, headers=headers)
        assert status == expected, (method, path, body if not isinstance(body, bytes) else body[:40], answer)
        assert isinstance(answer, dict) and reason in answer["error"] and "\n" not in answer["error"], (path, answer)
    # a client that stops mid-body, and one that declares chunked transfer
    conn = http.client.HTTPConnection(*address, timeout=30)
    conn.putrequest("POST", f"{game_path}/instruction")
    conn.putheader("Transfer-Encoding", "chunked")
    conn.endheaders()
    assert conn.getresponse().status == 411
    conn.close()
    # nothing changed (nothing written), and the server still plays
    assert not folder.exists()
    assert request(address, "GET", game_path)[1]["version"] == v
    assert len(server.games) == 1
    status, page = request(address, "GET", "/")
    assert status == 200 and b"/assets/play.js" in page
    for name in play_server.ASSET_FILES:
        assert request(address, "GET", f"/assets/{name}")[0] == 200
    game = move(address, game, "instruction", text="after all that", pose=POSE)
    assert len(game["predicted"]) == 2
    # pending actions: no edit and no second instruction until accepted or undone
    for verb, fields in (("edit", dict(pose=POSE, type="place", x=0, y=1, z=0, color="red")),
                         ("instruction", dict(text="again", pose=POSE))):
        status, answer = request(address, "POST", f"{game_path}/{verb}", {"version": game["version"], **fields})
        assert status == 409 and "accept or undo" in answer["error"]
    game = move(address, game, "undo")
    assert game["events"] == [] and game["pending"] is None


@pytest.mark.parametrize("files, message", [
    ({}, "no config.json + vocab.json"),
    ({"config.json": "{broken", "vocab.json": "{}"}, "config.json: damaged"),
])
def test_a_checkpoint_that_does_not_load_stops_with_one_line(tmp_path, files, message):
    run = tmp_path / "run"
    run.mkdir()
    for name, text in files.items():
        (run / name).write_text(text)
    done = subprocess.run([sys.executable, "-m", "bapjax.play", f"--checkpoint={run}", "--port=0",
                           f"--out={tmp_path / 'games'}"], cwd=REPO, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "BAPJAX_CACHE": str(tmp_path / "cache")})
    assert done.returncode == 2, done.stderr[-2000:]
    lines = done.stderr.strip().splitlines()
    assert lines[-1].startswith("error: --checkpoint") and str(run) in lines[-1] and message in lines[-1], lines[-3:]


def test_a_port_in_use_is_named(tmp_path):
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = subprocess.run([sys.executable, "-m", "bapjax.play", f"--checkpoint={tmp_path}", f"--port={port}",
                               f"--out={tmp_path / 'games'}"], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines()[-1].startswith(f"error: --host 127.0.0.1 --port {port}: cannot listen there")


def test_games_go_to_the_cache_by_default_and_the_first_line_says_where(tmp_path):
    """Without --out the games folder is $BAPJAX_CACHE/play-games whatever the working directory,
    named before the run loads (here a run that does not load)."""
    (tmp_path / "work").mkdir()
    done = subprocess.run([sys.executable, "-m", "bapjax.play", f"--checkpoint={tmp_path / 'none'}", "--port=0"],
                          cwd=tmp_path / "work", capture_output=True, text=True, timeout=300,
                          env={**os.environ, "BAPJAX_CACHE": str(tmp_path / "cache")})
    assert done.returncode == 2 and done.stderr.startswith("error: --checkpoint"), done.stderr[-2000:]
    games = tmp_path / "cache" / "play-games"
    assert done.stdout.splitlines()[0] == f"games are written to {games} (split test)"
    assert json.loads((games / "data" / "dataset.json").read_text())["name"] == play_server.DATASET
    assert list((tmp_path / "work").iterdir()) == []


def test_out_folder_of_another_corpus_is_refused(tmp_path, mdc_path):
    other = tmp_path / "sim"
    (other / "data" / "logs").mkdir(parents=True)
    (other / "data" / "logs" / "splits.json").write_text("{}")
    (other / "data" / "dataset.json").write_text('{"name": "bs"}')
    with pytest.raises(play_server.PlayError, match="holds the corpus 'bs', not played games"):
        play_server.PlayServer("stand-in", other, decoder=RowDecoder())
    with pytest.raises(play_server.PlayError, match="--games_split 'dev'"):
        play_server.PlayServer("stand-in", tmp_path / "g", "dev", decoder=RowDecoder())


# --------------------------------------------------------------------------------------------
# A trained run, the page in headless Chromium


@contextlib.contextmanager
def play_command(run, tmp: Path):
    """`python -m bapjax.play` on `run` and a free port: (URL, games folder, env, what it printed
    up to its `serving` line)."""
    env = {**os.environ, "BAPJAX_CACHE": str(tmp / "cache")}
    out = tmp / "games"
    process = subprocess.Popen([sys.executable, "-m", "bapjax.play", f"--checkpoint={run}", "--port=0",
                                f"--out={out}"], cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               text=True)
    lines = []
    try:
        for line in process.stdout:
            lines.append(line)
            found = re.search(r"serving (http://\S+)", line)
            if found:
                break
        else:
            pytest.fail("the server did not start:\n" + "".join(lines[-20:]))
        threading.Thread(target=lambda: [None for _ in process.stdout], daemon=True).start()  # drain its log
        yield found.group(1), out, env, lines
    finally:
        process.terminate()
        process.wait(30)


@pytest.fixture(scope="module")
def served(tiny_run, tmp_path_factory):
    """`python -m bapjax.play` on the tiny run and a free port: (URL, games folder, env)."""
    with play_command(tiny_run, tmp_path_factory.mktemp("play-served")) as (url, out, env, _):
        yield url, out, env


# docs/play.md's curl session: the bash block under its heading, and the fields its tables name
CURL_SESSION = re.compile(r"### A session with curl\n.*?```bash\n(.*?)```", re.S)
GAME_FIELDS = {"game_id", "version", "split", "folder", "saved", "items", "structure", "pose", "events", "pending",
               "can_undo"}
INFO_FIELDS = {"checkpoint", "run_dir", "step", "parameters", "decode", "split", "out", "warm_up_ms", "colors", "region",
               "start_pose", "pose_limits", "max_instruction_chars", "three", "builder_speaks"}


@pytest.mark.skipif(shutil.which("curl") is None, reason="no curl on PATH")
def test_the_documented_curl_session(tiny_run, tmp_path):
    """docs/play.md's curl session, run as written (P: the server's port) against `python -m
    bapjax.play`: each answer holds the fields the docs name, actions as predictions-file objects;
    the command prints its run's `loaded` line once."""
    block = CURL_SESSION.search((REPO / "docs" / "play.md").read_text(encoding="utf-8")).group(1)
    assert block.startswith("P=8000\n")
    with play_command(tiny_run, tmp_path) as (url, out, env, lines):
        assert lines[0] == f"games are written to {out} (split test)\n", lines  # before the run loads
        loaded = [line for line in lines if re.match(r"loaded .* step \d+$", line)]
        assert loaded == [f"loaded {tiny_run} step 2\n"], lines
        assert any(line.startswith("ready in ") for line in lines), lines
        port = re.search(r":(\d+)/", url).group(1)
        done = subprocess.run(["bash", "-euo", "pipefail", "-c", block.replace("P=8000", f"P={port}", 1)],
                              capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    answers = done.stdout.strip().splitlines()
    assert len(answers) == 6, answers
    info, created, instructed, accepted, fetched = map(json.loads, answers[:5])
    assert set(info) == INFO_FIELDS and info["step"] == 2 and info["colors"] == list(grid.COLORS)
    assert set(created) == GAME_FIELDS and created["version"] == 0 and created["saved"] is False
    assert (created["items"], created["structure"], created["events"], created["pending"]) == (0, [], [], None)
    assert set(instructed) == GAME_FIELDS | {"predicted", "decode_ms"}
    assert instructed["version"] == 1 and instructed["saved"] is True
    assert instructed["events"] == [{"by": "architect", "text": "put a red block in the middle"}]
    predicted = instructed["predicted"]
    assert predicted and all(set(a) == {"type", "color", "x", "y", "z"} for a in predicted)
    actions = [grid.action_from_dict(a) for a in predicted]
    assert instructed["pending"] == {"item_id": f"{created['game_id']}:0", "actions": predicted,
                                     "decode_ms": instructed["decode_ms"]}
    assert accepted["version"] == 2 and accepted["pending"] is None and accepted["items"] == 1
    assert accepted["events"][1:] == [{"by": "model", "action": a} for a in predicted]
    assert accepted["structure"] == [grid.block_to_dict(b) for b in grid.as_blocks(grid.apply_sequence({}, actions))]
    assert fetched == accepted
    refused, status = answers[5].rsplit(" ", 1)
    assert status == "409" and "changed elsewhere" in json.loads(refused)["error"]
    # the answer's actions are the game's predictions.jsonl line, as written
    (line,) = (Path(accepted["folder"]) / "predictions.jsonl").read_text().splitlines()
    assert json.loads(line) == {"item_id": instructed["pending"]["item_id"], "actions": predicted}


@pytest.mark.skipif(browser.find_chromium() is None,
                    reason="no Chromium on PATH (apt-get install -y chromium, or set BAPJAX_CHROMIUM)")
def test_play_in_headless_chromium(served, tmp_path):
    """Types an instruction, waits for the predicted blocks (3D view and action list), accepts,
    places a block by clicking the scene, instructs again; then the saved folder itemizes to the
    two items played, `mdc stats`, `bapjax.evaluate` and `bapjax.report` read it. The screenshot
    goes to docs/img/play.png with BAPJAX_UPDATE_DOCS_IMG=1."""
    url, out, env = served
    shot = (REPO / "docs" / "img" / "play.png" if os.environ.get("BAPJAX_UPDATE_DOCS_IMG") == "1"
            else tmp_path / "play.png")
    done = "window.bapjaxPlay.pending && window.bapjaxPlay.shown === window.bapjaxPlay.pending.actions.length && !window.bapjaxPlay.busy"
    with browser.Browser() as page:
        page.open(url)
        assert page.wait_for("window.bapjaxPlay.ready || window.bapjaxPlay.start_error") is True
        empty = page.evaluate("window.bapjaxPlay.canvasStats()")
        assert empty["non_background"] > 0.1 * empty["width"] * empty["height"]  # the ground at least
        assert empty["pending_outline"] == 0

        def instruct(text):
            page.evaluate("document.getElementById('text').focus()")
            page.call("Input.insertText", text=text)
            assert page.evaluate("document.getElementById('text').value") == text
            page.evaluate("document.getElementById('send').click()")
            page.wait_for(done)
            return page.evaluate("window.bapjaxPlay.pending")

        first = instruct("put a red block in the middle")
        assert 1 <= len(first["actions"]) <= 6
        assert page.evaluate("document.querySelectorAll('#predicted-list li').length") == len(first["actions"])
        stats = page.evaluate("window.bapjaxPlay.canvasStats()")
        assert stats["colorful"] > 300 and stats["pending_outline"] > 50, stats
        assert page.evaluate("document.getElementById('status').textContent").startswith("the Builder would")
        if shot.parent.name == "img":
            page.evaluate("document.getElementById('text').value = 'now a blue one on top of it'")
        page.screenshot(shot)
        page.evaluate("document.getElementById('accept').click()")
        page.wait_for("!window.bapjaxPlay.pending && !window.bapjaxPlay.busy")
        structure = page.evaluate("window.bapjaxPlay.game.structure")
        assert len(structure) == sum(1 if a["type"] == "place" else -1 for a in first["actions"])

        # place one block by hand: a click on the ground where nothing stands, found on screen
        page.evaluate("document.getElementById('text').value = ''")
        page.evaluate("document.querySelector('.swatch[data-color=\"5\"]').click()")  # blue
        filled = {(b["x"], b["y"], b["z"]) for b in structure}
        target = None
        for x, z in [(x, z) for z in range(-3, 4) for x in range(-3, 4)]:
            if (x, 1, z) in filled:
                continue
            cx, cy = page.evaluate(f"window.bapjaxPlay.screenOf({x}, 0, {z})")
            if page.evaluate(f"JSON.stringify(window.bapjaxPlay.editAt({cx}, {cy}))") == json.dumps(
                    {"type": "place", "x": x, "y": 1, "z": z, "color": "blue"}, separators=(",", ":")):
                target = (x, z, cx, cy)
                break
        assert target, "no free ground cell in view"
        x, z, cx, cy = target
        version = page.evaluate("window.bapjaxPlay.game.version")
        for kind in ("mousePressed", "mouseReleased"):
            page.call("Input.dispatchMouseEvent", type=kind, x=cx, y=cy, button="left", buttons=1, clickCount=1)
        page.wait_for(f"window.bapjaxPlay.game.version > {version} && !window.bapjaxPlay.busy")
        assert {"x": x, "y": 1, "z": z, "color": "blue"} in page.evaluate("window.bapjaxPlay.game.structure")

        second = instruct("now a yellow one beside it")
        page.evaluate("document.getElementById('accept').click()")
        page.wait_for("!window.bapjaxPlay.pending && !window.bapjaxPlay.busy")
        assert page.evaluate("window.bapjaxPlay.errors") == []
        game = page.evaluate("window.bapjaxPlay.game")
    assert game["items"] == 2
    from PIL import Image

    with Image.open(shot) as image:
        assert image.size == (1400, 860)
        pixels = list(image.convert("RGB").crop((0, 60, 980, 760)).getdata())
    assert sum(max(p) - min(p) > 60 for p in pixels) > 500, "the screenshot's 3D view has no colored blocks"

    # the saved folder, read as a corpus
    stats = subprocess.run([sys.executable, "-m", "bapjax.corpus.mdc", "stats", f"--corpus={out}"], cwd=REPO, env=env,
                           capture_output=True, text=True, timeout=300)
    assert stats.returncode == 0, stats.stderr[-2000:]
    counts = json.loads(stats.stdout.strip().splitlines()[-1])["test"]
    assert counts["items"] == 2 and counts["games"] == 1
    items = mdc.load_corpus(out).split("test")
    hand = Action(grid.PLACE, 5, x, 1, z)
    assert [it.item_id for it in items] == [first["item_id"], second["item_id"]]
    assert jsonl.action_records(items[0].reference_actions) == first["actions"] + jsonl.action_records([hand])
    assert jsonl.action_records(items[1].reference_actions) == second["actions"]
    assert [t.text for t in items[1].dialogue][1:] == ["put a red block in the middle", "now a yellow one beside it"]

    predictions = tmp_path / "predictions.jsonl"
    predictions.write_text("".join(p.read_text() for p in sorted(out.rglob("predictions.jsonl"))))
    scored = subprocess.run([sys.executable, "-m", "bapjax.evaluate", f"--corpus={out}", "--split=test",
                             f"--predictions={predictions}", "--format=json"], cwd=REPO, env=env, capture_output=True,
                            text=True, timeout=300)
    assert scored.returncode == 0, scored.stderr[-2000:]
    report = json.loads(scored.stdout.strip().splitlines()[-1])
    expected = evaluator.evaluate_predictions(items, jsonl.read_predictions(predictions))
    assert report["counts"] == json.loads(json.dumps(expected["counts"])) and report["counts"]["items"] == 2
    assert report["micro"] == json.loads(json.dumps(expected["micro"]))
    _, scores, details = evaluator.evaluate_items(items, jsonl.read_predictions(predictions))
    per_item = [r["overall"] for r in evaluator.per_item_records(items, scores, details)]
    assert per_item[1] == 1.0 and per_item[0] < 1.0  # accepted as predicted / fixed by hand
    shown = subprocess.run([sys.executable, "-m", "bapjax.report", f"--predictions={predictions}",
                            f"--corpus={out}", "--split=test", f"--out={tmp_path / 'report'}"], cwd=REPO, env=env,
                           capture_output=True, text=True, timeout=300)
    assert shown.returncode == 0 and "2 items" in shown.stdout, shown.stderr[-2000:]


def test_a_negative_sample_count_is_named(tmp_path):
    done = subprocess.run([sys.executable, "-m", "bapjax.play", f"--checkpoint={tmp_path}", "--port=0", "--samples=-1",
                           f"--out={tmp_path / 'games'}"], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines()[-1] == "error: --samples: the number of samples must be an integer >= 0 (0: greedy only), got -1"
