"""bapjax.analysis.length_ceiling: the instruction and start groups on hand-made items, and the
breakdown's rows on real MDC val items with oracle predictions."""

from bapjax.analysis import length_ceiling as lc
from bapjax.evaluation import trivial
from bapjax.world.grid import PLACE, Action, Block
from bapjax.world.items import BapItem, BuilderPose, ChatTurn


def item(history, reference, prev=(Block(0, 1, 0, 1),)):
    return BapItem(item_id="g:1", game_id="g", target_id="C1", split="val", history=tuple(history),
                   prev_structure=tuple(prev), reference_actions=tuple(reference), next_structure=(),
                   builder_pose=BuilderPose(0.0, 1.0, -5.0, 0.0, 0.0))


def test_the_last_architect_turn_decides_the_instruction_group():
    place = Action(PLACE, 1, 0, 1, 0)
    assert lc.instruction_group(item([ChatTurn("Architect", "put a red block on top"),
                                      ChatTurn("Builder", "left or right?")], [place])) == "vertical only"
    assert lc.instruction_group(item([ChatTurn("Architect", "now one to the LEFT, on top")], [place])) == "horizontal"
    assert lc.instruction_group(item([ChatTurn("Architect", "behind it")], [place])) == "horizontal"
    assert lc.instruction_group(item([ChatTurn("Architect", "great, a row of three")], [place])) == "neither"
    assert lc.instruction_group(item([ChatTurn("Architect", "leftover topping")], [place])) == "neither"  # words, not parts
    assert lc.instruction_group(item([], [place])) == "neither"


def test_the_start_group_is_the_distance_to_the_last_earlier_action():
    last = Action(PLACE, 1, 2, 1, 2)
    chat = ChatTurn("Architect", "go on")
    assert lc.start_group(item([last, chat], [Action(PLACE, 1, 3, 2, 3)])) == "at or next to the last action"
    assert lc.start_group(item([last, chat], [Action(PLACE, 1, 4, 1, 2)])) == "2+ cells away"
    assert lc.start_group(item([Action(PLACE, 1, 4, 1, 2), last, chat], [Action(PLACE, 1, 2, 1, 2)])) == \
        "at or next to the last action"
    assert lc.start_group(item([chat], [Action(PLACE, 1, 4, 1, 2)])) == "no earlier action"


def test_the_breakdown_of_oracle_predictions_is_perfect_in_every_group(mdc_corpus):
    items = mdc_corpus.split("val")[:200]
    rows = lc.breakdown(items, {it.item_id: trivial.oracle_prediction(it) for it in items})
    assert rows["all"]["items"] == 200 and rows["all"]["micro_overall"] == 1.0
    neb = [it for it in items if it.prev_structure]
    grouped = sum(rows[f"instruction: {g}"]["items"] for g in ("horizontal", "vertical only", "neither"))
    assert grouped == len(neb)
    for name, row in rows.items():
        if row["items"]:
            assert row["micro_overall"] == 1.0 and row["predicted_net"] == row["reference_net"], name
