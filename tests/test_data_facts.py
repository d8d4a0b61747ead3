"""bapjax/analysis/data_facts.py's per-item measures on hand-made items."""

from bapjax.analysis import data_facts
from bapjax.world import grid as G
from bapjax.world.items import BapItem, BuilderPose

P, R = G.PLACE, G.REMOVE
Y0 = G.Y_MIN


def _item(prev, actions):
    return BapItem("g:1", "g", "C1", "train", (), tuple(G.Block(*b) for b in prev),
                   tuple(G.Action(*a) for a in actions), (), BuilderPose(0, 0, 0, 0, 0))


def test_distances_to_the_prior_structure_and_earlier_actions():
    item = _item([(0, Y0, 0, 1)], [
        (P, 2, 3, Y0, 0),      # 3 cells from the prior block
        (P, 2, 4, Y0, 1),      # 1 from the previous action
        (P, 3, -4, Y0, -4),    # placed, then removed: not a net placement, but an earlier action
        (R, 3, -4, Y0, -4),
        (P, 4, -5, Y0, -5),    # 1 from the cancelled pair
    ])
    assert sorted(data_facts.placement_distances(item)) == [1, 1, 3]
    empty = _item([], [(P, 1, 0, Y0, 0), (P, 1, 0, Y0 + 1, 0)])
    assert data_facts.placement_distances(empty) == [None, 1]  # the first has nothing to lie near


def test_placements_that_need_a_temporary_support():
    # a column on the ground needs nothing; a block floating two above the ground next to nothing does
    column = _item([], [(P, 1, 2, Y0, 2), (P, 1, 2, Y0 + 1, 2), (P, 1, 2, Y0 + 2, 2)])
    assert data_facts.unsupported_placements(column) == 0
    floating = _item([(0, Y0, 0, 1)], [(P, 1, 3, Y0 + 2, 3), (P, 1, 0, Y0 + 1, 0)])
    assert data_facts.unsupported_placements(floating) == 1
    # built downward (the recorded order is irrelevant): the chain reaches a supported cell
    chain = _item([], [(P, 1, 5, Y0 + 1, 5), (P, 1, 5, Y0, 5)])
    assert data_facts.unsupported_placements(chain) == 0
