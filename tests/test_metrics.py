"""bapjax.metrics against a plain-Python oracle (loops over rotations and offsets, Counters).

The oracle below is deliberately written from the definitions in DESIGN.md ("BAP v2
evaluation") without reusing bapjax.metrics or bapjax.actions: it applies sequences to dicts,
cancels inverse actions itself, enumerates every alignment in tie-break order, and measures
structure distance as a symmetric difference. ``benchmarks/bench_evaluate.py`` times it.
"""

from __future__ import annotations

import itertools
from collections import Counter

import numpy as np
import pytest

from bapjax import metrics
from bapjax.grid import PLACE, REMOVE, Action

# ---- plain-Python oracle ---------------------------------------------------------------------

LO, HI, Y_LO, Y_HI = -5, 5, 1, 9


def o_rotate(x, z, r):
    """Quarter turns about the center column: r=1 maps (x, z) to (-z, x)."""
    return [(x, z), (-z, x), (-x, -z), (z, -x)][r]


def o_alignments():
    """All (r, dx, dz) in tie-break order: the identity first, then r, dx, dz ascending."""
    yield (0, 0, 0)
    for r in range(4):
        for dx in range(-10, 11):
            for dz in range(-10, 11):
                if (r, dx, dz) != (0, 0, 0):
                    yield (r, dx, dz)


def o_move(x, z, alignment):
    r, dx, dz = alignment
    rx, rz = o_rotate(x, z, r)
    return rx + dx, rz + dz


def o_inside(x, z):
    return LO <= x <= HI and LO <= z <= HI


def o_feasible(structure, action):
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


def o_apply(prev, actions, check):
    """(kept actions, final structure); infeasible steps are skipped when ``check``."""
    s = dict(prev)
    kept = []
    for a in actions:
        if check and not o_feasible(s, a):
            continue
        t, c, x, y, z = a
        if t == PLACE:
            s[(x, y, z)] = c
        else:
            s.pop((x, y, z), None)
        kept.append(a)
    return kept, s


def o_net(actions):
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


def o_distance(s1, s2):
    b1 = {(cell, c) for cell, c in s1.items()}
    b2 = {(cell, c) for cell, c in s2.items()}
    return len(b1 ^ b2)


def o_move_structure(s, alignment):
    out = {}
    for (x, y, z), c in s.items():
        nx, nz = o_move(x, z, alignment)
        if not o_inside(nx, nz):
            return None
        out[(nx, y, nz)] = c
    return out


def o_move_actions(actions, alignment):
    out = set()
    for t, c, x, y, z in actions:
        nx, nz = o_move(x, z, alignment)
        if not o_inside(nx, nz):
            return None
        out.add((t, c, nx, y, nz))
    return out


def o_fair_alignment(s_m, s_h):
    best, best_d = None, None
    for al in o_alignments():
        moved = o_move_structure(s_m, al)
        if moved is None:
            continue
        d = o_distance(moved, s_h)
        if best_d is None or d < best_d:
            best, best_d = al, d
    return best


def o_shape_alignment(p, h):
    best, best_m = None, None
    for al in o_alignments():
        moved = o_move_actions(p, al)
        if moved is None:
            continue
        m = len(moved & h)
        if best_m is None or m > best_m:
            best, best_m = al, m
    return best


def o_tp(p, h, key):
    cp, ch = Counter(key(a) for a in p), Counter(key(a) for a in h)
    return sum((cp & ch).values())


def o_f1(tp, n_p, n_h):
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


def oracle_item(prev, predicted, reference, in_multiple):
    """Per-item counts {metric: (tp, |P|, |H|)} and the chosen alignments."""
    kept, s_m = o_apply(prev, predicted, check=True)
    _, s_h = o_apply(prev, reference, check=False)
    p, h = o_net(kept), o_net(reference)
    fair = o_fair_alignment(s_m, s_h) if in_multiple else (0, 0, 0)
    p_fair = o_move_actions(p, fair)
    shape = o_shape_alignment(p, h)
    p_shape = o_move_actions(p, shape)
    counts = {name: o_tp(p_fair, h, KEYS[name]) for name in ("type", "color", "location")}
    counts["overall"] = o_tp(p_fair, h, KEYS["strict"])
    counts["shape"] = len(p_shape & h)
    counts["strict"] = len(p & h)
    return {"tp": counts, "n_pred": len(p), "n_ref": len(h), "fair": fair, "shape_al": shape}


