"""Render a report from records: `index.html`, `report.md` and PNG plots in one folder.

Only this package writes `reports/`. It computes nothing new: every number shown is a record column
or comes from `suite.analysis` applied to the records, so a report can be re-rendered from
`results/` alone (`python -m suite report results/<scenario>`).
"""

from __future__ import annotations

import json
import math
import os
import re
import secrets
import sys
import tempfile
from collections import Counter
from itertools import islice
from pathlib import Path
from typing import Callable

import jinja2
import pandas as pd

from suite.analysis import answers, crossover, derived, energy, fleet, update
from suite import files, names, text
from suite.results import groups, location
from suite.results.atomic import atomic_write_text, remove_stale, replace_dir
from suite.errors import UserError
from suite.scenario import registry

ENV_COLUMNS = [
    "device", "device_name", "compute_capability", "sm_count", "torch_version", "cuda_version",
    "cudnn_version", "driver_version", "torchao_version", "te_version", "triton_version",
    "python_version", "cpu_model", "cpu_isa", "cpu_flags", "cpu_isa_env", "cpu_threads", "cpu_clock_mhz", "host", "git_sha",
    "git_dirty", "code_hash",
]


def fmt(value, spec: str = ".3g", suffix: str = "") -> str:
    if value is None or (isinstance(value, float) and (math.isnan(value))):
        return ""
    if isinstance(value, float) and math.isinf(value):
        return "inf" if value > 0 else "-inf"
    return f"{value:{spec}}{suffix}"


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
    cells = zip(head.to_dict("records"), derived.is_emulated(head), derived.stalls(head), derived.shape_labels(head))
    for r, emu, stall, shape in cells:
        ok = r["status"] == "ok"
        speed = ok and not emu
        throttled = _throttle_note(r) if ok else ""
        stalled = f" (stalls: {stall:.0%} of samples over {derived.STALL_FACTOR:g}x the median)" \
            if pd.notna(stall) else ""
        rows.append({
            "workload": r["workload"],
            "shape": shape,
            "precision": r["precision"],
            "status": r["status"] + (" (emulated: timing is not device speed)" if ok and emu else "") + throttled
            + stalled + (f" ({r['implausible']})" if ok and isinstance(r.get("implausible"), str) else ""),
            "throttled": bool(throttled or stalled or (ok and isinstance(r.get("implausible"), str))),
            "time_ms": fmt(r.get("time_ms_median"), ".4g") if ok else "",
            "spread": fmt(r.get("rel_ci"), ".1%") if ok else "",
            "stop": _stop_note(r) if ok else "",
            "ref_ratio": fmt(r.get("fidelity_ratio"), ".3f") if ok else "",
            "tflops": fmt(r.get("tflops"), ".4g") if speed else "",
            "pct_peak": fmt(r.get("pct_of_peak"), ".1f", "%") if speed else "",
            "speedup": fmt(r.get("speedup"), ".3g", "x") if speed else "",
            "predicted": _predicted_cell(r) if speed else "",
            "roofline": _roofline_cell(r) if speed else "",
            "rel_err": fmt(r.get("rel_err"), ".2e") if ok else "",
            "sqnr_db": fmt(r.get("sqnr_db"), ".1f") if ok else "",
            "reason": r.get("reason") or "",
        })
    return rows


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


def summary_rows(df: pd.DataFrame) -> list[dict]:
    """The summary table's rows, as the report and the end of a run show them (formatted text)."""
    return [
        {
            "workload": s["workload"], "precision": s["precision"],
            "cases": f"{s['ok']} ok, {s['skipped']} skipped, {s['failed']} failed",
            "best_tflops": fmt(s["best_tflops"], ".4g"),
            "geomean_speedup": fmt(s["geomean_speedup"], ".3g", "x"),
            "median_rel_err": fmt(s["median_rel_err"], ".2e"),
            "note": "emulated: accuracy only" if s["emulated"] else "",
        }
        for _, s in derived.summary(df).iterrows()
    ]


