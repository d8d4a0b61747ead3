"""How a training run ends, as a user sees it through `python -m bapjax.train`: quiet library logs,
a closing summary, a finished run left alone, help that exits 0, plain override errors, a diverging
run that stops at its first non-finite loss, a damaged checkpoint that is one error line. (A process of
a multi-process job that dies is named by its peers: tests/test_slurm.py, as a SLURM task killed.)"""

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import jax
import numpy as np
import pytest

from bapjax.errors import NonFiniteLoss

REPO = Path(__file__).resolve().parents[1]

# configs/cpu.py cut to a few steps of a tiny model on 40 MDC training games
TINY = [
    "--config=configs/cpu.py", "--config.data.sources.mc.augment.enabled=False",
    "--config.data.sources.mc.max_train_items=40", "--config.data.sources.mc.max_val_items=8",
    "--config.data.sources.mc.max_test_items=8", "--config.train.glove=False", "--config.model.text.embedding_dim=8",
    "--config.model.text.hidden=16", "--config.model.world.features=8", "--config.model.world.layers=1",
    "--config.model.decoder.action_embedding=16", "--config.model.decoder.hidden=16", "--config.model.heads.hidden=16",
    "--config.features.max_text_tokens=24", "--config.features.max_actions=3", "--config.train.batch_size=8",
    "--config.train.eval_every_steps=3", "--config.train.log_every_steps=3", "--config.train.patience=0",
    "--config.train.time_budget_minutes=0", "--config.eval.val_decode_items=-1",
    "--config.eval.final_splits=('mc:test',)", "--config.eval.batch_size=8", "--config.eval.stop_thresholds=(0.3,)",
]
LIBRARY_LOG_LINE = re.compile(r"^[IWEF]\d{4} \d\d:\d\d:\d\d", re.M)  # absl's format: Orbax's, JAX's INFO lines


def bapjax(*args, timeout=600, env=None):
    return subprocess.run([sys.executable, "-m", *args], cwd=REPO, capture_output=True, text=True, timeout=timeout,
                          env=env)


def train(workdir, *overrides, timeout=600):
    return bapjax("bapjax.train", *TINY, f"--workdir={workdir}", *overrides, timeout=timeout)


@pytest.mark.parametrize("command", ["bapjax.train", "bapjax.evaluate", "bapjax.predict", "bapjax.report"])
def test_help_exits_0(command):
    for flag in ("--help", "--helpfull"):
        done = bapjax(command, flag, timeout=120)
        assert done.returncode == 0, (flag, done.stderr[-2000:])
        assert "--" in done.stdout


def test_train_help_says_how_overrides_work():
    done = bapjax("bapjax.train", "--help", timeout=120)
    assert "--config.train.learning_rate" in done.stdout and "--print_config" in done.stdout


