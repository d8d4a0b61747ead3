"""The build region, colors, voxel tensors, the single action codec, feasibility and apply.

Everything that says "where is a block" or "which integer is this action" goes through this
module, so the corpus, the simulators, the metrics and the models agree on one convention:

* World coordinates: x in [-5, 5], y in [1, 9] (y = 1 is the ground), z in [-5, 5].
* Grid indices: i = x + 5, j = y - 1, k = z + 5 into an ``[11, 9, 11]`` array.
* Colors: 0 = empty, 1..6 = red, orange, yellow, green, blue, purple.
* Action ids: ``cell * 7 + slot`` with ``cell = (i * 9 + j) * 11 + k`` (row-major over the grid),
  ``slot`` 0..5 = place color 1..6, ``slot`` 6 = remove; ``STOP = 7623``.
* Action arrays: int arrays ``[..., 5]`` with columns (type, color, x, y, z), type 0 = place,
  1 = remove; a removal decoded from an id has color 0 unless a grid says what is there.

The JAX functions (``feasible_mask``, ``apply_action``, ``apply_action_sequences``) are pure,
shape-static and batch with ``vmap``; the batched entry points are jitted.
"""

from __future__ import annotations

from typing import Any, Iterable, Mapping, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

X_MIN, X_MAX = -5, 5
Y_MIN, Y_MAX = 1, 9
Z_MIN, Z_MAX = -5, 5
GRID_SHAPE = (X_MAX - X_MIN + 1, Y_MAX - Y_MIN + 1, Z_MAX - Z_MIN + 1)  # (11, 9, 11)
NUM_CELLS = GRID_SHAPE[0] * GRID_SHAPE[1] * GRID_SHAPE[2]  # 1089

COLORS = ("red", "orange", "yellow", "green", "blue", "purple")
NUM_COLORS = len(COLORS)
EMPTY = 0
COLOR_TO_ID = {name: i + 1 for i, name in enumerate(COLORS)}
INVENTORY_PER_COLOR = 20
EYE_HEIGHT = 1.62  # Minecraft player eye height above the feet position the logs record

PLACE, REMOVE = 0, 1
ACTION_TYPES = ("place", "remove")
TYPE_TO_ID = {name: i for i, name in enumerate(ACTION_TYPES)}
ACTIONS_PER_CELL = NUM_COLORS + 1  # 6 placements + 1 removal
REMOVE_SLOT = NUM_COLORS
NUM_ACTIONS = NUM_CELLS * ACTIONS_PER_CELL  # 7623
STOP = NUM_ACTIONS  # 7623
NUM_ACTIONS_WITH_STOP = NUM_ACTIONS + 1  # 7624


class Block(NamedTuple):
    """One block of a structure, in world coordinates; color is 1..6."""

    x: int
    y: int
    z: int
    color: int


class Action(NamedTuple):
    """One Builder action, in world coordinates; type is PLACE or REMOVE, color is 1..6."""

    type: int
    color: int
    x: int
    y: int
    z: int

    @property
    def cell(self) -> tuple[int, int, int]:
        return (self.x, self.y, self.z)


# --------------------------------------------------------------------------------------------
# Region and names


def in_region(x: int, y: int, z: int) -> bool:
    return X_MIN <= x <= X_MAX and Y_MIN <= y <= Y_MAX and Z_MIN <= z <= Z_MAX


def color_id(name: str) -> int:
    """Color id from a name ('red') or an MDC block type ('cwc_minecraft_red_rn')."""
    key = name.lower()
    if key.startswith("cwcmod:"):
        key = key[len("cwcmod:"):]
    for prefix in ("cwc_minecraft_", "cwc_"):  # some gold files say cwc_blue_rn
        if key.startswith(prefix) and key.endswith("_rn"):
            key = key[len(prefix):-len("_rn")]
            break
    if key not in COLOR_TO_ID:
        raise ValueError(f"unknown color {name!r}; expected one of {', '.join(COLORS)}")
    return COLOR_TO_ID[key]