def headline(df: pd.DataFrame, families: list[dict] | None = None) -> list[str]:
    """The first lines of a report, each a sentence with its numbers: that it is partial, if so;
    the answer (per workload, at its largest case, each precision's speedup over the baseline and
    its error: `suite.analysis.answers`; for update-side recipes, which trained to within a margin
    of the fp32-master loss and at what bytes per parameter: `suite.analysis.update`); then what makes the numbers unusual (a slow path and its
    cause, cases cut short by the cap, stalls) and what was not measured and why."""
    lines = (_partial_lines(df) + groups.shard_lines(df) + answers.largest_setting_answers(df)
             + answers.versus_answers(df) + answers.trend_answers(df) + crossover.answer_lines(df, families) + update.update_answers(df) + _implausible_lines(df)
             + _unusual_lines(df))
    missing = answers.not_measured(df)
    return lines + ([missing] if missing else [])


def _partial_lines(df: pd.DataFrame) -> list[str]:
    lines = []
    if "run_partial" in df:
        partial = df[df["run_partial"].fillna(False).astype(bool)]
        if "run_group" in partial:  # a shard's is said by `groups.shard_lines`, with the shard's own run id
            partial = partial[partial["run_group"].isna()]
        for (scenario, run), g in partial.groupby(["scenario", "run_id"], sort=True):
            planned = g["run_planned_cases"].dropna()
            of = f" of {int(planned.iloc[0])}" if len(planned) else ""
            lines.append(f"Partial report: run {run} stopped after {len(g)}{of} cases; "
                         f"`python -m suite run {scenario} --resume {run}` finishes it.")
    return lines


def _implausible_lines(df: pd.DataFrame) -> list[str]:
    """Timings the roofline model says cannot be right (the record's `implausible` column)."""
    if "implausible" not in df:
        return []
    bad = df[df["implausible"].notna()]
    if bad.empty:
        return []
    labels = derived.shape_labels(bad)
    shown = "; ".join(f"{r['workload']} {r['precision']} {label}: {r['implausible']}"
                      for r, label in zip(bad.head(3).to_dict("records"), labels.head(3)))
    more = f"; and {len(bad) - 3} more" if len(bad) > 3 else ""
    return [f"{len(bad)} timing(s) flagged by the roofline model: {shown}{more}."]


def _roofline_note(df: pd.DataFrame, run_id: str, precision: str) -> str:
    """', at 0.45% of its roofline of 0.333 TFLOP/s' for a slow path's cases, where recorded (on a CPU
    without native bf16 that roofline is its fp32 FMA peak)."""
    if "roofline_fraction" not in df:
        return ""
    g = df[(df["run_id"] == run_id) & (df["precision"] == precision)]
    fraction = derived.geomean(g["roofline_fraction"])
    if not fraction == fraction:  # nan: not modelled
        return ""
    peak = pd.to_numeric(g["roofline_tflops"], errors="coerce").dropna()
    at = f" of {peak.iloc[0]:.3g} TFLOP/s" if len(peak) else ""
    return f", at {fraction:.2%} of its roofline{at}"


def _unusual_lines(df: pd.DataFrame) -> list[str]:
    lines = []
    for slow in derived.slow_paths(df):
        worst = f", up to {slow['worst']:.3g}x" if slow["worst"] > 1.05 * slow["slowdown"] else ""
        cause = f": {slow['cause']}" if slow["cause"] else ""
        lines.append(f"{slow['precision']} is {slow['slowdown']:.3g}x slower than {slow['baseline']} here "
                     f"(geomean of {slow['cases']} cases{worst}{_roofline_note(df, slow['run_id'], slow['precision'])})"
                     f"{cause}.")
    ok = df[df["status"] == "ok"]
    if "stop_reason" in ok:
        capped = ok[ok["stop_reason"] == "cap"]
        if len(capped):
            fewest = int(capped["n_samples"].min())
            lines.append(f"{len(capped)} case(s) stopped at the whole-case cap with fewer samples than asked "
                         f"(as few as {fewest}): one call is slow against the cap, so their medians are "
                         "known less well (see ±95% CI).")
    stalled = int(derived.stalls(df).notna().sum())
    if stalled:
        lines.append(f"{stalled} case(s) show stalls (at least {derived.STALL_SHARE:.0%} of samples over "
                     f"{derived.STALL_FACTOR:g}x the median): threads descheduled on a busy machine? "
                     "`--threads 1` steadies them.")
    return lines


