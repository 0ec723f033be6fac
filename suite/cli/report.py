"""`report`: render a report from stored results."""

from __future__ import annotations

from pathlib import Path

from suite.cli.output import info
from suite.results import location


def main(args) -> int:
    from suite import report
    from suite.analysis import derived, fleet
    from suite.results import store

    # an interrupted run renders as a partial report; a lean read (store.read_file) for a big one
    df = store.read(args.results, unfinished=True, lean=True)
    if not args.all_runs:
        df = fleet.latest_runs(df)  # per device: the fleet's newest run of each card
    scenarios = sorted(df["scenario"].unique())
    root = Path("reports") if args.out is None else location.where(args.out)
    for name in scenarios:
        out = root / name if args.out is None or len(scenarios) > 1 else root
        written = report.render(derived.rows(df, df["scenario"] == name), out)
        info(args, f"report in {out}/ ({', '.join(p.name for p in written)})")
    if len(scenarios) > 1 and isinstance(root, Path):  # a folder of scenarios opens on one page
        page = report.front_page(df, root)
        if page is not None:
            info(args, f"front page: {page}")
    return 0
