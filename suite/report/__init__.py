"""Render a report from records: `index.html`, `report.md` and SVG plots in one folder.

Only this package writes `reports/`. It computes nothing new: every number shown is a record column
or comes from `suite.analysis` applied to the records, so a report can be re-rendered from
`results/` alone (`python -m suite report results/<scenario>`).
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pandas as pd

from suite.analysis.advise import measured as advise
from suite.analysis.frame import derived
from suite.analysis.outcome import answers, energy, fleet, summary
from suite.analysis.roofline import crossover
from suite.core import names
from suite.core.text import fmt
from suite.report.pages import PLOT_SUFFIX, environment, figure, filled, md_image, md_table, md_text, publish, write_pages
from suite.results import columns
from suite.scenario import registry

ENV_COLUMNS = [
    "device", "device_name", "compute_capability", "sm_count", "torch_version", "cuda_version",
    "cudnn_version", "driver_version", columns.LIBRARIES, "triton_version",
    "python_version", "cpu_model", "cpu_isa", "cpu_flags", "cpu_isa_env", "cpu_threads", "cpu_clock_mhz", "host", "git_sha",
    "git_dirty", "code_hash",
]


# A table longer than this helps nobody; the full set is in the results parquet.
MAX_CASE_ROWS = 2000


def _throttle_note(r) -> str:
    """' (throttled 35%: SwPowerCap)' for a case whose GPU throttled while it was measured."""
    fraction = r.get("throttled_fraction")
    if fraction is None or pd.isna(fraction) or fraction <= 0:
        return ""
    reasons = r.get("throttle_reasons") or ""
    return f" (throttled {fraction:.0%}{': ' + reasons if reasons else ''})"


def _stop_note(r) -> str:
    """'budget', or 'cap (1 sample)' for a case the whole-case cap cut short."""
    reason = str(r.get("stop_reason") or "")
    n = r.get("n_samples")
    if reason == "cap" and n is not None and pd.notna(n):
        return f"cap ({int(n)} sample{'s' if int(n) != 1 else ''})"
    return reason


def _case_rows(df: pd.DataFrame) -> list[dict]:
    rows = []
    head = df.head(MAX_CASE_ROWS)
    declared = _declared_case_columns()
    leveled = _has(df, "rel_ci_level")  # else every rel_ci is McGill's: the column's title says so
    cells = zip(head.to_dict("records"), derived.is_emulated(head), derived.stalls(head), derived.shape_labels(head),
                derived.variants(head))
    for r, emu, stall, shape, variant in cells:
        ok = r["status"] == "ok"
        speed = ok and not emu
        throttled = _throttle_note(r) if ok else ""
        stalled = f" (stalls: {stall:.0%} of samples over {derived.STALL_FACTOR:g}x the median)" \
            if pd.notna(stall) else ""
        rows.append({
            "workload": r["workload"],
            "shape": shape,
            "precision": variant,
            "status": r["status"] + (" (emulated: timing is not device speed)" if ok and emu else "") + throttled
            + stalled + (f" ({r['implausible']})" if ok and isinstance(r.get("implausible"), str) else ""),
            "css": r["status"] + (" throttled" if throttled or stalled or (ok and isinstance(r.get("implausible"), str))
                                  else ""),
            "time_ms": fmt(r.get("time_ms_median"), ".4g") if ok else "",
            "spread": _spread_cell(r, leveled) if ok else "",
            "stop": _stop_note(r) if ok else "",
            "tflops": fmt(r.get("tflops"), ".4g") if speed else "",
            "pct_peak": fmt(r.get("pct_of_peak"), ".1f", "%") if speed else "",
            "speedup": _speedup_cell(r) if speed else "",
            "medians": fmt(r.get("speedup_medians"), ".3g", "x") if speed else "",
            "predicted": _predicted_cell(r) if speed else "",
            "roofline": _roofline_cell(r) if speed else "",
            "rel_err": fmt(r.get("rel_err"), ".2e") if ok else "",
            "sqnr_db": fmt(r.get("sqnr_db"), ".1f") if ok else "",
            "reason": r.get("reason") or "",
            **{column: fmt(r.get(column), form) if ok else "" for column, _, form in declared},
        })
    return rows


def _declared_case_columns() -> list[tuple[str, str, str]]:
    """The columns the workloads add to the table of every case ((column, title, format), each once,
    in folder order: `suite.scenario.declare.WorkloadRecord.case_columns`)."""
    found = {}
    for record in registry.WORKLOADS.values():
        for column in record.case_columns:
            found.setdefault(column[0], column)
    return list(found.values())


# An interval's level shown beside it where below this (the column's title says 95%).
SHOWN_BELOW = 0.95


def _level_note(level) -> str:
    """', 75%': the level an interval reached where it is below the column's 95% (too few rounds or
    batches for more); '' where it reached 95%."""
    return f", {100 * level:.3g}%" if level is not None and pd.notna(level) and level < SHOWN_BELOW else ""


def _spread_cell(r, leveled: bool) -> str:
    """'1.2%': the median's CI half-width at 95% or more; '3.1% (75%)': at the lower level its
    samples or batches allowed (`rel_ci_level`); '1.2% (≤91%)': a run before issue #38 among later
    ones (`leveled`; a table of such runs only says it in its title, `OLD_SPREAD`)."""
    value, level = fmt(r.get("rel_ci"), ".1%"), r.get("rel_ci_level")
    if not value or value == "inf":
        return value
    if level is None or pd.isna(level):
        return f"{value} (≤91%)" if leveled else value
    note = _level_note(level)
    return f"{value} ({note[2:]})" if note else value


def _speedup_cell(r) -> str:
    """'2.95x (2.8-3.1)': a paired speedup and its interval from the rounds, at 95% or more; '2.9x
    (2.8-3.1, 75%)': at the lower level its rounds allowed (`speedup_paired_level`: 5 rounds or fewer
    give their range); '3x': a ratio of medians (a setting timed one case after another)."""
    value = fmt(r.get("speedup"), ".3g", "x")
    if not value or pd.isna(r.get("speedup_paired")):
        return value
    low, high = fmt(r.get("speedup_paired_low"), ".3g"), fmt(r.get("speedup_paired_high"), ".3g")
    return f"{value} ({low}-{high}{_level_note(r.get('speedup_paired_level'))})" if low and high else value


def _predicted_cell(r) -> str:
    """'0.41 ms, 1.3x': the roofline model's time and speedup for the case."""
    ms, speedup = fmt(r.get("predicted_ms"), ".3g", " ms"), fmt(r.get("predicted_speedup"), ".3g", "x")
    return ", ".join(x for x in (ms, speedup) if x)