# The accuracy budgets the report's "which precision" table answers for (relative error against
# the reference): about bf16's unit roundoff (2^-8 = 3.9e-3) at 1e-2, ten times tighter at 1e-3.
REPORT_BUDGETS = (1e-3, 1e-2)
PICK_TABLE = [("workload", "workload"), ("setting", "case"), ("baseline", "baseline"),
              *[(f"within_{b:g}", f"fastest with rel. error <= {b:g}") for b in REPORT_BUDGETS],
              ("fastest", "fastest measured"), ("not_timed", "within 1e-2, speed not measured here")]


def _pick_cells(picks: pd.DataFrame) -> pd.Series:
    """'bf16 3.2x' per setting, 'none' where no precision meets the budget."""
    speed = pd.to_numeric(picks["speedup"], errors="coerce").map(lambda v: f"{v:.3g}x")
    return (picks["pick"].astype(str) + " " + speed).where(picks["pick"].notna(), "none")


def _pick_rows(df: pd.DataFrame) -> list[dict]:
    """Per setting (the first MAX_CASE_ROWS): the fastest precision within each report budget and
    overall (`suite.analysis.answers.recommend`)."""
    df = answers.with_settings(df)
    shown = df[df["setting_key"].isin(df["setting_key"].unique()[:MAX_CASE_ROWS])]  # a setting's pick needs its rows only
    budgets = [answers.Budget(max_rel_err=b) for b in REPORT_BUDGETS]
    fastest, *within = answers.recommend_each(shown, [answers.Budget(), *budgets])
    if fastest.empty or fastest["speedup"].isna().all():
        return []
    table = pd.DataFrame({"workload": fastest["workload"], "setting": fastest["setting"],
                          "baseline": fastest["baseline"].fillna(""), "fastest": _pick_cells(fastest)})
    for budget, picks in zip(REPORT_BUDGETS, within):
        table[f"within_{budget:g}"] = _pick_cells(picks).to_numpy()
        if budget == 1e-2:
            table["not_timed"] = picks["not_timed"].fillna("").to_numpy()
    return table.to_dict("records")


def build_view(df: pd.DataFrame) -> dict:
    """Everything the templates show, as strings, from the records of one or more runs."""
    df = derived.prepare(df)
    first = df.iloc[0]
    not_ok = df[df["status"] != "ok"]
    reasons = Counter(zip(not_ok["status"], not_ok["reason"].fillna("")))
    families = crossover.measured_families(df)
    return {
        "scenario": ", ".join(sorted(df["scenario"].unique())),
        "headline": headline(df, families),
        "crossovers": crossover.table_rows(families)[:MAX_CASE_ROWS],
        "description": "; ".join(sorted(df["scenario_description"].dropna().unique())) if "scenario_description" in df else "",
        "runs": sorted(df["run_id"].unique()),
        "started_at": first.get("started_at"),
        "env": [(c, first.get(c)) for c in ENV_COLUMNS if c in df and pd.notna(first.get(c))],
        "counts": df["status"].value_counts(sort=False).to_dict(),
        "summary": summary_rows(df),
        "picks": _pick_rows(df),
        "cases": _case_rows(df),
        "cases_left_out": max(0, len(df) - MAX_CASE_ROWS),
        "reasons": [{"status": s, "reason": r, "count": n} for (s, r), n in reasons.most_common()],
        "baselines": sorted(df["baseline"].dropna().unique()),
        "case_columns": CASE_COLUMNS + (REF_COLUMNS if "fidelity_ratio" in df and df["fidelity_ratio"].notna().any() else []),
        "details": _detail_tables(df),
        "energy": _energy_rows(df),
        "plots": [],
    }


