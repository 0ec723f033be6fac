"""`history`: each case's speedup and time over the stored runs of a scenario, change points marked."""

from __future__ import annotations

from suite.cli.output import info, print_json
from suite.results import location


def main(args) -> int:
    from suite.analysis import history
    from suite.report import history_page

    options = history.Options(min_effect=args.min_effect, confidence=args.confidence, min_runs=args.min_runs,
                              noise=args.noise)
    result = history.build(args.scenario, args.results, last=args.last, options=options)
    out = location.where(args.out or location.where(args.reports) / "history" / args.scenario)
    written = history_page.render(result, out)
    if args.json:
        print_json({**history_page.json_view(result), "report": str(out)})
    else:
        print(history_page.text_summary(result))
    info(args, f"history report in {out}/ ({', '.join(p.name for p in written)})")
    return 0
