"""PNG plots of records (matplotlib, Agg backend: no display needed). Plots draw, never compute:
every value comes from a record column or from `suite.analysis`."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from suite.analysis import is_emulated, shape_label  # noqa: E402


def _x(df: pd.DataFrame) -> tuple[pd.Series, str, dict | None]:
    """x positions: the equivalent square size (M*K*N)^(1/3) for shaped cases, else categories."""
    if df["m"].notna().all():
        size = (df["m"].astype(float) * df["k"].astype(float) * df["n"].astype(float)) ** (1 / 3)
        return size, "problem size (M*K*N)^(1/3)", None
    labels = sorted({shape_label(r) for _, r in df.iterrows()})
    pos = {label: i for i, label in enumerate(labels)}
    return df.apply(lambda r: pos[shape_label(r)], axis=1), "case", pos


def _finish(fig, ax, xlabel, categories, path: Path) -> Path:
    ax.set_xlabel(xlabel)
    if categories is None:
        ax.set_xscale("log", base=2)
    else:
        ax.set_xticks(list(categories.values()), list(categories.keys()), rotation=30, ha="right")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


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
    ax.set_xlabel("relative error vs float64 (Frobenius)")
    ax.set_ylabel("speedup over baseline (x)")
    ax.set_title(f"{workload}: what each precision costs and buys")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


PLOTS = {"throughput": throughput, "speedup": speedup, "accuracy": accuracy_vs_speedup}