ENERGY_COLUMNS = [("case", "case"), ("precision", "precision"), ("j_per_tflop", "J/TFLOP"),
                  ("bf16_j_per_tflop", "bf16 J/TFLOP"), ("vs_bf16", "vs bf16")]
ENERGY_NOTE = ("GPU energy per TFLOP of work (NVML's energy counter over the timed samples: mean power "
               "x median call time), each FP8 recipe against its bf16 baseline case; only where measured.")


def _energy_rows(df: pd.DataFrame) -> list[dict]:
    return [{"case": r["case"], "precision": r["precision"], "j_per_tflop": fmt(r["j_per_tflop"], ".3g"),
             "bf16_j_per_tflop": fmt(r["bf16_j_per_tflop"], ".3g"), "vs_bf16": fmt(r["vs_bf16"], ".3g", "x")}
            for r in energy.vs_bf16(df).to_dict("records")]


PICK_NOTE = (
    "Per case, the fastest precision whose relative error meets each budget, with its measured "
    "speedup over the in-run baseline (`python -m suite recommend` answers for any budget). "
    "Emulated precisions (FP8 on a CPU) have no speed here; the last column names those within 1e-2."
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
            {"shape": shape, "precision": r["precision"],
             **{c: (str(bool(r[c])) if f == "" else fmt(r[c], f)) if pd.notna(r[c]) else "" for c, _, f in spec}}
            for r, shape in zip(rows.to_dict("records"), derived.shape_labels(rows))
        ]
        tables.append({"workload": workload, "columns": columns, "rows": body})
    return tables


# Text from scenarios and records (a description, a reason, a parameter value) lands in report.md,
# which CI shows as a job summary: nothing in it may become a heading, link, image, emphasis, table
# cell or HTML there. Control characters (CR included: CommonMark ends a line at a lone CR) become
# spaces; the characters CommonMark and GFM give a meaning are backslash-escaped (an escaped '<' is a
# literal '<', never a tag); '_' only where it could open or close emphasis, so fp8_rowwise reads as is.
_MD_CONTROL = re.compile(f"[\\x00-\\x1f\\x7f-\\x9f\\u2028\\u2029{text.BIDI}]")
_MD_PUNCT = re.compile(r"[\\`*\[\]<>|~!&]|(?<![A-Za-z0-9])_|_(?![A-Za-z0-9])")
# what would start a heading, quote, list or rule: escaped at the start of the text
_MD_BLOCK = re.compile(r"^(\s*)(?:([#>+=-])|(\d+)([.)])(?=\s|$))")


def md_text(value, code_spans: bool = False) -> str:
    """`value` as literal Markdown text on one line; `code_spans` keeps backticks, for sentences
    this package writes with commands in them."""
    text = _MD_CONTROL.sub(" ", str(value))
    pattern = _MD_PUNCT if not code_spans else re.compile(_MD_PUNCT.pattern.replace("`", ""))
    text = pattern.sub(lambda m: "\\" + m.group(0), text)
    return _MD_BLOCK.sub(lambda m: m.group(1) + (f"\\{m.group(2)}" if m.group(2) else f"{m.group(3)}\\{m.group(4)}"), text)


def md_table(rows: list[dict], columns: list[tuple[str, str]]) -> str:
    sep = "|" + "|".join("---" for _ in columns) + "|"
    head = "| " + " | ".join(md_text(title) for _, title in columns) + " |"
    body = ["| " + " | ".join(md_text(r[key]) for key, _ in columns) + " |" for r in rows]
    return "\n".join([head, sep, *body])