def color_name(color: int) -> str:
    if not 1 <= int(color) <= NUM_COLORS:
        raise ValueError(f"color id {color} is not in 1..{NUM_COLORS}")
    return COLORS[int(color) - 1]


def mdc_block_type(color: int) -> str:
    return f"cwc_minecraft_{color_name(color)}_rn"


def cell_to_index(x: int, y: int, z: int) -> tuple[int, int, int]:
    return (x - X_MIN, y - Y_MIN, z - Z_MIN)


def index_to_cell(i: int, j: int, k: int) -> tuple[int, int, int]:
    return (i + X_MIN, j + Y_MIN, k + Z_MIN)


def cell_id(x: int, y: int, z: int) -> int:
    i, j, k = cell_to_index(x, y, z)
    return (i * GRID_SHAPE[1] + j) * GRID_SHAPE[2] + k


# --------------------------------------------------------------------------------------------
# Structures <-> dense grids (NumPy; host side)


def structure_to_grid(blocks: Iterable[Block | tuple]) -> np.ndarray:
    """Dense int8 color grid [11, 9, 11] from blocks (x, y, z, color); checks region and overlap."""
    grid = np.zeros(GRID_SHAPE, np.int8)
    for block in blocks:
        x, y, z, color = (int(v) for v in block)
        if not in_region(x, y, z):
            raise ValueError(f"block {(x, y, z)} is outside the build region")
        if not 1 <= color <= NUM_COLORS:
            raise ValueError(f"block {(x, y, z)} has color id {color}, expected 1..{NUM_COLORS}")
        i, j, k = cell_to_index(x, y, z)
        if grid[i, j, k]:
            raise ValueError(f"two blocks in cell {(x, y, z)}")
        grid[i, j, k] = color
    return grid


def structures_to_grids(structures: Iterable[Iterable[Block | tuple]]) -> np.ndarray:
    """Stack of dense grids [B, 11, 9, 11]."""
    grids = [structure_to_grid(s) for s in structures]
    if not grids:
        return np.zeros((0,) + GRID_SHAPE, np.int8)
    return np.stack(grids)


def grid_to_structure(grid: Any) -> tuple[Block, ...]:
    """Blocks of a dense grid, sorted by (x, y, z)."""
    grid = np.asarray(grid)
    return tuple(
        Block(*index_to_cell(int(i), int(j), int(k)), int(grid[i, j, k]))
        for i, j, k in zip(*np.nonzero(grid))
    )


def one_hot(grids: jax.Array) -> jax.Array:
    """One-hot voxel tensor [..., 11, 9, 11, 7]; channel 0 is 'empty'."""
    return jax.nn.one_hot(grids, NUM_COLORS + 1, dtype=jnp.float32)


# --------------------------------------------------------------------------------------------
# The action codec


def encode_action(action: Action | tuple) -> int:
    """Action id of (type, color, x, y, z); a removal's id does not depend on its color."""
    type_, color, x, y, z = (int(v) for v in action)
    if type_ not in (PLACE, REMOVE):
        raise ValueError(f"action type {type_} is neither PLACE (0) nor REMOVE (1)")
    if not in_region(x, y, z):
        raise ValueError(f"action cell {(x, y, z)} is outside the build region")
    if type_ == PLACE:
        if not 1 <= color <= NUM_COLORS:
            raise ValueError(f"placement color id {color} is not in 1..{NUM_COLORS}")
        slot = color - 1
    else:
        slot = REMOVE_SLOT
    return cell_id(x, y, z) * ACTIONS_PER_CELL + slot


