"""A training step's plots, drawn by the report from this folder's declarations (`Plot` in its
`__init__.py`, shared with `dist_train_step`): the loss curves against the fp32 twin and the effect of
padding the vocabulary. Torch-free, importing no later stage than `suite.scenario`: the report hands
each drawing its `kit` (`suite.report.plots.Kit`: the figures, the palette, short names). Plots draw,
never compute: the numbers are record columns or `derived`'s."""

from __future__ import annotations

from pathlib import Path

import matplotlib.ticker
import numpy as np
import pandas as pd

from suite.workloads.train_step.derived import vocab_padding


def _as_list(value) -> list[float]:
    """A list column's cell (a list, a numpy array after a parquet round trip, None or NA) as floats."""
    if value is None or not hasattr(value, "__len__"):
        return []
    return [float(v) for v in value]


# Beyond this many configurations nothing is readable; the records keep every curve.
MAX_PANELS = 6


def loss_curves(df: pd.DataFrame, workload: str, path: Path, kit) -> Path | None:
    """Training loss per step for each precision, a row per configuration: the loss with the fp32
    reference run (same init, same batches), the corpus's entropy floor and unigram entropy (left),
    and each curve minus the reference (right), where 0.001-nat differences show. A diverged run
    is drawn, clipped at the axis and marked: the axes are sized by the runs that did not diverge.
    Loss is numerics, so emulated rows (FP8 on a CPU) are drawn too."""
    rows = kit.with_labels(df)
    rows = rows[(rows["workload"] == workload) & (rows["status"] == "ok")]
    if "loss_curve" not in rows or rows.empty:
        return None
    rows = rows[[len(_as_list(c)) > 0 for c in rows["loss_curve"]]]
    if rows.empty:
        return None
    configs = list(dict.fromkeys(rows["shape"]))
    shown = configs[:MAX_PANELS]
    fig, axes = kit.figures.new(13.0, 3.6 * len(shown) + 0.6, len(shown), 2)
    styles = kit.palette.styles(rows)
    for (left, right), config in zip(axes, shown):
        _loss_row(kit, left, right, rows[rows["shape"] == config], styles, config)
    more = f" (first {MAX_PANELS} of {len(configs)} configurations)" if len(configs) > MAX_PANELS else ""
    fig.suptitle(f"{workload}: training loss by precision{more}")
    return kit.figures.save(fig, path)


def _diverged(r) -> bool:
    value = r.get("diverged")
    return bool(value) if value is not None and not pd.isna(value) else False


def clip_range(curves: list[np.ndarray], diverged: list[bool], margin: float = 0.08) -> tuple[float, float]:
    """The y range of the curves that did not diverge (all of them when every one did), with a margin."""
    kept = [c for c, d in zip(curves, diverged) if not d and len(c)] or [c for c in curves if len(c)]
    values = np.concatenate(kept) if kept else np.array([0.0])
    values = values[np.isfinite(values)]
    lo, hi = (float(values.min()), float(values.max())) if len(values) else (0.0, 1.0)
    pad = (hi - lo) * margin or max(abs(hi), 1e-6) * margin
    return lo - pad, hi + pad


# The loss difference axis is linear within +-this many nats and logarithmic beyond: a 0.001-nat
# difference between recipes shows beside a 0.1-nat one early in training.
DELTA_LINEAR = 1e-3


def _delta_ticks(limit: float) -> list[float]:
    decades = [10.0**e for e in range(int(np.log10(DELTA_LINEAR)), int(np.ceil(np.log10(limit))) + 1)]
    return sorted({0.0, *(d for d in decades if d <= limit), *(-d for d in decades if d <= limit)})


def _until_out(curve: np.ndarray, lo: float, hi: float) -> int:
    """How many first points of a curve stay within [lo, hi] (finite): where a diverged run is cut."""
    out = np.flatnonzero(~((curve >= lo) & (curve <= hi)))
    return int(out[0]) if len(out) else len(curve)


