"""The one base class of user mistakes: bad input files, flags, configs, paths.

Every error a user can cause (a corrupt game log, a malformed prediction line, a missing corpus,
an out-of-range flag) derives from `UserError` and carries a message that names the file, line,
item, field or flag. The CLIs (`bapjax.cli.run`) print that message as one line and exit 2;
anything else is a bug and keeps its traceback.
"""


class UserError(ValueError):
    """A mistake in what the user gave bapjax; the message says where."""