def _roofline_cell(r) -> str:
    """'62% compute': the measured fraction of the roofline and what bounds the case."""
    value = r.get("roofline_fraction")
    fraction = fmt(100 * value, ".3g", "%") if isinstance(value, (int, float)) else ""
    bound = r.get("bound") if isinstance(r.get("bound"), str) else ""
    return " ".join(x for x in (fraction, bound) if x)


def pick_table() -> list[tuple[str, str]]:
    """"Which precision"'s columns: the picks within the budgets of `suite.analysis.outcome.answers`,
    the tight and the loose one (each metric's own bounds: `suite.core.budgets.Metric`), and the
    fastest measured (any error, but within each metric's margin: a training step's loss)."""
    margins = "; ".join(f"{m.judges}: within the {m.words} margin"
                        for m in registry.budget_metrics() if m.margin is not None)
    return [("workload", "workload"), ("setting", "case"), ("baseline", "baseline"),
            ("tight", f"fastest with {answers.tight_budget().describe()}"),
            ("loose", f"fastest with {answers.loose_budget().describe()}"),
            ("fastest", f"fastest measured ({margins})" if margins else "fastest measured"),
            ("not_timed", "within the looser budget, speed not measured here")]


# The pick table's columns of text (left-aligned); the others are a precision and its number.
PICK_TEXT = ("workload", "setting", "baseline", "not_timed")
REASON_COLUMNS = [("status", "status"), ("count", "cases"), ("reason", "reason")]


