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

import numpy as np
import pandas as pd

from suite.analysis import derived, labels
from suite.core.errors import UserError
from suite.scenario import registry


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
        """Why the case misses the budget ('' when it meets it); a bound whose metric was not
        recorded is missed ("no sqnr_db recorded")."""
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


def with_settings(df: pd.DataFrame) -> pd.DataFrame:
    """The records with speedups and a `setting` key (run_id and baseline case: every precision of
    one case shares it; a run with no baseline precision has one setting per case)."""
    df = labels.with_labels(derived.with_speedups(df))
    if "setting_key" in df:
        return df
    return df.assign(setting_key=df["run_id"].astype(str) + "/" + df["baseline_case_id"].fillna(df["case_id"]).astype(str))


def _labels(df: pd.DataFrame) -> pd.Series:
    """setting_key -> its name: the shape label of its baseline case (or of its first case)."""
    base = df[df["case_id"] == df["baseline_case_id"]]
    first = pd.concat([base, df]).drop_duplicates("setting_key")
    return pd.Series(derived.shape_labels(first).to_numpy(), index=first["setting_key"].to_numpy())


def case_sizes(df: pd.DataFrame) -> pd.Series:
    """Per row, how big its case is, to find the largest setting: flops, else M*K*N, else time."""
    size = pd.Series(0.0, index=df.index)
    times = pd.to_numeric(df["time_ms_median"], errors="coerce")
    size = size.where(times.isna(), times)
    if df["m"].notna().any():
        mkn = df["m"].astype(float) * df["k"].astype(float) * df["n"].astype(float)
        size = mkn.where(mkn.notna(), size)
    if "flops" in df and df["flops"].notna().any():
        flops = pd.to_numeric(df["flops"], errors="coerce")
        size = flops.where(flops.notna(), size)
    return size


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
    newest = with_settings(df[df["run_id"] == df["run_id"].max()])
    newest["size"] = case_sizes(newest)
    lines = []
    for workload, rows in newest.groupby("workload", sort=False):
        biggest = rows.groupby("setting_key", sort=False)["size"].max().idxmax()
        g = rows[rows["setting_key"] == biggest]
        lines += _answer(workload, g, _labels(g)[biggest])
    return lines


def _answer(workload: str, g: pd.DataFrame, label: str) -> list[str]:
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
            parts.append(f"{r['variant']} is {_ratio(speedup, baseline)} ({_err(r)})")
        else:
            ratio = f"{speedup:.3g}x" if speedup >= 1 else f"{1 / speedup:.3g}x slower"
            parts.append(f"{r['variant']} {ratio} ({_err(r)})")
    if len(timed) and float(timed["speedup"].iloc[0]) < 1:
        parts.insert(0, f"{baseline} (the baseline) is fastest")
    parts += [f"{r['variant']} numerics only, emulated ({_err(r)})" for _, r in ok[emulated].iterrows()]
    parts += [f"{r['variant']} {r['status']} ({short(r.get('reason'))})" for _, r in g[g["status"] != "ok"].iterrows()]
    where = f"{workload} at {label}" if label != workload else workload  # a shape named by its workload alone
    return [f"{where}: " + "; ".join(parts) + "."] if parts else []


def versus_answers(df: pd.DataFrame) -> list[str]:
    """Per workload that declares `versus` (e.g. grouped GEMMs against a per-expert loop), in the
    newest run: each precision's measured `versus_speedup`, its geomean and its extremes with the
    `along` value (the load imbalance) each was measured at."""
    df = derived.with_versus(derived.with_speedups(df[df["run_id"] == df["run_id"].max()]))
    lines = []
    for workload, record in registry.WORKLOADS.items():
        versus = record.versus
        rows = df[(df["workload"] == workload) & df["versus_speedup"].notna()] if versus else df.iloc[:0]
        rows = rows[~derived.is_emulated(rows)]
        if rows.empty or versus.along not in rows:
            continue
        parts = []
        for precision, g in rows.groupby("precision", sort=False):
            low, high = g.loc[g["versus_speedup"].idxmin()], g.loc[g["versus_speedup"].idxmax()]
            parts.append(f"{precision} {derived.geomean(g['versus_speedup']):.3g}x (geomean of {len(g)}; "
                         f"{float(low['versus_speedup']):.3g}x at {versus.along} {float(low[versus.along]):.3g} to "
                         f"{float(high['versus_speedup']):.3g}x at {float(high[versus.along]):.3g})")
        lines.append(f"{workload} against {versus.param}={versus.value} (its time over each case's): "
                     + "; ".join(parts) + ".")
    return lines


