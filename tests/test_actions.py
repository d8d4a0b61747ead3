"""Net actions, structure diff, distance and inverses, against hand-made cases and random sequences."""

import numpy as np

from bapjax.world import grid
from bapjax.world.actions import inverse_action, inverse_sequence, structure_diff, structure_distance
from bapjax.world.grid import PLACE, REMOVE, Action, apply_sequence, as_blocks, as_structure, net_actions


def test_place_then_remove_is_nothing():
    seq = [Action(PLACE, 1, 0, 1, 0), Action(REMOVE, 1, 0, 1, 0)]
    assert net_actions(seq) == frozenset()


def test_remove_then_place_same_color_is_nothing_other_color_is_both():
    assert net_actions([Action(REMOVE, 2, 0, 1, 0), Action(PLACE, 2, 0, 1, 0)]) == frozenset()
    assert net_actions([Action(REMOVE, 2, 0, 1, 0), Action(PLACE, 3, 0, 1, 0)]) == {
        Action(REMOVE, 2, 0, 1, 0), Action(PLACE, 3, 0, 1, 0)}


def test_recolor_distance_is_two():
    assert structure_distance({(0, 1, 0): 1}, {(0, 1, 0): 2}) == 2
    assert structure_distance({(0, 1, 0): 1}, {(0, 1, 0): 1, (1, 1, 0): 4}) == 1


def test_inverse_sequence_undoes():
    start = {(0, 1, 0): 1}
    seq = [Action(PLACE, 3, 0, 2, 0), Action(REMOVE, 1, 0, 1, 0), Action(PLACE, 5, 1, 1, 0)]
    assert apply_sequence(apply_sequence(start, seq), inverse_sequence(seq)) == start
    assert inverse_action(Action(PLACE, 3, 0, 2, 0)) == Action(REMOVE, 3, 0, 2, 0)


def test_random_feasible_sequences_net_equals_diff():
    """Property: for a feasible sequence, net actions == diff(start, end), for thousands of runs."""
    rng = np.random.default_rng(0)
    for _ in range(2000):
        structure = {}
        for _ in range(int(rng.integers(0, 15))):
            cell = (int(rng.integers(-5, 6)), 1, int(rng.integers(-5, 6)))
            structure[cell] = int(rng.integers(1, 7))
        start = dict(structure)
        seq = []
        for _ in range(int(rng.integers(1, 12))):
            dense = grid.structure_to_grid(as_blocks(structure))
            while True:  # rejection-sample a feasible action id
                action = grid.decode_action(int(rng.integers(0, grid.NUM_ACTIONS)), dense)
                if grid.is_feasible(structure, action):
                    break
            # often undo the last action, so cancellations happen
            if seq and rng.random() < 0.4:
                last = seq[-1]
                if grid.is_feasible(structure, inverse_action(last)):
                    action = inverse_action(last)
            assert grid.is_feasible(structure, action)
            structure = grid.apply_to_structure(structure, action)
            seq.append(action)
        assert net_actions(seq) == structure_diff(start, structure)
        assert len(net_actions(seq)) == structure_distance(start, structure)


def test_as_structure_round_trip():
    blocks = (grid.Block(-1, 1, 2, 3), grid.Block(0, 1, 0, 1))
    assert as_blocks(as_structure(blocks)) == tuple(sorted(blocks))
