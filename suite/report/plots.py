"""PNG plots of records (matplotlib, Agg backend: no display needed). Plots draw, never compute:
every value comes from a record column or from `suite.analysis`."""

from __future__ import annotations

import functools
import json
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from suite.results.atomic import atomic_write  # noqa: E402
from suite.analysis.derived import is_emulated, shape_label, shape_labels, vocab_padding  # noqa: E402
from suite.scenario import registry  # noqa: E402


def _x(df: pd.DataFrame) -> tuple[pd.Series, str, dict | None, pd.Series]:
    """x positions: the equivalent square size (M*K*N)^(1/3) where shapes form lines (`_families`),
    else one category per shape, ordered by size; the axis label, the categories, and each row's
    line (its family; one for all on a category axis)."""
    shaped = df["m"].notna().all()
    if shaped:
        size = (df["m"].astype(float) * df["k"].astype(float) * df["n"].astype(float)) ** (1 / 3)
        families = _families(df)
        by_line = size.groupby([df["precision"], families])
        if ((by_line.max() / by_line.min()) >= LINE_SPAN).any():
            return size, "problem size (M*K*N)^(1/3)", None, families
    labels = shape_labels(df)
    order = size.groupby(labels).first().sort_values() if shaped else pd.Series(0, index=sorted(set(labels)))
    pos = {label: i for i, label in enumerate(order.index)}
    return labels.map(pos), "case", pos, pd.Series("", index=df.index)


# A family of shapes spanning less than this factor in size is drawn as categories: its points
# would sit on top of each other on a size axis (the lm_head GEMMs of vocabularies 50257..50432).
LINE_SPAN = 1.5


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
    return pd.Series(np.where(m == 0, "", named)[shape], index=df.index)


MARKERS = "osD^v<>PX*h"
DASHES = ["-", "--", ":", "-."]


def save_figure(fig, path: Path) -> Path:
    """Lay out, write atomically (concurrent renders never leave half a PNG), and free the figure.
    The folder (a report's staging folder) must exist: one that vanished fails the render."""
    try:
        fig.tight_layout()
        atomic_write(path, lambda tmp: fig.savefig(tmp, dpi=110, format="png"), parents=False)
    finally:
        plt.close(fig)
    return path


def _wide(values) -> bool:
    """Whether the positive values span more than a decade (then their axis is logarithmic)."""
    v = pd.to_numeric(pd.Series(values), errors="coerce").to_numpy(float)
    v = v[np.isfinite(v) & (v > 0)]
    return bool(len(v)) and v.max() / v.min() > 10


# Beyond this many points in one series, points that land in one cell of a GRID x GRID grid over
# the series' range (about a pixel of the figures' axes, a fifth of a marker) are drawn once: a
# million markers take seconds to draw and show nothing their distinct positions do not.
MAX_POINTS = 5000
GRID = 500


def _distinct(x, y, log_x: bool, log_y: bool) -> np.ndarray:
    """Positions (into x and y) of the points to draw: all of them up to MAX_POINTS, else the first
    point of each cell of a GRID x GRID grid over the series' range (log where the axis is)."""
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    if len(x) <= MAX_POINTS:
        return np.arange(len(x))

    def cell(v, log):
        v = np.log10(np.where(v > 0, v, np.nan)) if log else v
        lo, hi = np.nanmin(v), np.nanmax(v)
        return np.nan_to_num(np.floor((v - lo) / ((hi - lo) or 1.0) * GRID), nan=-1).astype(np.int64)

    return np.sort(np.unique(cell(x, log_x) * (GRID + 2) + cell(y, log_y), return_index=True)[1])


def plain_log_ticks(ax, axis: str = "x", subs: tuple[float, ...] = (1.0, 2.0, 5.0)) -> None:
    """Log-axis ticks at 1, 2, 5 x 10^k (`subs`) written as plain numbers (0.5, 2, 20, 1e-05), no
    minor labels: matplotlib's default `2 x 10^0` labels overlap on a short axis (and its TeX-like
    labels cost a mathtext parse each)."""
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    target = ax.xaxis if axis == "x" else ax.yaxis
    target.set_major_locator(LogLocator(base=10, subs=subs))
    target.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    target.set_minor_formatter(NullFormatter())


def _legend(ax) -> None:
    """Inside when short; beside the axes when long, so it never covers the data."""
    handles, labels = ax.get_legend_handles_labels()
    if not handles:
        return
    if len(handles) > 5:
        ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0)
    else:
        ax.legend(fontsize=8, loc="best")


