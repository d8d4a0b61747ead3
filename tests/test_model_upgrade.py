"""Run configs written with the flat model section (up to commit 57cc1b0) upgrade to today's parts
and build the same model; one that set a removed option on is refused in one line naming it."""

import json
from pathlib import Path

import jax
import pytest

from bapjax.models import builder
from bapjax.training import run_checks, run_config

RUNS = Path(__file__).resolve().parents[1] / "results" / "runs"


def _tree(model) -> dict:
    shapes = jax.eval_shape(lambda: builder.init_params(model, jax.random.PRNGKey(0)))
    return {jax.tree_util.keystr(path): leaf.shape for path, leaf in jax.tree_util.tree_leaves_with_path(shapes)}


def test_a_committed_flat_run_config_builds_todays_frame_model():
    """results/runs/mc-frame-s0 was trained by configs/cpu_experiment.py:mc (the frame model) with
    the flat model section: upgraded, it is today's section of that config and the same model, but
    for the embedding table's rounding (`text.vocab_multiple`, added since: the run's table had
    exactly its vocabulary's rows), so at a vocabulary of a multiple of today's rounding the trees agree."""
    recorded = json.loads((RUNS / "mc-frame-s0" / "config.json").read_text())
    assert "world_features" in recorded["model"]  # the flat layout
    upgraded = run_checks.with_defaults(recorded)
    from bapjax.cli import load_config

    today = run_checks.with_defaults(load_config("cpu_experiment:mc"))
    section = today.model.to_dict()
    assert upgraded.model.to_dict() == {**section, "text": {**section["text"], "vocab_multiple": 1}}
    rounding = today.model.text.vocab_multiple
    old, new = builder.build_model(upgraded.model, rounding), builder.build_model(today.model, rounding)
    assert type(old) is builder.OnceBuilder and old.length_head
    assert _tree(old) == _tree(new)


@pytest.mark.parametrize("flat, kind, fields", [
    ({"world_features": 12, "decoder": "transformer", "transformer_layers": 1, "text_encoder": "minilm",
      "embedding_dim": 50, "change_kernel": 5}, builder.PerStepBuilder,
     {"world.features": 12, "decoder.kind": "transformer", "decoder.layers": 1, "text.encoder": "minilm"}),
    ({"world_encoding": "once", "step_chunk": 8, "length_head": False, "length_loss_weight": 0.5},
     builder.OnceBuilder, {"world.step_chunk": 8}),
])
def test_flat_fields_go_to_their_parts_and_fields_that_did_not_apply_go(flat, kind, fields):
    section = run_config.upgrade({"model": flat})["model"]
    model = builder.build_model(section, 50)
    assert type(model) is kind
    for path, value in fields.items():
        part, name = path.split(".")
        assert section[part][name] == value
    assert "embedding_dim" not in section["text"] or section["text"]["encoder"] == "gru"
    assert "change_kernel" not in section["world"] or section["name"] == "once"
    assert "length" not in section


@pytest.mark.parametrize("values, named", [
    ({"model": {"text_attention": 8, "world_encoding": "once"}}, "model.text_attention=8"),
    ({"model": {"mentioned_colors": True}}, "model.mentioned_colors=True"),
    ({"model": {"anchor_heads": 2}}, "model.anchor_heads=2"),
    ({"model": {"head_layers": 2}}, "model.head_layers=2"),
    ({"model": {"chunk_remat": "dots"}}, "model.chunk_remat='dots'"),
    ({"curriculum": {"metric": "D", "stage_passes": 3}}, "curriculum.stage_passes=3"),
    ({"data": {"sources": {"mc": {"corpus": "@mdc", "augment": {"enabled": True, "mirror": True}}}}},
     "data.sources.mc.augment.mirror=True"),
])
def test_a_run_that_used_a_removed_option_is_refused_naming_it(values, named):
    with pytest.raises(run_config.RemovedOptionError) as err:
        run_checks.with_defaults(values)
    message = str(err.value)
    assert message.startswith(named) and run_config.REMOVED_AT in message and "\n" not in message


def test_a_committed_run_with_stage_passes_is_refused():
    recorded = json.loads((RUNS / "cl_la-frame-passes3-s0" / "config.json").read_text())
    with pytest.raises(run_config.RemovedOptionError, match="curriculum.stage_passes=3"):
        run_checks.with_defaults(recorded)


def test_removed_options_at_their_off_values_are_dropped():
    values = {"model": {"text_attention": 0, "mentioned_colors": False, "anchor_heads": 0, "anchor_kernel": 5,
                        "head_layers": 1, "chunk_remat": "full", "bidirectional": False, "use_last_offset": False,
                        "length_reads_text": False},
              "curriculum": {"stage_passes": 1}}
    config = run_checks.with_defaults(values)
    assert config.model.to_dict() == run_config.model_section("per_step").to_dict()
    assert "stage_passes" not in config.curriculum


def test_unknown_part_fields_are_named_in_one_line():
    section = run_config.paper_model().to_dict()
    section["world"]["featurse"] = 8
    with pytest.raises(builder.ModelConfigError, match=r"config.model.world has no field 'featurse'"):
        builder.build_model(section, 50)
    section = run_config.paper_model().to_dict()
    section["decoder"]["kind"] = "lstm"
    with pytest.raises(builder.ModelConfigError, match=r"decoder.kind must be one of gru, transformer"):
        builder.build_model(section, 50)