def oracle_tables(cases):
    """cases: list of (prev, predicted, reference, in_multiple, is_eb) -> report tables."""
    rows = [(oracle_item(prev, pr, ref, m), eb) for prev, pr, ref, m, eb in cases]
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
                o_f1(r["tp"][metric], r["n_pred"], r["n_ref"]) for r in sel) / len(sel)
    tp = sum(r["tp"]["strict"] for r, _ in rows)
    total = sum(r["n_pred"] + r["n_ref"] for r, _ in rows)
    out["strict_micro"] = 1.0 if total == 0 else 2 * tp / total
    return out, [r for r, _ in rows]


# ---- random cases ----------------------------------------------------------------------------


def random_feasible_sequence(rng, structure, length, place_bias=0.75, region=5):
    """A feasible random sequence from ``structure`` (placements near existing blocks)."""
    s = dict(structure)
    out = []
    for _ in range(length):
        if s and rng.random() > place_bias:
            cell = list(s)[rng.integers(len(s))]
            out.append(Action(REMOVE, s.pop(cell), *cell))
            continue
        for _ in range(20):
            if s and rng.random() < 0.8:
                x, y, z = list(s)[rng.integers(len(s))]
                a, b, d = [(1, 0, 0), (-1, 0, 0), (0, 1, 0), (0, 0, 1), (0, 0, -1)][rng.integers(5)]
                cell = (x + a, y + b, z + d)
            else:
                cell = (int(rng.integers(-region, region + 1)), 1, int(rng.integers(-region, region + 1)))
            color = int(rng.integers(1, 7))
            action = Action(PLACE, color, *cell)
            if LO <= cell[0] <= HI and Y_LO <= cell[1] <= Y_HI and LO <= cell[2] <= HI and o_feasible(s, action):
                s[cell] = color
                out.append(action)
                break
    return out


def moved_sequence(actions, alignment):
    out = []
    for t, c, x, y, z in actions:
        nx, nz = o_move(x, z, alignment)
        out.append(Action(t, c, nx, y, nz))
    return out


def random_case(rng):
    """(prev, predicted, reference, in_multiple, is_eb) of one of several kinds."""
    eb = rng.random() < 0.5
    prev = {} if eb else dict(
        (a.cell, a.color) for a in random_feasible_sequence(rng, {}, int(rng.integers(1, 12)), 1.0))
    reference = random_feasible_sequence(rng, prev, int(rng.integers(0, 9)), region=int(rng.integers(1, 6)))
    kind = rng.integers(6)
    if kind == 0:  # unrelated prediction
        predicted = random_feasible_sequence(rng, prev, int(rng.integers(0, 9)))
    elif kind == 1:  # the reference rotated and shifted (kept only when it stays feasible)
        alignment = (int(rng.integers(4)), int(rng.integers(-4, 5)), int(rng.integers(-4, 5)))
        predicted = moved_sequence(reference, alignment)
    elif kind == 2:  # color swap
        perm = rng.permutation(6) + 1
        predicted = [Action(a.type, int(perm[a.color - 1]), a.x, a.y, a.z) for a in reference]
    elif kind == 3:  # partial reference plus extras
        keep = [a for a in reference if rng.random() < 0.6]
        _, s = o_apply(prev, keep, check=True)
        predicted = keep + random_feasible_sequence(rng, s, int(rng.integers(0, 4)))
    elif kind == 4:  # exact copy
        predicted = list(reference)
    else:  # empty
        predicted = []
    # predictions may be infeasible (e.g. moved copies): drop those steps like --drop_infeasible
    in_multiple = eb and rng.random() < 0.8 or (not eb and rng.random() < 0.1)
    return prev, predicted, reference, in_multiple, eb


def metrics_counts(cases):
    """bapjax.metrics on the same cases (drop_infeasible semantics)."""
    multiple = [n for n, case in enumerate(cases) if case[3]]
    prevs = [[(x, y, z, c) for (x, y, z), c in case[0].items()] for case in cases]
    pred_sets, sources, _ = metrics.predicted_net_actions_batch(
        prevs, [case[1] for case in cases], drop_infeasible=True, structure_needed=multiple)
    ref_sets, targets = [], {}
    for n, (prev, predicted, reference, in_multiple, _) in enumerate(cases):
        h, s_h = metrics.reference_net_actions(prev, reference)
        ref_sets.append(h)
        if in_multiple:
            targets[n] = s_h
    scores = metrics.score_items(pred_sets, ref_sets, sources, targets)
    return scores, metrics.tables(scores, np.array([c[4] for c in cases]))


