"""Elementary shapes and the target-structure simulator."""

from __future__ import annotations

import numpy as np
import pytest

from bapjax.sim.shapes import DEFAULT_SIZE_BOUNDS, SHAPE_TYPES, Shape, make_shape, sample_shape, shape_geometry
from bapjax.sim.structures import (
    ShapeStructure,
    StructureError,
    connected_components,
    constraint_violations,
    grow_random_structure,
    sample_shape_structure,
    touches,
    touching_translations,
)
from bapjax.world import grid


def expected_size(shape: Shape) -> int:
    p = shape.params
    return {
        "row": lambda: p["length"],
        "diagonal": lambda: p["length"],
        "T": lambda: p["bar"] + p["stem"],
        "L": lambda: p["arm1"] + p["arm2"] - 1,
        "U": lambda: p["base"] + 2 * p["arm"],
        "plane": lambda: p["width"] * p["depth"],
    }[shape.kind]()


def adjacent(a, b, edge_ok=True) -> bool:
    d = sorted(abs(u - v) for u, v in zip(a, b))
    return d == [0, 0, 1] or (edge_ok and d == [0, 1, 1])


def test_hand_made_geometry():
    x, y, z, down = (1, 0, 0), (0, 1, 0), (0, 0, 1), (0, -1, 0)
    # A T standing upside down: bar of 3 on top, one-block stem hanging below; built stem first.
    cells = shape_geometry("T", {"u": x, "v": down, "bar": 3, "stem": 1})
    assert cells == [(0, -1, 0), (0, 0, 0), (1, 0, 0), (-1, 0, 0)]
    # A flat L: 3 along +z (corner at the origin), 2 along +x.
    cells = shape_geometry("L", {"u": z, "v": x, "arm1": 3, "arm2": 2})
    assert set(cells) == {(0, 0, 0), (0, 0, 1), (0, 0, 2), (1, 0, 0)}
    # A vertical U opening upwards: base of 3 along x, arms of 2.
    cells = shape_geometry("U", {"u": x, "v": y, "base": 3, "arm": 2})
    assert set(cells) == {(0, 0, 0), (1, 0, 0), (2, 0, 0), (0, 1, 0), (0, 2, 0), (2, 1, 0), (2, 2, 0)}
    assert cells[0][1] == 0  # starts at the lower end (the base), not an arm tip
    # A staircase: each block one over and one up.
    assert shape_geometry("diagonal", {"u": z, "v": y, "length": 3}) == [(0, 0, 0), (0, 1, 1), (0, 2, 2)]
    # A descending diagonal is built from its lower end.
    assert shape_geometry("diagonal", {"u": x, "v": down, "length": 3}) == [(2, -2, 0), (1, -1, 0), (0, 0, 0)]
    # A vertical plane 2 wide (x) by 3 high: bottom row first, snaking.
    cells = shape_geometry("plane", {"u": y, "v": x, "width": 3, "depth": 2})
    assert cells == [(0, 0, 0), (1, 0, 0), (1, 1, 0), (0, 1, 0), (0, 2, 0), (1, 2, 0)]
    assert shape_geometry("row", {"direction": (0, 0, -1), "length": 3}) == [(0, 0, 0), (0, 0, -1), (0, 0, -2)]


