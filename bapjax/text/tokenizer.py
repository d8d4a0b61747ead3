"""Tokenize dialogue and render the Builder's past actions as tokens.

Words are lowercased and split the way GloVe's corpus was (punctuation apart, "don't" ->
"do n't"), so most tokens have a GloVe vector. Speaker turns and Builder actions become
special tokens, which the vocabulary always holds.
"""

from __future__ import annotations

import re
from typing import Iterable, Sequence

import numpy as np

from bapjax.world import grid
from bapjax.world.grid import Action

PAD = "<pad>"
UNK = "<unk>"
ARCHITECT = "<architect>"
BUILDER = "<builder>"
OTHER_SPEAKER = "<speaker>"
END_OF_UTTERANCE = "<eou>"
PLACE = "<place>"
REMOVE = "<remove>"

SPEAKER_TOKENS = {"Architect": ARCHITECT, "Builder": BUILDER}

_WORD = re.compile(r"[a-z]+(?=n't)|n't|[a-z]+|'[a-z]+|\d+(?:\.\d+)?|[^\sa-z\d]")


def tokenize(text: str) -> list[str]:
    """Lowercased word and punctuation tokens of one utterance."""
    return _WORD.findall(text.lower())


def coordinate_token(axis: str, value: int) -> str:
    return f"<{axis}={value}>"


def action_tokens(action: Action) -> list[str]:
    """A Builder action as 5 tokens: type, color word, x, y, z coordinate tokens."""
    return [PLACE if action.type == grid.PLACE else REMOVE, grid.color_name(action.color),
            coordinate_token("x", action.x), coordinate_token("y", action.y),
            coordinate_token("z", action.z)]


def utterance_tokens(speaker: str, text: str) -> list[str]:
    """A chat turn: speaker token, words, end-of-utterance token."""
    return [SPEAKER_TOKENS.get(speaker, OTHER_SPEAKER), *tokenize(text), END_OF_UTTERANCE]


def special_tokens() -> list[str]:
    """Tokens the vocabulary holds whatever the training data (pad and unk first)."""
    coords = [coordinate_token("x", v) for v in range(grid.X_MIN, grid.X_MAX + 1)]
    coords += [coordinate_token("y", v) for v in range(grid.Y_MIN, grid.Y_MAX + 1)]
    coords += [coordinate_token("z", v) for v in range(grid.Z_MIN, grid.Z_MAX + 1)]
    return [PAD, UNK, ARCHITECT, BUILDER, OTHER_SPEAKER, END_OF_UTTERANCE, PLACE, REMOVE,
            *grid.COLORS, *coords]


def history_segments(history: Iterable) -> list[list[str]]:
    """One token list per history event (chat turn or Builder action), oldest first."""
    segments = []
    for event in history:
        if isinstance(event, Action):
            segments.append(action_tokens(event))
        else:
            segments.append(utterance_tokens(event.speaker, event.text))
    return segments


def truncate_newest_first(segments_newest_first: Iterable[list], max_tokens: int) -> tuple[list, bool]:
    """The truncation rule on segments given newest first (read lazily, only while they fit).

    Whole events are kept from the newest backwards. If the oldest kept event does not fit
    whole, its newest tokens are kept behind its first token (the speaker or action-type
    token), so every kept fragment still says who spoke or what kind of action it was.
    Returns (tokens oldest first, whether anything was cut).
    """
    if max_tokens <= 0:
        return [], True
    kept: list[list] = []
    used = 0
    truncated = False
    for segment in segments_newest_first:
        if used + len(segment) <= max_tokens:
            kept.append(segment)
            used += len(segment)
            continue
        truncated = True
        room = max_tokens - used
        if room >= 2:
            kept.append([segment[0], *segment[len(segment) - (room - 1):]])
        elif room == 1 and not kept:
            kept.append(segment[-1:])
        break
    return [token for segment in reversed(kept) for token in segment], truncated


def truncate_history(segments: list[list[str]], max_tokens: int) -> list[str]:
    """The most recent ``max_tokens`` tokens of segments given oldest first (see above)."""
    return truncate_newest_first(reversed(segments), max_tokens)[0]


def history_token_counts(items: Sequence) -> np.ndarray:
    """Tokens of each item's whole history (chat turns and Builder actions), untruncated: the
    curriculum's metric L_I and the store statistics' history lengths."""
    cache: dict = {}
    out = np.empty(len(items), np.int64)
    for n, item in enumerate(items):
        total = 0
        for event in item.history:
            count = cache.get(event)
            if count is None:
                count = len(history_segments([event])[0])
                cache[event] = count
            total += count
        out[n] = total
    return out
