"""Render a comparison (`suite.analysis.regression.compare.Comparison`): `index.html`, `report.md`, SVG plots.

`report.md` starts with a short summary meant for a CI job summary (`cat report.md >>
$GITHUB_STEP_SUMMARY`): the gate's outcome, what the data can and cannot show (`Comparison.reach`:
the smallest change it could tell from run-to-run noise, or that one run per side cannot tell any),
the verdict counts, the cases that need attention, then every case in a collapsed table. Nothing is
computed here beyond formatting: every number is a column of `Comparison.cases` or a property of
the comparison.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd

from suite.analysis.regression import compare, envdiff, stats
from suite.core import names
from suite.core.text import fmt
from suite.report import figures
from suite.report.pages import PLOT_SUFFIX, environment, figure, filled, md_image, md_table, md_text, publish, write_pages
from suite.results import columns, location

ATTENTION = (
    "regressed", "new-failure", "new-skip", "baseline-changed", "ambiguous", "missing", "improved", "recovered",
)
# The two sides of a comparison (not precisions: a case's precision is its row's name).
SIDE_COLOURS = ("#2e86c1", "#e67e22")
VERDICT_COLORS = {
    "regressed": "#c0392b", "improved": "#1e8449", "unchanged": "#7f8c8d", "noisy": "#d4ac0d",
    "ambiguous": "#ca6f1e", "insufficient-runs": "#af7ac5", "baseline-changed": "#2e86c1",
}
SIDE_COLUMNS = [
    ("torch_version", "torch"), (columns.LIBRARIES, ""), ("cuda_version", "CUDA"), ("driver_version", "driver"),
    ("device_name", "device"), ("host", "host"), ("git_sha", "git commit"), ("code_hash", "suite code hash"),
]
CASE_COLUMNS = [
    ("verdict", "verdict"), ("gate", "gate"), ("workload", "workload"), ("shape", "case"), ("precision", "precision"),
    ("runs", "runs base / cand"),
    ("base_speedup", "baseline speedup"), ("cand_speedup", "candidate speedup"),
    ("speedup_change", "speedup change [interval]"), ("base_time", "baseline ms"),
    ("cand_time", "candidate ms"), ("time_change", "time change [interval]"), ("time_verdict", "time verdict"),
    ("clocks", "SM clock MHz base / cand"), ("cycles_change", "cycles change [interval]"),
    ("cycles_verdict", "cycles verdict"),
    ("rel_err", "rel. error base / cand"), ("detail", "detail"), ("explanation", "what differs"),
]

# Columns of text (left-aligned, wrapping); the others are numbers.
TEXT_COLUMNS = ("verdict", "gate", "workload", "shape", "precision", "detail", "time_verdict", "cycles_verdict",
                "explanation")
# The page's case tables: the verdicts and the changes first, so they are on screen at 1400 px; what
# a case's row explains (`detail`, `explanation`) goes on a line of its own below it (NOTE_COLUMNS).
HTML_COLUMNS = [
    ("verdict", "verdict"), ("time_verdict", "time verdict"), ("cycles_verdict", "cycles verdict"),
    ("workload", "workload"), ("shape", "case"),
    ("precision", "precision"), ("speedup_change", "speedup change [interval]"), ("time_change", "time change [interval]"),
    ("cycles_change", "cycles change [interval]"),
    ("base_speedup", "baseline speedup"), ("cand_speedup", "candidate speedup"), ("base_time", "baseline ms"),
    ("cand_time", "candidate ms"), ("clocks", "SM clock MHz base / cand"), ("runs", "runs base / cand"),
    ("rel_err", "rel. error base / cand"), ("gate", "gate"),
]
NOTE_COLUMNS = (("detail", ""), ("explanation", "what differs: "))


def side_columns() -> list[tuple[str, str]]:
    """A side's facts, (column, title), a column per declared library among them."""
    return columns.with_libraries(SIDE_COLUMNS)


def _pct(ratio: float) -> str:
    return fmt(100.0 * (ratio - 1.0), "+.1f", "%") if ratio is not None and math.isfinite(ratio) else ""


