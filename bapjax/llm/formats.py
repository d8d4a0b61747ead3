"""Three text layouts of a BAP item: ``nebula``, ``code`` and ``rich`` (prompt + reference completion).

MDC coordinates throughout (x, z in -5..5, y in 1..9, y = 1 the ground). Every layout renders
the same history (chat turns with the Builder's earlier actions inline, oldest first) and one
action per completion line:

* ``nebula`` (Nebula, Chaturvedi et al. 2024): ``<Architect> text`` / ``<Builder> text`` lines,
  earlier actions as ``place <color> x y z`` / ``pick x y z`` lines, the prompt ends with
  ``### AS:``; the completion is ``place``/``pick`` lines.
* ``code`` (Kranti et al. 2024): a system text describing the 11x9x11 grid, the colors and the
  two functions, then ``Architect: text`` / ``Builder: text`` turns with earlier actions as calls;
  the completion is calls ``place(color='red',x=0,y=1,z=0)`` / ``pick(color='red',x=0,y=1,z=0)``.
* ``rich`` (ours): ``nebula``'s lines plus what the neural models see through the world CNN and
  the perspective channels: the current structure (blocks grouped by color, with coordinates),
  the Builder's position and facing in words and numbers, and the last few actions.

The reference completion is the item's net action set (what the evaluator scores) in an order
that can be built (`completion_actions`), so parsing it back and walking it over S_prev gives
exactly the item's net actions. Few-shot examples (``shots``) are other items rendered with only
their last instruction (the chat since their Builder's previous action) and their completion.
"""

from __future__ import annotations

from typing import Callable, Sequence

from bapjax.evaluation import trivial
from bapjax.world import grid
from bapjax.world.grid import PLACE, Action
from bapjax.world.items import BapItem, ChatTurn

FORMATS = ("nebula", "code", "rich")
LAST_ACTIONS = 5  # rich: how many of the Builder's latest actions are restated


# --------------------------------------------------------------------------------------------
# The reference completion


def completion_actions(item: BapItem) -> list[Action]:
    """The item's net actions (`grid.net_actions` of the reference) in a buildable order.

    Greedy: repeatedly take the first remaining net action (in the order of its last occurrence
    in the reference) that is feasible now. When that gets stuck (a placement the human made on a
    temporary support, 244 of the 1,616 MDC test items, or one of the 2 MDC references with an
    unsupported placement), the completion is the oracle predictor's sequence
    (`predictors.oracle_prediction`: the reference as recorded, temporary supports included, with
    supports added around unsupported placements); its net actions are the same.
    """
    reference = list(item.reference_actions)
    last = {action: position for position, action in enumerate(reference)}
    remaining = sorted(grid.net_actions(reference), key=lambda a: last.get(a, len(reference)))
    walk = grid.StructureWalk(item.prev_structure)
    ordered: list[Action] = []
    while remaining:
        for n, action in enumerate(remaining):
            if walk.feasible(action):
                walk.apply(action)
                ordered.append(action)
                del remaining[n]
                break
        else:
            return trivial.oracle_prediction(item)
    return ordered


# --------------------------------------------------------------------------------------------
# Shared pieces


def _text(turn: ChatTurn) -> str:
    return " ".join(turn.text.split())  # one line per turn


def nebula_action(action: Action) -> str:
    _, color, x, y, z = action
    if action.type == PLACE:
        return f"place {grid.color_name(color)} {x} {y} {z}"
    return f"pick {x} {y} {z}"


def code_action(action: Action) -> str:
    type_, color, x, y, z = action
    verb = "place" if type_ == PLACE else "pick"
    return f"{verb}(color='{grid.color_name(color)}',x={x},y={y},z={z})"


def last_instruction_events(item: BapItem) -> list:
    """The history after the Builder's latest action: the instruction the next actions answer."""
    events = list(item.history)
    start = 0
    for n, event in enumerate(events):
        if not isinstance(event, ChatTurn):
            start = n + 1
    return events[start:]


def last_instruction(item: BapItem) -> str:
    """The text retrieval compares: the Architect's turns since the Builder's latest action
    (else the last Architect turn of the whole dialogue; '' when there is none)."""
    turns = [_text(e) for e in last_instruction_events(item)
             if isinstance(e, ChatTurn) and e.speaker == "Architect"]
    if not turns:
        turns = [_text(t) for t in item.dialogue if t.speaker == "Architect"][-1:]
    return " ".join(turns)


def _history_lines(events, chat: Callable[[ChatTurn], str], act: Callable[[Action], str]) -> list[str]:
    return [chat(e) if isinstance(e, ChatTurn) else act(e) for e in events]


def _tagged(turn: ChatTurn) -> str:
    return f"<{turn.speaker}> {_text(turn)}"


def _named(turn: ChatTurn) -> str:
    return f"{turn.speaker}: {_text(turn)}"


