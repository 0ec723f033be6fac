"""The front page across scenarios: `python -m suite report results/` over a folder holding several
scenarios renders each into `<out>/<scenario>/` and writes `<out>/index.html` beside them: per
scenario its first headline line, its report, and the history and comparison reports found under
`<out>/history/` and `<out>/compare/` (where `suite history` and `suite compare` are pointed), so a
CI artifact opens on one page.

Which history or comparison belongs to which scenario is read from its `report.md`, whose first
line this package writes (`# mpsuite history: cpu`); one about no listed scenario (a comparison
across two) is listed under "other reports". An `index.html` that this module did not write is
never replaced (`--out docs` keeps the user's page)."""

from __future__ import annotations

import re
import sys
from pathlib import Path

from suite.report.pages import MARKER, environment
from suite.results.atomic import atomic_write_text

# What marks a page as this module's (and so replaceable).
GENERATOR = "mpsuite front page"
# The folders, under the front page's, where history and comparison reports are looked for.
KINDS = (("history", "history"), ("compare", "comparison"))
_TITLE = re.compile(r"# mpsuite (?:comparison|history|report): (.+)")


def _title(folder: Path) -> str | None:
    """The scenario a report folder is about, from its report.md's first line; None for a folder
    that is no report (no marker) or whose first line is not ours."""
    if not (folder / MARKER).is_file() or not (folder / "report.md").is_file():
        return None
    with open(folder / "report.md", encoding="utf-8", errors="replace") as f:
        match = _TITLE.fullmatch(f.readline().rstrip("\n"))
    return match[1] if match else None


def _found(root: Path) -> list[dict]:
    """The history and comparison reports under root: kind, scenario, link (relative to root)."""
    found = []
    for sub, kind in KINDS:
        folder = root / sub
        for report in sorted(folder.iterdir()) if folder.is_dir() else ():
            scenario = _title(report)
            if report.is_dir() and scenario is not None:
                found.append({"kind": kind, "scenario": scenario, "name": report.name,
                              "link": f"{sub}/{report.name}/index.html"})
    return found


def _ours(page: Path) -> bool:
    if not page.exists():
        return True
    with open(page, encoding="utf-8", errors="replace") as f:
        return GENERATOR in f.read(4096)


def render(root: Path, scenarios: list[dict]) -> Path | None:
    """Write root/index.html for `scenarios` ({"name", "headline": [lines], "runs": [run ids]}, each
    rendered into root/<name>/); None, with a warning, where root holds an index.html of its own."""
    page = root / "index.html"
    if not _ours(page):
        print(f"mpsuite: warning: {page} was not written by mpsuite; the front page is not written over it",
              file=sys.stderr)
        return None
    others = _found(root)
    names = {s["name"] for s in scenarios}
    rows = [{**s, "link": f"{s['name']}/index.html", "more": max(0, len(s["headline"]) - 1),
             "related": [o for o in others if o["scenario"] == s["name"]]} for s in scenarios]
    html = environment().get_template("front.html.j2").render(
        generator=GENERATOR, scenarios=rows, others=[o for o in others if o["scenario"] not in names])
    return atomic_write_text(page, html)
