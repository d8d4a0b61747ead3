"""bapjax as a user installs it: a wheel built from this tree, installed into a fresh virtual
environment outside the repository, trains the quickstart by name and writes a report.

The fresh environment gets its third-party packages (jax, flax, ...) from this interpreter's
site-packages through a ``.pth`` path line, so nothing is downloaded again; such a line adds the
folder without running its ``.pth`` files, so an editable bapjax installed there stays invisible,
and the test checks that ``bapjax`` and ``configs`` are imported from the wheel.
"""

import json
import os
import shutil
import site
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from bapjax.pages import report_page

REPO = Path(__file__).resolve().parents[1]
# The quickstart at a tiny size: 24/4/6 items per simulated data set, three steps of 8 items.
TINY = [f"--config.data.sources.{name}.generate.{split}_items={count}"
        for name in ("bs", "ss", "r") for split, count in (("train", 24), ("val", 4), ("test", 6))]
TINY += ["--config.train.batch_size=8", "--config.train.max_steps=3", "--config.train.log_every_steps=1"]


def source_copy(out: Path) -> Path:
    """The tree's files as a fresh clone has them (tracked, plus new files git does not ignore),
    so the build writes its build/ and egg-info folders there, not into the repository."""
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=REPO,
                            capture_output=True, check=True).stdout.decode().split("\0")
    for name in filter(None, listed):
        if (REPO / name).is_file():
            (out / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / name, out / name)
    return out


def flat(table: dict, prefix: str = "") -> dict:
    """{"EB.type": f, ...} of a nested report table."""
    out = {}
    for key, value in table.items():
        out.update(flat(value, f"{prefix}{key}.") if isinstance(value, dict) else {f"{prefix}{key}": value})
    return out


def run(command, cwd, env, timeout=900):
    done = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, f"{' '.join(map(str, command))}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done


@pytest.mark.slow
def test_an_installed_wheel_trains_the_quickstart_by_name_and_writes_a_report(tmp_path):
    if shutil.which("git") is None or not (REPO / ".git").exists():
        pytest.skip("needs a git checkout (the wheel is built from its files)")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["BAPJAX_CACHE"] = str(tmp_path / "cache")
    wheels = tmp_path / "dist"
    run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(wheels),
         str(source_copy(tmp_path / "src"))], tmp_path, env)
    (wheel,) = wheels.glob("bapjax-*.whl")

    venv = tmp_path / "venv"
    run([sys.executable, "-m", "venv", "--without-pip", str(venv)], tmp_path, env)
    python = str(venv / "bin" / "python")
    purelib = Path(run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                       tmp_path, env).stdout.strip())
    (purelib / "the-tests-packages.pth").write_text("\n".join(site.getsitepackages() + [sysconfig.get_paths()["purelib"]])
                                                    + "\n")
    run([sys.executable, "-m", "pip", "install", "--no-deps", "--no-index", "-q", "--target", str(purelib),
         str(wheel)], tmp_path, env)

    home = tmp_path / "home"  # outside the repository: no configs/ folder here
    home.mkdir()
    where = json.loads(run([python, "-c", "import json, bapjax, configs; "
                            "print(json.dumps([bapjax.__file__, configs.__file__]))"], home, env).stdout)
    assert all(Path(path).is_relative_to(purelib) for path in where), where
    # the shipped builder comes with the wheel, which stays small
    assert wheel.stat().st_size < 15 * 1024 * 1024, wheel.stat().st_size
    shipped = Path(run([python, "-c", "from bapjax.training import checkpoints; "
                        "print(checkpoints.find_run_dir('pretrained'))"], home, env).stdout.strip())
    assert shipped.is_relative_to(purelib) and (shipped / "checkpoints" / "best").is_dir(), shipped

    # The README's path spelling is no file here: it names the installed config; a typo is one line, exit 2.
    printed = run([python, "-m", "bapjax.train", "--config=configs/quickstart.py", "--print_config"], home, env)
    assert "runs/quickstart" in printed.stdout
    typo = subprocess.run([python, "-m", "bapjax.train", "--config=configs/quickstrat.py"], cwd=home, env=env,
                          capture_output=True, text=True, timeout=300)
    assert typo.returncode == 2 and typo.stderr.count("\n") == 1, typo.stderr[-3000:]
    assert typo.stderr.startswith("error: --config=configs/quickstrat.py: no such config file or config name")
    assert "quickstart" in typo.stderr

    workdir = tmp_path / "run"
    trained = run([python, "-m", "bapjax.train", "--config=quickstart", *TINY, f"--workdir={workdir}"], home, env)
    lines = trained.stdout.strip().splitlines()
    final = json.loads(lines[lines.index("next:") - 1])  # the final evaluation, before the commands to run next
    assert {"bs_test", "ss_test", "r_test"} <= set(final), final.keys()
    assert final == json.loads((workdir / "final_eval.json").read_text())

    (corpus,) = (tmp_path / "cache" / "generated").glob("bs-seed1-*")
    run([python, "-m", "bapjax.report", "--checkpoint", str(workdir), "--corpus", str(corpus), "--split", "test",
         "--out", "report"], home, env)
    data = report_page.read_embedded_data((home / "report" / "index.html").read_text(encoding="utf-8"))
    assert len(data["items"]) == final["bs_test"]["counts"]["items"] == 6
    # the report decodes as the final evaluation did (the run's STOP rule): the same scores
    shown, evaluated = flat(data["summary"]["micro"]), flat(final["bs_test"]["micro"])
    assert shown.keys() == evaluated.keys() and all(
        shown[key] == evaluated[key] if evaluated[key] is None else abs(shown[key] - evaluated[key]) < 1e-9
        for key in shown), (shown, evaluated)
