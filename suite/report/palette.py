"""One colour and one marker per precision, the same in every plot of every report.

A precision's colour is fixed by its place in the registry (`suite.scenario.registry.PRECISIONS`,
the order its folders declare), never by which precisions a plot happens to hold: the baseline
does not leave the cycle, so bf16 is one colour in the speedup, throughput and accuracy plots of
one page and of the next report. A precision no folder declares (records from elsewhere) takes a
place from its name's checksum. The variants of one precision (`bf16_adamw8bit` and
`bf16_adamw8bit (master=bf16_sr)`, `suite.analysis.frame.labels`) share its colour and marker and differ
in line style and marker fill.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass

import pandas as pd

from suite.analysis.frame.labels import combinations
from suite.scenario import registry

# Twenty colours, by registry place: matplotlib's tab10 without its grey (fp32 blue, bf16 green,
# as readers know them), then eleven that differ from those and, run of six by run of six, from
# each other (the update-side recipes sit at 14..19 and are drawn beside bf16 and fp32). None is
# grey or black: the references (fp32 twins, entropy floors, the 1x line) are.
COLOURS = (
    "#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#bcbd22", "#17becf",
    "#000080", "#800000", "#008080", "#d000d0", "#c8a000", "#5e3c99", "#d95f02", "#4a708b", "#b5446e",
    "#a6761d", "#fa8072",
)
# Eleven markers: with twenty colours, a (colour, marker) pair repeats only after 220 precisions.
MARKERS = "osD^v<>PX*h"
# A precision's second, third ... variant within a frame: another dash and, from the second on,
# a hollow marker (what the legend shows beside the name).
DASHES = ("-", "--", ":", "-.", (0, (5, 1, 1, 1)))
# References (fp32 twins, entropy floors, the 1x line) are grey or black: no precision takes them.
REFERENCE = "#555555"


@dataclass(frozen=True)
class Style:
    colour: str
    marker: str
    dash: object = "-"
    hollow: bool = False

    def line(self) -> dict:
        """Keyword arguments of `Axes.plot` / `errorbar` for a line with markers."""
        return dict(color=self.colour, marker=self.marker, ls=self.dash,
                    mfc="white" if self.hollow else self.colour, mec=self.colour)

    def scatter(self) -> dict:
        """Keyword arguments of `Axes.scatter` for its points."""
        return dict(marker=self.marker, facecolors="white" if self.hollow else self.colour,
                    edgecolors=self.colour)


def _place(precision) -> int:
    names = list(registry.PRECISIONS)
    if precision in names:
        return names.index(precision)
    return len(names) + zlib.crc32(str(precision).encode()) % (len(COLOURS) * len(MARKERS))


def precision_style(precision) -> Style:
    """The precision's own colour and marker (its first variant's style)."""
    i = _place(precision)
    return Style(COLOURS[i % len(COLOURS)], MARKERS[i % len(MARKERS)])


def styles(df: pd.DataFrame) -> dict[str, Style]:
    """variant -> its style, for the frame's (precision, variant) pairs: a precision's variants in
    name order, the one named by the bare precision first (so it keeps the solid line)."""
    pairs = combinations({"precision": df["precision"], "variant": df["variant"]})[1]
    out = {}
    for precision, g in pairs.groupby("precision", sort=False):
        base = precision_style(precision)
        for k, variant in enumerate(sorted(g["variant"].astype(str), key=lambda v: (v != str(precision), v))):
            out[variant] = Style(base.colour, base.marker, DASHES[k % len(DASHES)], hollow=k > 0)
    return out