def _finish(fig, ax, xlabel, categories, path: Path, x: pd.Series | None = None) -> Path:
    ax.set_xlabel(xlabel)
    if categories is None:
        ax.set_xscale("log", base=2)
        ticks = []
        for v in np.unique(x.to_numpy(float)) if x is not None else []:
            if not ticks or v > 1.08 * ticks[-1]:  # labels that would touch are left out
                ticks.append(v)
        if 0 < len(ticks) <= 12:  # ticks at the measured sizes: a narrow log axis has none of its own
            ax.set_xticks(ticks, [f"{v:.0f}" for v in ticks], fontsize=7)
            ax.minorticks_off()
    else:
        ax.set_xticks(list(categories.values()), list(categories.keys()), rotation=30, ha="right", fontsize=7)
    ax.grid(True, which="both", alpha=0.25)
    _legend(ax)
    return save_figure(fig, path)


def _size(categories: dict | None) -> tuple[float, float]:
    """Wide enough that category labels do not overlap."""
    return (max(8.0, 0.45 * len(categories) + 3) if categories else 8.0), 4.5


# What the speed plots read of a record: taken first, so a million rows' grouping moves a few columns.
SPEED_COLUMNS = ["workload", "precision", "baseline", "m", "k", "n", "params", "tflops", "peak_tflops",
                 "speedup", "rel_err", "time_ms_median", "time_ms_p10", "time_ms_p90"]


def _speed_rows(df: pd.DataFrame, workload: str) -> pd.DataFrame:
    """The workload's rows whose timing is real device speed (not failed, skipped or emulated)."""
    rows = df[(df["workload"] == workload) & (df["status"] == "ok") & ~is_emulated(df)]
    return rows.reindex(columns=SPEED_COLUMNS)  # a column no record fills is all null


def _spread(rows: pd.DataFrame, value: pd.Series) -> np.ndarray:
    """Error bars (below, above) for a rate proportional to 1/time: from the stored 10th and 90th
    percentile times, value * median / p90 .. value * median / p10."""
    def column(name):
        return pd.to_numeric(rows[name], errors="coerce").to_numpy(float) if name in rows else np.full(len(rows), np.nan)

    median, p10, p90 = column("time_ms_median"), column("time_ms_p10"), column("time_ms_p90")
    v = value.to_numpy(float)
    low, high = v * median / p90, v * median / p10
    return np.nan_to_num(np.vstack([v - low, high - v]), nan=0.0).clip(min=0)


def _lines(ax, rows: pd.DataFrame, x: pd.Series, families: pd.Series, column: str, cats, log_y: bool) -> None:
    """One line per precision and shape family, with distinct markers and dashes (so precisions
    with the same numbers stay visible) and error bars from the stored quantiles. Shapes that form
    no line (one point in their family, or categories) are points, one legend entry per precision."""
    counts = rows.groupby([rows["precision"], families]).size()
    lined = set() if cats is not None else {f for (_, f), n in counts.items() if n > 1}
    for i, (precision, by_precision) in enumerate(rows.groupby("precision", sort=False)):
        style = dict(color=f"C{i % 10}", marker=MARKERS[i % len(MARKERS)], ms=5, capsize=2, lw=1.2)
        points = []
        for j, (family, g) in enumerate(by_precision.groupby(families[by_precision.index], sort=False)):
            if cats is not None or family not in lined or len(g) == 1:
                points.append(g)
                continue
            label = f"{precision} ({family})" if len(lined) > 1 else precision
            xs, ys, yerr = _along(g, x[g.index], column)
            ax.errorbar(xs, ys, yerr=yerr, ls=DASHES[j % len(DASHES)], label=label, **style)
        if points:
            g = pd.concat(points)
            label = precision if len(lined) == 0 else f"{precision} (other shapes)"
            many = len(g) > MAX_BARS  # thousands of error bars hide the points they belong to
            shown = _distinct(x[g.index], g[column], cats is None, log_y)
            g = g.iloc[shown]
            ax.errorbar(x[g.index], g[column], yerr=None if many else _spread(g, g[column]), ls="none",
                        label=label, **style)


# Above this many points in one series, error bars are left out.
MAX_BARS = 500


