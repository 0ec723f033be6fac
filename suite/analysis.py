"""Numbers derived from records: speedups against the in-run baseline, summaries. No plotting."""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd


def latest_runs(df: pd.DataFrame) -> pd.DataFrame:
    """The newest run of each scenario (run ids start with their UTC start time)."""
    newest = df.groupby("scenario")["run_id"].transform("max")
    return df[df["run_id"] == newest].copy()


def with_speedups(df: pd.DataFrame) -> pd.DataFrame:
    """Add `speedup` (baseline median time / this case's, same run) and `pct_of_peak`."""
    df = df.copy()
    ok = df[df["status"] == "ok"]
    base_time = dict(zip(zip(ok["run_id"], ok["case_id"]), ok["time_ms_median"]))
    keys = zip(df["run_id"], df["baseline_case_id"])
    base = [base_time.get(k, np.nan) for k in keys]
    time_ms = pd.to_numeric(df["time_ms_median"], errors="coerce")
    df["speedup"] = np.where(df["status"] == "ok", np.asarray(base, dtype=float) / time_ms, np.nan)
    peak = pd.to_numeric(df["peak_tflops"], errors="coerce")
    df["pct_of_peak"] = 100.0 * pd.to_numeric(df["tflops"], errors="coerce") / peak
    return df


def is_emulated(df: pd.DataFrame) -> pd.Series:
    if "emulated" not in df:
        return pd.Series(False, index=df.index)
    return df["emulated"].fillna(False).astype(bool)


def shape_label(row) -> str:
    """How a case is named in tables and plots, without its precision."""
    parts = []
    if pd.notna(row.get("m")):
        parts.append(f"{int(row['m'])}x{int(row['k'])}x{int(row['n'])}")
    params = json.loads(row["params"]) if isinstance(row.get("params"), str) else {}
    parts += [f"{k}={v}" for k, v in sorted(params.items())]
    return " ".join(parts) or row["workload"]


def geomean(xs) -> float:
    xs = [x for x in xs if x and x > 0 and math.isfinite(x)]
    return math.exp(sum(map(math.log, xs)) / len(xs)) if xs else math.nan


def summary(df: pd.DataFrame) -> pd.DataFrame:
    """One row per (workload, precision): case counts by status, best TFLOP/s, geomean speedup,
    median relative error. Emulated timings are not speed: their throughput columns stay empty."""
    df = with_speedups(df)
    rows = []
    for (workload, precision), g in df.groupby(["workload", "precision"], sort=False):
        ok = g[g["status"] == "ok"]
        real = ok[~is_emulated(ok)]
        rows.append({
            "workload": workload,
            "precision": precision,
            "ok": len(ok),
            "skipped": int((g["status"] == "skipped").sum()),
            "failed": int((g["status"] == "failed").sum()),
            "best_tflops": real["tflops"].max() if len(real) else math.nan,
            "geomean_speedup": geomean(real["speedup"]) if len(real) else math.nan,
            "median_rel_err": ok["rel_err"].median() if len(ok) and "rel_err" in ok else math.nan,
            "emulated": bool(len(ok)) and bool(is_emulated(ok).all()),
        })
    return pd.DataFrame(rows)