SUMMARY_COLUMNS = [
    ("workload", "workload"), ("precision", "precision"), ("cases", "cases"),
    ("best_tflops", "best TFLOP/s"), ("geomean_speedup", "geomean speedup"),
    ("median_rel_err", "median rel. error"), ("note", "note"),
]
CASE_COLUMNS = [
    ("workload", "workload"), ("shape", "case"), ("precision", "precision"), ("status", "status"),
    ("time_ms", "median ms"), ("spread", "±95% CI"), ("stop", "stopped by"), ("tflops", "TFLOP/s"),
    ("pct_peak", "% of peak"), ("speedup", "speedup"), ("predicted", "model: ms, speedup"),
    ("roofline", "of roofline, bound"), ("rel_err", "rel. error"), ("sqnr_db", "SQNR dB"),
]
# shown when an independent harness timed the cases too (the fidelity workload)
REF_COLUMNS = [("ref_ratio", "suite / ref. harness time")]


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
        lines += ["## Which precision", "", PICK_NOTE, "", md_table(view["picks"], PICK_TABLE), ""]
    if view["crossovers"]:
        lines += ["## Where each recipe starts to pay", "", CROSSOVER_NOTE, "",
                  md_table(view["crossovers"], crossover.TABLE_COLUMNS), ""]
    lines += [md_image(p["title"], p["file"]) for p in view["plots"]]
    lines += ["", "## Summary", "", md_table(view["summary"], SUMMARY_COLUMNS), ""]
    if view["reasons"]:
        lines += ["## Not measured", "", md_table(
            [{**r, "count": str(r["count"])} for r in view["reasons"]],
            [("status", "status"), ("count", "cases"), ("reason", "reason")],
        ), ""]
    for table in view["details"]:
        lines += [f"## {md_text(table['workload'])}", "", md_table(table["rows"], table["columns"]), ""]
    if view["energy"]:
        lines += ["## Energy", "", ENERGY_NOTE, "", md_table(view["energy"], ENERGY_COLUMNS), ""]
    lines += ["## Cases", "", md_table(view["cases"], view["case_columns"]), ""]
    if view["cases_left_out"]:
        lines += [f"({view['cases_left_out']} more cases are in the results parquet, not listed here.)", ""]
    return "\n".join(lines) + "\n"


def md_image(title: str, file: str) -> str:
    """An image line; the file is a slugged name (suite.names.slug), the title escaped text."""
    return f"![{md_text(title)}]({names.slug(file)})"


def html(view: dict) -> str:
    env = jinja2.Environment(
        loader=jinja2.PackageLoader("suite.report", "templates"),
        autoescape=True,  # every string from a scenario or a record is escaped
        undefined=jinja2.StrictUndefined,
    )
    return env.get_template("index.html.j2").render(
        view=view, summary_columns=SUMMARY_COLUMNS, case_columns=view["case_columns"],
        accuracy_note=ACCURACY_NOTE, pick_columns=PICK_TABLE, pick_note=PICK_NOTE,
        crossover_columns=crossover.TABLE_COLUMNS, crossover_note=CROSSOVER_NOTE,
        energy_columns=ENERGY_COLUMNS, energy_note=ENERGY_NOTE,
    )


def output_dir(out_dir: str | Path) -> Path:
    """The report folder, checked replaceable, its parent created: a path that cannot be one (a
    file, no permission, the current folder, a folder of other files) is the user's to fix, so it
    is a one-line error rather than a traceback, and it comes before any work is done. A symbolic
    link is followed: the folder it points to is the report's (replaced, the link kept)."""
    out = location.where(out_dir)
    if isinstance(out, location.Remote):
        return _remote_output_dir(out)
    out = _local_folder(str(out_dir), out)
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise UserError(f"{out}: cannot write a report there: {err.strerror or err}") from None
    if out.exists() and not out.is_dir():
        raise UserError(f"{out}: cannot write a report there: it is a file, not a folder")
    if out.is_dir():  # without a marker the first entry says enough (--out at a home folder lists no more)
        _check_replaceable(out, _held(out) if (out / MARKER).exists() else [p.name for p in islice(out.iterdir(), 1)])
    if not os.access(out.parent, os.W_OK) or (out.is_dir() and not os.access(out, os.W_OK)):
        raise UserError(f"{out}: cannot write a report there: permission denied")
    return out


