"""Render a scenario's history (`suite.analysis.regression.history.History`): one plot per workload x precision
(each case's speedup per run, or its time per run where the precision has no speedup: the baseline
precision), segment levels and change points drawn, plus `report.md` and `index.html` listing the
change points with what differs between the runs on either side. Nothing is computed here beyond
formatting; the plots carry no text inside the axes (step sizes are in the legend and the table),
so nothing overlaps however many change points there are."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import numpy as np

from suite.analysis.regression import history
from suite.core.names import slug
from suite.core.text import fmt
from suite.report.pages import PLOT_SUFFIX, environment, figure, md_image, md_table, md_text, publish, write_pages
from suite.results import columns

RUN_TABLE = [("index", "#"), ("run_id", "run"), ("torch_version", "torch"), (columns.LIBRARIES, ""),
             ("cuda_version", "CUDA"), ("device_name", "device")]
CHANGE_TABLE = [("case", "case"), ("metric", "metric"), ("at", "from run"), ("before", "before"),
                ("after", "after"), ("change", "change [interval]"), ("p", "p (segments)"),
                ("p_search", "p (search-adjusted)"), ("verdict", "verdict"),
                ("explanation", "what differs")]
UNITS = {history.SPEEDUP: "x", history.TIME: " ms"}


def run_table() -> list[tuple[str, str]]:
    """The runs table's (column, heading) pairs, a column per declared library among them."""
    return columns.with_libraries(RUN_TABLE)


def _run_label(run: history.HistoryRun) -> str:
    date = f"{run.run_id[:4]}-{run.run_id[4:6]}-{run.run_id[6:8]}"
    torch = run.facts.get("torch_version")
    return f"#{run.index} {date}" + (f"\n{torch}" if torch else "")


def _step(cp: history.ChangePoint) -> str:
    return f"{fmt(100 * (cp.ratio - 1), '+.0f', '%')} at #{cp.index}"


# Runs labelled on a plot's axis, about: every run up to this many, else every k-th (the run
# table lists them all, and each point names its run on hover). A label per run of a year of
# nightlies made a figure 400 inches wide, and laying out its labels was most of the page's time.
MAX_RUN_LABELS = 40


def labelled_runs(runs: int) -> list[int]:
    """Positions of the runs whose label the x axis shows: all, or every k-th from the first, the
    newest always."""
    step = max(1, math.ceil(runs / MAX_RUN_LABELS))
    shown = list(range(0, runs, step))
    if shown[-1] != runs - 1:
        if runs - 1 - shown[-1] < step / 2 and len(shown) > 1:
            shown.pop()  # too close to the newest for both labels to be read
        shown.append(runs - 1)
    return shown


POINT_SIZE = math.sqrt(18)  # points across: the area of the scatter's s=18 it replaced


def _group_plot(h: history.History, title: str, series: list[history.CaseSeries], path: Path) -> Path:
    """Each case's value per run as points, its segment levels as lines, change points dashed; a time
    is drawn relative to the case's median over runs, so shapes of different cost share an axis."""
    from suite.report import figures  # matplotlib: paid for by a render

    ticks = labelled_runs(len(h.runs))
    fig, axes = figures.new(max(8, 0.4 * len(ticks) + 5), 4.8)
    ax = axes[0, 0]
    metric = series[0].metric
    devices = len({s.device for s in series}) > 1  # a series per device model: say which
    for i, s in enumerate(series):
        color = f"C{i % 10}"  # one plot is one precision: its series are shapes, told apart by colour
        scale = 1.0 if metric == history.SPEEDUP else float(np.median(s.values))
        label = s.shape + (f" on {s.device}" if devices else "") + "".join(f"; {_step(cp)}" for cp in s.change_points)
        ax.plot([], [], "o", ms=4, color=color, label=label)
        # one line's markers, not a scatter: a year of nightlies is thousands of points a plot, and
        # matplotlib writes a collection's point by point (figures.name names each marker all the same)
        points, = ax.plot(s.run_index, np.asarray(s.values) / scale, "o", ls="none", ms=POINT_SIZE, color=color,
                          alpha=0.75, zorder=3)
        unit = UNITS[metric]
        figures.name(points, [f"{s.label}, run #{k} {h.runs[k].run_id}: {fmt(v, '.4g', unit)}"
                              for k, v in zip(s.run_index, s.values)])
        for first, end, level in s.levels():
            ax.hlines(level / scale, first - 0.35, end - 0.65, color=color, lw=2.2)
        for cp in s.change_points:
            ax.axvline(cp.index - 0.5, color=color, ls="--", lw=1)
    ax.set_yscale("log")
    if metric == history.SPEEDUP:
        ax.axhline(1.0, color="k", lw=0.8)
        ax.set_ylabel(f"speedup over {series[0].baseline} (x)")
    else:
        ax.set_ylabel("time / the case's median over runs")
    ax.set_xticks(ticks, [_run_label(h.runs[k]) for k in ticks], fontsize=7, rotation=45, ha="right")
    ax.set_xlim(-0.6, len(h.runs) - 0.4)
    ax.set_title(f"{title}: per run (points), level between change points (lines), change points (dashed)",
                 fontsize=9)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0)  # never over the data
    return figures.save(fig, path)


