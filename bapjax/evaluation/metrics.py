"""BAP v2 metrics: net action sets, strict/Type/Color/Location/Shape/fairer F1, micro and macro.

Definitions (paper sections 2.4 and 4; docs/evaluation.md, "What is measured"):

* Per item the predicted sequence A_M and the reference A_H are applied to S_prev. Their net
  action sets P and H are compared. Predicted sequences are checked step by step with the grid
  rules (``predicted_net_actions``); references are never rejected (``reference_net_actions``
  applies them as recorded).
* Strict: |P & H| exact (type, color, x, y, z). Type / Color / Location: the same on the
  multisets of t, (t, c) and (x, y, z).
* Alignments: A_{r,dx,dz}(x, y, z) = (R^r(x, z) + (dx, dz), y), r in 0..3 quarter turns about
  the vertical axis through the region's center column (x = 0, z = 0), then a horizontal
  translation. ``R(x, z) = (-z, x)``: with x east and z south (Minecraft), a quarter turn
  clockwise seen from above. An alignment is allowed only when it keeps every aligned block /
  action inside the build region. Ties: the identity first, then the lowest r, then the lowest
  dx, then the lowest dz (plain integer order).
* Fairer (items in M): A* minimizes Delta(A(S_M), S_H). Because an alignment moves every block
  and keeps the count, Delta = |S_M| + |S_H| - 2 * (blocks matching in cell and color), so A*
  maximizes the matches. A* is applied to P, then Type/Color/Location/strict are scored on it
  ("Overall" = fairer F1). Items in U are scored on P as is (identity).
* Shape (all items): the alignment of P itself with the most exact matches against H.
* Per-item F1 = 2 tp / (|P| + |H|), 1 when both are empty; micro = the same on summed counts;
  macro = mean per-item F1.

The hot path (``score_items``) runs on device: items are grouped by a padded set size (4, 16,
64, ...), stacked into fixed-shape batches (one batch size per padded size), and one jitted,
vmapped function per shape counts matches for all 4 x 21 x 21 alignments of every item at once
(a Hough-style vote: every (predicted, reference) pair with the same label and height votes
for the one offset per rotation that maps one onto the other). No Python loop runs over items
or offsets there; the host builds the padded arrays and the allowed-offset masks with NumPy.
The host side before it (``predicted_net_actions_batch``) walks each predicted sequence once.
"""

from __future__ import annotations

import contextlib
import dataclasses
import gc
import itertools
from typing import Iterable, Mapping, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from bapjax.world import grid
from bapjax.world.grid import PLACE, Action

NUM_ROTATIONS = 4
MAX_SHIFT = grid.X_MAX - grid.X_MIN  # 10: the largest useful horizontal offset
NUM_SHIFTS = 2 * MAX_SHIFT + 1  # 21 offsets per axis, -10..10
NUM_TRANSFORMS = NUM_ROTATIONS * NUM_SHIFTS * NUM_SHIFTS  # 1764
METRIC_NAMES = ("type", "color", "location", "shape", "overall")
GROUPS = ("EB", "NEB", "Overall")


def transform_index(rotation: int, dx: int, dz: int) -> int:
    """Flat alignment index; the flat order is the tie-break order (r, then dx, then dz)."""
    return (rotation * NUM_SHIFTS + dx + MAX_SHIFT) * NUM_SHIFTS + dz + MAX_SHIFT


def transform_params(index: int) -> tuple[int, int, int]:
    """(rotation, dx, dz) of a flat alignment index."""
    rest, dz = divmod(int(index), NUM_SHIFTS)
    rotation, dx = divmod(rest, NUM_SHIFTS)
    return rotation, dx - MAX_SHIFT, dz - MAX_SHIFT


IDENTITY = transform_index(0, 0, 0)
_TRANSFORM_PARAMS = np.array([transform_params(i) for i in range(NUM_TRANSFORMS)], np.int64)


def rotate_xz(x: int, z: int, rotation: int) -> tuple[int, int]:
    """(x, z) turned ``rotation`` quarter turns about the center column: R(x, z) = (-z, x)."""
    for _ in range(rotation % NUM_ROTATIONS):
        x, z = -z, x
    return x, z


