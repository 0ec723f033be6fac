"""Render a scenario's history (`suite.analysis.history.History`): one speedup-over-runs plot per case group
(workload x precision), change points marked, plus `report.md` and `index.html` listing them."""

from __future__ import annotations

from pathlib import Path

import jinja2
import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from suite.analysis import history  # noqa: E402
from suite.core.names import slug  # noqa: E402
from suite.core.text import fmt  # noqa: E402
from suite.report.pages import md_table, publish, write_pages  # noqa: E402
from suite.report.plots import save_figure  # noqa: E402

RUN_TABLE = [("index", "#"), ("run_id", "run"), ("torch_version", "torch"), ("torchao_version", "torchao"),
             ("cuda_version", "CUDA"), ("device_name", "device")]
CHANGE_TABLE = [("case", "case"), ("between", "between runs"), ("versions", "torch"), ("before", "speedup before"),
                ("after", "speedup after"), ("change", "change"), ("z", "z")]


def _run_label(run) -> str:
    when = str(run["run_id"])[:8]
    torch = run.get("torch_version")
    return f"{when}\n{torch}" if torch else when


def _group_plot(h: history.History, workload: str, precision: str, series: list[history.CaseSeries], path: Path) -> Path:
    fig, ax = plt.subplots(figsize=(max(7, 0.5 * len(h.runs) + 3), 4.5))
    for i, s in enumerate(series):
        color = f"C{i % 10}"
        x = np.asarray(s.run_index)
        y = np.asarray(s.speedup)
        err = np.vstack([y - np.asarray(s.low), np.asarray(s.high) - y])
        ax.errorbar(x, y, yerr=err, fmt="o-", color=color, ms=4, lw=1.2, capsize=2, label=s.shape)
        for cp in s.change_points:
            ax.axvline(cp.index - 0.5, color=color, ls="--", lw=1)
            ax.annotate(f"{cp.ratio - 1:+.0%}", (cp.index - 0.5, cp.after), color=color, fontsize=7,
                        xytext=(3, 3), textcoords="offset points")
    ax.axhline(1.0, color="k", lw=0.8)
    ax.set_yscale("log")
    ax.set_xticks(range(len(h.runs)), [_run_label(r) for _, r in h.runs.iterrows()], fontsize=7,
                  rotation=45, ha="right")
    ax.set_xlim(-0.5, len(h.runs) - 0.5)
    baseline = series[0].baseline
    ax.set_ylabel(f"speedup over {baseline} (x)")
    ax.set_title(f"{h.scenario}: {workload} {precision}, speedup per run (dashed: change point)")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=7, loc="best")
    return save_figure(fig, path)


def build_view(h: history.History) -> dict:
    runs = h.runs
    changes = []
    for s, cp in h.change_points():
        before, after = runs.iloc[cp.index - 1], runs.iloc[cp.index]
        tv = (before.get("torch_version"), after.get("torch_version"))
        changes.append({
            "case": s.label,
            "between": f"{before['run_id']} -> {after['run_id']}",
            "versions": f"{tv[0]} -> {tv[1]}" if tv[0] != tv[1] else str(tv[0]),
            "before": fmt(cp.before, ".3g", "x"),
            "after": fmt(cp.after, ".3g", "x"),
            "change": fmt(100 * (cp.ratio - 1), "+.1f", "%"),
            "z": fmt(cp.z, ".1f"),
        })
    noise = h.noise
    noise_text = (f"run-to-run noise ±{noise.relative:.1%} (sd), estimated from {noise.cases} consecutive differences"
                  if noise.source == "estimated" else f"run-to-run noise {noise.source}")
    return {
        "scenario": h.scenario,
        "runs": [{"index": str(i), **{k: str(r.get(k) or "") for k, _ in RUN_TABLE[1:]}} for i, r in runs.iterrows()],
        "cases": len(h.series),
        "changes": changes,
        "method": (
            f"Each point is a case's speedup over the in-run baseline precision in one run, with its "
            f"{h.confidence:.0%} bootstrap interval from the stored samples. Change points come from binary "
            f"segmentation of the log speedups: a split is kept when a two-sample z test between the runs "
            f"before and after it passes at {h.confidence:.0%} confidence (Bonferroni over the splits tried, "
            f"per-run variance = sampling variance + run-to-run noise) and the level moves by at least "
            f"{h.min_effect:.0%}; {noise_text}."
        ),
        "plots": [],
    }


def markdown(view: dict) -> str:
    lines = [f"# mpsuite history: {view['scenario']}", "",
             f"{len(view['runs'])} runs, {view['cases']} cases with a speedup, "
             f"{len(view['changes'])} change point(s).", ""]
    if view["changes"]:
        lines += ["## Change points", "", md_table(view["changes"], CHANGE_TABLE), ""]
    lines += ["## Runs", "", md_table(view["runs"], RUN_TABLE), "", "## Method", "", view["method"], ""]
    lines += [f"![{p['title']}]({p['file']})" for p in view["plots"]]
    return "\n".join(lines) + "\n"


def html(view: dict) -> str:
    env = jinja2.Environment(
        loader=jinja2.PackageLoader("suite.report", "templates"),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
    )
    return env.get_template("history.html.j2").render(view=view, run_table=RUN_TABLE, change_table=CHANGE_TABLE)


def render(h: history.History, out_dir: str | Path) -> list[Path]:
    """Write the history report into out_dir (replacing it whole); returns the files written."""
    return publish(out_dir, lambda staging: _render_into(h, staging))


def _render_into(h: history.History, out: Path) -> list[Path]:
    view = build_view(h)
    written = []
    groups: dict[tuple[str, str], list[history.CaseSeries]] = {}
    for s in h.series:
        groups.setdefault((s.workload, s.precision), []).append(s)
    for (workload, precision), series in groups.items():
        path = _group_plot(h, workload, precision, series, out / f"history_{slug(workload)}_{slug(precision)}.png")
        written.append(path)
        view["plots"].append({"file": path.name, "title": f"{workload} {precision}"})
    written += write_pages(out, markdown(view), html(view))
    return written


def text_summary(h: history.History) -> str:
    lines = [f"{h.scenario}: {len(h.runs)} runs, {len(h.series)} cases, {len(h.change_points())} change point(s)"]
    for s, cp in h.change_points():
        run = h.runs.iloc[cp.index]
        lines.append(f"  {s.label}: {cp.before:.3g}x -> {cp.after:.3g}x ({cp.ratio - 1:+.1%}) "
                     f"from run {run['run_id']} (torch {run.get('torch_version')})")
    return "\n".join(lines)
