"""Pictures of structures, BAP items and predictions (matplotlib 3D voxels, Agg backend, PNG).

What a picture shows:

* the build region's ground (11 x 11, light grey) and the blocks as voxels in their colors;
* for an item: S_prev in lighter colors, the net new blocks in full color with black edges,
  the net removed blocks as faint ghosts with a black cross, and the dialogue beside it;
* the Builder as a black dot (feet) with an arrow along its view direction (yaw, pitch);
* the camera stands behind the Builder, so "left" and "right" in the picture are the Builder's.

Frames: world (x, y, z) with y up is drawn as plot (X, Y, Z) = (x, -z, y) so the picture is
not mirrored.  A block at cell (x, y, z) is the unit box [x, x+1] x [y-1, y] x [z, z+1] in
Minecraft units with the ground at 0, the frame of the Builder's recorded position
(feet at pose.y - 1).  Minecraft yaw 0 faces +z and yaw grows clockwise seen from above
(yaw 90 faces -x): view direction (-sin yaw cos pitch, -sin pitch, cos yaw cos pitch).

The command is `python -m bapjax.viz` (`bapjax/viz.py`). Mistakes in what was given (flags, files, an
``--out`` that cannot be written) are ``VizError``s (``errors.UserError``: one line, exit 2); anything
else is a bug and keeps its traceback.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import textwrap
from pathlib import Path
from typing import Iterable, Mapping, Sequence

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from mpl_toolkits.mplot3d.art3d import Poly3DCollection  # noqa: E402

from bapjax import paths
from bapjax.corpus import load, mdc  # noqa: E402
from bapjax.data import sources
from bapjax.errors import UserError  # noqa: E402
from bapjax.sim import generate, grounding, spatial  # noqa: E402
from bapjax.world import grid, jsonl
from bapjax.world.grid import PLACE, REMOVE, Action  # noqa: E402
from bapjax.world.items import BapItem, BuilderPose, ChatTurn  # noqa: E402

COLOR_RGB = {
    1: (0.84, 0.15, 0.16),  # red
    2: (1.00, 0.50, 0.05),  # orange
    3: (0.95, 0.82, 0.16),  # yellow
    4: (0.17, 0.63, 0.17),  # green
    5: (0.12, 0.47, 0.71),  # blue
    6: (0.58, 0.40, 0.74),  # purple
}
NX, NY, NZ = grid.GRID_SHAPE  # world x, y, z extents (11, 9, 11)


def view_direction(yaw: float, pitch: float = 0.0) -> np.ndarray:
    """Unit view vector in world (x, y, z) for Minecraft yaw/pitch in degrees."""
    yaw_r, pitch_r = math.radians(yaw), math.radians(pitch)
    return np.array([-math.sin(yaw_r) * math.cos(pitch_r), -math.sin(pitch_r),
                     math.cos(yaw_r) * math.cos(pitch_r)])


def _to_plot(x: float, y: float, z: float) -> tuple[float, float, float]:
    """World point (Minecraft units, ground at y = 1) to plot coordinates."""
    return x, -z, y - 1.0


def _lighter(rgb, amount: float = 0.55):
    return tuple(c + (1.0 - c) * amount for c in rgb)


# The six faces of a unit cube in plot coordinates: (outward normal, 4 corners) with the cube
# at the origin; and the brightness of a face by its normal (light from above and the front).
_CUBE_FACES = (
    ((0, 0, 1), ((0, 0, 1), (1, 0, 1), (1, 1, 1), (0, 1, 1))),
    ((0, 0, -1), ((0, 0, 0), (0, 1, 0), (1, 1, 0), (1, 0, 0))),
    ((1, 0, 0), ((1, 0, 0), (1, 1, 0), (1, 1, 1), (1, 0, 1))),
    ((-1, 0, 0), ((0, 0, 0), (0, 0, 1), (0, 1, 1), (0, 1, 0))),
    ((0, 1, 0), ((0, 1, 0), (0, 1, 1), (1, 1, 1), (1, 1, 0))),
    ((0, -1, 0), ((0, 0, 0), (1, 0, 0), (1, 0, 1), (0, 0, 1))),
)
_SHADE = {(0, 0, 1): 1.0, (0, 0, -1): 0.55, (1, 0, 0): 0.82, (-1, 0, 0): 0.82,
          (0, 1, 0): 0.7, (0, -1, 0): 0.7}


def _cell_origin(cell) -> tuple[float, float, float]:
    """Plot-space corner of the unit box of a cell: X = x, Y = -(z + 1), Z = y - 1."""
    x, y, z = cell
    return float(x), float(-(z + 1)), float(y - grid.Y_MIN)


def _scene_polygons(layers):
    """Ground tiles and cube faces as one polygon list (one collection, so matplotlib's
    painter's sort orders every face against every other, including the ground)."""
    styles: dict = {}
    for structure, style in layers:
        for cell, color in grid.as_structure(structure).items():
            if grid.in_region(*cell):
                styles[cell] = (style, int(color))
    polygons, faces, edges, widths = [], [], [], []
    for gx in range(grid.X_MIN, grid.X_MAX + 1):
        for gz in range(grid.Z_MIN, grid.Z_MAX + 1):
            x0, y0 = float(gx), float(-(gz + 1))
            polygons.append([(x0, y0, 0.0), (x0 + 1, y0, 0.0), (x0 + 1, y0 + 1, 0.0), (x0, y0 + 1, 0.0)])
            faces.append((0.9, 0.9, 0.9, 1.0))
            edges.append((1.0, 1.0, 1.0, 1.0))
            widths.append(0.5)
    for cell, (style, color) in styles.items():
        rgb = COLOR_RGB.get(color, (0.5, 0.5, 0.5))
        if style == "prev":
            rgb, alpha, edge, width = _lighter(rgb, 0.55), 1.0, (0.4, 0.4, 0.4, 0.7), 0.4
        elif style == "new":
            alpha, edge, width = 1.0, (0.0, 0.0, 0.0, 1.0), 1.3
        elif style == "removed":
            alpha, edge, width = 0.15, (0.1, 0.1, 0.1, 0.9), 0.8
        else:
            alpha, edge, width = 1.0, (0.15, 0.15, 0.15, 0.9), 0.5
        ox, oy, oz = _cell_origin(cell)
        x, y, z = cell
        for normal, corners in _CUBE_FACES:
            # Hide faces between two solid blocks (plot normal -> world neighbour).
            neighbour = (x + normal[0], y + normal[2], z - normal[1])
            if style != "removed" and styles.get(neighbour, ("removed",))[0] != "removed":
                continue
            shade = _SHADE[normal]
            polygons.append([(ox + a, oy + b, oz + c) for a, b, c in corners])
            faces.append((rgb[0] * shade, rgb[1] * shade, rgb[2] * shade, alpha))
            edges.append(edge)
            widths.append(width)
    return polygons, faces, edges, widths, [c for c, (st, _) in styles.items() if st == "removed"]


def compass_directions(yaw: float) -> dict[str, tuple[int, int]]:
    """World (dx, dz) of the Builder's left, right, front (toward the Builder) and back (away)
    at ``yaw``: the frame the simulators' words use (``bapjax.sim.spatial``, yaw snapped to 90)."""
    return {label: (lambda w: (w[0], w[2]))(spatial.builder_to_world(offset, yaw))
            for label, offset in (("left", (-1, 0, 0)), ("right", (1, 0, 0)),
                                  ("front", (0, 0, -1)), ("back", (0, 0, 1)))}


def _draw_compass(ax, pose: BuilderPose) -> None:
    """Arrows on the ground next to the Builder's feet, labelled in its frame."""
    origin = np.array(_to_plot(pose.x, 1.0, pose.z))
    colors = {"left": "tab:blue", "right": "tab:red", "front": "tab:green", "back": "tab:gray"}
    for label, (dx, dz) in compass_directions(pose.yaw).items():
        d = np.array([dx, -dz, 0.0]) * 1.6
        ax.quiver(origin[0], origin[1], origin[2], d[0], d[1], d[2], color=colors[label], linewidth=1.8,
                  arrow_length_ratio=0.25, zorder=7)
        tip = origin + d * 1.35
        ax.text(tip[0], tip[1], tip[2], label, color=colors[label], fontsize=8, weight="bold",
                ha="center", va="center", zorder=8)


def _draw_reference(ax, cell) -> None:
    """A thick outline around the reference block of the instruction."""
    ox, oy, oz = _cell_origin(cell)
    corners = np.array([[ox + a, oy + b, oz + c] for a in (0, 1) for b in (0, 1) for c in (0, 1)], float)
    for i in range(8):
        for j in range(i + 1, 8):
            if np.abs(corners[i] - corners[j]).sum() == 1:
                ax.plot(*zip(corners[i], corners[j]), color="magenta", lw=2.6, zorder=7)
    ax.text(ox + 0.5, oy + 0.5, oz + 1.45, "ref", color="magenta", fontsize=8, weight="bold",
            ha="center", zorder=8)


def draw_scene(ax, layers: Sequence[tuple[Mapping, str]], pose: BuilderPose | None = None,
               title: str | None = None, elev: float = 32.0, yaw: float | None = None,
               reference=None, compass: bool = False) -> None:
    """Draw blocks on a 3D axis.  ``layers``: (structure, style) pairs, later layers win a
    cell; style "plain", "prev" (lighter), "new" (full color, thick black edges) or "removed"
    (ghost with a cross).  The camera looks along ``yaw`` (default: the pose's, else 45).
    ``reference``: a cell outlined as the instruction's reference block; ``compass``: the
    Builder's left/right/front/back drawn at its feet."""

    polygons, faces, edges, widths, crosses = _scene_polygons(layers)
    # One collection sorted face by face; markers and the Builder are drawn over it.
    ax.computed_zorder = False
    ax.add_collection3d(Poly3DCollection(polygons, facecolors=faces, edgecolors=edges,
                                         linewidths=widths, zsort="average", zorder=1))
    for cell in crosses:
        ox, oy, oz = _cell_origin(cell)
        ax.scatter([ox + 0.5], [oy + 0.5], [oz + 0.5], marker="x", s=45, color="black",
                   linewidths=1.5, depthshade=False, zorder=5)
    lo = np.array([grid.X_MIN, -(grid.Z_MAX + 1), 0.0])
    hi = np.array([grid.X_MAX + 1, -grid.Z_MIN, float(NY)])
    if pose is not None:
        feet = np.array(_to_plot(pose.x, pose.y, pose.z))
        eye = feet + np.array([0.0, 0.0, 1.62])
        d = view_direction(pose.yaw, pose.pitch)
        d_plot = np.array([d[0], -d[2], d[1]]) * 3.0
        ax.plot([feet[0], eye[0]], [feet[1], eye[1]], [feet[2], eye[2]], color="black", lw=2,
                zorder=6)
        ax.scatter([feet[0]], [feet[1]], [feet[2]], color="black", s=25, depthshade=False, zorder=6)
        ax.quiver(eye[0], eye[1], eye[2], d_plot[0], d_plot[1], d_plot[2], color="black",
                  linewidth=2, arrow_length_ratio=0.3, zorder=6)
        ax.text(eye[0], eye[1], eye[2] + 0.6, "B", color="black", fontsize=9, weight="bold",
                zorder=6)
        lo = np.minimum(lo, np.minimum(feet, eye + d_plot) - 0.5)
        hi = np.maximum(hi, np.maximum(eye, eye + d_plot) + 0.5)
        if compass:
            _draw_compass(ax, pose)
            lo = np.minimum(lo, feet - 2.5)
            hi = np.maximum(hi, feet + 2.5)
    if reference is not None:
        _draw_reference(ax, reference)
    lo[2] = min(lo[2], 0.0)
    ax.set_xlim(lo[0], hi[0])
    ax.set_ylim(lo[1], hi[1])
    ax.set_zlim(lo[2], hi[2])
    ax.set_box_aspect(tuple(hi - lo))
    if yaw is None:
        yaw = pose.yaw if pose is not None else 45.0
    # Camera behind the Builder: the view direction is (-sin yaw, -cos yaw) in plot X, Y, so
    # the camera sits at azimuth atan2(cos yaw, sin yaw) = 90 - yaw.
    ax.view_init(elev=elev, azim=90.0 - yaw)
    ax.set_proj_type("ortho")  # equal block sizes near and far: easier to read relations
    ax.set_xlabel("x", fontsize=8, labelpad=-8)
    ax.set_ylabel("-z", fontsize=8, labelpad=-8)
    ax.set_zlabel("y", fontsize=8, labelpad=-8)
    ax.tick_params(labelsize=6, pad=-3)
    for axis in (ax.xaxis, ax.yaxis, ax.zaxis):
        axis.set_pane_color((1.0, 1.0, 1.0, 0.0))
    if title:
        ax.set_title(title, fontsize=9)


def _wrap_lines(lines: Iterable[str], width: int) -> list[str]:
    out = []
    for line in lines:
        wrapped = textwrap.wrap(line, width=width, subsequent_indent="    ") or [""]
        out.extend(wrapped)
    return out


def history_lines(item: BapItem, max_turns: int = 30) -> list[str]:
    """The item's history as text lines: chat turns, and runs of Builder actions as a count."""
    lines: list[str] = []
    run = 0
    for event in item.history:
        if isinstance(event, ChatTurn):
            if run:
                lines.append(f"  [Builder: {run} action{'s' if run > 1 else ''}]")
                run = 0
            who = "A" if event.speaker.lower().startswith("arch") else "B"
            lines.append(f"{who}: {event.text}")
        else:
            run += 1
    if run:
        lines.append(f"  [Builder: {run} action{'s' if run > 1 else ''}]")
    return lines[-max_turns:]


def _text_panel(ax, header: str, lines: Sequence[str], width: int = 58, max_lines: int = 31) -> None:
    ax.axis("off")
    wrapped = _wrap_lines(lines, width)
    if len(wrapped) > max_lines:
        wrapped = ["..."] + wrapped[-(max_lines - 1):]
    ax.text(0.0, 1.0, header, va="top", ha="left", fontsize=9, weight="bold",
            transform=ax.transAxes)
    ax.text(0.0, 0.95, "\n".join(wrapped), va="top", ha="left", fontsize=8,
            family="monospace", transform=ax.transAxes)


def net_changes(prev: Mapping, action_seq: Sequence[Action]) -> tuple[dict, dict, dict, int]:
    """(kept, placed, removed, infeasible count) of applying actions to ``prev`` in order;
    infeasible actions are skipped, as the Builder could not have done them."""
    walk = grid.StructureWalk(prev)
    infeasible = sum(not walk.step(action) for action in action_seq)
    current = walk.structure
    placed = {c: v for c, v in current.items() if prev.get(c) != v}
    removed = {c: v for c, v in prev.items() if current.get(c) != v}
    kept = {c: v for c, v in prev.items() if current.get(c) == v}
    return kept, placed, removed, infeasible


def _item_layers(prev: Mapping, action_seq: Sequence[Action]):
    kept, placed, removed, infeasible = net_changes(prev, action_seq)
    return [(kept, "prev"), (removed, "removed"), (placed, "new")], placed, removed, infeasible


def _save(fig, path) -> Path:
    path = Path(path)
    try:
        with output_file(path, "the picture"):
            path.parent.mkdir(parents=True, exist_ok=True)
            fig.savefig(path, dpi=fig.dpi)
    finally:
        plt.close(fig)
    return path


def render_structure(blocks, path, title: str | None = None, yaw: float = 45.0,
                     pose: BuilderPose | None = None, dpi: int = 90) -> Path:
    """One structure ({cell: color} or blocks) to a PNG."""
    fig = plt.figure(figsize=(5.5, 5.0), dpi=dpi)
    ax = fig.add_subplot(1, 1, 1, projection="3d")
    structure = grid.as_structure(blocks)
    draw_scene(ax, [(structure, "plain")], pose=pose,
               title=title or f"{len(structure)} blocks", yaw=yaw if pose is None else None)
    fig.tight_layout()
    return _save(fig, path)


def render_gallery(structures: Sequence[tuple[Mapping, str]], path, columns: int = 3,
                   yaw: float = 45.0, dpi: int = 80, panel_size: float = 3.2) -> Path:
    """Several structures side by side, each (structure, caption)."""
    rows = max(1, math.ceil(len(structures) / columns))
    fig = plt.figure(figsize=(panel_size * columns, panel_size * rows), dpi=dpi)
    for index, (structure, caption) in enumerate(structures):
        ax = fig.add_subplot(rows, columns, index + 1, projection="3d")
        draw_scene(ax, [(structure, "plain")], yaw=yaw)
        ax.set_title(caption, fontsize=8)
    fig.subplots_adjust(left=0.0, right=1.0, top=1.0 - 0.35 / (panel_size * rows), bottom=0.0,
                        wspace=0.0, hspace=0.12)
    return _save(fig, path)


def render_item(item: BapItem, path, dpi: int = 90, max_turns: int = 30, reference=None,
                compass: bool = False) -> Path:
    """A BAP item: S_prev (light), the reference's net new (bold) and removed (ghost) blocks,
    the Builder's pose, and the dialogue history beside it; optionally the instruction's
    reference block outlined and the Builder-frame compass."""
    prev = grid.as_structure(item.prev_structure)
    layers, placed, removed, _ = _item_layers(prev, item.reference_actions)
    fig = plt.figure(figsize=(11.5, 5.2), dpi=dpi)
    ax = fig.add_axes((0.0, 0.0, 0.56, 0.92), projection="3d")
    title = (f"{item.item_id} [{item.dataset}, {'EB' if item.is_empty_board else 'NEB'}]\n"
             f"S_prev {len(prev)} blocks; reference +{len(placed)} -{len(removed)} "
             f"({len(item.reference_actions)} actions)"
             + (f"; yaw {item.builder_pose.yaw:.0f}" if item.builder_pose is not None else ""))
    draw_scene(ax, layers, pose=item.builder_pose, reference=reference, compass=compass)
    fig.text(0.28, 0.97, title, ha="center", va="top", fontsize=9)
    text_ax = fig.add_axes((0.57, 0.02, 0.42, 0.94))
    _text_panel(text_ax, "Dialogue (latest last)", history_lines(item, max_turns))
    return _save(fig, path)


def render_prediction(item: BapItem, predicted_actions: Sequence[Action], path, dpi: int = 90,
                      max_turns: int = 24) -> Path:
    """The reference (left) and a prediction (middle) from the same S_prev, dialogue right."""
    prev = grid.as_structure(item.prev_structure)
    ref_layers, ref_placed, ref_removed, _ = _item_layers(prev, item.reference_actions)
    pred_layers, pred_placed, pred_removed, infeasible = _item_layers(prev, predicted_actions)
    # Net actions of each (removals of S_prev blocks, placements of new ones); count matches.
    ref_net = {(REMOVE, *c, v) for c, v in ref_removed.items()} | {(PLACE, *c, v) for c, v in ref_placed.items()}
    pred_net = {(REMOVE, *c, v) for c, v in pred_removed.items()}
    pred_net |= {(PLACE, *c, v) for c, v in pred_placed.items()}
    correct = len(ref_net & pred_net)
    fig = plt.figure(figsize=(15.0, 5.2), dpi=dpi)
    ax = fig.add_axes((0.0, 0.0, 0.36, 0.92), projection="3d")
    draw_scene(ax, ref_layers, pose=item.builder_pose,
               title=f"reference: +{len(ref_placed)} -{len(ref_removed)}")
    ax = fig.add_axes((0.34, 0.0, 0.36, 0.92), projection="3d")
    note = f", {infeasible} infeasible skipped" if infeasible else ""
    draw_scene(ax, pred_layers, pose=item.builder_pose,
               title=f"prediction: +{len(pred_placed)} -{len(pred_removed)}; "
                     f"{correct}/{len(ref_net)} net actions right{note}")
    text_ax = fig.add_axes((0.71, 0.02, 0.29, 0.94))
    _text_panel(text_ax, f"{item.item_id} [{item.dataset}]", history_lines(item, max_turns), width=48)
    return _save(fig, path)


SIM_PICTURE_ITEMS = 150  # training items simulated per data set to pick the pictured items from
SIM_PICTURE_KINDS = {"r": "place", "bs": "run", "ss": "shape"}  # the instruction kind pictured


def sim_picture_inputs(seed: int = 0) -> dict:
    """{dataset: (item, reference cell, record)} of the items the simulator pictures show: per
    data set the first training item of its kind whose instruction the grounding check resolves
    to a reference block (``bapjax.sim.grounding``), with at least 3 blocks already built. The
    record (item id, seed, simulator version, sha256 of the inputs) goes to ``sim_items.json``."""
    out = {}
    for dataset, kind in SIM_PICTURE_KINDS.items():
        root, _ = sources.generated_corpus(dataset, seed, (SIM_PICTURE_ITEMS, 0, 0), progress=False)
        items = mdc.load_corpus(root).split("train")
        checks = grounding.check_items(items)
        chosen = next(((item, check) for item, check in zip(items, checks)
                       if check.kind == kind and check.correct and check.reference is not None
                       and len(item.prev_structure) >= 3), None)
        if chosen is None:
            raise VizError(f"no {dataset} item of kind {kind} with a reference in the first {SIM_PICTURE_ITEMS} items")
        item, check = chosen
        inputs = json.dumps({"item": item.to_json(), "reference": list(check.reference)}, sort_keys=True)
        record = {"item_id": item.item_id, "kind": kind, "seed": seed, "items_simulated": SIM_PICTURE_ITEMS,
                  "simulator_version": generate.SIMULATOR_VERSION, "reference": list(check.reference),
                  "inputs_sha256": hashlib.sha256(inputs.encode()).hexdigest()}
        out[dataset] = (item, check.reference, record)
    return out


def render_sim_pictures(out_dir, seed: int = 0, dpi: int = 90) -> list[Path]:
    """docs/img/sim_{r,bs,ss}_item.png and sim_items.json (what they show, to detect staleness)."""
    out_dir = Path(out_dir)
    with output_file(out_dir, "the picture folder"):
        out_dir.mkdir(parents=True, exist_ok=True)
    written, records = [], {}
    for dataset, (item, reference, record) in sim_picture_inputs(seed).items():
        written.append(render_item(item, out_dir / f"sim_{dataset}_item.png", dpi=dpi, reference=reference,
                                   compass=True))
        records[dataset] = record
    command = f"python -m bapjax.viz sim-items --out {out_dir} --seed {seed}"
    with output_file(out_dir / "sim_items.json", "the pictures' record"):
        (out_dir / "sim_items.json").write_text(json.dumps({"command": command, "pictures": records}, indent=1) + "\n")
    return written


class VizError(UserError):
    """A picture that cannot be drawn from what was given; names the file, item or flag."""


class OutputError(VizError):
    """An output path that cannot be written (a missing permission, a file where a folder is
    needed, ...); names the path."""


@contextlib.contextmanager
def output_file(path, what: str):
    """Writing `path`: a full disk is ``paths.NoSpaceError``, any other refusal of the file
    system an ``OutputError`` naming the path."""
    try:
        with paths.writing(path, what):
            yield
    except paths.NoSpaceError:
        raise
    except OSError as err:
        raise OutputError(f"{path}: cannot write {what} ({err.strerror or err})") from None


def find_item(item_id: str, corpus: str | None = None, split: str | None = None, items: str | None = None,
              store: str | None = None) -> BapItem:
    """The item `item_id` of the source the CLIs' item flags name (``corpus.load.items_from_flags``:
    one of `corpus`, `store`, `items`); without `split`, every split of the corpus or store."""
    where = corpus or store or items
    if split or items or not (corpus or store):  # (items_from_flags names what is missing)
        splits = [split]
    else:
        splits = load.split_names(corpus or store)
    for name in splits:
        for item in load.items_from_flags(corpus=corpus, split=name, items=items, store=store):
            if item.item_id == item_id:
                return item
    searched = "" if items else f" in split(s) {', '.join(splits)}"
    raise VizError(f"{where}: no item {item_id!r}{searched}")


def read_prediction(path: str, item_id: str) -> list[Action]:
    """One item's predicted actions from a predictions JSONL file (the evaluator's reader)."""
    try:
        predictions = jsonl.read_predictions(path)
    except jsonl.FormatError as err:
        raise VizError(str(err)) from None
    if item_id not in predictions:
        raise VizError(f"{path}: no prediction for item {item_id!r}")
    return predictions[item_id]


def read_gold_xml(path: str) -> dict:
    """{cell: color} of a gold configuration file (the corpus reader's parser, errors as VizError)."""
    if not Path(path).is_file():
        raise VizError(f"{path}: no such gold configuration file")
    try:
        return mdc.read_gold_xml(path)
    except mdc.CorpusError as err:
        raise VizError(str(err)) from None
