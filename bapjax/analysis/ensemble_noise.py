"""How much of an ensemble's score is the luck of its draws, and what more draws buy: the same
members decoded once with S x K draws each, then combined as S disjoint sets of K draws, S/2 sets
of 2K, ... down to one set of all of them, each set exactly what `python -m bapjax.ensemble` gives.

    python -m bapjax.analysis.ensemble_noise RUN RUN [RUN ...] --samples 32 --sets 8 \
        [--temperature 0.8] [--sampler inverse_cdf] [--rules select:0.075,vote:0.15] \
        [--corpus @mdc] [--limit N] [--bootstrap 1000] [--seed 0] [--out results/ensemble_noise]

Each member (a finished training workdir) decodes the val and test splits once: its greedy pass
and draws 0 .. S*K - 1 (`ensemble.member_passes`; draw k is the same however many are decoded).
Set g of size n (n = K, 2K, 4K, ... while it divides S*K) pools every member's greedy pass and
draws g*n .. g*n + n - 1: the ensemble `python -m bapjax.ensemble --runs RUN,... --samples n
--first_draw g*n` decodes. On each set the rules are chosen on val as the command chooses them
(`ensemble.choose_combination` at `ensemble.COSTS` and `THRESHOLDS`, the command's defaults) and the test split is
combined with them; with `--rules` the two fixed rules are scored as well. Per size: each set's
val and test micro Overall fairer F1, the test SD over the sets split into item x set and the rest
(`bapjax.analysis.bootstrap.spread`): the decoding noise of one ensemble of these members, to
set against the spread between ensembles of different members (`collect_experiment`). Writes
OUT.json and OUT.md; the last line printed is the JSON.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

from bapjax import paths
from bapjax.analysis import add_spread_flags, bootstrap, finish
from bapjax.corpus import load, mdc
from bapjax.errors import UserError
from bapjax.evaluation import evaluator
from bapjax.training import decode, ensemble, mbr, run_eval


def sizes(samples: int, sets: int) -> list[int]:
    """The set sizes compared: `samples` times 1, 2, 4, ... while that many divide `sets`."""
    found, factor = [], 1
    while factor <= sets and sets % factor == 0:
        found.append(samples * factor)
        factor *= 2
    return found


def set_pool(members: list, passes: list[list[dict]], items: list, first: int, size: int) -> ensemble.Pool:
    """The pool of one set: each member's greedy pass and its draws `first` .. `first + size - 1` of
    `passes` (per member [greedy, draw 0, ...] of `items`), with each member's own decoding of them."""
    chosen = [[one[0], *one[1 + first:1 + first + size]] for one in passes]
    return ensemble.pool(chosen, [ensemble.member_alone(m, c, items) for m, c in zip(members, chosen)])


def counts_of(items: list, predictions: dict) -> tuple[dict, dict]:
    """(the v2 headline of `predictions`, their per-item fairer counts for `bootstrap.spread`)."""
    report, scores, _ = evaluator.evaluate_items(items, predictions, drop_infeasible=False)
    return evaluator.headline_f1(report), {"tp": scores.fair_tp, "n_pred": scores.n_pred, "n_ref": scores.n_ref}


def one_set(members, val_passes, test_passes, splits, first, size, rules) -> tuple[dict, dict]:
    """One set's row (its draws, the rules chosen on val, val and test scores; with `rules`, those
    of the fixed rules too, under "fixed") and its test counts per item ({"chosen": ..., "fixed": ...})."""
    val_pool, test_pool = (set_pool(members, p, splits[split], first, size)
                           for p, split in ((val_passes, "val"), (test_passes, "test")))
    choice = ensemble.choose_combination(val_pool, splits["val"], ensemble.COSTS, ensemble.THRESHOLDS)
    test, counts = counts_of(splits["test"], ensemble.combine_chosen(test_pool, choice, splits["test"]))
    row = {"first_draw": first, "draws": size, "val": choice["micro_overall"], "test": test,
           "rules": {kind: [choice[kind]["rule"], choice[kind]["value"]] for kind in mbr.BOARDS}}
    counts = {"chosen": counts}
    if rules:
        fixed = ensemble.fixed_combination(val_pool, splits["val"], rules)
        fixed_test, counts["fixed"] = counts_of(splits["test"], ensemble.combine_chosen(test_pool, fixed, splits["test"]))
        row["fixed"] = {"val": fixed["micro_overall"], "test": fixed_test}
    return row, counts


