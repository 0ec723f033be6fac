"""`env-diff`: what differs between two sets of runs (versions, device, clocks, code, kernels)."""

from __future__ import annotations

from suite.cli import arguments
from suite.cli.arguments import Command, arg
from suite.cli.output import print_json
from suite.core.errors import UserError


ARGUMENTS = [
    *arguments.QUIET, *arguments.JSON,
    arg("a", help="selector of the first runs (e.g. torch=2.13.0,runs=3)"),
    arg("b", help="selector of the second runs (e.g. torch=2.14.1,runs=3)"),
    arguments.RESULTS_SELECTED,
]


def main(args) -> int:
    from suite.analysis.frame import derived
    from suite.analysis.regression import envdiff
    from suite.results import select

    sides = [select.select(text, args.results, role=role) for text, role in ((args.a, "A"), (args.b, "B"))]
    shared = set(sides[0]["run_id"]) & set(sides[1]["run_id"])
    if shared:
        raise UserError(f"A and B both select run(s) {', '.join(sorted(shared))}; a run has no difference with itself")
    both = sides[0].drop_duplicates("case_id")
    labels = dict(zip(both["case_id"], both["workload"] + " " + both["precision"] + " " + derived.shape_labels(both)))
    result = envdiff.diff(*sides, labels)
    runs = [sorted(side["run_id"].unique()) for side in sides]
    if args.json:
        print_json({"a": {"selector": args.a, "runs": runs[0]}, "b": {"selector": args.b, "runs": runs[1]},
                    **result.as_json(), "lines": result.lines()})
        return 0
    print(f"A {args.a}: {', '.join(runs[0])}")
    print(f"B {args.b}: {', '.join(runs[1])}")
    for line in result.lines() or ["nothing recorded differs"]:
        print(f"  {line}")
    return 0


COMMAND = Command("env-diff", main, "what differs between two sets of runs: versions, device, clocks, code, kernels",
                  ARGUMENTS, description="What differs between the records of two run selectors: every environment "
                  "column (torch, torchao, Transformer Engine, CUDA, driver, Python, device, clocks and power "
                  "limit, code hash, threads, ...) over the runs, and per case the kernel that ran, where "
                  "recorded.", epilog=arguments.SELECTOR_HELP)