def _local_folder(given: str, out: Path) -> Path:
    """`out`, or the folder its symbolic link points to; `--out ''`, the current folder and one
    holding it are refused: a report replaces its folder by renaming, which they cannot be."""
    if not given.strip():
        raise UserError("--out '' names no folder: give the report a folder of its own, e.g. --out reports/mine")
    if out.is_symlink():
        target = Path(os.path.realpath(out))
        if not target.is_dir():
            which = "is not a folder" if target.exists() else "does not exist"
            raise UserError(f"{out}: a symbolic link to {target}, which {which}; a report follows a link to its "
                            "folder: create the folder, or give --out another one")
        out = target
    real, here = Path(os.path.realpath(out)), Path.cwd().resolve()
    if real == here or real in here.parents:
        raise UserError(f"--out {given}: is the current folder{' or holds it' if real != here else ''}, and a report "
                        f"replaces its folder whole: give it a folder of its own, e.g. --out {Path(given) / 'report'}")
    return out


# A report folder holds this marker, listing every file the render wrote. A folder is replaced only
# when it carries one (or is empty), and only the files listed are removed, so `--out docs`, `--out .`
# or a note dropped into a report's folder is never deleted (issue #24).
MARKER = ".mpsuite-report"
# A marker written before markers listed their files: then files named as a report's count as its.
LEGACY_FILE = re.compile(r"[^/]+\.(png|md|html)")


def marker_text(files: list[str]) -> str:
    return json.dumps({"mpsuite": "report folder, replaced whole by each render; only the files listed are removed",
                       "files": sorted(files)}, indent=1) + "\n"


def _listed(folder) -> "set[str] | re.Pattern | None":
    """The files the folder's marker lists (paths relative to it); LEGACY_FILE for an old marker;
    None where there is no marker (or it is no file: a FIFO is not opened)."""
    marker = folder / MARKER
    try:
        data = marker.read_bytes() if isinstance(marker, location.Remote) else files.read_bytes(marker, 2**20, "marker")
    except Exception:  # absent, a FIFO, too large, a storage error: no marker to trust
        return None
    try:
        listed = json.loads(data)["files"]
        return {name for name in listed if isinstance(name, str)}
    except (ValueError, KeyError, TypeError, UnicodeDecodeError):
        return LEGACY_FILE


def _held(folder: Path) -> list[str]:
    """Every entry of the folder but subfolders, at any depth, as '/'-joined relative paths (links
    and special files included, never followed)."""
    held = []
    for root, dirs, names_here in os.walk(folder):
        base = Path(root).relative_to(folder)
        held += [(base / n).as_posix() for n in names_here + [d for d in dirs if (Path(root) / d).is_symlink()]]
    return sorted(held)


def _foreign(listed, held: list[str]) -> list[str]:
    """What of `held` no report wrote, by the folder's marker (`_listed`): all of it without one."""
    if listed is None:
        return held
    if isinstance(listed, re.Pattern):
        return [h for h in held if h != MARKER and not listed.fullmatch(h.rsplit("/", 1)[-1])]
    return [h for h in held if h != MARKER and h not in listed]


def _check_replaceable(out, held: list[str]) -> None:
    listed = _listed(out)
    foreign = _foreign(listed, held)
    if foreign and listed is None:
        raise UserError(f"{out}: not an mpsuite report folder (no {MARKER} marker) and not empty (it holds "
                        f"{foreign[0]!r}), and a report replaces its folder whole: give --out (run: --reports) a new "
                        "or empty folder, or a report's")
    if foreign:
        raise UserError(f"{out}: holds {foreign[0]!r}, which no mpsuite report wrote, and a report replaces its "
                        "folder whole: move it out of the folder, or give --out (run: --reports) another one")


def _remote_output_dir(out: location.Remote) -> location.Remote:
    """A report prefix in an object store: the same rule as a local folder's (empty, or a report's
    with nothing its marker does not list), since a report replaces everything under it."""
    try:
        held = [p.path[len(out.path) + 1:] for p in out.rglob("*")]
    except Exception as err:
        raise UserError(f"{out}: cannot write a report there: {err}") from None
    _check_replaceable(out, held)
    return out