def markdown(summary: dict) -> str:
    pct = lambda v: f"{100 * v:.2f}"  # noqa: E731
    fixed = summary["rules"]
    lines = [f"{len(summary['members'])} members ({', '.join(summary['members'])}) decoded once with "
             f"{summary['sets'] * summary['samples']} draws each at temperature {summary['temperature'] or 'their own'}, "
             f"sampler {summary['sampler'] or 'their own'}; sets of n draws per member, disjoint; the rules chosen on "
             "MDC val per set" + (f", and the rules {fixed} fixed beforehand" if fixed else "") + ". Micro Overall "
             "fairer F1 (%); test SD over the sets, split into item x set (which items each set gets right) and the "
             "rest (`bootstrap.spread`):", ""]
    kinds = [("chosen", "rules chosen on val")] + ([("fixed", f"rules fixed ({fixed})")] if fixed else [])
    lines += ["| draws per member | sets | rules | val mean | test mean | test SD (item x set / rest) | "
              "val per set | test per set |", "|---:|---:|---|---:|---:|---:|---|---|"]
    for block in summary["sizes"]:
        for kind, label in kinds:
            rows = [r if kind == "chosen" else r["fixed"] for r in block["sets"]]
            tests = [r["test"]["micro_overall"] for r in rows]
            spread = (block.get("spread") or {}).get(kind)
            sd = (f"{pct(statistics.stdev(tests))}" + (f" ({pct(spread['interaction_sd'])} / {pct(spread['model_sd'])})"
                                                       if spread else "")) if len(tests) > 1 else "-"
            per_set = ", ".join(pct(t) + (f" ({r['rules']['EB'][0]} {r['rules']['EB'][1]:g} / {r['rules']['NEB'][0]} "
                                          f"{r['rules']['NEB'][1]:g})" if kind == "chosen" else "")
                                for t, r in zip(tests, block["sets"]))
            lines.append(f"| {block['draws']} | {len(rows)} | {label} | {pct(statistics.fmean(r['val'] for r in rows))} | "
                         f"{pct(statistics.fmean(tests))} | {sd} | {', '.join(pct(r['val']) for r in rows)} | {per_set} |")
    minutes = summary["minutes"]
    lines += ["", f"Decoding {minutes['decode']:.1f} min (every member, val and test, all draws at once), "
              f"choices and scoring {minutes['combine']:.1f} min."]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", nargs="+", help="finished training workdirs: the members (>= 2)")
    parser.add_argument("--samples", type=int, default=32, help="draws per member in the smallest sets (K)")
    parser.add_argument("--sets", type=int, default=4, help="disjoint sets of K draws (S >= 2): S*K draws decoded")
    parser.add_argument("--temperature", type=float, default=None, help="the draws' temperature (default: each "
                        "member's, as python -m bapjax.ensemble)")
    parser.add_argument("--sampler", choices=decode.SAMPLERS, default=None, help="how the draws pick each action "
                        "(default: each member's decode.json)")
    parser.add_argument("--rules", default=None, help="two rules fixed beforehand, EB_RULE:V,NEB_RULE:V "
                        "(as python -m bapjax.ensemble --rules), scored beside the choice on val")
    add_spread_flags(parser)
    args = parser.parse_args(argv)
    if len(args.runs) < 2:
        parser.error(f"{len(args.runs)} run given: an ensemble needs at least 2 members")
    if args.sets < 2 or args.samples < 1:
        parser.error(f"--sets {args.sets} --samples {args.samples}: expected at least 2 sets of at least 1 draw")
    if args.bootstrap < 1 or args.limit < 0 or (args.temperature is not None and args.temperature <= 0):
        parser.error("--bootstrap must be >= 1, --limit >= 0, --temperature > 0")
    for run in args.runs:
        if not (Path(run) / "config.json").is_file():
            parser.error(f"{run}: not a training workdir (no config.json)")
    try:
        rules = ensemble.parse_rules(args.rules.split(","), len(args.runs)) if args.rules else None
    except ValueError as err:
        parser.error(f"--rules {err}")
    command = "python -m bapjax.analysis.ensemble_noise " + " ".join(sys.argv[1:] if argv is None else argv)
    start = time.time()
    try:
        corpus = mdc.load_corpus(paths.mdc_path(args.corpus))
        splits = {split: load.first_items(corpus.split(split), args.limit) for split in ("val", "test")}
        members = [run_eval.RunDecoder.load(run) for run in args.runs]
        passes = {split: [] for split in splits}
        for split, items in splits.items():
            for i, member in enumerate(members):
                passes[split].append(ensemble.member_passes(member, items, args.sets * args.samples, args.temperature,
                                                            progress=True, sampler=args.sampler))
                print(f"{split}: member {i + 1}/{len(members)} decoded, {args.sets * args.samples} draws of "
                      f"{len(items)} items ({time.time() - start:.0f} s)", file=sys.stderr, flush=True)
    except UserError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    decoded = time.time()
    draws = bootstrap.draw(len(splits["test"]), {}, args.bootstrap, args.seed)
    blocks = []
    for size in sizes(args.samples, args.sets):
        rows, counts = [], []
        for first in range(0, args.sets * args.samples, size):
            row, item_counts = one_set(members, passes["val"], passes["test"], splits, first, size, rules)
            rows.append(row)
            counts.append(item_counts)
            print(f"{size} draws from {first}: val {100 * row['val']:.2f}, test "
                  f"{100 * row['test']['micro_overall']:.2f} ({time.time() - decoded:.0f} s)", file=sys.stderr,
                  flush=True)
        blocks.append({"draws": size, "sets": rows,
                       "spread": {kind: bootstrap.spread([c[kind] for c in counts], draws.items) for kind in counts[0]}
                       if len(rows) > 1 else None})
    summary = {"command": command, "members": list(args.runs), "samples": args.samples, "sets": args.sets,
               "temperature": args.temperature, "sampler": args.sampler, "rules": args.rules,
               "val_items": len(splits["val"]), "test_items": len(splits["test"]),
               "bootstrap": args.bootstrap, "seed": args.seed, "sizes": blocks,
               "minutes": {"decode": round((decoded - start) / 60, 2),
                           "combine": round((time.time() - decoded) / 60, 2)}}
    return finish(summary, markdown(summary), args.out)


if __name__ == "__main__":
    sys.exit(main())