def align_action(action: Action, index: int) -> Action:
    """An action moved by an alignment (host side; used to report aligned predictions)."""
    rotation, dx, dz = transform_params(index)
    x, z = rotate_xz(action.x, action.z, rotation)
    return Action(action.type, action.color, x + dx, action.y, z + dz)


# --------------------------------------------------------------------------------------------
# Host side: net action sets per item


class InfeasibleActionError(ValueError):
    """A predicted action cannot be performed; the message names the item and the step."""


def predicted_net_actions(prev_structure: Mapping | Iterable, actions: Sequence[Action],
                          drop_infeasible: bool = False, where: str = "prediction"):
    """Check a predicted sequence step by step on S_prev and return its net effect.

    Returns (net action set, S_M as {cell: color}, 0-based indices of dropped steps). An
    infeasible step raises ``InfeasibleActionError`` naming ``where`` and the step, unless
    ``drop_infeasible``: then it is skipped (the structure stays as it was) and reported.
    The walk is ``grid.StructureWalk``, the one statement of the grid rules.
    """
    walk = grid.StructureWalk(prev_structure)
    dropped = walk.steps(actions)
    if dropped and not drop_infeasible:
        step = dropped[0]
        walk = grid.StructureWalk(prev_structure)
        walk.steps(actions[:step])
        raise InfeasibleActionError(
            f"{where}: step {step + 1} of {len(actions)} ({_describe(actions[step])}) is infeasible: "
            f"{walk.reason(actions[step]) or 'infeasible'} (use --drop_infeasible to drop such actions)")
    return walk.net_actions(), walk.structure, dropped


def _describe(action) -> str:
    try:
        return str(grid.action_to_dict(action))
    except ValueError:
        return str(tuple(int(v) for v in action))


def predicted_net_actions_batch(prev_structures: Sequence, action_lists: Sequence[Sequence[Action]],
                                drop_infeasible: bool = False, names: Sequence[str] | None = None,
                                structure_needed: Iterable[int] = ()):
    """``predicted_net_actions`` for many items (the evaluator's host side).

    Returns (net sets, {position: S_M} for the positions in ``structure_needed``, dropped step
    indices per item). An infeasible step raises ``InfeasibleActionError`` naming
    ``names[position]`` and the step.
    """
    needed = set(structure_needed)
    nets, structures, dropped_all = [], {}, []
    for position, (prev, actions) in enumerate(zip(prev_structures, action_lists)):
        if not actions:
            net, structure, dropped = frozenset(), None, []
        else:
            where = f"item {names[position]}" if names else "prediction"
            net, structure, dropped = predicted_net_actions(prev, actions, drop_infeasible, where)
        if position in needed:
            structures[position] = structure if structure is not None else grid.as_structure(prev)
        nets.append(net)
        dropped_all.append(dropped)
    return nets, structures, dropped_all


def reference_net_actions(prev_structure: Mapping | Iterable, actions: Sequence[Action]):
    """Net action set and S_H of a reference, applied as recorded (references are never rejected:
    a few MDC placements are unsupported as logged, and they still count)."""
    return grid.net_actions(actions), grid.apply_sequence(prev_structure, actions)


# --------------------------------------------------------------------------------------------
# Device side: alignment search and match counts (one item; vmapped and jitted below)

# R^r as (a, b, c, d): R^r(x, z) = (a x + b z, c x + d z), with R(x, z) = (-z, x).
_ROTATION_COEFFS = np.array([[1, 0, 0, 1], [0, -1, 1, 0], [-1, 0, 0, -1], [0, 1, -1, 0]], np.int32)


