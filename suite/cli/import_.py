"""`import`: a pytest-benchmark JSON file stored as a run in the results folder."""

from __future__ import annotations

from suite.cli import arguments
from suite.cli.arguments import Command, arg
from suite.cli.output import info


ARGUMENTS = [
    *arguments.QUIET,
    arg("files", nargs="+", help="pytest-benchmark JSON files (--benchmark-json or --benchmark-save)"),
    arguments.RESULTS,
    arg("--scenario", help="scenario name to file it under (default: from the file, else pytest-benchmark)"),
    arg("--label", help="a label for the run, selectable with label=TEXT"),
]


def main(args) -> int:
    from suite.analysis.interchange import bench_json

    for file in args.files:
        path = bench_json.import_file(file, args.results, scenario=args.scenario, label=args.label)
        info(args, f"imported {file} as {path}")
    return 0


COMMAND = Command("import", main, "store a pytest-benchmark JSON file as a run in the results folder", ARGUMENTS)