def decode_action(action_id: int, grid: Any | None = None) -> Action | None:
    """Action of an id (None for STOP). A removal's color comes from ``grid`` when given, else 0."""
    action_id = int(action_id)
    if action_id == STOP:
        return None
    if not 0 <= action_id < NUM_ACTIONS:
        raise ValueError(f"action id {action_id} is not in 0..{STOP}")
    cell, slot = divmod(action_id, ACTIONS_PER_CELL)
    ij, k = divmod(cell, GRID_SHAPE[2])
    i, j = divmod(ij, GRID_SHAPE[1])
    x, y, z = index_to_cell(i, j, k)
    if slot == REMOVE_SLOT:
        color = int(np.asarray(grid)[i, j, k]) if grid is not None else 0
        return Action(REMOVE, color, x, y, z)
    return Action(PLACE, slot + 1, x, y, z)


def encode_action_array(actions: Any) -> Any:
    """Ids of an action array [..., 5]; works on NumPy and JAX arrays (no checks)."""
    xp = jnp if isinstance(actions, jax.Array) else np
    actions = xp.asarray(actions)
    type_, color = actions[..., 0], actions[..., 1]
    i = actions[..., 2] - X_MIN
    j = actions[..., 3] - Y_MIN
    k = actions[..., 4] - Z_MIN
    cell = (i * GRID_SHAPE[1] + j) * GRID_SHAPE[2] + k
    slot = xp.where(type_ == REMOVE, REMOVE_SLOT, color - 1)
    return cell * ACTIONS_PER_CELL + slot