def _discard(old: Path, out: Path) -> None:
    """Remove a replaced report (by now under a hidden name): the files its marker lists and nothing
    else. Anything else (written into the folder while the new report rendered) is kept, beside the
    report, under a name that says so."""
    if old.is_dir() and not old.is_symlink():
        held = _held(old)
        foreign = set(_foreign(_listed(old), held))
        for name in held:
            if name not in foreign:
                (old / name).unlink(missing_ok=True)
        for root, _, _ in sorted(os.walk(old), key=lambda w: -len(w[0])):  # deepest first
            try:
                os.rmdir(root)
            except OSError:
                pass  # holds what we keep
    if os.path.lexists(old):
        kept = out.with_name(f"{out.name}.kept-{secrets.token_hex(3)}")
        try:
            os.rename(old, kept)
        except OSError:
            kept = old  # the new report is in place either way; the files stay where they are
        print(f"mpsuite: warning: {out} held files no report wrote when the new report replaced it; "
              f"they are kept in {kept}", file=sys.stderr)


def publish(out_dir: str | Path, write: Callable[[Path], list[Path]]) -> list[Path]:
    """Call write(staging) to render a report into a fresh folder, then swap it in for `out_dir`
    (`suite.results.atomic.replace_dir`): a reader, or a kill midway, leaves the old report or the
    new one, never one run's plot beside another run's page. Returns the files at their final place."""
    out = output_dir(out_dir)
    remove_stale(out.parent)  # what a report killed midway left (its process is gone)

    def fill(staging: Path) -> list[Path]:
        written = write(staging)
        for f in written:
            names.inside(staging, f)
        (staging / MARKER).write_text(marker_text(_held(staging)), encoding="utf-8")  # never makes staging again
        return [f.relative_to(staging) for f in written]  # a fleet report's device pages are in subfolders

    if isinstance(out, location.Remote):  # rendered here, then uploaded (`location.upload_folder`)
        with tempfile.TemporaryDirectory(prefix="mpsuite-report-") as folder:
            staging = Path(folder) / "report"
            staging.mkdir()
            written = fill(staging)
            listed = _listed(out)  # the old report's files: only those may go
            try:
                location.upload_folder(staging, out, lambda name: listed is not None and not _foreign(listed, [name]))
            except OSError as err:
                raise UserError(f"{out}: cannot write a report there: {err.strerror or err}") from None
        return [out / f.as_posix() for f in written]
    try:
        written = replace_dir(out, fill, lambda old: _discard(old, out))
    except OSError as err:
        raise UserError(f"{out}: cannot write a report there: {err.strerror or err}") from None
    return [out / f for f in written]


def write_pages(out: Path, markdown_text: str, html_text: str) -> list[Path]:
    """report.md and index.html, each written whole (see suite.results.atomic) into the folder being
    rendered, which must exist (one that vanished fails the render: `replace_dir`)."""
    return [atomic_write_text(out / "report.md", markdown_text, parents=False),
            atomic_write_text(out / "index.html", html_text, parents=False)]


def plot_name(kind: str, workload: str) -> str:
    """A plot's file name; the workload is a record value from anywhere, so it is slugged."""
    return f"{kind}_{names.slug(workload)}.png"


def render(df: pd.DataFrame, out_dir: str | Path) -> list[Path]:
    """Write the report for these records into out_dir (replacing it whole); returns the files.
    Records from several devices get the fleet report (`suite.report.fleet_page`): this report per
    device, and the devices side by side."""
    if df.empty:
        raise ValueError("no records to report")
    if fleet.is_fleet(df):
        from suite.report import fleet_page

        return fleet_page.render(df, out_dir)
    return publish(out_dir, lambda staging: _render_into(df, staging))


def _render_into(df: pd.DataFrame, out: Path) -> list[Path]:
    from suite.report import plots  # matplotlib: paid for by a render, not by a run's end-of-run summary

    df = derived.prepare(df)
    view = build_view(df)
    written = []
    for workload in df["workload"].unique():
        for kind, plot in plots.for_workload(workload).items():
            path = plot(df, workload, out / plot_name(kind, workload))
            if path is not None:
                written.append(path)
                view["plots"].append({"file": path.name, "title": f"{workload} {kind}"})
    written += write_pages(out, markdown(view), html(view))
    return written
