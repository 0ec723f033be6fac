"""The answers a report opens with, and `recommend`: which precision, for which case, at what cost.

A *setting* is everything about a case except its precision: the cases of one run that share a
`baseline_case_id` (same workload, shape and workload parameters, timed against the same baseline
case). Within a setting the precisions are comparable: their speedups are over the same baseline
case, and their errors are against the same reference.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass
from typing import Callable, Mapping

import numpy as np
import pandas as pd

from suite.analysis.frame import derived, labels
from suite.core.budgets import Metric
from suite.core.errors import UserError
from suite.scenario import registry
from suite.scenario.params import params_without


class Budget:
    """An accuracy budget: a precision qualifies when it meets every bound given, each named by its
    metric's `bound` (`Budget(max_rel_err=1e-2)`; None: no bound), the metrics those the registry
    declares (`suite.scenario.registry.budget_metrics`: the errors against the reference, and the
    folders' own, as a training step's loss gap)."""

    def __init__(self, partial: bool = False, **bounds: float | None):
        metrics = registry.budget_metrics()
        unknown = sorted(set(bounds) - {metric.bound for metric in metrics})
        if unknown:
            raise TypeError(f"Budget: no declared metric is bounded by {unknown[0]!r}")
        for metric in metrics:
            value = bounds.get(metric.bound)
            if value is not None and not (math.isfinite(value) and (value > 0 or not metric.positive)):
                raise UserError(f"--{metric.bound.replace('_', '-')} {value}: expected a positive finite number")
        # the bounded metrics with their bounds, in the registry's order
        self.limits = tuple((metric, bounds[metric.bound]) for metric in metrics if bounds.get(metric.bound) is not None)
        # A setting that records none of the bounded metrics: True ranks it with no bound (the report's
        # "fastest measured"); False leaves it without a pick, `note` naming the bound it needs.
        self.partial = partial

    def bounds(self) -> dict:
        """The bounds given, by name (`recommend --json`'s "budget")."""
        return {metric.bound: bound for metric, bound in self.limits}

    def describe(self) -> str:
        return ", ".join(metric.meets.format(b=bound) for metric, bound in self.limits if metric.meets) \
            or "no accuracy bound"

    def misses(self, row, judged=None) -> str:
        """Why the case misses the budget ('' when it meets it), on the metrics whose columns are
        `judged` (None: all); a bound whose metric was not recorded is missed ("no SQNR recorded")."""
        for metric, bound in self.limits:
            if judged is not None and metric.column not in judged:
                continue
            value = row.get(metric.column)
            if value is None or pd.isna(value):
                return f"no {metric.words} recorded"
            if not meets(metric, float(value), bound):
                return metric.over.format(v=float(value), b=bound)
        return ""


def meets(metric: Metric, value, bound: float):
    """Whether a value (a number, or a Series of them: False where NaN) meets a bound of its metric."""
    value = abs(value) if metric.absolute else value
    return value <= bound if metric.at_most else value >= bound


def outside_margin(df: pd.DataFrame) -> pd.Series:
    """Per row, whether a value of it lies beyond its metric's margin (`Metric.margin`: a training
    step that did not train); False where none is recorded."""
    outside = pd.Series(False, index=df.index)
    for metric in registry.budget_metrics():
        if metric.margin is not None and metric.column in df:
            values = pd.to_numeric(df[metric.column], errors="coerce")
            outside |= values.notna() & ~meets(metric, values, metric.margin)
    return outside


def with_settings(df: pd.DataFrame) -> pd.DataFrame:
    """The records with speedups, short names, a `setting_key` (run_id and baseline case: every
    precision of one case shares it; a run with no baseline precision has one setting per case) and
    the columns the folders derive from them (`suite.scenario.declare.Hooks.derived`: a training
    step's loss gap to its reference, `loss_gap_nats`)."""
    df = labels.with_labels(derived.with_speedups(df))
    if "setting_key" not in df:
        df = df.assign(setting_key=df["run_id"].astype(str) + "/" + df["baseline_case_id"].fillna(df["case_id"]).astype(str))
    for derive in registry.hooks("derived"):
        df = derive(df)
    return df


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
    """The case's error as the headline says it: its first measured metric the headline shows
    (`Metric.headline`), noting a value beyond the metric's margin."""
    for metric in registry.budget_metrics():
        value = row.get(metric.column)
        if metric.headline and value is not None and pd.notna(value):
            value = float(value)
            beyond = metric.margin is not None and not meets(metric, value, metric.margin)
            return metric.headline.format(v=value) + (metric.outside.format(m=metric.margin) if beyond else "")
    return "error not measured"


def _ratio(speedup: float, baseline: str) -> str:
    if speedup >= 1:
        return f"{speedup:.3g}x faster than {baseline}"
    return f"{1 / speedup:.3g}x slower than {baseline}"


def largest_setting_answers(df: pd.DataFrame) -> list[str]:
    """Per workload of the newest run: at its largest setting, each precision against the baseline
    (fastest first) with its error; emulated ones as numerics only; the ones not measured and why."""
    newest = with_settings(derived.rows(df, df["run_id"] == df["run_id"].max()))  # (no copy of a run read alone)
    newest = newest.assign(size=case_sizes(newest))
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
    speedup = pd.to_numeric(ok["speedup"], errors="coerce")
    # a speedup that is no positive number (a reader refuses the times it would come from) says nothing
    timed = ok[~emulated & np.isfinite(speedup) & (speedup > 0) & (ok["precision"] != baseline)]
    # fastest first, but a case beyond a metric's margin (a training step whose loss left it) after
    # every one within: the first recipe named is never one that did not train (as "which precision" ranks them)
    timed = timed.assign(_outside=outside_margin(timed)).sort_values(["_outside", "speedup"], ascending=[True, False])
    parts = []
    for i, (_, r) in enumerate(timed.iterrows()):
        speedup = float(r["speedup"])
        if i == 0:
            parts.append(f"{r['variant']} is {_ratio(speedup, baseline)} ({_err(r)})")
        else:
            ratio = f"{speedup:.3g}x" if speedup >= 1 else f"{1 / speedup:.3g}x slower"
            parts.append(f"{r['variant']} {ratio} ({_err(r)})")
    if len(timed) and float(timed["speedup"].iloc[0]) < 1:
        margins = " and ".join(f"{m.words} margin" for m in registry.budget_metrics() if m.margin is not None)
        within = f" within the {margins}" if margins and float(timed["speedup"].max()) >= 1 else ""
        parts.insert(0, f"{baseline} (the baseline) is fastest{within}")
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
        rest = rows["params"].map(lambda p: params_without(p, trend.param))
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


def short(reason, width: int = 120) -> str:
    """A reason's first line, whole where it fits `width` (the suite's own reasons are one line with
    their fix: "...; got K=520; set pad = true to pad with zeros"); else its whole leading clauses
    ("; "-separated) that fit, so a fix is kept whole or left out, never cut in half; a first clause
    longer than that is cut at a word boundary."""
    text = str(reason or "no reason recorded").strip().split("\n")[0]
    if len(text) <= width:
        return text
    clauses = text.split("; ")
    kept = clauses[0]
    for clause in clauses[1:]:
        if len(kept) + 2 + len(clause) > width:
            break
        kept += "; " + clause
    if len(kept) > width:
        kept = kept[:width].rsplit(" ", 1)[0].rstrip(" ,;:(")
    return kept + " ..."


def not_measured(df: pd.DataFrame, most: int = 3) -> str:
    """One sentence: how many cases were skipped or failed and the commonest reasons."""
    bad = df[df["status"] != "ok"]
    if bad.empty:
        return ""
    reasons = Counter(zip(bad["status"], derived.variants(bad), bad["reason"].map(short)))
    shown = "; ".join(f"{n} {p} {s} ({r})" for (s, p, r), n in reasons.most_common(most))
    more = f"; and {len(reasons) - most} more reasons" if len(reasons) > most else ""
    return f"Not measured: {len(bad)} of {len(df)} cases: {shown}{more}."


# --- which precision: `recommend` and the report's table -------------------------------------------

# The budgets the report's "Which precision" answers for (and `recommend`'s when none is given: the
# looser), each metric's own bounds (`Metric.tight`, `Metric.loose`).
def tight_budget() -> Budget:
    return Budget(**{metric.bound: metric.tight for metric in registry.budget_metrics()})


def loose_budget() -> Budget:
    return Budget(**{metric.bound: metric.loose for metric in registry.budget_metrics()})


def trained_budget() -> Budget:
    """"Fastest measured": any accuracy, but within each metric's margin (a training step only where
    it trained, the update answer's margin: suite/precisions/update/answers.py), never a recipe whose
    loss ran away."""
    return Budget(partial=True, **{metric.bound: metric.margin for metric in registry.budget_metrics()})


@dataclass(frozen=True)
class Kit:
    """What a folder's answer hook is handed (`suite.scenario.declare.Hooks.answers`): its module
    sits before the analysis and may not import it."""

    with_settings: Callable[[pd.DataFrame], pd.DataFrame]  # the records as "which precision" judges them
    short: Callable[..., str]  # a reason's first clauses that fit a width
    margins: Mapping[str, float]  # each budget metric's margin by its column (`Metric.margin`), as judged here


def declared_answers(df: pd.DataFrame) -> list[str]:
    """The sentences the folders' answer hooks add to the headline (the update-side answer), in
    folder order."""
    kit = Kit(with_settings=with_settings, short=short, margins={
        metric.column: metric.margin for metric in registry.budget_metrics() if metric.margin is not None})
    return [line for answer in registry.hooks("answers") for line in answer(df, kit)]


def pick_columns() -> list[str]:
    """The columns of `recommend`'s picks: each budget metric's value of the pick (and what it is against)."""
    errors = [c for metric in registry.budget_metrics() for c in (metric.column, metric.reference) if c]
    return ["workload", "setting", "run_id", "baseline", "decided_on", "pick", "speedup", *errors,
            "within_budget", "not_timed", "rejected", "note"]


def _recorded(df: pd.DataFrame) -> pd.DataFrame:
    """setting_key x metric column: whether any case of the setting records it. A bound applies to the
    settings that record its metric (a rel. error budget judges GEMMs, a loss budget training steps)."""
    return pd.DataFrame({m.column: df[m.column].notna().groupby(df["setting_key"]).any()
                         for m in registry.budget_metrics()})


def _applies(df: pd.DataFrame, recorded: pd.DataFrame, column: str) -> pd.Series:
    return df["setting_key"].map(recorded[column]).fillna(False).astype(bool)


def _misses(df: pd.DataFrame, budget: Budget, recorded: pd.DataFrame) -> pd.Series:
    """Per row, why it misses the budget ('' when it meets it), on the bounds that apply to its
    setting (`Budget.misses`, applied to the rows that miss only)."""
    bad = missed(df, budget, recorded)
    why = pd.Series("", index=df.index, dtype=object)
    if bad.any():
        columns = [m.column for m in registry.budget_metrics()]
        judged = recorded.reindex(df.loc[bad, "setting_key"]).fillna(False).to_dict("records")
        why[bad] = [budget.misses(r, [c for c in columns if j[c]])
                    for r, j in zip(df.loc[bad, columns].to_dict("records"), judged)]
    return why


def missed(df: pd.DataFrame, budget: Budget, recorded: pd.DataFrame | None = None) -> pd.Series:
    """Per row, whether it misses the budget: a bound whose metric the row lacks is missed, where it
    applies (with `recorded`: the settings that record the metric; without: everywhere)."""
    bad = pd.Series(False, index=df.index)
    for metric, bound in budget.limits:
        column = metric.column
        values = pd.to_numeric(df[column], errors="coerce") if column in df else pd.Series(float("nan"), index=df.index)
        miss = ~meets(metric, values, bound).fillna(False)
        bad |= miss & _applies(df, recorded, column) if recorded is not None else miss
    return bad


def _listed(rows: pd.DataFrame, items: list) -> pd.Series:
    """setting_key -> the items of its rows, in their order, as a list (one sort, then one slice per
    setting: a groupby with a Python aggregate costs a million rows tens of seconds)."""
    if rows.empty:
        return pd.Series(dtype=object)
    codes, keys = pd.factorize(rows["setting_key"])
    order = np.argsort(codes, kind="stable")
    ordered = [items[i] for i in order]
    bounds = [0, *(np.flatnonzero(np.diff(codes[order])) + 1).tolist(), len(ordered)]
    return pd.Series([ordered[a:b] for a, b in zip(bounds, bounds[1:])], index=keys[np.unique(codes)])


def _most_accurate_first(rows: pd.DataFrame) -> pd.DataFrame:
    """Each budget metric in turn, best first (the magnitude of one bounded by it)."""
    metrics = registry.budget_metrics()
    keys = [f"_magnitude_{m.column}" if m.absolute else m.column for m in metrics]
    return rows.assign(**{key: rows[m.column].abs() for key, m in zip(keys, metrics) if m.absolute}).sort_values(
        keys, ascending=[m.at_most for m in metrics], na_position="last", kind="stable")


def recommend(df: pd.DataFrame, budget: Budget | None = None) -> pd.DataFrame:
    """Per setting, which precision to use within `budget` (each bound judging the settings that
    record its metric: rel. error GEMMs and layers, loss training steps).

    Columns (`pick_columns`): `decided_on` "speed" where a precision besides the baseline was timed
    (`pick`: the fastest within budget, its `speedup` over the in-run `baseline`), "accuracy" where
    every other precision is emulated (FP8 on a CPU: `pick` the most accurate within budget, no
    speedup); the pick's errors (`loss_gap_nats` against `loss_reference`, `with_settings`);
    `within_budget` how many qualified; `not_timed` the emulated precisions within budget, most
    accurate first; `rejected` those that missed the budget ({"precision", "reason"}: the faster
    ones where decided on speed); `note` why a setting has no pick where no bound judges it.
    Columnar: a million records take seconds. No budget: the looser of the report's (`loose_budget`)."""
    return recommend_each(df, [budget or loose_budget()])[0]


def recommend_each(df: pd.DataFrame, budgets: list[Budget]) -> list[pd.DataFrame]:
    """`recommend` for each budget, the settings and their labels found once."""
    df = with_settings(df)
    metrics = registry.budget_metrics()
    df = df.assign(**{m.column: float("nan") for m in metrics if m.column not in df},
                   **{m.reference: None for m in metrics if m.reference and m.reference not in df})
    settings = df.drop_duplicates("setting_key")[["setting_key", "workload", "run_id"]].set_index("setting_key")
    settings["baseline"] = df.dropna(subset=["baseline"]).drop_duplicates("setting_key").set_index("setting_key")["baseline"]
    settings["setting"] = _labels(df)
    ok = df[df["status"] == "ok"]
    emulated = derived.is_emulated(ok)
    timed = ok[~emulated]
    timed = timed.assign(speedup=timed["speedup"].where(timed["precision"] != timed["baseline"], 1.0))
    timed = timed[timed["speedup"].notna()]
    others = timed[timed["precision"] != timed["baseline"]]["setting_key"]
    emu = ok[emulated]
    by_speed = settings.index.isin(others) | ~settings.index.isin(emu["setting_key"])
    settings["decided_on"] = np.where(by_speed, "speed", "accuracy")
    recorded = _recorded(df)
    # Decided on accuracy, the baseline is the pick where no emulated recipe meets the budget and it does.
    baselines = timed[(timed["precision"] == timed["baseline"]) & timed["setting_key"].isin(settings.index[~by_speed])]
    return [_picks(settings, recorded, timed[timed["setting_key"].isin(settings.index[by_speed])],
                   _most_accurate_first(emu), budget, baselines) for budget in budgets]


def _unjudged(settings: pd.DataFrame, recorded: pd.DataFrame, budget: Budget) -> pd.Series:
    """setting_key -> why no bound of the budget judges it ('' where one does)."""
    bounded = [metric for metric, _ in budget.limits]
    if not bounded or budget.partial:
        return pd.Series("", index=settings.index)
    judged = recorded.reindex(settings.index)[[m.column for m in bounded]].fillna(False).any(axis=1)
    metrics = registry.budget_metrics()
    has = recorded.reindex(settings.index).fillna(False)[[m.column for m in metrics]].astype(bool).to_numpy()
    flags = [f"--{m.bound.replace('_', '-')}" for m in metrics]
    lacking = " or ".join(m.words for m in bounded)
    texts: dict[tuple, str] = {}  # (workload, metrics it records) -> why: a few texts for a million settings
    why = [texts.get(key) or texts.setdefault(key, _unbounded_text(lacking, key[0], flags, key[1:]))
           for key in zip(settings["workload"], *has.T)]
    return pd.Series(why, index=settings.index).where(~judged, "")


def _unbounded_text(lacking: str, workload, flags: list[str], recorded: tuple) -> str:
    alt = ", ".join(flag for flag, has in zip(flags, recorded) if has)
    return f"no {lacking} recorded for {workload}" + (f": bound it with {alt}" if alt else "")


def _picks(settings, recorded, timed, emu, budget: Budget, baselines) -> pd.DataFrame:
    note = _unjudged(settings, recorded, budget)
    judged = set(note.index[note == ""])
    timed, emu = timed[timed["setting_key"].isin(judged)], emu[emu["setting_key"].isin(judged)]
    bad_timed, bad_emu = missed(timed, budget, recorded), missed(emu, budget, recorded)
    good = timed[~bad_timed].sort_values("speedup", ascending=False, kind="stable")
    good_emu = emu[~bad_emu]
    accuracy = settings.index[settings["decided_on"] == "accuracy"]
    by_accuracy = good_emu[good_emu["setting_key"].isin(accuracy)].drop_duplicates("setting_key")
    baselines = baselines[baselines["setting_key"].isin(judged) & ~baselines["setting_key"].isin(by_accuracy["setting_key"])]
    stay = baselines[~missed(baselines, budget, recorded)].drop_duplicates("setting_key")
    best = pd.concat([good.drop_duplicates("setting_key"), by_accuracy, stay])
    best = best.set_index("setting_key").reindex(settings.index)
    best_speed = timed["setting_key"].map(best["speedup"]).astype(float)
    faster = timed[bad_timed & (best_speed.isna() | (timed["speedup"].astype(float) > best_speed))]
    faster = pd.concat([faster.sort_values("speedup", ascending=False, kind="stable"), emu[bad_emu]])
    rejected = _listed(faster, [{"precision": v, "reason": r} for v, r in zip(faster["variant"], _misses(faster, budget, recorded))])
    counted = pd.concat([good["setting_key"], good_emu["setting_key"][good_emu["setting_key"].isin(accuracy)],
                         stay["setting_key"]])
    out = pd.DataFrame({
        **{c: settings[c] for c in ("workload", "setting", "run_id", "baseline", "decided_on")},
        "pick": best["variant"], "speedup": pd.to_numeric(best["speedup"], errors="coerce"),
        **{m.column: pd.to_numeric(best[m.column], errors="coerce") for m in registry.budget_metrics()},
        **{m.reference: best[m.reference] for m in registry.budget_metrics() if m.reference},
        "within_budget": counted.value_counts().reindex(settings.index).fillna(0).astype(int),
        "not_timed": _listed(good_emu, list(good_emu["variant"])).reindex(settings.index),
        "rejected": rejected.reindex(settings.index), "note": note,
    })
    out["speedup"] = out["speedup"].where(out["decided_on"] == "speed")
    out = out.reset_index(drop=True)[pick_columns()]
    out = out.astype(object).where(out.notna(), None)
    for column in ("not_timed", "rejected"):
        out[column] = [v if isinstance(v, list) else [] for v in out[column]]
    return out