def decode_action_array(action_ids: Any) -> Any:
    """Action array [..., 5] of ids; STOP decodes to all -1; removals get color 0."""
    xp = jnp if isinstance(action_ids, jax.Array) else np
    ids = xp.asarray(action_ids)
    is_stop = ids >= NUM_ACTIONS
    safe = xp.where(is_stop, 0, ids)
    cell, slot = safe // ACTIONS_PER_CELL, safe % ACTIONS_PER_CELL
    k = cell % GRID_SHAPE[2]
    j = (cell // GRID_SHAPE[2]) % GRID_SHAPE[1]
    i = cell // (GRID_SHAPE[2] * GRID_SHAPE[1])
    is_remove = slot == REMOVE_SLOT
    out = xp.stack(
        [
            is_remove.astype(ids.dtype),
            xp.where(is_remove, 0, slot + 1),
            i + X_MIN,
            j + Y_MIN,
            k + Z_MIN,
        ],
        axis=-1,
    )
    return xp.where(is_stop[..., None], -1, out)


def action_to_dict(action: Action | tuple) -> dict:
    type_, color, x, y, z = (int(v) for v in action)
    return {"type": ACTION_TYPES[type_], "color": color_name(color), "x": x, "y": y, "z": z}


def action_from_dict(record: Mapping[str, Any], where: str = "action",
                     check_region: bool = True) -> Action:
    """Action from {type, color, x, y, z}; errors name ``where`` and the bad field.

    ``check_region=False`` accepts cells outside the build region (the MDC history holds a few
    such actions: Builders sometimes built outside it before the item started).
    """
    if not isinstance(record, Mapping):
        raise ValueError(f"{where}: expected an object with type, color, x, y, z; got {record!r}")
    missing = [f for f in ("type", "color", "x", "y", "z") if f not in record]
    if missing:
        raise ValueError(f"{where}: missing field(s) {', '.join(missing)}")
    type_name = record["type"]
    if type_name not in TYPE_TO_ID:
        raise ValueError(f"{where}: field 'type' is {type_name!r}; expected 'place' or 'remove'")
    try:
        color = color_id(str(record["color"]))
    except ValueError as err:
        raise ValueError(f"{where}: field 'color': {err}") from None
    coords = []
    for name in ("x", "y", "z"):
        value = record[name]
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value != int(value):
            raise ValueError(f"{where}: field {name!r} is {value!r}; expected an integer")
        coords.append(int(value))
    if check_region and not in_region(*coords):
        raise ValueError(
            f"{where}: cell {tuple(coords)} is outside the build region "
            f"x {X_MIN}..{X_MAX}, y {Y_MIN}..{Y_MAX}, z {Z_MIN}..{Z_MAX}"
        )
    return Action(TYPE_TO_ID[type_name], color, *coords)


def block_to_dict(block: Block | tuple) -> dict:
    x, y, z, color = (int(v) for v in block)
    return {"x": x, "y": y, "z": z, "color": color_name(color)}


def block_from_dict(record: Mapping[str, Any], where: str = "block") -> Block:
    action = action_from_dict({"type": "place", **record}, where)
    return Block(action.x, action.y, action.z, action.color)


# --------------------------------------------------------------------------------------------
# Feasibility and apply (JAX; pure, one grid at a time, vmapped for batches)


def _occupied_neighbour(occupied: jax.Array) -> jax.Array:
    """True where a face-neighbour (6-neighbourhood) is occupied."""
    padded = jnp.pad(occupied, 1)
    core = (slice(1, -1),) * 3
    result = jnp.zeros_like(occupied)
    for axis in range(3):
        for shift in (-1, 1):
            index = list(core)
            index[axis] = slice(1 + shift, padded.shape[axis] - 1 + shift)
            result = result | padded[tuple(index)]
    return result


def color_counts(grid: jax.Array) -> jax.Array:
    """Blocks of each color 1..6 on the grid, [6]."""
    return jnp.sum(grid.reshape(-1)[:, None] == jnp.arange(1, NUM_COLORS + 1), axis=0)


def feasible_mask_single(grid: jax.Array) -> jax.Array:
    """Bool [7624] for one grid [11, 9, 11]: which actions (and STOP) are feasible now."""
    occupied = grid > 0
    on_ground = (jnp.arange(GRID_SHAPE[1]) == 0)[None, :, None]
    supported = on_ground | _occupied_neighbour(occupied)
    can_place_here = (~occupied) & supported  # [11, 9, 11]
    color_left = color_counts(grid) < INVENTORY_PER_COLOR  # [6]
    place = can_place_here[..., None] & color_left  # [11, 9, 11, 6]
    per_cell = jnp.concatenate([place, occupied[..., None]], axis=-1)  # [11, 9, 11, 7]
    return jnp.concatenate([per_cell.reshape(-1), jnp.ones((1,), bool)])


@jax.jit
def feasible_mask(grids: jax.Array) -> jax.Array:
    """Feasibility masks [B, 7624] for grids [B, 11, 9, 11]."""
    return jax.vmap(feasible_mask_single)(grids)


def apply_action(grid: jax.Array, action_id: jax.Array) -> jax.Array:
    """Grid after one action id (STOP or any id >= 7623 leaves it unchanged). No checks."""
    is_action = (action_id >= 0) & (action_id < NUM_ACTIONS)
    safe = jnp.where(is_action, action_id, 0)
    cell, slot = safe // ACTIONS_PER_CELL, safe % ACTIONS_PER_CELL
    new_color = jnp.where(slot == REMOVE_SLOT, 0, slot + 1).astype(grid.dtype)
    flat = grid.reshape(-1)
    flat = flat.at[cell].set(jnp.where(is_action, new_color, flat[cell]))
    return flat.reshape(grid.shape)


def is_feasible_single(grid: jax.Array, action_id: jax.Array) -> jax.Array:
    """Whether one action id is feasible on one grid (STOP is)."""
    return feasible_mask_single(grid)[jnp.clip(action_id, 0, STOP)]


def _apply_sequence_single(grid: jax.Array, action_ids: jax.Array):
    def step(current, action_id):
        ok = is_feasible_single(current, action_id)
        return apply_action(current, action_id), ok

    final, feasible = jax.lax.scan(step, grid, action_ids)
    return final, feasible


@jax.jit
def apply_action_sequences(grids: jax.Array, action_ids: jax.Array):
    """Apply padded sequences [B, T] (pad with STOP) to grids [B, 11, 9, 11].

    Returns (final grids [B, 11, 9, 11], feasible [B, T]) where feasible[b, t] says whether step
    t was feasible on the grid it met. Infeasible steps are still applied as written.
    """
    return jax.vmap(_apply_sequence_single)(grids, action_ids)


@jax.jit
def apply_actions(grids: jax.Array, action_ids: jax.Array) -> jax.Array:
    """Apply one action id per grid: grids [B, 11, 9, 11], ids [B]."""
    return jax.vmap(apply_action)(grids, action_ids)


# --------------------------------------------------------------------------------------------
# The world rules on the host: structures as {(x, y, z): color} dicts, walked step by step.
# This is the one plain-Python statement of the rules (the JAX functions above are their
# vectorized form, tested against it): the corpus reader, the simulators and planner, the
# evaluator's feasibility check and the heuristic predictors all walk with `StructureWalk` or
# the one-shot functions below it. (`bapjax.evaluation.metrics_reference` restates them independently, on
# purpose: it is the oracle the fast evaluator is checked against.)

Structure = Mapping[tuple[int, int, int], int]
FACE_OFFSETS = ((1, 0, 0), (-1, 0, 0), (0, 1, 0), (0, -1, 0), (0, 0, 1), (0, 0, -1))


def as_structure(blocks: Iterable[Block | tuple] | Structure) -> dict[tuple[int, int, int], int]:
    """A fresh {(x, y, z): color} dict of plain ints from blocks (x, y, z, color) or a dict."""
    if isinstance(blocks, Mapping):
        return {(int(x), int(y), int(z)): int(color) for (x, y, z), color in blocks.items()}
    return {(int(x), int(y), int(z)): int(color) for x, y, z, color in blocks}


def as_blocks(structure: Structure) -> tuple[Block, ...]:
    """Blocks of a structure dict, sorted by (x, y, z)."""
    return tuple(Block(x, y, z, c) for (x, y, z), c in sorted(structure.items()))


def supported(structure: Structure, x: int, y: int, z: int) -> bool:
    """A placement at (x, y, z) rests on the ground or on a face-neighbour of ``structure``."""
    return (y == Y_MIN or (x + 1, y, z) in structure or (x - 1, y, z) in structure
            or (x, y + 1, z) in structure or (x, y - 1, z) in structure
            or (x, y, z + 1) in structure or (x, y, z - 1) in structure)  # FACE_OFFSETS, unrolled


class StructureWalk:
    """A structure changed one action at a time under the grid rules, with its net effect.

    ``structure`` is the current {cell: color} dict (a private copy of the start). ``step``
    applies an action only if it is feasible (predictions, plans); ``apply`` applies it as given
    (references are applied as recorded). ``net_actions()`` is the net effect of every applied
    action: per (color, cell), placements minus removals, so "place then remove the same block"
    is nothing. Blocks per color are counted on first need (removal-only walks never count).
    """

    __slots__ = ("structure", "applied", "_counts")

    def __init__(self, start: Iterable[Block | tuple] | Structure = ()):
        self.structure = as_structure(start)
        self.applied: list[Action | tuple] = []  # every applied action, in order
        self._counts: list[int] | None = None

    @property
    def counts(self) -> list[int]:
        """Blocks of each color, indexed by color id (index 0 unused); updated by every apply."""
        if self._counts is None:
            colors = list(self.structure.values())
            self._counts = [0] + [colors.count(color) for color in range(1, NUM_COLORS + 1)]
        return self._counts

    def feasible(self, action: Action | tuple) -> bool:
        """Whether the action can be done now (the MDC's world rules: region, occupancy, color held,
        inventory of 20 per color, support by the ground or a face-neighbour)."""
        type_, color, x, y, z = action
        if not (X_MIN <= x <= X_MAX and Y_MIN <= y <= Y_MAX and Z_MIN <= z <= Z_MAX):
            return False
        structure = self.structure
        if type_ == REMOVE:
            return color >= 1 and structure.get((x, y, z)) == color
        if type_ != PLACE or not 1 <= color <= NUM_COLORS or (x, y, z) in structure:
            return False
        counts = self._counts if self._counts is not None else self.counts
        return counts[color] < INVENTORY_PER_COLOR and supported(structure, x, y, z)

    def reason(self, action: Action | tuple) -> str | None:
        """Why the action is infeasible now, or None when it is feasible."""
        type_, color, x, y, z = (int(v) for v in action)
        cell = (x, y, z)
        if not in_region(x, y, z):
            return f"cell {cell} is outside the build region"
        if type_ not in (PLACE, REMOVE):
            return f"action type {type_} is neither place ({PLACE}) nor remove ({REMOVE})"
        if not 1 <= color <= NUM_COLORS:
            return f"color id {color} is not in 1..{NUM_COLORS}"
        structure = self.structure
        if type_ == REMOVE:
            if cell not in structure:
                return f"removes from empty cell {cell}"
            if structure[cell] != color:
                return (f"removes {color_name(color)} from cell {cell}, "
                        f"which holds {color_name(structure[cell])}")
            return None
        if cell in structure:
            return f"places into occupied cell {cell}"
        if self.counts[color] >= INVENTORY_PER_COLOR:
            return f"no {color_name(color)} blocks left (at most {INVENTORY_PER_COLOR} placed)"
        if not supported(structure, x, y, z):
            return f"cell {cell} is neither on the ground nor next to a block"
        return None

    def apply(self, action: Action | tuple) -> None:
        """Apply without a check: a placement sets the cell's color, a removal empties it."""
        type_, color, x, y, z = action
        cell = (x, y, z)
        self.applied.append(action)
        counts = self._counts
        if type_ == PLACE:
            old = self.structure.get(cell)
            self.structure[cell] = color
            if counts is not None:
                counts[color] += 1
        else:
            old = self.structure.pop(cell, None)
        if counts is not None and old is not None:
            counts[old] -= 1

    def step(self, action: Action | tuple) -> bool:
        """Apply the action if it is feasible; returns whether it was applied."""
        if not self.feasible(action):
            return False
        self.apply(action)
        return True

    def steps(self, actions: Iterable[Action | tuple]) -> list[int]:
        """``step`` each action in turn; returns the 0-based indices of those not applied."""
        feasible, apply = self.feasible, self.apply
        skipped = []
        for index, action in enumerate(actions):
            if feasible(action):
                apply(action)
            else:
                skipped.append(index)
        return skipped

    def net_actions(self) -> frozenset[Action]:
        """The net effect of the applied actions (see the class docstring)."""
        return net_actions(self.applied)


def net_actions(actions: Iterable[Action | tuple]) -> frozenset:
    """The net action set of a sequence: each action cancels against an inverse of the same color
    and cell. Without any (color, cell) twice nothing cancels and the actions are returned as
    given (the evaluator's common case, twice per item)."""
    actions = list(actions)
    keys = [action[1:] for action in actions]
    if len(set(keys)) == len(keys):
        return frozenset(actions)
    balance: dict = {}
    for action, key in zip(actions, keys):
        balance[key] = balance.get(key, 0) + (1 if action[0] == PLACE else -1)
    return frozenset(Action(PLACE if n > 0 else REMOVE, *key) for key, n in balance.items() if n)


def is_feasible(structure: Structure, action: Action | tuple) -> bool:
    """Feasibility of one action on a structure (`StructureWalk.feasible`)."""
    return StructureWalk(structure).feasible(action)


def infeasibility_reason(structure: Structure, action: Action | tuple) -> str | None:
    """Why an action is infeasible on a structure, or None (`StructureWalk.reason`)."""
    return StructureWalk(structure).reason(action)


def apply_sequence(structure: Iterable[Block | tuple] | Structure, actions: Iterable[Action | tuple]) -> dict:
    """The structure after ``actions`` applied as given (no feasibility check), as a new dict."""
    walk = StructureWalk(structure)
    for action in actions:
        walk.apply(action)
    return walk.structure


def apply_to_structure(structure: Structure, action: Action | tuple) -> dict:
    """New {cell: color} dict after one action (no feasibility check)."""
    return apply_sequence(structure, (action,))