def _change(ratio: float, low: float, high: float) -> str:
    if ratio is None or not math.isfinite(ratio):
        return ""
    if not (math.isfinite(low) and math.isfinite(high)):
        return f"{_pct(ratio)} [no interval]"
    return f"{_pct(ratio)} [{_pct(low)}, {_pct(high)}]"


def _speedup(value: float, low: float, high: float) -> str:
    if not math.isfinite(value):
        return ""
    if math.isfinite(low) and math.isfinite(high):
        return f"{value:.3g}x [{low:.3g}, {high:.3g}]"
    return f"{value:.3g}x"


def case_rows(cases: pd.DataFrame) -> list[dict]:
    rows = []
    for _, c in cases.iterrows():
        rel = [fmt(c.get(k), ".2e") for k in ("base_rel_err", "cand_rel_err")]
        rows.append({
            "verdict": c["verdict"],
            "gate": "fails" if c["gate"] else "",
            "runs": f"{int(c['base_runs'])} / {int(c['cand_runs'])}" if c["base_runs"] or c["cand_runs"] else "",
            "workload": c["workload"],
            "shape": c["shape"],
            "precision": c["precision"],
            "base_speedup": _speedup(c["base_speedup"], c["base_speedup_low"], c["base_speedup_high"]),
            "cand_speedup": _speedup(c["cand_speedup"], c["cand_speedup_low"], c["cand_speedup_high"]),
            "speedup_change": _change(c["speedup_ratio"], c["speedup_ratio_low"], c["speedup_ratio_high"]),
            "base_time": fmt(c["base_time_ms"], ".4g"),
            "cand_time": fmt(c["cand_time_ms"], ".4g"),
            "time_change": _change(c["time_ratio"], c["time_ratio_low"], c["time_ratio_high"]),
            "time_verdict": c["time_verdict"],
            **_cycles_cells(c),
            "rel_err": " / ".join(rel) if any(rel) else "",
            "detail": c["detail"] or "",
            "explanation": "; ".join(c.get("explanation") or []),
        })
    return rows


def _cycles_cells(c) -> dict:
    """A case's clock-normalised time: its cells, empty where it has no cycles verdict (the clocks
    are missing on a side, or equal: `envdiff.clocks_differ`)."""
    if not c.get("cycles_verdict"):
        return {"clocks": "", "cycles_change": "", "cycles_verdict": ""}
    return {"clocks": f"{fmt(c['base_sm_clock_mhz'], '.0f')} / {fmt(c['cand_sm_clock_mhz'], '.0f')}",
            "cycles_change": _change(c["cycles_ratio"], c["cycles_ratio_low"], c["cycles_ratio_high"]),
            "cycles_verdict": c["cycles_verdict"]}


def _side_view(side: compare.Side) -> dict:
    return {
        "role": side.role,
        "selector": side.selector,
        "scenario": side.scenario,
        "runs": side.run_ids,
        "facts": [(title, ", ".join(side.values(col))) for col, title in side_columns() if side.values(col)],
        "summary": "; ".join(  # the software stack and the device
            f"{title} {', '.join(side.values(col))}" for col, title in columns.with_libraries(SIDE_COLUMNS[:5])
            if side.values(col)
        ),
    }


def _spread_text(name: str, spread) -> str:
    if not spread.observable:
        return f"{name}: run-to-run noise {spread.source}"
    shifts = (f"; whole-run shifts ±{math.expm1(math.sqrt(spread.run_var)):.1%} of it" if spread.run_var > 0 else "")
    return f"{name}: run-to-run sd ±{spread.relative:.1%} of one run's value, {spread.source}{shifts}"


def _runs(reach) -> str:
    kb, kc = reach.runs
    return f"{kb} run{'s' if kb != 1 else ''} per side" if kb == kc else f"{kb} and {kc} runs per side"


