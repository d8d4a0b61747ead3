"""The run config's one set of defaults: what every training run reads, with its default.

`configs/*.py` start from `base_config()` and state only what differs (big_vision style);
`run_checks.with_defaults` completes any config (one written by hand, a run's config.json from
before a field existed) with these. Sections:

* ``data.sources.<name>``: one block per item source (`mdc_source`, `generated_source`; read by
  `bapjax.data.sources`). A source is used when it has a `corpus` (an MDC-layout directory or
  archive, or "@mdc": `MDC`), a `store` (an item store, `dataset` picks one data set) or a
  `generate` block (simulated on first use into $BAPJAX_CACHE/generated/...); `augment` builds
  the augmented training corpus on first use; `train_corpus` points at one already built;
  `teacher` trains on a teacher's outputs (`bapjax.data.teacher`).
  Relative paths are taken from the cwd, else the repository root.
* ``features``: what featurization reads (`input_pipeline.FeatureConfig`'s config fields).
* ``model``: the architecture (`name`, `bapjax.models.builder.MODELS`) and one sub-section per
  part with every field of that part (`builder.model_section`; each field is explained in
  `bapjax.models.parts`), so `--config.model.<part>.<field>=...` reaches any of them.
* ``train``, ``eval``, ``curriculum``, ``distributed``: commented below where they are set.
"""

from __future__ import annotations

import ml_collections

from bapjax import paths
from bapjax.corpus import augment as augment_lib
from bapjax.data import input_pipeline, teacher
from bapjax.errors import UserError
from bapjax.models import builder
from bapjax.world.items import TABLE3

# "@mdc": the MDC wherever bapjax.paths.mdc_path finds it when the data is loaded ($BAPJAX_MDC first;
# docs/corpus.md); override with --config.data.sources.mc.corpus=PATH.
MDC = paths.MDC

# Paper Table 3 sizes (train, val, test) of the synthetic sets (bapjax.world.items.TABLE3).
PAPER_SIZES = {name: TABLE3[name] for name in ("bs", "ss", "r")}


def _source(corpus: str, dataset: str) -> ml_collections.ConfigDict:
    source = ml_collections.ConfigDict()
    source.corpus = corpus
    source.dataset = dataset
    source.train_corpus = ""
    source.max_train_items = 0  # 0: all
    source.max_val_items = 0
    source.max_test_items = 0
    # sequence-level distillation (bapjax.data.teacher): `path` a teacher folder of `python -m bapjax.distil`
    # ("": none) whose predictions become the targets of this source's training items, in place of the
    # references ("replace") or beside them ("mix"), at `weight` in the loss; val and test keep their references
    source.teacher = ml_collections.ConfigDict(teacher.DEFAULTS)
    return source


def mdc_source(augment: bool = True) -> ml_collections.ConfigDict:
    """The MDC as a source; `augment`: train on the augmented MDC games (4x mix, docs/training_data.md;
    `augment.copies` per game besides the original)."""
    source = _source(MDC, "mc")
    source.augment = ml_collections.ConfigDict(
        {"enabled": augment, "seed": 0, "copies": augment_lib.DEFAULT_COPIES,
         "paraphrase_prob": augment_lib.DEFAULT_PARAPHRASE_PROB, "out": ""})
    return source


def generated_source(dataset: str, train: int, val: int, test: int, seed: int = 0) -> ml_collections.ConfigDict:
    """A simulated data set ("bs", "ss", "r") of these sizes, generated on first use."""
    source = _source("", dataset)
    source.generate = ml_collections.ConfigDict({
        "dataset": dataset, "seed": seed, "train_items": train, "val_items": val, "test_items": test,
        "out": "", "processes": 0})
    return source


def model_section(name: str = builder.DEFAULT_MODEL, **kinds) -> ml_collections.ConfigDict:
    """`builder.model_section` (the architecture `name`, bapjax.models.builder.MODELS, with the
    kinds of parts in `kinds`, every field at its default) as a ConfigDict."""
    return ml_collections.ConfigDict(builder.model_section(name, **kinds))


def paper_model() -> ml_collections.ConfigDict:
    """The paper's M at the original implementation's sizes (rnn 300; the world CNN at width 300,
    ~17 GFLOP per encoding fwd+bwd: two 3x3x3 layers of 300 channels): the "per_step"
    architecture with GRU text and decoder, every part's field at its default but `world.layers`."""
    model = model_section("per_step")
    model.world.layers = 2
    return model


