"""The command line's argument types: each turns its text into a value or says, in one line, what
it expected (argparse prints it with the usage and exits 2)."""

from __future__ import annotations

import argparse


def run_id(text: str) -> str:
    from suite.core.errors import UserError
    from suite.results import store

    try:
        return store.check_run_id(text)
    except UserError as err:
        raise argparse.ArgumentTypeError(str(err)) from None


def seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not 0 < value < float("inf"):
        raise argparse.ArgumentTypeError(f"expected a positive number of seconds, got {text!r}")
    return value


def threads(text: str) -> int:
    if not text.isdigit() or not 1 <= int(text) <= 4096:
        raise argparse.ArgumentTypeError(f"expected a whole number of threads from 1 to 4096, got {text!r}")
    return int(text)


def count(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number of cases, at least 1, got {text!r}")
    return int(text)


def min_runs(text: str) -> int:
    """A number of runs, at least 1 (--min-runs, --new-runs)."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number of runs >= 1, got {text!r}")
    return value


def fraction(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not 0 <= value < 1:
        raise argparse.ArgumentTypeError(f"expected a fraction in [0, 1) (0.05 = 5%), got {text!r}")
    return value
