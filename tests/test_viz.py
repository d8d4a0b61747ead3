"""Pictures: view-direction convention, camera handedness, PNG output, CLI."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
from mpl_toolkits.mplot3d import proj3d  # noqa: E402
from PIL import Image  # noqa: E402

from bapjax import paths, viz  # noqa: E402
from bapjax.pages import pictures  # noqa: E402
from bapjax.world import grid  # noqa: E402
from bapjax.world.grid import PLACE, REMOVE, Action, Block  # noqa: E402
from bapjax.world.items import BapItem, BuilderPose, ChatTurn  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_view_direction_follows_minecraft_yaw_and_pitch():
    np.testing.assert_allclose(pictures.view_direction(0), [0, 0, 1], atol=1e-12)
    np.testing.assert_allclose(pictures.view_direction(90), [-1, 0, 0], atol=1e-12)
    np.testing.assert_allclose(pictures.view_direction(180), [0, 0, -1], atol=1e-12)
    np.testing.assert_allclose(pictures.view_direction(-90), [1, 0, 0], atol=1e-12)
    np.testing.assert_allclose(pictures.view_direction(0, 90), [0, -1, 0], atol=1e-12)  # pitch 90: down


def _screen_x(ax, world):
    px, py, pz = pictures._to_plot(*world)
    x2, _, _ = proj3d.proj_transform(px, py, pz, ax.get_proj())
    return x2


def _screen(ax, world):
    px, py, pz = pictures._to_plot(*world)
    x2, y2, _ = proj3d.proj_transform(px, py, pz, ax.get_proj())
    return np.array([x2, y2])


@pytest.mark.parametrize("yaw", [0.0, 90.0, 180.0, 270.0, 33.0])
def test_camera_behind_the_builder_keeps_its_left_and_right(yaw):
    """The Builder's right hand (yaw 0: -x) must be on the right of the picture, and what is in
    front of the Builder must be farther up the picture (the camera looks over its shoulder)."""
    fig = plt.figure()
    ax = fig.add_subplot(projection="3d")
    pictures.draw_scene(ax, [({(0, 1, 0): 1}, "plain")], yaw=yaw)
    fig.canvas.draw()
    forward = pictures.view_direction(yaw)
    right = np.array([-np.cos(np.radians(yaw)), 0.0, -np.sin(np.radians(yaw))])
    assert np.isclose(forward @ right, 0.0)
    centre = np.array([0.5, 1.0, 0.5])
    assert _screen_x(ax, centre + 3 * right) > _screen_x(ax, centre - 3 * right)
    near, far = _screen(ax, centre - 3 * forward), _screen(ax, centre + 3 * forward)
    assert far[1] > near[1]
    plt.close(fig)


def test_net_changes_skip_infeasible_actions():
    prev = {(0, 1, 0): 1, (1, 1, 0): 2}
    actions = [Action(PLACE, 3, 0, 2, 0), Action(PLACE, 4, 3, 5, 3),  # floating: infeasible
               Action(REMOVE, 2, 1, 1, 0), Action(PLACE, 5, 2, 1, 0), Action(REMOVE, 5, 2, 1, 0)]
    kept, placed, removed, infeasible = pictures.net_changes(prev, actions)
    assert kept == {(0, 1, 0): 1}
    assert placed == {(0, 2, 0): 3}
    assert removed == {(1, 1, 0): 2}
    assert infeasible == 1


def _hand_item() -> BapItem:
    prev = (Block(0, 1, 0, 1), Block(1, 1, 0, 1), Block(1, 2, 0, 5))
    ref = (Action(REMOVE, 5, 1, 2, 0), Action(PLACE, 3, 0, 2, 0), Action(PLACE, 3, 0, 3, 0))
    nxt = (Block(0, 1, 0, 1), Block(1, 1, 0, 1), Block(0, 2, 0, 3), Block(0, 3, 0, 3))
    history = (ChatTurn("Architect", "put two red blocks down"), Action(PLACE, 1, 0, 1, 0),
               Action(PLACE, 1, 1, 1, 0), Action(PLACE, 5, 1, 2, 0),
               ChatTurn("Architect", "take the blue one away and stack two yellows on the left red " * 3))
    return BapItem("hand:1", "hand", "C0", "test", history, prev, ref, nxt,
                   BuilderPose(0.5, 1.0, -6.0, 0.0, 30.0))


def _png_size(path):
    with Image.open(path) as image:
        image.load()
        return image.size


def test_render_structure_item_and_prediction(tmp_path):
    out = pictures.render_structure({(0, 1, 0): 1, (0, 2, 0): 2, (1, 1, 0): 6}, tmp_path / "s.png")
    assert _png_size(out)[0] > 300 and out.stat().st_size < 200_000
    item = _hand_item()
    out = pictures.render_item(item, tmp_path / "i.png")
    w, h = _png_size(out)
    assert w > h > 300
    lines = pictures.history_lines(item)
    assert lines[0].startswith("A: put two") and lines[1] == "  [Builder: 3 actions]"
    predicted = [Action(PLACE, 3, 0, 2, 0), Action(PLACE, 6, 5, 6, 5)]
    out = pictures.render_prediction(item, predicted, tmp_path / "p.png")
    assert _png_size(out)[0] > w


def test_gold_xml_without_root_element(tmp_path):
    gold = tmp_path / "data" / "gold-configurations"
    gold.mkdir(parents=True)
    (gold / "C7.xml").write_text(
        '<DrawBlock type="cwcmod:cwc_minecraft_red_rn" x="95" y="1" z="100"/>\n'
        '<DrawBlock type="cwcmod:cwc_minecraft_blue_rn" x="95" y="2" z="101"/>\n')
    assert pictures.read_gold_xml(str(gold / "C7.xml")) == {(-5, 1, 0): 1, (-5, 2, 1): 5}
    (gold / "C8.xml").write_text('<DrawBlock type="cwcmod:cwc_minecraft_pink_rn" x="95" y="1" z="100"/>')
    with pytest.raises(pictures.VizError, match="C8.xml: DrawBlock 0"):
        pictures.read_gold_xml(str(gold / "C8.xml"))


def _run(*args):
    env = dict(os.environ, MPLBACKEND="Agg")
    return subprocess.run([sys.executable, "-m", "bapjax.viz", *args], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=300)


def _cli(*args) -> int:
    """The CLI in-process (a subprocess costs seconds of imports per call)."""
    from absl import flags

    viz.define_flags()
    flags.FLAGS.unparse_flags()
    rest = flags.FLAGS(["viz", *args])
    return viz.main(rest)


def test_cli_structure_sample_and_errors(tmp_path, capsys):
    gold = tmp_path / "data" / "gold-configurations"
    gold.mkdir(parents=True)
    (gold / "C7.xml").write_text('<DrawBlock type="cwcmod:cwc_minecraft_red_rn" x="95" y="1" z="100"/>\n')
    result = _run("structure", "--gold", str(gold / "C7.xml"), "--out", str(tmp_path / "c7.png"))
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "c7.png").exists() and "wrote" in result.stdout
    assert _cli("sample", "--kind", "random", "--num_blocks", "12", "--out", str(tmp_path / "r.png")) == 0
    assert _cli("sample", "--kind", "shapes", "--num_shapes", "2", "--out", str(tmp_path / "s.png")) == 0
    assert (tmp_path / "r.png").exists() and (tmp_path / "s.png").exists()
    # User mistakes are VizErrors (cli.run: one line, exit 2), named specifically.
    with pytest.raises(pictures.VizError, match="missing.xml"):
        _cli("structure", "--gold", str(tmp_path / "missing.xml"), "--out", str(tmp_path / "x.png"))
    with pytest.raises(pictures.VizError, match="--num_blocks is 500"):
        _cli("sample", "--kind", "random", "--num_blocks", "500", "--out", str(tmp_path / "x.png"))
    with pytest.raises(pictures.VizError, match="--num_shapes is 0"):
        _cli("sample", "--kind", "shapes", "--num_shapes", "0", "--out", str(tmp_path / "x.png"))
    with pytest.raises(pictures.VizError, match="--dpi is 0"):
        _cli("sample", "--dpi", "0", "--out", str(tmp_path / "x.png"))
    (tmp_path / "a_file").write_text("")
    with pytest.raises(paths.UnwritableError, match="--out .*a_file/x.png: cannot write in .*a_file .a file, not a folder.$"):
        _cli("sample", "--kind", "random", "--out", str(tmp_path / "a_file" / "x.png"))
    result = _run("structure", "--gold", str(tmp_path / "missing.xml"), "--out", str(tmp_path / "x.png"))
    assert result.returncode == 2 and result.stderr.strip().splitlines() == [
        f"error: {tmp_path / 'missing.xml'}: no such gold configuration file"]


def test_a_bug_is_not_a_user_error(tmp_path, monkeypatch):
    """Only UserErrors are user mistakes: a ValueError from a bug keeps its type (and traceback)."""
    def broken(*args, **kwargs):
        raise ValueError("a bug")

    monkeypatch.setattr(viz, "render_structure", broken)
    with pytest.raises(ValueError, match="a bug"):
        _cli("sample", "--kind", "random", "--out", str(tmp_path / "x.png"))


def test_find_item_reads_every_item_source(tmp_path):
    from bapjax.corpus import store
    from bapjax.world import jsonl

    items = [BapItem(item_id=f"g:{k}", game_id="g", target_id="C1", split=split, history=(ChatTurn("Architect", "hi"),),
                     prev_structure=(), reference_actions=(Action(PLACE, 1, 0, 1, 0),),
                     next_structure=(Block(0, 1, 0, 1),), builder_pose=BuilderPose(0, 2, 0, 0, 0), dataset="bs")
             for k, split in enumerate(("train", "val", "test"))]
    jsonl.write_items(tmp_path / "items.jsonl", items[:1])
    assert pictures.find_item("g:0", items=str(tmp_path / "items.jsonl")) == items[0]
    store.write_store(tmp_path / "store", {item.split: [item] for item in items})
    assert pictures.find_item("g:2", store=str(tmp_path / "store")).item_id == "g:2"  # every split searched
    assert pictures.find_item("g:1", store=str(tmp_path / "store"), split="val").item_id == "g:1"
    with pytest.raises(pictures.VizError, match="no item 'g:1' in split.s. test"):
        pictures.find_item("g:1", store=str(tmp_path / "store"), split="test")
    with pytest.raises(pictures.UserError, match="exactly one of"):
        pictures.find_item("g:1", store=str(tmp_path / "store"), items=str(tmp_path / "items.jsonl"))
    with pytest.raises(pictures.UserError, match="exactly one of"):
        pictures.find_item("g:1")
    out = tmp_path / "item.png"
    assert _cli("item", "--store", str(tmp_path / "store"), "--item_id", "g:1", "--out", str(out)) == 0
    assert out.exists()


def test_read_prediction_errors_name_the_line(tmp_path):
    good = {"item_id": "a", "actions": []}
    path = tmp_path / "p.jsonl"
    path.write_text(json.dumps(good) + "\n")
    assert pictures.read_prediction(str(path), "a") == []
    with pytest.raises(pictures.VizError, match="no prediction for item 'c'"):
        pictures.read_prediction(str(path), "c")
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps(good) + "\n" + json.dumps(
        {"item_id": "b", "actions": [{"type": "place", "color": "red", "x": 0, "y": 1}]}) + "\n")
    with pytest.raises(pictures.VizError, match=r"bad.jsonl:2: item b: actions\[0\]: missing field"):
        pictures.read_prediction(str(bad), "a")


def test_cli_item_and_prediction_on_the_real_corpus(mdc_path, mdc_corpus, tmp_path, capsys):
    item = next(i for i in mdc_corpus.split("val") if any(a.type == REMOVE for a in i.reference_actions))
    assert _cli("item", "--corpus", str(mdc_path), "--item_id", item.item_id,
                "--out", str(tmp_path / "item.png")) == 0
    preds = tmp_path / "preds.jsonl"
    preds.write_text(json.dumps({"item_id": item.item_id,
                                 "actions": [grid.action_to_dict(a) for a in item.reference_actions[:1]]}) + "\n")
    assert _cli("prediction", "--corpus", str(mdc_path), "--split", "val", "--predictions", str(preds),
                "--item_id", item.item_id, "--out", str(tmp_path / "pred.png")) == 0
    assert (tmp_path / "item.png").exists() and (tmp_path / "pred.png").exists()
    with pytest.raises(pictures.VizError, match="no item 'nope:0' in split.s. train, val, test"):
        _cli("item", "--corpus", str(mdc_path), "--item_id", "nope:0", "--out", str(tmp_path / "n.png"))


def test_compass_matches_the_simulators_frame():
    """The picture's left/right/front/back arrows are the world steps the simulators' words mean."""
    from bapjax.sim import spatial

    for yaw in (0.0, 30.0, 90.0, -95.0, 180.0, 200.0):
        arrows = pictures.compass_directions(yaw)
        for label, offset in (("left", (-1, 0, 0)), ("right", (1, 0, 0)), ("front", (0, 0, -1)), ("back", (0, 0, 1))):
            dx, dy, dz = spatial.builder_to_world(offset, yaw)
            assert arrows[label] == (dx, dz) and dy == 0
            assert spatial.world_to_builder((dx, 0, dz), yaw) == offset
    # yaw 0 faces +z: the Builder's right hand points to -x, "front" (toward the Builder) is -z
    assert pictures.compass_directions(0.0) == {"left": (1, 0), "right": (-1, 0), "front": (0, -1), "back": (0, 1)}


def test_simulator_pictures_show_what_the_current_simulators_make():
    """docs/img/sim_*_item.png were drawn from exactly these items: if the simulators change,
    this fails until the pictures are redrawn with the command in docs/img/sim_items.json."""
    img = Path(REPO) / "docs" / "img"
    recorded = json.loads((img / "sim_items.json").read_text())
    current = {dataset: record for dataset, (_, _, record) in pictures.sim_picture_inputs(seed=0).items()}
    assert current == recorded["pictures"], f"the simulator pictures are stale: rerun `{recorded['command']}`"
    for dataset in current:
        assert (img / f"sim_{dataset}_item.png").stat().st_size > 20_000