def _alignment_matches(src_xyz, src_label, src_mask, tgt_xyz, tgt_label, tgt_mask, ok_dx, ok_dz):
    """Matches and permission of every alignment of a source element set onto a target set.

    src_xyz [N, 3] int, src_label [N] int, src_mask [N] bool (same for the target, [M]);
    ok_dx / ok_dz [4, 21] bool: offsets per rotation that keep the source in the region
    (``allowed_offsets``, computed on the host from the bounding boxes: cheap there, and as
    reductions fused into the [1764] mask XLA recomputed them per alignment).
    Returns (matches [1764] int32: aligned source elements equal to a target element in cell
    and label; allowed [1764] bool; the vote bins [4 N M] and whether each vote counts).
    """
    x, z = src_xyz[:, 0], src_xyz[:, 2]
    rx = jnp.stack([x, -z, -x, z])  # [4, N]: R^r(x, z) for r = 0..3, R(x, z) = (-z, x)
    rz = jnp.stack([z, x, -z, -x])
    rotations = jnp.arange(NUM_ROTATIONS)[:, None]
    allowed = (ok_dx[:, :, None] & ok_dz[:, None, :]).reshape(-1)  # [1764]
    # Hough vote: each (source, target) pair with equal label and height fixes one offset per
    # rotation; the match count of an alignment is the number of pairs voting for it (each
    # source element matches at most one target element: targets are sets).
    pair_ok = (src_mask[:, None] & tgt_mask[None, :]
               & (src_label[:, None] == tgt_label[None, :])
               & (src_xyz[:, None, 1] == tgt_xyz[None, :, 1]))  # [N, M]
    dx = tgt_xyz[None, None, :, 0] - rx[:, :, None]  # [4, N, M], always in -10..10
    dz = tgt_xyz[None, None, :, 2] - rz[:, :, None]
    bins = (rotations[:, :, None] * NUM_SHIFTS + dx + MAX_SHIFT) * NUM_SHIFTS + dz + MAX_SHIFT
    votes = jnp.broadcast_to(pair_ok[None], bins.shape).reshape(-1)
    bins = bins.reshape(-1)
    matches = jnp.zeros(NUM_TRANSFORMS, jnp.int32).at[bins].add(votes.astype(jnp.int32))
    return matches, allowed, bins, votes


def allowed_offsets(xyz: np.ndarray, mask: np.ndarray):
    """Host side: (ok_dx, ok_dz) [B, 4, 21] bool, the offsets that keep every masked cell of
    xyz [B, N, 3] inside the region after each rotation (all offsets for an empty set)."""
    big = 4 * MAX_SHIFT
    x, z = xyz[..., 0], xyz[..., 2]
    lo_x, hi_x = np.where(mask, x, big).min(axis=1), np.where(mask, x, -big).max(axis=1)
    lo_z, hi_z = np.where(mask, z, big).min(axis=1), np.where(mask, z, -big).max(axis=1)
    # bounding box of R^r(x, z) for r = 0..3, from the unrotated one: [B, 4]
    min_x = np.stack([lo_x, -hi_z, -hi_x, lo_z], axis=1)
    max_x = np.stack([hi_x, -lo_z, -lo_x, hi_z], axis=1)
    min_z = np.stack([lo_z, lo_x, -hi_z, -hi_x], axis=1)
    max_z = np.stack([hi_z, hi_x, -lo_z, -lo_x], axis=1)
    shifts = np.arange(-MAX_SHIFT, MAX_SHIFT + 1)
    ok_dx = (shifts >= grid.X_MIN - min_x[..., None]) & (shifts <= grid.X_MAX - max_x[..., None])
    ok_dz = (shifts >= grid.Z_MIN - min_z[..., None]) & (shifts <= grid.Z_MAX - max_z[..., None])
    return ok_dx, ok_dz


def _pick_alignment(matches, allowed, bins, votes):
    """The allowed alignment with the most matches; ties: identity, then flat (r, dx, dz) order.

    The identity is always allowed (the source lies in the region), so when nothing matches it
    wins, and otherwise every alignment with the top count received votes: the search runs over
    the vote bins (4 N M candidates) when they are fewer than the 1764 alignments, and over
    all alignments otherwise. One plain max over a (count, -index) key replaces an argmax.
    """
    if bins.shape[0] < NUM_TRANSFORMS:
        candidate = bins
        ok = votes & allowed[bins]
    else:
        candidate = jnp.arange(NUM_TRANSFORMS, dtype=jnp.int32)
        ok = allowed
    count = matches[candidate]
    key = jnp.where(ok & (count > 0), count * _KEY_BASE + (_KEY_BASE - 1 - candidate), -1)
    best_key = jnp.max(key)
    best_count = best_key // _KEY_BASE
    best = _KEY_BASE - 1 - best_key % _KEY_BASE
    use_identity = (best_key < 0) | (matches[IDENTITY] == best_count)
    return jnp.where(use_identity, IDENTITY, best).astype(jnp.int32)


