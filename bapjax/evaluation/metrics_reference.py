"""The BAP v2 metrics as plain, readable Python: the definitions, in code.

Written from the paper (sections 3-4) and docs/evaluation.md ("What is measured") without reusing
`bapjax.evaluation.metrics` or `bapjax.world.actions`: sequences are applied to dicts, inverse actions are
cancelled one by one, every alignment (4 quarter turns about the centre column x 21 x 21
horizontal offsets) is enumerated in tie-break order, structure distance is a symmetric
difference, and F1s are counted with Counters. It is slow (seconds for the MDC test split)
and exists to be read and to check the fast path: `tests/test_metrics.py` asserts that
`bapjax.evaluation.metrics` (batched alignment search, padded byte walk) agrees with it on random and
hand-made cases, and `benchmarks/bench_evaluate.py` times both.

Actions are (type, color, x, y, z) tuples (`bapjax.world.grid.Action` works); structures are
{(x, y, z): color} dicts.

* `item_counts(prev, predicted, reference, in_multiple)`: one item's true positives per metric,
  |P| and |H| (net action sets), and the alignments chosen (fairer: the one that best maps the
  predicted structure onto the reference structure, only for items in M; shape: the one that
  maximizes matched actions).
* `tables(cases)`: the micro / macro tables over EB / NEB / Overall and the legacy strict micro F1.
"""

from __future__ import annotations

from collections import Counter

from bapjax.world.grid import PLACE, REMOVE

LO, HI, Y_LO, Y_HI = -5, 5, 1, 9  # the build region (x, z in [-5, 5], y in [1, 9])


def rotate(x, z, r):
    """Quarter turns about the center column: r=1 maps (x, z) to (-z, x)."""
    return [(x, z), (-z, x), (-x, -z), (z, -x)][r]


def alignments():
    """All (r, dx, dz) in tie-break order: the identity first, then r, dx, dz ascending."""
    yield (0, 0, 0)
    for r in range(4):
        for dx in range(-10, 11):
            for dz in range(-10, 11):
                if (r, dx, dz) != (0, 0, 0):
                    yield (r, dx, dz)


def move(x, z, alignment):
    r, dx, dz = alignment
    rx, rz = rotate(x, z, r)
    return rx + dx, rz + dz


def inside(x, z):
    return LO <= x <= HI and LO <= z <= HI


def is_feasible(structure, action):
    t, c, x, y, z = action
    if not (LO <= x <= HI and Y_LO <= y <= Y_HI and LO <= z <= HI):
        return False
    if t == REMOVE:
        return structure.get((x, y, z)) == c
    if (x, y, z) in structure:
        return False
    if list(structure.values()).count(c) >= 20:
        return False
    return y == 1 or any((x + a, y + b, z + d) in structure for a, b, d in
                         [(1, 0, 0), (-1, 0, 0), (0, 1, 0), (0, -1, 0), (0, 0, 1), (0, 0, -1)])


def apply_actions(prev, actions, check):
    """(kept actions, final structure); infeasible steps are skipped when ``check``."""
    s = dict(prev)
    kept = []
    for a in actions:
        if check and not is_feasible(s, a):
            continue
        t, c, x, y, z = a
        if t == PLACE:
            s[(x, y, z)] = c
        else:
            s.pop((x, y, z), None)
        kept.append(a)
    return kept, s


def net_actions(actions):
    """Cancel each action against a later inverse (same cell and color); the rest as a set."""
    pending = []
    for a in actions:
        t, c, x, y, z = a
        inverse = (1 - t, c, x, y, z)
        if inverse in pending:
            pending.remove(inverse)
        else:
            pending.append(tuple(a))
    return set(pending)


def distance(s1, s2):
    b1 = {(cell, c) for cell, c in s1.items()}
    b2 = {(cell, c) for cell, c in s2.items()}
    return len(b1 ^ b2)


def move_structure(s, alignment):
    out = {}
    for (x, y, z), c in s.items():
        nx, nz = move(x, z, alignment)
        if not inside(nx, nz):
            return None
        out[(nx, y, nz)] = c
    return out


