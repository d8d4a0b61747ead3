"""Sampled decoding: an item's draws decoded together against one pass per draw, and the two samplers.

    python benchmarks/bench_draws.py --checkpoint runs/ens/agg-full-m7 [--corpus @mdc] [--split test]
        [--samples 32] [--temperature 0.8] [--items 0] [--rounds 1] [--out results/bench_draws.json]

What a run's decoding with draws costs (`decode.candidates`: the greedy pass, then `--samples` draws
at `--temperature`, with the run's chosen STOP rule; what `bapjax.ensemble` asks of each member),
three ways, in one process:

* "apart_gumbel": one pass per draw (`decode.predict_items(sample=k)` for each k), each pass
  encoding every item again, Gumbel-max draws: how decoding ran before draws were decoded together;
* "together_gumbel": all draws of an item in one slot pool, its text and start world encoded once
  (`decode.predict_draws`), the same Gumbel-max draws: it must decode the same sequences as
  "apart_gumbel", draw by draw (checked; the script fails otherwise);
* "together": decoded together with today's sampler (`decode.SAMPLERS[0]`, "inverse_cdf").

Each is run once untimed (compiling its call shapes), then `--rounds` timed rounds alternate them, so
load on the machine hits all alike; the best round of each is reported as item-passes per second
(split items times 1 + samples, per second) with the ratios: "sharing" (apart_gumbel /
together_gumbel), "sampler" (together_gumbel / together) and "total" (apart_gumbel / together).

The last line is JSON: {"checkpoint", "split", "items", "samples", "temperature", "seconds": {way: s},
"item_passes_per_s": {way: rate}, "ratio": {"sharing", "sampler", "total"}, "identical": true}; with
`--out` it is also written there with the command.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--checkpoint", required=True, help="a finished run's workdir")
    parser.add_argument("--corpus", default="@mdc", help="the MDC ('@mdc': $BAPJAX_MDC)")
    parser.add_argument("--split", default="test")
    parser.add_argument("--samples", type=int, default=32)
    parser.add_argument("--temperature", type=float, default=0.8)
    parser.add_argument("--items", type=int, default=0, help="the split's first N items (0: all)")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--out", default="", help="also write the JSON line here, with the command")
    args = parser.parse_args(argv)
    if args.samples < 1 or args.rounds < 1:
        parser.error("--samples and --rounds must be >= 1")
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this tree's bapjax, not an installed one

    from bapjax.corpus import load
    from bapjax.data import input_pipeline
    from bapjax.training import decode, run_eval

    decoder = run_eval.RunDecoder.load(args.checkpoint)
    run = decoder.run
    settings = decoder.settings.replace(samples=args.samples, temperature=args.temperature)
    items = load.load_split(args.corpus, args.split)
    if args.items:
        items = items[:args.items]
    fc = decoder.feature_config
    features = input_pipeline.featurize_items(items, run.vocab, fc)
    common = dict(features=features)
    gumbel = settings.replace(sampler="gumbel")
    today = settings.replace(sampler=decode.SAMPLERS[0])

    def together(way_settings):
        fn = decoder.decode_fn_for(way_settings)
        return lambda: decode.candidates(run.model, run.params, items, run.vocab, fc, way_settings, decode_fn=fn,
                                         **common)

    def apart(way_settings):
        fn = decoder.decode_fn_for(way_settings)

        def passes():
            return [decode.predict_items(run.model, run.params, items, run.vocab, fc, way_settings, sample=k,
                                         decode_fn=fn, **common) for k in [None, *range(args.samples)]]
        return passes

    ways = {"apart_gumbel": apart(gumbel), "together_gumbel": together(gumbel), "together": together(today)}
    passes = {name: fn() for name, fn in ways.items()}  # warm-up: every call shape compiled
    if passes["together_gumbel"] != passes["apart_gumbel"]:
        raise SystemExit(f"error: {args.checkpoint}: the draws decoded together differ from one pass per draw")
    best = {name: float("inf") for name in ways}
    for round_ in range(args.rounds):
        for name, fn in ways.items():
            start = time.perf_counter()
            fn()
            best[name] = min(best[name], time.perf_counter() - start)
            print(f"round {round_ + 1}/{args.rounds} {name}: {best[name]:.1f} s (best so far)", flush=True)
    item_passes = len(items) * (1 + args.samples)
    ratio = {"sharing": best["apart_gumbel"] / best["together_gumbel"],
             "sampler": best["together_gumbel"] / best["together"], "total": best["apart_gumbel"] / best["together"]}
    result = {"checkpoint": str(args.checkpoint), "split": args.split, "items": len(items), "samples": args.samples,
              "temperature": args.temperature, "seconds": {k: round(v, 2) for k, v in best.items()},
              "item_passes_per_s": {k: round(item_passes / v, 1) for k, v in best.items()},
              "ratio": {k: round(v, 3) for k, v in ratio.items()}, "identical": True}
    print(f"{len(items)} {args.split} items x (greedy + {args.samples} draws at T {args.temperature:g}): "
          + ", ".join(f"{k} {v:.1f} s" for k, v in best.items())
          + f"; sharing {ratio['sharing']:.2f}x, sampler {ratio['sampler']:.2f}x, total {ratio['total']:.2f}x",
          flush=True)
    if args.out:
        out = dict(result, command="python benchmarks/bench_draws.py " + " ".join(sys.argv[1:] if argv is None
                                                                                  else argv))
        Path(args.out).write_text(json.dumps(out, indent=1) + "\n")
    print(json.dumps(result))
    return result


if __name__ == "__main__":
    main()
