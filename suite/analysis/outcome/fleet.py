"""Across devices: the numbers of the fleet report (`suite.report.fleet_page`).

A fleet run (one scenario on several kinds of node: H100, H200, A100), whether one run group, one
Ray run or separate runs, holds records from several devices. A speedup stays within one device's
records (a baseline timed on another card says nothing about this one: `by_device` splits before
`derived.with_speedups` pairs), and a case is joined across devices by its `case_id`, which is a
function of the case's parameters only, never of the machine (`suite.scenario.plan`).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from suite.analysis.frame import derived
from suite.analysis.outcome import answers

# what a record of a run asking for a device this machine lacks is labelled (it has no device name)
NOT_AVAILABLE = " (not available)"


def device_labels(df: pd.DataFrame) -> pd.Series:
    """Per record, the device it ran on: its device name ("NVIDIA H100 80GB HBM3", a CPU model),
    else its device type and that it was not available."""
    kind = df["device"].astype(str) if "device" in df else pd.Series("unknown", index=df.index)
    if "device_name" not in df:
        return kind + NOT_AVAILABLE
    names = df["device_name"].astype(str)  # (a categorical takes no value outside its categories)
    return names.where(df["device_name"].notna(), kind + NOT_AVAILABLE)


def devices(df: pd.DataFrame) -> list[str]:
    return sorted(device_labels(df).unique())


def is_fleet(df: pd.DataFrame) -> bool:
    """Whether the records come from more than one device (a fleet report renders them)."""
    return len(devices(df)) > 1


def latest_runs(df: pd.DataFrame) -> pd.DataFrame:
    """The newest run of each scenario on each device (run ids start with their UTC start time):
    the H100 node's last run beside the A100 node's, not only whichever finished last."""
    # on integer codes (run ids sorted): a million records' string maxima per group cost a second
    run = pd.factorize(df["run_id"], sort=True)[0]
    group = pd.factorize(df["scenario"])[0] * len(df) + pd.factorize(device_labels(df))[0]
    newest = pd.Series(run).groupby(group).transform("max").to_numpy()
    return derived.rows(df, run == newest)


def by_device(df: pd.DataFrame) -> list[tuple[str, pd.DataFrame]]:
    """The records of each device, devices in name order."""
    labels = device_labels(df)
    return [(label, df[labels == label]) for label in sorted(labels.unique())]


CELL_COLUMNS = ["case_id", "workload", "setting", "precision", "baseline", "size", "device", "speedup", "note",
                "runs"]


def cells(df: pd.DataFrame) -> pd.DataFrame:
    """One row per (case with a baseline, device): the case's speedup over its in-run baseline on
    that device (the geometric mean over the device's runs when it has several), or nan with a
    `note` saying why there is none (emulated: numerics only; skipped or failed: the reason)."""
    parts = []
    for label, records in by_device(df):
        g = derived.with_speedups(records)
        ok = (g["status"] == "ok").to_numpy(bool)
        emulated = derived.is_emulated(g).to_numpy(bool)
        speedup = pd.to_numeric(g["speedup"], errors="coerce").where(ok & ~emulated)
        why = g["status"].astype(str) + ": " + g["reason"].map(answers.short)
        note = np.select([ok & emulated, ~ok, speedup.isna().to_numpy()],
                         ["emulated: numerics only", why, "baseline not measured"], "")
        parts.append(pd.DataFrame({
            "case_id": g["case_id"], "workload": g["workload"], "setting": derived.shape_labels(g),
            "precision": g["precision"], "baseline": g["baseline"], "size": answers.case_sizes(g), "device": label,
            "speedup": speedup, "note": note, "run_id": g["run_id"]}))
    rows = pd.concat(parts, ignore_index=True)
    rows = rows[rows["baseline"].notna() & (rows["precision"] != rows["baseline"])]
    grouped = rows.groupby(["case_id", "device"], sort=False)
    out = grouped.agg(workload=("workload", "first"), setting=("setting", "first"), precision=("precision", "first"),
                      baseline=("baseline", "first"), size=("size", "max"), note=("note", "first"),
                      runs=("run_id", "nunique")).reset_index()
    out["speedup"] = grouped["speedup"].agg(derived.geomean).to_numpy()
    out["note"] = out["note"].where(out["speedup"].isna(), "")
    return out[CELL_COLUMNS]


def side_by_side(cell_rows: pd.DataFrame) -> pd.DataFrame:
    """`cells` as one row per case and one column per device (its speedup; `<device> note` beside
    it): the table that answers "does FP8 pay on this card". Rows by workload, precision, size."""
    cases = cell_rows.groupby("case_id", sort=False).agg(
        workload=("workload", "first"), precision=("precision", "first"), baseline=("baseline", "first"),
        setting=("setting", "first"), size=("size", "max"))
    wide = cell_rows.pivot(index="case_id", columns="device", values="speedup")
    notes = cell_rows.pivot(index="case_id", columns="device", values="note").add_suffix(" note")
    table = cases.join(wide).join(notes).reset_index().sort_values(["workload", "precision", "size", "setting"])
    return table.drop(columns="size").reset_index(drop=True)


def recipes(cell_rows: pd.DataFrame) -> pd.DataFrame:
    """Per (workload, precision, baseline, device): the geometric mean speedup over the cases
    measured there, how many, and the commonest note of the cases that were not."""
    rows = []
    for (workload, precision, baseline, device), g in cell_rows.groupby(
            ["workload", "precision", "baseline", "device"], sort=True):
        measured = g["speedup"].dropna()
        notes = g.loc[g["speedup"].isna(), "note"]
        rows.append({"workload": workload, "precision": precision, "baseline": baseline, "device": device,
                     "geomean_speedup": derived.geomean(measured), "measured": len(measured), "cases": len(g),
                     "note": notes.mode().iloc[0] if len(notes) else ""})
    return pd.DataFrame(rows)


def share(row) -> str:
    """'5 cases', or '3 cases of 5' where some were not measured."""
    return f"{row['measured']} case{'s' if row['measured'] != 1 else ''}" + (
        f" of {row['cases']}" if row["measured"] != row["cases"] else "")


def answer_lines(df: pd.DataFrame) -> list[str]:
    """The fleet report's first lines: per recipe, on which devices it pays (geomean speedup over
    the in-run baseline above 1), on which not, and where it was not measured and why."""
    summary = recipes(cells(df))
    lines = [f"{len(devices(df))} devices: {', '.join(devices(df))}; each device's speedups are over "
             "its own in-run baseline, cases joined across devices by case id."]
    for (workload, precision, baseline), g in summary.groupby(["workload", "precision", "baseline"], sort=True):
        g = g.sort_values("geomean_speedup", ascending=False, na_position="last")
        timed = g[g["measured"] > 0]
        pays = [f"{r['device']} ({r['geomean_speedup']:.3g}x, {share(r)})" for _, r in timed.iterrows()
                if r["geomean_speedup"] > 1]
        loses = [f"{r['device']} ({r['geomean_speedup']:.3g}x, {share(r)})" for _, r in timed.iterrows()
                 if not r["geomean_speedup"] > 1]
        absent = [f"{r['device']} ({r['note']})" for _, r in g[g["measured"] == 0].iterrows()]
        parts = ([f"pays on {', '.join(pays)}"] if pays else []) + \
                ([f"does not pay on {', '.join(loses)}"] if loses else []) + \
                ([f"not measured on {', '.join(absent)}"] if absent else [])
        lines.append(f"{workload} {precision} over {baseline} (geomean speedup): {'; '.join(parts)}.")
    return lines
