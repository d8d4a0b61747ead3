"""Builder-frame geometry and spatial language (bapjax.sim.spatial, bapjax.sim.language).

The references here are written independently of the modules: Builder axes from the float
trigonometry of Minecraft's yaw, and a small word-level parser of the phrases.
"""

import itertools
import math
import re

import numpy as np
import pytest

from bapjax.sim import language, spatial
from bapjax.sim.grounding import DIRECTIONS, NUMBERS

# ----------------------------------------------------------------------------------------------
# Independent references


def ref_axes(yaw):
    """(right, forward) world (dx, dz) from Minecraft's yaw, snapped to 90 degrees, by trigonometry."""
    theta = math.radians(round(yaw / 90.0) * 90.0)
    forward = (-math.sin(theta), math.cos(theta))
    right = (-math.cos(theta), -math.sin(theta))
    return right, forward


def ref_world_to_builder(delta, yaw):
    (rx, rz), (fx, fz) = ref_axes(yaw)
    dx, dy, dz = delta
    return (round(dx * rx + dz * rz), dy, round(dx * fx + dz * fz))


# The word tables are grounding's (word -> unit (right, up, away); number words and "a" = 1).
DIR_WORDS = DIRECTIONS


def parse_direction_phrase(text):
    """[(unit (right, up, away), count)] stated by a relation or anchor phrase.

    The phrase is cut at commas and 'and'; in each piece the number (word, digits or 'a';
    default one) applies to every direction word in it."""
    pieces = [p for p in re.split(r",|\band\b", text.lower()) if p.strip()]
    out = []
    for piece in pieces:
        tokens = re.findall(r"[a-z]+|\d+", piece)
        count = 1
        for token in tokens:
            if token.isdigit():
                count = int(token)
                break
            if token in NUMBERS:
                count = NUMBERS[token]
                break
        units = {DIR_WORDS[t] for t in tokens if t in DIR_WORDS}
        for unit in units:
            out.append((unit, count))
    return out


def parse_offset(text):
    total = [0, 0, 0]
    for unit, count in parse_direction_phrase(text):
        for k in range(3):
            total[k] += unit[k] * count
    return tuple(total)


# ----------------------------------------------------------------------------------------------
# Frame


def test_minecraft_yaw_convention():
    # yaw 0 faces +z; the right hand points to -x
    assert spatial.world_to_builder((0, 0, 1), 0) == (0, 0, 1)
    assert spatial.world_to_builder((-1, 0, 0), 0) == (1, 0, 0)
    # yaw 90 faces -x; right is -z
    assert spatial.world_to_builder((-1, 0, 0), 90) == (0, 0, 1)
    assert spatial.world_to_builder((0, 0, -1), 90) == (1, 0, 0)
    # yaw 180 faces -z; yaw -90 (= 270) faces +x
    assert spatial.world_to_builder((0, 0, -1), 180) == (0, 0, 1)
    assert spatial.world_to_builder((1, 0, 0), -90) == (0, 0, 1)
    assert spatial.world_to_builder((0, 0, 1), -90) == (1, 0, 0)
    # "front" (negative away) is toward the Builder
    assert spatial.world_to_builder((0, 0, -2), 0) == (0, 0, -2)


def test_world_to_builder_matches_trigonometry_and_inverts():
    rng = np.random.default_rng(0)
    for _ in range(2000):
        yaw = float(rng.uniform(-400, 400))
        if abs(((yaw + 45) % 90) - 45) > 40:  # skip the ambiguous quadrant boundaries
            continue
        delta = tuple(int(v) for v in rng.integers(-6, 7, size=3))
        got = spatial.world_to_builder(delta, yaw)
        assert got == ref_world_to_builder(delta, yaw), (delta, yaw)
        assert spatial.builder_to_world(got, yaw) == delta


def test_relation_type_counts_6_12_8():
    counts = {"1D": 0, "2D": 0, "3D": 0}
    for offset in itertools.product((-1, 0, 1), repeat=3):
        if offset != (0, 0, 0):
            counts[spatial.relation_type(offset)] += 1
    assert counts == {"1D": 6, "2D": 12, "3D": 8}
    assert spatial.relation_type((0, 0, 0)) is None


