"""The base classes of what a command reports in one line: user mistakes and runs that went wrong.

Every error a user can cause (a corrupt game log, a malformed prediction line, a missing corpus,
an out-of-range flag) derives from `UserError` and carries a message that names the file, line,
item, field or flag. The CLIs (`bapjax.cli.run`) print that message as one line and exit 2.
A run that went wrong without a user mistake (a loss that turned non-finite, a lost peer process)
is a `RunFailure`: one line and its own exit status (`EXIT_STATUSES`, the README's fault table).
Anything else is a bug and keeps its traceback.
"""


class UserError(ValueError):
    """A mistake in what the user gave bapjax; the message says where."""


class RunFailure(RuntimeError):
    """A run that cannot go on; the message says what happened and what to do, `exit_status` is
    the command's exit status."""

    exit_status = 1


class NonFiniteLoss(RunFailure):
    """Training met a non-finite loss or gradient norm; no checkpoint of it was kept."""

    exit_status = 3


class PeerLost(RunFailure):
    """A multi-process job lost a process: a collective failed because a peer died."""

    exit_status = 4


class ProcessesNotJoined(PeerLost):
    """A process of a multi-process job could not join it at the start (`jax.distributed`)."""


# exit status -> meaning, for the docs' fault table (preemption's 75 lives in bapjax.training.preemption)
EXIT_STATUSES = {2: "a user mistake (flag, config, input file, workdir)", NonFiniteLoss.exit_status:
                 "the training loss turned non-finite", PeerLost.exit_status: "a process of a multi-process job was lost or could not join"}
