"""The paper configs keep their models: the parameter trees (paths and shapes) that
`configs/{baseline,agg,cl,bert}.py` and configs/cpu.py (the speed baseline) build equal those
recorded at c506d54, before the CPU model options (FiLM, last-action offsets) existed; new
options must stay off there. (configs/cpu_experiment.py's model, recorded too, now has FiLM.)

The recorded file was written by running this module against that commit's tree:
    git archive c506d54 | tar -x -C /tmp/c506d54
    PYTHONPATH=/tmp/c506d54 python tests/test_param_trees.py tests/data/param_trees_c506d54.json
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import jax

CONFIGS = ("baseline", "agg", "cl", "cpu", "bert:cl")
VOCAB_SIZE = 100
RECORDED = Path(__file__).parent / "data" / "param_trees_c506d54.json"


def param_tree(name: str) -> dict[str, list[int]]:
    """{"/"-joined parameter path: shape} of the model config `name` builds (abstract: no FLOPs)."""
    import configs
    from bapjax.models import builder

    config = configs.load(name)
    model = builder.build_model(config.model, VOCAB_SIZE)
    shapes = jax.eval_shape(lambda: builder.init_params(model, jax.random.PRNGKey(0)))
    return {"/".join(str(getattr(k, "key", k)) for k in path): list(leaf.shape)
            for path, leaf in jax.tree_util.tree_flatten_with_path(shapes)[0]}


def test_paper_configs_build_the_parameter_trees_of_c506d54():
    recorded = json.loads(RECORDED.read_text())
    assert set(CONFIGS) <= set(recorded)
    for name in CONFIGS:
        assert param_tree(name) == recorded[name], name


if __name__ == "__main__":
    Path(sys.argv[1]).write_text(json.dumps({name: param_tree(name) for name in CONFIGS}, indent=1, sort_keys=True) + "\n")
