"""`recommend`: which precision per case within an accuracy budget, from stored results."""

from __future__ import annotations

import json

from suite.cli import arguments
from suite.cli.arguments import Command, arg
from suite.cli.output import missing, print_json, refuse_no_records, table
from suite.scenario import registry

COLUMNS = [("workload", "workload"), ("setting", "case"), ("baseline", "baseline"), ("pick", "pick"),
           ("speedup", "speedup"), ("error", "its error"), ("rejected", "over budget"),
           ("not_timed", "within budget, speed not measured here")]


ARGUMENTS = [
    *arguments.QUIET, *arguments.JSON,
    arg("results", nargs="+", help="results files or folders (e.g. results/h100_fp8)"),
    # a bound per accuracy metric declared (suite.core.budgets.Metric: --max-rel-err, --min-sqnr-db, a folder's own)
    *(arg(f"--{metric.bound.replace('_', '-')}", type=float, metavar=metric.metavar, help=metric.help)
      for metric in registry.budget_metrics()),
    arg("--all-runs", action="store_true", help="every run found, not only the newest per scenario"),
]


def main(args) -> int:
    from suite.analysis.frame import derived
    from suite.analysis.outcome import answers
    from suite.results import store

    bounds = {metric.bound: getattr(args, metric.bound, None) for metric in registry.budget_metrics()}
    # no bound given: the report's looser budget (rel. error 1e-2; each metric's own `loose`)
    budget = answers.Budget(**bounds) if any(v is not None for v in bounds.values()) else answers.loose_budget()
    df = store.read(args.results)
    refuse_no_records(df, args.results)
    if not args.all_runs:
        df = derived.latest_runs(df)
    picks = answers.recommend(df, budget)
    if args.json:
        print_json({"budget": budget.bounds(),
                    "picks": json.loads(picks.to_json(orient="records"))})
        return 0
    table([cells(r) for r in picks.to_dict("records")], COLUMNS, f"Which precision, with {budget.describe()}")
    return 0


def cells(row: dict) -> dict:
    """A pick as the table shows it: the speedup with its 'x', lists joined, why there is no pick."""
    pick = row["pick"] or (row["note"] or "none within budget")
    if row["pick"] and row["decided_on"] == "accuracy":
        pick += " (the baseline: no other recipe within budget)" if row["pick"] == row["baseline"] else \
            " (numerics only: most accurate)"
    return {**row, "pick": pick, "speedup": "" if missing(row["speedup"]) else f"{row['speedup']:.3g}x",
            "error": error_text(row), "not_timed": ", ".join(row["not_timed"]),
            "rejected": "; ".join(f"{r['precision']} ({r['reason']})" for r in row["rejected"])}


def error_text(row: dict) -> str:
    """'rel. error 1.2e-03, SQNR 52.1 dB': the pick's errors that were measured (`Metric.shown`)."""
    return ", ".join(metric.shown.format(v=row[metric.column], reference=row.get(metric.reference or ""))
                     for metric in registry.budget_metrics() if metric.shown and not missing(row.get(metric.column)))


COMMAND = Command("recommend", main, "the fastest precision per case within an accuracy budget, from stored results",
                  ARGUMENTS, description="Per case (workload x shape x parameters), the fastest measured precision "
                  "whose accuracy meets every bound given, with its speedup over the in-run baseline. Emulated "
                  "precisions (FP8 on a CPU) have no speed to rank and are listed apart. Example: "
                  "python -m suite recommend results/h100_fp8 --max-rel-err 1e-2")