def assert_tables_close(got, want):
    for kind in ("micro", "macro"):
        for group in want[kind]:
            for metric, value in want[kind][group].items():
                g = got[kind][group][metric]
                if value is None:
                    assert g is None, (kind, group, metric)
                else:
                    assert abs(g - value) < 1e-9, (kind, group, metric, g, value)
    assert abs(got["strict_micro"] - want["strict_micro"]) < 1e-9


def check_agreement(cases):
    scores, tables = metrics_counts(cases)
    want_tables, want_items = oracle_tables(cases)
    for n, want in enumerate(want_items):
        assert scores.n_pred[n] == want["n_pred"] and scores.n_ref[n] == want["n_ref"], n
        got_tp = {m: int(scores.tp(m)[n]) for m in ("type", "color", "location", "shape", "overall", "strict")}
        assert got_tp == want["tp"], (n, cases[n], got_tp, want["tp"])
        assert metrics.transform_params(scores.shape_index[n]) == want["shape_al"], n
        if cases[n][3]:
            assert metrics.transform_params(scores.fair_index[n]) == want["fair"], n
    assert_tables_close(tables, want_tables)
    return scores


def test_random_cases_agree_with_oracle():
    rng = np.random.default_rng(1234)
    check_agreement([random_case(rng) for _ in range(1500)])


@pytest.mark.slow
def test_many_random_cases_agree_with_oracle():
    rng = np.random.default_rng(99)
    check_agreement([random_case(rng) for _ in range(10000)])


def test_large_sets_use_bigger_pads():
    """Sets above 16 and 64 elements take other padded shapes; still exact."""
    rng = np.random.default_rng(5)
    cases = []
    for length in (20, 40, 70):
        ref = random_feasible_sequence(rng, {}, length)
        pred = moved_sequence(ref, (1, 1, 0)) + random_feasible_sequence(rng, {}, 5)
        cases.append(({}, pred, ref, True, True))
        cases.append(({}, random_feasible_sequence(rng, {}, length), ref, False, True))
    check_agreement(cases)


# ---- hand-made cases -------------------------------------------------------------------------


def u_shape(color=2):
    """An orange 3 x 3 U on the ground (the paper's Figure 7), built in a corner."""
    cells = [(-4, 1, -4), (-4, 1, -3), (-4, 1, -2), (-3, 1, -2), (-2, 1, -2), (-2, 1, -3), (-2, 1, -4)]
    return [Action(PLACE, color, *c) for c in cells]


def item_result(prev, predicted, reference, in_multiple=True):
    p, s_m, _ = metrics.predicted_net_actions(prev, predicted)
    h, s_h = metrics.reference_net_actions(prev, reference)
    sources = {0: s_m} if in_multiple else {}
    targets = {0: s_h} if in_multiple else {}
    scores = metrics.score_items([p], [h], sources, targets)
    return {m: float(v[0]) for m, v in scores.per_item().items()}, scores


def test_rotated_shifted_eb_structure_gets_fairer_one_and_strict_below_one():
    reference = u_shape()
    for alignment in [(1, -3, 2), (2, -6, -5), (3, 0, -5), (0, 4, 1)]:
        predicted = moved_sequence(reference, alignment)
        f1, scores = item_result({}, predicted, reference)
        assert f1["overall"] == 1.0 and f1["location"] == 1.0 and f1["shape"] == 1.0
        assert f1["strict"] < 1.0
        assert (f1["type"], f1["color"]) == (1.0, 1.0)


def test_unique_items_are_not_aligned():
    reference = u_shape()
    predicted = moved_sequence(reference, (0, 3, 0))
    f1, _ = item_result({}, predicted, reference, in_multiple=False)
    assert f1["overall"] == f1["strict"] == 0.0
    assert f1["shape"] == 1.0


def test_single_block_at_wrong_height_scores_zero_shape():
    """Alignments are horizontal only (paper Tables 10-11)."""
    prev = {(0, 1, 0): 1}
    reference = [Action(PLACE, 3, 0, 2, 0)]
    predicted = [Action(PLACE, 3, 1, 1, 0)]
    f1, _ = item_result(prev, predicted, reference, in_multiple=False)
    assert f1["shape"] == 0.0 and f1["type"] == 1.0 and f1["color"] == 1.0


