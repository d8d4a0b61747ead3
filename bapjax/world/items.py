"""BapItem: one Builder Action Prediction example, and its JSON form; the split and data set names.

An item is everything a model may look at (dialogue history with the Builder's earlier actions,
the structure before, the Builder's pose at the last utterance) plus the reference: the
action sequence the human Builder performed next and the structure it led to.

This module sits low (it needs only ``bapjax.world.grid``): the corpus readers, simulators, text,
curriculum and training code all share these types. ``SPLITS``, ``DATASETS`` and ``TABLE3`` are
the one statement of the split names, the data set tags and the paper's Table 3 sizes.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping, NamedTuple

from bapjax.world import grid
from bapjax.world.grid import Action, Block

SPLITS = ("train", "val", "test")
DATASETS = ("mc", "bs", "ss", "r")  # the MDC and the three simulated sets (an item's `dataset`)
TABLE3 = {  # paper Table 3: (train, val, test) items of each data set (mc: the 4x augmented MDC)
    "bs": (9890, 1186, 1181),
    "ss": (11868, 1000, 1000),
    "r": (15825, 1161, 1089),
    "mc": (14836, 1331, 1616),
}

class ChatTurn(NamedTuple):
    speaker: str  # "Architect" or "Builder"
    text: str


class BuilderPose(NamedTuple):
    x: float
    y: float
    z: float
    yaw: float
    pitch: float


# A history event is a ChatTurn or an Action (the Builder's earlier actions, in order).
HistoryEvent = ChatTurn | Action


@dataclasses.dataclass(frozen=True)
class BapItem:
    item_id: str  # "<game dir>:<k>"
    game_id: str  # the game directory name
    target_id: str  # "C<n>"
    split: str  # train / val / test (or a simulator's split)
    history: tuple[HistoryEvent, ...]  # chat turns with earlier Builder actions interleaved
    prev_structure: tuple[Block, ...]
    reference_actions: tuple[Action, ...]
    next_structure: tuple[Block, ...]
    builder_pose: BuilderPose
    dataset: str = "mc"  # which data set the item came from: mc, bs, ss, r, ...

    @property
    def is_empty_board(self) -> bool:
        return not self.prev_structure

    @property
    def dialogue(self) -> tuple[ChatTurn, ...]:
        return tuple(e for e in self.history if isinstance(e, ChatTurn))

    def to_json(self) -> dict[str, Any]:
        """The export record (see README, "Item export format")."""
        history = []
        for event in self.history:
            if isinstance(event, ChatTurn):
                history.append({"speaker": event.speaker, "text": event.text})
            else:
                history.append({"action": grid.action_to_dict(event)})
        return {
            "item_id": self.item_id,
            "game_id": self.game_id,
            "target_id": self.target_id,
            "split": self.split,
            "dataset": self.dataset,
            "is_empty_board": self.is_empty_board,
            "prev_structure": [grid.block_to_dict(b) for b in self.prev_structure],
            "reference_actions": [grid.action_to_dict(a) for a in self.reference_actions],
            "next_structure": [grid.block_to_dict(b) for b in self.next_structure],
            "dialogue": [{"speaker": t.speaker, "text": t.text} for t in self.dialogue],
            "history": history,
            "builder_pose": self.builder_pose._asdict(),
        }

    @classmethod
    def from_json(cls, record: Mapping[str, Any], where: str = "item") -> "BapItem":
        """Inverse of ``to_json``; ``next_structure`` and ``history`` are optional."""
        for field in ("item_id", "prev_structure", "reference_actions"):
            if field not in record:
                raise ValueError(f"{where}: missing field {field!r}")
        item_id = str(record["item_id"])
        where = f"{where} {item_id}"
        prev = tuple(
            grid.block_from_dict(b, f"{where} prev_structure[{i}]")
            for i, b in enumerate(record["prev_structure"])
        )
        actions = tuple(
            grid.action_from_dict(a, f"{where} reference_actions[{i}]")
            for i, a in enumerate(record["reference_actions"])
        )
        if "next_structure" in record:
            nxt = tuple(
                grid.block_from_dict(b, f"{where} next_structure[{i}]")
                for i, b in enumerate(record["next_structure"])
            )
        else:
            nxt = grid.as_blocks(grid.apply_sequence(prev, actions))
        if "history" in record:
            history = tuple(
                grid.action_from_dict(e["action"], f"{where} history[{i}]", check_region=False)
                if "action" in e
                else ChatTurn(e["speaker"], e["text"])
                for i, e in enumerate(record["history"])
            )
        else:
            history = tuple(ChatTurn(t["speaker"], t["text"]) for t in record.get("dialogue", []))
        pose = record.get("builder_pose") or {}
        game_id = str(record.get("game_id", item_id.rsplit(":", 1)[0]))
        return cls(
            item_id=item_id,
            game_id=game_id,
            target_id=str(record.get("target_id", "")),
            split=str(record.get("split", "")),
            history=history,
            prev_structure=prev,
            reference_actions=actions,
            next_structure=nxt,
            builder_pose=BuilderPose(*(float(pose.get(k, 0.0)) for k in BuilderPose._fields)),
            dataset=str(record.get("dataset", "mc")),
        )


def last_architect_turn(item: BapItem) -> str:
    """The text of the item's last Architect chat turn, the instruction being answered ("" when
    it has none)."""
    for event in reversed(item.history):
        if isinstance(event, ChatTurn) and event.speaker == "Architect":
            return event.text
    return ""