def move_actions(actions, alignment):
    out = set()
    for t, c, x, y, z in actions:
        nx, nz = move(x, z, alignment)
        if not inside(nx, nz):
            return None
        out.add((t, c, nx, y, nz))
    return out


def fair_alignment(s_m, s_h):
    best, best_d = None, None
    for al in alignments():
        moved = move_structure(s_m, al)
        if moved is None:
            continue
        d = distance(moved, s_h)
        if best_d is None or d < best_d:
            best, best_d = al, d
    return best


def shape_alignment(p, h):
    best, best_m = None, None
    for al in alignments():
        moved = move_actions(p, al)
        if moved is None:
            continue
        m = len(moved & h)
        if best_m is None or m > best_m:
            best, best_m = al, m
    return best


def true_positives(p, h, key):
    cp, ch = Counter(key(a) for a in p), Counter(key(a) for a in h)
    return sum((cp & ch).values())


def f1(tp, n_p, n_h):
    if n_p == 0 and n_h == 0:
        return 1.0
    if n_p == 0 or n_h == 0 or tp == 0:
        return 0.0
    precision, recall = tp / n_p, tp / n_h
    return 2 * precision * recall / (precision + recall)


KEYS = {
    "strict": lambda a: a,
    "type": lambda a: a[0],
    "color": lambda a: (a[0], a[1]),
    "location": lambda a: (a[2], a[3], a[4]),
}


def item_counts(prev, predicted, reference, in_multiple):
    """Per-item counts {metric: (tp, |P|, |H|)} and the chosen alignments."""
    kept, s_m = apply_actions(prev, predicted, check=True)
    _, s_h = apply_actions(prev, reference, check=False)
    p, h = net_actions(kept), net_actions(reference)
    fair = fair_alignment(s_m, s_h) if in_multiple else (0, 0, 0)
    p_fair = move_actions(p, fair)
    shape = shape_alignment(p, h)
    p_shape = move_actions(p, shape)
    counts = {name: true_positives(p_fair, h, KEYS[name]) for name in ("type", "color", "location")}
    counts["overall"] = true_positives(p_fair, h, KEYS["strict"])
    counts["shape"] = len(p_shape & h)
    counts["strict"] = len(p & h)
    return {"tp": counts, "n_pred": len(p), "n_ref": len(h), "fair": fair, "shape_al": shape}


def tables(cases):
    """cases: list of (prev, predicted, reference, in_multiple, is_eb) -> report tables."""
    rows = [(item_counts(prev, pr, ref, m), eb) for prev, pr, ref, m, eb in cases]
    out = {"micro": {}, "macro": {}}
    for group in ("EB", "NEB", "Overall"):
        sel = [r for r, eb in rows if group == "Overall" or (group == "EB") == eb]
        out["micro"][group], out["macro"][group] = {}, {}
        for metric in ("type", "color", "location", "shape", "overall"):
            if not sel:
                out["micro"][group][metric] = out["macro"][group][metric] = None
                continue
            tp = sum(r["tp"][metric] for r in sel)
            n_p = sum(r["n_pred"] for r in sel)
            n_h = sum(r["n_ref"] for r in sel)
            out["micro"][group][metric] = 1.0 if n_p + n_h == 0 else 2 * tp / (n_p + n_h)
            out["macro"][group][metric] = sum(
                f1(r["tp"][metric], r["n_pred"], r["n_ref"]) for r in sel) / len(sel)
    tp = sum(r["tp"]["strict"] for r, _ in rows)
    total = sum(r["n_pred"] + r["n_ref"] for r, _ in rows)
    out["strict_micro"] = 1.0 if total == 0 else 2 * tp / total
    return out, [r for r, _ in rows]


def tables_agree(got: dict, want: dict, tolerance: float = 1e-9) -> bool:
    """Whether two reports (``tables`` here, or ``bapjax.evaluate``'s) hold the same micro and
    macro cells (None where a group is empty) and legacy strict micro F1, within ``tolerance``."""
    for kind in ("micro", "macro"):
        for group, cells in want[kind].items():
            for metric, value in cells.items():
                other = got[kind][group][metric]
                if (value is None) != (other is None) or (value is not None and abs(other - value) > tolerance):
                    return False
    return abs(got["strict_micro"] - want["strict_micro"]) <= tolerance
