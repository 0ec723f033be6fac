"""The suite's own exceptions, all in one place. `UserError` and its kinds: bad input a user can act
on (the CLI prints one line and exits 2). `Unsupported` and `TimingUnsupported`: a case that cannot
run here (recorded as skipped). `NonFiniteOutput`: a case whose output is NaN or inf (recorded as
failed). Anything else is a bug."""


class UserError(Exception):
    """Bad input (scenario file, CLI argument, results folder): shown as one line, exit status 2."""


class Unsupported(Exception):
    """This case cannot run on this machine or setup; the message is the skip reason (the case is
    recorded as skipped). Raised by precisions, workloads and the runner alike."""


class ScenarioError(UserError):
    """A scenario file that does not load or plan; the message names the file and the field."""


class JournalError(UserError):
    """A journal that cannot be read, created or continued; the message names the file."""


class TimingUnsupported(Unsupported):
    """This timing setting cannot be used on this device; the message is the skip reason."""


class NonFiniteOutput(ArithmeticError):
    """A case's output holds NaN or inf values: the case failed, whatever its speed."""