def test_unique_extreme():
    cells = [(0, 1, 0), (1, 1, 0), (1, 2, 0), (3, 1, 2)]
    assert spatial.unique_extreme(cells, (1, 2, 0), "top", 0)
    assert not spatial.unique_extreme(cells, (0, 1, 0), "bottom", 0)  # three share y = 1
    # yaw 0: right is -x, so the smallest x is right-most; away is +z
    assert spatial.unique_extreme(cells, (0, 1, 0), "right", 0)
    assert spatial.unique_extreme(cells, (3, 1, 2), "left", 0)
    assert spatial.unique_extreme(cells, (3, 1, 2), "back", 0)
    # yaw 180: the same cell is now the front-most
    assert spatial.unique_extreme(cells, (3, 1, 2), "front", 180)


def test_line_and_plane_geometry():
    row = [(0, 1, 0), (1, 1, 0), (2, 1, 0)]
    assert spatial.line_geometry(row) == ((0, 1, 0), (2, 1, 0), (1, 0, 0))
    diag = [(2, 1, 0), (1, 2, 0), (0, 3, 0)]
    start, end, step = spatial.line_geometry(diag)
    assert {start, end} == {(0, 3, 0), (2, 1, 0)} and step in ((1, -1, 0), (-1, 1, 0))
    assert spatial.line_geometry([(0, 1, 0), (2, 1, 0)]) is None
    plane = [(x, y, 4) for x in range(3) for y in range(1, 3)]
    corners = spatial.plane_corners(plane)
    assert len(corners) == 4
    for corner, d1, n1, d2, n2 in corners:
        cells = {spatial.add(corner, tuple(i * a + j * b for a, b in zip(d1, d2))) for i in range(n1) for j in range(n2)}
        assert cells == set(plane)
    assert spatial.plane_corners(plane[:-1]) == []


