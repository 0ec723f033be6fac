"""Run groups: the shards of one fleet run (`suite.fleet.shard`) read as one run.

On disk each shard is a run of its own (its own run id, file and journal), and its records carry
the group (`run_group`), the shard (`shard_index` of `shard_count`) and their own run id again in
`shard_run_id`. On read (`as_runs`), every record of a group gets the group's run id, so reports,
compare, history and selectors, which count runs by `run_id`, count the group once.

The group's run id has the run-id form: the earliest shard's start time (so groups sort by age
among runs) and 24 bits of the group's hash (so two groups started in the same second differ).
"""

from __future__ import annotations

import hashlib
import sys

import pandas as pd


def group_run_id(group: str, shard_run_ids) -> str:
    return f"{min(shard_run_ids)[:16]}-{hashlib.sha256(group.encode()).hexdigest()[:6]}"


def _warn(message: str) -> None:
    print(f"mpsuite: warning: {message}", file=sys.stderr)


def as_runs(df: pd.DataFrame, warn=_warn) -> pd.DataFrame:
    """Records with each group's records under the group's run id. A case measured by two runs of
    the same shard (a shard run again from scratch instead of resumed) is kept once, from the
    newest; the warning names both."""
    if "run_group" not in df or df["run_group"].isna().all():
        return df
    df = df.copy()
    grouped = df["run_group"].notna()
    own = df["shard_run_id"].where(df["shard_run_id"].notna(), df["run_id"])
    df.loc[grouped, "shard_run_id"] = own[grouped]
    keep = pd.Series(True, index=df.index)
    for group, rows in df[grouped].groupby("run_group", sort=True):
        df.loc[rows.index, "run_id"] = group_run_id(group, rows["shard_run_id"])
        counts = rows["shard_count"].dropna().unique()
        if len(counts) > 1:
            warn(f"run group {group} mixes shard counts {sorted(int(c) for c in counts)}: "
                 "its shards were planned differently")
        ordered = rows.sort_values("shard_run_id", ascending=False)
        repeated = ordered.duplicated("case_id", keep="first")
        if repeated.any():
            twice = sorted(set(ordered.loc[repeated, "shard_run_id"]))
            warn(f"run group {group}: {int(repeated.sum())} case(s) were also measured by shard run(s) "
                 f"{', '.join(twice)}; the newest measurement of each is kept")
            keep[ordered.index[repeated]] = False
    return df[keep].reset_index(drop=True)


def shard_status(df: pd.DataFrame) -> list[dict]:
    """Per run group (after `as_runs`): its run id, shard count, and which shards are complete,
    partial (a journal only: `run_partial`) or missing (no record at all)."""
    if "run_group" not in df or df["run_group"].isna().all():
        return []
    out = []
    grouped = df[df["run_group"].notna()]
    partial = grouped["run_partial"].fillna(False).astype(bool) if "run_partial" in grouped else \
        pd.Series(False, index=grouped.index)
    for group, rows in grouped.groupby("run_group", sort=True):
        count = int(rows["shard_count"].max())
        seen = {int(k) for k in rows["shard_index"].dropna()}
        unfinished = {int(k): rid for k, rid in zip(rows.loc[partial[rows.index], "shard_index"],
                                                    rows.loc[partial[rows.index], "shard_run_id"])}
        out.append({
            "run_group": group, "run_id": rows["run_id"].iloc[0], "scenario": rows["scenario"].iloc[0],
            "shard_count": count, "complete": sorted(seen - set(unfinished)),
            "partial": dict(sorted(unfinished.items())), "missing": sorted(set(range(count)) - seen),
        })
    return out


def shard_lines(df: pd.DataFrame) -> list[str]:
    """One sentence per run group that lacks shards: which are missing, which can be resumed."""
    lines = []
    for g in shard_status(df):
        if not g["missing"] and not g["partial"]:
            continue
        parts = []
        if g["missing"]:
            many = len(g["missing"]) > 1
            parts.append(f"shard{'s' * many} {', '.join(map(str, g['missing']))} ha{'ve' if many else 's'} no results")
        for k, rid in g["partial"].items():
            parts.append(f"shard {k} stopped midway (`python -m suite run {g['scenario']} --resume {rid}` "
                         "finishes it)")
        lines.append(f"Run group {g['run_group']} (run {g['run_id']}) is incomplete: of {g['shard_count']} "
                     f"shards, {'; '.join(parts)}.")
    return lines
