"""`history`: each case's speedup and time over the stored runs of a scenario, change points marked;
with --fail-on, a gate on what the newest run(s) changed (exit 1; `suite.analysis.regression.history_gate`)."""

from __future__ import annotations

import sys

from suite.cli import arguments
from suite.cli.arguments import Command, arg
from suite.cli.output import info, print_json
from suite.results import location


# history's defaults, spelled out so that building the parser imports no pandas (tests/test_history.py
# checks the first is suite.analysis.regression.history.Options().min_runs, tests/test_nightly_workflow.py the
# second the nightly's gate, suite.analysis.regression.history_gate.NIGHTLY).
DEFAULT_MIN_RUNS = 3
DEFAULT_NIGHTLY_FAIL_ON = ("regressed", "baseline-changed", "time:regressed", "new-failure")

ARGUMENTS = [
    *arguments.STATISTICS, *arguments.JSON,
    arg("scenario", help="scenario name (its runs are in <results>/<scenario>/)"),
    arg("--last", type=int, help="only the newest N runs"),
    arg("--min-runs", type=arguments.min_runs, default=DEFAULT_MIN_RUNS,
        help=f"runs a change point needs on each side (default: {DEFAULT_MIN_RUNS})"),
    arg("--noise", type=arguments.fraction, default=None,
        help="a known run-to-run sd of one run's value, relative (0.03 = 3%%), a floor under the estimate"),
    arg("--out", help="report folder (default: reports/history/<scenario>)"),
    arg("--fail-on", default="none",
        help="exit 1 when the newest run(s) bring a new finding of these verdicts, comma-separated: regressed, "
        "improved, baseline-changed, time:regressed, time:improved (change points), new-failure, new-skip "
        f"(a nightly: {','.join(DEFAULT_NIGHTLY_FAIL_ON)}); a change point an earlier night already "
        "reported never fails again (docs/comparing.md) (default: none)"),
    arg("--new-runs", type=arguments.min_runs, default=1,
        help="with --fail-on: how many of the newest runs are new (default: 1, a nightly's one run)"),
]


def main(args) -> int:
    from suite.analysis.regression import history, history_gate
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


COMMAND = Command("history", main, "each case's speedup and time over the stored runs, change points marked",
                  ARGUMENTS)