def _plot_groups(h: history.History) -> dict[tuple[str, str, str], list[history.CaseSeries]]:
    """workload x precision -> its speedup series, or its time series where it has no speedup."""
    groups: dict[tuple[str, str, str], list[history.CaseSeries]] = {}
    for s in h.series:
        groups.setdefault((s.workload, s.precision, s.metric), []).append(s)
    with_speedup = {(w, p) for w, p, m in groups if m == history.SPEEDUP}
    return {k: v for k, v in groups.items() if k[2] == history.SPEEDUP or (k[0], k[1]) not in with_speedup}


def _metric(h: history.History, s: history.CaseSeries) -> str:
    """The series' metric, and its device model where the history has more than one."""
    return s.metric + (f" on {s.device}" if len({x.device for x in h.series}) > 1 else "")


def _change_rows(h: history.History) -> list[dict]:
    rows = []
    for s, cp in h.change_points():
        unit = UNITS[cp.metric]
        rows.append({
            "case": s.label, "metric": _metric(h, s),
            "at": f"#{cp.index} {h.runs[cp.index].run_id} ({cp.runs_before} runs before, {cp.runs_after} after)",
            "before": fmt(cp.before, ".4g", unit), "after": fmt(cp.after, ".4g", unit),
            "change": (f"{fmt(100 * (cp.ratio - 1), '+.1f', '%')} [{fmt(100 * (cp.low - 1), '+.1f', '%')}, "
                       f"{fmt(100 * (cp.high - 1), '+.1f', '%')}]"),
            "p": fmt(cp.p, ".2g"),
            "p_search": fmt(cp.p_search, ".2g"),
            "verdict": cp.verdict if cp.metric == history.SPEEDUP else f"time {cp.verdict}",
            "css": cp.verdict,
            "explanation": "; ".join([*([cp.cause] if cp.cause else []), *cp.explanation]) or "nothing recorded",
        })
    return rows


def _reach(h: history.History) -> str:
    """What the runs can show: per metric, the run-to-run spread and the smallest step it lets show."""
    o = h.options
    return " ".join(
        f"{metric.capitalize()}s: run-to-run sd ±{spread.relative:.1%} of one run's value (the median of "
        f"{spread.case_sides} series, change points included), so a step with {o.min_runs} runs on each side is found with "
        f"80% power at about ±{h.detectable[metric]:.0%} (more runs on each side find smaller ones)."
        for metric, spread in h.spread.items() if spread.observable)