def reach_text(reach, cmp: compare.Comparison) -> str:
    """What one metric's data can and cannot show, in a sentence or two."""
    o = cmp.options
    label = "Absolute times (same device)"
    cases = cmp.cases
    if reach.metric == "speedup":
        label = f"Speedups ({'from paired rounds' if reach.kind == compare.PAIRED else reach.kind})"
        cases = cases[cases["speedup_kind"] == reach.kind] if reach.kind else cases
    column = "speedup_verdict" if reach.metric == "speedup" else "time_verdict"
    if reach.tested == 0:
        return (f"{label}: {_runs(reach)}, too few to measure run-to-run noise (a verdict needs {o.min_runs} per "
                f"side), so no case can be called regressed or improved: record {stats.RECOMMENDED_RUNS} "
                f"runs per side (runs={stats.RECOMMENDED_RUNS} in both selectors).")
    verdicts = cases[column] if reach.metric == "time" else cases["verdict"]
    regressed, improved = int((verdicts == "regressed").sum()), int((verdicts == "improved").sum())
    moved = int((verdicts == compare.BASELINE_CHANGED).sum())
    if regressed:
        text = f"{label}: {regressed} case(s) regressed by {o.min_effect:.0%} or more"
    else:
        text = f"{label}: no case shown to regress (a significant change of {o.min_effect:.0%} or more)"
    if improved:
        text += f", {improved} improved"
    if moved:
        text += f", {moved} moved by their baseline precision (baseline-changed)"
    ambiguous = int((verdicts == stats.AMBIGUOUS).sum())
    if ambiguous:
        text += (f", {ambiguous} ambiguous (a change whose interval straddles ±{o.min_effect:.0%}: neither a pass "
                 f"nor a regression)")
    text += (f". With {_runs(reach)}, a typical case is found regressed with 80% power when it changes by "
             f"±{reach.detectable:.0%} (per case, at {o.confidence:.0%}), and fails the gate with 80% power at "
             f"±{reach.gate_detectable:.0%} (family-wise over its tests; run-to-run sd {reach.spread.relative:.1%} "
             f"of one run's value)")
    if reach.metric == "speedup":
        worst = f"a speedup drop of {1 - reach.worst:.0%}" if reach.worst < 1 else "no drop"
    else:
        worst = f"a slowdown of {reach.worst - 1:.0%}" if reach.worst > 1 else "no slowdown"
    text += f"; the least certain case's {o.confidence:.0%} interval still admits {worst}."
    if reach.compared > reach.tested:
        text += f" {reach.compared - reach.tested} case(s) have too few runs for a verdict."
    return text + (_cycles_text(cmp.cases) if reach.metric == "time" else "")


def _cycles_text(cases: pd.DataFrame) -> str:
    """The time verdicts in clock-normalised time, counted, where the sides' clocks differed ("" where none did)."""
    cycled = cases["cycles_verdict"][cases["cycles_verdict"] != ""]
    if cycled.empty:
        return ""
    counts = cycled.value_counts()
    said = ", ".join(f"{counts[v]} {v}" for v in compare.VERDICTS if v in counts)
    return (f" {len(cycled)} case(s) ran at SM clocks more than {envdiff.CLOCK_TOLERANCE:.0%} apart; in "
            f"clock-normalised time (cycles): {said}.")


def _gate_text(cmp: compare.Comparison) -> str:
    fail_on = ",".join(cmp.options.fail_on) or "none"
    failing = int(cmp.cases["gate"].sum())
    if failing:
        return f"Gate (--fail-on {fail_on}): fails, {failing} case(s); exit status 1."
    return f"Gate (--fail-on {fail_on}): passes; exit status 0."


def headline_lines(cmp: compare.Comparison) -> list[str]:
    """What the comparison came to, a sentence each: every drift of a baseline precision, then the
    verdicts counted (`compare --json`'s "headline"; the pages join them)."""
    counts = cmp.counts()
    return [*(d.sentence for d in cmp.drift), ", ".join(f"{counts[v]} {v}" for v in compare.VERDICTS if v in counts)]


# The method's words on clock-normalised time, where a comparison has some (a CPU's never does).
_CYCLES_METHOD = (
    " Where both sides recorded a case's SM clock (the mean while it was timed) in every run and the two differ "
    f"by more than {envdiff.CLOCK_TOLERANCE:.0%}, its time is compared again in clock-normalised time (cycles: "
    "each run's time x its own clock), the same way (cycles verdict); the detail says where the two verdicts "
    "differ. It informs and never gates: a lower clock may be the change's own doing (a power-capped card "
    "clocks down under a hungrier kernel). Speedups need no normalisation: both times of one are taken in the "
    "same run.")


