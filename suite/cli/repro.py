"""`repro`: how to reproduce a stored run, from its own records (`suite.analysis.regression.repro`); with --run,
re-run it here into a new run id and compare the two (compare's report rendered)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from suite.cli import arguments
from suite.cli.arguments import Command, arg
from suite.cli.output import info, print_json
from suite.core.errors import UserError

# The checkout the suite runs from: where `git show <commit>:scenarios/<name>.toml` looks.
CHECKOUT = Path(__file__).resolve().parents[2]


ARGUMENTS = [
    *arguments.QUIET, *arguments.JSON,
    arg("run_selector", metavar="RUN", help="the run: a run id, or a selector picking one (e.g. results/reference/cpu_amx)"),
    arg("--results", default=None, help="results folder the selector looks in and the re-run is stored in "
        f"(default: the folder the run lies in, else results){arguments.URL_HELP}"),
    arguments.REPORTS,
    arg("--run", action="store_true",
        help="re-run it here into a new run id, from the scenario the run stored, and compare the two "
        "(the comparison report in reports/compare/)"),
    arg("--noise", type=arguments.fraction, default=None,
        help="with --run: a known run-to-run sd of one run's value (0.03 = 3%%), so one run against one gets "
        "verdicts (default: none; the comparison shows each change and what differs)"),
]


def main(args) -> int:
    from suite.analysis.regression import repro
    from suite.results import select

    records = select.select(args.run_selector, args.results or "results", role="run")
    scenario = str(records["scenario"].iloc[0])
    root = results_root(args.run_selector, args.results, scenario)
    rerun = ["python", "-m", "suite", "repro", str(records["run_id"].iloc[0]), "--results", str(root), "--run"]
    recipe = repro.recipe(records, rerun, file_at_commit)
    if args.run:
        check_rerunnable(recipe)  # before anything is printed: a refusal is its one line
    if not args.json:
        for name, expected in recipe.rejected.items():  # the JSON document lists them
            print(f"mpsuite: run {recipe.run_id}: {name} is not {expected}: left out of every line", file=sys.stderr)
    if not args.run:
        if args.json:
            print_json(recipe.as_json())
        else:
            print("\n".join(recipe.lines()))
        return 0
    if not args.json:
        print("\n".join(recipe.lines()))
    return _rerun(args, records, recipe, root)


def results_root(selector: str, results: str | None, scenario: str):
    """The results folder the selected run lies in (a path in the selector: its folder above
    `<scenario>/`), else --results, else ./results: where the re-run is stored beside it."""
    from suite.results import location, select

    if results is not None:
        return location.where(results)
    paths = select.parse(selector).paths
    if not paths:
        return location.where("results")
    path = location.where(paths[0])
    if str(path).endswith(".parquet"):
        return path.parent.parent
    if path.name == scenario and not (path / scenario).is_dir():
        return path.parent
    return path


def file_at_commit(sha: str, path: str) -> str | None:
    """A file's text as commit `sha` of the suite's checkout had it; None where git, the commit or
    the file is missing, or `sha` is no commit's hex digits (it comes from a results file: git must
    never read it as an option)."""
    from suite.analysis.regression import repro

    if not repro.GIT_SHA.fullmatch(sha):
        return None
    try:
        done = subprocess.run(["git", "-C", str(CHECKOUT), "show", "--end-of-options", f"{sha}:{path}"],
                              capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout if done.returncode == 0 else None


def check_environment(facts: dict, command: str) -> None:
    """The ISA overrides and OMP_NUM_THREADS act when torch loads, so a re-run must start under the
    run's own: a UserError naming the command line that does."""
    from suite.analysis.regression import repro
    from suite.measure import env

    then = repro.environment(facts)
    now = {name: os.environ[name] for name in (*env.ISA_ENV, "OMP_NUM_THREADS") if os.environ.get(name)}
    if then != now:
        shown = " ".join(f"{k}={v}" for k, v in then.items()) or "none"
        here = " ".join(f"{k}={v}" for k, v in now.items()) or "none"
        raise UserError(f"run {facts['run_id']} was measured with the environment overrides {shown}, this process "
                        f"has {here}; they act when torch loads, so start it under the run's: {command}")


def check_rerunnable(recipe) -> None:
    """A UserError where the run cannot be re-run as it was: its scenario is unknown or its stored
    spec fails the scenario schema, a field the re-run acts on failed its check, or this process is
    not under the run's environment overrides."""
    from suite.analysis.regression import repro

    if recipe.asked.spec is None:
        raise UserError(f"cannot re-run {recipe.run_id}: {recipe.asked.source}")
    for name in repro.RERUN_FIELDS:
        if name in recipe.rejected:
            raise UserError(f"cannot re-run {recipe.run_id}: its {name} is not {recipe.rejected[name]}")
    check_environment(recipe.facts, recipe.rerun.line())


def _rerun(args, records, recipe, root) -> int:
    from suite import pipeline
    from suite.analysis.regression import compare
    from suite.cli.compare import document
    from suite.report import compare_page

    asked, facts = recipe.asked.spec, recipe.facts
    threads = int(facts["threads_setting"]) if facts.get("threads_setting") else None
    request = pipeline.RunRequest(asked.scenario, root, None, asked.device, not args.quiet, threads=threads,
                                  only=asked.only)
    result = pipeline.run(request)
    base = compare.Side("baseline", recipe.run_id, records)
    cand = compare.Side("candidate", result.run_id, result.records)
    cmp = compare.compare(base, cand, compare.Options(min_runs=1, noise=args.noise, fail_on=()))
    out = compare_page.default_dir(cmp, args.reports)
    written = compare_page.render(cmp, out)
    if args.json:
        print_json({**recipe.as_json(), "rerun_id": result.run_id, "rerun_results": str(result.path),
                    "comparison": document(cmp, cmp.failing(), out)})
    else:
        print(compare_page.text_summary(cmp, cmp.failing()))
    info(args, f"re-run {result.run_id} stored in {result.path}; comparison report in {out}/ "
               f"({', '.join(p.name for p in written)})")
    if result.failed:
        print(f"mpsuite: {result.failed} case(s) of the re-run failed; see the 'reason' column", file=sys.stderr)
    return 1 if result.failed else 0


COMMAND = Command("repro", main, "how to reproduce a stored run: pinned installs and its command (--run: re-run "
                  "and compare)", ARGUMENTS,
                  description="From a run's own records: the install lines (every recorded version pinned; torch's "
                  "build from its version's local label, e.g. +cpu, +cu130), the suite's commit, the command that "
                  "re-runs it, and what the records do not hold. --run re-runs it here into a new run id and "
                  "compares the two.", epilog=arguments.SELECTOR_HELP)
