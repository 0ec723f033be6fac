"""What every plot of every page shares: a figure laid out by matplotlib's constrained layout (no
"Tight layout not applied" on stderr, legends beside the axes never cut off), plain-number ticks on
every log axis, and SVG output (crisp at any zoom) in which each point, bar or curve that was given
a name carries it as an SVG `<title>`: a browser shows the case on hover. `inline` turns a written
SVG into markup a page embeds (an `<img>` shows no titles), its ids made unique to the figure.

How the names get in: matplotlib writes an artist whose url is set inside `<a xlink:href=url>`,
per point for a collection (`set_urls`); `save` rewrites those anchors, whose urls are our own
`#mpsuite-name-<n>`, into groups that open with the `<title>`, escaped (names come from records).
A line's markers (`ax.plot(x, y, "o", ls="none")`) are written as one anchor around a `<use>` per
point, in order (`#mpsuite-points-<n>-<count>`: names n to n + count - 1), each `<use>` given its own group and
title: thousands of points drawn that way cost a tenth of a scatter's (matplotlib styles each of a
collection's elements on its own), for the same hover names.
"""

from __future__ import annotations

import io
import math
import re
import weakref
from pathlib import Path
from xml.sax.saxutils import escape

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.lines import Line2D  # noqa: E402
from matplotlib.ticker import FixedLocator, FuncFormatter, LogLocator, NullFormatter  # noqa: E402

from suite.core import names as slugs  # noqa: E402
from suite.results.atomic import atomic_write  # noqa: E402

# Same input, same file: ids hashed from a fixed salt, no date in the metadata (committed reports
# diff only where a number changed).
matplotlib.rcParams["svg.hashsalt"] = "mpsuite"
# Text as text, not glyph outlines: tick labels and legends are searchable, selectable and checked
# by the browser test, and the files are a fraction of the size.
matplotlib.rcParams["svg.fonttype"] = "none"

# Text from records (a precision, a shape, a parameter value) is drawn as it is written: never parsed
# as mathtext (a precision named `$\nosuch$` crashed the render) nor handed to TeX. A Text reads these
# when it is made, so `new` sets them for every figure (a notebook's style may have changed them).
LITERAL_TEXT = {"text.parse_math": False, "text.usetex": False}

_NAMES: "weakref.WeakKeyDictionary[object, list[str]]" = weakref.WeakKeyDictionary()
_URL = "#mpsuite-name-"
_POINTS_URL = "#mpsuite-points-"


def new(width: float, height: float, nrows: int = 1, ncols: int = 1, **kw):
    """A figure of nrows x ncols axes (a 2-d array) under constrained layout, its text literal."""
    matplotlib.rcParams.update(LITERAL_TEXT)
    return plt.subplots(nrows, ncols, figsize=(width, height), layout="constrained", squeeze=False, **kw)


def name(artist, texts) -> None:
    """Give an artist its hover name (a string), or a collection one name per element (a list),
    in the order matplotlib draws them: the points of a scatter, the bars of a bar container, the
    markers of a line (each of its points finite and inside the figure: a point matplotlib leaves
    out would shift the names after it, so a line whose markers do not match its names in number
    is left unnamed)."""
    fig = artist.get_figure() if hasattr(artist, "get_figure") else artist[0].get_figure()
    names = _NAMES.setdefault(fig, [])
    if isinstance(texts, str):
        artist.set_url(f"{_URL}{len(names)}")
        names.append(texts)
        return
    texts = list(texts)
    if isinstance(artist, Line2D):
        artist.set_url(f"{_POINTS_URL}{len(names)}-{len(texts)}")
        names += texts
        return
    urls = [f"{_URL}{len(names) + i}" for i in range(len(texts))]
    names += texts
    if hasattr(artist, "set_urls"):
        artist.set_urls(urls)
    else:
        for part, url in zip(artist, urls):
            part.set_url(url)


# Tick mantissas on a log axis, finest first: the coarsest set that still gives two ticks inside
# the axis is used, so a narrow axis (errors from 2.8e-3 to 3.9e-3) gets labels where 1-2-5 has none.
NICE = ((1.0,), (1.0, 2.0, 5.0), (1.0, 1.5, 2.0, 3.0, 5.0, 7.0), (1.0, 1.2, 1.5, 2.0, 3.0, 4.0, 5.0, 7.0),
        (1.0, 1.1, 1.2, 1.3, 1.5, 1.7, 2.0, 2.5, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0))