def test_example_d_shape_at_least_strict():
    """Paper Example D (remove the left red, place it on the right): shape >= strict, unlike
    the paper's 0.0 for the best model."""
    prev = {(0, 1, 0): 4, (0, 2, 0): 4, (-1, 2, 0): 1}
    reference = [Action(REMOVE, 1, -1, 2, 0), Action(PLACE, 1, 1, 2, 0)]
    predicted = [Action(REMOVE, 1, -1, 2, 0), Action(PLACE, 1, 0, 3, 0)]
    f1, _ = item_result(prev, predicted, reference, in_multiple=False)
    assert f1["strict"] == 0.5 and f1["overall"] == 0.5
    assert f1["shape"] >= 0.5


def test_empty_sets():
    f1, _ = item_result({}, [], [])
    assert all(v == 1.0 for v in f1.values())
    f1, _ = item_result({}, [], u_shape())
    assert all(v == 0.0 for v in f1.values())
    f1, _ = item_result({}, u_shape(), [])
    assert all(v == 0.0 for v in f1.values())
    # place then remove the same block: net nothing
    f1, _ = item_result({}, [Action(PLACE, 1, 0, 1, 0), Action(REMOVE, 1, 0, 1, 0)], [])
    assert f1["overall"] == 1.0


def test_ties_prefer_identity_then_lowest_rotation_and_offset():
    # A single block matches under many alignments; the identity is kept when it matches.
    reference = [Action(PLACE, 1, 2, 1, 3)]
    _, scores = item_result({}, list(reference), reference)
    assert metrics.transform_params(scores.shape_index[0]) == (0, 0, 0)
    # No alignment matches anything: the identity still wins the tie.
    _, scores = item_result({}, [Action(PLACE, 2, 2, 1, 3)], reference)
    assert metrics.transform_params(scores.fair_index[0]) == (0, 0, 0)
    # Off by (1, 0): the first matching alignment in (r, dx, dz) order is r = 0, dx = 1, dz = 0.
    _, scores = item_result({}, [Action(PLACE, 1, 1, 1, 3)], reference)
    assert metrics.transform_params(scores.fair_index[0]) == (0, 1, 0)
    # A symmetric 2-block bar: a 180-degree turn plus offset also matches; rotation 0 wins.
    reference = [Action(PLACE, 1, 0, 1, 0), Action(PLACE, 1, 1, 1, 0)]
    predicted = [Action(PLACE, 1, 3, 1, 2), Action(PLACE, 1, 4, 1, 2)]
    _, scores = item_result({}, predicted, reference)
    assert metrics.transform_params(scores.fair_index[0]) == (0, -3, -2)


def test_alignment_must_keep_blocks_in_region():
    # A bar along x spanning the whole region cannot be turned by 90 degrees... but a long bar
    # along z near the edge only fits when turned. The reference bar lies along x.
    reference = [Action(PLACE, 5, x, 1, -5) for x in range(-5, 6)]
    predicted = [Action(PLACE, 5, 5, 1, z) for z in range(-5, 6)]
    f1, scores = item_result({}, predicted, reference)
    assert f1["overall"] == 1.0
    rotation, dx, dz = metrics.transform_params(scores.fair_index[0])
    for a in predicted:
        x, z = metrics.rotate_xz(a.x, a.z, rotation)
        assert -5 <= x + dx <= 5 and -5 <= z + dz <= 5


def test_recolored_cell_location_multiset():
    prev = {(0, 1, 0): 1}
    reference = [Action(REMOVE, 1, 0, 1, 0), Action(PLACE, 2, 0, 1, 0)]
    predicted = [Action(REMOVE, 1, 0, 1, 0), Action(PLACE, 3, 0, 1, 0)]
    f1, _ = item_result(prev, predicted, reference, in_multiple=False)
    assert f1["location"] == 1.0 and f1["strict"] == 0.5 and f1["type"] == 1.0 and f1["color"] == 0.5


def test_invariants_on_random_cases():
    """Shape >= strict per item; Type/Color equal with and without alignment."""
    rng = np.random.default_rng(7)
    cases = [random_case(rng) for _ in range(400)]
    scores, _ = metrics_counts(cases)
    f1 = scores.per_item()
    assert np.all(f1["shape"] >= f1["strict"] - 1e-12)
    unaligned = [(c[0], c[1], c[2], False, c[4]) for c in cases]
    plain, _ = metrics_counts(unaligned)
    np.testing.assert_array_equal(plain.type_tp, scores.type_tp)
    np.testing.assert_array_equal(plain.color_tp, scores.color_tp)
    np.testing.assert_array_equal(plain.fair_tp, plain.strict_tp)


