"""The suite's own exceptions. `UserError`: bad input a user can act on (the CLI prints one line and
exits 2); `Unsupported`: a case that cannot run here (recorded as skipped). Anything else is a bug."""


class UserError(Exception):
    """Bad input (scenario file, CLI argument, results folder): shown as one line, exit status 2."""


class Unsupported(Exception):
    """This case cannot run on this machine or setup; the message is the skip reason (the case is
    recorded as skipped). Raised by precisions, workloads and the runner alike."""
