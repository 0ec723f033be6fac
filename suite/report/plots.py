"""Plots of a run's records, as SVG (`suite.report.figures`: every point named on hover) in the one
palette (`suite.report.palette`). Plots draw, never compute: every value comes from a record column
or from `suite.analysis`. A series is named by its case's short name (`variant`, `shape`:
`suite.analysis.frame.labels`), and a plot that would hold a single series it cannot set against
anything (throughput of the baseline alone, speed against accuracy with one timed precision) is
left out: where speed is emulated or absent (FP8 on a CPU), `accuracy` shows what was measured,
the error per recipe and shape. A plot only one workload or precision means is its folder's
(`suite.scenario.declare.Plot`: `train_step`'s loss curves), handed what it draws with (`Kit`)."""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Callable

import numpy as np
import pandas as pd

from suite.analysis.frame.derived import is_emulated, paired_speedups
from suite.analysis.frame.labels import combinations, sort_key, with_labels
from suite.report import figures, palette
from suite.scenario import registry

# A family of shapes spanning less than this factor in size is drawn as categories: its points
# would sit on top of each other on a size axis (the lm_head GEMMs of vocabularies 50257..50432).
LINE_SPAN = 1.5
# What a variant whose timing is emulation is called in a legend: its numbers are numerics only.
NUMERICS_ONLY = " (numerics only)"


def _sizes(df: pd.DataFrame) -> pd.Series:
    return (df["m"].astype(float) * df["k"].astype(float) * df["n"].astype(float)) ** (1 / 3)


def _categories(df: pd.DataFrame) -> dict[str, int]:
    """shape name -> its place on a category axis: by size, then by the numbers in the name
    (`outlier=30000` before `outlier=1e+06`)."""
    size = _sizes(df) if df["m"].notna().all() else pd.Series(0.0, index=df.index)
    first = size.groupby(df["shape"].to_numpy()).first()
    order = sorted(first.index, key=lambda s: (first[s], sort_key(s)))
    return {label: i for i, label in enumerate(order)}


def _x(df: pd.DataFrame) -> tuple[pd.Series, str, dict | None, pd.Series]:
    """x positions: the equivalent square size (M*K*N)^(1/3) where shapes form lines (`_families`),
    else one category per shape; the axis label, the categories, and each row's line (its family;
    one for all on a category axis)."""
    if df["m"].notna().all():
        size, families = _sizes(df), _families(df)
        by_line = size.groupby(combinations({"variant": df["variant"], "family": families})[0])
        if ((by_line.max() / by_line.min()) >= LINE_SPAN).any():
            return size, "problem size (M*K*N)^(1/3)", None, families
    cats = _categories(df)
    return df["shape"].map(cats).astype(float), "case", cats, pd.Series("", index=df.index)


def _families(df: pd.DataFrame) -> pd.Series:
    """Cases on one line: square GEMMs together; others by their K and N (M, the token count,
    varies along the line), so a model's shapes never zigzag through the square sizes."""
    if "m" not in df or not df["m"].notna().any():
        return pd.Series("", index=df.index)
    dims = [df[d].fillna(0).astype("int64").to_numpy() for d in ("m", "k", "n")]
    codes = [pd.factorize(d)[0].astype(np.int64) for d in dims]
    key = (codes[0] * (codes[1].max() + 1) + codes[1]) * (codes[2].max() + 1) + codes[2]
    _, first, shape = np.unique(key, return_index=True, return_inverse=True)  # each distinct shape named once
    m, k, n = (d[first] for d in dims)
    named = np.where((m == k) & (k == n), "square", [f"K={a}, N={b}" for a, b in zip(k, n)])
    # as objects before they are spread over the rows: a row's name is then one of a few strings (as
    # numpy text, each of a million rows became a string of its own)
    return pd.Series(np.where(m == 0, "", named).astype(object)[shape], index=df.index)


def _dodge(variants: list[str]) -> dict[str, float]:
    """Each variant's offset within a category, so variants with the same numbers stay visible."""
    step = min(0.8 / max(len(variants), 1), 0.15)
    return {v: (j - (len(variants) - 1) / 2) * step for j, v in enumerate(variants)}