def _along(g: pd.DataFrame, x: pd.Series, column: str):
    """A line's points in x order with their error bars: each case's own p10-p90, or, where several
    cases share a size (parameter variants), their median with the p10-p90 across them."""
    if x.nunique() == len(g):
        order = np.argsort(x.to_numpy())
        g = g.iloc[order]
        return x.to_numpy()[order], g[column].to_numpy(float), _spread(g, g[column])
    by = g[column].astype(float).groupby(x.to_numpy())
    mid, low, high = by.median(), by.quantile(0.1), by.quantile(0.9)
    return mid.index.to_numpy(), mid.to_numpy(), np.vstack([mid - low, high - mid])


def throughput(df: pd.DataFrame, workload: str, path: Path) -> Path | None:
    rows = _speed_rows(df, workload)
    rows = rows[rows["tflops"].notna()]
    if rows.empty:
        return None
    x, xlabel, cats, families = _x(rows)
    fig, ax = plt.subplots(figsize=_size(cats))
    log_y = _wide(pd.concat([rows["tflops"], rows["peak_tflops"].dropna()]))
    _lines(ax, rows, x, families, "tflops", cats, log_y)
    for i, (precision, g) in enumerate(rows.groupby("precision", sort=False)):
        peak = g["peak_tflops"].dropna()
        if len(peak):
            ax.axhline(float(peak.iloc[0]), color=f"C{i % 10}", ls=(0, (1, 3)), lw=1, label=f"{precision} vendor peak")
    if log_y:
        ax.set_yscale("log")
        plain_log_ticks(ax, "y")
    ax.set_ylabel("TFLOP/s (median; bars: p10-p90)")
    ax.set_title(f"{workload}: throughput by precision")
    return _finish(fig, ax, xlabel, cats, path, x)


def speedup(df: pd.DataFrame, workload: str, path: Path) -> Path | None:
    rows = _speed_rows(df, workload)
    rows = rows[rows["speedup"].notna() & (rows["precision"] != rows["baseline"])]
    if rows.empty:
        return None
    x, xlabel, cats, families = _x(rows)
    fig, ax = plt.subplots(figsize=_size(cats))
    log_y = _wide([*rows["speedup"].agg(["min", "max"]), 1.0])
    _lines(ax, rows, x, families, "speedup", cats, log_y)
    ax.axhline(1.0, color="k", lw=1)
    if log_y:
        ax.set_yscale("log")
        plain_log_ticks(ax, "y")
    ax.set_ylabel(f"speedup over {rows['baseline'].iloc[0]} (x; bars: the case's p10-p90)")
    ax.set_title(f"{workload}: speedup over the baseline precision")
    return _finish(fig, ax, xlabel, cats, path, x)


def pareto_front(errors: np.ndarray, speedups: np.ndarray) -> np.ndarray:
    """Indices of the cases no other case beats on both counts (lower error and higher speedup),
    by increasing error: the best speedup each accuracy can buy."""
    order = np.lexsort((-speedups, errors))
    best_before = np.maximum.accumulate(np.concatenate([[-np.inf], speedups[order][:-1]]))
    return order[speedups[order] > best_before].astype(int)


def accuracy_vs_speedup(df: pd.DataFrame, workload: str, path: Path) -> Path | None:
    """Speed against accuracy, one point per case (the baseline precision at 1x), the Pareto front
    drawn: what each precision costs and buys."""
    rows = _speed_rows(df, workload)
    rows = rows[rows["speedup"].notna() & rows["rel_err"].notna() & (rows["rel_err"] > 0)]
    if rows.empty:
        return None
    fig, ax = plt.subplots(figsize=(8, 4.5))
    errors, speedups = rows["rel_err"].to_numpy(float), rows["speedup"].to_numpy(float)
    log_y = _wide([speedups.min(), speedups.max(), 1.0])
    for i, (precision, g) in enumerate(rows.groupby("precision", sort=False)):
        g = g.iloc[_distinct(g["rel_err"], g["speedup"], True, log_y)]
        # markers of a line without one (Agg stamps one marker image): a scatter's path collection
        # draws each point on its own, seconds for a few hundred thousand
        ax.plot(g["rel_err"], g["speedup"], ls="none", marker=MARKERS[i % len(MARKERS)], ms=5.3,
                color=f"C{i % 10}", alpha=0.8, label=precision)
    front = pareto_front(errors, speedups)
    if len(front) > 1:
        ax.step(errors[front], speedups[front], where="post", color="k", ls="--", lw=1, label="Pareto front")
    ax.set_xscale("log")
    plain_log_ticks(ax, "x", subs=(1.0,))
    if log_y:
        ax.set_yscale("log")
        plain_log_ticks(ax, "y")
    ax.axhline(1.0, color="k", lw=0.8, alpha=0.5)
    ax.set_xlabel("relative error vs the reference (Frobenius; lower is better)")
    ax.set_ylabel(f"speedup over {rows['baseline'].iloc[0]} (x; higher is better)")
    ax.set_title(f"{workload}: speed against accuracy, one point per case")
    ax.grid(True, which="both", alpha=0.25)
    _legend(ax)
    return save_figure(fig, path)


