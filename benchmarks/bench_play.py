"""Benchmark: how fast the play page's server answers an instruction (bapjax.play), over HTTP.

From the repository root (this tree's bapjax):

    python -m benchmarks.bench_play --checkpoint runs/play-bench --make_run [--rounds 10] [--out results/bench_play.json]

Starts ``python -m bapjax.play --checkpoint RUN --port 0`` (a free port, games into a temporary
folder), makes one game and times `--rounds` instruction round trips (POST .../instruction, from
sending the request to the whole answer read: the item built from the game's log, featurized,
decoded, the log and predictions written), each followed by an untimed undo so every round
decodes the same game. Reports the median, min and max in ms, the server's own decoding time
(``decode_ms``) and the actions decoded per round; the last line is JSON (also written to --out).

`--make_run` first trains RUN when it does not exist: the CPU experiment's model
(``configs/cpu_experiment.py:mc``: `common.cpu_frame_model`; `cpu_film_model` when
results/bench_play.json was measured; its features and decoding limits) for
20 steps on the MDC training games (no augmentation, no simulated sets: only a checkpoint of the
right size is needed, speed does not depend on training), with ``eval.min_actions`` set to its
``max_actions`` (20) so every instruction decodes the longest sequence the run allows: the worst
case (the trained CPU runs predict ~3 actions per item, docs/results.md).
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
INSTRUCTIONS = [
    "put a red block in the middle", "build a row of three blue blocks on the left side",
    "now stack two yellow blocks on top of the red one", "remove the top yellow block",
    "place a green block to the right of the blue row", "make a purple tower four blocks high in the corner",
    "put an orange block on each end of the blue row", "build an L shape out of green blocks",
    "add two red blocks in front of you", "take away the orange blocks and put purple ones there",
]


def make_run(run: Path) -> None:
    """The CPU experiment's model, 20 steps on the MDC train games, decoding 20 actions always."""
    import configs
    from bapjax.training import loop

    config = configs.load("configs/cpu_experiment.py:mc")
    for name in [n for n in config.data.sources if n != "mc"]:
        del config.data.sources[name]
    mc = config.data.sources.mc
    mc.augment.enabled = False
    mc.max_val_items = 64
    config.train.update(dict(max_steps=20, eval_every_steps=20, log_every_steps=10))
    config.eval.update(dict(final_splits=(), stop_thresholds=(), val_decode_items=-1,
                            min_actions=config.eval.max_actions))
    loop.train_and_evaluate(config, run)


def request(address, method: str, path: str, body=None):
    conn = http.client.HTTPConnection(*address, timeout=120)
    conn.request(method, path, body=None if body is None else json.dumps(body).encode(),
                 headers={"Content-Type": "application/json"})
    response = conn.getresponse()
    answer = json.loads(response.read())
    conn.close()
    if response.status != 200:
        raise RuntimeError(f"{method} {path}: {response.status} {answer}")
    return answer


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--checkpoint", required=True, help="training workdir to serve")
    parser.add_argument("--make_run", action="store_true", help="train --checkpoint first if it does not exist")
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--out", default=None, help="also write the JSON here")
    args = parser.parse_args()
    run = Path(args.checkpoint)
    if args.make_run and not (run / "config.json").exists():
        start = time.perf_counter()
        make_run(run)
        print(f"trained {run} in {time.perf_counter() - start:.0f} s", flush=True)

    with tempfile.TemporaryDirectory(prefix="bench-play-") as tmp:
        started = time.perf_counter()
        server = subprocess.Popen([sys.executable, "-m", "bapjax.play", f"--checkpoint={run}", "--port=0",
                                   f"--out={Path(tmp) / 'games'}"], cwd=REPO, stdout=subprocess.PIPE,
                                  stderr=subprocess.STDOUT, text=True)
        try:
            log = []
            for line in server.stdout:
                log.append(line)
                found = re.search(r"serving (http://\S+)", line)
                if found:
                    break
            else:
                raise SystemExit("the server did not start:\n" + "".join(log[-20:]))
            ready_s = time.perf_counter() - started
            threading.Thread(target=lambda: [None for _ in server.stdout], daemon=True).start()
            url = urllib.parse.urlsplit(found.group(1))
            address = (url.hostname, url.port)
            info = request(address, "GET", "/api/info")
            game = request(address, "POST", "/api/games", {})
            pose = game["pose"]
            rounds = []
            for n in range(args.rounds):
                text = INSTRUCTIONS[n % len(INSTRUCTIONS)]
                start = time.perf_counter()
                answer = request(address, "POST", f"/api/games/{game['game_id']}/instruction",
                                 {"version": game["version"], "text": text, "pose": pose})
                elapsed = 1000 * (time.perf_counter() - start)
                rounds.append({"ms": round(elapsed, 1), "decode_ms": answer["decode_ms"],
                               "actions": len(answer["predicted"])})
                print(f"round {n + 1}/{args.rounds}: {elapsed:.0f} ms (decoding {answer['decode_ms']:.0f} ms, "
                      f"{len(answer['predicted'])} actions)", flush=True)
                game = request(address, "POST", f"/api/games/{game['game_id']}/undo", {"version": answer["version"]})
        finally:
            server.terminate()
            server.wait(30)
    times = [r["ms"] for r in rounds]
    result = {
        "command": " ".join(["python -m benchmarks.bench_play", *sys.argv[1:]]),
        "what": "instruction round trips over HTTP to `python -m bapjax.play` (item from the log, decode, log written)",
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f} at the end",
        "run": {"checkpoint": str(run), "step": info["step"], "parameters": info["parameters"], "decode": info["decode"]},
        "server_ready_s": round(ready_s, 1), "warm_up_ms": info["warm_up_ms"],
        "rounds": len(rounds), "median_ms": round(statistics.median(times), 1), "min_ms": min(times),
        "max_ms": max(times), "median_decode_ms": round(statistics.median(r["decode_ms"] for r in rounds), 1),
        "actions_per_round": sorted({r["actions"] for r in rounds}),
        "per_round": rounds,
    }
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps(result))


if __name__ == "__main__":
    main()