def _wide(values) -> bool:
    """Whether the positive values span more than a decade (then their axis is logarithmic)."""
    v = pd.to_numeric(pd.Series(values), errors="coerce").to_numpy(float)
    v = v[np.isfinite(v) & (v > 0)]
    return bool(len(v)) and v.max() / v.min() > 10


# Beyond this many points in one series, points that land in one cell of a grid over the series'
# range are drawn once, as the cell's first point: a million markers take seconds to draw and
# megabytes of SVG, and show nothing their distinct positions do not. The figures' axes are about
# 470 x 260 pt (8.5 x 4.6 in less labels and legend), so a cell of GRID x GRID_ROWS is ~2.7 pt
# square, a marker's radius (30 pt^2: 5.5 pt across): markers closer than that overlap by more than
# half, and read as one.
MAX_POINTS = 2000
GRID = 170
GRID_ROWS = 95


def _distinct(x, y, log_x: bool, log_y: bool) -> np.ndarray:
    """Positions (into x and y) of the points to draw: all of them up to MAX_POINTS, else the first
    point of each cell of the GRID x GRID_ROWS grid over the series' range (log where the axis is)."""
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    if len(x) <= MAX_POINTS:
        return np.arange(len(x))

    def cell(v, log, cells):
        v = np.log10(np.where(v > 0, v, np.nan)) if log else v
        lo, hi = np.nanmin(v), np.nanmax(v)
        return np.nan_to_num(np.floor((v - lo) / ((hi - lo) or 1.0) * cells), nan=-1).astype(np.int64)

    return np.sort(np.unique(cell(x, log_x, GRID) * (GRID_ROWS + 2) + cell(y, log_y, GRID_ROWS), return_index=True)[1])


def _legend(ax, fontsize: float = 8) -> None:
    """Inside when short; beside the axes when long, so it never covers the data (constrained
    layout makes room for it: nothing is cut off)."""
    handles, labels = ax.get_legend_handles_labels()
    if not handles:
        return
    if len(handles) > 4:
        ax.legend(fontsize=fontsize, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0)
    else:
        ax.legend(fontsize=fontsize, loc="best")


def _entry(ax, label: str, style: palette.Style, line: bool = True) -> None:
    """A legend entry in the variant's style (the artists themselves are drawn unlabelled)."""
    ax.plot([], [], label=label, lw=1.2 if line else 0, ms=6, **style.line())


def _points(ax, x, y, names, style: palette.Style, size: float = 30) -> None:
    """Markers, each named on hover."""
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    keep = np.isfinite(x) & np.isfinite(y)
    points = ax.scatter(x[keep], y[keep], s=size, zorder=3, linewidths=1.1, alpha=0.9, **style.scatter())
    figures.name(points, [n for n, k in zip(names, keep) if k])


def _finish(fig, ax, xlabel, categories, path: Path, x: pd.Series | None = None) -> Path:
    ax.set_xlabel(xlabel)
    if categories is None:
        ax.set_xscale("log", base=2)
        ticks = []
        for v in np.unique(x.to_numpy(float)) if x is not None else []:
            if not ticks or v > 1.08 * ticks[-1]:  # labels that would touch are left out
                ticks.append(v)
        if 0 < len(ticks) <= 12:  # ticks at the measured sizes: a narrow log axis has none of its own
            ax.set_xticks(ticks, [f"{v:.0f}" for v in ticks], fontsize=8)
            ax.minorticks_off()
    else:
        _category_ticks(ax, categories)
    ax.grid(True, which="both", alpha=0.25)
    _legend(ax)
    return figures.save(fig, path)


# The width of one character of an 8-point tick label, in inches (DejaVu Sans averages ~0.6 em).
CHAR_INCHES = 8 * 0.6 / 72


def _category_ticks(ax, categories: dict) -> None:
    """A case's name under its place, one parameter a line ("batch=16" over "vocab=50304"), level
    where every name fits its share of the axis width; else on one line, slanted."""
    names = [str(c) for c in categories]
    lines = [n.split(" ") for n in names]
    share = ax.get_position().width * ax.figure.get_figwidth() / max(len(names), 1)
    if max(len(part) for n in lines for part in n) * CHAR_INCHES <= 0.9 * share:
        ax.set_xticks(list(categories.values()), ["\n".join(n) for n in lines], fontsize=8)
    else:
        ax.set_xticks(list(categories.values()), names, rotation=30, ha="right", rotation_mode="anchor", fontsize=8)
    ax.set_xlim(-0.6, len(categories) - 0.4)


