"""What every command prints the same way: one JSON document (`--json`), a table, a progress note."""

from __future__ import annotations

import io
import json
import shutil
import sys


def print_json(doc) -> None:
    """One JSON document on stdout (the `--json` output of every command; docs/cli.md)."""
    print(json.dumps(doc, indent=2, default=str, allow_nan=False))


def table(rows: list[dict], columns: list[tuple[str, str]], title: str | None = None) -> None:
    """A table on stdout: rich's box drawing on a terminal, plain columns when piped."""
    from rich.console import Console
    from rich.table import Table

    from rich import box

    shown = Table(title=title, title_justify="left", box=box.SIMPLE_HEAD if sys.stdout.isatty() else None,
                  show_edge=False, pad_edge=False)
    for _, heading in columns:
        shown.add_column(heading, overflow="fold")
    for row in rows:
        shown.add_row(*(str(row.get(key, "")) for key, _ in columns))
    tty = sys.stdout.isatty()
    buffer = io.StringIO()
    Console(file=buffer, width=shutil.get_terminal_size().columns if tty else 240, force_terminal=tty,
            highlight=False, emoji=False, markup=False).print(shown)
    print("\n".join(line.rstrip() for line in buffer.getvalue().splitlines()))


def info(args, message: str) -> None:
    """A progress note on stderr, unless --quiet."""
    if not getattr(args, "quiet", False):
        print(f"mpsuite: {message}", file=sys.stderr)


def missing(value) -> bool:
    """None or NaN: a cell with nothing to show."""
    return value is None or (isinstance(value, float) and value != value)
