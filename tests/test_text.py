"""Tokenizer, truncation rule, vocabulary and the offline GloVe vectors."""

import numpy as np
import pytest

from bapjax.text import glove, tokenizer
from bapjax.text.vocab import Vocabulary
from bapjax.world.grid import Action
from bapjax.world.items import ChatTurn


def test_tokenize():
    assert tokenizer.tokenize("Don't place 2 REDS, ok? it's 3.5") == [
        "do", "n't", "place", "2", "reds", ",", "ok", "?", "it", "'s", "3.5"]
    assert tokenizer.tokenize("") == []


def test_history_rendering():
    history = [ChatTurn("Architect", "Put a red one"), Action(0, 1, -2, 1, 3), ChatTurn("Builder", "done")]
    segments = tokenizer.history_segments(history)
    assert segments == [["<architect>", "put", "a", "red", "one", "<eou>"],
                        ["<place>", "red", "<x=-2>", "<y=1>", "<z=3>"],
                        ["<builder>", "done", "<eou>"]]


def _reference_truncation(segments, max_tokens):
    """Plain reference: the newest tokens; a cut event keeps its first token."""
    flat = [t for s in segments for t in s]
    if len(flat) <= max_tokens:
        return flat
    out, used = [], 0
    for segment in reversed(segments):
        if used + len(segment) <= max_tokens:
            out = segment + out
            used += len(segment)
        else:
            room = max_tokens - used
            if room >= 2:
                out = [segment[0]] + segment[len(segment) - room + 1:] + out
            elif room == 1 and not out:
                out = segment[-1:]
            break
    return out


def test_truncation_keeps_newest_tokens_and_event_heads():
    rng = np.random.default_rng(0)
    for _ in range(300):
        segments = [[f"<s{n}>"] + [f"w{n}_{k}" for k in range(int(rng.integers(0, 12)))]
                    for n in range(int(rng.integers(0, 10)))]
        limit = int(rng.integers(0, 40))
        out = tokenizer.truncate_history(segments, limit)
        assert out == _reference_truncation(segments, limit)
        assert len(out) <= limit
        flat = [t for s in segments for t in s]
        if len(flat) <= limit:
            assert out == flat
        elif out:
            assert out[-1] == flat[-1]
    # Hand-made: the oldest kept event is cut but keeps its speaker token.
    segments = [["<architect>", "a", "b", "c", "<eou>"], ["<builder>", "ok", "<eou>"]]
    assert tokenizer.truncate_history(segments, 6) == ["<architect>", "c", "<eou>", "<builder>", "ok", "<eou>"]


def test_vocabulary_build_encode_save_load(mdc_corpus, tmp_path):
    train = mdc_corpus.split("train")
    vocab = Vocabulary.build(train, min_count=2)
    assert vocab.tokens[:2] == ["<pad>", "<unk>"] and vocab.pad_id == 0 and vocab.unk_id == 1
    assert set(tokenizer.special_tokens()) <= set(vocab.tokens)
    assert vocab.encode("place the red block") == [vocab.token_id(t) for t in ("place", "the", "red", "block")]
    assert vocab.encode("zzqxv") == [vocab.unk_id]
    # Built from training data only, independent of item order.
    assert Vocabulary.build(list(reversed(train)), min_count=2).tokens == vocab.tokens
    path = tmp_path / "vocab.json"
    vocab.save(path)
    assert Vocabulary.load(path).tokens == vocab.tokens
    path.write_text("{}")
    with pytest.raises(ValueError, match="vocab.json"):
        Vocabulary.load(path)


def test_glove_vectors_and_embedding_matrix(mdc_corpus):
    vectors = glove.load_glove_50d()
    assert len(vectors) == 400000
    assert vectors["the"].shape == (50,) and vectors["the"].dtype == np.float32
    # The first GloVe 6B 50d row ("the") begins 0.418 0.24968 -0.41242 in the published file.
    np.testing.assert_allclose(vectors["the"][:3], [0.418, 0.24968, -0.41242], rtol=1e-5)
    vocab = Vocabulary.build(mdc_corpus.split("train"), min_count=2)
    assert vocab.glove_coverage(vectors) > 0.9
    matrix = vocab.embedding_matrix(vectors, seed=0)
    assert matrix.shape == (vocab.size, 50) and matrix.dtype == np.float32
    assert not matrix[vocab.pad_id].any()
    np.testing.assert_array_equal(matrix[vocab.token_id("block")], vectors["block"])
    np.testing.assert_array_equal(matrix, vocab.embedding_matrix(vectors, seed=0))