def trend_answers(df: pd.DataFrame) -> list[str]:
    """Per workload that declares a `trend` (e.g. SQNR against the outlier's magnitude), in the
    newest run: each precision's (and parameter variant's) value at the smallest and the largest
    swept x, where it was measured at three or more."""
    newest = df[df["run_id"] == df["run_id"].max()]
    lines = []
    for workload, record in registry.WORKLOADS.items():
        trend = record.trend
        rows = newest[(newest["workload"] == workload) & (newest["status"] == "ok")] if trend else newest.iloc[:0]
        if rows.empty or trend.x not in rows or trend.y not in rows:
            continue
        rows = rows[rows[trend.y].notna()]
        rest = rows["params"].map(lambda p: derived.params_without(p, trend.param))
        lines_of = [g.sort_values(trend.x) for _, g in rows.groupby([rows["precision"], rest], sort=False)
                    if g[trend.x].nunique() >= 3]
        if not lines_of:
            continue
        firsts = pd.concat([g.iloc[[0]].assign(params=rest[g.index[0]]) for g in lines_of])
        named = labels.with_labels(firsts.drop(columns=["variant", "shape"], errors="ignore"))["variant"]
        parts = [f"{name} {float(g[trend.y].iloc[0]):.3g} to {float(g[trend.y].iloc[-1]):.3g}"
                 for name, g in zip(named, lines_of)]
        if parts:
            lo, hi = rows[trend.x].min(), rows[trend.x].max()  # each line's own ends may lie inside
            lines.append(f"{workload}: {trend.what} at the smallest and the largest {trend.x} measured "
                         f"({lo:g} to {hi:g}): " + "; ".join(parts) + ".")
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
    reasons = Counter(zip(bad["status"], derived.variants(bad), bad["reason"].map(short)))
    shown = "; ".join(f"{n} {p} {s} ({r})" for (s, p, r), n in reasons.most_common(most))
    more = f"; and {len(reasons) - most} more reasons" if len(reasons) > most else ""
    return f"Not measured: {len(bad)} of {len(df)} cases: {shown}{more}."


PICK_COLUMNS = ["workload", "setting", "run_id", "baseline", "pick", "speedup", "rel_err", "sqnr_db",
                "loss_delta_vs_fp32", "within_budget", "not_timed", "rejected"]
METRICS = ("rel_err", "sqnr_db", "loss_delta_vs_fp32")


def _misses(df: pd.DataFrame, budget: Budget) -> pd.Series:
    """Per row, why it misses the budget ('' when it meets it); a bound whose metric was not
    recorded is missed (`Budget.misses`, applied to the rows that miss only)."""
    bad = missed(df, budget)
    why = pd.Series("", index=df.index, dtype=object)
    if bad.any():
        columns = [c for c in METRICS if c in df]
        why[bad] = [budget.misses(r) for r in df.loc[bad, columns].to_dict("records")]
    return why


def missed(df: pd.DataFrame, budget: Budget) -> pd.Series:
    """Per row, whether it misses the budget (a bound whose metric is not recorded is missed)."""
    bad = pd.Series(False, index=df.index)
    for column, bound, ok in (("rel_err", budget.max_rel_err, lambda v, b: v <= b),
                              ("sqnr_db", budget.min_sqnr_db, lambda v, b: v >= b),
                              ("loss_delta_vs_fp32", budget.max_loss_delta, lambda v, b: v.abs() <= b)):
        if bound is None:
            continue
        values = pd.to_numeric(df[column], errors="coerce") if column in df else pd.Series(float("nan"), index=df.index)
        bad |= ~ok(values, bound).fillna(False)
    return bad