def test_print_config_prints_the_resolved_config():
    done = bapjax("bapjax.train", "--config=configs/quickstart.py", "--config.train.learning_rate=0.01",
                  "--print_config", timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    config = json.loads(done.stdout)
    assert config["train"]["learning_rate"] == 0.01 and config["train"]["grad_clip"] == 5.0  # a library default


@pytest.mark.parametrize("override,named,hint", [
    ("--config.train.batchsize=8", "--config.train.batchsize", "batch_size"),
    ("--config.trian.batch_size=8", "--config.trian.batch_size", "train"),
])
def test_a_misspelled_override_is_one_plain_line(override, named, hint, tmp_path):
    done = bapjax("bapjax.train", "--config=configs/quickstart.py", override, f"--workdir={tmp_path / 'run'}",
                  timeout=120)
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: {named}:"), lines
    assert f"did you mean {hint!r}" in lines[0] and "\\" not in lines[0]
    assert not (tmp_path / "run").exists()


@pytest.fixture(scope="module")
def three_steps(tmp_path_factory):
    """A 3-step run trained once for this module: (its workdir, the command's output); a test that
    changes the run works on its own copy."""
    run = tmp_path_factory.mktemp("three_steps") / "run"
    done = train(run, "--config.train.max_steps=3")
    assert done.returncode == 0, done.stderr[-3000:]
    return run, done


def copy_of(trained: Path, tmp_path: Path) -> Path:
    shutil.copytree(trained, tmp_path / "run")
    return tmp_path / "run"


def test_a_finished_run_ends_with_its_summary_and_a_rerun_leaves_it_alone(three_steps, tmp_path):
    trained, done = three_steps
    run = trained
    output = done.stdout + done.stderr
    assert not LIBRARY_LOG_LINE.search(output), LIBRARY_LOG_LINE.search(output).group(0)
    lines = done.stdout.strip().splitlines()
    assert lines[0] == f"workdir: {run}"  # named first
    assert lines[-4] == "next:"  # the commands to run next, last
    for line, command in zip(lines[-3:], ("bapjax.predict", "bapjax.report", "bapjax.play")):
        assert line.startswith(f"  python -m {command} --checkpoint {run}"), line
    assert json.loads(lines[-5]).keys() == {"mc_test"}  # the final evaluation, before them
    summary = "\n".join(lines[-12:-5])
    assert f"run finished: {run}" in summary and "trained 3 steps (24 items)" in summary
    assert re.search(r"compiled \d+ programs in \d+\.\d min, tracing included \(\d+ read from the persistent", summary)
    assert "STOP rule" in summary and "micro Overall F1 (test): mc " in summary
    run = copy_of(trained, tmp_path)
    log = (run / "runs.jsonl").read_text()

    again = train(run, "--config.train.max_steps=3")
    assert again.returncode == 0 and again.stdout.strip().splitlines() == [
        f"{run} holds this run, finished: results in {run / 'final_eval.json'} (--redo_final_eval evaluates it again)"]
    assert (run / "runs.jsonl").read_text() == log  # nothing appended

    redo = train(run, "--config.train.max_steps=3", "--redo_final_eval")
    assert redo.returncode == 0 and "run finished" in redo.stdout
    # a second invocation: the run's totals said to be over both, then what this one did
    assert re.search(r"trained 3 steps \(24 items\) in \d+\.\d min in all, over 2 invocations", redo.stdout), redo.stdout
    assert "  this invocation: steps 3 to 3 in " in redo.stdout, redo.stdout
    assert re.search(r"compiled \d+ programs .* in all, over 2 invocations; this invocation \d+ programs", redo.stdout)
    first, second = [json.loads(line) for line in (run / "runs.jsonl").read_text().splitlines()]
    assert first["compiled"]["programs"] > 0 and first["compiled"]["costliest"]
    assert second["compiled"]["from_cache"] > 0  # the evaluation's programs, compiled by the first invocation


def test_a_diverged_run_is_told_a_lower_learning_rate_that_is_an_override():
    """Half the run's rate, never above the default one (a rate of 1e30 halved would diverge
    again), written as a value `--config.train.learning_rate=` parses to that rate."""
    from bapjax import cli
    from bapjax.training import hooks, run_config

    rates = (1e30, 1e6, 2e-3, 1e-3, 3e-4, 1e-5)
    suggested = [hooks.lower_learning_rate(rate) for rate in rates]
    assert suggested == ["0.001", "0.001", "0.001", "0.0005", "0.00015", "5e-06"]
    for rate, value in zip(rates, suggested):
        config = cli.apply_overrides(run_config.base_config(), [f"--config.train.learning_rate={value}"])
        assert config.train.learning_rate == float(value) < rate


def test_a_diverging_run_stops_at_its_first_non_finite_loss(tmp_path):
    """A learning rate far too high: the loss is infinite or NaN within a few steps; the run stops
    there with one line naming the step, keeps no checkpoint of that state and evaluates nothing."""
    run = tmp_path / "run"
    done = train(run, "--config.train.max_steps=30", "--config.train.eval_every_steps=2",
                 "--config.train.log_every_steps=10", "--config.train.learning_rate=1e30")
    assert done.returncode == NonFiniteLoss.exit_status, done.stderr[-3000:]
    errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "Traceback" not in done.stderr, done.stderr[-3000:]
    step = int(re.match(r"error: step (\d+): the training loss is", errors[0]).group(1))
    assert step < 10  # caught before the first log interval ends
    assert "train.learning_rate=1e+30 is too high" in errors[0]
    assert "the same command with e.g. --config.train.learning_rate=0.001 " in errors[0]
    assert not (run / "final_eval.json").exists() and not (run / "decode.json").exists()
    from bapjax.training import checkpoints

    for kind in ("latest", "best"):
        saved = sorted(int(p.name) for p in (run / "checkpoints" / kind).glob("*") if p.name.isdigit())
        assert all(s < step for s in saved), (kind, saved, step)
        if saved:
            params, _ = checkpoints.load_params(run / "checkpoints" / kind)
            assert all(np.isfinite(np.asarray(leaf)).all() for leaf in jax.tree_util.tree_leaves(params))
    record = json.loads((run / "runs.jsonl").read_text().splitlines()[-1])
    assert record["finished"] is False and record["last_step"] >= step


def test_a_damaged_checkpoint_is_one_error_line_without_traceback(three_steps, tmp_path):
    """The only step in checkpoints/latest with its largest file cut to 100 bytes: resuming says so
    in one line and exits 2; Orbax's leftover reads print nothing (three tries: it is a race)."""
    run = copy_of(three_steps[0], tmp_path)
    files = [p for p in (run / "checkpoints" / "latest" / "3").rglob("*") if p.is_file()]
    largest = max(files, key=lambda p: p.stat().st_size)
    largest.write_bytes(largest.read_bytes()[:100])
    for _ in range(3):
        done = train(run, "--config.train.max_steps=6")
        assert done.returncode == 2, done.stderr[-3000:]
        errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
        assert len(errors) == 1 and "no intact checkpoint among steps [3]" in errors[0], done.stderr[-3000:]
        assert "Traceback" not in done.stdout + done.stderr, (done.stdout + done.stderr)[-3000:]
