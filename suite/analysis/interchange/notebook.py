"""`load`: the records of a results folder as a notebook wants them (docs/results.md).

The parquet files read with no options anywhere (pandas, polars, DuckDB), but there every record
carries every defined column, most of them null for any one workload, and not the number a reader
came for: the speedup over the in-run baseline is derived (`derived.with_speedups`). `load` gives one
row per case of the newest run of each scenario, the speedup, its baseline's time and a short unique
label first, and only the columns the cases read fill.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from suite.analysis.frame import derived, labels
from suite.results import store

# What a reader looks at first, in this order; the other filled columns follow in the file's order.
FIRST = ["label", "workload", "precision", "shape", "variant", "status", "speedup", "speedup_medians", "baseline",
         "baseline_time_ms", "time_ms_median"]
# Per-sample lists: one per case, long; `samples=True` keeps them.
SAMPLES = ("samples_ms",)


def load(path: str | Path, workload: str | None = None, all_runs: bool = False,
         samples: bool = False) -> pd.DataFrame:
    """One row per case of `path` (a run file, a scenario's folder or a folder of them; a URL too):
    the newest run of each scenario (`all_runs=True`: every run), of one `workload` if given.

    Columns: `label` ("256x256x256 bf16": the case's shape and precision, named by only what differs
    between the cases read, `suite.analysis.frame.labels`), `speedup` (over the baseline, same run and device:
    the paired speedup where the two were timed in paired rounds, else the baseline's median time over
    this case's, `speedup_medians`; NaN where either did not run or the case's time is emulated, as FP8
    on a CPU), `baseline_time_ms`, then every other
    column some case read fills: columns no case fills are left out (pass `workload` for one
    workload's columns only). Each column's meaning: docs/results-schema.md."""
    df = store.read([path])
    if not all_runs:
        df = derived.latest_runs(df)
    if workload is not None:
        if workload not in set(df["workload"]):
            raise ValueError(f"no {workload!r} cases in {path}: it holds {', '.join(sorted(set(df['workload'])))}")
        df = df[df["workload"] == workload]
    df = labels.with_labels(derived.with_speedups(df.reset_index(drop=True)))
    # the shape names the workload where nothing else differs: said only where workloads mix
    alone = (df["shape"] == df["workload"]) & (df["workload"].nunique() == 1)
    df["label"] = (df["shape"].astype(str) + " " + df["variant"].astype(str)).where(~alone, df["variant"])
    time_ms = pd.to_numeric(df["time_ms_median"], errors="coerce")
    df["baseline_time_ms"] = df["speedup_medians"] * time_ms  # speedup_medians = its median / this one's
    emulated = derived.is_emulated(df)  # an emulated time is not speed
    df["speedup"], df["speedup_medians"] = df["speedup"].where(~emulated), df["speedup_medians"].where(~emulated)
    filled = [c for c in df.columns if df[c].notna().any() and (samples or c not in SAMPLES)]
    return df[[c for c in FIRST if c in filled] + [c for c in filled if c not in FIRST]]
