"""The fleet report: records from several devices (`suite.analysis.outcome.fleet`) in one folder.

    <out>/index.html, report.md     across devices: the answer per recipe (where it pays), then each
                                    recipe's speedup per case side by side, one column per device,
                                    and a plot of it per workload
    <out>/device-<device>/          per device, the same report as a single device gets (its tables
                                    and plots: the run report's `render_into`, handed over by `suite.report.render`)

The folder is replaced whole, as every report is (`suite.report.pages.publish`); device names come from
records, so a device's folder is its slugged name (`device_folder`) and its text is escaped
(`md_text`, jinja's autoescape).
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable

import numpy as np
import pandas as pd

from suite.analysis.outcome import fleet
from suite.core import names
from suite.core.text import fmt
from suite.report.pages import PLOT_SUFFIX, environment, figure, md_image, md_table, md_text, publish, write_pages

DEVICE_TABLE = [("device", "device"), ("runs", "runs"), ("hosts", "hosts"), ("versions", "torch / CUDA"),
                ("cases", "cases"), ("page", "its report")]
RECIPE_NOTE = ("Per recipe and device, the geometric mean of its speedups over the in-run baseline "
               "(above 1x: it pays on that card), over the cases measured there.")
NOTE = ("Each device's speedups are over its own in-run baseline, so a column is that card's answer; "
        "a case is the same case on every device (joined by case id). Several runs of one device: the "
        "geometric mean of their speedups. Empty with a note: not measured there, and why.")
# A table of more cases than this helps nobody; every case is in the results and the device pages.
MAX_ROWS = 2000


def device_folder(device: str) -> str:
    """A device's subfolder: its slugged name after a prefix no page or plot of the fleet page has
    (a device called "report.md" must not take the page's place)."""
    return names.slug(f"device-{device}")


def _join(values) -> str:
    return ", ".join(sorted({str(v) for v in values if v is not None and not pd.isna(v)}))


def _device_rows(df: pd.DataFrame) -> list[dict]:
    rows = []
    for device, g in fleet.by_device(df):
        versions = _join(g["torch_version"]) + (f" / {_join(g['cuda_version'])}" if g["cuda_version"].notna().any() else "")
        counts = g["status"].value_counts()
        counts = counts[counts > 0]  # a categorical status counts every category, held or not
        rows.append({"device": device, "runs": _join(g["run_id"]), "hosts": _join(g["host"]) if "host" in g else "",
                     "versions": versions, "cases": ", ".join(f"{n} {s}" for s, n in sorted(counts.items())),
                     "page": f"{device_folder(device)}/index.html", "md_page": f"{device_folder(device)}/report.md"})
    return rows


def _case_tables(table: pd.DataFrame, devices: list[str]) -> list[dict]:
    """Per workload: the side-by-side rows as text (a speedup, or the note saying why not)."""
    # a device's cell is keyed apart from the fixed columns: a device could be named "precision"
    columns = [("precision", "precision"), ("baseline", "baseline"), ("setting", "case")] + \
        [(f"device:{d}", d) for d in devices]
    out = []
    for workload, g in table.head(MAX_ROWS).groupby("workload", sort=True):
        rows = [{"precision": r["precision"], "baseline": r["baseline"], "setting": r["setting"],
                 **{f"device:{d}": fmt(r[d], ".3g", "x") if pd.notna(r.get(d)) else str(r.get(f"{d} note") or "not run")
                    for d in devices}} for _, r in g.iterrows()]
        out.append({"workload": workload, "columns": columns, "rows": rows, "plot": None})
    return out


def _recipe_rows(cell_rows: pd.DataFrame, devices: list[str]) -> tuple[list[dict], list[tuple[str, str]]]:
    """Per recipe (workload, precision, baseline), a cell per device: its geometric-mean speedup
    and over how many cases, or why it was not measured there: "does it pay on this card"."""
    columns = [("workload", "workload"), ("precision", "precision"), ("baseline", "baseline")] + \
        [(f"device:{d}", d) for d in devices]
    rows = []
    for (workload, precision, baseline), g in fleet.recipes(cell_rows).groupby(
            ["workload", "precision", "baseline"], sort=True):
        cells = {f"device:{d}": "not run" for d in devices}
        for _, r in g.iterrows():
            cells[f"device:{r['device']}"] = (f"{fmt(r['geomean_speedup'], '.3g', 'x')} ({fleet.share(r)})"
                                              if r["measured"] else str(r["note"]))
        rows.append({"workload": workload, "precision": precision, "baseline": baseline, **cells})
    return rows, columns


def build_view(df: pd.DataFrame) -> dict:
    """Everything the pages show, as strings; `frame` is the side-by-side table the plots draw."""
    devices = fleet.devices(df)
    cell_rows = fleet.cells(df)
    table = fleet.side_by_side(cell_rows) if len(cell_rows) else pd.DataFrame()
    recipes, recipe_columns = _recipe_rows(cell_rows, devices) if len(cell_rows) else ([], [])
    return {
        "frame": table,
        "recipes": recipes,
        "recipe_columns": recipe_columns,
        "scenario": ", ".join(sorted(df["scenario"].unique())),
        "headline": fleet.answer_lines(df) if len(cell_rows) else [f"{len(devices)} devices: {', '.join(devices)}; "
                                                                    "no case has a baseline to be compared against."],
        "devices": _device_rows(df),
        "tables": _case_tables(table, devices) if len(table) else [],
        "rows_left_out": max(0, len(table) - MAX_ROWS),
        "note": NOTE,
        "recipe_note": RECIPE_NOTE,
    }


def _plot(rows: pd.DataFrame, devices: list[str], workload: str, path: Path) -> Path | None:
    """Grouped bars: per case, each device's speedup (log scale when they span a decade)."""
    values = rows[devices].apply(pd.to_numeric, errors="coerce")
    if values.isna().all().all():
        return None
    labels = (rows["precision"] + " " + rows["setting"]).tolist()
    from suite.report import figures  # matplotlib: paid for by a render

    fig, axes = figures.new(min(24, max(7, 0.45 * len(rows) * max(1, len(devices)) + 2)), 4.8)
    ax = axes[0, 0]
    width = 0.8 / len(devices)
    x = np.arange(len(rows))
    for i, device in enumerate(devices):  # bars coloured by device: a precision is the bar's case
        bars = ax.bar(x + (i - (len(devices) - 1) / 2) * width, values[device].to_numpy(float), width, label=device)
        figures.name(bars, [f"{label} on {device}: {fmt(v, '.3g', 'x') or 'not measured'}"
                            for label, v in zip(labels, values[device].to_numpy(float))])
    ax.axhline(1.0, color="k", lw=0.8)
    finite = values.to_numpy(float)[np.isfinite(values.to_numpy(float))]
    if len(finite) and finite.max() / max(finite.min(), 1e-12) > 10:
        ax.set_yscale("log")
    ax.set_xticks(x, labels, rotation=45, ha="right", fontsize=7)
    ax.set_ylabel("speedup over the in-run baseline (x)")
    ax.set_title(f"{workload}: speedup per case on each device (missing bar: not measured there)")
    ax.legend(fontsize=7)
    ax.grid(True, axis="y", alpha=0.3)
    return figures.save(fig, path)


def markdown(view: dict) -> str:
    lines = [f"# mpsuite fleet report: {md_text(view['scenario'])}", ""]
    lines += [f"- {md_text(line)}" for line in view["headline"]] + [""]
    lines += ["## Devices", "", md_table([{**r, "page": r["device"]} for r in view["devices"]], DEVICE_TABLE[:-1]), ""]
    lines += [f"- [{md_text(r['device'])}]({r['md_page']})" for r in view["devices"]] + [""]
    if view["recipes"]:
        lines += ["## Does it pay, per device", "", view["recipe_note"], "",
                  md_table(view["recipes"], view["recipe_columns"]), ""]
    lines += ["## Speedup per case, side by side", "", view["note"], ""]
    for t in view["tables"]:
        lines += [f"### {md_text(t['workload'])}", ""]
        if t["plot"]:
            lines += [md_image(t["plot"]["title"], t["plot"]["file"]), ""]
        lines += [md_table(t["rows"], t["columns"]), ""]
    if view["rows_left_out"]:
        lines += [f"({view['rows_left_out']} more cases are in the device pages and the results, not listed here.)", ""]
    return "\n".join(lines) + "\n"


def html(view: dict) -> str:
    return environment().get_template("fleet.html.j2").render(view=view, device_table=DEVICE_TABLE)


def render(df: pd.DataFrame, out_dir: str | Path, render_into: Callable[[pd.DataFrame, Path], list[Path]]) -> list[Path]:
    """Write the fleet report for these records (several devices) into out_dir, replacing it whole;
    each device's own report is `render_into(records, folder)`."""
    return publish(out_dir, lambda staging: _render_fleet(df, staging, render_into))


def _render_fleet(df: pd.DataFrame, out: Path, render_into) -> list[Path]:
    written = []
    for device, records in fleet.by_device(df):
        folder = out / device_folder(device)
        folder.mkdir()
        written += render_into(records, folder)
    view = build_view(df)
    devices, table = fleet.devices(df), view["frame"]
    for t in view["tables"]:
        rows = table[table["workload"] == t["workload"]].head(MAX_ROWS)
        path = _plot(rows, [d for d in devices if d in rows], t["workload"],
                     out / f"fleet_speedup_{names.slug(t['workload'])}{PLOT_SUFFIX}")
        if path is not None:
            written.append(path)
            t["plot"] = figure(path, f"{t['workload']} speedup by device")
    written += write_pages(out, markdown(view), html(view))
    return written
