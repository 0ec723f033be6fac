"""The front page across scenarios: `python -m suite report results/` over a folder holding several
scenarios renders each into `<out>/<scenario>/` and writes `<out>/index.html` beside them: per
scenario its first headline line, its report, and the history and comparison reports found under
`<out>/history/` and `<out>/compare/`, where `suite history` and `suite compare` write by default
(`compare/<scenario>/<a>_vs_<b>/`, `history/<scenario>/`), so a CI artifact opens on one page.

Which history or comparison belongs to which scenario is read from its `report.md`, whose first
line this package writes (`# mpsuite history: cpu`); one about no listed scenario (a comparison
across two) is listed under "other reports". An `index.html` that this module did not write is
never replaced (`--out docs` keeps the user's page)."""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path
from urllib.parse import quote

from suite.core import files
from suite.report.pages import MARKER, environment
from suite.results.atomic import atomic_write_text

# What marks a page as this module's (and so replaceable).
GENERATOR = "mpsuite front page"
# The folders, under the front page's, where history and comparison reports are looked for.
KINDS = (("history", "history"), ("compare", "comparison"))
# How deep under those they are looked for: `compare` writes to compare/<scenario>/<a>_vs_<b>/ by
# default, `history` to history/<scenario>/, and `--out` may name a folder one level down.
DEPTH = 2
_TITLE = re.compile(r"# mpsuite (?:comparison|history|report): (.+)")


def _title(folder: Path) -> str | None:
    """The scenario a report folder is about, from its report.md's first line; None for a folder
    that is no report (no marker) or whose first line is not ours."""
    if not (folder / MARKER).is_file():
        return None
    try:
        first = _start(folder / "report.md").split("\n", 1)[0]
    except OSError:  # absent, unreadable, or no regular file: no report of ours
        return None
    match = _TITLE.fullmatch(first)
    return match[1] if match else None


def _start(path: Path, size: int = 4096) -> str:
    """The first `size` bytes of a file as text, read only where it is a regular file: a FIFO named
    index.html or report.md would block a plain open() forever (`suite.core.files`)."""
    with files.reader(path) as f:
        return f.read(size).decode("utf-8", errors="replace")


def _reports_under(folder: Path, depth: int) -> list[tuple[Path, str]]:
    """(folder, scenario) of each report at most `depth` levels under `folder`, in name order; a
    report's own subfolders and hidden folders (a render's staging) are not looked into."""
    found = []
    for entry in sorted(folder.iterdir()) if folder.is_dir() else ():
        if entry.name.startswith(".") or not entry.is_dir():
            continue
        scenario = _title(entry)
        if scenario is not None:
            found.append((entry, scenario))
        elif depth > 1:
            found += _reports_under(entry, depth - 1)
    return found


def _found(root: Path) -> list[dict]:
    """The history and comparison reports under root: kind, scenario, name (its folder under
    history/ or compare/), link (relative to root)."""
    found = []
    for sub, kind in KINDS:
        for report, scenario in _reports_under(root / sub, DEPTH):
            name = report.relative_to(root / sub).as_posix()
            found.append({"kind": kind, "scenario": scenario, "name": name,
                          "link": f"{sub}/{quote(name)}/index.html"})
    return found


def _not_ours(page: Path) -> str | None:
    """Why the page may not be written over (a page of the user's, a FIFO, a folder); None where it
    is absent or this module's."""
    if not os.path.lexists(page):
        return None
    try:
        return None if GENERATOR in _start(page) else "was not written by mpsuite"
    except OSError as err:  # a FIFO, a folder, a dangling link, no permission
        return f"cannot be read: {err.strerror or err}"


def render(root: Path, scenarios: list[dict]) -> Path | None:
    """Write root/index.html for `scenarios` ({"name", "headline": [lines], "runs": [run ids]}, each
    rendered into root/<name>/); None, with a warning, where root holds an index.html of its own."""
    page = root / "index.html"
    why = _not_ours(page)
    if why:
        print(f"mpsuite: warning: {page} {why}; the front page is not written over it", file=sys.stderr)
        return None
    others = _found(root)
    names = {s["name"] for s in scenarios}
    rows = [{**s, "link": f"{s['name']}/index.html", "more": max(0, len(s["headline"]) - 1),
             "related": [o for o in others if o["scenario"] == s["name"]]} for s in scenarios]
    html = environment().get_template("front.html.j2").render(
        generator=GENERATOR, scenarios=rows, others=[o for o in others if o["scenario"] not in names])
    return atomic_write_text(page, html)
