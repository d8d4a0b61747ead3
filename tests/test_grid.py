"""Grid: codec round trips, and the jitted feasibility mask / apply against a plain-Python oracle."""

import itertools

import chex
import jax.numpy as jnp
import numpy as np
import pytest

from bapjax.world import actions as actions_lib
from bapjax.world import grid
from bapjax.world.grid import PLACE, REMOVE, Action

ALL_CELLS = list(itertools.product(range(grid.X_MIN, grid.X_MAX + 1),
                                   range(grid.Y_MIN, grid.Y_MAX + 1),
                                   range(grid.Z_MIN, grid.Z_MAX + 1)))


# ---- plain-Python oracle (deliberately independent of bapjax.world.grid internals) -----------------

def oracle_mask(structure: dict) -> list[bool]:
    """Feasibility of every action id, in codec order, for a {cell: color} structure."""
    counts = {c: 0 for c in range(1, 7)}
    for color in structure.values():
        counts[color] += 1
    mask = []
    for x, y, z in sorted(ALL_CELLS):  # sorted (x, y, z) == row-major over [11, 9, 11]
        occupied = (x, y, z) in structure
        supported = y == 1 or any(
            (x + dx, y + dy, z + dz) in structure
            for dx, dy, dz in ((1, 0, 0), (-1, 0, 0), (0, 1, 0), (0, -1, 0), (0, 0, 1), (0, 0, -1)))
        for color in range(1, 7):
            mask.append((not occupied) and supported and counts[color] < 20)
        mask.append(occupied)
    mask.append(True)  # STOP
    return mask


def random_structure(rng: np.random.Generator, n_blocks: int, gravity: bool = False) -> dict:
    structure = {}
    while len(structure) < n_blocks:
        cell = tuple(int(v) for v in (rng.integers(-5, 6), rng.integers(1, 10), rng.integers(-5, 6)))
        if gravity and cell[1] > 1 and not grid.is_feasible(structure, Action(PLACE, 1, *cell)):
            continue
        structure[cell] = int(rng.integers(1, 7))
    return structure


# ---- codec -----------------------------------------------------------------------------------

def test_action_space_size():
    assert grid.NUM_ACTIONS == 7623 and grid.STOP == 7623 and grid.NUM_ACTIONS_WITH_STOP == 7624
    assert grid.GRID_SHAPE == (11, 9, 11)


def test_codec_round_trips_every_id():
    for action_id in range(grid.NUM_ACTIONS):
        action = grid.decode_action(action_id)
        if action.type == REMOVE:
            action = action._replace(color=3)
        assert grid.encode_action(action) == action_id
    assert grid.decode_action(grid.STOP) is None


def test_codec_arrays_match_scalar_codec():
    ids = np.arange(grid.NUM_ACTIONS_WITH_STOP)
    arrays = grid.decode_action_array(ids)
    assert (arrays[-1] == -1).all()
    assert (grid.encode_action_array(arrays[:-1]) == ids[:-1]).all()
    for action_id in np.random.default_rng(0).integers(0, grid.NUM_ACTIONS, 500):
        assert tuple(arrays[action_id]) == tuple(grid.decode_action(action_id))
    jax_arrays = grid.decode_action_array(jnp.asarray(ids))
    np.testing.assert_array_equal(np.asarray(jax_arrays), arrays)
    np.testing.assert_array_equal(np.asarray(grid.encode_action_array(jax_arrays[:-1])), ids[:-1])


def test_codec_dicts():
    action = Action(PLACE, grid.color_id("purple"), -5, 9, 5)
    record = grid.action_to_dict(action)
    assert record == {"type": "place", "color": "purple", "x": -5, "y": 9, "z": 5}
    assert grid.action_from_dict(record) == action
    with pytest.raises(ValueError, match="pink"):
        grid.action_from_dict({**record, "color": "pink"})
    with pytest.raises(ValueError, match="outside the build region"):
        grid.action_from_dict({**record, "x": 6})
    with pytest.raises(ValueError, match="'type'"):
        grid.action_from_dict({**record, "type": "jump"})
    with pytest.raises(ValueError, match="missing field"):
        grid.action_from_dict({"type": "place", "color": "red", "x": 0})
    assert grid.color_id("cwc_minecraft_blue_rn") == 5