def base_config() -> ml_collections.ConfigDict:
    config = ml_collections.ConfigDict()
    config.workdir = "runs/baseline"
    config.seed = 0  # the data order, the curriculum's shuffles and, where init_seed is -1, the initialization
    config.init_seed = -1  # the parameters' initialization alone (-1: config.seed), to tell the two apart
    # > 0: `python -m bapjax.train` splits a CPU host into this many XLA devices before JAX starts
    # (`sharding.set_cpu_devices`), and the run is data-parallel over them: the same function (float summation
    # order aside), faster where one device's program leaves cores idle between its many small ops
    # (benchmarks/bench_cpu_devices.py); 0: JAX's default (one CPU device, or what XLA_FLAGS forces)
    config.cpu_devices = 0

    config.data = ml_collections.ConfigDict()
    config.data.sources = ml_collections.ConfigDict()
    config.data.vocab_path = ""  # empty: build from the training items, saved as <workdir>/vocab.json
    config.data.min_count = 1

    # max_text_tokens 256, max_actions 20 (= T 21 decoder steps in training), recent_window 10
    config.features = ml_collections.ConfigDict(input_pipeline.feature_defaults())

    config.model = paper_model()

    config.train = ml_collections.ConfigDict()
    config.train.glove = True  # word embeddings start from GloVe 6B 50d (needs model.embedding_dim 50); False: random
    config.train.batch_size = 32  # global; the original used 1
    config.train.num_epochs = 40  # passes over all data (after the curriculum stages, if any)
    config.train.max_steps = 0  # 0: no cap
    config.train.learning_rate = 1e-3
    config.train.schedule = "constant"  # or "cosine" (decays to final_lr_fraction x lr at the last step)
    config.train.warmup_steps = 0
    config.train.final_lr_fraction = 0.1
    config.train.weight_decay = 0.1
    config.train.grad_clip = 5.0
    # > 0 (e.g. 0.999): evals, checkpoint selection, the final decode and bapjax.predict use an exponential
    # moving average of the weights (bapjax.training.optimizer.update_ema); 0: the weights themselves
    config.train.ema_decay = 0.0
    config.train.patience = 10  # evals without val-loss improvement before stopping (0: off)
    # what picks checkpoints/best (and counts for patience): "loss" (val loss, lower is better) or a decoded
    # val F1 the evals write, "<source>_val_<overall_micro|overall_macro|strict_micro>_f1" (higher is better;
    # decoded on eval.val_decode_items items per source, so it needs val_decode_items >= 0 and its source
    # among eval.val_decode_sources when that names any)
    config.train.select_by = "loss"
    config.train.min_delta = 0.0
    config.train.eval_every_steps = 0  # 0: once per pass over the data
    config.train.checkpoint_every_steps = 0  # 0: at every eval
    config.train.log_every_steps = 50
    # teacher forcing packs a batch's targets into pack_multiple x n rows: n the fewest that hold them
    # ("multiple"), or the fewest power of two ("power_of_two": fewer compiled step shapes, up to 2x padding);
    # "auto": multiple on CPU, power_of_two on an accelerator (models.common.resolve_pack_rounding)
    config.train.pack_multiple = 32
    config.train.pack_rounding = "auto"
    config.train.time_budget_minutes = 0.0  # >0: stop training after this long, then the final eval
    # a finished run (its workdir or a checkpoints dir) whose evaluation weights start this run, with a fresh
    # optimizer and schedule: fine-tuning, or branches of one trunk; its model fields must be this run's, and
    # its vocabulary is this run's unless data.vocab_path names another ("": initialize from init_seed)
    config.train.init_from = ""

    config.eval = ml_collections.ConfigDict()
    config.eval.batch_size = 64
    config.eval.max_actions = 20  # greedy decoding length (the paper's v2 experiments)
    config.eval.min_actions = 1  # STOP masked at step 0: every BAP item has at least one action
    config.eval.stop_rule = "argmax"  # or "mass": stop when p(STOP) >= stop_threshold; "length" (bapjax.decoding.kernel)
    config.eval.stop_threshold = 0.5
    # After training, pick the rule on val: argmax or mass at each threshold (best val micro
    # Overall F1), written to <workdir>/decode.json and used by the final eval and bapjax.predict.
    config.eval.stop_thresholds = (0.1, 0.15, 0.2, 0.25, 0.3, 0.4, 0.5)
    config.eval.length_quantiles = (0.5, 0.6, 0.7, 0.8)  # with model.length_head: also "length" at each quantile
    # > 0: then also the chosen rule with minimum-Bayes-risk selection among the greedy decoding and
    # this many draws per item, at each temperature and cost per predicted action (bapjax.decoding.mbr;
    # decoding then takes 1 + samples passes)
    config.eval.samples = 0
    config.eval.temperatures = (0.5,)
    config.eval.costs = (0.075, 0.1, 0.125, 0.15)
    # > 0: then also the chosen rule with this many draws at vote_temperature, one rule for the items on
    # an empty board and one for the others, each "select" (as above) or "vote" (the net actions more
    # than a share of the draws predict) on the grids of bapjax.decoding.on_val (COSTS, THRESHOLDS)
    config.eval.vote_samples = 0
    config.eval.vote_temperature = 0.8
    # "": the vote's two rules chosen on val as above; "RULE:VALUE,RULE:VALUE" (the items on an empty
    # board, then the others; e.g. "select:0.075,vote:0.175", the best on six agg runs' val together,
    # 68e43b4:results/ensemble_rules_agg_vote64.md): fixed beforehand, val only scores them
    config.eval.vote_rules = ""
    config.eval.stop_rule_val = ""  # "": choose the STOP rule on all val items; a source name (e.g. "mc"): on its val only
    config.eval.val_decode_items = 0  # decode-and-score this many val items per source at each eval (0: all, -1: none)
    config.eval.val_decode_sources = ()  # the sources whose val items evals decode (empty: every source), e.g. ("mc",)
    config.eval.final_splits = ("mc:test",)

    config.curriculum = ml_collections.ConfigDict()
    config.curriculum.metric = ""  # "" = no curriculum; D, L_A, L_I or combinations like "D,L_A"
    config.curriculum.num_buckets = 10
    config.curriculum.every_stage = ()  # data sets in every stage at their share, e.g. ("mc",) (bapjax.data.curriculum)
    config.curriculum.stage_samples = 1  # disjoint samples of 1/N of each bucket per stage (1: the paper's; up to N)

    config.distributed = ml_collections.ConfigDict()
    config.distributed.initialize = False  # True on multi-host (TPU pods, multi-node GPU)
    config.distributed.coordinator_address = ""
    config.distributed.num_processes = -1
    config.distributed.process_id = -1
    config.distributed.initialization_timeout = 300  # seconds a process waits for the job's others at start (JAX's default)
    return config


