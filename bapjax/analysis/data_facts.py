"""Facts about the MDC training split behind the choice of one world encoding per item.

    python -m bapjax.analysis.data_facts [--config cpu_experiment:mc,0,once] [--split train] [--out results/data_facts.json]

* **Encodings per item**: teacher forcing encodes the world once per packed (item, step) row; the
  rows of a batch are its targets rounded up to `train.pack_multiple` (`builder.packed_size`),
  so rows / items over one shuffled pass of batch `train.batch_size` (the config's features: at
  most `features.max_actions` actions + STOP per item) is what the CNN runs per item today.
* **Recorded vs net actions** per item (`grid.net_actions`: a placement and a removal of the same
  block cancel), and the share of recorded actions that are steps which cancel out.
* **Where net placements lie**: for each net placement, the Chebyshev distance (max over x, y,
  z) from its cell to the nearest block of the structure before the item or the cell of an
  earlier recorded action of the item (any action before the last recorded placement of that
  block); placements with neither (the first block of an empty board) count as "no reference".
  Shares within 1 and within 3 cells (3: the reach of the 3-layer CNN).
* **Temporary supports**: a net placement is buildable without one if a chain of net
  placements links it to a cell the structure before the item supports (`grid.supported`:
  the ground or a face-neighbour); the rest need a temporary block (or one removed later).

Host-side plain Python over the items (no model). Writes --out (JSON with the command); the last
stdout line is the JSON.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import jax
import numpy as np

from bapjax import cli, paths
from bapjax.data import input_pipeline, sources
from bapjax.models import builder
from bapjax.text.vocab import Vocabulary
from bapjax.world import grid as G

REACH = (1, 3)  # Chebyshev radii reported


def chebyshev(a, b) -> int:
    return max(abs(a[0] - b[0]), abs(a[1] - b[1]), abs(a[2] - b[2]))


def placement_distances(item) -> list[int | None]:
    """For each net placement of the item: the Chebyshev distance to the nearest block of the
    structure before the item or earlier action's cell (None: neither exists)."""
    actions = list(item.reference_actions)
    net = G.net_actions(actions)
    prior = [(b.x, b.y, b.z) for b in item.prev_structure]
    out = []
    for action in sorted(a for a in net if a.type == G.PLACE):
        index = max(i for i, a in enumerate(actions) if a == action)  # its last recorded placement
        cell = (action.x, action.y, action.z)
        others = prior + [(a.x, a.y, a.z) for a in actions[:index]]
        out.append(min((chebyshev(cell, o) for o in others), default=None))
    return out


def unsupported_placements(item) -> int:
    """Net placements that no chain of net placements links to a cell the structure before the
    item supports (see the module docstring)."""
    net = G.net_actions(item.reference_actions)
    pending = {(a.x, a.y, a.z) for a in net if a.type == G.PLACE}
    structure = G.as_structure(item.prev_structure)
    grew = True
    while grew:
        grew = False
        for cell in sorted(pending):
            if G.supported(structure, *cell):
                structure[cell] = 1
                pending.discard(cell)
                grew = True
    return len(pending)


def encodings_per_item(items, config, seed: int = 0) -> dict:
    """Packed rows (world encodings) per item over one shuffled pass at the config's batch size, the
    pack rounding resolved for this process's default backend as training resolves it."""
    vocab = Vocabulary.build(items)
    feature_config = input_pipeline.FeatureConfig.from_config(config)
    features = input_pipeline.featurize_items(items, vocab, feature_config)
    batch_size, multiple = int(config.train.batch_size), int(config.train.pack_multiple)
    rounding = builder.resolve_pack_rounding(str(config.train.pack_rounding), jax.default_backend())
    iterator = input_pipeline.DataIterator(features, None, feature_config, batch_size, seed=seed, num_epochs=1)
    rows = targets = seen = 0
    for batch in iterator:
        rows += builder.packed_size(batch["action_mask"], batch["weight"], multiple, rounding=rounding)
        targets += int(builder.targets_per_row(batch["action_mask"], batch["weight"]).sum())
        seen += int((batch["weight"] > 0).sum())
    return {"batch_size": batch_size, "pack_multiple": multiple, "pack_rounding": rounding, "items": seen,
            "packed_rows_per_item": rows / seen, "targets_per_item": targets / seen,
            "truncated_items": int(features.truncated_actions)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default="cpu_experiment:mc,0,once",
                        help="batch size, pack multiple and features of the training run to describe: a config "
                             "file or an installed config's name, as train's --config")
    parser.add_argument("--corpus", default=paths.MDC, help="the MDC (default: found by bapjax.paths.mdc_path)")
    parser.add_argument("--split", default="train")
    parser.add_argument("--out", default="", help="write the JSON here too")
    args = parser.parse_args()
    start = time.time()
    config = cli.load_config(args.config)
    items = sources.items_from_flags(args.corpus, args.split)

    recorded = np.array([len(it.reference_actions) for it in items])
    net = np.array([len(G.net_actions(it.reference_actions)) for it in items])
    distances = [d for it in items for d in placement_distances(it)]
    known = [d for d in distances if d is not None]
    unsupported = np.array([unsupported_placements(it) for it in items])
    net_placements = len(distances)
    result = {
        "split": args.split, "items": len(items),
        "recorded_actions_per_item": round(float(recorded.mean()), 3),
        "net_actions_per_item": round(float(net.mean()), 3),
        "cancelling_share_of_recorded_actions": round(1 - float(net.sum() / recorded.sum()), 4),
        "net_placements": net_placements,
        "placements_without_reference": net_placements - len(known),
        **{f"placements_within_{r}": round(sum(d <= r for d in known) / net_placements, 4) for r in REACH},
        "placement_distance_histogram": {str(d): known.count(d) for d in sorted(set(known))},
        "placements_needing_support": round(float(unsupported.sum()) / net_placements, 4),
        "items_needing_support": round(float((unsupported > 0).mean()), 4),
        "encodings": encodings_per_item(items, config),
        "config": args.config,
    }
    result["command"] = "python -m bapjax.analysis.data_facts " + " ".join(sys.argv[1:])
    enc = result["encodings"]
    print(f"MDC {args.split}: {len(items)} items; {result['recorded_actions_per_item']:.2f} recorded, "
          f"{result['net_actions_per_item']:.2f} net actions per item "
          f"({100 * result['cancelling_share_of_recorded_actions']:.1f}% of recorded actions cancel out)", file=sys.stderr)
    print(f"net placements {net_placements}: within 1 cell of the prior structure or an earlier action "
          f"{100 * result['placements_within_1']:.1f}%, within 3 {100 * result['placements_within_3']:.1f}%, "
          f"no reference {result['placements_without_reference']}; needing a temporary support "
          f"{100 * result['placements_needing_support']:.1f}% of placements, "
          f"{100 * result['items_needing_support']:.1f}% of items", file=sys.stderr)
    print(f"teacher forcing at batch {enc['batch_size']}: {enc['packed_rows_per_item']:.2f} packed rows "
          f"(world encodings) per item, {enc['targets_per_item']:.2f} targets per item "
          f"({time.time() - start:.0f} s)", file=sys.stderr)
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