def _pick_cells(picks: pd.DataFrame) -> list[str]:
    """'bf16 3.2x' per setting decided on speed, 'fp8_rowwise (numerics only, rel. error 3.8e-02)'
    where every precision but the baseline is emulated, 'none' where no precision meets the budget."""
    cells = []
    for r in picks.to_dict("records"):
        if r["pick"] is None:
            cells.append("none")
        elif r["decided_on"] == "accuracy" and r["pick"] == r["baseline"]:
            cells.append(f"{r['pick']} (the baseline: no other recipe within budget)")
        elif r["decided_on"] == "accuracy":
            errors = [m.cell.format(v=r[m.column]) for m in registry.budget_metrics() if m.cell and r[m.column] is not None]
            cells.append(f"{r['pick']} (numerics only, {(errors or ['error not measured'])[0]})")
        else:
            cells.append(f"{r['pick']} {r['speedup']:.3g}x")
    return cells


def _pick_rows(df: pd.DataFrame) -> list[dict]:
    """Per setting (the first MAX_CASE_ROWS): the pick within each report budget and the fastest
    measured (`suite.analysis.outcome.answers.recommend`)."""
    df = answers.with_settings(df)
    shown = df[df["setting_key"].isin(df["setting_key"].unique()[:MAX_CASE_ROWS])]  # a setting's pick needs its rows only
    fastest, tight, loose = answers.recommend_each(
        shown, [answers.trained_budget(), answers.tight_budget(), answers.loose_budget()])
    if fastest.empty or fastest["pick"].isna().all():
        return []
    return pd.DataFrame({"workload": fastest["workload"], "setting": fastest["setting"],
                         "baseline": fastest["baseline"].fillna(""), "tight": _pick_cells(tight),
                         "loose": _pick_cells(loose), "fastest": _pick_cells(fastest),
                         "not_timed": [", ".join(names) for names in loose["not_timed"]]}).to_dict("records")


def _status_counts(status: pd.Series) -> dict:
    """How many records hold each status, in the order the statuses first appear (a categorical
    `status`, as a `lean` read gives, counts in its categories' order, and zero for an unheld one)."""
    counts = status.value_counts(sort=False)
    return counts.reindex(pd.unique(status.dropna())).to_dict()


def build_view(df: pd.DataFrame) -> dict:
    """Everything the templates show, as strings, from the records of one or more runs."""
    df = derived.prepare(df)
    first = df.iloc[0]
    not_ok = df[df["status"] != "ok"]
    reasons = Counter(zip(not_ok["status"], not_ok["reason"].fillna("")))
    families = crossover.measured_families(df)
    cases, picks, summary_rows = _case_rows(df), _pick_rows(df), summary.summary_rows(df)
    case_columns = _case_columns(df)
    return {
        "scenario": ", ".join(sorted(df["scenario"].unique())),
        "headline": summary.headline(df, families),
        "crossovers": crossover.table_rows(families)[:MAX_CASE_ROWS],
        "description": "; ".join(sorted(df["scenario_description"].dropna().unique())) if "scenario_description" in df else "",
        "runs": sorted(df["run_id"].unique()),
        "started_at": first.get("started_at"),
        "env": [(c, first.get(c)) for c in columns.with_libraries(ENV_COLUMNS) if c in df and pd.notna(first.get(c))],
        "counts": _status_counts(df["status"]),
        "summary": summary_rows,
        "summary_columns": filled(summary.SUMMARY_COLUMNS, summary_rows, keep=("workload", "precision")),
        "picks": picks,
        "pick_columns": filled(pick_table(), picks, keep=("workload", "setting")),
        "pick_text": PICK_TEXT,
        "cases": cases,
        "case_columns": filled(case_columns, cases, keep=("workload", "shape", "precision", "status")),
        "cases_left_out": max(0, len(df) - MAX_CASE_ROWS),
        "reasons": [{"status": s, "reason": r, "count": str(n), "css": s} for (s, r), n in reasons.most_common()],
        "baselines": sorted(df["baseline"].dropna().unique()),
        "details": _detail_tables(df),
        "energy": _energy_rows(df),
        "advised": advised_sections(df),
        "plots": [],
    }


