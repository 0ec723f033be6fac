"""PNG plots of records (matplotlib, Agg backend: no display needed). Plots draw, never compute:
every value comes from a record column or from `suite.analysis`."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from suite.results.atomic import atomic_write  # noqa: E402
from suite.analysis.derived import is_emulated, shape_label, vocab_padding  # noqa: E402


def _x(df: pd.DataFrame) -> tuple[pd.Series, str, dict | None]:
    """x positions: the equivalent square size (M*K*N)^(1/3) for shaped cases, else categories."""
    if df["m"].notna().all():
        size = (df["m"].astype(float) * df["k"].astype(float) * df["n"].astype(float)) ** (1 / 3)
        return size, "problem size (M*K*N)^(1/3)", None
    labels = sorted({shape_label(r) for _, r in df.iterrows()})
    pos = {label: i for i, label in enumerate(labels)}
    return df.apply(lambda r: pos[shape_label(r)], axis=1), "case", pos


def save_figure(fig, path: Path) -> Path:
    """Lay out, write atomically (concurrent renders never leave half a PNG), and free the figure."""
    fig.tight_layout()
    atomic_write(path, lambda tmp: fig.savefig(tmp, dpi=110, format="png"))
    plt.close(fig)
    return path


def _finish(fig, ax, xlabel, categories, path: Path) -> Path:
    ax.set_xlabel(xlabel)
    if categories is None:
        ax.set_xscale("log", base=2)
    else:
        ax.set_xticks(list(categories.values()), list(categories.keys()), rotation=30, ha="right")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    return save_figure(fig, path)


def _speed_rows(df: pd.DataFrame) -> pd.DataFrame:
    """Rows whose timing is real device speed (not failed, not skipped, not emulated)."""
    ok = df[df["status"] == "ok"]
    return ok[~is_emulated(ok)]


def throughput(df: pd.DataFrame, workload: str, path: Path) -> Path | None:
    rows = _speed_rows(df[df["workload"] == workload])
    rows = rows[rows["tflops"].notna()]
    if rows.empty:
        return None
    fig, ax = plt.subplots(figsize=(7, 4.2))
    x, xlabel, cats = _x(rows)
    for i, (precision, g) in enumerate(rows.groupby("precision", sort=False)):
        color = f"C{i}"
        order = np.argsort(x[g.index].to_numpy())
        ax.plot(x[g.index].to_numpy()[order], g["tflops"].to_numpy()[order], "o-", color=color, label=precision)
        peak = g["peak_tflops"].dropna()
        if len(peak):
            ax.axhline(float(peak.iloc[0]), color=color, ls="--", lw=1, label=f"{precision} vendor peak")
    ax.set_ylabel("TFLOP/s (median)")
    ax.set_title(f"{workload}: throughput by precision")
    return _finish(fig, ax, xlabel, cats, path)


def speedup(df: pd.DataFrame, workload: str, path: Path) -> Path | None:
    rows = _speed_rows(df[df["workload"] == workload])
    rows = rows[rows["speedup"].notna() & (rows["precision"] != rows["baseline"])]
    if rows.empty:
        return None
    fig, ax = plt.subplots(figsize=(7, 4.2))
    x, xlabel, cats = _x(rows)
    for precision, g in rows.groupby("precision", sort=False):
        order = np.argsort(x[g.index].to_numpy())
        ax.plot(x[g.index].to_numpy()[order], g["speedup"].to_numpy()[order], "o-", label=precision)
    ax.axhline(1.0, color="k", lw=1)
    ax.set_ylabel(f"speedup over {rows['baseline'].iloc[0]} (x)")
    ax.set_title(f"{workload}: speedup over the baseline precision")
    return _finish(fig, ax, xlabel, cats, path)


def accuracy_vs_speedup(df: pd.DataFrame, workload: str, path: Path) -> Path | None:
    rows = _speed_rows(df[df["workload"] == workload])
    rows = rows[rows["speedup"].notna() & rows["rel_err"].notna() & (rows["rel_err"] > 0)]
    if rows.empty:
        return None
    fig, ax = plt.subplots(figsize=(7, 4.2))
    for precision, g in rows.groupby("precision", sort=False):
        ax.scatter(g["rel_err"], g["speedup"], label=precision)
    ax.set_xscale("log")
    ax.axhline(1.0, color="k", lw=1)
    ax.set_xlabel("relative error vs the reference (Frobenius)")
    ax.set_ylabel("speedup over baseline (x)")
    ax.set_title(f"{workload}: what each precision costs and buys")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    return save_figure(fig, path)


def _as_list(value) -> list[float]:
    """A list column's cell (list or numpy array after a parquet round trip) as floats."""
    if value is None or (isinstance(value, float) and np.isnan(value)):
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


def vocab_padding_effect(df: pd.DataFrame, workload: str, path: Path) -> Path | None:
    """Padding the vocabulary: speedup over the smallest vocabulary for the lm_head GEMMs (left)
    and for the whole training step (right, annotated with the lm_head GEMMs' share of the step).
    Every number comes from `suite.analysis.derived.vocab_padding`."""
    if workload != "train_step":
        return None
    table = vocab_padding(df)
    if table.empty:
        return None
    gemm = table[table["level"] == "gemm total"]
    if gemm.empty:
        gemm = table[table["level"] == "gemm forward"]
    step = table[table["level"] == "train_step"]
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


def outlier_sqnr(df: pd.DataFrame, workload: str, path: Path) -> Path | None:
    """SQNR of the untouched output rows against the planted outlier's magnitude, per recipe (the
    `outlier` workload). Accuracy, so emulated rows (FP8 on a CPU) are drawn too."""
    if workload != "outlier" or "outlier" not in df:
        return None
    rows = df[(df["workload"] == workload) & (df["status"] == "ok") & df["sqnr_db"].notna()]
    if rows.empty:
        return None
    shapes = rows.apply(lambda r: f"{int(r['m'])}x{int(r['k'])}x{int(r['n'])}", axis=1)
    fig, ax = plt.subplots(figsize=(7, 4.2))
    for i, ((precision, shape), g) in enumerate(rows.groupby([rows["precision"], shapes], sort=False)):
        g = g.sort_values("outlier")
        label = precision if shapes.nunique() == 1 else f"{precision} {shape}"
        # markers and dashes differ so that recipes with identical numbers stay visible
        ax.plot(g["outlier"].astype(float), g["sqnr_db"].astype(float), marker="osD^v<>"[i % 7],
                ls="-" if i % 2 == 0 else "--", color=f"C{i}", label=label)
    ax.set_xscale("log")
    ax.set_xlabel("outlier magnitude (one value in a standard normal activation)")
    ax.set_ylabel("SQNR of the untouched rows (dB)")
    ax.set_title(f"{workload}: how far one outlier's scale reaches")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    return save_figure(fig, path)


PLOTS = {
    "throughput": throughput,
    "speedup": speedup,
    "accuracy": accuracy_vs_speedup,
    "loss": loss_curves,
    "vocab_padding": vocab_padding_effect,
    "outlier_sqnr": outlier_sqnr,
}
