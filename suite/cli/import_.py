"""`import`: a pytest-benchmark JSON file stored as a run in the results folder."""

from __future__ import annotations

from suite.cli.output import info


def main(args) -> int:
    from suite.analysis import bench_json

    for file in args.files:
        path = bench_json.import_file(file, args.results, scenario=args.scenario, label=args.label)
        info(args, f"imported {file} as {path}")
    return 0