def _as_list(value) -> list[float]:
    """A list column's cell (a list, a numpy array after a parquet round trip, None or NA) as floats."""
    if value is None or not hasattr(value, "__len__"):
        return []
    return [float(v) for v in value]


def loss_curves(df: pd.DataFrame, workload: str, path: Path) -> Path | None:
    """Training loss per step for each precision, one panel per model configuration, with the
    fp32 reference run (same init, same batches), the corpus's entropy floor and unigram entropy.
    Loss is numerics, so emulated rows (FP8 on a CPU) are drawn too."""
    rows = df[(df["workload"] == workload) & (df["status"] == "ok")]
    if "loss_curve" not in rows or rows.empty:
        return None
    rows = rows[[len(_as_list(c)) > 0 for c in rows["loss_curve"]]]
    if rows.empty:
        return None
    configs = list(dict.fromkeys(rows["params"]))
    shown = configs[:8]  # beyond eight panels nothing is readable; the records keep every curve
    cols = min(2, len(shown))
    nrows = (len(shown) + cols - 1) // cols
    fig, axes = plt.subplots(nrows, cols, figsize=(6.5 * cols, 3.8 * nrows), squeeze=False)
    for ax, config in zip(axes.flat, shown):
        g = rows[rows["params"] == config]
        first = g.iloc[0]
        ref = _as_list(first.get("fp32_loss_curve"))
        if ref:
            ax.plot(range(len(ref)), ref, color="k", lw=2.5, alpha=0.25, label="fp32 reference")
        for i, (_, r) in enumerate(g.iterrows()):
            curve = _as_list(r["loss_curve"])
            mark = " (diverged)" if bool(r.get("diverged")) else ""
            emu = " (emulated)" if bool(r.get("emulated")) else ""
            ax.plot(range(len(curve)), curve, color=f"C{i}", lw=1.2, label=f"{r['precision']}{mark}{emu}")
        for column, style, text in (("entropy_floor", ":", "entropy floor"), ("unigram_entropy", "-.", "unigram entropy")):
            if pd.notna(first.get(column)):
                ax.axhline(float(first[column]), color="gray", ls=style, lw=1, label=text)
        ax.set_title(shape_label(first).replace(" ", ", "), fontsize=7)
        ax.set_xlabel("step")
        ax.set_ylabel("loss (nats/token)")
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=7)
    for ax in list(axes.flat)[len(shown):]:
        ax.set_visible(False)
    fig.suptitle(f"{workload}: training loss by precision" + (f" (first 8 of {len(configs)} configurations)" if len(configs) > 8 else ""))
    return save_figure(fig, path)


def vocab_padding_effect(df: pd.DataFrame, workload: str, path: Path, gemms: str) -> Path | None:
    """Padding the vocabulary: speedup over the smallest vocabulary for the lm_head GEMMs (the
    `gemms` workload's cases, left) and for the whole training step (right, annotated with the
    lm_head GEMMs' share of the step). Every number comes from `suite.analysis.derived.vocab_padding`."""
    table = vocab_padding(df, workload, gemms)
    if table.empty:
        return None
    gemm = table[table["level"] == f"{gemms} total"]
    if gemm.empty:
        gemm = table[table["level"] == f"{gemms} forward"]
    step = table[table["level"] == workload]
    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4.2))
    for ax, part, title in ((left, gemm, f"lm_head GEMMs ({gemm['level'].iloc[0] if len(gemm) else 'none measured'})"),
                            (right, step, "training step")):
        if part.empty:
            ax.text(0.5, 0.5, "not measured", ha="center", va="center", transform=ax.transAxes)
            ax.set_axis_off()
            continue
        groups = list(part.groupby(["precision", "config", "tokens", "d_model"], sort=False))
        vocabs = sorted(part["vocab"].unique())
        width = 0.8 / len(groups)
        for i, ((precision, config, tokens, d), g) in enumerate(groups):
            xs = [vocabs.index(v) + (i - (len(groups) - 1) / 2) * width for v in g["vocab"]]
            label = precision if len(groups) == len(part["precision"].unique()) else f"{precision} T={tokens} d={d}"
            bars = ax.bar(xs, g["speedup"], width=width, label=label, color=f"C{i}")
            if ax is right:
                for bar, share in zip(bars, g["lm_head_share"]):
                    if pd.notna(share):
                        ax.annotate(f"lm_head {share:.0%}", (bar.get_x() + bar.get_width() / 2, bar.get_height()),
                                    ha="center", va="bottom", fontsize=6, rotation=90)
        ax.axhline(1.0, color="k", lw=1)
        ax.margins(y=0.25)  # room for the lm_head labels above the bars
        ax.set_xticks(range(len(vocabs)), [str(v) for v in vocabs])
        ax.set_xlabel("vocabulary size (N of the lm_head GEMM)")
        ax.set_ylabel(f"speedup over vocab {min(vocabs)} (x)")
        ax.set_title(title, fontsize=9)
        ax.grid(True, axis="y", alpha=0.3)
        ax.legend(fontsize=7)
    fig.suptitle("vocabulary padding: time at the unpadded size / time at each size")
    return save_figure(fig, path)


