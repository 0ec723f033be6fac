"""The answers a report opens with, and `recommend`: which precision, for which case, at what cost.

A *setting* is everything about a case except its precision: the cases of one run that share a
`baseline_case_id` (same workload, shape and workload parameters, timed against the same baseline
case). Within a setting the precisions are comparable: their speedups are over the same baseline
case, and their errors are against the same reference.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import asdict, dataclass

import pandas as pd

from suite.analysis import derived
from suite.errors import UserError


@dataclass(frozen=True)
class Budget:
    """An accuracy budget: a precision qualifies when it meets every bound given (None: no bound)."""

    max_rel_err: float | None = None  # relative Frobenius error against the reference
    min_sqnr_db: float | None = None  # signal-to-quantization-noise ratio, dB
    max_loss_delta: float | None = None  # |final loss - the fp32 twin's| (nats), training steps

    def __post_init__(self):
        for name, value in asdict(self).items():
            if value is not None and not (math.isfinite(value) and (value > 0 or name == "min_sqnr_db")):
                raise UserError(f"--{name.replace('_', '-')} {value}: expected a positive finite number")

    def describe(self) -> str:
        parts = [f"rel. error <= {self.max_rel_err:.3g}" if self.max_rel_err is not None else "",
                 f"SQNR >= {self.min_sqnr_db:.3g} dB" if self.min_sqnr_db is not None else "",
                 f"|loss delta| <= {self.max_loss_delta:.3g} nats" if self.max_loss_delta is not None else ""]
        return ", ".join(p for p in parts if p) or "no accuracy bound"

    def misses(self, row) -> str:
        """Why the case misses the budget ('' when it meets it, or when the metric is unknown:
        an unmeasured bound disqualifies, see `recommend`)."""
        checks = (("rel_err", self.max_rel_err, lambda v, b: v <= b, "rel. error {v:.2e} > {b:.3g}"),
                  ("sqnr_db", self.min_sqnr_db, lambda v, b: v >= b, "SQNR {v:.1f} dB < {b:.3g}"),
                  ("loss_delta_vs_fp32", self.max_loss_delta, lambda v, b: abs(v) <= b, "loss delta {v:+.3g} > {b:.3g}"))
        for column, bound, ok, text in checks:
            if bound is None:
                continue
            value = row.get(column)
            if value is None or pd.isna(value):
                return f"no {column} recorded"
            if not ok(float(value), bound):
                return text.format(v=float(value), b=bound)
        return ""


def _settings(df: pd.DataFrame):
    """(run_id, baseline_case_id) -> its rows, over measured or not; settings without a baseline
    (a run with no baseline precision) are one setting per case."""
    df = derived.with_speedups(df)
    key = df["baseline_case_id"].where(df["baseline_case_id"].notna(), df["case_id"])
    return df.groupby([df["run_id"], key], sort=False)


def _label(rows: pd.DataFrame) -> str:
    base = rows[rows["case_id"] == rows["baseline_case_id"]]
    return derived.shape_label((base if len(base) else rows).iloc[0])


def _size(rows: pd.DataFrame) -> float:
    """How big a setting is, to find the largest: its flops, else M*K*N, else the baseline's time."""
    for column in ("flops",):
        if column in rows and rows[column].notna().any():
            return float(rows[column].max())
    if rows["m"].notna().all():
        return float((rows["m"].astype(float) * rows["k"].astype(float) * rows["n"].astype(float)).max())
    times = pd.to_numeric(rows["time_ms_median"], errors="coerce")
    return float(times.max()) if times.notna().any() else 0.0


def _err(row) -> str:
    if pd.notna(row.get("rel_err")):
        return f"rel. error {float(row['rel_err']):.1e}"
    if pd.notna(row.get("loss_delta_vs_fp32")):
        return f"loss delta {float(row['loss_delta_vs_fp32']):+.3g} nats"
    return "error not measured"


def _ratio(speedup: float, baseline: str) -> str:
    if speedup >= 1:
        return f"{speedup:.3g}x faster than {baseline}"
    return f"{1 / speedup:.3g}x slower than {baseline}"


