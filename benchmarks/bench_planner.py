"""Benchmark: Builder planner (plans/s) and target-structure simulator (structures/s).

From the repository root (this tree's bapjax; the random start/goal pairs are the tests',
`tests.test_sim_planner.random_pair`):

    python -m benchmarks.bench_planner [--n 2000] [--seed 0]

Workloads (one process, plain Python/NumPy):
  planner  - whole 3-shape structures from the empty board (D_bs targets);
           - per-instruction steps: a partial build plus 1-6 more cells of the structure in
             shape order (what the dialogue simulators ask for, one call per instruction);
           - random start/goal pairs with removals, recolors and floating blocks;
  structures - sample_shape_structure with 2 (D_ss) and 3 (D_bs) shapes; grow_random_structure
             with 20 blocks (D_r); and the NumPy translation search against the plain-Python
             reference search of the tests (ratio measured in the same run).
Every plan is checked with plan_is_valid outside the timed loop.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from bapjax.sim.planner import extra_actions, plan_actions, plan_is_valid
from bapjax.sim.shapes import sample_shape
from bapjax.sim.structures import grow_random_structure, sample_shape_structure, touches, touching_translations
from bapjax.world import grid
from tests.test_sim_planner import random_pair


def _rate(label: str, n: int, seconds: float, unit: str, extra: str = "") -> float:
    rate = n / seconds
    print(f"  {label:<44} {rate:10,.0f} {unit}/s  ({n} in {seconds:.2f} s){extra}")
    return rate


def bench_planner(n: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    print("planner (plan_actions):")
    targets = [sample_shape_structure(rng, 3).blocks for _ in range(n)]
    start = time.perf_counter()
    plans = [plan_actions({}, t) for t in targets]
    seconds = time.perf_counter() - start
    assert all(plan_is_valid({}, t, p) for t, p in zip(targets, plans))
    extra = np.mean([extra_actions({}, t, p) for t, p in zip(targets, plans)])
    size = np.mean([len(t) for t in targets])
    _rate("3-shape structure from empty", n, seconds, "plans",
          f", {size:.1f} blocks, {extra:.2f} extra actions/plan")

    steps = []
    for t in targets:
        cells = list(t)
        cut = int(rng.integers(0, len(cells)))
        k = int(rng.integers(1, 7))
        partial = {c: t[c] for c in cells[:cut]}
        goal = {c: t[c] for c in cells[: cut + k]}
        steps.append((partial, goal, cells[cut: cut + k]))
    start = time.perf_counter()
    plans = [plan_actions(s, g, order=o) for s, g, o in steps]
    seconds = time.perf_counter() - start
    assert all(plan_is_valid(s, g, p) for (s, g, _), p in zip(steps, plans))
    _rate("one instruction (1-6 cells, in order)", n, seconds, "plans")

    pairs = [random_pair(rng) for _ in range(n)]
    start = time.perf_counter()
    plans = [plan_actions(s, g) for s, g in pairs]
    seconds = time.perf_counter() - start
    assert all(plan_is_valid(s, g, p) for (s, g), p in zip(pairs, plans))
    extra = np.mean([extra_actions(s, g, p) for (s, g), p in zip(pairs, plans)])
    _rate("random pair (removals, recolors, floaters)", n, seconds, "plans",
          f", {extra:.2f} extra actions/plan")
    start = time.perf_counter()
    for (s, g), p in zip(pairs, plans):
        plan_is_valid(s, g, p)
    _rate("  (for scale: plan_is_valid replay)", n, time.perf_counter() - start, "plans")


def _plain_translations(rel, structure):
    found = set()
    for tx in range(-12, 13):
        for ty in range(-10, 11):
            for tz in range(-12, 13):
                cells = [(x + tx, y + ty, z + tz) for x, y, z in rel]
                if not all(grid.in_region(*c) for c in cells) or any(c in structure for c in cells):
                    continue
                if touches(cells, structure):
                    found.add((tx, ty, tz))
    return found


def bench_structures(n: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    print("target structures:")
    for shapes, kinds, label in ((2, ("row", "diagonal", "plane"), "D_ss: 2 shapes of row/diagonal/plane"),
                                 (3, None, "D_bs: 3 shapes of all six kinds")):
        start = time.perf_counter()
        for _ in range(n):
            if kinds:
                sample_shape_structure(rng, shapes, kinds)
            else:
                sample_shape_structure(rng, shapes)
        _rate(label, n, time.perf_counter() - start, "structures")
    start = time.perf_counter()
    for _ in range(n):
        grow_random_structure(rng, 20)
    _rate("D_r: grow 20 blocks", n, time.perf_counter() - start, "structures")

    cases = []
    for _ in range(20):
        structure = sample_shape_structure(rng, 2).blocks
        shape = sample_shape(rng)
        cases.append((np.array(shape.cells) - np.array(shape.cells[0]), structure))
    start = time.perf_counter()
    for _ in range(10):
        for rel, structure in cases:
            touching_translations(rel, structure)
    fast = _rate("translation search, NumPy", 10 * len(cases), time.perf_counter() - start, "searches")
    start = time.perf_counter()
    for rel, structure in cases[:5]:
        _plain_translations([tuple(int(v) for v in c) for c in rel], structure)
    plain = _rate("translation search, plain Python reference", 5, time.perf_counter() - start, "searches")
    print(f"  ratio NumPy / plain: {fast / plain:,.0f}x")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=2000)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    bench_planner(args.n, args.seed)
    bench_structures(args.n, args.seed)


if __name__ == "__main__":
    main()
