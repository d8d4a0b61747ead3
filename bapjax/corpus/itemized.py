"""What the item cache stores (`ItemizedCorpus`); the item types themselves live in ``bapjax.world.items``."""

from __future__ import annotations

import dataclasses
from pathlib import Path

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