MAX_TICKS = 9


def _nice_log_ticks(lo: float, hi: float) -> list[float]:
    decades = list(range(math.floor(math.log10(lo)), math.ceil(math.log10(hi)) + 1))
    ticks = [10.0**e for e in decades[:: math.ceil(len(decades) / MAX_TICKS)] if lo <= 10.0**e <= hi]
    for mantissas in NICE[1:]:
        if len(ticks) >= 3:
            break
        found = [m * 10.0**e for e in decades for m in mantissas if lo <= m * 10.0**e <= hi]
        if len(found) > MAX_TICKS:
            break
        ticks = found
    return ticks if len(ticks) >= 2 else [lo, hi]


def plain_log_ticks(axis) -> None:
    """Ticks of a log axis at round numbers inside its range, written plainly (0.5, 2, 20, 1e-05):
    matplotlib's `2 x 10^0` labels overlap on a short axis, and a narrow one gets no label at all."""
    lo, hi = sorted(axis.get_view_interval())
    if not (lo > 0 and math.isfinite(hi)):
        return
    axis.set_major_locator(FixedLocator(_nice_log_ticks(lo, hi)))
    axis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:.4g}"))
    axis.set_minor_formatter(NullFormatter())


def _readable(fig) -> None:
    """Every log axis that matplotlib would tick itself gets `plain_log_ticks`."""
    for ax in fig.axes:
        for axis in (ax.xaxis, ax.yaxis):
            if axis.get_scale() == "log" and isinstance(axis.get_major_locator(), LogLocator):
                plain_log_ticks(axis)


_ANCHOR = re.compile(r'<a xlink:href="' + re.escape(_URL) + r'(\d+)" target="_blank">')


_POINTS = re.compile(r'<a xlink:href="' + re.escape(_POINTS_URL) + r'(\d+)-(\d+)" target="_blank">(.*?)</a>', re.S)
_USE = re.compile(r"<use [^>]*/>")


def _named_points(match: re.Match, names: list[str]) -> str:
    """A line's markers (one anchor around a `<use>` per point), each in a group with its title."""
    first, count, body = int(match.group(1)), int(match.group(2)), match.group(3)
    if len(_USE.findall(body)) != count:
        return body  # not one name per drawn point: none rather than wrong ones
    points = iter(names[first:first + count])
    return _USE.sub(lambda m: f"<g class=\"named\"><title>{escape(next(points))}</title>{m.group(0)}</g>", body)


def _titled(svg: str, names: list[str]) -> str:
    """The anchors of named artists as groups opening with their `<title>`; the closing tags of
    exactly those anchors become `</g>` (matplotlib writes no other `<a>`: no other url is set);
    a named line's markers each get a group and title of their own (`_named_points`)."""
    svg = _POINTS.sub(lambda m: _named_points(m, names), svg)
    svg = _ANCHOR.sub(lambda m: f"<g class=\"named\"><title>{escape(names[int(m.group(1))])}</title>", svg)
    return svg.replace("</a>", "</g>")


def save(fig, path: Path) -> Path:
    """Tick, lay out and write the figure as SVG (atomically: concurrent renders never leave half a
    file) with its names as titles, and free it. The folder (a report's staging folder) must exist."""
    try:
        _readable(fig)
        buffer = io.StringIO()
        fig.savefig(buffer, format="svg", metadata={"Date": None})
        svg = _titled(buffer.getvalue(), _NAMES.get(fig, []))
        atomic_write(path, lambda tmp: tmp.write_text(svg, encoding="utf-8"), parents=False)
    finally:
        plt.close(fig)
    return path


_PROLOGUE = re.compile(r"\A.*?(?=<svg\b)", re.S)
_IDS = re.compile(r'(\bid="|xlink:href="#|url\(#)([^")]+)')


def inline(path: Path) -> str:
    """The SVG file as markup for a page: without its XML prologue, every id (and reference to
    one) prefixed with the file's slug, so two figures on a page never share a marker's or a
    clip path's id. The file is one `save` wrote: its only text from records is escaped."""
    svg = _PROLOGUE.sub("", path.read_text(encoding="utf-8"), count=1)
    prefix = slugs.slug(path.stem) + "-"
    svg = _IDS.sub(lambda m: m.group(1) + prefix + m.group(2), svg)
    return svg.replace("<svg ", '<svg class="plot" role="img" ', 1)
