"""`recommend`: which precision per case within an accuracy budget, from stored results."""

from __future__ import annotations

import json

from suite.cli import arguments
from suite.cli.arguments import Command, arg
from suite.cli.output import missing, print_json, refuse_no_records, table

COLUMNS = [("workload", "workload"), ("setting", "case"), ("baseline", "baseline"), ("pick", "pick"),
           ("speedup", "speedup"), ("error", "its error"), ("rejected", "over budget"),
           ("not_timed", "within budget, speed not measured here")]


ARGUMENTS = [
    *arguments.QUIET, *arguments.JSON,
    arg("results", nargs="+", help="results files or folders (e.g. results/h100_fp8)"),
    arg("--max-rel-err", type=float, metavar="X", help="relative error against the reference at most X"),
    arg("--min-sqnr-db", type=float, metavar="DB", help="SQNR at least DB decibels"),
    arg("--max-loss-delta", type=float, metavar="NATS", help="training steps: |final loss - the fp32 twin's| at most NATS"),
    arg("--all-runs", action="store_true", help="every run found, not only the newest per scenario"),
]


def main(args) -> int:
    from suite.analysis.frame import derived
    from suite.analysis.outcome import answers
    from suite.results import store

    bounds = {"max_rel_err": args.max_rel_err, "min_sqnr_db": args.min_sqnr_db, "max_loss_delta": args.max_loss_delta}
    # no bound given: the report's (rel. error 1e-2; training steps within the loss margin)
    budget = answers.Budget(**bounds) if any(v is not None for v in bounds.values()) else answers.LOOSE
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
    """'rel. error 1.2e-03, SQNR 52.1 dB': the pick's errors that were measured."""
    parts = [f"rel. error {row['rel_err']:.2e}" if not missing(row.get("rel_err")) else "",
             f"SQNR {row['sqnr_db']:.1f} dB" if not missing(row.get("sqnr_db")) else "",
             f"loss {row['loss_gap_nats']:+.3g} nats vs {row['loss_reference']}"
             if not missing(row.get("loss_gap_nats")) else ""]
    return ", ".join(p for p in parts if p)


COMMAND = Command("recommend", main, "the fastest precision per case within an accuracy budget, from stored results",
                  ARGUMENTS, description="Per case (workload x shape x parameters), the fastest measured precision "
                  "whose accuracy meets every bound given, with its speedup over the in-run baseline. Emulated "
                  "precisions (FP8 on a CPU) have no speed to rank and are listed apart. Example: "
                  "python -m suite recommend results/h100_fp8 --max-rel-err 1e-2")