def largest_setting_answers(df: pd.DataFrame) -> list[str]:
    """Per workload of the newest run: at its largest setting, each precision against the baseline
    (fastest first) with its error; emulated ones as numerics only; the ones not measured and why."""
    newest = df[df["run_id"] == df["run_id"].max()]
    lines = []
    for workload, rows in newest.groupby("workload", sort=False):
        groups = [g for _, g in _settings(rows)]
        if not groups:
            continue
        g = max(groups, key=_size)
        baseline = g["baseline"].dropna()
        baseline = str(baseline.iloc[0]) if len(baseline) else None
        ok = g[g["status"] == "ok"]
        emulated = derived.is_emulated(ok)
        timed = ok[~emulated & ok["speedup"].notna() & (ok["precision"] != baseline)]
        timed = timed.sort_values("speedup", ascending=False)
        parts = []
        for i, (_, r) in enumerate(timed.iterrows()):
            speedup = float(r["speedup"])
            if i == 0:
                parts.append(f"{r['precision']} is {_ratio(speedup, baseline)} ({_err(r)})")
            else:
                ratio = f"{speedup:.3g}x" if speedup >= 1 else f"{1 / speedup:.3g}x slower"
                parts.append(f"{r['precision']} {ratio} ({_err(r)})")
        if len(timed) and float(timed["speedup"].iloc[0]) < 1:
            parts.insert(0, f"{baseline} (the baseline) is fastest")
        parts += [f"{r['precision']} numerics only, emulated ({_err(r)})" for _, r in ok[emulated].iterrows()]
        not_run = g[g["status"] != "ok"]
        parts += [f"{r['precision']} {r['status']} ({short(r.get('reason'))})" for _, r in not_run.iterrows()]
        if parts:
            lines.append(f"{workload} at {_label(g)}: " + "; ".join(parts) + ".")
    return lines


def short(reason, width: int = 72) -> str:
    """A reason's first line, cut at a word boundary to about `width` characters."""
    text = str(reason or "no reason recorded").strip().split("\n")[0]
    if len(text) <= width:
        return text
    cut = text[:width].rsplit(" ", 1)[0]
    return cut.rstrip(" ,;:(") + " ..."


def not_measured(df: pd.DataFrame, most: int = 3) -> str:
    """One sentence: how many cases were skipped or failed and the commonest reasons."""
    bad = df[df["status"] != "ok"]
    if bad.empty:
        return ""
    reasons = Counter(zip(bad["status"], bad["precision"], bad["reason"].map(short)))
    shown = "; ".join(f"{n} {p} {s} ({r})" for (s, p, r), n in reasons.most_common(most))
    more = f"; and {len(reasons) - most} more reasons" if len(reasons) > most else ""
    return f"Not measured: {len(bad)} of {len(df)} cases: {shown}{more}."


PICK_COLUMNS = ["workload", "setting", "run_id", "baseline", "pick", "speedup", "rel_err", "sqnr_db",
                "loss_delta_vs_fp32", "within_budget", "not_timed", "rejected"]


def recommend(df: pd.DataFrame, budget: Budget = Budget()) -> pd.DataFrame:
    """Per setting, the fastest precision whose accuracy meets `budget`, from measured speedups.

    Columns (PICK_COLUMNS): `pick` (None when no timed precision qualifies), its `speedup` over the
    in-run `baseline` and its errors; `within_budget` how many timed precisions qualified;
    `not_timed` precisions within budget whose speed is unknown here (emulated, e.g. FP8 on a CPU);
    `rejected` the faster precisions that missed the budget, with the reason."""
    out = []
    for (run_id, _), g in _settings(df):
        ok = g[g["status"] == "ok"]
        emulated = derived.is_emulated(ok)
        timed = ok[~emulated].copy()
        timed["speedup"] = timed["speedup"].where(timed["precision"] != timed["baseline"], 1.0)
        timed = timed[timed["speedup"].notna()].sort_values("speedup", ascending=False)
        misses = {i: budget.misses(r) for i, r in timed.iterrows()}
        good = timed[[not misses[i] for i in timed.index]]
        best = good.iloc[0] if len(good) else None
        faster = timed if best is None else timed[timed["speedup"] > best["speedup"]]
        base = g["baseline"].dropna()
        out.append({
            "workload": g["workload"].iloc[0], "setting": _label(g), "run_id": run_id,
            "baseline": str(base.iloc[0]) if len(base) else None,
            "pick": None if best is None else best["precision"],
            "speedup": None if best is None else float(best["speedup"]),
            **{c: (None if best is None or c not in best or pd.isna(best[c]) else float(best[c]))
               for c in ("rel_err", "sqnr_db", "loss_delta_vs_fp32")},
            "within_budget": len(good),
            "not_timed": ", ".join(r["precision"] for _, r in ok[emulated].iterrows() if not budget.misses(r)),
            "rejected": "; ".join(f"{r['precision']} ({misses[i]})" for i, r in faster.iterrows()),
        })
    return pd.DataFrame(out, columns=PICK_COLUMNS)
