"""The command line's vocabulary: how a command declares itself and its arguments (`Command`,
`Argument`, `arg`; each command's module declares its own, beside its `main`), the arguments several
commands share, and the argument types: each turns its text into a value or says, in one line, what
it expected (argparse prints it with the usage and exits 2). Nothing here imports pandas or torch:
`--help` answers at once."""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field
from typing import Callable

from suite.scenario.plan import MAX_CASES


@dataclass(frozen=True)
class Argument:
    """One argument, declared once: its flags (or a positional's name) and argparse's keywords for it.
    `resumed`: `run`'s printed resume command repeats it as it was given (`words`)."""

    flags: tuple[str, ...]
    options: dict = field(default_factory=dict)
    resumed: bool = True

    @property
    def positional(self) -> bool:
        return not self.flags[0].startswith("-")

    @property
    def flag(self) -> str:
        """The name a command line spells it by: its long flag (or a positional's name)."""
        return next((f for f in self.flags if f.startswith("--")), self.flags[0])

    @property
    def dest(self) -> str:
        """Its attribute on argparse's namespace (argparse's own rule)."""
        return self.options.get("dest") or self.flag.lstrip("-").replace("-", "_")

    def add_to(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument(*self.flags, **self.options)

    def words(self, args: argparse.Namespace) -> list[str]:
        """The command-line words that give it the value it has in `args`; none at its default."""
        value = getattr(args, self.dest)
        if self.positional:
            return [str(value)]
        action = self.options.get("action")
        if action == "store_true":
            return [self.flag] if value else []
        if action == "append":
            return [word for item in value or [] for word in (self.flag, str(item))]
        return [] if value == self.options.get("default") else [self.flag, str(value)]


def arg(*flags: str, resumed: bool = True, **options) -> Argument:
    """One argument: its flags (or name), argparse's keywords for it, and whether `run`'s resume repeats it."""
    return Argument(flags, options, resumed)


@dataclass(frozen=True)
class Command:
    """A command: its name, the plain function it runs (`main(args)` of its module), its one-line help
    and its arguments, in the order `--help` lists them."""

    name: str
    main: Callable[[argparse.Namespace], int]
    help: str
    arguments: list[Argument]
    description: str | None = None
    epilog: str | None = None  # shown as written (a table of selectors)

    def add_to(self, commands) -> None:
        """The command's parser among argparse's `commands` (`add_subparsers`)."""
        extra = {"formatter_class": argparse.RawDescriptionHelpFormatter} if self.epilog else {}
        one = commands.add_parser(self.name, help=self.help, description=self.description, epilog=self.epilog, **extra)
        for argument in self.arguments:
            argument.add_to(one)
        one.set_defaults(func=self.main)


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


def at_least_one(noun: str = ""):
    """The argument type of a whole number, at least 1, of `noun` ("cases"; "" for a bare number)."""
    what = f"a whole number of {noun}" if noun else "a whole number"

    def parse(text: str) -> int:
        if not text.isdigit() or int(text) < 1:
            raise argparse.ArgumentTypeError(f"expected {what}, at least 1, got {text!r}")
        return int(text)

    parse.__name__ = noun or "whole"  # argparse names the type in its "invalid X value"
    return parse


count = at_least_one("cases")  # --max-cases
whole = at_least_one()  # advise's --gpus, --tp, --ep, --seq, --batch


def min_runs(text: str) -> int:
    """A number of runs, at least 1 (--min-runs, --new-runs)."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number of runs >= 1, got {text!r}")
    return value




def nats(text: str) -> float:
    """A loss gap in nats, finite and not negative (advise's --loss-budget)."""
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not 0 <= value < float("inf"):
        raise argparse.ArgumentTypeError(f"expected a loss gap in nats, at least 0 (e.g. 0.02), got {text!r}")
    return value


def fraction(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not 0 <= value < 1:
        raise argparse.ArgumentTypeError(f"expected a fraction in [0, 1) (0.05 = 5%), got {text!r}")
    return value


# Arguments several commands share, each declared here once; a command lists them among its own.
URL_HELP = "; or a URL fsspec reaches, e.g. s3://bucket/prefix (pip install -e .[remote]; docs/results.md)"

SELECTOR_HELP = """selectors: comma-joined terms, all of which must hold
  results/cpu, path/run.parquet     runs in that folder or file (default folder: --results)
  s3://bucket/prefix/cpu            the same at a URL
  20261129T143751Z-04f860           a run id, or a unique prefix of one (also run=PREFIX)
  scenario=cpu                      runs of that scenario
  torch=2.13.0 torchao=0.18 te=2.9 cuda=12.8 python=3.11
                                    a version, or a prefix ending at . or + (2.13 matches 2.13.0+cpu)
  device=cuda gpu=H100 host=NAME label=TEXT
                                    device type; text in the device name; host; an import's label
  git=abc123 code=9c93              prefix of the git commit / of the suite's code hash
  runs=N, runs=all                  pool the N newest matching runs (default 1: the newest)
  skip=N                            leave out the N newest matching runs first

examples:
  python -m suite compare torch=2.13.0,runs=3 torch=2.14.1,runs=3
  python -m suite compare results/cpu,skip=1 results/cpu --fail-on none
"""

QUIET = [arg("--quiet", action="store_true", help="no progress or 'written to' lines on stderr "
             "(errors and warnings still)")]
# A resumed run's printed command is for a person to run: it prints the table, not JSON.
JSON = [arg("--json", action="store_true", resumed=False,
            help="print one JSON document on stdout (shape: docs/cli.md)")]
SCENARIOS = [arg("--scenarios", metavar="DIR", help="folder of scenario files (default: $MPSUITE_SCENARIOS, "
                 "else ./scenarios, else the scenarios shipped with mpsuite)")]
SCENARIO_NAME = arg("scenario", help="scenario name (from --scenarios) or path to a .toml file")
# The cases of a scenario (`run`, `plan`). A resumed shard takes its shard from its journal.
SCENARIO = [
    *SCENARIOS,
    SCENARIO_NAME,
    arg("--max-cases", metavar="N", type=count,
        help=f"refuse a scenario of more cases than this (default: {MAX_CASES:,})"),
    arg("--only", metavar="TERMS", action="append",
        help="only the cases matching TERMS: comma-joined key=pattern (workload, precision, m, k, n, "
        "shape such as 2048x*, or a parameter; shell wildcards) or words of the case's label; "
        "repeat for 'or' (e.g. --only precision=bf16,shape=2048x* --only workload=linear)"),
    arg("--shard", metavar="K/N", resumed=False,
        help="only shard K (from 0) of N: a deterministic, cost-balanced slice, the same on every "
        "machine; auto: a SLURM job array's task; auto/N: a Kubernetes Indexed Job's "
        "JOB_COMPLETION_INDEX (docs/fleet.md)"),
]
RESULTS = arg("--results", default="results", help=f"results folder (default: results){URL_HELP}")
RESULTS_SELECTED = arg("--results", default="results",
                       help=f"results folder selectors look in (default: results){URL_HELP}")
REPORTS = arg("--reports", default="reports", help=f"reports folder (default: reports){URL_HELP}")
# What `compare` and `history` judge by.
STATISTICS = [
    *QUIET,
    RESULTS_SELECTED,
    REPORTS,
    arg("--min-effect", type=fraction, default=0.05,
        help="smallest change worth a verdict, as a fraction (default: 0.05 = 5%%)"),
    arg("--confidence", type=fraction, default=0.99,
        help="interval confidence per case; compare's gate holds it family-wise (default: 0.99)"),
]