def build_view(cmp: compare.Comparison) -> dict:
    o = cmp.options
    counts = cmp.counts()
    ordered = [(v, counts[v]) for v in compare.VERDICTS if v in counts]
    attention = cmp.cases[cmp.cases["verdict"].isin(ATTENTION) | cmp.cases["gate"]]
    m = compare.family_size(cmp.cases, o.fail_on)
    return {
        "title": f"{cmp.baseline.scenario}: {cmp.baseline.describe()} vs {cmp.candidate.describe()}",
        "scenario": cmp.baseline.scenario if cmp.baseline.scenario == cmp.candidate.scenario
        else f"{cmp.baseline.scenario} vs {cmp.candidate.scenario}",
        "sides": [_side_view(cmp.baseline), _side_view(cmp.candidate)],
        "facts": [
            (title, [", ".join(cmp.baseline.values(col)), ", ".join(cmp.candidate.values(col))])
            for col, title in side_columns() if cmp.baseline.values(col) or cmp.candidate.values(col)
        ],
        "counts": ordered,
        "headline": "; ".join(headline_lines(cmp)),
        "drift": [d.detail for d in cmp.drift],
        "differences": cmp.environment.summary(),
        "gate": _gate_text(cmp),
        "reach": [reach_text(r, cmp) for r in cmp.reach.values() if r.compared],
        "method": (
            f"Each run gives one value per case: its median time over the run's repetitions, and its speedup: "
            f"from paired rounds where both sides have one in every run (the median over rounds of the baseline "
            f"precision's batch median / the case's in the same round, the two timed interleaved), else the median "
            f"time of the in-run baseline precision / the case's; the two kinds are fitted apart. Runs are the unit "
            f"of replication: a "
            f"side's estimate is the mean of its runs' log values, whose run-to-run variance is a whole-run shift "
            f"shared by every case plus the larger of the case's own variance and the variance pooled over all "
            f"cases and both sides (the median of the per-case variances over the median of chi-square(k-1)/(k-1)). "
            f"Change = candidate / baseline, with a {o.confidence:.0%} Student-t interval (Welch-Satterthwaite "
            f"degrees of freedom, the pooled part at half its own). A case is regressed or improved when its "
            f"whole interval lies beyond ±{o.min_effect:.0%} and both sides have at least "
            f"{o.min_runs} runs of it; baseline-changed when the speedup moved so but the case's own time did not "
            f"while its baseline precision's time moved the other way; insufficient-runs with fewer; unchanged when the interval lies within "
            f"±{o.min_effect:.0%}; ambiguous when it excludes no change but straddles ±{o.min_effect:.0%} (neither "
            f"a pass nor a regression); noisy when the interval straddles no "
            f"change and reaches past ±{o.min_effect:.0%}. Absolute times are compared the same way, only when both "
            f"sides ran on the same device model. The gate fails on the verdicts of --fail-on; a regressed, "
            f"improved or ambiguous case must also be significant at the family-wise {o.confidence:.0%} (Holm's step-down over "
            f"the {m} tests the gate looks at); a baseline precision's time regression also fails time:regressed "
            f"when a speedup against it is baseline-changed at that level. Every verdict that is not the same "
            f"lists what differs between the sides' runs of it (versions, device, clocks, code, threads, the "
            f"kernel where recorded). False alarms and power of this method: docs/calibration.md."
            + (_CYCLES_METHOD if cmp.cases["cycles_verdict"].ne("").any() else "")
        ),
        "noise": [_spread_text(k, s) for k, s in cmp.spread.items()],
        "warnings": list(cmp.warnings),
        "attention": case_rows(attention),
        "cases": case_rows(cmp.cases),
        "plots": [],
    }


