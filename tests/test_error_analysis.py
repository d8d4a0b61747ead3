"""bapjax/analysis/error_analysis.py: the near-miss and length breakdowns, on hand-made and real sets; the
instruction and start groups on hand-made items and `breakdown`'s rows on real MDC val items with oracle
predictions."""

import numpy as np

from bapjax.analysis import error_analysis
from bapjax.evaluation import evaluator, trivial
from bapjax.world import grid as G

P, R = G.PLACE, G.REMOVE


def test_near_misses_hand_made():
    ref = frozenset({G.Action(P, 1, 0, 1, 0), G.Action(P, 2, 3, 1, 0), G.Action(R, 3, 0, 1, 5)})
    pred = frozenset({
        G.Action(P, 1, 0, 1, 0),   # exact
        G.Action(P, 1, 0, 2, 0),   # same kind, 1 off along y
        G.Action(P, 2, 3, 1, 2),   # same kind, 2 off
        G.Action(P, 4, 0, 1, 0),   # kind not in the reference (but a reference cell)
        G.Action(P, 3, 0, 1, 5),   # type wrong: no reference placement of color 3; same cell as a removal
    })
    eb_pred = frozenset({G.Action(P, 5, 0, 1, 0)})  # EB items are left out
    out = error_analysis.near_misses([pred, eb_pred], [ref, ref], [False, True])
    assert out["predicted_net_actions"] == 5 and out["exact"] == 1 and out["inexact"] == 4
    assert out["type_color_in_reference"] == 3
    assert out["inexact_same_cell_other_kind"] == 2
    assert out["inexact_by_distance_to_same_kind"] == {"1": 1, "2": 1, "3-4": 0, "5+": 0, "none": 2}
    assert out["distance_1_by_axis"] == {"x": 0, "y": 1, "z": 0}


def test_nearest_same_kind_matches_brute_force():
    rng = np.random.default_rng(0)
    for _ in range(200):
        ref = frozenset(G.Action(int(rng.integers(2)), int(rng.integers(1, 4)), *map(int, rng.integers(-5, 6, 3)))
                        for _ in range(int(rng.integers(0, 6))))
        action = G.Action(int(rng.integers(2)), int(rng.integers(1, 4)), *map(int, rng.integers(-5, 6, 3)))
        distance, offset = error_analysis.nearest_same_kind(action, ref)
        same = [abs(r.x - action.x) + abs(r.y - action.y) + abs(r.z - action.z)
                for r in ref if (r.type, r.color) == (action.type, action.color)]
        assert distance == (min(same) if same else None)
        if same:
            assert sum(map(abs, offset)) == distance


def test_by_length_on_real_items(mdc_corpus):
    items = mdc_corpus.split("val")[:60]
    oracle = {i.item_id: trivial.oracle_prediction(i) for i in items}
    _, scores, _ = evaluator.evaluate_items(items, oracle)
    rows = error_analysis.by_length(scores)
    assert sum(row["items"] for row in rows.values()) == len(items)
    assert rows["0"]["items"] >= 1 and rows["0"]["reference_net_actions"] == 0  # moves that cancel out
    for name, row in rows.items():
        assert row["micro_overall"] == 1.0 and row["predicted_net_actions"] == row["reference_net_actions"]
    _, scores, _ = evaluator.evaluate_items(items, {i.item_id: [] for i in items})
    rows = error_analysis.by_length(scores)
    assert all(row["empty_predictions"] == row["items"] for row in rows.values())
    assert all(row["micro_overall"] == (1.0 if name == "0" else 0.0) for name, row in rows.items())


def test_paired_bootstrap_intervals():
    rng = np.random.default_rng(1)
    n = 400
    n_ref = rng.integers(1, 6, n)
    n_pred = rng.integers(0, 6, n)
    weak = np.minimum(rng.integers(0, 2, n), np.minimum(n_pred, n_ref))
    strong = np.minimum(weak + 1, np.minimum(n_pred, n_ref))
    per_item = {"weak": {"tp": weak, "n_pred": n_pred, "n_ref": n_ref},
                "strong": {"tp": strong, "n_pred": n_pred, "n_ref": n_ref},
                "same": {"tp": weak.copy(), "n_pred": n_pred, "n_ref": n_ref}}
    boot = error_analysis.paired_bootstrap(per_item, samples=500)
    full = 2 * weak.sum() / (n_pred.sum() + n_ref.sum())
    lo, hi = boot["runs"]["weak"]
    assert lo < full < hi
    assert boot["differences"]["strong - weak"]["share_above_0"] == 1.0  # better on every resampling
    assert boot["differences"]["same - weak"]["interval"] == [0.0, 0.0]
    assert boot["differences"]["same - weak"]["share_above_0"] == 0.0