ADVISED_NOTE = (
    "This run measured one training step's GEMMs of a model (`python -m suite advise MODEL --scenario`): "
    "each layer's forward (fprop), input-gradient (dgrad) and weight-gradient (wgrad) GEMM at its own "
    "shape (expert GEMMs as one grouped call over the experts, m each expert's rows), and each dense "
    "layer's whole training step (fwd+bwd); per recipe its speedup over the baseline with its casts "
    "timed, and the GEMM alone where its operands were also quantized beforehand. A cell with a word "
    "holds no speed: emulated, skipped or absent. `python -m suite advise MODEL --from` these results "
    "uses the measured speedups."
)


def _advised_cells(run: advise.AdvisedRun) -> dict[tuple, dict]:
    """Per (layer, pass, m, k, n): each recipe's cells, the speedup (and the GEMM alone) or a word."""
    cells: dict[tuple, dict] = {}
    for r in run.measured.rows.to_dict("records"):
        cell = cells.setdefault((r["layer"], r["pass"], r["m"], r["k"], r["n"]), {})
        cell[r["recipe"]] = fmt(r["speedup"], ".3g", "x")
        cell[f"{r['recipe']} alone"] = fmt(r["gemm_only_speedup"], ".3g", "x")
    for r in run.measured.unmatched.to_dict("records"):
        cells.setdefault((r["layer"], r["pass"], r["m"], r["k"], r["n"]), {})[r["recipe"]] = r["note"]
    return cells


def _advised_rows(run: advise.AdvisedRun, keys: list[str]) -> list[dict]:
    """A row per GEMM in the step's order, grouped by layer, each dense layer's fwd+bwd after its passes."""
    cells, gemms = _advised_cells(run), advise.advised_gemms(run.advised)
    whole = {g.layer: g for g in advise.layer_gemms(gemms)}
    rows = []
    for layer in dict.fromkeys(g.layer for g in gemms):
        own = [(g, g.pass_) for g in gemms if g.layer == layer]
        own += [(whole[layer], advise.LAYER_PASS)] if layer in whole else []
        for g, pass_ in own:
            shape = f"{g.m}x{g.k}x{g.n}" + (f" x {g.groups} experts" if g.groups > 1 else "")
            found = cells.get((layer, pass_, g.m, g.k, g.n), {})
            rows.append({"layer": layer, "pass": pass_, "shape": shape, "count": str(g.count),
                         **{key: found.get(key, "") for key in keys}})
    return rows


def advised_sections(df: pd.DataFrame) -> list[dict]:
    """A section per advised scenario among the records (`suite.analysis.advise.measured`): the model,
    its layout and the measured speedups of its step's GEMMs and layers."""
    sections = []
    for run in advise.advised_runs(df):
        a = run.advised
        recipes = [(r, f"{r} vs {run.baseline}") for r in run.recipes]
        recipes += [(f"{r} alone", f"{r}, GEMM alone") for r in run.recipes]
        rows = _advised_rows(run, [key for key, _ in recipes])
        columns = [("layer", "layer"), ("pass", "pass"), ("shape", "m x k x n"), ("count", "per step"), *recipes]
        sections.append({"title": f"{a.model} on {a.device}", "runs": ", ".join(run.runs), "rows": rows,
                         "layout": f"{a.gpus} GPU(s), TP {a.tp}, EP {a.ep}, {a.batch} x {a.seq} tokens per GPU",
                         "columns": filled(columns, rows, keep=("layer", "pass", "shape", "count"))})
    return sections


ENERGY_COLUMNS = [("case", "case"), ("precision", "precision"), ("j_per_tflop", "J/TFLOP"),
                  ("bf16_j_per_tflop", "bf16 J/TFLOP"), ("vs_bf16", "vs bf16")]
ENERGY_NOTE = ("GPU energy per TFLOP of work (NVML's energy counter over the timed samples: mean power "
               "x median call time), each FP8 recipe against its bf16 baseline case; only where measured.")


def _energy_rows(df: pd.DataFrame) -> list[dict]:
    return [{"case": r["case"], "precision": r["precision"], "j_per_tflop": fmt(r["j_per_tflop"], ".3g"),
             "bf16_j_per_tflop": fmt(r["bf16_j_per_tflop"], ".3g"), "vs_bf16": fmt(r["vs_bf16"], ".3g", "x")}
            for r in energy.vs_bf16(df).to_dict("records")]


