"""Render a report from records: `index.html`, `report.md` and PNG plots in one folder.

Only this package writes `reports/`. It computes nothing new: every number shown is a record column
or comes from `suite.analysis` applied to the records, so a report can be re-rendered from
`results/` alone (`python -m suite report results/<scenario>`).
"""

from __future__ import annotations

import math
from collections import Counter
from pathlib import Path

import jinja2
import pandas as pd

from suite import analysis
from suite.report import plots

ENV_COLUMNS = [
    "device", "device_name", "compute_capability", "sm_count", "torch_version", "cuda_version",
    "cudnn_version", "driver_version", "torchao_version", "te_version", "triton_version",
    "python_version", "cpu_model", "cpu_threads", "host", "git_sha", "git_dirty", "code_hash",
]


def fmt(value, spec: str = ".3g", suffix: str = "") -> str:
    if value is None or (isinstance(value, float) and (math.isnan(value))):
        return ""
    if isinstance(value, float) and math.isinf(value):
        return "inf" if value > 0 else "-inf"
    return f"{value:{spec}}{suffix}"


# A table longer than this helps nobody; the full set is in the results parquet.
MAX_CASE_ROWS = 2000


def _case_rows(df: pd.DataFrame) -> list[dict]:
    rows = []
    emulated = analysis.is_emulated(df)
    for idx, r in df.head(MAX_CASE_ROWS).iterrows():
        ok = r["status"] == "ok"
        emu = bool(emulated[idx])
        speed = ok and not emu
        rows.append({
            "workload": r["workload"],
            "shape": analysis.shape_label(r),
            "precision": r["precision"],
            "status": r["status"] + (" (emulated: timing is not device speed)" if ok and emu else ""),
            "time_ms": fmt(r.get("time_ms_median"), ".4g") if ok else "",
            "spread": fmt(r.get("rel_ci"), ".1%") if ok else "",
            "tflops": fmt(r.get("tflops"), ".4g") if speed else "",
            "pct_peak": fmt(r.get("pct_of_peak"), ".1f", "%") if speed else "",
            "speedup": fmt(r.get("speedup"), ".3g", "x") if speed else "",
            "rel_err": fmt(r.get("rel_err"), ".2e") if ok else "",
            "sqnr_db": fmt(r.get("sqnr_db"), ".1f") if ok else "",
            "reason": r.get("reason") or "",
        })
    return rows


def _summary_rows(df: pd.DataFrame) -> list[dict]:
    return [
        {
            "workload": s["workload"], "precision": s["precision"],
            "cases": f"{s['ok']} ok, {s['skipped']} skipped, {s['failed']} failed",
            "best_tflops": fmt(s["best_tflops"], ".4g"),
            "geomean_speedup": fmt(s["geomean_speedup"], ".3g", "x"),
            "median_rel_err": fmt(s["median_rel_err"], ".2e"),
            "note": "emulated: accuracy only" if s["emulated"] else "",
        }
        for _, s in analysis.summary(df).iterrows()
    ]


def build_view(df: pd.DataFrame) -> dict:
    """Everything the templates show, as strings, from the records of one or more runs."""
    df = analysis.with_speedups(df)
    first = df.iloc[0]
    not_ok = df[df["status"] != "ok"]
    reasons = Counter(zip(not_ok["status"], not_ok["reason"].fillna("")))
    return {
        "scenario": ", ".join(sorted(df["scenario"].unique())),
        "runs": sorted(df["run_id"].unique()),
        "started_at": first.get("started_at"),
        "env": [(c, first.get(c)) for c in ENV_COLUMNS if c in df and pd.notna(first.get(c))],
        "counts": dict(Counter(df["status"])),
        "summary": _summary_rows(df),
        "cases": _case_rows(df),
        "cases_left_out": max(0, len(df) - MAX_CASE_ROWS),
        "reasons": [{"status": s, "reason": r, "count": n} for (s, r), n in reasons.most_common()],
        "baselines": sorted(df["baseline"].dropna().unique()),
        "plots": [],
    }


