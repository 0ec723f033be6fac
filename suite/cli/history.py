"""`history`: each case's speedup over the stored runs of a scenario, change points marked."""

from __future__ import annotations

from suite.cli.output import info
from suite.results import location


def main(args) -> int:
    from suite.analysis import history
    from suite.report import history_page

    series = history.build(args.scenario, args.results, last=args.last, min_effect=args.min_effect,
                           confidence=args.confidence)
    out = location.where(args.out or location.where(args.reports) / "history" / args.scenario)
    written = history_page.render(series, out)
    print(history_page.text_summary(series))
    info(args, f"history report in {out}/ ({', '.join(p.name for p in written)})")
    return 0
