"""Every `python -m bapjax...` command as a user meets it: `-h` is `--help` (usage, exit 0) on
each, and every command the docs show (README.md and docs/*.md code blocks) names flags its
command has, so it runs when pasted."""


import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from functools import lru_cache
from pathlib import Path

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
