"""Featurize BAP items into fixed-shape arrays, and iterate over them in seeded, resumable batches.

Two layers:

* ``featurize_items`` turns items into a compact ``FeaturizedItems`` table (token ids, S_prev
  grid, the cells of the last Builder actions, the Builder pose, action ids) once; it can be
  cached on disk. ``expand_batch`` turns rows of that table into the model's arrays (the dense
  recent-action and Builder-perspective channels are computed on device from ``recent_cells``
  and ``pose``: ``bapjax.models.world_input`` owns the world input, ``grid``, ``recent_cells``
  and ``pose`` are its ``WORLD_KEYS``).
* ``DataIterator`` walks the table in passes: with a curriculum ``schedule`` pass p uses stage p's
  indices (then the last stage repeats); without one every pass is all items. Order within a
  pass is a permutation drawn from (seed, pass); the iterator's position is (pass, batch), so
  ``get_state``/``set_state`` resume exactly. Each host takes its own rows of every global batch.

Model inputs (per item; batches stack to [B, ...]), see ``feature_specs``:
``text_tokens`` int32 [L], ``text_mask`` bool [L], ``grid`` int8 [11, 9, 11] (S_prev colors,
0 empty), ``recent_cells`` int32 [W] (flat cell of the k-th newest earlier Builder action, -1
none), ``pose`` float32 [5] (Builder x, y, z, yaw, pitch), ``actions`` int32 [T] (reference ids,
then STOP, padded with STOP), ``action_mask`` bool [T] (True on the reference actions and the one
STOP), ``weight`` float32 [] (the item's weight in the loss: 1, or what the iterator's ``weights``
give it, e.g. a teacher's copy of an item, ``bapjax.data.teacher``; 0 padding).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
from pathlib import Path
from typing import Any, Iterator, Mapping, Sequence

import numpy as np
from absl import logging

from bapjax import cli, paths
from bapjax.text import bert_states, tokenizer
from bapjax.text.encoders import GRU_TEXT, TEXT_ENCODERS, text_encoder_features
from bapjax.text.vocab import Vocabulary
from bapjax.world import grid, rotation
from bapjax.world.grid import Action
from bapjax.world.items import BapItem, ChatTurn

FEATURIZER_VERSION = 1


@dataclasses.dataclass(frozen=True)
class FeatureConfig:
    """Static shapes and feature options: what featurization reads. Its config fields live in
    ``config.features`` (`feature_defaults`, where `bapjax.training.run_config.base_config` takes them
    from); `text_encoder` follows the model's (``config.model.text.encoder``: the model reads
    frozen-encoder states only if the features make them). `fingerprint` keys the feature cache,
    so it holds exactly these fields (`builder_frame` only when on).

    With `builder_frame` each item is featurized turned by `rotation.builder_frame_turns` of its
    Builder's yaw (start grid, recent-action cells, the history's action tokens, pose, reference
    actions): the Builder looks along +z in every item's features. The items themselves stay in
    world coordinates; decoding turns its predictions back (`bapjax.decoding.decode.predict_items`)."""

    max_text_tokens: int = 256  # L: history tokens kept (the most recent)
    max_actions: int = 20  # T = max_actions + 1 action slots (the last for STOP)
    recent_window: int = 10  # how many of the Builder's last actions the recent channel marks
    text_encoder: str = ""  # "": vocabulary token ids; "minilm": frozen MiniLM token states (text_states)
    builder_frame: bool = False  # featurize each item turned into its Builder's frame (bapjax.world.rotation)

    @property
    def num_action_slots(self) -> int:
        return self.max_actions + 1

    @classmethod
    def from_config(cls, config: Any | None) -> "FeatureConfig":
        """From a run config (its ``features`` section and ``model.text.encoder``), or from a
        features mapping alone (vocabulary ids); missing fields keep their default."""
        if config is None:
            return cls()
        text_encoder = ""
        if _get(config, "features") is not None:
            text = _get(_get(config, "model"), "text")
            text_encoder = text_encoder_features(_get(text, "encoder") or GRU_TEXT) if text is not None else ""
            config = _get(config, "features")
        values = {"text_encoder": text_encoder}
        for name in feature_defaults():
            value = _get(config, name)
            if value is not None:
                values[name] = type(getattr(cls, name))(value)
        feature_config = cls(**values)
        if feature_config.max_text_tokens < 1 or feature_config.max_actions < 1:
            raise ValueError(f"feature config needs max_text_tokens >= 1 and max_actions >= 1, got {feature_config}")
        return feature_config

    def fingerprint(self) -> str:
        fields = dataclasses.asdict(self)
        if not fields["builder_frame"]:  # off: the key the feature caches had before the option
            del fields["builder_frame"]
        return json.dumps(fields, sort_keys=True)


def feature_specs(config: FeatureConfig) -> dict[str, tuple[tuple[int, ...], np.dtype]]:
    """Per-item shape and dtype of every model input."""
    gx, gy, gz = grid.GRID_SHAPE
    return {
        "text_tokens": ((config.max_text_tokens,), np.dtype(np.int32)),
        "text_mask": ((config.max_text_tokens,), np.dtype(bool)),
        "grid": ((gx, gy, gz), np.dtype(np.int8)),
        "recent_cells": ((config.recent_window,), np.dtype(np.int32)),
        "pose": ((5,), np.dtype(np.float32)),
        "actions": ((config.num_action_slots,), np.dtype(np.int32)),
        "action_mask": ((config.num_action_slots,), np.dtype(bool)),
        "weight": ((), np.dtype(np.float32)),
    }


# --------------------------------------------------------------------------------------------
# Compact per-item table


@dataclasses.dataclass
class FeaturizedItems:
    """Compact features of N items; row N (the last) is an all-padding row."""

    text_tokens: np.ndarray  # int32 [N+1, L]
    text_length: np.ndarray  # int32 [N+1]
    grid: np.ndarray  # int8 [N+1, 11, 9, 11]
    recent_cells: np.ndarray  # int16 [N+1, W] flat cell index of the k-th newest action, -1 none
    pose: np.ndarray  # float32 [N+1, 5] x, y, z, yaw, pitch
    actions: np.ndarray  # int32 [N+1, T]
    num_actions: np.ndarray  # int32 [N+1] reference actions kept (<= T)
    item_ids: list[str]
    truncated_actions: int  # items whose reference was longer than T - 1 (cut, no STOP)
    truncated_text: int  # items whose history was longer than L tokens
    # with a frozen text encoder: float16 [P, H] token states of the distinct chat turns;
    # ``text_tokens`` then holds each item's rows into it (bapjax.text.bert_states)
    text_pool: np.ndarray = dataclasses.field(default_factory=lambda: np.zeros((0, 0), np.float16))

    def __len__(self) -> int:
        return len(self.item_ids)

    @property
    def padding_row(self) -> int:
        return len(self.item_ids)

    def arrays(self) -> dict[str, np.ndarray]:
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)
                if isinstance(getattr(self, f.name), np.ndarray)}

    def save(self, path: str | os.PathLike) -> None:
        """Atomically (the file is whole or absent); a full disk raises `paths.NoSpaceError`."""
        def write(partial: Path) -> None:
            with open(partial, "wb") as handle:
                np.savez(handle, item_ids=np.array(self.item_ids, dtype=object).astype(str),
                         counts=np.array([self.truncated_actions, self.truncated_text]), **self.arrays())

        paths.write_atomically(path, write, "the feature cache")

    @classmethod
    def load(cls, path: str | os.PathLike) -> "FeaturizedItems":
        with np.load(path, allow_pickle=False) as data:
            arrays = {k: data[k] for k in data.files}
        counts = arrays.pop("counts")
        arrays.pop("mentions", None)  # an empty array in caches written up to commit 57cc1b0
        return cls(item_ids=[str(s) for s in arrays.pop("item_ids")], truncated_actions=int(counts[0]),
                   truncated_text=int(counts[1]), **arrays)


class _SegmentCache:
    """Token ids of each distinct history event (chat turns repeat across a game's items)."""

    def __init__(self, vocab: Vocabulary):
        self.vocab = vocab
        self.cache: dict = {}

    def __call__(self, event) -> list[int]:
        ids = self.cache.get(event)
        if ids is None:
            if isinstance(event, Action):
                ids = self.vocab.ids(tokenizer.action_tokens(event))
            elif isinstance(event, ChatTurn):
                ids = self.vocab.ids(tokenizer.utterance_tokens(event.speaker, event.text))
            else:
                raise TypeError(f"history event {event!r} is neither a ChatTurn nor an Action")
            self.cache[event] = ids
        return ids


def _truncated_history_ids(item: BapItem, segment_ids: _SegmentCache, max_tokens: int) -> tuple[list[int], bool]:
    """``tokenizer.truncate_history`` on ids, reading only the events that can fit."""
    return tokenizer.truncate_newest_first(map(segment_ids, reversed(item.history)), max_tokens)


def featurize_items(items: Sequence[BapItem], vocab: Vocabulary, config: FeatureConfig,
                    progress: bool = False) -> FeaturizedItems:
    """Compact features of every item (one Python pass; the dense inputs are built per batch)."""
    n = len(items)
    L, T, W = config.max_text_tokens, config.num_action_slots, config.recent_window
    text = np.zeros((n + 1, L), np.int32)
    text_length = np.zeros((n + 1,), np.int32)
    grids = np.zeros((n + 1, *grid.GRID_SHAPE), np.int8)
    recent = np.full((n + 1, max(W, 1)), -1, np.int16)
    pose = np.zeros((n + 1, 5), np.float32)
    actions = np.full((n + 1, T), grid.STOP, np.int32)
    num_actions = np.zeros((n + 1,), np.int32)
    segment_ids = _SegmentCache(vocab)
    truncated_actions = truncated_text = 0
    rule = cli.Progress(n)
    for row, item in enumerate(items):
        where = f"item {item.item_id}"
        if config.builder_frame:
            item = rotation.to_builder_frame(item)[0]
        ids, cut = _truncated_history_ids(item, segment_ids, L)
        truncated_text += cut
        text[row, :len(ids)] = ids
        text_length[row] = len(ids)
        for block in item.prev_structure:
            if not grid.in_region(block.x, block.y, block.z):
                raise ValueError(f"{where}: S_prev block {tuple(block)} is outside the build region")
            i, j, k = grid.cell_to_index(block.x, block.y, block.z)
            grids[row, i, j, k] = block.color
        if W > 0:
            age = 0
            for event in reversed(item.history):
                if isinstance(event, Action):
                    if grid.in_region(event.x, event.y, event.z):
                        recent[row, age] = grid.cell_id(event.x, event.y, event.z)
                    age += 1
                    if age >= W:
                        break
        pose[row] = item.builder_pose
        reference = item.reference_actions
        if len(reference) > T - 1:
            truncated_actions += 1
        kept = reference[:T]
        try:
            actions[row, :len(kept)] = [grid.encode_action(a) for a in kept]
        except (ValueError, IndexError) as err:
            raise ValueError(f"{where}: reference action cannot be encoded ({err})") from err
        num_actions[row] = len(kept)
        if progress and (row + 1) % 10000 == 0:
            logging.info("featurized %s", rule.line(row + 1))
    pool = np.zeros((0, 0), np.float16)
    if config.text_encoder:  # the text input is frozen-encoder token states (of the chat turns: no rotation)
        states = bert_states.item_text_states(items, text_state_store(config.text_encoder), L)
        text[:n] = np.maximum(states.rows, 0)
        text_length[:n] = (states.rows >= 0).sum(1)
        pool, truncated_text = states.pool, states.truncated
    return FeaturizedItems(text, text_length, grids, recent, pose, actions, num_actions,
                           [item.item_id for item in items], truncated_actions, truncated_text, pool)


def feature_defaults() -> dict[str, Any]:
    """The ``config.features`` fields and their defaults (FeatureConfig's, less `text_encoder`,
    which follows ``config.model.text.encoder``)."""
    return {f.name: f.default for f in dataclasses.fields(FeatureConfig) if f.name != "text_encoder"}


def _get(mapping: Any, name: str):
    return mapping.get(name, None) if hasattr(mapping, "get") else getattr(mapping, name, None)


def text_state_store(name: str) -> bert_states.TurnStateStore:
    """The turn-state store of a frozen text encoder (loaded once per process)."""
    if name not in _STORES:
        from bapjax.text import minilm  # the pretrained weights are an optional install (see README)

        _STORES[name] = bert_states.TurnStateStore(minilm.load(), TEXT_ENCODERS[name])
    return _STORES[name]


_STORES: dict = {}


def items_digest(items: Sequence[BapItem]) -> str:
    """Content hash of items (every field), linear in the total history length.

    Consecutive items of a game extend the previous item's history, so a running hash of the
    history is extended by the new events only instead of rehashing each whole history.
    """
    digest = hashlib.sha256()
    history_hash = hashlib.sha256()
    previous: tuple = ()
    for item in items:
        history = item.history
        n = len(previous)
        if n <= len(history) and history[:n] == previous:
            new_events = history[n:]
        else:
            history_hash = hashlib.sha256()
            new_events = history
        history_hash.update(repr(new_events).encode())
        previous = history
        digest.update(repr((item.item_id, item.game_id, item.target_id, item.split, item.dataset,
                            item.prev_structure, item.reference_actions, item.next_structure,
                            tuple(item.builder_pose), len(history))).encode())
        digest.update(history_hash.digest())
    return digest.hexdigest()


def featurize_items_cached(items: Sequence[BapItem], vocab: Vocabulary, config: FeatureConfig,
                           cache_dir: str | os.PathLike | None = None, progress: bool = False) -> FeaturizedItems:
    """``featurize_items`` through an on-disk cache keyed by item content, vocab and config."""
    if cache_dir is None:
        return featurize_items(items, vocab, config, progress)
    digest = hashlib.sha256(f"v{FEATURIZER_VERSION}\n{config.fingerprint()}\n".encode())
    digest.update("\n".join(vocab.tokens).encode())
    digest.update(items_digest(items).encode())
    path = Path(cache_dir) / f"features-{digest.hexdigest()[:20]}.npz"
    if path.exists():
        try:  # npz members carry CRC-32s: a damaged file fails here, is moved aside and rebuilt
            features = FeaturizedItems.load(path)
            if len(features.item_ids) != len(items) or len(features.text_tokens) != len(items) + 1:
                raise ValueError(f"holds {len(features.item_ids)} items, {len(items)} expected")
            return features
        except Exception as err:  # noqa: BLE001 (zip, numpy and key errors alike)
            paths.set_aside(path, f"unreadable: {type(err).__name__}: {err}", "the feature cache")
    features = featurize_items(items, vocab, config, progress)
    path.parent.mkdir(parents=True, exist_ok=True)
    features.save(path)
    return features


# --------------------------------------------------------------------------------------------
# Dense model inputs from rows of the table

def expand_batch(features: FeaturizedItems, rows: np.ndarray, config: FeatureConfig,
                 weights: np.ndarray | None = None) -> dict[str, np.ndarray]:
    """Model inputs for ``rows`` of the table (the padding row gives weight 0 everywhere);
    ``weights`` [N]: each item's weight in the loss (default 1)."""
    rows = np.asarray(rows, np.int64)
    L, T = config.max_text_tokens, config.num_action_slots
    text_tokens = features.text_tokens[rows]
    num_actions = features.num_actions[rows]
    slots = np.arange(T)
    action_mask = slots[None, :] <= num_actions[:, None]
    real = rows != features.padding_row
    action_mask &= real[:, None]
    text_mask = np.arange(L)[None, :] < features.text_length[rows][:, None]
    weight = real.astype(np.float32)
    if weights is not None:
        weight *= np.asarray(weights, np.float32)[np.where(real, rows, 0)]
    extra = {}
    if features.text_pool.size:  # frozen text encoder: the token states themselves
        extra["text_states"] = features.text_pool[text_tokens].astype(np.float32) * text_mask[..., None]
    return {
        **extra,
        "text_tokens": text_tokens.astype(np.int32, copy=False),
        "text_mask": text_mask,
        "grid": features.grid[rows],
        "recent_cells": features.recent_cells[rows].astype(np.int32),
        "pose": features.pose[rows].astype(np.float32, copy=False),
        "actions": features.actions[rows],
        "action_mask": action_mask,
        "weight": weight,
    }


def featurize(item: BapItem, vocab: Vocabulary, config: FeatureConfig | None = None) -> dict[str, np.ndarray]:
    """Model inputs of one item (unbatched shapes; see the module docstring)."""
    config = config or FeatureConfig()
    table = featurize_items([item], vocab, config)
    return {k: v[0] for k, v in expand_batch(table, np.array([0]), config).items()}


# --------------------------------------------------------------------------------------------
# Iterator


class DataIterator:
    """Seeded, resumable, host-sharded batches over featurized items.

    ``batch_size`` is the global batch size; each of the ``process_count`` hosts yields
    ``batch_size // process_count`` rows per step, and all hosts take the same number of steps.
    ``schedule`` is a list of index arrays (curriculum stages): pass p goes once over stage
    min(p, last) in a seeded random order; without a schedule every pass is one epoch over all
    items. ``num_epochs`` bounds the number of passes (None: endless). With
    ``drop_remainder=False`` the last batches of a pass are filled with padding rows (weight 0).
    ``weights`` [N] (default all 1): each item's weight in the loss, its batches' ``weight``.
    Hosts share one global order and host p takes its slice of every global batch, so training
    sees the same global batches whatever the number of hosts (every host featurizes all items,
    cheap at BAP sizes).
    """

    def __init__(self, items: Sequence[BapItem] | FeaturizedItems, vocab: Vocabulary | None,
                 feature_config: FeatureConfig | None, batch_size: int, seed: int,
                 shuffle: bool = True, process_index: int = 0, process_count: int = 1,
                 schedule: Sequence[np.ndarray] | None = None, drop_remainder: bool = True,
                 num_epochs: int | None = None, cache_dir: str | os.PathLike | None = None,
                 weights: np.ndarray | None = None):
        self.config = feature_config or FeatureConfig()
        if weights is not None and len(weights) != len(items):
            raise ValueError(f"{len(weights)} weights for {len(items)} items")
        self.weights = None if weights is None else np.asarray(weights, np.float32)
        if batch_size % process_count:
            raise ValueError(f"global batch size {batch_size} is not divisible by process_count {process_count}")
        if not 0 <= process_index < process_count:
            raise ValueError(f"process_index {process_index} not in [0, {process_count})")
        self.num_items = len(items)
        self.batch_size = batch_size
        self.local_batch_size = batch_size // process_count
        self.seed = int(seed)
        self.shuffle = shuffle
        self.process_index = process_index
        self.process_count = process_count
        self.drop_remainder = drop_remainder
        self.num_epochs = num_epochs
        if isinstance(items, FeaturizedItems):
            self.features = items  # rows are item ids
        else:
            if vocab is None:
                raise ValueError("DataIterator needs a vocabulary to featurize items")
            self.features = featurize_items_cached(items, vocab, self.config, cache_dir)
        n = self.num_items
        if schedule is None:
            schedule = [np.arange(n)]
        self.schedule = [np.asarray(stage, np.int64) for stage in schedule]
        for s, stage in enumerate(self.schedule):
            if stage.size and (stage.min() < 0 or stage.max() >= n):
                raise ValueError(f"schedule stage {s} has indices outside [0, {n})")
        need = batch_size if drop_remainder else 1
        if len(self.schedule[-1]) < need:
            # The last stage repeats forever; without a batch in it the iterator could never yield.
            raise ValueError(f"the last schedule stage has {len(self.schedule[-1])} items, fewer than "
                             f"a batch of {batch_size}")
        self._pass = 0
        self._batch = 0
        self._rows_cache: tuple[int, np.ndarray] | None = None

    # -- position -------------------------------------------------------------------------
    def get_state(self) -> dict:
        """JSON-serializable position; store it with the checkpoint."""
        return {"pass": self._pass, "batch": self._batch, "seed": self.seed,
                "num_items": self.num_items, "batch_size": self.batch_size,
                "num_stages": len(self.schedule)}

    def set_state(self, state: Mapping[str, Any]) -> None:
        for key, mine in (("seed", self.seed), ("num_items", self.num_items),
                          ("batch_size", self.batch_size), ("num_stages", len(self.schedule))):
            if key in state and state[key] != mine:
                raise ValueError(f"iterator state has {key}={state[key]!r} but this iterator has {mine!r}; "
                                 "it belongs to another data set or configuration")
        self._pass = int(state["pass"])
        self._batch = int(state["batch"])

    # -- order ----------------------------------------------------------------------------
    def stage_of_pass(self, pass_index: int) -> int:
        return min(pass_index, len(self.schedule) - 1)

    def pass_order(self, pass_index: int) -> np.ndarray:
        """Global item order of one pass (before cutting into batches)."""
        stage = self.schedule[self.stage_of_pass(pass_index)]
        if not self.shuffle:
            return stage
        return stage[np.random.default_rng([self.seed, pass_index]).permutation(len(stage))]

    def pass_rows(self, pass_index: int) -> np.ndarray:
        """This host's table rows for every batch of one pass: int64 [batches, local batch]."""
        if self._rows_cache is not None and self._rows_cache[0] == pass_index:
            return self._rows_cache[1]
        order = self.pass_order(pass_index)
        B, b, P, p = self.batch_size, self.local_batch_size, self.process_count, self.process_index
        batches = len(order) // B if self.drop_remainder else -(-len(order) // B)
        padded = np.full(batches * B, self.features.padding_row, np.int64)
        take = min(len(order), len(padded))
        padded[:take] = order[:take]
        rows = padded.reshape(batches, P, b)[:, p, :]
        self._rows_cache = (pass_index, rows)
        return rows

    def batches_in_pass(self, pass_index: int) -> int:
        return len(self.pass_rows(pass_index))

    # -- iteration ------------------------------------------------------------------------
    def __iter__(self) -> Iterator[dict[str, np.ndarray]]:
        return self

    def next_rows(self) -> np.ndarray:
        """This host's table rows of the next batch (advances the position)."""
        while True:
            if self.num_epochs is not None and self._pass >= self.num_epochs:
                raise StopIteration
            rows = self.pass_rows(self._pass)
            if self._batch < len(rows):
                break
            self._pass += 1
            self._batch = 0
        self._batch += 1
        return rows[self._batch - 1]

    def __next__(self) -> dict[str, np.ndarray]:
        return expand_batch(self.features, self.next_rows(), self.config, self.weights)
