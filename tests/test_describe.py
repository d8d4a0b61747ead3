"""`bapjax.corpus.itemized.describe` (what `mdc stats --describe` prints): hand-made items, and the
MDC val split against the paper's stated statistics (mean action sequence length 4.3, SD 4.5)."""

from __future__ import annotations

import pytest

from bapjax.corpus import itemized
from bapjax.world.grid import PLACE, REMOVE, Action, Block
from bapjax.world.items import BapItem, BuilderPose, ChatTurn

POSE = BuilderPose(0.0, 1.0, 0.0, 0.0, 0.0)


def _item(game: str, k: int, prev, actions, after, turns) -> BapItem:
    return BapItem(item_id=f"{game}:{k}", game_id=game, target_id="C1", split="test",
                   history=tuple(ChatTurn(s, t) for s, t in turns), prev_structure=tuple(prev),
                   reference_actions=tuple(actions), next_structure=tuple(after), builder_pose=POSE)


def test_hand_made_items():
    red = Block(0, 1, 0, 1)
    items = [
        _item("g1", 0, [], [Action(PLACE, 1, 0, 1, 0)], [red], [("Architect", "place a red block")]),
        # a support placed then removed: three actions, one net action
        _item("g1", 1, [red], [Action(PLACE, 2, 0, 2, 0), Action(PLACE, 1, 1, 2, 0), Action(REMOVE, 2, 0, 2, 0)],
              [red, Block(1, 2, 0, 1)], [("Architect", "place a red block"), ("Builder", "ok"),
                                          ("Architect", "now one up and to the right")]),
        _item("g2", 0, [], [Action(PLACE, 3, 0, 1, 0), Action(PLACE, 3, 1, 1, 0)],
              [Block(0, 1, 0, 3), Block(1, 1, 0, 3)], []),
    ]
    got = itemized.describe(items)
    assert got["items"] == 3 and got["games"] == 2
    assert got["empty_board_share"] == pytest.approx(2 / 3, abs=1e-3)
    assert got["actions_mean"] == 2.0 and got["actions_median"] == 2 and got["actions_sd"] == 1.0
    assert got["one_action_share"] == pytest.approx(1 / 3, abs=1e-3)
    assert got["with_removal_share"] == pytest.approx(1 / 3, abs=1e-3)
    assert got["net_actions_mean"] == pytest.approx(4 / 3, abs=1e-3)
    assert got["board_blocks_mean"] == pytest.approx(1 / 3, abs=1e-3)
    assert got["game_structure_blocks_mean"] == 2.0
    assert got["last_architect_words_mean"] == pytest.approx((4 + 7 + 0) / 3, abs=1e-3)
    assert got["dialogue_turns_mean"] == pytest.approx(4 / 3, abs=1e-3)
    assert got["architect_word_types"] == len({"place", "a", "red", "block", "now", "one", "up", "and", "to", "the",
                                               "right"})
    assert itemized.describe([]) == {"items": 0}


def test_mdc_val_matches_the_papers_statistics(mdc_corpus):
    got = itemized.describe(mdc_corpus.split("val"))
    assert got["items"] == 1331
    assert round(got["actions_mean"], 1) == 4.3 and round(got["actions_sd"], 1) == 4.5
