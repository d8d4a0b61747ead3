"""Every `python -m bapjax...` command as a user meets it: `-h` is `--help` (usage, exit 0) on
each, and every command the docs show (README.md and docs/*.md code blocks) names flags its
command has, so it runs when pasted."""


import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from functools import lru_cache
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def commands() -> list[str]:
    """The module name of every command in bapjax/: each module run as the program (`__main__`)."""
    found = []
    for path in sorted((REPO / "bapjax").rglob("*.py")):
        if 'if __name__ == "__main__":' in path.read_text(encoding="utf-8"):
            module = ".".join(path.relative_to(REPO).with_suffix("").parts)
            found.append(module.removesuffix(".__main__"))
    return found


COMMANDS = commands()


@lru_cache(maxsize=None)
def help_of(command: str, flag: str = "-h") -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", command, flag], cwd=REPO, capture_output=True, text=True,
                          timeout=300)


@lru_cache(maxsize=1)
def every_help() -> dict[str, subprocess.CompletedProcess]:
    """`-h` of every command, two at a time (each starts a Python with JAX)."""
    with ThreadPoolExecutor(2) as pool:
        return dict(zip(COMMANDS, pool.map(help_of, COMMANDS)))


def test_the_commands_are_found():
    assert {"bapjax.train", "bapjax.evaluate", "bapjax.predict", "bapjax.predictors", "bapjax.report",
            "bapjax.play", "bapjax.viz", "bapjax.build", "bapjax.sim.generate", "bapjax.sim.grounding",
            "bapjax.corpus.mdc", "bapjax.corpus.augment", "bapjax.corpus.v2_clean", "bapjax.llm",
            "bapjax.analysis.stop_rule"} <= set(COMMANDS)


def test_dash_h_is_help_on_every_command():
    wrong = {}
    for command, done in every_help().items():
        text = done.stdout + done.stderr
        if done.returncode != 0 or "error:" in text or "--" not in done.stdout:
            wrong[command] = (done.returncode, text[-300:])
    assert wrong == {}


def test_dash_h_after_a_double_dash_is_left_alone():
    from bapjax import cli

    assert cli.help_as_long_flag(["prog", "-h", "--out", "x", "--", "-h"]) == ["prog", "--help", "--out", "x", "--", "-h"]


# --------------------------------------------------------------------------------------------
# Missing flags: the error names only what is missing


@pytest.mark.parametrize("args, line", [
    (["bapjax.predict", "--checkpoint", "runs/x"], "error: --out is required\n"),
    (["bapjax.predict", "--out", "p.jsonl"], "error: --checkpoint is required\n"),
    (["bapjax.predict"], "error: --checkpoint and --out are required\n"),
    (["bapjax.sim.generate", "--dataset", "bs"], "error: --out is required\n"),
    (["bapjax.corpus.mdc", "export", "--corpus", "nowhere", "--split", "test"], "error: --out is required by export\n"),
])
def test_a_missing_flag_error_names_only_what_is_missing(args, line, tmp_path):
    done = subprocess.run([sys.executable, "-m", *args], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert (done.returncode, done.stderr) == (2, line)


def test_require_flags_lists_the_missing_ones():
    from types import SimpleNamespace

    from bapjax import cli
    from bapjax.errors import UserError

    values = SimpleNamespace(a="x", b=None, c="", d=None)
    with pytest.raises(UserError, match=r"^--b, --c and --d are required by export$"):
        cli.require_flags("a", "b", "c", "d", values=values, of=" by export")
    cli.require_flags("a", values=values)
