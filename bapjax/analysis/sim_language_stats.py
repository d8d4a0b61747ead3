"""How close simulated dialogues are to the MDC's: vocabulary, line lengths, Builder poses.

    python -m bapjax.analysis.sim_language_stats [--items 1000] [--seed 0] [--corpus @mdc]

Generates (or reuses, through the bapjax cache) D_r, D_bs and D_ss with `--items` training items
each, and measures on the training split of each and of the MDC:

* word types of all chat (every game's final chat, tokenized as bapjax does), the share of MDC
  train word types the synthetic sets cover together, Builder-utterance word types;
* mean Architect line length (words, punctuation excluded) and chat lines per game;
* median eye-to-target distance (Builder eye = pose + 1.62 up; target = the centres of the cells
  of the item's net reference actions; per item the mean over cells, then the median over items);
* share of items whose Builder yaw is more than 30 degrees off the nearest axis;
* share of items where the Builder stands among blocks (a block of the item's start structure
  horizontally next to the feet or head cell, diagonals included).

The last line printed is JSON: {"mc": {...}, "r": {...}, "bs": {...}, "ss": {...}, "synthetic": {...}}.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

import numpy as np

from bapjax import paths
from bapjax.corpus import mdc
from bapjax.data import sources
from bapjax.sim import generate
from bapjax.text.tokenizer import tokenize
from bapjax.world import grid
from bapjax.world.items import ChatTurn


def _words(text: str) -> list[str]:
    return [t for t in tokenize(text) if any(ch.isalnum() for ch in t)]


def measure(items) -> dict:
    final_chat = {}
    for item in items:  # the longest history of a game holds all its chat so far
        chat = [e for e in item.history if isinstance(e, ChatTurn)]
        if len(chat) >= len(final_chat.get(item.game_id, ())):
            final_chat[item.game_id] = chat
    types, builder_types, lines, architect_lengths = set(), set(), 0, []
    for chat in final_chat.values():
        for turn in chat:
            if turn.text == "Mission has started.":
                continue
            words = _words(turn.text)
            types.update(words)
            lines += 1
            if turn.speaker == "Builder":
                builder_types.update(words)
            else:
                architect_lengths.append(len(words))
    distances, off_axis, among = [], 0, 0
    for item in items:
        pose = item.builder_pose
        eye = (pose.x, pose.y + grid.EYE_HEIGHT, pose.z)
        cells = [a.cell for a in grid.net_actions(item.reference_actions)]
        if cells:
            distances.append(float(np.mean([math.dist(eye, c) for c in cells])))
        deviation = abs((pose.yaw + 45.0) % 90.0 - 45.0)
        off_axis += deviation > 30.0
        feet = (math.floor(pose.x + 0.5), math.floor(pose.y + 0.5), math.floor(pose.z + 0.5))
        occupied = {tuple(b[:3]) for b in item.prev_structure}
        among += any((feet[0] + dx, feet[1] + dy, feet[2] + dz) in occupied
                     for dx in (-1, 0, 1) for dz in (-1, 0, 1) for dy in (0, 1) if (dx, dz) != (0, 0))
    n = max(len(items), 1)
    return {"items": len(items), "games": len(final_chat), "word_types": len(types),
            "builder_word_types": len(builder_types),
            "mean_architect_line_words": round(float(np.mean(architect_lengths)), 2) if architect_lengths else None,
            "lines_per_game": round(lines / max(len(final_chat), 1), 1),
            "median_eye_to_target": round(float(np.median(distances)), 2) if distances else None,
            "yaw_off_axis_over_30_share": round(off_axis / n, 4),
            "among_blocks_share": round(among / n, 4),
            "_types": types}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--items", type=int, default=1000, help="training items per simulator")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--corpus", default=paths.MDC, help="the MDC (default: found by bapjax.paths.mdc_path)")
    parser.add_argument("--out", help="also write the JSON (with the command and simulator version) here")
    args = parser.parse_args()
    results = {"mc": measure(mdc.load_corpus(args.corpus).split("train"))}
    for dataset in ("r", "bs", "ss"):
        root, _ = sources.generated_corpus(dataset, args.seed, (args.items, 0, 0), progress=False)
        results[dataset] = measure(mdc.load_corpus(root).split("train"))
    mdc_types = results["mc"]["_types"]
    together = set().union(*(results[d]["_types"] for d in ("r", "bs", "ss")))
    results["synthetic"] = {"word_types": len(together),
                            "mdc_word_type_coverage": round(len(together & mdc_types) / len(mdc_types), 4)}
    for values in results.values():
        values.pop("_types", None)
    header = ["set", "word types", "Builder word types", "Architect words/line", "lines/game",
              "median eye-to-target", "yaw >30 deg off an axis", "among blocks"]
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    for name in ("mc", "r", "bs", "ss"):
        v = results[name]
        print("| " + " | ".join(str(x) for x in (
            {"mc": "MDC train"}.get(name, f"D_{name}"), v["word_types"], v["builder_word_types"],
            v["mean_architect_line_words"], v["lines_per_game"], v["median_eye_to_target"],
            f"{100 * v['yaw_off_axis_over_30_share']:.1f}%", f"{100 * v['among_blocks_share']:.1f}%")) + " |")
    print(f"synthetic together: {results['synthetic']['word_types']} word types, "
          f"{100 * results['synthetic']['mdc_word_type_coverage']:.1f}% of MDC train types")
    if args.out:
        command = "python -m bapjax.analysis.sim_language_stats " + " ".join(sys.argv[1:])
        Path(args.out).write_text(json.dumps({**results, "command": command,
                                              "simulator_version": generate.SIMULATOR_VERSION}, indent=1) + "\n")
    print(json.dumps(results))


if __name__ == "__main__":
    main()