def markdown(view: dict) -> str:
    b, c = view["sides"]
    # Selectors, run summaries (versions, device names) and warnings hold text from the command
    # line and from records: escaped (suite.report.pages.md_text) like every table cell.
    lines = [
        f"# mpsuite comparison: {md_text(view['scenario'])}",
        "",
        f"**{md_text(view['gate'], code_spans=True)}**",
        "",
        *[line for text in view["reach"] for line in (md_text(text, code_spans=True), "")],
        f"Verdicts: {md_text(view['headline'])}.",
        "",
        *[line for text in view["drift"] for line in (md_text(text), "")],
        f"- baseline {md_text(b['selector'])}: run {', '.join(b['runs'])} ({md_text(b['summary'])})",
        f"- candidate {md_text(c['selector'])}: run {', '.join(c['runs'])} ({md_text(c['summary'])})",
        "",
    ]
    lines += [f"> {md_text(w)}" for w in view["warnings"]] + ([""] if view["warnings"] else [])
    lines += [f"What differs between the sides' runs: {md_text('; '.join(view['differences']) or 'nothing recorded')}.",
              ""]
    if view["attention"]:
        lines += ["## Needs attention", "", md_table(view["attention"], filled(CASE_COLUMNS, view["attention"])), ""]
    lines += ["<details><summary>All cases</summary>", "", md_table(view["cases"], filled(CASE_COLUMNS, view["cases"])), "",
              "</details>", "", "## Method", "", view["method"], ""]
    lines += [f"- {md_text(n)}" for n in view["noise"]] + [""]
    lines += [md_image(p["title"], p["file"]) for p in view["plots"]]
    return "\n".join(lines) + "\n"


def _with_notes(rows: list[dict]) -> list[dict]:
    """The rows with `notes`: what the page shows on a line below the case's row."""
    return [{**r, "notes": "; ".join(prefix + r[key] for key, prefix in NOTE_COLUMNS if r[key])} for r in rows]


def html(view: dict) -> str:
    attention, cases = _with_notes(view["attention"]), _with_notes(view["cases"])
    return environment().get_template("compare.html.j2").render(
        view=view, attention=attention, cases=cases, text_columns=TEXT_COLUMNS,
        attention_columns=filled(HTML_COLUMNS, attention, keep=("verdict",)),
        case_columns=filled(HTML_COLUMNS, cases, keep=("verdict",)))


def _label(row) -> str:
    return f"{row['workload']} {row['precision']} {row['shape']}"


def _forest(height_per_case: float, rows: pd.DataFrame):
    fig, axes = figures.new(9.5, 1.4 + height_per_case * len(rows))
    return fig, axes[0, 0]


def _forest_axes(ax, rows: pd.DataFrame, xlabel: str, title: str) -> None:
    ax.set_yticks(np.arange(len(rows)), [_label(r) for _, r in rows.iterrows()], fontsize=8)
    ax.set_xscale("log")
    ax.set_xlabel(xlabel)
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0)  # never over an interval
    ax.grid(True, axis="x", which="both", alpha=0.3)


def _interval_plot(rows: pd.DataFrame, path: Path, title: str, xlabel: str, min_effect: float,
                   value: str, verdict: str) -> Path | None:
    """Forest plot: one line per case, the change and its interval, sorted by effect; each point
    names its case, change and verdict on hover."""
    rows = rows[np.isfinite(rows[value].astype(float))]
    if rows.empty:
        return None
    rows = rows.iloc[::-1]  # largest effect at the top
    y = np.arange(len(rows))
    fig, ax = _forest(0.3, rows)
    mid = rows[value].to_numpy(float)
    low = rows[f"{value}_low"].to_numpy(float)
    high = rows[f"{value}_high"].to_numpy(float)
    colors = [VERDICT_COLORS.get(v, "#34495e") for v in rows[verdict]]
    has = np.isfinite(low) & np.isfinite(high)
    ax.hlines(y[has], low[has], high[has], colors=np.array(colors)[has], lw=2)
    points = ax.scatter(mid, y, c=colors, zorder=3, s=24)
    figures.name(points, [f"{_label(r)}: {_pct(m)} [{_pct(lo)}, {_pct(hi)}], {v}"
                          for (_, r), m, lo, hi, v in zip(rows.iterrows(), mid, low, high, rows[verdict])])
    ax.axvline(1.0, color="k", lw=1)
    ax.axvspan(1 / (1 + min_effect), 1 + min_effect, color="#95a5a6", alpha=0.2, lw=0,
               label=f"±{min_effect:.0%} (minimum effect)")
    for v, color in VERDICT_COLORS.items():
        if (rows[verdict] == v).any():
            ax.scatter([], [], c=color, label=v)
    _forest_axes(ax, rows, xlabel, title)
    return figures.save(fig, path)


