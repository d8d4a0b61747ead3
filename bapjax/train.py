"""Train a builder model.

    python -m bapjax.train --config=configs/cl.py [--config.<section>.<field>=value ...] [--workdir DIR]
    python -m bapjax.train --config=quickstart --print_config     # the resolved config, then exit

A config is a file (`configs/X.py[:arg]`) or an installed config's name (`X[:arg]`). Any field
`--print_config` prints can be overridden, e.g. `--config.train.learning_rate=1e-3`,
`--config.train.batch_size=16`, `--config.train.max_steps=200`, `--config.data.sources.mc.corpus=@mdc`,
`--config.model.world.features=32`, `--config.eval.final_splits="('mc:test',)"`; a mistake is one
line naming the flag. The main sections: data.sources (where items come from), features,
model, train (optimizer, schedule, budget, evals), eval (decoding, STOP rule), curriculum
(docs/training.md describes every field).

The run names its workdir first (`workdir: DIR`), writes there and resumes from its last
checkpoint when rerun; rerunning a finished run only says where its results are
(`--redo_final_eval` evaluates it again). It ends with the v2 tables of each test split, a
summary (workdir, steps, the checkpoint kept, the STOP rule, test F1), the final evaluation as
one JSON line keyed "<source>_<split>", and last the commands to run on it next (`next:`).
Library logs are quiet; `--verbosity=0` shows their INFO lines.
"""

from __future__ import annotations

import json

import jax
from absl import flags

from bapjax import cli, paths, sharding
from bapjax.errors import UserError
from bapjax.evaluation import evaluator
from bapjax.training import preemption, run_checks, run_config, summary
from bapjax.training.loop import train_and_evaluate

FLAGS = flags.FLAGS


def define_flags() -> None:
    cli.define_config_flag("The training config:", defaults=run_config.base_config)
    cli.flag("string", "workdir", None, "Overrides config.workdir.")
    cli.flag("bool", "wait", False, "When another run holds the workdir, wait for it to end (else exit 2).")
    cli.flag("bool", "print_config", False, "Print the resolved config (with the library's defaults) and exit.")
    cli.define_compilation_cache_flag()
    cli.flag("bool", "redo_final_eval", False, "On a finished run: choose the STOP rule and evaluate the test "
             "splits again (otherwise a finished run is left as it is).")


def main(argv) -> int:
    if len(argv) > 1:
        raise UserError(f"unexpected arguments: {' '.join(argv[1:])}")
    config = FLAGS.config
    if config is None:
        raise UserError("--config is required: a config file (--config=configs/cl.py) or an installed config's name (--config=cl)")
    if FLAGS.print_config:
        print(run_checks.with_defaults(config).to_json_best_effort(indent=1))
        return 0
    try:
        sharding.set_cpu_devices(config.get("cpu_devices", 0))
    except ValueError as err:
        raise run_checks.ConfigError(f"--config.cpu_devices={config.cpu_devices}: {err}") from None
    cli.apply_compilation_cache_flag()
    # a multi-process job is joined before anything below asks JAX for its processes or devices
    sharding.start_processes(config.get("distributed"))
    workdir = paths.workdir_path(FLAGS.workdir or config.workdir)
    if not FLAGS.redo_final_eval and run_checks.finished_run(config, workdir) is not None:
        if jax.process_index() == 0:
            print(f"{workdir} holds this run, finished: results in {workdir / 'final_eval.json'} "
                  "(--redo_final_eval evaluates it again)", flush=True)
        return 0
    paths.writable_cache()  # features, generated corpora and compiled programs are kept there
    if "://" not in str(workdir):  # a local workdir; gs:// and other stores answer for themselves
        # nothing left behind: a run refused later (its config, a busy workdir) writes nothing; the processes
        # of a job share the folder, so there none removes what another may be checking
        paths.check_writable_dir(str(workdir), "--workdir" if FLAGS.workdir else "config.workdir",
                                 keep_folders=jax.process_count() > 1)
    if jax.process_index() == 0:
        print(f"workdir: {workdir}", flush=True)
    try:
        results = train_and_evaluate(config, workdir, wait=FLAGS.wait)
    except preemption.Preempted:
        return preemption.EXIT_STATUS  # the checkpoint is saved and the line printed
    if jax.process_index() != 0:  # one line from every process of a job; process 0's results follow below
        print(f"process {jax.process_index()} of {jax.process_count()}: finished, {workdir} holds the run",
              flush=True)
    elif results is not None:
        for key, report in results.items():
            print(f"\n== {key} ==\n{evaluator.format_report(report, fmt='text')}", flush=True)
        print(flush=True)
        for line in summary.summary_lines(workdir, results):
            print(line, flush=True)
        print(json.dumps(results), flush=True)
        for line in summary.next_commands(workdir, results):
            print(line, flush=True)
    return 0


if __name__ == "__main__":
    cli.run(main, define_flags)
