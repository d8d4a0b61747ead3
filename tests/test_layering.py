"""Dependencies point down: the corpus readers, simulators, text and curriculum code do not import
the modules that assemble training data or train (checked on the source with `ast`, imports
inside functions included), and importing the training stack's pieces loads no plotting."""

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PACKAGE = REPO / "bapjax"

# (modules checked, module names they must not import)
RULES = [
    (sorted((PACKAGE / "corpus").rglob("*.py")),
     ("bapjax.data.sources", "bapjax.data.curriculum", "bapjax.train", "bapjax.build")),
    (sorted((PACKAGE / "sim").rglob("*.py")), ("bapjax.data.sources", "bapjax.train", "bapjax.build")),
    ([PACKAGE / "curriculum.py", *sorted((PACKAGE / "text").rglob("*.py"))], ("bapjax.corpus",)),
    ([PACKAGE / "items.py"], ("bapjax.corpus", "bapjax.data.sources", "bapjax.sim", "bapjax.text")),
]


def imported_modules(path: Path) -> set[str]:
    """Every module `path` imports anywhere in its body: ``import a.b`` -> a.b, ``from a import b``
    -> a and a.b (b may be a module)."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return names


def _forbidden(name: str, prefixes) -> bool:
    return any(name == p or name.startswith(p + ".") for p in prefixes)


@pytest.mark.parametrize("files,forbidden", RULES, ids=["corpus", "sim", "curriculum+text", "items"])
def test_low_modules_do_not_import_higher_ones(files, forbidden):
    assert files
    wrong = {str(path.relative_to(REPO)): sorted(n for n in imported_modules(path) if _forbidden(n, forbidden))
             for path in files}
    assert {path: names for path, names in wrong.items() if names} == {}


def test_imported_modules_reads_every_form(tmp_path):
    source = tmp_path / "m.py"
    source.write_text("import bapjax.data.sources\nfrom bapjax import curriculum\n"
                      "def f():\n    from bapjax.train import main\n")
    names = imported_modules(source)
    assert {"bapjax.data.sources", "bapjax.data.curriculum", "bapjax.train"} <= names


def test_the_training_stack_loads_no_plotting_and_the_low_modules_no_corpus():
    code = (
        "import sys, json\n"
        "import bapjax.world.items, bapjax.data.curriculum, bapjax.text\n"
        "low = sorted(m for m in sys.modules if m.startswith('bapjax.corpus'))\n"
        "import bapjax.evaluate, bapjax.data.sources, bapjax.data.input_pipeline, bapjax.training.checkpoints, bapjax.training.decode\n"
        "import bapjax.corpus.v2_clean\n"
        "heavy = sorted(m for m in sys.modules if m.split('.')[0] == 'matplotlib'\n"
        "               or m.startswith('bapjax.sim.grounding') or m == 'bapjax.viz')\n"
        "print(json.dumps({'low': low, 'heavy': heavy}))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, check=True)
    assert json.loads(out.stdout.strip().splitlines()[-1]) == {"low": [], "heavy": []}
