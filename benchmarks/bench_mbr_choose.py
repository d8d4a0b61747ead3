"""The minimum-Bayes-risk choice among an ensemble's pooled passes: `mbr.choose` (each net action
counted once over the draws) against the same utility summed draw by draw (`mbr.choose_pairwise`: `mbr.utility` for each
candidate against every other draw), on real passes.

    python benchmarks/bench_mbr_choose.py --runs runs/ens/agg-full-m7,runs/ens/agg-full-m8 [--corpus @mdc]
        [--split val] [--items 150] [--samples 64] [--temperature 0.8] [--out results/bench_mbr_choose.json]

The members decode the first `--items` items of the split once (greedy pass and `--samples` draws each,
`ensemble.member_passes`, untimed); then for every item and every cost of `ensemble.COSTS` (what
`bapjax.ensemble`'s rule "select" tries on val) both forms choose among the pooled passes (the
members' greedy passes first, `ensemble.pool`). They must choose the same candidate every time (the
script fails otherwise); their summed seconds give the ratio pairwise / counted. The last line is
JSON: {"runs", "split", "items", "samples", "candidates", "choices", "seconds": {"pairwise",
"counted"}, "ratio", "identical": true}; with `--out` also written there with the command.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", required=True, help="finished training workdirs, comma-separated: the members")
    parser.add_argument("--corpus", default="@mdc", help="the MDC ('@mdc': $BAPJAX_MDC)")
    parser.add_argument("--split", default="val")
    parser.add_argument("--items", type=int, default=150, help="the split's first N items")
    parser.add_argument("--samples", type=int, default=64, help="draws per member")
    parser.add_argument("--temperature", type=float, default=0.8)
    parser.add_argument("--out", default=None)
    args = parser.parse_args(argv)
    if args.items < 1 or args.samples < 2:
        parser.error("--items must be >= 1 and --samples >= 2")
    from bapjax import paths
    from bapjax.corpus import mdc
    from bapjax.training import ensemble, mbr, run_eval

    items = list(mdc.load_corpus(paths.mdc_path(args.corpus)).split(args.split))[:args.items]
    members = [run_eval.RunDecoder.load(run) for run in args.runs.split(",")]
    pooled = ensemble.pool([ensemble.member_passes(m, items, args.samples, args.temperature) for m in members])
    seconds = {"pairwise": 0.0, "counted": 0.0}
    choices = 0
    for item in items:
        candidates = [one[item.item_id] for one in pooled.passes]
        for cost in ensemble.COSTS:
            began = time.perf_counter()
            slow = mbr.choose_pairwise(candidates, cost, draws_from=pooled.draws_from)
            middle = time.perf_counter()
            fast = mbr.choose(candidates, cost, draws_from=pooled.draws_from)
            seconds["pairwise"] += middle - began
            seconds["counted"] += time.perf_counter() - middle
            if slow != fast:
                sys.exit(f"error: {item.item_id} at cost {cost}: the counted choice {fast} differs from the "
                         f"pairwise one {slow}")
            choices += 1
    result = {"runs": args.runs.split(","), "split": args.split, "items": len(items), "samples": args.samples,
              "candidates": len(pooled.passes), "choices": choices,
              "seconds": {k: round(v, 3) for k, v in seconds.items()},
              "ratio": round(seconds["pairwise"] / seconds["counted"], 2), "identical": True}
    print(f"{choices} choices among {len(pooled.passes)} passes: pairwise {seconds['pairwise']:.2f} s, counted "
          f"{seconds['counted']:.2f} s ({result['ratio']}x), the same choice every time", file=sys.stderr)
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        command = "python benchmarks/bench_mbr_choose.py " + " ".join(sys.argv[1:] if argv is None else argv)
        Path(args.out).write_text(json.dumps({"command": command, **result}, indent=1) + "\n")
    print(json.dumps(result))
    return result


if __name__ == "__main__":
    main()