def _size(categories: dict | None) -> tuple[float, float]:
    """Wide enough that category labels do not overlap."""
    return (max(8.0, 0.5 * len(categories) + 4) if categories else 8.5), 4.6


# What the speed plots read of a record: a column no record fills is added, all null.
SPEED_COLUMNS = ["workload", "precision", "variant", "shape", "baseline", "m", "k", "n", "params", "tflops",
                 "peak_tflops", "speedup", "rel_err", "time_ms_median", "time_ms_p10", "time_ms_p90",
                 "speedup_paired", "speedup_medians", "speedup_paired_low", "speedup_paired_high", "speedup_paired_level"]


def _speed_rows(df: pd.DataFrame, workload: str) -> pd.DataFrame:
    """The workload's rows whose timing is real device speed (not failed, skipped or emulated)."""
    df = with_labels(df)
    speed = (df["workload"] == workload) & (df["status"] == "ok") & ~is_emulated(df)
    return _kept(df.assign(**{c: np.nan for c in SPEED_COLUMNS if c not in df}), speed)


def _kept(rows: pd.DataFrame, keep, columns: list[str] = SPEED_COLUMNS) -> pd.DataFrame:
    """The rows where `keep` is true, with `columns` only: the frame itself where every row is kept
    (a filter copies the columns it keeps, a million rows' of each)."""
    keep = np.asarray(keep, dtype=bool)
    return rows if keep.all() else rows[columns][keep]  # (3x faster than .loc[keep, columns])


# What the speedup plot reads of the speed rows (its filter copies these).
SPEEDUP_COLUMNS = [c for c in SPEED_COLUMNS if c not in ("workload", "params", "tflops", "peak_tflops", "rel_err")]


def _spread(rows: pd.DataFrame, value: pd.Series) -> np.ndarray:
    """Error bars (below, above) for a rate proportional to 1/time: from the stored 10th and 90th
    percentile times, value * median / p90 .. value * median / p10."""
    def column(name):
        return pd.to_numeric(rows[name], errors="coerce").to_numpy(float) if name in rows else np.full(len(rows), np.nan)

    median, p10, p90 = column("time_ms_median"), column("time_ms_p10"), column("time_ms_p90")
    v = value.to_numpy(float)
    low, high = v * median / p90, v * median / p10
    return np.nan_to_num(np.vstack([v - low, high - v]), nan=0.0).clip(min=0)


def error_bars(rows: pd.DataFrame, column: str) -> np.ndarray:
    """A plotted column's error bars: a speedup from paired rounds gets its stored interval
    (speedup_paired_low/high, at speedup_paired_level), any other value its case's own p10-p90."""
    bars = _spread(rows, rows[column])
    if column != "speedup":
        return bars
    paired = paired_speedups(rows)
    low, high = (pd.to_numeric(rows[c], errors="coerce").to_numpy(float) for c in ("speedup_paired_low", "speedup_paired_high"))
    v = rows[column].to_numpy(float)
    stored = paired & np.isfinite(low) & np.isfinite(high)
    bars[:, stored] = np.vstack([v - low, high - v])[:, stored].clip(min=0)
    return bars


def speedup_bars_title(rows: pd.DataFrame) -> str:
    """What a speedup plot's bars show: the stored paired intervals (at their levels) where cases
    have them, each case's p10-p90 elsewhere."""
    stored = paired_speedups(rows) & pd.to_numeric(rows["speedup_paired_low"], errors="coerce").notna().to_numpy()
    levels = pd.to_numeric(rows.loc[stored, "speedup_paired_level"], errors="coerce").dropna()
    if not stored.any():
        return "bars: each case's p10-p90"
    level = (f"{levels.min():.0%}" if levels.min() == levels.max() else f"{levels.min():.0%}-{levels.max():.0%}") \
        if len(levels) else "stored level"
    rest = ", others each case's p10-p90" if not stored.all() else ""
    return f"bars: paired speedups' stored {level} interval{rest}"


