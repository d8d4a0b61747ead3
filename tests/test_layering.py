"""Dependencies point down: `bapjax`'s parts form layers, and a module imports only its own part
and the parts of lower layers (checked on the source with `ast`, imports inside functions
included); importing the training stack's pieces loads no plotting.

The layers, bottom to top (DESIGN.md's data flow):

0. base: errors, paths, parallel, sharding, cli (what every command and reader shares)
1. world: the build region, actions, items, the JSONL formats
2. corpus (MDC reader, augmentation, store), text (tokenizer, vocabulary, encoders),
   evaluation (the v2 metrics and evaluator)
3. sim (simulators; their grounding check reads corpora)
4. data (sources, training set, input pipeline, curriculum), models (Flax)
5. decoding (the kernel, its settings, passes over items, the choices among draws, the choice on val)
6. training (the loop's parts, checkpoints, a run's files)
7. pages (report, play, pictures), llm, analysis (results from runs)
8. the user commands: bapjax/{train,evaluate,predict,ensemble,distil,predictors,report,play,viz,build}.py
"""

import ast
import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PACKAGE = REPO / "bapjax"

LAYERS = [
    ("errors", "paths", "parallel", "sharding", "cli"),
    ("world",),
    ("corpus", "text", "evaluation"),
    ("sim",),
    ("data", "models"),
    ("decoding",),
    ("training",),
    ("pages", "llm", "analysis"),
    ("train", "evaluate", "predict", "ensemble", "distil", "predictors", "report", "play", "viz", "build", "export"),
]
BASE, COMMANDS = LAYERS[0], LAYERS[-1]
LAYER = {part: level for level, parts in enumerate(LAYERS) for part in parts}


def part_of(module: str) -> str:
    """The layer part of a dotted bapjax module name: bapjax.world.grid -> world."""
    return module.split(".")[1]


def may_import(importer: str, imported: str) -> bool:
    """A part imports itself, any part of a lower layer, and (the base and the commands) its own layer."""
    if importer == imported or LAYER[imported] < LAYER[importer]:
        return True
    return LAYER[imported] == LAYER[importer] and importer in BASE + COMMANDS


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


def module_files():
    return sorted(path for path in PACKAGE.rglob("*.py") if path.name != "__init__.py" or path.parent != PACKAGE)


def test_every_part_has_a_layer():
    parts = {path.relative_to(PACKAGE).parts[0].removesuffix(".py") for path in module_files()}
    assert parts == set(LAYER)


def test_nothing_imports_upward():
    wrong = {}
    for path in module_files():
        importer = path.relative_to(PACKAGE).parts[0].removesuffix(".py")
        bad = sorted(name for name in imported_modules(path)
                     if name.startswith("bapjax.") and part_of(name) in LAYER and not may_import(importer, part_of(name)))
        if bad:
            wrong[str(path.relative_to(REPO))] = bad
    assert wrong == {}


def test_the_rule_refuses_an_upward_import():
    assert may_import("training", "models") and may_import("train", "report")
    assert not may_import("models", "data") and not may_import("world", "corpus")
    assert not may_import("data", "models") and may_import("corpus", "cli") and not may_import("cli", "world")


def test_imported_modules_reads_every_form(tmp_path):
    source = tmp_path / "m.py"
    source.write_text("import bapjax.data.sources\nfrom bapjax.data import curriculum\n"
                      "def f():\n    from bapjax.train import main\n")
    names = imported_modules(source)
    assert {"bapjax.data.sources", "bapjax.data.curriculum", "bapjax.train"} <= names


def test_the_training_stack_loads_no_plotting_and_the_low_modules_no_corpus():
    code = (
        "import sys, json\n"
        "import bapjax.world.items, bapjax.data.curriculum, bapjax.text\n"
        "low = sorted(m for m in sys.modules if m.startswith('bapjax.corpus'))\n"
        "import bapjax.evaluation.evaluator, bapjax.data.sources, bapjax.data.input_pipeline\n"
        "import bapjax.training.checkpoints, bapjax.decoding.decode, bapjax.training.loop\n"
        "import bapjax.corpus.v2_clean\n"
        "heavy = sorted(m for m in sys.modules if m.split('.')[0] == 'matplotlib'\n"
        "               or m.startswith('bapjax.sim.grounding') or m == 'bapjax.pages.pictures')\n"
        "print(json.dumps({'low': low, 'heavy': heavy}))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, check=True)
    assert json.loads(out.stdout.strip().splitlines()[-1]) == {"low": [], "heavy": []}


def decoding_names_used_outside() -> dict[str, set[str]]:
    """{module outside bapjax/decoding/: the names it takes from decoding}: ``from bapjax.decoding
    import X`` -> X; an import of one of its modules -> that module's dotted name."""
    used = {}
    for path in module_files():
        if path.relative_to(PACKAGE).parts[0] == "decoding":
            continue
        names = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("bapjax.decoding"):
                names.update(alias.name if node.module == "bapjax.decoding" else f"{node.module}.{alias.name}"
                             for alias in node.names)
            elif isinstance(node, ast.Import):
                names.update(alias.name for alias in node.names if alias.name.startswith("bapjax.decoding"))
        if names:
            used[str(path.relative_to(REPO))] = names
    return used


def test_the_rest_of_bapjax_decodes_through_the_packages_few_names():
    import inspect

    import bapjax.decoding as decoding

    public = set(decoding.__all__)
    callables = sorted(name for name in public if inspect.isclass(getattr(decoding, name))
                       or inspect.isfunction(getattr(decoding, name)))
    assert len(callables) <= 5, callables
    used = decoding_names_used_outside()
    assert used, "no module outside decoding/ imports it: the check reads nothing"
    assert {module: sorted(names - public) for module, names in used.items() if names - public} == {}