@pytest.mark.parametrize("seed", range(5))
def test_sampled_poses_are_valid_and_face_the_work(seed):
    rng = np.random.default_rng(seed)
    for _ in range(200):
        n = int(rng.integers(1, 12))
        cells = {tuple(int(v) for v in (rng.integers(-5, 6), rng.integers(1, 6), rng.integers(-5, 6)))
                 for _ in range(n)}
        focus = list(cells)[: max(1, n // 3)]
        quadrant = int(rng.integers(4))
        pose = spatial.sample_pose(rng, cells, focus, quadrant)
        assert spatial.yaw_quadrant(pose.yaw) == quadrant
        assert spatial.pose_is_valid(pose, cells)
        # outside every block: strictly in front of all cells along the forward axis
        (rx, rz), (fx, fz) = ref_axes(pose.yaw)
        stand = pose.x * fx + pose.z * fz
        assert all(c[0] * fx + c[2] * fz > stand + 0.5 for c in cells)  # the feet cell is never a block's
        # facing the focus: the view direction is within 60 degrees of the focus centre
        centre = np.mean(np.asarray(focus, float), axis=0)
        theta = math.radians(pose.yaw)
        view = np.array([-math.sin(theta), math.cos(theta)])
        to_focus = np.array([centre[0] - pose.x, centre[2] - pose.z])
        cosine = view @ to_focus / (np.linalg.norm(to_focus) + 1e-9)
        assert cosine > math.cos(math.radians(60))
        nearest = min(math.dist((pose.x, pose.z), (c[0], c[2])) for c in cells)
        closest = min(spatial.STAND_DISTANCE[0], spatial.AMONG_BLOCKS_DISTANCE[0])  # right against a block
        assert closest + 0.5 - 1e-6 <= nearest <= 12.0


# ----------------------------------------------------------------------------------------------
# Language


def test_relation_phrases_state_their_offsets():
    """Every 1D/2D/3D offset up to distance 3, many phrasings: the parsed phrase gives the offset."""
    rng = np.random.default_rng(1)
    seen_types = set()
    texts = set()
    for offset in itertools.product(range(-3, 4), repeat=3):
        if offset == (0, 0, 0):
            continue
        for _ in range(6):
            relation = language.relation_phrase(rng, offset)
            assert relation["offset"] == list(offset)
            assert relation["type"] == spatial.relation_type(offset)
            assert parse_offset(relation["text"]) == offset, relation["text"]
            seen_types.add(relation["type"])
            texts.add(relation["text"])
    assert seen_types == {"1D", "2D", "3D"}
    assert len(texts) > 1500  # lexical and syntactic variety


def test_numbers_as_words_and_digits():
    rng = np.random.default_rng(2)
    outs = {language.number(rng, 3) for _ in range(200)}
    assert outs == {"three", "3"}


def test_anchor_phrases():
    rng = np.random.default_rng(3)
    for direction in itertools.product((-1, 0, 1), repeat=3):
        if direction == (0, 0, 0):
            continue
        for _ in range(10):
            anchor = language.anchor_phrase(rng, direction)
            assert parse_offset(anchor["text"]) == direction, anchor["text"]
    for d1, d2 in [((1, 0, 0), (0, 0, 1)), ((0, 1, 0), (-1, 0, 0)), ((0, 0, -1), (0, 1, 0))]:
        for _ in range(10):
            anchor = language.plane_anchor_phrase(rng, d1, 3, d2, 2)
            assert sorted(parse_direction_phrase(anchor["text"])) == sorted([(d1, 3), (d2, 2)]), anchor["text"]


def test_reference_options_are_unique_and_realized():
    yaw = 0.0
    structure = {(0, 1, 0): 1, (0, 2, 0): 1, (1, 1, 0): 2, (-2, 1, 3): 3}
    options = language.reference_options(structure, (0, 2, 0), yaw, last_cell=(0, 2, 0))
    kinds = {(o["kind"], o["extreme"]) for o in options}
    assert ("last", None) in kinds
    assert ("extreme_color", "top") in kinds and ("extreme", "top") in kinds
    assert ("extreme_color", "bottom") not in kinds
    options = language.reference_options(structure, (1, 1, 0), yaw)
    assert ("color", None) in {(o["kind"], o["extreme"]) for o in options}
    rng = np.random.default_rng(0)
    for option in options:
        text = language.realize_reference(rng, option)["text"]
        assert text.startswith("the ")
        if option["color"]:
            assert option["color"] in text


def brute_force_options(structure, cell, yaw, last_cell):
    """Reference for language.reference_table: each kind checked cell by cell."""
    color = structure[cell]
    out = set()
    if last_cell == cell:
        out.add(("last", None, None))
    same = [c for c, k in structure.items() if k == color]
    if len(same) == 1:
        out.add(("color", language.color_word(color), None))
    else:
        for extreme in spatial.EXTREMES:
            if spatial.unique_extreme(same, cell, extreme, yaw):
                out.add(("extreme_color", language.color_word(color), extreme))
    if len(structure) > 1:
        for extreme in spatial.EXTREMES:
            if spatial.unique_extreme(list(structure), cell, extreme, yaw):
                out.add(("extreme", None, extreme))
    return out


def test_reference_table_matches_brute_force():
    rng = np.random.default_rng(4)
    for _ in range(300):
        n = int(rng.integers(1, 15))
        structure = {tuple(int(v) for v in (rng.integers(-3, 4), rng.integers(1, 4), rng.integers(-3, 4))):
                     int(rng.integers(1, 4)) for _ in range(n)}
        yaw = float(rng.choice([0, 90, 180, -90])) + float(rng.uniform(-30, 30))
        cells = list(structure)
        last = cells[int(rng.integers(len(cells)))]
        table = language.reference_table(structure, yaw, last)
        for cell in cells:
            got = {(o["kind"], o["color"], o["extreme"]) for o in table[cell]}
            assert got == brute_force_options(structure, cell, yaw, last)
            assert all(o["cell"] == list(cell) for o in table[cell])


def test_split_instruction_cuts_outside_grounded_phrases():
    from bapjax.sim import dialogue

    rng = np.random.default_rng(5)
    record = {"relation": {"text": "one to the left, two above"}, "ref": {"text": "the red block"}}
    text = "okay, place a blue block one to the left, two above the red block, please"
    seen = set()
    for _ in range(400):
        lines = dialogue.split_instruction(rng, text, record)
        assert ", ".join(lines) == text
        if len(lines) == 2:
            seen.add(lines[0])
    # the comma inside the relation is never a cut; the two others are
    assert seen == {"okay", "okay, place a blue block one to the left, two above the red block"}