# Above this many points in one series, error bars are left out (thousands hide their points).
MAX_BARS = 500


def _names(g: pd.DataFrame, what: str, column: str, fmt: str) -> list[str]:
    return [f"{v} {s}: {what} {val:{fmt}}" for v, s, val in zip(g["variant"], g["shape"], g[column].astype(float))]


def _along(rows: pd.DataFrame, at: np.ndarray, x: np.ndarray, column: str):
    """A line's points (the rows at positions `at`, x their positions on the axis) in x order with
    their error bars and names: each case's own (`error_bars`), or, where several cases share a size
    (parameter variants), their median with the p10-p90 across them (only the plotted column read)."""
    xs = x[at]
    if pd.Series(xs).nunique() == len(at):
        order = np.argsort(xs)
        g = rows.iloc[at[order]]
        return xs[order], g[column].to_numpy(float), error_bars(g, column), g
    by = pd.Series(rows[column].to_numpy(float)[at]).groupby(xs)
    mid, low, high = by.median(), by.quantile(0.1), by.quantile(0.9)
    return mid.index.to_numpy(), mid.to_numpy(), np.vstack([mid - low, high - mid]), None


def _series(ax, xs, ys, yerr, names, style, dash) -> None:
    """One series: its error bars, its line (`dash`, or none), its named markers."""
    if yerr is not None:
        ax.errorbar(xs, ys, yerr=yerr, fmt="none", ecolor=style.colour, elinewidth=1, capsize=2, alpha=0.7)
    if dash is not None:
        ax.plot(xs, ys, color=style.colour, ls=dash, lw=1.3)
    _points(ax, xs, ys, names, style)


def _groups(codes: np.ndarray) -> list[tuple[int, np.ndarray]]:
    """(code, positions) of each group of `codes` (a code < 0 is no group), in order of first
    appearance, positions ascending: what `groupby(sort=False)` iterates, without copying a frame
    of a million rows per level (only the rows a series names are taken)."""
    order = np.argsort(codes, kind="stable")
    order = order[codes[order] >= 0]
    starts = np.flatnonzero(np.diff(codes[order])) + 1
    return sorted(((int(codes[p[0]]), p) for p in np.split(order, starts) if len(p)), key=lambda cp: cp[1][0])


def _lines(ax, rows: pd.DataFrame, x: pd.Series, families: pd.Series, column: str, cats, log_y: bool,
           what: str, fmt: str) -> None:
    """One line per variant and shape family in the variant's style, error bars from the stored
    quantiles. Shapes that form no line (one point in their family, or categories) are points,
    dodged within their category; one legend entry per variant."""
    styles = palette.styles(rows)
    variant_codes, variants = pd.factorize(rows["variant"])
    family_codes = pd.factorize(families)[0]
    x_at, y_at = x.to_numpy(float), rows[column].to_numpy(float)
    by_variant = [(variants[v], [(f, at[p]) for f, p in _groups(family_codes[at])]) for v, at in _groups(variant_codes)]
    lined = set() if cats is not None else {f for _, fs in by_variant for f, at in fs if len(at) > 1}
    offsets = _dodge(list(variants))
    for variant, by_family in by_variant:
        style = styles[variant]
        _entry(ax, variant, style, line=bool(lined))
        points = []
        for family, at in by_family:
            if cats is not None or family not in lined or len(at) == 1:
                points.append(at)
                continue
            xs, ys, yerr, named = _along(rows, at, x_at, column)
            names = _names(named, what, column, fmt) if named is not None else \
                [f"{variant} at size {v:.0f}: median {what} {y:{fmt}}" for v, y in zip(xs, ys)]
            _series(ax, xs, ys, yerr, names, style, style.dash)
        if points:
            at = np.concatenate(points)
            at = at[_distinct(x_at[at], y_at[at], cats is None, log_y)]
            g = rows.iloc[at]
            xs = x_at[at] + (offsets[variant] if cats is not None else 0.0)
            _series(ax, xs, g[column], None if len(g) > MAX_BARS else error_bars(g, column),
                    _names(g, what, column, fmt), style, None)


