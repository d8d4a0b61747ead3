"""The ensemble rules that score best on the val items of several ensembles together.

    python -m bapjax.analysis.ensemble_rules results/runs/ens2-agg-t08-s0 ... results/runs/ens2-agg-t08-s7 \
        --out results/ensemble_rules_agg_t08

Each ensemble (`python -m bapjax.ensemble`) chooses its two rules (one for the items on an empty board,
one for the others) on its own MDC val decoding: 1,331 items, about 370 reference net actions of them on
an empty board, so a choice among a dozen rules follows its val draws. Here every rule each ensemble
scored on val (its ensemble.json's "candidates", with their fairer counts per kind of board) is summed
over the ensembles, and the pair of rules is chosen on all their val decodings together
(`bapjax.training.ensemble.pooled_choice`): a rule to fix beforehand for the next ensembles of the same
kind (`python -m bapjax.ensemble ... --rules EB_RULE:VALUE,NEB_RULE:VALUE`). Printed: the best pairs on the
pooled val, and each ensemble's own choice beside the pooled one, both on its own val items. Test
predictions play no part.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from bapjax import analysis
from bapjax.training import ensemble


def rule_text(rule: dict | tuple) -> str:
    name, value = (rule["rule"], rule["value"]) if isinstance(rule, dict) else rule
    return f"{name}:{value:g}"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("ensembles", nargs="+", help="folders of `python -m bapjax.ensemble` (their ensemble.json)")
    parser.add_argument("--top", type=int, default=8, help="pairs of rules listed")
    parser.add_argument("--out", default="", help="write OUT.json and OUT.md")
    args = parser.parse_args(argv)
    choices, names = [], []
    for folder in args.ensembles:
        path = Path(folder) / "ensemble.json"
        try:
            record = json.loads(path.read_text())
            choice = record["choice"]
            if choice.get("fixed"):
                raise KeyError("its rules were fixed beforehand: it scored no others")
            for row in choice["candidates"]:
                row["counts"]["EB"], row["counts"]["NEB"]  # noqa: B018 (the fields the pooling reads)
        except FileNotFoundError:
            parser.exit(2, f"error: {path}: no such file (a finished `python -m bapjax.ensemble` folder)\n")
        except (ValueError, KeyError, TypeError) as err:
            parser.exit(2, f"error: {path}: not an ensemble's record with every rule's val counts ({err})\n")
        choices.append(choice)
        names.append(Path(folder).name)
    try:
        pooled = ensemble.pooled_choice(choices)
    except ValueError:
        parser.exit(2, "error: the ensembles share no rule they all scored on val\n")
    own = []
    for name, choice in zip(names, choices):
        counts = {(row["rule"], row["value"]): row["counts"] for row in choice["candidates"]}
        at_pooled = ensemble.micro_f1([counts[(pooled["EB"]["rule"], pooled["EB"]["value"])]["EB"],
                                       counts[(pooled["NEB"]["rule"], pooled["NEB"]["value"])]["NEB"]])
        own.append({"ensemble": name, "own": [rule_text(choice["EB"]), rule_text(choice["NEB"])],
                    "own_val": choice["micro_overall"], "pooled_val": at_pooled})
    lines = [f"{len(choices)} ensembles; the rules of highest micro Overall fairer F1 on their val items together "
             f"(EB: items on an empty board; NEB: the others):", "",
             "| EB rule | NEB rule | pooled val micro Overall |", "|---|---|---:|"]
    lines += [f"| {rule_text(eb)} | {rule_text(neb)} | {100 * f1:.2f} |" for f1, eb, neb in pooled["ranking"][:args.top]]
    lines += ["", "| ensemble | its own choice (EB, NEB) | its val, own choice | its val, pooled choice |",
              "|---|---|---:|---:|"]
    lines += [f"| {row['ensemble']} | {', '.join(row['own'])} | {100 * row['own_val']:.2f} | "
              f"{100 * row['pooled_val']:.2f} |" for row in own]
    fixed = f"{rule_text(pooled['EB'])},{rule_text(pooled['NEB'])}"
    lines += ["", f"Fix them with: python -m bapjax.ensemble ... --rules {fixed}"]
    summary = {"command": "python -m bapjax.analysis.ensemble_rules " + " ".join(sys.argv[1:] if argv is None
                                                                                else argv),
               "ensembles": names, "rules": fixed, "pooled_val": pooled["micro_overall"],
               "ranking": [{"EB": rule_text(eb), "NEB": rule_text(neb), "pooled_val": f1}
                           for f1, eb, neb in pooled["ranking"][:args.top]],
               "per_ensemble": own}
    return analysis.finish(summary, "\n".join(lines), args.out or None)


if __name__ == "__main__":
    sys.exit(main())
