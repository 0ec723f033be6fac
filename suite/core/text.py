"""Text from scenarios and records, made safe for a terminal: descriptions, failure reasons and
record values reach it, and none of them may move its cursor, retitle it, ring it or reorder what
it shows. And a number as the suite shows it (`fmt`)."""

from __future__ import annotations

import math
import re

# The Unicode bidirectional formatting characters (UAX #9: ALM, LRM, RLM, LRE, RLE, PDF, LRO, RLO,
# LRI, RLI, FSI, PDI): they reorder what a terminal shows, so "fp8_rowwise" can display as another
# name (the "Trojan Source" attack, CVE-2021-42574).
BIDI = "\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069"
# C0 controls but newline and tab (ESC, BEL, CR, backspace, ...), DEL, the C1 controls, and BIDI.
CONTROL = re.compile(f"[\x00-\x08\x0b-\x1f\x7f-\x9f{BIDI}]")


def printable(text: str) -> str:
    return CONTROL.sub("", text)


class Printable:
    """A text stream that drops control characters from what is written (`printable`); `raw` is
    the stream itself, for a writer whose own escape codes are wanted (rich's progress bar)."""

    def __init__(self, stream):
        self.raw = stream

    def write(self, text: str) -> int:
        self.raw.write(printable(text))
        return len(text)

    def __getattr__(self, name):
        return getattr(self.raw, name)


def fmt(value, spec: str = ".3g", suffix: str = "") -> str:
    """A number as a table cell: formatted by `spec`, empty where missing (None, NaN)."""
    if value is None or (isinstance(value, float) and (math.isnan(value))):
        return ""
    if isinstance(value, float) and math.isinf(value):
        return "inf" if value > 0 else "-inf"
    return f"{value:{spec}}{suffix}"
