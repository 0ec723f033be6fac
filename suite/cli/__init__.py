"""`mpsuite` / `python -m suite`: thin adapters from the command line to plain functions.

One module per command (asv's `commands/`): each holds its `main(args)`, which calls the stages'
plain functions and prints what they return, and beside it its `COMMAND`: its help and its arguments,
each declared once; `commands` assembles the parser from them, `arguments` holds how a command and an
argument are declared, the arguments several commands share and the argument types, `output` what
every command prints the same way. Here: dispatch, and how a command's failure becomes one line and
an exit status (0 ok, 1 a failed case or gate, 2 bad input).
"""

from __future__ import annotations

import os
import sys

from suite.cli import run
from suite.cli.commands import parser
from suite.core.errors import UserError
from suite.core.text import Printable
from suite.results import location


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    streams = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = Printable(sys.stdout), Printable(sys.stderr)
    try:
        return dispatch(args)
    finally:
        sys.stdout, sys.stderr = streams


def dispatch(args) -> int:
    """The command's exit status; what the user can fix is one line on stderr and status 2."""
    try:
        return args.func(args)
    except UserError as err:
        print(f"mpsuite: error: {err}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # output piped into `head` and closed early: not an error
        sys.stderr.close()
        return 0
    except OSError as err:  # an output folder that is not writable, a full disk: the user's to fix
        where = f"{err.filename}: " if err.filename else ""
        print(f"mpsuite: error: {where}{err.strerror or err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("mpsuite: interrupted", file=sys.stderr)
        return 130
    except Exception as err:
        if not location.is_storage_error(err):
            raise
        # results at a URL whose service cannot be used (no endpoint, no credentials): the user's to fix
        print(f"mpsuite: error: results storage: {type(err).__name__}: {err}", file=sys.stderr)
        return 2


def entry() -> int:
    """The process entry point (`mpsuite`, `python -m suite`): `main`, then an immediate exit where
    an interrupted run left a case running. Everything finished is already durable in the journal,
    and the abandoned call may take minutes more; interpreter shutdown would wait on it."""
    code = main()
    if run.abandoned:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    return code