def _md_cell(value) -> str:
    return str(value).replace("|", "\\|").replace("\n", " ")


def _md_table(rows: list[dict], columns: list[tuple[str, str]]) -> str:
    head = "| " + " | ".join(title for _, title in columns) + " |"
    sep = "|" + "|".join("---" for _ in columns) + "|"
    body = ["| " + " | ".join(_md_cell(r[key]) for key, _ in columns) + " |" for r in rows]
    return "\n".join([head, sep, *body])


SUMMARY_COLUMNS = [
    ("workload", "workload"), ("precision", "precision"), ("cases", "cases"),
    ("best_tflops", "best TFLOP/s"), ("geomean_speedup", "geomean speedup"),
    ("median_rel_err", "median rel. error"), ("note", "note"),
]
CASE_COLUMNS = [
    ("workload", "workload"), ("shape", "case"), ("precision", "precision"), ("status", "status"),
    ("time_ms", "median ms"), ("spread", "±95% CI"), ("tflops", "TFLOP/s"), ("pct_peak", "% of peak"),
    ("speedup", "speedup"), ("rel_err", "rel. error"), ("sqnr_db", "SQNR dB"),
]


def markdown(view: dict) -> str:
    counts = ", ".join(f"{n} {s}" for s, n in sorted(view["counts"].items()))
    env = dict(view["env"])
    where = f"{env.get('device_name', 'unknown device')}, torch {env.get('torch_version', '?')}"
    if env.get("cuda_version"):
        where += f", CUDA {env['cuda_version']}"
    lines = [
        f"# mpsuite report: {view['scenario']}",
        "",
        f"Run {', '.join(view['runs'])} ({counts}) on {where}. "
        f"Speedups are against the in-run baseline ({', '.join(view['baselines']) or 'none'}); "
        "relative error is against a float64 reference from the same inputs.",
        "",
        "## Summary",
        "",
        _md_table(view["summary"], SUMMARY_COLUMNS),
        "",
    ]
    if view["reasons"]:
        lines += ["## Not measured", "", _md_table(
            [{**r, "count": str(r["count"])} for r in view["reasons"]],
            [("status", "status"), ("count", "cases"), ("reason", "reason")],
        ), ""]
    lines += ["## Cases", "", _md_table(view["cases"], CASE_COLUMNS), ""]
    if view["cases_left_out"]:
        lines += [f"({view['cases_left_out']} more cases are in the results parquet, not listed here.)", ""]
    lines += [f"![{p['title']}]({p['file']})" for p in view["plots"]]
    return "\n".join(lines) + "\n"


def html(view: dict) -> str:
    env = jinja2.Environment(
        loader=jinja2.PackageLoader("suite.report", "templates"),
        autoescape=True,  # every string from a scenario or a record is escaped
        undefined=jinja2.StrictUndefined,
    )
    return env.get_template("index.html.j2").render(
        view=view, summary_columns=SUMMARY_COLUMNS, case_columns=CASE_COLUMNS
    )


def render(df: pd.DataFrame, out_dir: str | Path) -> list[Path]:
    """Write the report for these records into out_dir; returns the files written."""
    if df.empty:
        raise ValueError("no records to report")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    view = build_view(df)
    speed_df = analysis.with_speedups(df)
    written = []
    for workload in speed_df["workload"].unique():
        for kind, plot in plots.PLOTS.items():
            path = plot(speed_df, workload, out / f"{kind}_{workload}.png")
            if path is not None:
                written.append(path)
                view["plots"].append({"file": path.name, "title": f"{workload} {kind}"})
    for name, text in (("report.md", markdown(view)), ("index.html", html(view))):
        (out / name).write_text(text, encoding="utf-8")
        written.append(out / name)
    return written