# --------------------------------------------------------------------------------------------
# rich: the world as text

_DIRECTIONS = ("+z", "+z and -x", "-x", "-z and -x", "-z", "-z and +x", "+x", "+z and +x")


def facing_words(yaw: float) -> str:
    """The horizontal direction of a Minecraft yaw (0 faces +z, 90 faces -x), in eighths."""
    return _DIRECTIONS[int(round((yaw % 360) / 45.0)) % 8]


def pose_line(item: BapItem) -> str:
    pose = item.builder_pose
    yaw = pose.yaw % 360
    right = facing_words(yaw + 90)  # the right hand points 90 degrees clockwise seen from above
    pitch = pose.pitch
    look = (f"looking down {abs(pitch):.0f} degrees" if pitch > 0.5 else
            f"looking up {abs(pitch):.0f} degrees" if pitch < -0.5 else "looking straight ahead")
    return (f"The Builder stands at x={pose.x:.1f} y={pose.y:.1f} z={pose.z:.1f}, facing {facing_words(yaw)} "
            f"(yaw {yaw:.0f}), right hand toward {right}, {look} (pitch {pitch:.0f}).")


def structure_lines(item: BapItem) -> list[str]:
    if not item.prev_structure:
        return ["The grid is empty."]
    by_color: dict[int, list] = {}
    for block in sorted(item.prev_structure, key=lambda b: (b.y, b.x, b.z)):
        by_color.setdefault(block.color, []).append(block)
    lines = [f"The structure has {len(item.prev_structure)} blocks:"]
    for color in sorted(by_color):
        cells = " ".join(f"({b.x},{b.y},{b.z})" for b in by_color[color])
        lines.append(f"{grid.color_name(color)} ({len(by_color[color])}): {cells}")
    return lines


def recent_actions_line(item: BapItem) -> str:
    actions = [e for e in item.history if not isinstance(e, ChatTurn)][-LAST_ACTIONS:]
    if not actions:
        return "The Builder has not acted yet."
    return "The Builder's last actions, oldest first: " + "; ".join(nebula_action(a) for a in actions) + "."


# --------------------------------------------------------------------------------------------
# The formats

CODE_SYSTEM = (
    "You are the Builder in a Minecraft collaborative building game. The Architect describes a "
    "structure and you build it on a grid of 11 x 9 x 11 cells: x from -5 to 5, y from 1 (the "
    "ground) to 9 (up), z from -5 to 5. Blocks come in six colors: red, orange, yellow, green, "
    "blue, purple (at most 20 of each on the grid). A block must rest on the ground (y=1) or touch "
    "another block face to face. You act with two functions:\n"
    "place(color, x, y, z): put a block of that color into the empty cell (x, y, z)\n"
    "pick(color, x, y, z): take the block of that color out of the cell (x, y, z)\n"
    "Given the game so far (the Builder's earlier actions appear as calls), answer with the "
    "Builder's next actions as calls, one per line, and nothing else."
)


def _body(item: BapItem, fmt: str, instruction_only: bool) -> str:
    events = last_instruction_events(item) if instruction_only else list(item.history)
    if fmt == "code":
        lines = ["Game so far:"] + _history_lines(events, _named, code_action) + ["Builder's next actions:"]
        return "\n".join(lines)
    lines = _history_lines(events, _tagged, nebula_action)
    if fmt == "rich":
        lines += ["### World:"] + structure_lines(item) + [pose_line(item), recent_actions_line(item)]
    lines.append("### AS:")
    return "\n".join(lines)


def render_completion(item: BapItem, fmt: str) -> str:
    """The reference completion: one action per line (`completion_actions`)."""
    check_format(fmt)
    act = code_action if fmt == "code" else nebula_action
    return "\n".join(act(a) for a in completion_actions(item))


def render_prompt(item: BapItem, fmt: str, shots: Sequence[BapItem] = ()) -> str:
    """The prompt of `item` in layout `fmt`, after the few-shot examples `shots` (if any)."""
    check_format(fmt)
    parts = [CODE_SYSTEM] if fmt == "code" else []
    for n, shot in enumerate(shots, 1):
        parts.append(f"Example {n}:\n{_body(shot, fmt, True)}\n{render_completion(shot, fmt)}")
    if shots:
        parts.append("Now the game:")
    parts.append(_body(item, fmt, False))
    return "\n\n".join(parts)


def render(item: BapItem, fmt: str, shots: Sequence[BapItem] = ()) -> dict:
    """The export record {"item_id", "prompt", "completion"}."""
    return {"item_id": item.item_id, "prompt": render_prompt(item, fmt, shots),
            "completion": render_completion(item, fmt)}


class UnknownFormat(ValueError):
    pass


def check_format(fmt: str) -> None:
    if fmt not in FORMATS:
        raise UnknownFormat(f"unknown format {fmt!r}; expected one of {', '.join(FORMATS)}")