def _curve(kit, ax, curve: np.ndarray, lo: float, hi: float, diverged: bool, style, name: str, label=None,
           start: int = 0) -> None:
    """A loss curve from step `start` in the variant's style, named on hover; a diverged one is
    drawn until it first leaves the axis, where a black triangle marks it (the record keeps the rest)."""
    n = _until_out(curve, lo, hi) if diverged else len(curve)
    steps = np.arange(start, start + len(curve))
    line, = ax.plot(steps[: max(n, 1)], curve[: max(n, 1)], color=style.colour, ls=style.dash, lw=1.2, label=label)
    kit.figures.name(line, name)
    if n < len(curve):
        edge = hi if not (curve[n] < lo) else lo
        ax.plot([steps[n]], [edge], marker="^" if edge == hi else "v", color="k", ms=7, clip_on=False, zorder=4)


# The differences are drawn as a running mean over this share of the steps: step to step they swing
# by batch noise (the twins see the same batches, not the same rounding), the mean shows the drift.
SMOOTH_SHARE = 0.05


def running_mean(values: np.ndarray, window: int) -> np.ndarray:
    """Means of each `window` consecutive values (len - window + 1 of them)."""
    if window <= 1 or len(values) < window:
        return np.asarray(values, dtype=float)
    sums = np.cumsum(np.concatenate([[0.0], np.asarray(values, dtype=float)]))
    return (sums[window:] - sums[:-window]) / window


def _references(left, right, first, ref: np.ndarray, lo: float, hi: float, colour: str) -> None:
    """The fp32 twin's curve (0 on the right), and the corpus's floors where they fall on the axis."""
    if len(ref):
        left.plot(range(len(ref)), ref, color=colour, lw=2.5, alpha=0.35, label="fp32 reference")
        right.axhline(0.0, color=colour, lw=2.5, alpha=0.35)
    for column, style, text in (("entropy_floor", ":", "entropy floor"), ("unigram_entropy", "-.", "unigram entropy")):
        if pd.notna(first.get(column)) and lo <= float(first[column]) <= hi:
            left.axhline(float(first[column]), color="gray", ls=style, lw=1, label=text)


def _loss_row(kit, left, right, g: pd.DataFrame, styles: dict, config: str) -> None:
    first = g.iloc[0]
    ref = np.asarray(_as_list(first.get("fp32_loss_curve")), dtype=float)
    curves = [np.asarray(_as_list(c), dtype=float) for c in g["loss_curve"]]
    diverged = [_diverged(r) for r in g.to_dict("records")]
    window = max(1, round(SMOOTH_SHARE * len(ref)))
    deltas = [running_mean(c[: len(ref)] - ref[: len(c)], window) for c in curves] if len(ref) else []
    lo, hi = clip_range([*curves, ref], [*diverged, False])
    _references(left, right, first, ref, lo, hi, kit.palette.REFERENCE)
    kept = [np.abs(d) for d, bad in zip(deltas, diverged) if not bad and len(d)]
    limit = max(float(np.nanmax(np.concatenate(kept))) if kept else 0.0, 2 * DELTA_LINEAR) * 1.3
    for r, curve, bad, i in zip(g.to_dict("records"), curves, diverged, range(len(curves))):
        style = styles[r["variant"]]
        label = r["variant"] + (f" (diverged: up to {np.nanmax(curve):.3g}; cut at the axis)" if bad else "")
        name = f"{r['variant']} {config}: final loss {curve[-1]:.4f}" + (" (diverged)" if bad else "")
        _curve(kit, left, curve, lo, hi, bad, style, name, label)
        if deltas:
            _curve(kit, right, deltas[i], -limit, limit, bad, style,
                   name + f"; {deltas[i][-1]:+.4f} nats against fp32 over the last {window} steps", start=window - 1)
    left.set_ylim(lo, hi)
    if deltas:
        right.set_yscale("symlog", linthresh=DELTA_LINEAR, linscale=1.0)
        right.set_ylim(-limit, limit)
        right.set_yticks(_delta_ticks(limit), [f"{v:+g}" if v else "0" for v in _delta_ticks(limit)])
        right.yaxis.set_minor_locator(matplotlib.ticker.NullLocator())
    left.set_title(f"{config}: loss", fontsize=9)
    right.set_title(f"{config}: loss minus the fp32 reference" + (f", mean over {window} steps" if window > 1 else ""),
                    fontsize=9)
    left.set_ylabel("loss (nats/token)")
    right.set_ylabel(f"difference (nats/token; linear within ±{DELTA_LINEAR:g})")
    for ax in (left, right):
        ax.set_xlabel("step")
        ax.grid(True, alpha=0.3)
    right.legend(*left.get_legend_handles_labels(), fontsize=7, loc="upper left", bbox_to_anchor=(1.02, 1.0),
                 borderaxespad=0)


