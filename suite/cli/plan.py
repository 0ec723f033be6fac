"""`plan`: a scenario's cases without running them, or how they split over shards."""

from __future__ import annotations

import sys
from collections import Counter

from suite.cli import arguments
from suite.cli.arguments import Command, arg
from suite.cli.output import print_json


ARGUMENTS = [
    *arguments.SCENARIO, *arguments.QUIET, *arguments.JSON,
    arg("--shards", metavar="N", type=arguments.at_least_one("shards"),
        help="print how the cases split over N shards (cases and estimated seconds per shard)"),
]


def main(args) -> int:
    from suite.scenario import plan, spec

    scenario = spec.resolve(args.scenario, args.scenarios)
    plan.check_size(scenario, args.max_cases)
    cases = plan.only(plan.expand(scenario), args.only)
    if args.shards:
        return _print_shards(cases, args.shards, args.json)
    if args.shard:
        from suite.fleet import shard

        cases = shard.select(cases, shard.parse(args.shard))
    if args.json:
        print_json({"scenario": scenario.name, "cases": [
            {"case_id": c.case_id, "workload": c.workload, "precision": c.precision, "baseline": c.baseline,
             "m": c.m, "k": c.k, "n": c.n, "params": c.params, "label": c.label} for c in cases]})
        return 0
    # one write: a million print calls (each filtered for control characters) cost seconds
    sys.stdout.write("".join([f"{case.case_id}  {case.label}\n" for case in cases]))
    return 0


def _print_shards(cases, count: int, as_json: bool) -> int:
    """`plan --shards N`: how the cases split over N shards, with each shard's estimated cost."""
    from suite.fleet import shard

    per_shard, loads = Counter(shard.assign(cases, count)), shard.loads(cases, count)
    rows = [{"shard": k, "cases": per_shard[k], "estimated_s": round(loads[k], 1)} for k in range(count)]
    if as_json:
        print_json({"shards": rows})
    else:
        for row in rows:
            print(f"shard {row['shard']}/{count}: {row['cases']:>5} cases, ~{row['estimated_s']:g} s (prior)")
    return 0


COMMAND = Command("plan", main, "print a scenario's cases without running them", ARGUMENTS)
