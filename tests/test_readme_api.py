"""README.md's "Python API" block runs as printed: it is read from the README and executed on the real
MDC's val split and a tiny run trained here (conftest's `tiny_run`: 2 steps on 32 MDC items)."""

import re
from pathlib import Path

from bapjax import paths

REPO = Path(__file__).resolve().parents[1]


def readme_api_block() -> str:
    text = (REPO / "README.md").read_text(encoding="utf-8")
    section = text.split("\n## Python API\n", 1)[1].split("\n## ", 1)[0]
    return re.search(r"^```python\n(.*?)^```", section, re.M | re.S).group(1)


def test_the_readme_python_api_block_runs(tiny_run, mdc_path, monkeypatch, capsys):
    monkeypatch.setenv(paths.MDC_ENV, str(mdc_path))  # what "@mdc" names
    code = readme_api_block()
    assert "load_run(RUN)" in code and "predict_with_run(run, items)" in code
    exec(compile(code, "README.md (Python API)", "exec"), {"RUN": str(tiny_run)})
    captured = capsys.readouterr()
    out = captured.out
    assert captured.err.count(f"loaded {tiny_run} step 2") == 1, captured.err  # the run is loaded once
    assert "Micro F1 (%)" in out and "items 100 " in out  # the oracle's tables
    assert re.search(r"^step 2, STOP rule \w+.*: \{'micro_overall': ", out, re.M), out[-2000:]


def test_loading_a_run_says_one_line_and_no_library_warnings(tiny_run):
    """Library logs stay quiet: loading a run's checkpoint (Orbax reads every item's metadata)
    prints only bapjax's own line."""
    import subprocess
    import sys
    done = subprocess.run([sys.executable, "-c", "import sys; from bapjax.training import checkpoints; "
                           "checkpoints.load_run(sys.argv[1])", str(tiny_run)], cwd=REPO, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout == "" and done.stderr.strip().splitlines() == [f"loaded {tiny_run} step 2"], done.stderr