PICK_NOTE = (
    "Per case, the fastest precision within each budget, with its measured speedup over the in-run "
    "baseline (`python -m suite recommend` answers for any budget): GEMMs and layers by their relative "
    "error against the reference; training steps by their final loss against their reference (the "
    "fp32-master recipe for update-side recipes, else the fp32 twin trained on the same batches). "
    "Where every precision but the baseline is emulated (FP8 on a CPU) there is no speed to rank: "
    "the pick is the most accurate recipe within the budget, numerics only."
)

CROSSOVER_NOTE = (
    "Along each line of shapes a sweep walks (M=K=N, or M at fixed K and N), the size from which the "
    "recipe beats the baseline: measured (interpolated on log axes between the two sizes around it) "
    "and predicted by the roofline model (docs/model.md)."
)

ACCURACY_NOTE = (
    "Errors are against a higher-precision reference computed from the same inputs: float64 for "
    "GEMMs, float32 for layers and training steps."
)

def _detail_tables(df: pd.DataFrame) -> list[dict]:
    tables = []
    for workload, record in registry.WORKLOADS.items():
        spec = record.detail_columns  # workload-specific columns, a table of their own
        rows = df[(df["workload"] == workload) & (df["status"] == "ok")].head(MAX_CASE_ROWS)
        spec = [c for c in spec if c[0] in rows and rows[c[0]].notna().any()]
        if rows.empty or not spec:
            continue
        columns = [("shape", "case"), ("precision", "precision")] + [(c, title) for c, title, _ in spec]
        body = [
            {"shape": shape, "precision": variant,
             **{c: (str(bool(r[c])) if f == "" else fmt(r[c], f)) if pd.notna(r[c]) else "" for c, _, f in spec}}
            for r, shape, variant in zip(rows.to_dict("records"), derived.shape_labels(rows), derived.variants(rows))
        ]
        tables.append({"workload": workload, "columns": columns, "rows": body})
    return tables


CASE_COLUMNS = [
    ("workload", "workload"), ("shape", "case"), ("precision", "precision"), ("status", "status"),
    ("time_ms", "median ms"), ("spread", "±95% CI"), ("stop", "stopped by"), ("tflops", "TFLOP/s"),
    ("pct_peak", "% of peak"), ("speedup", "speedup"), ("predicted", "model: ms, speedup"),
    ("roofline", "of roofline, bound"), ("rel_err", "rel. error"), ("sqnr_db", "SQNR dB"),
]
# where any case was timed in paired rounds with its baseline: its speedup is the paired one, with the
# rounds' 95% interval, and the ratio of medians stands beside it
PAIRED_COLUMNS = [("medians", "ratio of medians")]


# The spread column's title where no record has `rel_ci_level` (runs before issue #38): their rel_ci
# is McGill's notch, 1.57 IQR / sqrt(n), which covers 88-91% from 30 samples and less below.
OLD_SPREAD = "±CI (≤91%: 1.57 IQR/√n)"


def _has(df: pd.DataFrame, column: str) -> bool:
    return column in df and df[column].notna().any()


def _case_columns(df: pd.DataFrame) -> list[tuple[str, str]]:
    has = lambda column: _has(df, column)  # noqa: E731
    columns = list(CASE_COLUMNS)
    if not has("rel_ci_level"):
        columns = [(key, OLD_SPREAD if key == "spread" else label) for key, label in columns]
    if has("speedup_paired"):
        columns = [(key, "speedup, paired rounds (95%)" if key == "speedup" else label) for key, label in columns]
        at = next(i for i, (key, _) in enumerate(columns) if key == "speedup") + 1
        columns[at:at] = PAIRED_COLUMNS
    return columns + [(column, title) for column, title, _ in _declared_case_columns() if has(column)]


