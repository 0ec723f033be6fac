"""`export`: runs as pytest-benchmark JSON (for `pytest-benchmark compare`)."""

from __future__ import annotations

from suite.cli import arguments
from suite.cli.arguments import Command, arg
from suite.cli.output import info


ARGUMENTS = [
    *arguments.QUIET,
    arg("selector", help="which runs (selector, as for compare; runs=all for several)"),
    arg("-o", "--out", required=True, help="a .json file (one run) or a folder (one file per run)"),
    arguments.RESULTS,
]


def main(args) -> int:
    from suite.analysis.interchange import bench_json
    from suite.results import select

    df = select.select(args.selector, args.results, role="export")
    for path in bench_json.export(df, args.out):
        info(args, f"wrote {path}")
    return 0


COMMAND = Command("export", main, "write runs as pytest-benchmark JSON (for `pytest-benchmark compare`)", ARGUMENTS)