def _speedups_plot(rows: pd.DataFrame, path: Path, base_name: str, cand_name: str) -> Path | None:
    """Per case: baseline and candidate speedup with their sampling intervals, sorted by effect."""
    rows = rows[np.isfinite(rows["base_speedup"].astype(float)) & np.isfinite(rows["cand_speedup"].astype(float))]
    if rows.empty:
        return None
    rows = rows.iloc[::-1]
    y = np.arange(len(rows))
    fig, ax = _forest(0.32, rows)
    for offset, prefix, name, color in ((0.15, "base", base_name, SIDE_COLOURS[0]), (-0.15, "cand", cand_name, SIDE_COLOURS[1])):
        mid = rows[f"{prefix}_speedup"].to_numpy(float)
        low = rows[f"{prefix}_speedup_low"].to_numpy(float)
        high = rows[f"{prefix}_speedup_high"].to_numpy(float)
        has = np.isfinite(low) & np.isfinite(high)
        ax.hlines(y[has] + offset, low[has], high[has], colors=color, lw=2)
        points = ax.scatter(mid, y + offset, color=color, s=22, zorder=3, label=name)
        figures.name(points, [f"{_label(r)}, {name}: {_speedup(m, lo, hi)}"
                              for (_, r), m, lo, hi in zip(rows.iterrows(), mid, low, high)])
    ax.axvline(1.0, color="k", lw=1)
    _forest_axes(ax, rows, "speedup over the in-run baseline precision (x), with sampling intervals",
                 "Speedup per case, baseline vs candidate (largest change at the top)")
    return figures.save(fig, path)


def _side_name(view_side: dict) -> str:
    torch = dict(view_side["facts"]).get("torch")
    return f"{view_side['role']} (torch {torch})" if torch else view_side["role"]


def render(cmp: compare.Comparison, out_dir: str | Path) -> list[Path]:
    """Write the comparison report into out_dir (replacing it whole); returns the files written."""
    return publish(out_dir, lambda staging: _render_into(cmp, staging))


def _render_into(cmp: compare.Comparison, out: Path) -> list[Path]:
    view = build_view(cmp)
    cases = cmp.cases
    by_speedup = cases[cases["metric"] == "speedup"]
    written: list[Path] = []
    plots = [
        ("speedups", "speedup per case, baseline vs candidate",
         lambda p: _speedups_plot(by_speedup, p, _side_name(view["sides"][0]), _side_name(view["sides"][1]))),
        ("speedup_change", "change in speedup per case",
         lambda p: _interval_plot(by_speedup, p, "Candidate speedup / baseline speedup (below 1: regressed)",
                                  "speedup ratio, candidate / baseline", cmp.options.min_effect,
                                  "speedup_ratio", "speedup_verdict")),
    ]
    if cmp.time_compared:
        timed = cases[cases["time_verdict"] != ""]
        timed = timed.assign(_e=np.abs(np.log(timed["time_ratio"].astype(float)))).sort_values("_e", ascending=False)
        plots.append(("time_change", "change in absolute time per case",
                      lambda p: _interval_plot(timed, p, "Candidate time / baseline time (above 1: slower)",
                                               "time ratio, candidate / baseline", cmp.options.min_effect,
                                               "time_ratio", "time_verdict")))
    cycled = cases[cases["cycles_verdict"] != ""]
    if len(cycled):
        cycled = cycled.assign(_e=np.abs(np.log(cycled["cycles_ratio"].astype(float)))).sort_values("_e", ascending=False)
        plots.append(("cycles_change", "change in clock-normalised time (cycles) per case",
                      lambda p: _interval_plot(cycled, p, "Candidate cycles / baseline cycles (time x SM clock; "
                                               "above 1: slower)", "cycles ratio, candidate / baseline",
                                               cmp.options.min_effect, "cycles_ratio", "cycles_verdict")))
    for name, title, draw in plots:
        path = draw(out / f"{name}{PLOT_SUFFIX}")
        if path is not None:
            written.append(path)
            view["plots"].append(figure(path, title))
    written += write_pages(out, markdown(view), html(view))
    return written


