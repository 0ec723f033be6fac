"""Errors a user can act on. The CLI prints them as one line and exits 2; everything else is a bug."""


class UserError(Exception):
    """Bad input (scenario file, CLI argument, results folder): shown as one line, exit status 2."""
