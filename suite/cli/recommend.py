"""`recommend`: the fastest precision per case within an accuracy budget, from stored results."""

from __future__ import annotations

import json

from suite.cli.output import missing, print_json, table

COLUMNS = [("workload", "workload"), ("setting", "case"), ("baseline", "baseline"), ("pick", "pick"),
           ("speedup", "speedup"), ("error", "its error"), ("rejected", "faster, but over budget"),
           ("not_timed", "within budget, not timed here")]


def main(args) -> int:
    from suite.analysis import answers, derived
    from suite.results import store

    budget = answers.Budget(max_rel_err=args.max_rel_err, min_sqnr_db=args.min_sqnr_db,
                            max_loss_delta=args.max_loss_delta)
    df = store.read(args.results)
    if not args.all_runs:
        df = derived.latest_runs(df)
    picks = answers.recommend(df, budget)
    if args.json:
        print_json({"budget": {k: v for k, v in vars(budget).items() if v is not None},
                    "picks": json.loads(picks.to_json(orient="records"))})
        return 0
    rows = [{**r, "pick": r["pick"] or "none within budget",
             "speedup": "" if missing(r["speedup"]) else f"{r['speedup']:.3g}x",
             "error": error_text(r)} for r in picks.to_dict("records")]
    table(rows, COLUMNS, f"Fastest precision with {budget.describe()}")
    return 0


def error_text(row: dict) -> str:
    """'rel. error 1.2e-03, SQNR 52.1 dB': the pick's errors that were measured."""
    parts = [f"rel. error {row['rel_err']:.2e}" if not missing(row.get("rel_err")) else "",
             f"SQNR {row['sqnr_db']:.1f} dB" if not missing(row.get("sqnr_db")) else "",
             f"loss delta {row['loss_delta_vs_fp32']:+.3g}" if not missing(row.get("loss_delta_vs_fp32")) else ""]
    return ", ".join(p for p in parts if p)
