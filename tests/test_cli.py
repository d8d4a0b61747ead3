"""The shared command-line pieces (bapjax.cli): the item-source flags have one definition; --config
takes a file or an installed config by name, and a missing one is one line, exit 2."""

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

from bapjax import cli

REPO = Path(__file__).resolve().parents[1]
# The CLIs that read items through the item-source flags (each module's define_flags()).
ITEM_CLIS = ("bapjax.evaluate", "bapjax.predict", "bapjax.predictors", "bapjax.report", "bapjax.corpus.v2_clean",
             "bapjax.viz", "bapjax.llm.__main__", "bapjax.sim.grounding", "bapjax.corpus.mdc", "bapjax.corpus.augment")


def flag_definitions(path: Path) -> list[tuple[str, int]]:
    """(name, line) of every flag `path` defines: ``cli.flag(kind, "name", ...)``, ``flag(...)``
    and ``flags.DEFINE_*("name", ...)`` / ``DEFINE_*(...)`` calls."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if not isinstance(node, ast.Call):
            continue
        func = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
        position = 1 if func == "flag" else 0 if func.startswith("DEFINE_") else None
        if position is None or len(node.args) <= position:
            continue
        name = node.args[position]
        if isinstance(name, ast.Constant) and isinstance(name.value, str):
            found.append((name.value, node.lineno))
    return found


def test_flag_definitions_reads_both_forms(tmp_path):
    source = tmp_path / "m.py"
    source.write_text('cli.flag("string", "corpus", None, "x")\nflags.DEFINE_string("split", None, "y")\n'
                      'flag("integer", "seed", 0, "z")\n')
    assert flag_definitions(source) == [("corpus", 1), ("split", 2), ("seed", 3)]


# The same name with another meaning, in a CLI that reads no items: which simulator runs.
OTHER_MEANING = {("bapjax/sim/generate.py", "dataset")}


def test_each_item_source_flag_is_defined_once_in_bapjax():
    elsewhere = {f"{path.relative_to(REPO)}:{line}": name
                 for path in sorted((REPO / "bapjax").rglob("*.py")) if path.name != "cli.py"
                 for name, line in flag_definitions(path)
                 if name in cli.ITEM_SOURCE_FLAGS and (str(path.relative_to(REPO)), name) not in OTHER_MEANING}
    assert elsewhere == {}


def test_every_item_cli_gets_the_one_help_text():
    """All the CLIs' flags defined in one process, in any order: each item-source flag has its help."""
    code = (
        "import importlib, json, sys\n"
        "from absl import flags\n"
        f"for name in {list(reversed(ITEM_CLIS))!r}:\n"
        "    importlib.import_module(name).define_flags()\n"
        f"print(json.dumps({{n: flags.FLAGS[n].help for n in {list(cli.ITEM_SOURCE_FLAGS)!r}}}))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=120)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout.strip().splitlines()[-1]) == cli.ITEM_SOURCE_FLAGS


# --------------------------------------------------------------------------------------------
# --config: a file, or an installed config by name


def test_a_config_loads_by_name_as_from_its_file(monkeypatch, tmp_path):
    by_file = cli.load_config(str(REPO / "configs" / "cpu_experiment.py") + ":mc,3")
    monkeypatch.chdir(tmp_path)  # no configs/ here: the name is looked up in the installed package
    assert cli.load_config("cpu_experiment:mc,3").to_dict() == by_file.to_dict()
    assert by_file.seed == 3 and cli.load_config("quickstart").workdir == "runs/quickstart"
    assert {"quickstart", "cpu", "cpu_experiment", "cl"} <= set(cli.config_names())
    assert "common" not in cli.config_names()  # shared pieces, no get_config


def test_a_missing_config_names_the_flag_and_the_names(monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(cli.ConfigNotFoundError) as raised:
        cli.load_config("configs/quickstrat.py")
    message = str(raised.value)
    assert message.startswith("--config=configs/quickstrat.py: no such config file or config name (names: ")
    assert "quickstart" in message


def test_a_config_path_names_the_installed_config_from_any_directory(monkeypatch, tmp_path):
    """`--config=configs/X.py[:arg]` where no such file is under the working directory is the installed X;
    a path to an installed name in another folder is refused with the name form to use."""
    monkeypatch.chdir(tmp_path)
    config = cli.load_config("configs/cpu_experiment.py:agg,3")
    assert config.seed == 3 and config.workdir == "runs/exp/agg-frame-s3"
    with pytest.raises(cli.ConfigNotFoundError, match=r"the installed cpu_experiment is --config=cpu_experiment:agg,3\)$"):
        cli.load_config("elsewhere/cpu_experiment.py:agg,3")


def test_a_missing_config_file_is_one_line_and_exit_2():
    """The most common mistake, a typo in the path: one line, status 2 (was two tracebacks, 1)."""
    done = subprocess.run([sys.executable, "-m", "bapjax.train", "--config=configs/quickstrat.py"], cwd=REPO,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, done.stderr[-2000:]
    assert done.stderr.startswith("error: --config=configs/quickstrat.py: no such config file or config name "
                                  "(names: ") and done.stderr.count("\n") == 1, done.stderr


# --------------------------------------------------------------------------------------------
# A config field typed as a flag, a value that does not parse: said in bapjax's words


@pytest.mark.parametrize("args, line", [
    (["--batch_size=8"], "error: --batch_size: not a flag of this command; it is a field of the config: "
                         "--config.eval.batch_size=8 or --config.train.batch_size=8\n"),
    (["--config=quickstart", "--layers", "3"], "error: --layers: not a flag of this command; it is a "
                                                     "field of the config: --config.model.world.layers=...\n"),
    (["--config=quickstart", "--config.train.batch_size=abc"], "error: --config.train.batch_size=abc: expected an integer\n"),
    (["--config=quickstart", "--config.train.learning_rate=1e-3x"],
     "error: --config.train.learning_rate=1e-3x: expected a number\n"),
    (["--config=quickstart", "--config.train.glove=maybe"], "error: --config.train.glove=maybe: expected true or false\n"),
    (["--config=quickstart", "--no_such_flag=1"], "error: Unknown command line flag 'no_such_flag'\n"),
])
def test_flag_mistakes_on_train_are_one_line_in_bapjax_words(args, line, tmp_path):
    done = subprocess.run([sys.executable, "-m", "bapjax.train", *args], cwd=tmp_path, capture_output=True,
                          text=True, timeout=120)
    assert (done.returncode, done.stderr) == (2, line)


def test_config_field_paths_finds_every_field_of_that_name():
    import ml_collections

    config = ml_collections.ConfigDict({"train": {"batch_size": 8, "x": {"batch_size": 1}}, "batch_size": 2})
    assert cli.config_field_paths(config, "batch_size") == ["batch_size", "train.batch_size", "train.x.batch_size"]
    assert cli.config_field_paths(config, "nothing") == []


def test_apply_overrides_says_what_a_field_takes():
    with pytest.raises(cli.ConfigOverrideError, match=r"^--config.train.batch_size=abc: expected an integer$"):
        cli.apply_overrides(cli.load_config("quickstart"), ["--config.train.batch_size=abc"])


# --------------------------------------------------------------------------------------------
# Progress lines: rate and ETA measured after the warm-up


def test_progress_measures_after_the_first_line(monkeypatch):
    """A first step that compiles for 60 s, then 1 step/s: the first line says it includes the
    warm-up and gives no ETA; the next ones give the steady rate's ETA (not 60x too long)."""
    clock = [100.0]
    monkeypatch.setattr(cli.time, "time", lambda: clock[0])
    rule = cli.Progress(1000, "steps")
    clock[0] += 61.0  # compilation + the first step
    assert rule.line(1) == "1/1000 steps in 61 s (includes compilation and start-up; rate and ETA from the next line)"
    clock[0] += 9.0
    assert rule.line(10) == "10/1000 steps (1.0 steps/s, ETA 16.5 min)"
    clock[0] += 120.0  # an evaluation: left out after restart
    rule.restart(10)
    clock[0] += 10.0
    assert rule.measure(20) == (1.0, 980.0)
    clock[0] += 980.0
    assert rule.line(1000) == "1000/1000 steps in 1180 s (1.0 steps/s)"  # the last line: no ETA, no next line


def test_a_last_line_promises_no_next_line(monkeypatch):
    """A loop whose first line is its last (a short one) says it includes the warm-up, nothing more."""
    clock = [0.0]
    monkeypatch.setattr(cli.time, "time", lambda: clock[0])
    rule = cli.Progress(50, "items")
    clock[0] += 3.0
    assert rule.line(50) == "50/50 items in 3 s (includes compilation and start-up)"
    assert rule.unmeasured(50) == cli.Progress.WARMING_UP and "next line" in rule.unmeasured(49)


def test_show_prints_a_long_steps_lines_apart_and_each_count_once(monkeypatch, capsys):
    clock = [0.0]
    monkeypatch.setattr(cli.time, "time", lambda: clock[0])
    rule = cli.Progress(100, "games")
    for done in range(1, 101):
        clock[0] += 0.5
        rule.show(done, "augment")
    rule.show(100, "augment", force=True)  # a forced line of a count already shown: not again
    assert capsys.readouterr().err.splitlines() == [
        "augment: 1/100 games in 0 s (includes compilation and start-up; rate and ETA from the next line)",
        "augment: 21/100 games (2.0 games/s, ETA 40 s)", "augment: 41/100 games (2.0 games/s, ETA 30 s)",
        "augment: 61/100 games (2.0 games/s, ETA 20 s)", "augment: 81/100 games (2.0 games/s, ETA 10 s)",
        "augment: 100/100 games in 50 s (2.0 games/s)"]
    assert [cli.eta_text(s) for s in (5, 89, 90, 3600, 5400, 7200)] == ["5 s", "89 s", "1.5 min", "60.0 min",
                                                                       "1.5 h", "2.0 h"]


def test_the_compile_tally_counts_each_shape_a_function_is_compiled_for():
    import jax
    import jax.numpy as jnp

    tally = cli.compile_tally()
    zeros = {n: jnp.zeros(n, jnp.float32) for n in (3, 4)}

    def double_plus_one(x):
        return 2 * x + 1

    double = jax.jit(double_plus_one)
    before = tally.snapshot()
    for n in (3, 4, 3):
        double(zeros[n]).block_until_ready()
    grown = tally.since(before)
    assert grown["programs"] == 2 and grown["from_cache"] == 0
    assert grown["costliest"] == [["jit(double_plus_one)", 2, grown["costliest"][0][2]]]
    again = tally.snapshot()
    double(zeros[4]).block_until_ready()
    assert tally.since(again) == {"programs": 0, "from_cache": 0, "compile_seconds": 0.0, "trace_seconds": 0.0,
                                  "costliest": []}