_KEY_BASE = 2048  # > NUM_TRANSFORMS: key = count * base + (base - 1 - index)


def _best_alignment(src_xyz, src_label, src_mask, tgt_xyz, tgt_label, tgt_mask, ok_dx, ok_dz):
    """(best alignment index, its matches) of one source set onto one target set."""
    matches, allowed, bins, votes = _alignment_matches(src_xyz, src_label, src_mask, tgt_xyz, tgt_label,
                                                       tgt_mask, ok_dx, ok_dz)
    best = _pick_alignment(matches, allowed, bins, votes)
    return best, matches[best]


def _item_counts(pred, pred_mask, ref, ref_mask, ok_dx, ok_dz, fair_index, fair_is_shape):
    """One item: [strict, fairer strict, shape] true positives and the (fairer, shape) indices.

    pred / ref: int [N, 5] / [M, 5] net actions (type, color, x, y, z) with masks. The action
    Hough counts give exact matches for every alignment at once, so the strict, fairer and
    shape true positives are three reads of one table. ``fair_is_shape``: the item is in M
    with an empty S_prev and a placement-only H, where aligning S_M to S_H is the same search
    as aligning P to H; otherwise ``fair_index`` (identity for U items) is used.
    """
    labels = lambda a: a[:, 0] * 8 + a[:, 1]  # noqa: E731  (type, color)
    matches, allowed, bins, votes = _alignment_matches(pred[:, 2:], labels(pred), pred_mask,
                                                       ref[:, 2:], labels(ref), ref_mask, ok_dx, ok_dz)
    shape_index = _pick_alignment(matches, allowed, bins, votes)
    fair_index = jnp.where(fair_is_shape, shape_index, fair_index)
    counts = jnp.stack([matches[IDENTITY], matches[fair_index], matches[shape_index]])
    return counts, jnp.stack([fair_index, shape_index])


@jax.jit
def batch_best_alignment(src_xyz, src_label, src_mask, tgt_xyz, tgt_label, tgt_mask, ok_dx, ok_dz):
    """``_best_alignment`` over a batch [B, ...]: (indices [B], matches [B])."""
    return jax.vmap(_best_alignment)(src_xyz, src_label, src_mask, tgt_xyz, tgt_label, tgt_mask,
                                     ok_dx, ok_dz)


@jax.jit
def batch_item_counts(pred, pred_mask, ref, ref_mask, ok_dx, ok_dz, fair_index, fair_is_shape):
    """``_item_counts`` over a batch: (counts [B, 3], indices [B, 2])."""
    return jax.vmap(_item_counts)(pred, pred_mask, ref, ref_mask, ok_dx, ok_dz, fair_index, fair_is_shape)


# --------------------------------------------------------------------------------------------
# Host side: bucketing, padding, and the batched driver

_PAD_BASE = 4  # padded set sizes: 4, 16, 64, 256, ... (one compilation per size in use)
_MAX_BATCH = 512
_PAIR_BUDGET = _MAX_BATCH * 8 * 8  # batch * pad^2: keeps the [B, 4, N, M] vote tensor cache-sized


def _pad_size(n: int) -> int:
    size = _PAD_BASE
    while size < n:
        size *= 4
    return size


def _pad_sizes(sizes: np.ndarray) -> np.ndarray:
    """``_pad_size`` of every entry (vectorized)."""
    pads = np.full(len(sizes), _PAD_BASE, np.int64)
    while np.any(pads < sizes):
        pads = np.where(pads < sizes, pads * 4, pads)
    return pads