@pytest.mark.parametrize("kind", SHAPE_TYPES)
def test_sampled_shapes_match_their_definition(kind):
    rng = np.random.default_rng(hash(kind) % 1000)
    for _ in range(300):
        shape = sample_shape(rng, kind)
        cells = shape.cells
        assert len(set(cells)) == len(cells) == expected_size(shape)
        assert all(grid.in_region(*c) for c in cells)
        assert min(c[1] for c in cells) == grid.Y_MIN  # sample_shape rests it on the ground
        # Natural order: every block touches (face or edge) one placed before it.
        for i in range(1, len(cells)):
            assert any(adjacent(cells[i], cells[j]) for j in range(i)), (kind, cells)
        if kind == "row":
            axis = [d for d in range(3) if shape.params["direction"][d]][0]
            for i in range(1, len(cells)):
                assert adjacent(cells[i], cells[i - 1], edge_ok=False)
            assert len({tuple(c[d] for d in range(3) if d != axis) for c in cells}) == 1
        elif kind == "diagonal":
            for i in range(1, len(cells)):
                assert adjacent(cells[i], cells[i - 1]) and not adjacent(cells[i], cells[i - 1], edge_ok=False)
        else:
            u, v = shape.params["u"], shape.params["v"]
            normal = [d for d in range(3) if u[d] == 0 and v[d] == 0][0]
            assert len({c[normal] for c in cells}) == 1  # planar
            if shape.params["plane_kind"] == "horizontal":
                assert normal == 1
            else:
                assert normal != 1
        bounds = DEFAULT_SIZE_BOUNDS[kind]
        for name, (lo, hi) in bounds.items():
            assert lo <= shape.params[name] <= hi
        if kind == "T":
            assert shape.params["bar"] % 2 == 1


def test_size_bounds_and_plane_kind_are_honoured():
    rng = np.random.default_rng(0)
    for _ in range(100):
        shape = sample_shape(rng, "plane", size_bounds={"plane": {"width": (3, 3), "depth": (4, 4)}},
                             plane_kind="vertical")
        assert shape.size == 12 and len({c[1] for c in shape.cells}) > 1
        row = sample_shape(rng, "row", size_bounds={"row": {"length": (7, 7)}}, plane_kind="horizontal")
        assert row.size == 7 and len({c[1] for c in row.cells}) == 1
    with pytest.raises(ValueError, match="no odd length"):
        sample_shape(rng, "T", size_bounds={"T": {"bar": (4, 4)}})
    with pytest.raises(ValueError, match="unknown shape kind"):
        sample_shape(rng, "circle")


def test_shape_json_round_trip():
    rng = np.random.default_rng(1)
    for kind in SHAPE_TYPES:
        shape = sample_shape(rng, kind)
        assert Shape.from_json(shape.to_json()) == shape
    with pytest.raises(ValueError, match="shape 3"):
        Shape.from_json({"kind": "row"}, where="shape 3")


@pytest.mark.parametrize("num_shapes", [1, 2, 3, 4])
def test_shape_structures_meet_the_constraints(num_shapes):
    rng = np.random.default_rng(num_shapes)
    for _ in range(400):
        structure = sample_shape_structure(rng, num_shapes)
        assert isinstance(structure, ShapeStructure) and len(structure.shapes) == num_shapes
        assert constraint_violations(structure.blocks, structure.shapes) == []
        colors = [s.color for s in structure.shapes]
        assert len(set(colors)) == num_shapes  # distinct colors by default
        assert sum(s.size for s in structure.shapes) == len(structure.blocks)


def test_kinds_restriction_and_determinism():
    kinds = ("row", "diagonal", "plane")
    a = [sample_shape_structure(np.random.default_rng(42), 2, kinds) for _ in range(3)]
    assert a[0] == a[1] == a[2]
    rng = np.random.default_rng(3)
    seen = set()
    for _ in range(300):
        structure = sample_shape_structure(rng, 2, kinds)
        seen.update(s.kind for s in structure.shapes)
    assert seen == set(kinds)
    with pytest.raises(ValueError, match="subset"):
        sample_shape_structure(rng, 2, ("row", "circle"))


