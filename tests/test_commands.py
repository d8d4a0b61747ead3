"""Every `python -m bapjax...` command as a user meets it: `-h` is `--help` (usage, exit 0) on
each, and every command the docs show (README.md and docs/*.md code blocks) runs when pasted: a
`python -m bapjax...` or `python -m benchmarks...` command names flags its command has (and a
benchmark's --config a config that exists), a `python -m pytest` command test files that exist,
a `pip install` of bapjax extras that pyproject.toml declares, and `tensorboard` is named only
beside the install that brings it."""


import re
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
            "bapjax.analysis.error_analysis"} <= set(COMMANDS)


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
    (["bapjax.predict", "--checkpoint", "runs/x"],
     "error: --out is required (or --evaluate, to print the scores without writing predictions)\n"),
    (["bapjax.predict", "--out", "p.jsonl"], "error: --checkpoint is required\n"),
    (["bapjax.predict"], "error: --checkpoint is required\n"),
    (["bapjax.sim.generate", "--dataset", "bs"], "error: --out is required\n"),
    (["bapjax.corpus.mdc", "export", "--corpus", "nowhere", "--split", "test"], "error: --out is required by export\n"),
])
def test_a_missing_flag_error_names_only_what_is_missing(args, line, tmp_path):
    done = subprocess.run([sys.executable, "-m", *args], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert (done.returncode, done.stderr) == (2, line)


@pytest.mark.parametrize("args, line", [
    (["orcale", "--out", "p.jsonl"],
     "error: 'orcale' is not a predictor (did you mean 'oracle'?); the predictors are empty, oracle, perturbed\n"),
    (["best"], "error: 'best' is not a predictor; the predictors are empty, oracle, perturbed\n"),
])
def test_a_misspelt_predictor_is_named_with_the_valid_ones(args, line, tmp_path):
    done = subprocess.run([sys.executable, "-m", "bapjax.predictors", *args], cwd=tmp_path, capture_output=True,
                          text=True, timeout=300)
    assert (done.returncode, done.stderr) == (2, line)
    assert not (tmp_path / "p.jsonl").exists()


def test_require_flags_lists_the_missing_ones():
    from types import SimpleNamespace

    from bapjax import cli
    from bapjax.errors import UserError

    values = SimpleNamespace(a="x", b=None, c="", d=None)
    with pytest.raises(UserError, match=r"^--b, --c and --d are required by export$"):
        cli.require_flags("a", "b", "c", "d", values=values, of=" by export")
    cli.require_flags("a", values=values)


# --------------------------------------------------------------------------------------------
# The docs' commands run when pasted

DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
FENCE = re.compile(r"^```[^\n]*\n(.*?)^```", re.M | re.S)
# A command starts its line (after a `$ ` prompt, or inside a shell loop), maybe behind `nice`, `timeout`
# or a variable's assignment; one quoted in an output line (an error naming the command that was run) is
# not a command to paste.
PREFIX = r"^\s*(?:\$\s+)?(?:.*?(?:\bdo|&&|;)\s+)?(?:(?:nice(?:\s+-n\s*-?\d+)?|timeout\s+\S+|\w+=\S*)\s+)*"
COMMAND = re.compile(PREFIX + r"python -m ((?:bapjax|benchmarks)[\w.]*)(.*)$")


def code_block_lines() -> list[tuple[str, str]]:
    """(where, line) of every line of the docs' code blocks, continuation lines joined."""
    found = []
    for doc in DOCS:
        text = doc.read_text(encoding="utf-8")
        for block in FENCE.finditer(text):
            first = text.count("\n", 0, block.start(1)) + 1
            for n, line in enumerate(re.sub(r"\\\n", " ", block.group(1)).splitlines()):
                found.append((f"{doc.relative_to(REPO)}:{first + n}", line))
    return found


def doc_commands() -> list[tuple[str, str, str]]:
    """(where, module, arguments) of every `python -m bapjax...` and `python -m benchmarks...` line in
    the docs' code blocks (comments and what follows `&&`, `;` or a redirect cut)."""
    found = []
    for where, line in code_block_lines():
        command = COMMAND.match(line)
        if command:
            arguments = re.split(r"\s#|&&|;|\s2?>\s", command.group(2))[0]
            found.append((where, command.group(1), arguments.strip()))
    return found


def benchmarks() -> list[str]:
    """The benchmarks a user runs as `python -m benchmarks.<name>` from the repository root."""
    return [f"benchmarks.{path.stem}" for path in sorted((REPO / "benchmarks").glob("*.py"))
            if 'if __name__ == "__main__":' in path.read_text(encoding="utf-8")]


BENCHMARKS = benchmarks()


def config_exists(value: str) -> bool:
    """A --config value names a config file (relative to the repository root) or an installed config."""
    name = value.partition(":")[0]
    return (REPO / name).is_file() or (REPO / "configs" / f"{name}.py").is_file()


def flags_of(command: str, full: bool = False) -> set[str]:
    """The flags `command` lists in its `-h`; with `full`, every flag it takes (absl's --helpfull adds
    the flags every absl program has, e.g. --verbosity, and those of the libraries it imports)."""
    done = help_of(command, "--helpfull") if full else help_of(command)  # the cache key every_help fills
    text = done.stdout if done.returncode == 0 else ""
    names = set(re.findall(r"--(?:\[no\])?([A-Za-z][\w.-]*)", text))
    return names | {f"no{name}" for name in re.findall(r"--\[no\]([A-Za-z][\w.-]*)", text)}


def paste_problems(module: str, arguments: str) -> list[str]:
    """What stops a documented command from running as written: an unknown command, a flag its
    command does not take, shell syntax a reader must edit first ([optional] parts, <placeholders>,
    a|b alternatives)."""
    if module not in COMMANDS + BENCHMARKS:
        return [f"no command {module}"]
    problems = [f"{token}: optional parts in brackets do not paste (a comment can name them)"
                for token in re.findall(r"\[[^\]]*\]", arguments) if not token.startswith("['")]
    problems += [f"{token}: a placeholder in <> is a shell redirect" for token in re.findall(r"<[^>]*>", arguments)]
    if "|" in arguments.replace("'|'", ""):
        problems.append("a|b: alternatives are a shell pipe (one command per choice)")
    known = flags_of(module)
    for name in re.findall(r"(?:^|[\s\"'])--([A-Za-z][\w-]*)", arguments):
        if name not in known:  # -h lists a command's own flags: the rest only when one is used
            known = known | flags_of(module, full=True)
        if name not in known and not (name.startswith("config") and "config" in known):
            problems.append(f"--{name}: not a flag of {module}")
    if module in BENCHMARKS:  # training commands resolve their config in test_the_cheap_commands_of_the_docs_run
        problems += [f"--config {value}: no such config" for value in re.findall(r"--config[= ](\S+)", arguments)
                     if not config_exists(value)]
    return problems


def test_the_docs_commands_are_found():
    found = doc_commands()
    assert len(found) > 40
    assert ("bapjax.train", "--config=configs/cpu.py") in {(module, arguments) for _, module, arguments in found}  # nice -n 10
    assert "benchmarks.bench_train" in {module for _, module, _ in found}
    assert ("bapjax.evaluate", "--corpus play-games --split test --predictions played.jsonl --allow_missing") in {
        (module, arguments) for _, module, arguments in found}


def test_every_command_in_the_docs_has_the_flags_it_uses():
    every_help()
    wrong = {f"{where}: python -m {module} {arguments}": problems for where, module, arguments in doc_commands()
             if (problems := paste_problems(module, arguments))}
    assert wrong == {}


def test_paste_problems_are_found():
    every_help()
    assert paste_problems("bapjax.evaluate", "--predictions p.jsonl [--allow_missing]") == [
        "[--allow_missing]: optional parts in brackets do not paste (a comment can name them)"]
    assert paste_problems("bapjax.predict", "--checkpoint RUN --items x --out p --bogus 1") == [
        "--bogus: not a flag of bapjax.predict"]
    assert paste_problems("bapjax.train", "--config=quickstart --config.train.batch_size=8 --workdir=runs/<name>") == [
        "<name>: a placeholder in <> is a shell redirect"]
    assert paste_problems("bapjax.viz", "sample --kind shapes|random") == [
        "a|b: alternatives are a shell pipe (one command per choice)"]
    assert paste_problems("bapjax.nothing", "") == ["no command bapjax.nothing"]
    assert "verbosity" not in flags_of("bapjax.viz")
    assert paste_problems("bapjax.viz", "sample --kind shapes --verbosity 1") == []  # absl's, in --helpfull only
    assert paste_problems("benchmarks.bench_train", "--config configs/nothing.py:agg --fixed_length 5") == [
        "--config configs/nothing.py:agg: no such config"]



def test_the_docs_test_commands_name_test_files_that_exist():
    runs = [(where, line) for where, line in code_block_lines() if re.search(r"\bpython -m pytest\b", line)]
    assert len(runs) >= 5
    missing = [f"{where}: {path}" for where, line in runs
               for path in re.findall(r"\btests/[\w/]+\.py\b", line.split(" #")[0]) if not (REPO / path).is_file()]
    assert missing == []


def extras() -> set[str]:
    import tomllib

    return set(tomllib.loads((REPO / "pyproject.toml").read_text())["project"].get("optional-dependencies", {}))


def test_the_docs_install_only_extras_bapjax_declares():
    """`pip install -e '.[x]'` (in code blocks and in prose) names extras of pyproject.toml, and the
    commands of packages bapjax does not require (TensorBoard) are named beside their install."""
    texts = {doc.relative_to(REPO): doc.read_text(encoding="utf-8") for doc in DOCS}
    named = {(str(doc), extra) for doc, text in texts.items()
             for group in re.findall(r"pip install[^`\n]*?-e\s+'?\.\[([\w,-]+)\]", text) for extra in group.split(",")}
    assert ("docs/training.md", "tensorboard") in named
    assert {extra for _, extra in named} <= extras()
    for doc, text in texts.items():
        if re.search(r"`tensorboard --logdir", text):
            assert "[tensorboard]" in text, f"{doc}: `tensorboard` is not installed with bapjax: name its extra"


# The commands of the docs that finish in seconds without data run as pasted (from the checkout);
# a training command runs with --print_config added: its config, arguments and overrides resolve.
CHEAP = ("--print_config", "--show_games")


def cheap_form(module: str, arguments: str) -> str | None:
    if "$" in arguments:  # a shell loop's variable
        return None
    if module == "bapjax.train":
        return arguments if "--print_config" in arguments.split() else f"{arguments} --print_config"
    return arguments if any(flag in arguments.split() for flag in CHEAP) else None


def test_the_cheap_commands_of_the_docs_run():
    runs = [(where, f"{sys.executable} -m {module} {form}") for where, module, arguments in doc_commands()
            if (form := cheap_form(module, arguments)) is not None]

    def run(command: str) -> subprocess.CompletedProcess:
        return subprocess.run(command, shell=True, cwd=REPO, capture_output=True, text=True, timeout=300)

    with ThreadPoolExecutor(2) as pool:
        done = dict(zip(runs, pool.map(run, [command for _, command in runs])))
    failed = {f"{where}: {command}": result.stderr[-500:] for (where, command), result in done.items()
              if result.returncode != 0}
    assert failed == {}
    assert len(runs) >= 10


def test_the_sample_error_of_docs_corpus_is_the_one_bapjax_prints(monkeypatch):
    from bapjax import paths

    monkeypatch.delenv(paths.MDC_ENV, raising=False)
    monkeypatch.setattr(paths, "shared_mdc", lambda: Path("/home/me/shared/mdc"))
    with pytest.raises(paths.MdcNotFoundError) as raised:
        paths.mdc_path()
    text = (REPO / "docs" / "corpus.md").read_text(encoding="utf-8")
    assert f"$ python -m bapjax.corpus.mdc stats\nerror: {raised.value}\n" in text