def _batch_plan(count: int, pad: int) -> list[tuple[int, int, int]]:
    """Split ``count`` items into (start, stop, batch size) chunks. One batch size per pad size
    (the last chunk is padded up), so each pad size compiles once."""
    size = max(1, min(_MAX_BATCH, _PAIR_BUDGET // (pad * pad)))
    return [(start, min(count, start + size), size) for start in range(0, count, size)]


def _rows(sets: Sequence[Iterable[tuple]], width: int):
    """Flattened element rows of many small sets: (rows [E, width], owner [E], position [E])."""
    lengths = np.fromiter(map(len, sets), np.int64, len(sets))
    total = int(lengths.sum())
    chain = itertools.chain.from_iterable
    rows = np.fromiter(chain(chain(sets)), np.int32, total * width)  # C-level flattening
    owner = np.repeat(np.arange(len(sets)), lengths)
    position = np.arange(total) - np.repeat(np.cumsum(lengths) - lengths, lengths)
    return rows.reshape(total, width), owner, position, lengths


def _padded(sets: Sequence[Iterable[tuple]], width: int, batch: int, pad: int):
    return _scatter_rows(_rows(sets, width), np.arange(len(sets)), batch, pad)


def _scatter_rows(flat, slot_of_owner: np.ndarray, rows_out: int, pad: int):
    """Padded [rows_out, pad, width] values and mask from flattened rows; ``slot_of_owner``
    maps each owner to its output row (-1: not in this output)."""
    rows, owner, position, _ = flat
    slot = slot_of_owner[owner]
    keep = slot >= 0
    values = np.zeros((rows_out, pad, rows.shape[1]), np.int32)
    mask = np.zeros((rows_out, pad), bool)
    values[slot[keep], position[keep]] = rows[keep]
    mask[slot[keep], position[keep]] = True
    return values, mask


def best_alignments(sources: Sequence[Iterable[tuple]], targets: Sequence[Iterable[tuple]]) -> np.ndarray:
    """Best alignment index of each source set onto its target set (batched on device).

    Elements are (x, y, z, label) tuples; a structure {cell: color} is passed as its blocks.
    """
    count = len(sources)
    out = np.full(count, IDENTITY, np.int32)
    if count == 0:
        return out
    pads = _pad_sizes(np.array([max(len(s), len(t)) for s, t in zip(sources, targets)]))
    for pad in np.unique(pads):
        members = np.flatnonzero(pads == pad)
        for start, stop, batch in _batch_plan(len(members), int(pad)):
            chunk = members[start:stop]
            src, src_mask = _padded([sources[i] for i in chunk], 4, batch, int(pad))
            tgt, tgt_mask = _padded([targets[i] for i in chunk], 4, batch, int(pad))
            index, _ = batch_best_alignment(src[..., :3], src[..., 3], src_mask,
                                            tgt[..., :3], tgt[..., 3], tgt_mask,
                                            *allowed_offsets(src[..., :3], src_mask))
            out[chunk] = np.asarray(index)[: len(chunk)]
    return out


@dataclasses.dataclass
class ItemScores:
    """Integer match counts per item (arrays of length n_items); F1s are derived from them."""

    n_pred: np.ndarray  # |P|
    n_ref: np.ndarray  # |H|
    strict_tp: np.ndarray  # exact matches, no alignment (legacy strict F1)
    type_tp: np.ndarray  # Type multiset matches (alignment does not change them)
    color_tp: np.ndarray  # Color multiset matches (alignment does not change them)
    location_tp: np.ndarray  # Location multiset matches after the fairer alignment
    fair_tp: np.ndarray  # exact matches after the fairer alignment ("Overall")
    shape_tp: np.ndarray  # exact matches after the shape alignment
    fair_index: np.ndarray  # fairer alignment per item (IDENTITY for items in U)
    shape_index: np.ndarray  # shape alignment per item

    def tp(self, metric: str) -> np.ndarray:
        return {"type": self.type_tp, "color": self.color_tp, "location": self.location_tp,
                "shape": self.shape_tp, "overall": self.fair_tp, "strict": self.strict_tp}[metric]

    def per_item(self) -> dict[str, np.ndarray]:
        """Per-item F1 of every reported metric (the fairer ones) plus legacy strict."""
        return {m: item_f1(self.tp(m), self.n_pred, self.n_ref) for m in METRIC_NAMES + ("strict",)}


def item_f1(tp, n_pred, n_ref) -> np.ndarray:
    """Per-item F1 = 2 tp / (|P| + |H|); 1 when both sets are empty (0 when one is)."""
    tp, n_pred, n_ref = (np.asarray(a, np.float64) for a in (tp, n_pred, n_ref))
    total = n_pred + n_ref
    return np.where(total == 0, 1.0, 2.0 * tp / np.maximum(total, 1.0))


def micro_f1(tp, n_pred, n_ref) -> float | None:
    """F1 of summed counts (None for no items; 1 when every set is empty)."""
    if len(tp) == 0:
        return None
    total = float(np.sum(n_pred, dtype=np.float64) + np.sum(n_ref, dtype=np.float64))
    return 1.0 if total == 0 else 2.0 * float(np.sum(tp, dtype=np.float64)) / total


def macro_f1(tp, n_pred, n_ref) -> float | None:
    """Mean per-item F1 (None for no items)."""
    if len(tp) == 0:
        return None
    return float(np.mean(item_f1(tp, n_pred, n_ref)))


def _type_color_tp(pred_flat, ref_flat, count: int):
    """Type and Color multiset matches per item, from (type, color) histograms (host, NumPy)."""
    slots = 2 * (grid.NUM_COLORS + 1)

    def histograms(flat):
        rows, owner, _, _ = flat
        index = owner * slots + rows[:, 0] * (grid.NUM_COLORS + 1) + rows[:, 1]
        hist = np.bincount(index, minlength=count * slots)
        return hist.reshape(count, 2, grid.NUM_COLORS + 1)

    pred_hist, ref_hist = histograms(pred_flat), histograms(ref_flat)
    color_tp = np.minimum(pred_hist, ref_hist).sum(axis=(1, 2))
    type_tp = np.minimum(pred_hist.sum(axis=2), ref_hist.sum(axis=2)).sum(axis=1)
    return type_tp, color_tp


def _location_tp(pred_flat, ref_flat, fair_index: np.ndarray) -> np.ndarray:
    """Location multiset matches per item after the fairer alignment (host, vectorized NumPy):
    sum over cells of min(count in aligned P, count in H)."""
    count = len(fair_index)

    def keyed(flat, index):
        rows, owner, _, _ = flat
        x, z = rows[:, 2], rows[:, 4]
        if index is not None:
            r, dx, dz = _TRANSFORM_PARAMS[index[owner]].T
            coeffs = _ROTATION_COEFFS[r]
            x, z = (coeffs[:, 0] * x + coeffs[:, 1] * z + dx, coeffs[:, 2] * x + coeffs[:, 3] * z + dz)
        cell = ((x.astype(np.int64) + 16) * 32 + rows[:, 3]) * 32 + z + 16  # |x|, |z| <= 15
        keys, counts = np.unique(owner.astype(np.int64) * 32768 + cell, return_counts=True)
        return keys, counts

    pred_keys, pred_counts = keyed(pred_flat, fair_index)
    ref_keys, ref_counts = keyed(ref_flat, None)
    _, in_pred, in_ref = np.intersect1d(pred_keys, ref_keys, assume_unique=True, return_indices=True)
    matched = np.minimum(pred_counts[in_pred], ref_counts[in_ref])
    return np.bincount(pred_keys[in_pred] // 32768, weights=matched, minlength=count).astype(np.int64)


def score_items(pred_sets: Sequence[Iterable[Action]], ref_sets: Sequence[Iterable[Action]],
                fair_sources: Mapping[int, Mapping] | None = None,
                fair_targets: Mapping[int, Mapping] | None = None) -> ItemScores:
    """Match counts of every item (the batched hot path).

    pred_sets / ref_sets: net action sets P and H per item. fair_sources / fair_targets:
    {item position: S_M} and {item position: S_H} as {cell: color} for the items in M (the
    fairer alignment is searched on these structures); every other item is scored as is.
    """
    with no_gc():
        return _score_items(pred_sets, ref_sets, fair_sources, fair_targets)


@contextlib.contextmanager
def no_gc():
    """Pause the cyclic garbage collector during bulk host work: the sets built here hold no
    cycles, and collections triggered by them rescan every live object (items, histories)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _score_items(pred_sets, ref_sets, fair_sources, fair_targets) -> ItemScores:
    count = len(pred_sets)
    if len(ref_sets) != count:
        raise ValueError(f"{count} predicted sets but {len(ref_sets)} reference sets")
    pred_lists = pred_sets if isinstance(pred_sets, list) else list(pred_sets)
    ref_lists = ref_sets if isinstance(ref_sets, list) else list(ref_sets)
    fair_sources = fair_sources or {}
    fair_targets = fair_targets or {}
    # Items in M whose S_M / S_H are exactly the placements of P / H (an empty S_prev and a
    # placement-only H): their structure alignment is the action alignment, done in one pass.
    fair_is_shape = np.zeros(count, bool)
    searched = []
    for i in sorted(fair_sources):
        source, target = fair_sources[i], fair_targets[i]
        if (len(source) == len(pred_lists[i]) and len(target) == len(ref_lists[i])
                and all(a[0] == PLACE and source.get((a[2], a[3], a[4])) == a[1] for a in pred_lists[i])
                and all(a[0] == PLACE and target.get((a[2], a[3], a[4])) == a[1] for a in ref_lists[i])):
            fair_is_shape[i] = True
        else:
            searched.append(i)
    fair_index = np.full(count, IDENTITY, np.int32)
    if searched:
        blocks = lambda s: [(x, y, z, c) for (x, y, z), c in s.items()]  # noqa: E731
        fair_index[searched] = best_alignments([blocks(fair_sources[i]) for i in searched],
                                               [blocks(fair_targets[i]) for i in searched])
    pred_flat, ref_flat = _rows(pred_lists, 5), _rows(ref_lists, 5)
    n_pred, n_ref = pred_flat[3], ref_flat[3]
    counts = np.zeros((count, 3), np.int64)
    indices = np.zeros((count, 2), np.int32)
    pads = _pad_sizes(np.maximum(n_pred, n_ref))
    pending = []  # dispatch every batch first, then wait: padding overlaps device work
    for pad in np.unique(pads):
        pad = int(pad)
        members = np.flatnonzero(pads == pad)
        plan = _batch_plan(len(members), pad)
        batch = plan[0][2]
        rows_out = batch * len(plan)
        slot_of_owner = np.full(count, -1, np.int64)
        slot_of_owner[members] = np.arange(len(members))
        pred_all, pred_mask_all = _scatter_rows(pred_flat, slot_of_owner, rows_out, pad)
        ref_all, ref_mask_all = _scatter_rows(ref_flat, slot_of_owner, rows_out, pad)
        fair_all = np.full(rows_out, IDENTITY, np.int32)
        fair_all[: len(members)] = fair_index[members]
        is_shape_all = np.zeros(rows_out, bool)
        is_shape_all[: len(members)] = fair_is_shape[members]
        ok_dx_all, ok_dz_all = allowed_offsets(pred_all[..., 2:], pred_mask_all)
        for start, stop, _ in plan:
            rows = slice(start, start + batch)
            outputs = batch_item_counts(pred_all[rows], pred_mask_all[rows], ref_all[rows],
                                        ref_mask_all[rows], ok_dx_all[rows], ok_dz_all[rows],
                                        fair_all[rows], is_shape_all[rows])
            pending.append((members[start:stop], outputs))
    for chunk, (chunk_counts, chunk_indices) in pending:
        counts[chunk] = np.asarray(chunk_counts)[: len(chunk)]
        indices[chunk] = np.asarray(chunk_indices)[: len(chunk)]
    type_tp, color_tp = _type_color_tp(pred_flat, ref_flat, count)
    location_tp = _location_tp(pred_flat, ref_flat, indices[:, 0])
    return ItemScores(
        n_pred=n_pred, n_ref=n_ref, strict_tp=counts[:, 0], type_tp=type_tp, color_tp=color_tp,
        location_tp=location_tp, fair_tp=counts[:, 1], shape_tp=counts[:, 2],
        fair_index=indices[:, 0], shape_index=indices[:, 1])


def tables(scores: ItemScores, is_empty_board: np.ndarray) -> dict:
    """{"micro": {group: {metric: f}}, "macro": ..., "strict_micro": f} for EB / NEB / Overall."""
    is_empty_board = np.asarray(is_empty_board, bool)
    groups = {"EB": is_empty_board, "NEB": ~is_empty_board,
              "Overall": np.ones_like(is_empty_board)}
    out = {"micro": {}, "macro": {}}
    for kind, fn in (("micro", micro_f1), ("macro", macro_f1)):
        for group, rows in groups.items():
            out[kind][group] = {
                metric: fn(scores.tp(metric)[rows], scores.n_pred[rows], scores.n_ref[rows])
                for metric in METRIC_NAMES
            }
    out["strict_micro"] = micro_f1(scores.strict_tp, scores.n_pred, scores.n_ref)
    return out