def throughput(df: pd.DataFrame, workload: str, path: Path) -> Path | None:
    rows = _speed_rows(df, workload)
    rows = _kept(rows, rows["tflops"].notna())
    if rows["variant"].nunique() < 2:  # one precision alone: nothing to set it against
        return None
    x, xlabel, cats, families = _x(rows)
    fig, axes = figures.new(*_size(cats))
    ax = axes[0, 0]
    log_y = _wide(pd.concat([rows["tflops"], rows["peak_tflops"].dropna()]))
    _lines(ax, rows, x, families, "tflops", cats, log_y, "TFLOP/s", ".4g")
    for precision, peak in rows.groupby("precision", sort=False)["peak_tflops"]:
        peak = peak.dropna()
        if len(peak):
            ax.axhline(float(peak.iloc[0]), color=palette.precision_style(precision).colour, ls=(0, (1, 3)), lw=1,
                       label=f"{precision} vendor peak")
    if log_y:
        ax.set_yscale("log")
    ax.set_ylabel("TFLOP/s (median)")
    ax.set_title(f"{workload}: throughput by precision (bars: each case's p10-p90)")
    return _finish(fig, ax, xlabel, cats, path, x)


def speedup(df: pd.DataFrame, workload: str, path: Path) -> Path | None:
    rows = _speed_rows(df, workload)
    rows = _kept(rows, rows["speedup"].notna() & (rows["precision"] != rows["baseline"]), SPEEDUP_COLUMNS)
    if rows.empty:  # each series is set against the baseline's 1x line: one is enough
        return None
    x, xlabel, cats, families = _x(rows)
    fig, axes = figures.new(*_size(cats))
    ax = axes[0, 0]
    log_y = _wide([*rows["speedup"].agg(["min", "max"]), 1.0])
    _lines(ax, rows, x, families, "speedup", cats, log_y, "speedup", ".3g")
    ax.axhline(1.0, color="k", lw=1)
    if log_y:
        ax.set_yscale("log")
    ax.set_ylabel(f"speedup over {rows['baseline'].iloc[0]} (x)")
    ax.set_title(f"{workload}: speedup over the baseline precision ({speedup_bars_title(rows)})")
    return _finish(fig, ax, xlabel, cats, path, x)


def pareto_front(errors: np.ndarray, speedups: np.ndarray) -> np.ndarray:
    """Indices of the cases no other case beats on both counts (lower error and higher speedup),
    by increasing error: the best speedup each accuracy can buy."""
    order = np.lexsort((-speedups, errors))
    best_before = np.maximum.accumulate(np.concatenate([[-np.inf], speedups[order][:-1]]))
    return order[speedups[order] > best_before].astype(int)


def tradeoff(df: pd.DataFrame, workload: str, path: Path) -> Path | None:
    """Speed against accuracy, one point per case (the baseline precision at 1x), the Pareto front
    drawn: what each precision costs and buys. Only where two or more precisions were timed."""
    rows = _speed_rows(df, workload)
    rows = _kept(rows, rows["speedup"].notna() & rows["rel_err"].notna() & (rows["rel_err"] > 0))
    if rows["variant"].nunique() < 2:
        return None
    fig, axes = figures.new(8.5, 4.6)
    ax = axes[0, 0]
    errors, speedups = rows["rel_err"].to_numpy(float), rows["speedup"].to_numpy(float)
    log_y = _wide([speedups.min(), speedups.max(), 1.0])
    styles = palette.styles(rows)
    variant_codes, variants = pd.factorize(rows["variant"])
    for code, at in _groups(variant_codes):
        variant, g = variants[code], rows.iloc[at[_distinct(errors[at], speedups[at], True, log_y)]]
        _entry(ax, variant, styles[variant], line=False)
        _points(ax, g["rel_err"], g["speedup"],
                [f"{variant} {s}: rel. error {e:.3g}, speedup {v:.3g}x"
                 for s, e, v in zip(g["shape"], g["rel_err"], g["speedup"])], styles[variant])
    front = pareto_front(errors, speedups)
    if len(front) > 1:
        ax.step(errors[front], speedups[front], where="post", color="k", ls="--", lw=1, label="Pareto front")
    ax.set_xscale("log")
    if log_y:
        ax.set_yscale("log")
    ax.axhline(1.0, color="k", lw=0.8, alpha=0.5)
    ax.set_xlabel("relative error vs the reference (Frobenius; lower is better)")
    ax.set_ylabel(f"speedup over {rows['baseline'].iloc[0]} (x; higher is better)")
    ax.set_title(f"{workload}: speed against accuracy, one point per case")
    ax.grid(True, which="both", alpha=0.25)
    _legend(ax)
    return figures.save(fig, path)


