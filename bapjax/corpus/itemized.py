"""What the item cache stores (`ItemizedCorpus`); the item types themselves live in ``bapjax.world.items``."""

from __future__ import annotations

import dataclasses
import statistics
from pathlib import Path

from bapjax.world import grid
from bapjax.world.items import BapItem


@dataclasses.dataclass
class ItemizedCorpus:
    """All items of a corpus by split (what the item cache stores)."""

    root: Path
    dataset: str
    items: dict[str, list[BapItem]]  # split -> items, in game order
    skipped_out_of_region: dict[str, int]
    games: dict[str, int]  # split -> number of games

    def split(self, name: str) -> list[BapItem]:
        if name not in self.items:
            raise KeyError(f"split {name!r} is not in the corpus at {self.root}; "
                           f"it has {', '.join(self.items) or 'no splits'}")
        return self.items[name]

    def stats(self) -> dict:
        out = {}
        for split, items in self.items.items():
            actions = [len(i.reference_actions) for i in items]
            out[split] = {
                "items": len(items),
                "empty_board": sum(i.is_empty_board for i in items),
                "mean_actions": round(sum(actions) / len(actions), 4) if actions else 0.0,
                "games": self.games.get(split, 0),
                "skipped_out_of_region": self.skipped_out_of_region.get(split, 0),
            }
        return out


def describe(items: list[BapItem]) -> dict:
    """What a set of items is made of, for comparing data sets (the simulators' against the MDC's
    and the paper's): actions per item (mean, SD, median, the share of one-action items, the share
    with a removal), net actions per item, the blocks already on the board (all items; the share of
    empty boards), each game's largest structure, the last Architect turn's words and the dialogue
    turns before the item, and the Architect's distinct word types."""
    if not items:
        return {"items": 0}
    actions = [len(i.reference_actions) for i in items]
    net = [len(grid.net_actions(i.reference_actions)) for i in items]
    removals = [sum(a.type == grid.REMOVE for a in i.reference_actions) for i in items]
    largest: dict[str, int] = {}
    for item in items:
        largest[item.game_id] = max(largest.get(item.game_id, 0), len(item.next_structure), len(item.prev_structure))
    last_words, turns, words = [], [], set()
    for item in items:
        architect = [t.text for t in item.dialogue if t.speaker == "Architect"]
        turns.append(len(item.dialogue))
        last_words.append(len(architect[-1].split()) if architect else 0)
        for text in architect:
            words.update(text.lower().split())

    def mean(values) -> float:
        return round(sum(values) / len(values), 3)

    ordered = sorted(actions)
    sd = statistics.stdev(actions) if len(actions) > 1 else 0.0
    return {
        "items": len(items), "games": len(largest),
        "empty_board_share": mean([i.is_empty_board for i in items]),
        "actions_mean": mean(actions), "actions_sd": round(sd, 3), "actions_median": ordered[len(ordered) // 2],
        "one_action_share": mean([a == 1 for a in actions]), "with_removal_share": mean([r > 0 for r in removals]),
        "net_actions_mean": mean(net), "board_blocks_mean": mean([len(i.prev_structure) for i in items]),
        "game_structure_blocks_mean": mean(list(largest.values())),
        "last_architect_words_mean": mean(last_words), "dialogue_turns_mean": mean(turns),
        "architect_word_types": len(words),
    }