def default_dir(cmp: compare.Comparison, reports_dir: str | Path = "reports") -> Path:
    """reports/compare/<scenario>/<newest baseline run>_vs_<newest candidate run>/ (+N when pooled)."""
    def tag(side: compare.Side) -> str:
        runs = side.run_ids
        return runs[-1] + (f"+{len(runs) - 1}" if len(runs) > 1 else "")

    scenario = cmp.baseline.scenario if cmp.baseline.scenario == cmp.candidate.scenario else "mixed"
    folder = location.where(reports_dir) / "compare"
    out = folder / scenario / f"{tag(cmp.baseline)}_vs_{tag(cmp.candidate)}"
    return out if isinstance(out, location.Remote) else names.inside(folder, out)  # record values name it


def text_summary(cmp: compare.Comparison, failing: pd.DataFrame) -> str:
    """A few lines for the terminal: the sides, the verdict counts, and the cases that fail the gate."""
    view = build_view(cmp)
    b, c = view["sides"]
    lines = [
        f"baseline  {b['selector']}: {', '.join(b['runs'])} ({b['summary']})",
        f"candidate {c['selector']}: {', '.join(c['runs'])} ({c['summary']})",
        view["gate"],
        *view["reach"],
        view["headline"],
        *view["drift"],
        "what differs: " + ("; ".join(view["differences"]) or "nothing recorded"),
    ]
    per_case = {c.case_id: c.differences for c in cmp.environment.cases}  # the kernel that ran, ...
    # the failing cases, then the ambiguous ones that pass: a change of a size the data cannot place
    ambiguous = cmp.cases[(cmp.cases["verdict"].eq(stats.AMBIGUOUS) | cmp.cases["time_verdict"].eq(stats.AMBIGUOUS))
                          & ~cmp.cases["case_id"].isin(failing["case_id"])]
    listed = [(_tag(row, note), row, case_id) for rows, note in ((failing, ""), (ambiguous, " (not gated)"))
              for row, case_id in zip(case_rows(rows), rows["case_id"])]
    cells = [(tag, f"{row['workload']} {row['precision']} {row['shape']}", row["speedup_change"] or row["time_change"])
             for tag, row, _ in listed]
    # each column as wide as its widest cell (the verdicts' at least TAG_WIDTH): a long tag ("unchanged,
    # time regressed, cycles unchanged") or shape moves every line alike
    tag_w, name_w, change_w = (max([least, *(len(c[i]) for c in cells)]) for i, least in enumerate((TAG_WIDTH, 0, 0)))
    for (tag, name, change), (_, row, case_id) in zip(cells, listed):
        lines.append(f"  {tag:<{tag_w}} {name:<{name_w}}  {change:<{change_w}}  {row['detail']}".rstrip()
                     + "".join(f"; {d.text}" for d in _unsaid(row, per_case.get(case_id, ()))))
    return "\n".join(lines)


# The terminal's verdict column is at least this wide.
TAG_WIDTH = 28


def _tag(row: dict, note: str) -> str:
    """A listed case's verdicts on the terminal: "regressed", "n/a, time regressed, cycles unchanged"."""
    return (row["verdict"] + (f", time {row['time_verdict']}" if row["time_verdict"] else "")
            + (f", cycles {row['cycles_verdict']}" if row["cycles_verdict"] else "") + note)


def _unsaid(row: dict, differences) -> list:
    """A case's own differences its terminal line adds, less a measured clock its detail already
    names (where the cycles verdict is not the time's: `compare.clock_sentence`)."""
    named = bool(row["cycles_verdict"]) and row["cycles_verdict"] != row["time_verdict"]
    return [d for d in differences if not (named and d.column in envdiff.MEASURED)]
