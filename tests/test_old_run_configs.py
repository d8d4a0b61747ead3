"""Run configs: today's load back from a run's config.json as they were written; one of the layout
before the model's parts (commit 57cc1b0 or earlier: a flat model section, or a field that has
moved or been removed since) is refused in one line naming the file and the commit whose code
reads it, by the library and by the commands."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from bapjax import paths
from bapjax.cli import load_config
from bapjax.models import builder
from bapjax.training import checkpoints, run_checks, run_config
from bapjax.world import jsonl

REPO = Path(__file__).resolve().parents[1]
# The config.json of a run trained at commit 53a5c63 (cpu_experiment:mc,0,frame; flat model section)
FLAT_RUN_CONFIG = REPO / "tests" / "data" / "run_config_53a5c63.json"


def _refusal(source, why: str) -> str:
    return (f"{source}: a run config of commit 57cc1b0 or earlier ({why}); this code does not read it: "
            "use commit 68e43b4's code (`git checkout 68e43b4`) to resume, predict or evaluate it")


def _run_dir(tmp_path: Path, config: dict) -> Path:
    run = tmp_path / "run"
    run.mkdir()
    (run / "config.json").write_text(json.dumps(config, indent=1))
    (run / "vocab.json").write_text(json.dumps({"tokens": ["<pad>", "<unk>", "place"]}))
    return run


@pytest.mark.parametrize("name", ["cpu", "quickstart", "cpu_experiment:agg,0", "cpu_experiment:mc,1", "bert:cl"])
def test_todays_configs_load_back_from_a_run_config_json(tmp_path, name):
    config = run_checks.with_defaults(load_config(name))
    run = _run_dir(tmp_path, json.loads(config.to_json_best_effort()))
    read = run_checks.with_defaults(run_checks.read_run_file(paths.workdir_path(run), "config.json"))
    assert run_config.old_layout(json.loads((run / "config.json").read_text())) is None
    assert json.loads(read.to_json_best_effort()) == json.loads(config.to_json_best_effort())
    assert builder.build_model(read.model, 50) == builder.build_model(config.model, 50)


def test_a_flat_run_config_is_refused_in_one_line_naming_the_file_and_the_commit(tmp_path):
    recorded = json.loads(FLAT_RUN_CONFIG.read_text())
    assert "world_features" in recorded["model"]  # the flat layout
    run = paths.workdir_path(_run_dir(tmp_path, recorded))
    line = _refusal(run / "config.json", "flat model section")
    for read in (lambda: run_checks.read_run_file(run, "config.json"), lambda: checkpoints.load_run(run),
                 lambda: run_checks.check_resume_config(load_config("cpu_experiment:mc,0"), run)):
        with pytest.raises(run_config.OldRunConfigError) as err:
            read()
        assert str(err.value) == line
    with pytest.raises(run_config.OldRunConfigError) as err:  # a config given as values, not read from a file
        run_checks.with_defaults(recorded)
    assert str(err.value) == _refusal("the config", "flat model section")


@pytest.mark.parametrize("path, value", [
    ("features.recent_decay", 0.5), ("features.text_encoder", "minilm"), ("eval.mbr_samples", 32),
    ("eval.mbr_costs", [0.1]), ("curriculum.stage_passes", 1), ("data.sources.mc.augment.mirror", False),
    ("model.glove", True),
])
def test_a_field_moved_or_removed_since_is_refused_naming_it(path, value):
    values = json.loads(load_config("cpu_experiment:agg,0").to_json_best_effort())
    *sections, key = path.split(".")
    target = values
    for section in sections:
        target = target[section]
    target[key] = value
    what = "removed" if path.startswith(("curriculum", "data")) else "moved"
    with pytest.raises(run_config.OldRunConfigError) as err:
        run_checks.with_defaults(values)
    assert str(err.value) == _refusal("the config", f"{path}, a field {what} since")


def test_the_commands_print_the_refusal_and_exit_2(tmp_path, mdc_corpus):
    run = _run_dir(tmp_path, json.loads(FLAT_RUN_CONFIG.read_text()))
    items = tmp_path / "items.jsonl"
    jsonl.write_items(items, mdc_corpus.split("test")[:1])
    env = dict(os.environ, PYTHONPATH=str(REPO), JAX_PLATFORMS="cpu")
    done = subprocess.run([sys.executable, "-m", "bapjax.predict", "--checkpoint", str(run), "--items", str(items),
                           "--out", str(tmp_path / "p.jsonl")], cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 2, done.stderr[-2000:]
    assert done.stderr.strip().splitlines() == ["error: " + _refusal(run / "config.json", "flat model section")]
    assert not (tmp_path / "p.jsonl").exists()


def test_a_run_config_lacking_fields_added_since_loads_with_their_defaults(tmp_path):
    """A field added since a run was written (a part's, a data source's) takes its default."""
    values = json.loads(load_config("cpu_experiment:agg,0").to_json_best_effort())
    del values["model"]["text"]["vocab_multiple"], values["data"]["sources"]["mc"]["augment"]["paraphrase_prob"]
    run = paths.workdir_path(_run_dir(tmp_path, values))
    config = run_checks.with_defaults(run_checks.read_run_file(run, "config.json"))
    assert config.model.text.vocab_multiple == builder.model_section()["text"]["vocab_multiple"]
    assert config.data.sources.mc.augment.paraphrase_prob == run_config.mdc_source().augment.paraphrase_prob


def test_unknown_part_fields_are_named_in_one_line():
    section = run_config.paper_model().to_dict()
    section["world"]["featurse"] = 8
    with pytest.raises(builder.ModelConfigError, match=r"config.model.world has no field 'featurse'"):
        builder.build_model(section, 50)
    section = run_config.paper_model().to_dict()
    section["decoder"]["kind"] = "lstm"
    with pytest.raises(builder.ModelConfigError, match=r"decoder.kind must be one of gru, transformer"):
        builder.build_model(section, 50)
