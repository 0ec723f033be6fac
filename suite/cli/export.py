"""`export`: runs as pytest-benchmark JSON (for `pytest-benchmark compare`)."""

from __future__ import annotations

from suite.cli.output import info


def main(args) -> int:
    from suite.analysis import bench_json
    from suite.results import select

    df = select.select(args.selector, args.results, role="export")
    for path in bench_json.export(df, args.out):
        info(args, f"wrote {path}")
    return 0