def _joined(rows: pd.DataFrame, text: pd.Series) -> pd.Series:
    """setting_key -> the texts of its rows in their order, '; '-joined (one sort, then one join
    per setting: a groupby with a Python aggregate costs a million rows tens of seconds)."""
    if rows.empty:
        return pd.Series(dtype=object)
    codes, keys = pd.factorize(rows["setting_key"])
    order = np.argsort(codes, kind="stable")
    texts = text.to_numpy(dtype=object)[order].tolist()
    bounds = [0, *(np.flatnonzero(np.diff(codes[order])) + 1).tolist(), len(texts)]
    return pd.Series(["; ".join(texts[a:b]) for a, b in zip(bounds, bounds[1:])], index=keys[np.unique(codes)])


def recommend(df: pd.DataFrame, budget: Budget = Budget()) -> pd.DataFrame:
    """Per setting, the fastest precision whose accuracy meets `budget`, from measured speedups.

    Columns (PICK_COLUMNS): `pick` (None when no timed precision qualifies), its `speedup` over the
    in-run `baseline` and its errors; `within_budget` how many timed precisions qualified;
    `not_timed` precisions within budget whose speed is unknown here (emulated, e.g. FP8 on a CPU);
    `rejected` the faster precisions that missed the budget, with the reason. Columnar: a million
    records take seconds."""
    return recommend_each(df, [budget])[0]


def recommend_each(df: pd.DataFrame, budgets: list[Budget]) -> list[pd.DataFrame]:
    """`recommend` for each budget, the settings and their labels found once."""
    df = with_settings(df)
    df = df.assign(**{c: float("nan") for c in METRICS if c not in df})
    settings = df.drop_duplicates("setting_key")[["setting_key", "workload", "run_id"]].set_index("setting_key")
    baselines = df.dropna(subset=["baseline"]).drop_duplicates("setting_key").set_index("setting_key")["baseline"]
    labels = _labels(df).reindex(settings.index)
    ok = df[df["status"] == "ok"]
    emulated = derived.is_emulated(ok)
    timed = ok[~emulated]
    timed = timed.assign(speedup=timed["speedup"].where(timed["precision"] != timed["baseline"], 1.0))
    timed = timed[timed["speedup"].notna()]
    return [_picks(settings, baselines, labels, timed, ok[emulated], budget) for budget in budgets]


def _picks(settings, baselines, labels, timed, emu, budget: Budget) -> pd.DataFrame:
    bad = missed(timed, budget)
    good = timed[~bad].sort_values("speedup", ascending=False, kind="stable")
    best = good.drop_duplicates("setting_key").set_index("setting_key")
    rejected = pd.Series(dtype=object)
    if len(timed):
        best_speed = timed["setting_key"].map(best["speedup"]).astype(float)
        speed = timed["speedup"].astype(float)
        faster = timed[bad & (best_speed.isna() | (speed > best_speed))].sort_values("speedup", ascending=False, kind="stable")
        rejected = _joined(faster, faster["variant"].astype(str) + " (" + _misses(faster, budget) + ")")
    emu = emu[~missed(emu, budget)] if len(emu) else emu
    out = pd.DataFrame({
        "workload": settings["workload"], "setting": labels,
        "run_id": settings["run_id"], "baseline": baselines.reindex(settings.index),
        "pick": best["variant"].reindex(settings.index), "speedup": best["speedup"].reindex(settings.index),
        **{c: pd.to_numeric(best[c], errors="coerce").reindex(settings.index) for c in METRICS},
        "within_budget": good.groupby("setting_key").size().reindex(settings.index).fillna(0).astype(int),
        "not_timed": _joined(emu, emu["variant"]).reindex(settings.index).fillna("").str.replace("; ", ", "),
        "rejected": rejected.reindex(settings.index).fillna(""),
    })
    out = out.reset_index(drop=True)[PICK_COLUMNS]
    return out.astype(object).where(out.notna(), None)
