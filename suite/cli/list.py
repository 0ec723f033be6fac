"""`list`: the scenarios of a folder and their case counts."""

from __future__ import annotations

import sys

from suite.cli import arguments
from suite.cli.arguments import Command
from suite.cli.output import print_json
from suite.core.errors import UserError


def main(args) -> int:
    from suite.scenario import spec

    problems: list[str] = []
    folder = spec.find_folder(args.scenarios)
    found = spec.load_dir(folder, problems)
    listed = scenarios(found)
    if args.json:
        print_json({"folder": str(folder), "scenarios": listed, "problems": problems})
    for row in [] if args.json else listed:
        cases = f"{row['cases']:>5}" if row["cases"] is not None else f"<= {row['max_cases']:,}"
        print(f"{row['name']:<16} {cases} cases  {row['path']}  {row['description']}")
    for problem in problems:
        print(f"mpsuite: warning: left out {problem}", file=sys.stderr)
    if problems:
        raise UserError(f"{len(problems)} scenario file(s) in {folder} do not load (listed above); "
                        "the others are listed")
    if not found:
        raise UserError(f"no scenario files (*.toml) in {folder.resolve()}")
    return 0


def scenarios(found: dict) -> list[dict]:
    """Each loaded scenario's name, case count (None past `plan.MAX_CASES`: only its bound), path and
    description."""
    from suite.scenario import plan

    listed = []
    for name, (path, scenario) in found.items():
        bound = plan.count(scenario)
        listed.append({"name": name, "cases": len(plan.expand(scenario)) if bound <= plan.MAX_CASES else None,
                       "max_cases": bound, "path": str(path), "description": scenario.description})
    return listed


COMMAND = Command("list", main, "list the scenarios and their case counts",
                  [*arguments.SCENARIOS, *arguments.QUIET, *arguments.JSON])
