"""Sampled decoding: an item's draws decoded together against one pass per draw, in one process.

    python benchmarks/bench_draws.py --checkpoint runs/ens/agg-full-m7 [--corpus @mdc] [--split test]
        [--samples 32] [--temperature 0.8] [--items 0] [--rounds 2] [--out results/bench_draws.json]

What a run's decoding with draws costs (`decode.candidates`: the greedy pass, then `--samples` draws
at `--temperature`, as the run's chosen STOP rule decodes them; what `bapjax.ensemble` asks of each
member): "together" decodes all draws of an item in one slot pool, its text and start world encoded
once for all of them (`decode.predict_draws`); "apart" decodes one pass per draw
(`decode.predict_items(sample=k)` for each k), each pass encoding every item again. Both take the
same greedy pass. A warm-up of each (untimed) compiles the call shapes; then `--rounds` timed rounds
alternate the two, so load on the machine hits both alike; the best round of each is reported, as
items/s (split items times 1 + samples passes, per second) and their ratio. The two must decode
the same sequences, draw by draw: the script checks it and fails otherwise.

The last line is JSON: {"checkpoint", "split", "items", "samples", "temperature", "together_s",
"apart_s", "together_item_passes_per_s", "apart_item_passes_per_s", "ratio", "identical"}; with
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
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--out", default="", help="also write the JSON line here, with the command")
    args = parser.parse_args(argv)
    if args.samples < 1 or args.rounds < 1:
        raise SystemExit("error: --samples and --rounds must be >= 1")

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
    decode_fn = decoder.decode_fn_for(settings)
    common = dict(decode_fn=decode_fn, features=features)

    def together():
        return decode.candidates(run.model, run.params, items, run.vocab, fc, settings, **common)

    def apart():
        greedy = decode.predict_items(run.model, run.params, items, run.vocab, fc, settings, **common)
        return [greedy] + [decode.predict_items(run.model, run.params, items, run.vocab, fc, settings, sample=k,
                                                **common) for k in range(args.samples)]

    ways = {"together": together, "apart": apart}
    passes = {name: fn() for name, fn in ways.items()}  # warm-up: every call shape compiled
    identical = passes["together"] == passes["apart"]
    if not identical:
        raise SystemExit(f"error: {args.checkpoint}: the draws decoded together differ from one pass per draw")
    best = {name: float("inf") for name in ways}
    for round_ in range(args.rounds):
        for name, fn in ways.items():
            start = time.perf_counter()
            fn()
            best[name] = min(best[name], time.perf_counter() - start)
            print(f"round {round_ + 1}/{args.rounds} {name}: {best[name]:.1f} s (best so far)", flush=True)
    item_passes = len(items) * (1 + args.samples)
    result = {"checkpoint": str(args.checkpoint), "split": args.split, "items": len(items), "samples": args.samples,
              "temperature": args.temperature, "together_s": round(best["together"], 2),
              "apart_s": round(best["apart"], 2),
              "together_item_passes_per_s": round(item_passes / best["together"], 1),
              "apart_item_passes_per_s": round(item_passes / best["apart"], 1),
              "ratio": round(best["apart"] / best["together"], 3), "identical": identical}
    print(f"{len(items)} {args.split} items x (greedy + {args.samples} draws at T {args.temperature:g}): together "
          f"{result['together_s']} s, apart {result['apart_s']} s: {result['ratio']}x", flush=True)
    if args.out:
        out = dict(result, command="python benchmarks/bench_draws.py " + " ".join(sys.argv[1:] if argv is None
                                                                                  else argv))
        Path(args.out).write_text(json.dumps(out, indent=1) + "\n")
    print(json.dumps(result))
    return result


if __name__ == "__main__":
    main()