# A run config written before the model section was made of parts (by commit OLD_LAYOUT_AT or an
# earlier one) is refused, not translated: its model section is flat (one field per option, no part
# sub-sections), or it holds a field that has moved since or an option that has been removed
# (`OLD_FIELDS`; "*" stands for any data source). The commit `READ_AT` still reads such configs.
OLD_LAYOUT_AT = "57cc1b0"
READ_AT = "68e43b4"
OLD_FIELDS = {
    "features.recent_decay": "moved", "features.perspective_scale": "moved", "features.text_encoder": "moved",
    "model.glove": "moved", "eval.mbr_samples": "moved", "eval.mbr_temperatures": "moved",
    "eval.mbr_costs": "moved", "curriculum.stage_passes": "removed", "data.sources.*.augment.mirror": "removed",
}


class OldRunConfigError(UserError):
    """A run config of commit `OLD_LAYOUT_AT` or earlier (named, with the commit whose code reads it)."""


def _old_fields(values, path: str) -> list[str]:
    """The dotted paths of `values` (a nested dict) that `path` ("*": any key) names."""
    head, _, rest = path.partition(".")
    if not isinstance(values, dict):
        return []
    keys = list(values) if head == "*" else [head] if head in values else []
    if not rest:
        return keys
    return [f"{key}.{found}" for key in keys for found in _old_fields(values[key], rest)]


def old_layout(values: dict) -> str | None:
    """Why `values` (a config as a dict) is a run config of commit `OLD_LAYOUT_AT` or earlier, or
    None for one of today's layout: "flat model section" (fields besides `name` and no part
    sub-section), or the first moved or removed field it holds (`OLD_FIELDS`)."""
    model = values.get("model")
    if isinstance(model, dict) and any(key != "name" for key in model) and \
            not any(isinstance(model.get(part), dict) for part in builder.SECTIONS):
        return "flat model section"
    for path, what in OLD_FIELDS.items():
        found = _old_fields(values, path)
        if found:
            return f"{found[0]}, a field {what} since"
    return None


def refuse_old_layout(values: dict, source: str = "the config") -> None:
    """OldRunConfigError, in one line naming `source` (e.g. a run's config.json) and the commit
    that reads it, when `values` is a run config of commit `OLD_LAYOUT_AT` or earlier (`old_layout`)."""
    why = old_layout(values)
    if why is not None:
        raise OldRunConfigError(
            f"{source}: a run config of commit {OLD_LAYOUT_AT} or earlier ({why}); this code does not read it: "
            f"use commit {READ_AT}'s code (`git checkout {READ_AT}`) to resume, predict or evaluate it")


def _fill_missing(values: dict, template: dict) -> dict:
    """`values` (a copy) with every field of `template` it lacks, at any depth, at the template's value."""
    out = dict(values)
    for key, default in template.items():
        if key not in out:
            out[key] = default
        elif isinstance(out[key], dict) and isinstance(default, dict):
            out[key] = _fill_missing(out[key], default)
    return out


def source_template(source: dict) -> dict:
    """The fields of a data source of this kind at their defaults: the MDC's (`mdc_source`) for a
    source with `augment`, a simulated one's (`generated_source`) for one with `generate`."""
    if "augment" in source:
        return mdc_source().to_dict()
    if "generate" in source:
        return generated_source("", 0, 0, 0).to_dict()
    return _source("", "").to_dict()


def complete_sources(values: dict) -> dict:
    """A config dict (a copy) with every data source completed with the fields of its kind it
    lacks, at their defaults (`source_template`: a field added to a source since the run was written)."""
    values = dict(values)
    data = values.get("data")
    if isinstance(data, dict) and isinstance(data.get("sources"), dict):
        values["data"] = {**data, "sources": {
            name: _fill_missing(source, source_template(source)) if isinstance(source, dict) else source
            for name, source in data["sources"].items()}}
    return values


def init_seed(config: ml_collections.ConfigDict) -> int:
    """The seed of the parameters' initialization: `config.init_seed`, or `config.seed` where it is -1."""
    return int(config.seed) if int(config.get("init_seed", -1)) == -1 else int(config.init_seed)
