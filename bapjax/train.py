"""Train a builder model.

    python -m bapjax.train --config=configs/cl.py [--config.field=value ...] [--workdir DIR] [--wait]

The loop is `bapjax.training.loop.train_and_evaluate`; the last line printed is the final
evaluation, one JSON object keyed "<source>_<split>".
"""

from __future__ import annotations

import json

import jax
from absl import flags

from bapjax import cli
from bapjax.errors import UserError
from bapjax.evaluation import evaluator
from bapjax.paths import workdir_path
from bapjax.training import preemption
from bapjax.training.loop import train_and_evaluate

FLAGS = flags.FLAGS


def define_flags() -> None:
    cli.define_config_flag("The training config:")
    cli.flag("string", "workdir", None, "Overrides config.workdir.")
    cli.flag("bool", "wait", False, "When another run holds the workdir, wait for it to end (else exit 2).")


def main(argv) -> int:
    if len(argv) > 1:
        raise UserError(f"unexpected arguments: {' '.join(argv[1:])}")
    config = FLAGS.config
    if config is None:
        raise UserError("--config is required: a config file (--config=configs/cl.py) or an installed config's name (--config=cl)")
    try:
        results = train_and_evaluate(config, workdir_path(FLAGS.workdir or config.workdir), wait=FLAGS.wait)
    except preemption.Preempted:
        return preemption.EXIT_STATUS  # the checkpoint is saved and the line printed
    if jax.process_index() == 0 and results:
        for key, report in results.items():
            print(f"\n== {key} ==\n{evaluator.format_report(report, fmt='text')}", flush=True)
        print(json.dumps(results), flush=True)
    return 0


if __name__ == "__main__":
    cli.run(main, define_flags)
