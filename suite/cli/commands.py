"""The command line, assembled: each command's module declares the command and its arguments beside
the plain function it runs (its `COMMAND`, `suite.cli.arguments.Command`); here they are listed in the
order `--help` gives them and built into argparse's parser. Building it imports no pandas and no
torch: `--help` answers at once."""

from __future__ import annotations

import argparse
import sys

from suite.cli import advise, compare, env, env_diff, export, history, import_, list as list_, plan, predict, recommend
from suite.cli import report, repro, run
from suite.scenario import registry

# The commands, in the order `--help` lists them.
COMMANDS = [command.COMMAND for command in (run, report, list_, predict, advise, env, plan, recommend, compare, history,
                                            env_diff, repro, export, import_)]

DESCRIPTION = ("Mixed-precision benchmarks: speed and accuracy side by side. Exit status: 0 ok, 1 a case failed "
               "(run) or matched --fail-on (compare), 2 bad input (one line says what). docs/cli.md has every command.")


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="mpsuite", description=DESCRIPTION)
    p.add_argument("--version", action="version", version=version())
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for command in COMMANDS:
        command.add_to(sub)
    return p


def version() -> str:
    """`mpsuite X (torch Y, <each declared library> Z, python W)`, from installed metadata (nothing
    imported)."""
    from importlib import metadata

    def have(name):
        try:
            return metadata.version(name)
        except metadata.PackageNotFoundError:
            return None

    extras = [f"torch {v}"] if (v := have("torch")) else []
    extras += [f"{library.distributions[0]} {v}" for library in registry.libraries() if (v := library.version())]
    return f"mpsuite {have('mpsuite') or 'unknown'} ({', '.join(extras + [f'python {sys.version.split()[0]}'])})"