def _method(h: history.History) -> str:
    o = h.options
    return (
        f"Each point is a case's value in one run, the value compare compares: its speedup over the in-run "
        f"baseline precision (median times), or its median time. Change points come from seeded binary "
        f"segmentation of each series (a run caught by a burst of load clipped to its local level), a split "
        f"with at least {o.min_runs} runs on each side kept where it reaches {o.confidence:.0%} divided among "
        f"every split the search tried (Bonferroni: 'p (search-adjusted)'), and then where compare, run on the "
        f"runs between its neighbouring change points (runs as the unit of replication, run-to-run spread "
        f"pooled over all cases, Student-t interval at {o.confidence:.0%}), calls it regressed or improved, its "
        f"interval clearing {o.min_effect:.0%}: 'p (segments)' is compare's p there, not adjusted for the "
        f"search. A speedup change whose case's own time did not move while its baseline's did is "
        f"baseline-changed. False change points and power: docs/calibration.md.")


def build_view(h: history.History) -> dict:
    counts = {m: sum(s.metric == m for s in h.series) for m in (history.SPEEDUP, history.TIME)}
    facts = [key for key, _ in run_table()[2:]]
    return {
        "scenario": h.scenario,
        "runs": [{"index": str(r.index), "run_id": r.run_id, **{k: r.facts.get(k, "") for k in facts}} for r in h.runs],
        "summary": (f"{len(h.runs)} runs; {counts[history.SPEEDUP]} speedup and {counts[history.TIME]} time series; "
                    f"{len(h.change_points())} change point(s)."),
        "changes": _change_rows(h),
        "reach": _reach(h),
        "method": _method(h),
        "plots": [],
    }


def markdown(view: dict) -> str:
    lines = [f"# mpsuite history: {md_text(view['scenario'])}", "", md_text(view["summary"]), "",
             md_text(view["reach"]), ""]
    if view["changes"]:
        lines += ["## Change points", "", md_table(view["changes"], CHANGE_TABLE), ""]
    lines += [md_image(p["title"], p["file"]) for p in view["plots"]]
    lines += ["", "## Runs", "", md_table(view["runs"], run_table()), "", "## Method", "", md_text(view["method"]), ""]
    return "\n".join(lines) + "\n"


def html(view: dict) -> str:
    table = run_table()
    return environment().get_template("history.html.j2").render(
        view=view, run_table=table, run_text=[key for key, _ in table[1:]], change_table=CHANGE_TABLE)


def render(h: history.History, out_dir: str | Path) -> list[Path]:
    """Write the history report into out_dir (replacing it whole); returns the files written."""
    return publish(out_dir, lambda staging: _render_into(h, staging))


def _render_into(h: history.History, out: Path) -> list[Path]:
    view = build_view(h)
    written = []
    for (workload, precision, metric), series in _plot_groups(h).items():
        title = f"{h.scenario}: {workload} {precision} {metric}"
        path = _group_plot(h, title, series, out / f"history_{slug(workload)}_{slug(precision)}_{metric}{PLOT_SUFFIX}")
        written.append(path)
        view["plots"].append(figure(path, f"{workload} {precision}, {metric} per run"))
    written += write_pages(out, markdown(view), html(view))
    return written


def text_summary(h: history.History) -> str:
    view = build_view(h)
    lines = [f"{h.scenario}: {view['summary']}", view["reach"]]
    for s, cp in h.change_points():
        unit = UNITS[cp.metric]
        why = "; ".join([*([cp.cause] if cp.cause else []), *cp.explanation]) or "nothing recorded differs"
        lines.append(f"  {s.label} {_metric(h, s)}: {cp.before:.4g}{unit} -> {cp.after:.4g}{unit} ({cp.ratio - 1:+.1%}, "
                     f"{cp.verdict}) from run #{cp.index} {h.runs[cp.index].run_id}; {why}")
    return "\n".join(lines)


def _plain(value):
    """A JSON-ready value: a dataclass as `dataclasses.asdict` gives it (without its deep copy of
    each of a thousand runs' numbers), NaN and infinities as null."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def json_view(h: history.History) -> dict:
    """`history --json`: the History's dataclasses as they are (docs/cli.md)."""
    return _plain({
        "scenario": h.scenario,
        "options": h.options,
        "runs": h.runs,
        "spread": {m: {"relative_sd": s.relative if s.observable else None, "detectable": h.detectable[m],
                       "source": s.source} for m, s in h.spread.items()},
        "series": h.series,
        "change_points": len(h.change_points()),
    })
