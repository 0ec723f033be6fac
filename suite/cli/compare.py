"""`compare`: two sets of runs case by case, with a gate (exit 1 on --fail-on)."""

from __future__ import annotations

import dataclasses
import json
import sys

from suite.cli import arguments
from suite.cli.arguments import Command, arg
from suite.cli.output import info, print_json
from suite.results import location


# compare's defaults, spelled out so that building the parser imports no pandas (tests/test_compare.py
# checks they are suite.analysis.regression.compare.DEFAULT_FAIL_ON and suite.analysis.regression.stats.DEFAULT_MIN_RUNS).
DEFAULT_FAIL_ON = ("regressed", "time:regressed", "new-failure", "new-skip")
DEFAULT_MIN_RUNS = 3

ARGUMENTS = [
    *arguments.STATISTICS, *arguments.JSON,
    arg("baseline", help="selector of the baseline runs (e.g. torch=2.13.0 or results/cpu,skip=1)"),
    arg("candidate", help="selector of the candidate runs (e.g. torch=2.14.1 or results/cpu)"),
    arg("--fail-on", default=",".join(DEFAULT_FAIL_ON),
        help="verdicts that make the exit status 1, comma-separated; the time: prefix gates on "
        f"absolute times (default: {','.join(DEFAULT_FAIL_ON)}; none to never fail). regressed, "
        "improved and ambiguous (a change straddling --min-effect, either way; never in the default) must also "
        "hold at the family-wise --confidence (Holm over the cases)"),
    arg("--min-runs", type=arguments.min_runs, default=DEFAULT_MIN_RUNS,
        help=f"runs per side a case needs for a regressed/improved verdict (default: {DEFAULT_MIN_RUNS}; "
        "2 is allowed but keeps its false alarms above the per-case level: docs/calibration.md); with "
        "fewer it is insufficient-runs"),
    arg("--noise", type=arguments.fraction, default=None,
        help="a known run-to-run sd of one run's value, relative (0.03 = 3%%), used as a floor under "
        "the estimate; with --min-runs 1 it lets single runs be compared (default: estimated only)"),
    arg("--any-scenario", action="store_true", help="join on case_id even across different scenarios"),
    arg("--out", help="report folder (default: reports/compare/<scenario>/<baseline>_vs_<candidate>)"),
]


def main(args) -> int:
    from suite.analysis.regression import compare
    from suite.report import compare_page

    options = compare.Options(min_effect=args.min_effect, confidence=args.confidence, min_runs=args.min_runs,
                              noise=args.noise, fail_on=compare.parse_fail_on(args.fail_on),
                              any_scenario=args.any_scenario)
    baseline, candidate = compare.load_sides(args.baseline, args.candidate, args.results)
    result = compare.compare(baseline, candidate, options)
    out = location.where(args.out) if args.out else compare_page.default_dir(result, args.reports)
    written = compare_page.render(result, out)
    failing = result.failing()
    if args.json:
        print_json(document(result, failing, out))
    else:
        print(compare_page.text_summary(result, failing))
    for warning in result.warnings:
        print(f"mpsuite: note: {warning}", file=sys.stderr)
    info(args, f"comparison report in {out}/ ({', '.join(p.name for p in written)})")
    if len(failing):
        print(f"mpsuite: {len(failing)} case(s) fail the gate --fail-on {','.join(options.fail_on)}", file=sys.stderr)
    return 1 if len(failing) else 0


def document(result, failing, out) -> dict:
    """`compare --json`: each side's selector, runs and summary, the gate, what drifted and what
    differs between the sides, and every case."""
    from suite.report import compare_page

    view = compare_page.build_view(result)
    cases = json.loads(result.cases.drop(columns=["effect"], errors="ignore").to_json(orient="records"))
    for case in cases:  # a record's parameters are a JSON object in its column: an object here too
        case["params"] = json.loads(case["params"]) if isinstance(case.get("params"), str) and case["params"] else {}
    return {**{role: {k: side[k] for k in ("selector", "runs", "summary")}
               for role, side in zip(("baseline", "candidate"), view["sides"])},
            "gate": view["gate"], "headline": compare_page.headline_lines(result), "reach": reach(result),
            "counts": result.counts(),
            "failing": list(failing["case_id"]), "report": str(out),
            "drift": [{**dataclasses.asdict(d), "sentence": d.sentence} for d in result.drift],
            "differences": result.environment.as_json()["differences"], "cases": cases}


def reach(result) -> list[dict]:
    """What each test's data can show (`compare.Reach`): the change a typical case is found with 80%
    power, per case and by the gate, and the sentence the report prints."""
    from suite.report import compare_page

    def number(x: float) -> float | None:
        return x if x == x and abs(x) != float("inf") else None

    return [{"test": key, "kind": r.kind or None, "runs": list(r.runs), "compared": r.compared, "tested": r.tested,
             "relative_sd": number(r.spread.relative) if r.spread.observable else None,
             "found_with_80_power": number(r.detectable), "gate_found_with_80_power": number(r.gate_detectable),
             "sentence": compare_page.reach_text(r, result)}
            for key, r in result.reach.items() if r.compared]


COMMAND = Command("compare", main, "compare two sets of runs case by case (exit 1 on --fail-on)", ARGUMENTS,
                  description="Compare two sets of runs case by case; each side is a selector.",
                  epilog=arguments.SELECTOR_HELP)
