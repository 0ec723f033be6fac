"""What every page of `suite.report` shares: text made literal Markdown (`md_text`, `md_table`,
`md_image`), and the report folder, checked before any work (`output_dir`), marked with the files a
render wrote (`MARKER`) and replaced whole by `publish`, so a reader never sees one render's plot
beside another's page and nothing a report did not write is ever deleted."""

from __future__ import annotations

import json
import os
import re
import secrets
import sys
import tempfile
from itertools import islice
from pathlib import Path
from typing import Callable

import jinja2
from markupsafe import Markup, escape

from suite.core import files, jsontext, names, text
from suite.core.errors import UserError
from suite.results import location
from suite.results.atomic import atomic_write_text, remove_stale, replace_dir


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


def md_image(title: str, file: str) -> str:
    """An image line; the file is a slugged name (suite.core.names.slug), the title escaped text."""
    return f"![{md_text(title)}]({names.slug(file)})"


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
        _check_replaceable(out, files.held(out) if (out / MARKER).exists() else [p.name for p in islice(out.iterdir(), 1)])
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
LEGACY_FILE = re.compile(r"[^/]+\.(png|svg|md|html)")


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
        listed = jsontext.loads(data)["files"]
        return {name for name in listed if isinstance(name, str)}
    except (ValueError, KeyError, TypeError, UnicodeDecodeError):
        return LEGACY_FILE


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
        held = files.held(old)
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
        (staging / MARKER).write_text(marker_text(files.held(staging)), encoding="utf-8")  # never makes staging again
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


# -- what the HTML pages share ---------------------------------------------------------------------


def code_spans(value) -> Markup:
    """Text as HTML with its `backtick` spans as <code> (the sentences this package writes name
    commands so); everything escaped, and a text with an odd number of backticks left literal."""
    parts = str(value).split("`")
    if len(parts) % 2 == 0:
        return escape(value)
    return Markup("").join(escape(p) if i % 2 == 0 else Markup("<code>%s</code>") % p for i, p in enumerate(parts))


def environment() -> jinja2.Environment:
    """The templates' environment: every string from a scenario or a record autoescaped, an
    undefined name an error, and the `code` filter (`code_spans`)."""
    env = jinja2.Environment(loader=jinja2.PackageLoader("suite.report", "templates"), autoescape=True,
                             undefined=jinja2.StrictUndefined)
    env.filters["code"] = code_spans
    env.globals["SORTABLE_ROWS"] = SORTABLE_ROWS
    return env


# A table of more rows than this is sortable by a click on a heading (a small script in the page).
SORTABLE_ROWS = 10


def filled(columns: list[tuple[str, str]], rows: list[dict], keep: tuple[str, ...] = ()) -> list[tuple[str, str]]:
    """The columns some row fills (and those in `keep`): a column empty in every row ("% of peak"
    on a CPU) is left out rather than shown blank."""
    return [(key, title) for key, title in columns
            if key in keep or any(str(r.get(key) if r.get(key) is not None else "").strip() for r in rows)]


# Plots are SVG (`suite.report.figures`): crisp at any zoom, each point named on hover.
PLOT_SUFFIX = ".svg"


def figure(path: Path, title: str) -> dict:
    """A plot as a page shows it: its file (report.md links it), its title, and its SVG inlined
    (`figures.inline`: an <img> would show no hover names)."""
    from suite.report import figures  # matplotlib: paid for by a page that has plots

    return {"file": path.name, "title": title, "svg": Markup(figures.inline(path))}
