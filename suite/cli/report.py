"""`report`: render a report from stored results."""

from __future__ import annotations

import os
import shlex
from pathlib import Path

from suite.cli import arguments
from suite.cli.arguments import Command, arg
from suite.cli.output import info, refuse_no_records
from suite.core.errors import UserError
from suite.results import location


ARGUMENTS = [
    *arguments.QUIET,
    arg("results", nargs="+", help=f"results files or folders (e.g. results/cpu){arguments.URL_HELP}"),
    arg("--out", help="output folder (default: reports/<scenario>)"),
    arg("--all-runs", action="store_true",
        help="every run found, not only the newest per scenario and device (records of several "
        "devices make a fleet report: each device's, and their speedups side by side)"),
]


def main(args) -> int:
    from suite import report
    from suite.analysis.frame import derived
    from suite.analysis.outcome import fleet
    from suite.results import store

    # an interrupted run renders as a partial report; a lean read (store.read_file) for a big one
    df = store.read(args.results, unfinished=True, lean=True)
    refuse_no_records(df, args.results)
    if not args.all_runs:
        df = fleet.latest_runs(df)  # per device: the fleet's newest run of each card
    scenarios = sorted(df["scenario"].unique())
    root = Path("reports") if args.out is None else location.where(args.out)
    if len(scenarios) > 1:
        _check_front_folder(args.out, root, len(scenarios))
    for name in scenarios:
        out = root / name if args.out is None or len(scenarios) > 1 else root
        written = report.render(derived.rows(df, df["scenario"] == name), out)
        info(args, f"report in {out}/ ({', '.join(p.name for p in written)})")
    if len(scenarios) > 1 and isinstance(root, Path):  # a folder of scenarios opens on one page
        page = report.front_page(df, root)
        if page is not None:
            info(args, f"front page: {page}")
    return 0


def _check_front_folder(given: str | None, root, count: int) -> None:
    """Several scenarios go into a folder each under `root`, beside a front page: never into the
    current folder (`--out .` or `--out ''`), which would be strewn with them."""
    if isinstance(root, Path) and Path(os.path.realpath(root)) == Path.cwd().resolve():
        raise UserError(f"--out {shlex.quote(given or '')}: is the current folder, and a report of {count} scenarios "
                        "writes a folder for each and an index.html into it: give it a folder of its own, "
                        "e.g. --out reports")


COMMAND = Command("report", main, "render a report from stored results", ARGUMENTS)
