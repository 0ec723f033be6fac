"""Text from scenarios and records, made safe for a terminal: descriptions, failure reasons and
record values reach it, and none of them may move its cursor, retitle it or ring it."""

from __future__ import annotations

import re

# C0 controls but newline and tab (ESC, BEL, CR, backspace, ...), DEL, and the C1 controls.
CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


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