# The accuracy chart's panels: (column, axis label, log axis, name in a point's hover text, format)
ACCURACY_PANELS = (("rel_err", "relative error vs the reference (lower is better)", True, "rel. error", ".3g"),
                   ("sqnr_db", "SQNR (dB; higher is better)", False, "SQNR", ".1f"))


def accuracy(df: pd.DataFrame, workload: str, path: Path) -> Path | None:
    """Relative error and SQNR per recipe and shape, emulated recipes included ("numerics only"):
    the chart of runs whose speed is emulated or absent, where speed against accuracy would show
    the baseline alone. Drawn when some precision has accuracy but no real speed, and two or more
    precisions have accuracy."""
    rows = with_labels(df)
    rows = rows[(rows["workload"] == workload) & (rows["status"] == "ok")]
    panels = [p for p in ACCURACY_PANELS if p[0] in rows and rows[p[0]].notna().any()]
    if not panels or rows["variant"].nunique() < 2:
        return None
    rows = rows[rows[panels[0][0]].notna()]
    speed = pd.to_numeric(rows["speedup"], errors="coerce") if "speedup" in rows else pd.Series(np.nan, index=rows.index)
    timed = ~is_emulated(rows) & speed.notna()
    if timed.all() or rows["variant"].nunique() < 2:
        return None
    cats = _categories(rows)
    fig, axes = figures.new(max(5.0, 0.45 * len(cats) + 3) * len(panels) + 2.5, 4.8, 1, len(panels))
    emulated = set(rows.loc[is_emulated(rows), "variant"])
    for ax, panel in zip(axes[0], panels):
        _accuracy_panel(ax, rows, cats, emulated, panel)
    handles, labels = axes[0, 0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="outside right center", fontsize=8)
    fig.suptitle(f"{workload}: error against the reference, per recipe and shape"
                 + (" (emulated recipes: numerics only, no speed)" if emulated else ""))
    return figures.save(fig, path)


def _accuracy_panel(ax, rows: pd.DataFrame, cats: dict, emulated: set, panel) -> None:
    column, ylabel, log, what, fmt = panel
    styles = palette.styles(rows)
    offsets = _dodge(list(dict.fromkeys(rows["variant"])))
    for variant, g in rows.groupby("variant", sort=False):
        g = g[g[column].notna()]
        _entry(ax, variant + (NUMERICS_ONLY if variant in emulated else ""), styles[variant], line=False)
        xs = g["shape"].map(cats).astype(float) + offsets[variant]
        _points(ax, xs, g[column], _names(g, what, column, fmt), styles[variant], size=36)
    if log and (rows[column] > 0).all():
        ax.set_yscale("log")
    ax.margins(y=0.08)  # markers at the extremes stay whole
    ax.set_ylabel(ylabel)
    ax.set_xlabel("case")
    _category_ticks(ax, cats)
    ax.grid(True, which="both", alpha=0.25)