def markdown(view: dict) -> str:
    counts = ", ".join(f"{n} {s}" for s, n in sorted(view["counts"].items()))
    env = dict(view["env"])
    where = f"{env.get('device_name', 'unknown device')}, torch {env.get('torch_version', '?')}"
    if env.get("cuda_version"):
        where += f", CUDA {env['cuda_version']}"
    where = md_text(where)
    lines = [
        f"# mpsuite report: {md_text(view['scenario'])}",
        "",
        *([f"- {md_text(line, code_spans=True)}" for line in view["headline"]] + [""] if view["headline"] else []),
        *([md_text(view["description"]), ""] if view["description"] else []),
        f"Run {', '.join(view['runs'])} ({counts}) on {where}. "
        f"Speedups are against the in-run baseline ({md_text(', '.join(view['baselines']) or 'none')}). "
        f"{ACCURACY_NOTE}",
        "",
    ]
    if view["picks"]:
        lines += ["## Which precision", "", PICK_NOTE, "", md_table(view["picks"], view["pick_columns"]), ""]
    if view["crossovers"]:
        lines += ["## Where each recipe starts to pay", "", CROSSOVER_NOTE, "",
                  md_table(view["crossovers"], crossover.TABLE_COLUMNS), ""]
    for section in view["advised"]:
        lines += [f"## Advised: {md_text(section['title'])}", "",
                  f"{md_text(section['layout'])}; run {md_text(section['runs'])}.", "", md_text(ADVISED_NOTE, code_spans=True),
                  "", md_table(section["rows"], section["columns"]), ""]
    lines += [md_image(p["title"], p["file"]) for p in view["plots"]]
    lines += ["", "## Summary", "", md_table(view["summary"], view["summary_columns"]), ""]
    if view["reasons"]:
        lines += ["## Not measured", "", md_table(view["reasons"], REASON_COLUMNS), ""]
    for table in view["details"]:
        lines += [f"## {md_text(table['workload'])}", "", md_table(table["rows"], table["columns"]), ""]
    if view["energy"]:
        lines += ["## Energy", "", ENERGY_NOTE, "", md_table(view["energy"], ENERGY_COLUMNS), ""]
    lines += ["## Cases", "", md_table(view["cases"], view["case_columns"]), ""]
    if view["cases_left_out"]:
        lines += [f"({view['cases_left_out']} more cases are in the results parquet, not listed here.)", ""]
    return "\n".join(lines) + "\n"


def html(view: dict) -> str:
    return environment().get_template("index.html.j2").render(
        view=view, accuracy_note=ACCURACY_NOTE, pick_note=PICK_NOTE, reason_columns=REASON_COLUMNS,
        crossover_columns=crossover.TABLE_COLUMNS, crossover_text=("precision", "case", "family", "device"),
        crossover_note=CROSSOVER_NOTE, energy_columns=ENERGY_COLUMNS, energy_note=ENERGY_NOTE,
        advised_note=ADVISED_NOTE,
    )


def plot_name(kind: str, workload: str) -> str:
    """A plot's file name; the workload is a record value from anywhere, so it is slugged."""
    return f"{kind}_{names.slug(workload)}{PLOT_SUFFIX}"


def render(df: pd.DataFrame, out_dir: str | Path) -> list[Path]:
    """Write the report for these records into out_dir (replacing it whole); returns the files.
    Records from several devices get the fleet report (`suite.report.fleet_page`): this report per
    device, and the devices side by side."""
    if df.empty:
        raise ValueError("no records to report")
    if fleet.is_fleet(df):
        from suite.report import fleet_page

        return fleet_page.render(df, out_dir, render_into)
    return publish(out_dir, lambda staging: render_into(df, staging))


def render_into(df: pd.DataFrame, out: Path) -> list[Path]:
    from suite.report import plots  # matplotlib: paid for by a render, not by a run's end-of-run summary

    df = derived.prepare(df)
    view = build_view(df)
    written = []
    for workload in df["workload"].unique():
        for kind, plot in plots.for_workload(workload).items():
            path = plot(df, workload, out / plot_name(kind, workload))
            if path is not None:
                written.append(path)
                view["plots"].append(figure(path, f"{workload} {kind}"))
    written += write_pages(out, markdown(view), html(view))
    return written


def front_page(df: pd.DataFrame, root: Path) -> Path | None:
    """`root/index.html` across the scenarios of `df`, each already rendered into `root/<scenario>/`:
    their first headline lines, their reports, histories and comparisons (`suite.report.front`)."""
    from suite.report import front

    scenarios = [{"name": name, "headline": summary.headline(derived.rows(df, df["scenario"] == name)),
                  "runs": sorted(df.loc[df["scenario"] == name, "run_id"].unique())}
                 for name in sorted(df["scenario"].unique())]
    return front.render(root, scenarios)