def _item(text, yaw, reference, item_id="g:1"):
    from bapjax.world.items import BapItem, BuilderPose, ChatTurn

    return BapItem(item_id=item_id, game_id="g", target_id="C1", split="val",
                   history=(ChatTurn("Architect", text),), prev_structure=(G.Block(0, 1, 0, 1),),
                   reference_actions=tuple(reference), next_structure=(), builder_pose=BuilderPose(0.5, 1, 0.5, yaw, 0))


def test_first_action_outcome_in_the_builder_frame():
    ref = [G.Action(P, 2, 3, 1, 0)]
    # Yaw 90: the Builder looks along -x; three quarter turns ((x, z) -> (-z, x) each) bring its view to +z:
    # a miss along world z is along its left/right axis, a miss along world x along its front/back axis.
    facing_minus_x = _item("put it to the left", 90.0, ref)
    assert error_analysis.first_action_outcome(facing_minus_x, [G.Action(P, 2, 3, 1, 1)]) == "left/right 1"
    assert error_analysis.first_action_outcome(facing_minus_x, [G.Action(P, 2, 1, 1, 0)]) == "front/back 2+"
    assert error_analysis.first_action_outcome(facing_minus_x, [G.Action(P, 2, 3, 3, 0)]) == "up/down 2+"
    assert error_analysis.first_action_outcome(facing_minus_x, [G.Action(P, 2, 4, 1, 1)]) == "diagonal 1"
    assert error_analysis.first_action_outcome(facing_minus_x, [G.Action(P, 2, 4, 1, 3)]) == "several axes 2+"
    assert error_analysis.first_action_outcome(facing_minus_x, [G.Action(P, 2, 3, 1, 0), G.Action(P, 5, 0, 0, 0)]) == "exact"
    assert error_analysis.first_action_outcome(facing_minus_x, [G.Action(P, 4, 3, 1, 0)]) == "other kind"
    assert error_analysis.first_action_outcome(facing_minus_x, []) == "none predicted"
    # Facing +z (yaw 0) the frame is the world: a miss along x is left/right.
    facing_z = _item("put it to the left", 0.0, ref)
    assert error_analysis.first_action_outcome(facing_z, [G.Action(P, 2, 4, 1, 0)]) == "left/right 1"
    assert error_analysis.first_action_outcome(_item("x", 0.0, []), [G.Action(P, 2, 4, 1, 0)]) is None


def test_first_actions_groups_by_direction_words():
    ref = [G.Action(P, 2, 3, 1, 0)]
    items = [_item("left of the red one", 0.0, ref, "g:1"), _item("in front, to the right", 0.0, ref, "g:2"),
             _item("behind it", 0.0, ref, "g:3"), _item("on top", 0.0, ref, "g:4"), _item("a row", 0.0, ref, "g:5")]
    predictions = {"g:1": [G.Action(P, 2, 4, 1, 0)], "g:2": ref, "g:3": [], "g:4": [G.Action(P, 2, 3, 2, 0)],
                   "g:5": [G.Action(P, 1, 3, 1, 0)]}
    table = error_analysis.first_actions(items, predictions)
    assert list(table) == list(error_analysis.DIRECTION_GROUPS)
    assert table["left/right"]["items"] == 1 and table["left/right"]["left/right 1"] == 1
    assert table["both"]["exact"] == 1
    assert table["front/behind"]["none predicted"] == 1
    assert table["vertical only"]["up/down 1"] == 1
    assert table["neither"]["other kind"] == 1
    assert sum(row["items"] for row in table.values()) == 5


