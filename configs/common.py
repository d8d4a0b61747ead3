"""The CPU models the CPU configs share; everything else a config starts from is the library's
run defaults (`bapjax.training.run_config`: `base_config`, `paper_model`, `model_section`,
`mdc_source`, `generated_source`, `MDC`, `PAPER_SIZES`), and each config states only what differs.
A model is an architecture (`config.model.name`) and its parts (`config.model.<part>.<field>`;
bapjax.models.parts)."""

import ml_collections

from bapjax.training import run_config


def _cpu_sizes(model: ml_collections.ConfigDict) -> ml_collections.ConfigDict:
    """Narrow widths for CPU runs."""
    model.text.hidden = 128
    model.world.features = 16
    model.world.layers = 3
    # cache-sized CNN buffers: ~1.6x faster per step than one big pack on CPU; 2 rather than 4: the CNN
    # 1.13x (results/bench_conv_chunks.json, benchmarks/bench_conv.py at 68e43b4); the train step 1.17x best of 4 paired rounds, 0.94-1.20x
    # per round, within this host's noise (results/bench_train_chunk2_vs_chunk4.json)
    model.world.encode_chunk = 2
    model.decoder.action_embedding = 64
    model.decoder.hidden = 128
    model.heads.hidden = 64
    return model


def cpu_model() -> ml_collections.ConfigDict:
    """"cpu": the paper's M (per-step world CNN, GRU text and decoder) at CPU widths."""
    return _cpu_sizes(run_config.paper_model())


def cpu_film_model() -> ml_collections.ConfigDict:
    """"film", the CPU model chosen on MDC val (docs/results.md, the evidence table: FiLM, learning rate 2e-3):
    `cpu_model` with every world-CNN layer FiLM-conditioned on the decoder state (`world.film`)."""
    model = cpu_model()
    model.world.film = True
    return model


def _once_model(length_head: bool) -> ml_collections.ConfigDict:
    """The once architecture with a FiLM-conditioned world CNN, every width at the library's default (the paper's)."""
    model = run_config.model_section("once", length_head=length_head)
    model.world.film = True
    # seeds' vocabularies (1,900-odd tokens with the simulated data) share one table size, so a run's
    # programs come from the compilation cache when another seed ran before it
    model.text.vocab_multiple = 256
    return model


def cpu_once_model(length_head: bool = False) -> ml_collections.ConfigDict:
    """"once": the once architecture (`bapjax.models.once`) with `cpu_film_model`'s parts: the CNN
    encodes each item's start world once, FiLM-conditioned on the text summary, and each step adds
    a sparse convolution of what its actions changed since."""
    model = _cpu_sizes(_once_model(length_head))
    model.world.step_chunk = 8  # the packed steps' head in chunks of 8 (the step 2.4x faster than all at once)
    return model


def wide_frame_model() -> ml_collections.ConfigDict:
    """"wide": `cpu_frame_model` before its CPU sizes and chunking, every width 300 (the paper's): the chosen
    CPU model sized for an accelerator."""
    return _once_model(length_head=True)


def cpu_frame_model() -> ml_collections.ConfigDict:
    """"frame": `cpu_once_model` with a length head (`config.model.length`): a head over [text
    summary ; pooled start-world features] predicts each item's action count, and decoding may take
    that count (the STOP rule "length", a candidate of the choice on MDC val).
    `configs/cpu_experiment.py`'s "frame" model pairs it with items featurized in the Builder's
    frame (`config.features.builder_frame`)."""
    return cpu_once_model(length_head=True)
