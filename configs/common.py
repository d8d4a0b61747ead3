"""The CPU models the CPU configs share; everything else a config starts from is the library's
run defaults (`bapjax.training.run_config`: `base_config`, `paper_model`, `mdc_source`, `generated_source`,
`MDC`, `PAPER_SIZES`), and each config states only what differs."""

import ml_collections

from bapjax.training import run_config


def cpu_model() -> ml_collections.ConfigDict:
    """Narrow sizes for CPU runs (the paper's architecture)."""
    model = run_config.paper_model()
    model.text_hidden = 128
    model.world_features = 16
    model.world_layers = 3
    model.action_embedding = 64
    model.decoder_hidden = 128
    model.transformer_width = 128
    model.transformer_mlp = 256
    model.transformer_layers = 2
    model.head_hidden = 64
    # cache-sized CNN buffers: ~1.6x faster per step than one big pack on CPU; 2 rather than 4: the CNN
    # 1.13x (results/bench_conv_chunks.json); the train step 1.17x best of 4 paired rounds, 0.94-1.20x
    # per round, within this host's noise (results/bench_train_chunk2_vs_chunk4.json)
    model.encode_chunk = 2
    # world_encoding "once" only: the packed steps' head in chunks of 8 (the step 2.4x faster than all at once)
    model.step_chunk = 8
    return model


def cpu_film_model() -> ml_collections.ConfigDict:
    """The CPU model chosen on MDC val (docs/results.md, "FiLM on the world CNN, and the learning rate 2e-3"): `cpu_model`
    with every world-CNN layer FiLM-conditioned on the decoder state (`world_film`)."""
    model = cpu_model()
    model.world_film = True
    return model


def cpu_once_model() -> ml_collections.ConfigDict:
    """`cpu_film_model` with one world encoding per item (`bapjax.models.world_changes`):
    the CNN encodes each item's start world once, FiLM-conditioned on the text summary, and each
    step adds a sparse convolution of what its actions changed since."""
    model = cpu_film_model()
    model.world_encoding = "once"
    return model


def cpu_frame_model() -> ml_collections.ConfigDict:
    """`cpu_once_model` with a length head (`length_head`): a head over [text summary ; pooled
    start-world features] predicts each item's action count, and decoding may take that count
    (the STOP rule "length", a candidate of the choice on MDC val). `configs/cpu_experiment.py`'s
    "frame" model pairs it with items featurized in the Builder's frame (`config.features.builder_frame`)."""
    model = cpu_once_model()
    model.length_head = True
    return model
