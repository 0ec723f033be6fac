"""`history`: each case's speedup and time over the stored runs of a scenario, change points marked;
with --fail-on, a gate on what the newest run(s) changed (exit 1; `suite.analysis.history_gate`)."""

from __future__ import annotations

import sys

from suite.cli.output import info, print_json
from suite.results import location


def main(args) -> int:
    from suite.analysis import history, history_gate
    from suite.report import history_page

    options = history.Options(min_effect=args.min_effect, confidence=args.confidence, min_runs=args.min_runs,
                              noise=args.noise)
    fail_on = history_gate.parse_fail_on(args.fail_on)
    history.check_last(args.last)
    records = history.load(args.scenario, args.results)
    result = history.of_window(records, args.scenario, args.last, options=options)
    gate = history_gate.check(records, result, args.scenario, fail_on, args.new_runs, args.last) if fail_on else None
    out = location.where(args.out or location.where(args.reports) / "history" / args.scenario)
    written = history_page.render(result, out)
    if args.json:
        print_json({**history_page.json_view(result), "report": str(out), "gate": _gate_json(gate)})
    else:
        print(history_page.text_summary(result))
        for line in gate.lines() if gate else ():
            print(line)
    info(args, f"history report in {out}/ ({', '.join(p.name for p in written)})")
    if gate and gate.failing:
        print(f"mpsuite: {len(gate.failing)} new finding(s) fail the gate --fail-on {','.join(fail_on)}",
              file=sys.stderr)
        return 1
    return 0


def _gate_json(gate) -> dict | None:
    if gate is None:
        return None
    import dataclasses

    return {"fail_on": list(gate.fail_on), "new_runs": gate.new_runs, "earlier": gate.earlier,
            "failing": [dataclasses.asdict(f) for f in gate.failing], "passes": not gate.failing}