def test_predicted_net_actions_feasibility():
    prev = {(0, 1, 0): 1}
    with pytest.raises(metrics.InfeasibleActionError, match="item X: step 2 of 2"):
        metrics.predicted_net_actions(prev, [Action(PLACE, 2, 1, 1, 0), Action(PLACE, 2, 3, 3, 3)],
                                      where="item X")
    net, s, dropped = metrics.predicted_net_actions(
        prev, [Action(PLACE, 2, 1, 1, 0), Action(PLACE, 2, 3, 3, 3), Action(REMOVE, 4, 0, 1, 0)],
        drop_infeasible=True)
    assert dropped == [1, 2] and net == {Action(PLACE, 2, 1, 1, 0)}
    # inventory: the 21st block of one color is infeasible
    seq = [Action(PLACE, 1, x, 1, z) for x, z in itertools.product(range(-5, 6), range(-5, -3))]
    _, _, dropped = metrics.predicted_net_actions({}, seq[:21], drop_infeasible=True)
    assert dropped == [20]


def test_batch_walk_matches_dict_walk():
    """The byte-grid batch walk agrees with the dict walk (and so with the grid rules) on net
    sets, dropped steps and errors, including odd colors, off-grid cells and full inventories."""
    rng = np.random.default_rng(11)
    prevs, seqs = [], []
    for _ in range(600):
        prev = dict((a.cell, a.color) for a in random_feasible_sequence(rng, {}, int(rng.integers(0, 25)), 1.0))
        seq = random_feasible_sequence(rng, prev, int(rng.integers(0, 6)))
        for _ in range(int(rng.integers(0, 4))):
            seq.insert(int(rng.integers(len(seq) + 1)), Action(
                int(rng.integers(2)), int(rng.integers(0, 8)), int(rng.integers(-6, 7)),
                int(rng.integers(0, 11)), int(rng.integers(-6, 7))))
        prevs.append(prev)
        seqs.append(seq)
    full = {(x, 1, z): 1 for x in range(-5, 6) for z in range(-5, -3)}  # 22 red blocks
    prevs.append(full)
    seqs.append([Action(PLACE, 1, 0, 1, 0), Action(REMOVE, 1, -5, 1, -5), Action(PLACE, 1, 0, 1, 0)])
    blocks = [[(x, y, z, c) for (x, y, z), c in p.items()] for p in prevs]
    nets, _, dropped = metrics.predicted_net_actions_batch(blocks, seqs, drop_infeasible=True)
    for n, (prev, seq) in enumerate(zip(prevs, seqs)):
        net, _, want_dropped = metrics.predicted_net_actions(prev, seq, drop_infeasible=True)
        assert nets[n] == net and dropped[n] == want_dropped, n
        try:
            metrics.predicted_net_actions(prev, seq)
            strict_error = None
        except metrics.InfeasibleActionError as err:
            strict_error = str(err)
        try:
            metrics.predicted_net_actions_batch([blocks[n]], [seq], names=["X"])
            assert strict_error is None, n
        except metrics.InfeasibleActionError as err:
            assert strict_error is not None and str(err).split(": step")[1] == strict_error.split(": step")[1]
    assert dropped[-1] == [0, 2]  # 22 red blocks: no red placement even after one removal


def test_feasibility_matches_grid_rules():
    from bapjax import grid

    rng = np.random.default_rng(3)
    for _ in range(300):
        prev = dict((a.cell, a.color) for a in random_feasible_sequence(rng, {}, int(rng.integers(0, 15)), 1.0))
        action = Action(int(rng.integers(2)), int(rng.integers(1, 7)), int(rng.integers(-5, 6)),
                        int(rng.integers(1, 4)), int(rng.integers(-5, 6)))
        _, _, dropped = metrics.predicted_net_actions(prev, [action], drop_infeasible=True)
        assert (dropped == []) == grid.is_feasible(prev, action)


def test_transform_index_round_trip():
    for r, dx, dz in itertools.product(range(4), range(-10, 11), range(-10, 11)):
        assert metrics.transform_params(metrics.transform_index(r, dx, dz)) == (r, dx, dz)
    assert metrics.transform_index(0, 0, 0) == metrics.IDENTITY
    assert [metrics.rotate_xz(1, 0, r) for r in range(4)] == [(1, 0), (0, 1), (-1, 0), (0, -1)]