def vocab_padding_effect(df: pd.DataFrame, workload: str, path: Path, kit, gemms: str) -> Path | None:
    """Padding the vocabulary: speedup over the smallest vocabulary for the lm_head GEMMs (the
    `gemms` workload's cases, left) and for the whole training step (right, annotated with the
    lm_head GEMMs' share of the step). Every number comes from `derived.vocab_padding`."""
    table = vocab_padding(df, workload, gemms, kit.is_emulated(df))
    if table.empty:
        return None
    gemm = table[table["level"] == f"{gemms} total"]
    if gemm.empty:
        gemm = table[table["level"] == f"{gemms} forward"]
    step = table[table["level"] == workload]
    fig, (axes,) = kit.figures.new(12.5, 4.4, 1, 2)
    for ax, part, title in ((axes[0], gemm, f"lm_head GEMMs ({gemm['level'].iloc[0] if len(gemm) else 'none measured'})"),
                            (axes[1], step, "training step")):
        if part.empty:
            ax.text(0.5, 0.5, "not measured", ha="center", va="center", transform=ax.transAxes)
            ax.set_axis_off()
            continue
        _padding_bars(kit, ax, part, annotate=ax is axes[1])
        ax.set_title(title, fontsize=9)
    fig.suptitle("vocabulary padding: time at the unpadded size / time at each size")
    return kit.figures.save(fig, path)


def _padding_bars(kit, ax, part: pd.DataFrame, annotate: bool) -> None:
    groups = list(part.groupby(["precision", "config", "tokens", "d_model"], sort=False))
    vocabs = sorted(part["vocab"].unique())
    width = 0.8 / len(groups)
    for i, ((precision, config, tokens, d), g) in enumerate(groups):
        xs = [vocabs.index(v) + (i - (len(groups) - 1) / 2) * width for v in g["vocab"]]
        label = precision if len(groups) == len(part["precision"].unique()) else f"{precision} T={tokens} d={d}"
        bars = ax.bar(xs, g["speedup"], width=width, label=label, color=kit.palette.precision_style(precision).colour,
                      hatch=None if i < len(part["precision"].unique()) else "//")
        kit.figures.name(bars, [f"{label} vocab {v}: {s:.3g}x" for v, s in zip(g["vocab"], g["speedup"])])
        if annotate:
            for bar, share in zip(bars, g["lm_head_share"]):
                if pd.notna(share):
                    ax.annotate(f"lm_head {share:.0%}", (bar.get_x() + bar.get_width() / 2, bar.get_height()),
                                ha="center", va="bottom", fontsize=6, rotation=90)
    ax.axhline(1.0, color="k", lw=1)
    ax.margins(y=0.25)  # room for the lm_head labels above the bars
    ax.set_xticks(range(len(vocabs)), [str(v) for v in vocabs])
    ax.set_xlabel("vocabulary size (N of the lm_head GEMM)")
    ax.set_ylabel(f"speedup over vocab {min(vocabs)} (x)")
    ax.grid(True, axis="y", alpha=0.3)
    ax.legend(fontsize=7)
