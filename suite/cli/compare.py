"""`compare`: two sets of runs case by case, with a gate (exit 1 on --fail-on)."""

from __future__ import annotations

import dataclasses
import json
import sys

from suite.cli.output import info, print_json
from suite.results import location


def main(args) -> int:
    from suite.analysis import compare
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
            "gate": view["gate"], "headline": compare_page.headline_lines(result), "counts": result.counts(),
            "failing": list(failing["case_id"]), "report": str(out),
            "drift": [{**dataclasses.asdict(d), "sentence": d.sentence} for d in result.drift],
            "differences": result.environment.as_json()["differences"], "cases": cases}