def sweep(df: pd.DataFrame, workload: str, path: Path, x: str, y: str, xlabel: str, ylabel: str,
          title: str, vary: str | None = None, speed: bool = False, baseline: bool = True,
          min_points: int = 2) -> Path | None:
    """Column `y` against column `x` (log axis), one line per variant (and shape, where there are
    several); where `vary` names the parameter that moves x, one line per variant, shape and every
    other parameter, and lines of fewer than `min_points` sizes are left out (a block-size sweep at
    two outlier magnitudes is no line of the magnitude sweep). Accuracy, so emulated rows (FP8 on a
    CPU) are drawn too, unless `speed`; `baseline` False leaves out the baseline precision (a
    speedup over itself is 1). One line and no `vary` is nothing to compare: no plot."""
    if x not in df or y not in df:
        return None
    rows = with_labels(df)
    rows = rows[(rows["workload"] == workload) & (rows["status"] == "ok") & rows[y].notna() & rows[x].notna()]
    if speed:
        rows = rows[~is_emulated(rows)]
    if not baseline:
        rows = rows[rows["precision"] != rows["baseline"]]
    if rows.empty:
        return None
    dims = rows.apply(lambda r: f"{int(r['m'])}x{int(r['k'])}x{int(r['n'])}", axis=1)
    # Swept by a parameter (`vary`), a line is a precision and its other parameters (the variant's
    # name would hold the swept one where it is the precision's own, a point per line).
    others = rows["params"].map(lambda p: _params_text(p, vary)) if vary else pd.Series("", index=rows.index)
    names = rows["precision"] if vary else rows["variant"]
    lines = [(key, g) for key, g in rows.groupby([names, dims, others], sort=False)
             if not vary or g[x].nunique() >= min_points]
    if not lines or (len(lines) < 2 and not vary):
        return None
    common = set.intersection(*(set(other.split()) for (_, _, other), _ in lines))  # said by no label
    labels = [" ".join(t for t in (name, dim if dims.nunique() > 1 else "",
                                   " ".join(w for w in other.split() if w not in common)) if t)
              for (name, dim, other), _ in lines]
    styles = palette.styles(pd.DataFrame({"precision": [g["precision"].iloc[0] for _, g in lines], "variant": labels}))
    fig, axes = figures.new(8.5, 4.6)
    ax = axes[0, 0]
    for label, (_, g) in zip(labels, lines):
        g, style = g.sort_values(x), styles[label]
        ax.plot(g[x].astype(float), g[y].astype(float), color=style.colour, ls=style.dash, lw=1.3)
        _entry(ax, label, style)
        _points(ax, g[x].astype(float), g[y].astype(float),
                [f"{label} {x}={a:g}: {b:.3g}" for a, b in zip(g[x].astype(float), g[y].astype(float))], style)
    ax.set_xscale("log")
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(f"{workload}: {title}")
    ax.grid(True, which="both", alpha=0.3)
    _legend(ax)
    return figures.save(fig, path)


def _params_text(params, leave_out: str) -> str:
    """A case's parameters but one, as 'key=value' words (a line's label beside its variant)."""
    try:
        values = json.loads(params) if isinstance(params, str) else dict(params or {})
    except (ValueError, TypeError):
        return ""
    return " ".join(f"{k}={v}" for k, v in sorted(values.items()) if k != leave_out)


# In report order: the speed-accuracy trade-off first (the error per recipe and shape where speed is
# emulated or absent), then its parts; every workload gets these.
PLOTS = {
    "tradeoff": tradeoff,
    "accuracy": accuracy,
    "throughput": throughput,
    "speedup": speedup,
}
# The drawings a folder's `Plot` may name (`suite.scenario.declare.Plot`), each called with its options.
DRAWINGS = {"sweep": sweep}


@dataclass(frozen=True)
class Kit:
    """What a folder's own drawing is handed (its module sits before the report and may not import
    it): the figures (`new`, `name`, `save`), the one palette, and the records' short names and
    emulation mask as the report's own plots take them."""

    figures: ModuleType
    palette: ModuleType
    with_labels: Callable[[pd.DataFrame], pd.DataFrame]
    is_emulated: Callable[[pd.DataFrame], pd.Series]


KIT = Kit(figures=figures, palette=palette, with_labels=with_labels, is_emulated=is_emulated)


def _drawing(plot) -> Callable:
    """A declared plot as draw(df, workload, path): a drawing of DRAWINGS by name, else the folder's
    own "module:function", handed the KIT."""
    if plot.draw in DRAWINGS:
        return functools.partial(DRAWINGS[plot.draw], **plot.options)
    return functools.partial(registry.load(plot.draw), kit=KIT, **plot.options)


def for_workload(workload: str) -> dict:
    """The plots of a workload's records: PLOTS, then those its folder declares, then those every
    folder's hooks declare (`suite.scenario.declare.Hooks.plots`), by name."""
    record = registry.WORKLOADS.get(workload)
    own = record.plots if record else ()
    hooked = tuple(plot for hooks in registry.HOOKS.values() for plot in hooks.plots)
    return {**PLOTS, **{plot.name: _drawing(plot) for plot in own + hooked}}
