"""What every command prints the same way: one JSON document (`--json`), a table, a progress note."""

from __future__ import annotations

import io
import json
import shutil
import sys
import textwrap

from suite.core.errors import UserError
from suite.core.text import printable

# Piped output has no width to fit: a line as long as this before a cell wraps.
PIPED_WIDTH = 240


def print_json(doc) -> None:
    """One JSON document on stdout (the `--json` output of every command; docs/cli.md)."""
    print(json.dumps(doc, indent=2, default=str, allow_nan=False))


def table(rows: list[dict], columns: list[tuple[str, str]], title: str | None = None) -> None:
    """A table on stdout: rich's box drawing on a terminal, plain columns when piped.

    Cells wrap at their spaces and never inside a word, so a number or a name is never split: where
    the table's words cannot fit the terminal's width side by side, each row is printed as
    'heading: value' lines instead. Columns empty in every row are left out. The cells pass the
    control-character filter here (`suite.core.text.printable`: they hold text from records), and
    the styles rich adds on a terminal are written past the CLI's filter (`Printable.raw`): only
    the suite's own escape codes reach the terminal."""
    headings, cells = _laid_out(rows, columns)
    tty = sys.stdout.isatty()
    width = shutil.get_terminal_size().columns if tty else PIPED_WIDTH
    title = printable(title) if title else None
    widths = _widths(headings, cells, width, boxed=tty)
    if widths is None:
        _vertical(headings, cells, width, title)
        return
    from rich.console import Console

    shown = _rich_table(headings, cells, widths, title, boxed=tty)
    if tty:  # the styles are the suite's own; everything in the cells was filtered above
        Console(file=getattr(sys.stdout, "raw", sys.stdout), width=width, highlight=False, emoji=False,
                markup=False).print(shown)
        return
    buffer = io.StringIO()
    Console(file=buffer, width=width, force_terminal=False, color_system=None, highlight=False, emoji=False,
            markup=False).print(shown)
    print("\n".join(line.rstrip() for line in buffer.getvalue().splitlines()))


def fits(rows: list[dict], columns: list[tuple[str, str]]) -> bool:
    """Whether `table` prints these rows a line each, no cell wrapped: where a command has a
    shorter table to print instead (advise's GEMMs with one recipe's speedup, not every recipe's)."""
    headings, cells = _laid_out(rows, columns)
    tty = sys.stdout.isatty()
    _, most, chrome = _measured(headings, cells, boxed=tty)
    return sum(most) <= (shutil.get_terminal_size().columns if tty else PIPED_WIDTH) - chrome


def _laid_out(rows: list[dict], columns: list[tuple[str, str]]) -> tuple[list[str], list[list[str]]]:
    """The headings and cells a table shows: columns empty in every row left out, text filtered."""
    columns = [(key, heading) for key, heading in columns if not rows or any(str(r.get(key, "")) for r in rows)]
    headings = [printable(heading) for _, heading in columns]
    return headings, [[printable(str(row.get(key, ""))) for key, _ in columns] for row in rows]


def _rich_table(headings: list[str], cells: list[list[str]], widths: list[int] | None, title: str | None,
                boxed: bool):
    from rich.table import Table

    from rich import box

    shown = Table(title=title, title_justify="left", box=box.SIMPLE_HEAD if boxed else None, show_edge=False,
                  pad_edge=False)
    for heading, width in zip(headings, widths or [None] * len(headings)):
        shown.add_column(heading, overflow="fold", width=width)
    for row in cells:
        shown.add_row(*row)
    return shown


def _widths(headings: list[str], cells: list[list[str]], width: int, boxed: bool) -> list[int] | None:
    """Each column's width: its longest line where the table fits; else its longest word plus a
    share of the room left, the headings wrapped before the cells (a heading of three words over a
    column of numbers gives its room to a column of names); None where even the longest words do
    not fit side by side."""
    least, most, chrome = _measured(headings, cells, boxed)
    room = width - chrome
    if sum(most) <= room:
        return most
    if sum(least) > room:
        return None
    columns = list(zip(*cells)) if cells else [()] * len(least)
    body = [max([len(text) for text in column] + [low]) for column, low in zip(columns, least)]
    return _filled(_filled(least, body, room), most, room)


def _measured(headings: list[str], cells: list[list[str]], boxed: bool) -> tuple[list[int], list[int], int]:
    """Each column's longest word and longest line (its heading's included), and the width the
    table's borders and padding take."""
    from rich.console import Console
    from rich.measure import Measurement

    texts = [[heading, *column] for heading, column in zip(headings, zip(*cells) if cells else [()] * len(headings))]
    least = [max((len(word) for text in column for word in text.split()), default=1) or 1 for column in texts]
    most = [max(max((len(text) for text in column), default=1), low) for column, low in zip(texts, least)]
    console = Console(width=100_000, force_terminal=False, color_system=None)
    chrome = Measurement.get(console, console.options, _rich_table(headings, [], least, None, boxed)).maximum - sum(least)
    return least, most, chrome


def _filled(widths: list[int], wanted: list[int], room: int) -> list[int]:
    """Water-filling: the columns that lack least get all they lack, the others equal shares of
    what the room has left."""
    widths, spare = list(widths), room - sum(widths)
    order = sorted(range(len(widths)), key=lambda i: wanted[i] - widths[i])
    for left, i in zip(range(len(order), 0, -1), order):
        give = max(0, min(wanted[i] - widths[i], spare // left))
        widths[i], spare = widths[i] + give, spare - give
    return widths


def _vertical(headings: list[str], cells: list[list[str]], width: int, title: str | None) -> None:
    """A table too wide for the terminal: each row as 'heading: value' lines, rows apart."""
    pad = max(len(h) for h in headings) + 2
    lines = [title, ""] if title else []
    for row in cells:
        for heading, value in zip(headings, row):
            if value:
                lines += textwrap.wrap(value, max(width - pad, 20), initial_indent=f"{heading}:".ljust(pad),
                                       subsequent_indent=" " * pad, break_long_words=False, break_on_hyphens=False)
        lines.append("")
    print("\n".join(lines).rstrip("\n"))


def info(args, message: str) -> None:
    """A progress note on stderr (`note`), unless --quiet."""
    if not getattr(args, "quiet", False):
        note(message)


def note(message: str) -> None:
    """'mpsuite: message' on stderr. On a terminal it wraps at the terminal's width between words
    (the terminal's own hard wrap would cut '0.35%' across two lines); piped, one line each."""
    print(_fitted(f"mpsuite: {message}", sys.stderr), file=sys.stderr)


def say(text: str) -> None:
    """A line of prose on stdout after a table, wrapped as `note` wraps (between words on a
    terminal, one line piped)."""
    print(_fitted(printable(text), sys.stdout))


def _fitted(text: str, stream) -> str:
    if not stream.isatty():
        return text
    width = shutil.get_terminal_size().columns
    return "\n".join(textwrap.wrap(text, width, subsequent_indent="  ", break_long_words=False,
                                    break_on_hyphens=False)) or text


def missing(value) -> bool:
    """None or NaN: a cell with nothing to show."""
    return value is None or (isinstance(value, float) and value != value)


def refuse_no_records(df, sources) -> None:
    """Results of zero rows are refused in one line: an exit 0 with nothing written (report) or a
    traceback (recommend) would pass for an answer."""
    if df.empty:
        raise UserError(f"{', '.join(map(str, sources))}: no records to report (the results hold zero rows)")