def test_structure_grid_round_trip():
    rng = np.random.default_rng(1)
    structure = random_structure(rng, 40)
    dense = grid.structure_to_grid(structure_blocks := [(*c, v) for c, v in structure.items()])
    chex.assert_shape(dense, (11, 9, 11))
    assert sorted(grid.grid_to_structure(dense)) == sorted(grid.Block(*b) for b in structure_blocks)
    with pytest.raises(ValueError, match="outside"):
        grid.structure_to_grid([(0, 0, 0, 1)])
    chex.assert_shape(grid.one_hot(jnp.asarray(dense)), (11, 9, 11, 7))


# ---- feasibility and apply against the oracle ----------------------------------------------

def test_feasible_mask_matches_oracle_on_random_grids():
    rng = np.random.default_rng(2)
    structures = [random_structure(rng, int(n), gravity=bool(n % 2))
                  for n in rng.integers(0, 130, size=1000)]
    # Inventory edge cases: exactly 19 and 20 blocks of one color.
    for count in (19, 20):
        s = {}
        for n in range(count):
            s[(n % 11 - 5, 1, n // 11 - 5)] = 2
        structures.append(s)
    dense = grid.structures_to_grids([[(*c, v) for c, v in s.items()] for s in structures])
    masks = np.asarray(grid.feasible_mask(jnp.asarray(dense)))
    chex.assert_shape(masks, (len(structures), 7624))
    for structure, mask in zip(structures, masks):
        assert mask.tolist() == oracle_mask(structure)


def test_scalar_is_feasible_matches_mask():
    rng = np.random.default_rng(3)
    for _ in range(20):
        structure = random_structure(rng, int(rng.integers(0, 60)))
        mask = oracle_mask(structure)
        for action_id in rng.integers(0, grid.NUM_ACTIONS, 300):
            action = grid.decode_action(action_id, grid.structure_to_grid(
                [(*c, v) for c, v in structure.items()]))
            if action.type == REMOVE and action.color == 0:
                action = action._replace(color=1)  # removing from an empty cell
            assert grid.is_feasible(structure, action) == mask[action_id]
            assert (grid.infeasibility_reason(structure, action) is None) == mask[action_id]


def test_infeasibility_reason_for_a_color_id_out_of_range():
    assert "color id 0" in grid.infeasibility_reason({(0, 1, 0): 1}, Action(REMOVE, 0, 0, 1, 0))
    assert not grid.is_feasible({(0, 1, 0): 1}, Action(REMOVE, 0, 0, 1, 0))


def test_removal_naming_another_color_is_infeasible():
    structure = {(0, 1, 0): 1}
    assert grid.is_feasible(structure, Action(REMOVE, 1, 0, 1, 0))
    assert not grid.is_feasible(structure, Action(REMOVE, 2, 0, 1, 0))
    assert "holds red" in grid.infeasibility_reason(structure, Action(REMOVE, 2, 0, 1, 0))


def test_apply_sequences_matches_oracle():
    rng = np.random.default_rng(4)
    batch, steps = 48, 12
    starts = [random_structure(rng, int(rng.integers(0, 30))) for _ in range(batch)]
    ids = rng.integers(0, grid.NUM_ACTIONS, size=(batch, steps))
    ids[rng.random((batch, steps)) < 0.2] = grid.STOP  # STOP anywhere is a no-op pad
    dense = grid.structures_to_grids([[(*c, v) for c, v in s.items()] for s in starts])
    final, feasible = grid.apply_action_sequences(jnp.asarray(dense), jnp.asarray(ids))
    chex.assert_shape(final, (batch, 11, 9, 11))
    chex.assert_shape(feasible, (batch, steps))
    for b in range(batch):
        structure = dict(starts[b])
        for t in range(steps):
            mask = oracle_mask(structure)
            assert bool(feasible[b, t]) == mask[ids[b, t]]
            if ids[b, t] != grid.STOP:
                cell, slot = divmod(int(ids[b, t]), 7)
                action = grid.decode_action(ids[b, t])
                if slot == 6:
                    structure.pop(action.cell, None)
                else:
                    structure[action.cell] = slot + 1
        expected = grid.structure_to_grid([(*c, v) for c, v in structure.items()])
        np.testing.assert_array_equal(np.asarray(final[b]), expected)


def test_apply_single_actions():
    dense = jnp.zeros((2, 11, 9, 11), jnp.int8)
    ids = jnp.asarray([grid.encode_action(Action(PLACE, 4, 1, 1, 1)), grid.STOP])
    out = np.asarray(grid.apply_actions(dense, ids))
    assert out[0, 6, 0, 6] == 4 and out.sum() == 4


def test_structure_walk_agrees_with_the_oracle_mask_and_keeps_its_counts():
    """A long random walk (feasible and infeasible steps, inventory limits reached): every step
    is judged as the oracle mask says, reason() agrees, counts always match the structure,
    and net_actions() is the net effect of the applied steps."""
    rng = np.random.default_rng(11)
    for trial in range(6):
        walk = grid.StructureWalk(random_structure(rng, int(rng.integers(0, 40)), gravity=True))
        start = dict(walk.structure)
        applied = []
        for _ in range(400):
            structure = walk.structure
            if structure and rng.random() < 0.3:  # a removal of a block that is there (or a wrong color)
                cell = list(structure)[int(rng.integers(len(structure)))]
                color = structure[cell] if rng.random() < 0.8 else int(rng.integers(1, 7))
                action = Action(REMOVE, color, *cell)
            else:
                action = Action(PLACE, int(rng.integers(1, 7)), int(rng.integers(-6, 7)),
                                int(rng.integers(0, 11)), int(rng.integers(-6, 7)))
            if grid.in_region(*action[2:]):
                action_id = grid.encode_action(action)
                want = oracle_mask(structure)[action_id] and (action.type == PLACE or structure.get(action[2:]) == action.color)
            else:
                want = False
            assert walk.feasible(action) == want, action
            assert (walk.reason(action) is None) == want, (action, walk.reason(action))
            assert walk.step(action) == want
            if want:
                applied.append(action)
            assert walk.counts == [0] + [sum(1 for c in walk.structure.values() if c == k) for k in range(1, 7)]
        assert walk.structure == grid.apply_sequence(start, applied)
        assert walk.net_actions() == grid.net_actions(applied)
        assert grid.net_actions(applied) == actions_lib.structure_diff(start, walk.structure)


def test_structure_walk_applies_references_as_recorded():
    """apply() never checks: an unsupported placement and a recolor still count, as in the MDC."""
    walk = grid.StructureWalk({(0, 1, 0): 2})
    walk.apply(Action(PLACE, 1, 3, 5, 3))  # floating
    walk.apply(Action(PLACE, 4, 0, 1, 0))  # into an occupied cell: recolors it
    assert walk.structure == {(3, 5, 3): 1, (0, 1, 0): 4}
    assert walk.counts == [0, 1, 0, 0, 1, 0, 0]
    assert walk.net_actions() == {Action(PLACE, 1, 3, 5, 3), Action(PLACE, 4, 0, 1, 0)}
    assert grid.StructureWalk({}).steps([Action(PLACE, 1, 0, 2, 0), Action(PLACE, 1, 0, 1, 0),
                                         Action(PLACE, 1, 0, 2, 0)]) == [0]
