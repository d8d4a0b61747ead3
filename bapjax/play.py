"""Play the Architect: a local web page to instruct a trained Builder (`bapjax.pages.play_server`).

    python -m bapjax.play --checkpoint runs/cpu [--port 8000] [--host 127.0.0.1] [--out DIR] [--games_split test]

Every game is written as MDC data under --out (default ``$BAPJAX_CACHE/play-games``, the same
folder from any directory; its first line names it); docs/play.md describes the page and its
HTTP API.
"""

from __future__ import annotations

import time

from absl import flags, logging

from bapjax import cli
from bapjax.decoding import DecodeSettings
from bapjax.errors import UserError
from bapjax.pages.play_server import PlayServer, games_folder, make_server

FLAGS = flags.FLAGS


def define_flags() -> None:
    cli.flag("string", "checkpoint", None, "Training workdir (or its checkpoints/best or /latest) to play with, "
             "or `pretrained`: the builder bapjax ships.")
    cli.flag("integer", "port", 8000, "Port to listen on (0: any free port; the URL is printed).")
    cli.flag("string", "host", "127.0.0.1", "Address to listen on (127.0.0.1: this machine only; the server has "
             "no login, so another address shows the games to whoever reaches it).")
    cli.flag("string", "out", None, "Folder the games are written to (MDC layout; created; default "
             "$BAPJAX_CACHE/play-games, i.e. ~/.cache/bapjax/play-games when $BAPJAX_CACHE is unset).")
    cli.flag("string", "games_split", "test", "The split the games are listed under in splits.json (train, val, test).")
    cli.flag("integer", "samples", None, "Draws per request for the minimum-Bayes-risk choice (default: the run's "
             "decode.json; 0: greedy, one decoding pass per request).")


def main(argv) -> int:
    if len(argv) > 1:
        raise UserError(f"unexpected arguments: {' '.join(argv[1:])}")
    if not FLAGS.checkpoint:
        raise UserError("--checkpoint RUN is required (a training workdir)")
    if not 0 <= FLAGS.port <= 65535:
        raise UserError(f"--port {FLAGS.port}: expected 0 to 65535")
    DecodeSettings.check_flags(FLAGS.samples)
    out = games_folder(FLAGS.out, FLAGS.games_split)  # checked and made ready before the run loads
    cli.enable_compilation_cache()
    logging.set_verbosity(logging.WARNING)  # Orbax's notes on restoring; the server logs its requests
    start = time.perf_counter()
    server = make_server(None, FLAGS.host, FLAGS.port)  # the address first: a taken port is named at once
    print(f"games are written to {out} (split {FLAGS.games_split})", flush=True)
    try:
        play = PlayServer(FLAGS.checkpoint, out, FLAGS.games_split, samples=FLAGS.samples)
    except BaseException:
        server.server_close()
        raise
    server.RequestHandlerClass.play = play
    host, port = server.server_address[:2]
    shown = f"[{host}]" if ":" in host else host
    settings = play.decoder.settings
    # The run's loader has printed "loaded <run> step N" (as for predict and report); this line
    # adds what serving it chose, without naming the run a second time.
    print(f"ready in {time.perf_counter() - start:.1f} s: {play.meta['parameters']:,} parameters; "
          f"{settings.describe()}, at most {settings.max_actions} actions; "
          f"a first item decoded in {play.warm_ms:.0f} ms", flush=True)
    print(f"serving http://{shown}:{port}/  (Ctrl-C stops)", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        print("stopped", flush=True)
    finally:
        server.server_close()
    return 0


if __name__ == "__main__":
    cli.run(main, define_flags)