def sweep(df: pd.DataFrame, workload: str, path: Path, x: str, y: str, xlabel: str, ylabel: str,
          title: str, vary: str | None = None, speed: bool = False, baseline: bool = True,
          min_points: int = 2) -> Path | None:
    """Column `y` against column `x` (log axis), one line per precision and shape; where `vary`
    names the parameter that moves x, one line per precision, shape and every other parameter, and
    lines of fewer than `min_points` sizes are left out (a block-size sweep at two outlier
    magnitudes is no line of the magnitude sweep). Accuracy, so emulated rows (FP8 on a CPU) are drawn too, unless `speed`;
    `baseline` False leaves out the baseline precision (a speedup over itself is 1)."""
    if x not in df or y not in df:
        return None
    rows = df[(df["workload"] == workload) & (df["status"] == "ok") & df[y].notna() & df[x].notna()]
    if speed:
        rows = rows[~is_emulated(rows)]
    if not baseline:
        rows = rows[rows["precision"] != rows["baseline"]]
    if rows.empty:
        return None
    shapes = rows.apply(lambda r: f"{int(r['m'])}x{int(r['k'])}x{int(r['n'])}", axis=1)
    others = rows["params"].map(lambda p: _params_text(p, vary)) if vary else pd.Series("", index=rows.index)
    lines = [(key, g) for key, g in rows.groupby([rows["precision"], shapes, others], sort=False)
             if not vary or g[x].nunique() >= min_points]
    if not lines:
        return None
    common = set.intersection(*(set(other.split()) for (_, _, other), _ in lines))  # said by no label
    fig, ax = plt.subplots(figsize=(7, 4.2))
    for i, ((precision, shape, other), g) in enumerate(lines):
        g = g.sort_values(x)
        own = " ".join(word for word in other.split() if word not in common)
        label = " ".join(t for t in (precision, shape if shapes.nunique() > 1 else "", own) if t)
        # markers and dashes differ so that recipes with identical numbers stay visible
        ax.plot(g[x].astype(float), g[y].astype(float), marker="osD^v<>"[i % 7],
                ls="-" if i % 2 == 0 else "--", color=f"C{i % 10}", label=label)
    ax.set_xscale("log")
    span = rows[x].astype(float)
    plain_log_ticks(ax, "x", subs=(1.0, 2.0, 5.0) if span.max() / span.min() < 1e3 else (1.0,))
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(f"{workload}: {title}")
    ax.grid(True, alpha=0.3)
    _legend(ax)
    return save_figure(fig, path)


def _params_text(params, leave_out: str) -> str:
    """A case's parameters but one, as 'key=value' words (a line's label beside its precision)."""
    try:
        values = json.loads(params) if isinstance(params, str) else dict(params or {})
    except (ValueError, TypeError):
        return ""
    return " ".join(f"{k}={v}" for k, v in sorted(values.items()) if k != leave_out)


# In report order: the speed-accuracy trade-off first, then its parts; every workload gets these.
PLOTS = {
    "accuracy": accuracy_vs_speedup,
    "throughput": throughput,
    "speedup": speedup,
    "loss": loss_curves,
}


def for_workload(workload: str) -> dict:
    """The plots of a workload's records: PLOTS, then those its folder declares, by name."""
    record = registry.WORKLOADS.get(workload)
    declared = {plot.name: functools.partial(registry.load(plot.draw), **plot.options)
                for plot in (record.plots if record else ())}
    return {**PLOTS, **declared}