def test_touching_translations_agree_with_a_plain_search():
    rng = np.random.default_rng(8)
    for _ in range(12):
        structure = sample_shape_structure(rng, 2).blocks
        shape = sample_shape(rng)
        rel = np.array(shape.cells) - np.array(shape.cells[0])
        fast = {tuple(int(v) for v in t) for t in touching_translations(rel, structure)}
        plain = set()
        for tx in range(-12, 13):
            for ty in range(-10, 11):
                for tz in range(-12, 13):
                    cells = [(x + tx, y + ty, z + tz) for x, y, z in rel]
                    if not all(grid.in_region(*c) for c in cells):
                        continue
                    if any(c in structure for c in cells):
                        continue
                    if touches(cells, structure):
                        plain.add((tx, ty, tz))
        assert fast == plain


def test_constraint_violations_find_each_problem():
    assert constraint_violations({}) == ["the structure is empty (no block on the ground)"]
    assert any("ground" in p for p in constraint_violations({(0, 2, 0): 1}))
    assert any("not connected" in p for p in constraint_violations({(0, 1, 0): 1, (3, 1, 0): 1}))
    assert constraint_violations({(0, 1, 0): 1, (1, 2, 0): 2}) == []  # edge contact is enough
    assert any("outside" in p for p in constraint_violations({(0, 1, 0): 1, (0, 1, 6): 1}))
    many = {(x, 1, z): 3 for x in range(-5, 6) for z in range(-1, 1)}
    assert any("inventory" in p for p in constraint_violations(many))
    a = make_shape("row", 1, {"direction": (1, 0, 0), "length": 2}, (0, 1, 0))
    b = make_shape("row", 2, {"direction": (1, 0, 0), "length": 2}, (0, 1, 3))
    c = make_shape("row", 3, {"direction": (0, 0, 1), "length": 2}, (0, 1, 1))
    blocks = {**a.blocks(), **b.blocks(), **c.blocks()}
    assert constraint_violations(blocks, [a, b, c]) == []
    problems = constraint_violations({**a.blocks(), **b.blocks()}, [a, b])
    assert any("touches no other shape" in p for p in problems)
    problems = constraint_violations(blocks, [a, b])
    assert any("belong to no shape" in p for p in problems)
    overlapping = make_shape("row", 1, {"direction": (0, 1, 0), "length": 2}, (0, 1, 0))
    assert any("overlap" in p for p in constraint_violations({**blocks, (0, 2, 0): 1}, [a, b, c, overlapping]))


def test_grown_structures_meet_the_constraints_at_every_step():
    rng = np.random.default_rng(17)
    for trial in range(200):
        n = int(rng.integers(1, 40))
        grown = grow_random_structure(rng, n)
        assert len(grown) == n and len({b[:3] for b in grown}) == n
        structure = {}
        for block in grown:
            structure[(block.x, block.y, block.z)] = block.color
            if trial % 10 == 0 or len(structure) == n:
                assert constraint_violations(structure) == []
    # Growing on top of an existing structure keeps it connected.
    start = {(b.x, b.y, b.z): b.color for b in grow_random_structure(rng, 10)}
    more = grow_random_structure(rng, 10, start=start)
    full = dict(start, **{}) | {(b.x, b.y, b.z): b.color for b in more}
    assert len(full) == 20 and len(connected_components(full)) == 1
    with pytest.raises(ValueError, match="exceeds the inventory"):
        grow_random_structure(rng, 25, colors=[1])


def test_growth_is_low_and_mostly_face_connected():
    rng = np.random.default_rng(4)
    heights, face = [], 0
    total = 0
    for _ in range(100):
        structure = {}
        for block in grow_random_structure(rng, 20):
            cell = (block.x, block.y, block.z)
            if structure:
                total += 1
                face += any(adjacent(cell, c, edge_ok=False) for c in structure)
            structure[cell] = block.color
            heights.append(block.y)
    assert np.mean(heights) < 3.0
    assert face / total > 0.6


def test_impossible_compositions_raise():
    rng = np.random.default_rng(0)
    with pytest.raises(StructureError):
        sample_shape_structure(rng, 3, ("plane",), colors=[1], distinct_colors=False,
                               size_bounds={"plane": {"width": (4, 4), "depth": (4, 4)}}, max_tries=3)
