"""Shared defaults for the experiment configs (each configs/*.py starts from `base_config`).

Data sources live under `config.data.sources.<name>` so any field can be overridden from the
command line, e.g. `--config.data.sources.mc.corpus=/data/mdc`. A source is used when it has a
`corpus` (an MDC-layout directory or archive, or "@mdc": `MDC` below), a `store` (an item store, with `dataset` to pick
one data set) or a `generate` block (simulated on first use into $BAPJAX_CACHE/generated/...);
`augment` builds the augmented training corpus on first use ($BAPJAX_CACHE/augmented/...; both
through `bapjax.sources`, the folders `python -m bapjax.build` uses too); `train_corpus`
points at one already built. Relative paths are taken from the cwd, else the repository root.
"""

import dataclasses

import ml_collections

from bapjax import input_pipeline, paths
from bapjax.items import TABLE3
from bapjax.models import builder

# "@mdc": the MDC wherever bapjax.paths.mdc_path finds it when the data is loaded ($BAPJAX_MDC, else
# ../shared/mdc beside the repository); override with --config.data.sources.mc.corpus=PATH.
MDC = paths.MDC

# Paper Table 3 sizes of the synthetic sets (bapjax.items.TABLE3).
PAPER_SIZES = {name: TABLE3[name] for name in ("bs", "ss", "r")}


def mdc_source(augment: bool = True) -> ml_collections.ConfigDict:
    source = ml_collections.ConfigDict()
    source.corpus = MDC
    source.dataset = "mc"
    source.train_corpus = ""
    source.augment = ml_collections.ConfigDict({"enabled": augment, "seed": 0, "out": ""})
    source.max_train_items = 0
    source.max_val_items = 0
    source.max_test_items = 0
    return source


def generated_source(dataset: str, train: int, val: int, test: int, seed: int = 0) -> ml_collections.ConfigDict:
    source = ml_collections.ConfigDict()
    source.corpus = ""
    source.dataset = dataset
    source.train_corpus = ""
    source.generate = ml_collections.ConfigDict({
        "dataset": dataset, "seed": seed, "train_items": train, "val_items": val, "test_items": test,
        "out": "", "processes": 0})
    source.max_train_items = 0
    source.max_val_items = 0
    source.max_test_items = 0
    return source


def paper_model() -> ml_collections.ConfigDict:
    """Sizes of the original implementation (rnn 300; the world CNN at width 300 is the ~17
    GFLOP-per-encoding (fwd+bwd) model of DESIGN.md: two 3x3x3 layers of 300 channels).

    Every `BuilderModel` field starts at its default (`builder.model_defaults()`, the one place
    the defaults and their meaning are given; listed here so `--config.model.<field>=...` can
    override any of them); only the values that differ are set below. `glove` is not a module
    field: training reads it (`builder.TRAINING_FIELDS`). The model is built with
    `builder.build_model(config.model, vocab_size, config.features)`.
    """
    model = ml_collections.ConfigDict(builder.model_defaults())
    model.glove = True  # word embeddings start from GloVe 6B 50d (embedding_dim 50)
    model.world_layers = 2
    return model


def cpu_model() -> ml_collections.ConfigDict:
    """Narrow sizes for CPU runs (same architecture)."""
    model = paper_model()
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
    """The CPU model chosen on MDC val (docs/results.md, "Choosing the CPU model"): `cpu_model`
    with every world-CNN layer FiLM-conditioned on the decoder state (`world_film`)."""
    model = cpu_model()
    model.world_film = True
    return model


def cpu_once_model() -> ml_collections.ConfigDict:
    """`cpu_film_model` with one world encoding per item (issue 32, `bapjax.models.world_changes`):
    the CNN encodes each item's start world once, FiLM-conditioned on the text summary, and each
    step adds a sparse convolution of what its actions changed since."""
    model = cpu_film_model()
    model.world_encoding = "once"
    return model


def base_config() -> ml_collections.ConfigDict:
    config = ml_collections.ConfigDict()
    config.workdir = "runs/baseline"
    config.seed = 0

    config.data = ml_collections.ConfigDict()
    config.data.sources = ml_collections.ConfigDict()
    config.data.vocab_path = ""  # empty: build from the training items, saved as <workdir>/vocab.json
    config.data.min_count = 1

    # What featurization reads (`input_pipeline.FeatureConfig`: max_text_tokens 256, max_actions 20
    # = T 21 decoder steps in training, recent_window 10, text_encoder "": vocabulary ids (GRU) or
    # "minilm": frozen MiniLM states, configs/bert.py) and the world-input options of the model
    # (`world_input.FEATURE_OPTIONS`: recent_decay 0.5, perspective_scale 0.1), at their defaults.
    config.features = ml_collections.ConfigDict(dataclasses.asdict(input_pipeline.FeatureConfig()))
    config.features.update(builder.feature_option_defaults())

    config.model = paper_model()

    config.train = ml_collections.ConfigDict()
    config.train.batch_size = 32  # global; the original used 1
    config.train.num_epochs = 40  # passes over all data (after the curriculum stages, if any)
    config.train.max_steps = 0  # 0: no cap
    config.train.learning_rate = 1e-3
    config.train.schedule = "constant"  # or "cosine" (decays to final_lr_fraction x lr at the last step)
    config.train.warmup_steps = 0
    config.train.final_lr_fraction = 0.1
    config.train.weight_decay = 0.1
    config.train.grad_clip = 5.0
    config.train.patience = 10  # evals without val-loss improvement before stopping (0: off)
    config.train.min_delta = 0.0
    config.train.eval_every_steps = 0  # 0: once per pass over the data
    config.train.checkpoint_every_steps = 0  # 0: at every eval
    config.train.log_every_steps = 50
    config.train.pack_multiple = 32
    config.train.time_budget_minutes = 0.0  # >0: stop training after this long, then the final eval

    config.eval = ml_collections.ConfigDict()
    config.eval.batch_size = 64
    config.eval.max_actions = 20  # greedy decoding length (the paper's v2 experiments)
    config.eval.min_actions = 1  # STOP masked at step 0: every BAP item has at least one action
    config.eval.stop_rule = "argmax"  # or "mass": stop when p(STOP) >= stop_threshold (bapjax.decode)
    config.eval.stop_threshold = 0.5
    # After training, pick the rule on val: argmax or mass at each threshold (best val micro
    # Overall F1), written to <workdir>/decode.json and used by the final eval and bapjax.predict.
    config.eval.stop_thresholds = (0.1, 0.15, 0.2, 0.25, 0.3, 0.4, 0.5)
    config.eval.stop_rule_val = ""  # "": choose the STOP rule on all val items; a source name (e.g. "mc"): on its val only
    config.eval.val_decode_items = 0  # decode-and-score this many val items per source at each eval (0: all, -1: none)
    config.eval.final_splits = ("mc:test",)

    config.curriculum = ml_collections.ConfigDict()
    config.curriculum.metric = ""  # "" = no curriculum; D, L_A, L_I or combinations like "D,L_A"
    config.curriculum.num_buckets = 10
    config.curriculum.every_stage = ()  # data sets in every stage at their share, e.g. ("mc",) (bapjax.curriculum)

    config.distributed = ml_collections.ConfigDict()
    config.distributed.initialize = False  # True on multi-host (TPU pods, multi-node GPU)
    config.distributed.coordinator_address = ""
    config.distributed.num_processes = -1
    config.distributed.process_id = -1
    return config