def test_start_cases_near_and_far_of_the_last_action():
    import dataclasses

    from bapjax.world.items import ChatTurn

    last = G.Action(P, 1, 0, 1, 0)

    def item(item_id, first_ref):
        return dataclasses.replace(_item("go on", 0.0, [first_ref], item_id),
                                   history=(ChatTurn("Architect", "go on"), last))

    items = [item("g:1", G.Action(P, 2, 1, 2, 1)), item("g:2", G.Action(P, 2, 1, 1, 0)),
             item("g:3", G.Action(P, 2, 4, 1, 0)), item("g:4", G.Action(P, 2, 4, 1, 0)),
             _item("no earlier action", 0.0, [G.Action(P, 2, 4, 1, 0)], "g:5")]
    predictions = {"g:1": [G.Action(P, 2, 1, 2, 1)], "g:2": [G.Action(P, 2, 0, 1, 5)],
                   "g:3": [G.Action(P, 2, 0, 2, 0)], "g:4": [G.Action(P, 2, 4, 1, 0)], "g:5": [G.Action(P, 2, 4, 1, 0)]}
    table = error_analysis.start_cases(items, predictions)
    assert table == {"near / near": {"items": 1, "exact": 1}, "near / far": {"items": 1, "exact": 0},
                     "far / near": {"items": 1, "exact": 0}, "far / far": {"items": 1, "exact": 1}}


def _grouped_item(history, reference, prev=(G.Block(0, 1, 0, 1),)):
    from bapjax.world.items import BapItem, BuilderPose

    return BapItem(item_id="g:1", game_id="g", target_id="C1", split="val", history=tuple(history),
                   prev_structure=tuple(prev), reference_actions=tuple(reference), next_structure=(),
                   builder_pose=BuilderPose(0.0, 1.0, -5.0, 0.0, 0.0))


def test_the_last_architect_turn_decides_the_instruction_group():
    from bapjax.world.items import ChatTurn

    place = G.Action(P, 1, 0, 1, 0)
    group = error_analysis.instruction_group
    assert group(_grouped_item([ChatTurn("Architect", "put a red block on top"),
                                ChatTurn("Builder", "left or right?")], [place])) == "vertical only"
    assert group(_grouped_item([ChatTurn("Architect", "now one to the LEFT, on top")], [place])) == "horizontal"
    assert group(_grouped_item([ChatTurn("Architect", "behind it")], [place])) == "horizontal"
    assert group(_grouped_item([ChatTurn("Architect", "great, a row of three")], [place])) == "neither"
    assert group(_grouped_item([ChatTurn("Architect", "leftover topping")], [place])) == "neither"  # words, not parts
    assert group(_grouped_item([], [place])) == "neither"


def test_the_start_group_is_the_distance_to_the_last_earlier_action():
    from bapjax.world.items import ChatTurn

    last = G.Action(P, 1, 2, 1, 2)
    chat = ChatTurn("Architect", "go on")
    group = error_analysis.start_group
    assert group(_grouped_item([last, chat], [G.Action(P, 1, 3, 2, 3)])) == "at or next to the last action"
    assert group(_grouped_item([last, chat], [G.Action(P, 1, 4, 1, 2)])) == "2+ cells away"
    assert group(_grouped_item([G.Action(P, 1, 4, 1, 2), last, chat], [G.Action(P, 1, 2, 1, 2)])) == \
        "at or next to the last action"
    assert group(_grouped_item([chat], [G.Action(P, 1, 4, 1, 2)])) == "no earlier action"


def test_the_breakdown_of_oracle_predictions_is_perfect_in_every_group(mdc_corpus):
    items = mdc_corpus.split("val")[:200]
    rows = error_analysis.breakdown(items, {it.item_id: trivial.oracle_prediction(it) for it in items})
    assert rows["all"]["items"] == 200 and rows["all"]["micro_overall"] == 1.0
    neb = [it for it in items if it.prev_structure]
    grouped = sum(rows[f"instruction: {g}"]["items"] for g in ("horizontal", "vertical only", "neither"))
    assert grouped == len(neb)
    for name, row in rows.items():
        if row["items"]:
            assert row["micro_overall"] == 1.0 and row["predicted_net"] == row["reference_net"], name
