"""What the tables of `run` and `recommend` look like where a person reads them: in a real
pseudo-terminal (the pty a shell gets, at 80 and 200 columns) and piped. On a terminal rich's styles
must arrive whole (not as `[3m...[0m` remnants of escapes whose ESC byte the control-character
filter took), no number or name may be folded across lines, and text from a record still may not
reach the terminal as a control sequence."""

from __future__ import annotations

import fcntl
import functools
import os
import pty
import re
import struct
import subprocess
import sys
import termios
from pathlib import Path

import pytest

from tests.conftest import TINY_SCENARIO
from tests.json_docs import validated

ROOT = Path(__file__).resolve().parent.parent
REFERENCE = ROOT / "results" / "reference" / "cpu_models"
# What a terminal interprets: CSI sequences (styles, cursor) and OSC ones (titles, links).
ESCAPES = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(\x07|\x1b\\)")
# What is left of a style whose ESC byte was removed: "[1m", "[3m", "[0m", "[38;5;1m".
REMNANT = re.compile(r"\[[0-9;]*m")


def in_pty(args: list[str], columns: int, cwd: Path) -> str:
    """stdout and stderr of `python -m suite ARGS` run in a new pseudo-terminal `columns` wide,
    as a terminal shows them (escape sequences still in)."""
    main, child = pty.openpty()
    fcntl.ioctl(child, termios.TIOCSWINSZ, struct.pack("HHHH", 50, columns, 0, 0))
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES", "NO_COLOR")}
    env.update(TERM="xterm-256color", PYTHONPATH=str(ROOT))
    process = subprocess.Popen([sys.executable, "-m", "suite", *args], stdin=child, stdout=child, stderr=child,
                               cwd=cwd, env=env, start_new_session=True)
    os.close(child)
    chunks = []
    while True:
        try:
            chunk = os.read(main, 65536)
        except OSError:  # EIO: the child side closed
            break
        if not chunk:
            break
        chunks.append(chunk)
    os.close(main)
    assert process.wait(timeout=120) == 0, b"".join(chunks).decode(errors="replace")
    return b"".join(chunks).decode().replace("\r\n", "\n")


def piped(args: list[str], cwd: Path) -> str:
    done = subprocess.run([sys.executable, "-m", "suite", *args], capture_output=True, text=True, cwd=cwd,
                          env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=120, check=True)
    return done.stdout


def shown(text: str) -> list[str]:
    """The lines a terminal displays: escape sequences interpreted (dropped), none left half."""
    plain = ESCAPES.sub("", text)
    assert "\x1b" not in plain, repr(plain)
    assert not REMNANT.search(plain), f"escape remnant {REMNANT.search(plain).group()!r} in:\n{plain}"
    return plain.splitlines()


def assert_whole(lines: list[str], words: set[str]) -> None:
    """Each word (a number, a name, a shape) appears unbroken on some line."""
    missing = sorted(w for w in words if not any(re.search(rf"(^|\s){re.escape(w)}(\s|$)", line) for line in lines))
    assert not missing, f"folded or missing: {missing}\n" + "\n".join(lines)


@pytest.fixture(scope="module")
def tiny_folder(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("terminal")
    (folder / "tiny.toml").write_text(TINY_SCENARIO, encoding="utf-8")
    return folder


def _summary_words(results: Path) -> set[str]:
    from suite.analysis.outcome import summary
    from suite.results import store

    rows = summary.summary_rows(store.read([results]))
    return {row[key] for row in rows for key in ("precision", "best_tflops", "geomean_speedup", "median_rel_err")
            if row[key]}


@pytest.mark.slow
@pytest.mark.parametrize("columns", [80, 200])
def test_the_end_of_run_summary_reads_cleanly_in_a_real_terminal(tiny_folder, columns):
    results = tiny_folder / f"results{columns}"
    text = in_pty(["run", "tiny.toml", "--scenarios", ".", "--results", str(results), "--no-report"], columns,
                  tiny_folder)
    assert "\x1b[" in text  # a terminal: rich styles it (the escapes arrive whole)
    assert not re.search(r"\d\u2026", ESCAPES.sub("", text)), "a number cut short by an ellipsis (the progress bar)"
    lines = shown(text)
    start = next(i for i, line in enumerate(lines) if line.startswith("Summary"))
    end = next(i for i in range(start, len(lines)) if lines[i].startswith("mpsuite:"))
    table = lines[start:end]
    assert all(len(line) <= columns for line in table)
    assert_whole(table, _summary_words(results / "tiny"))
    # the headline's sentences after it wrap between words, so the terminal never cuts one ("0\n.35%")
    notes = lines[end:]
    assert notes and all(len(line) <= columns for line in notes), "\n".join(notes)


@functools.cache  # one `recommend --json` for the three tests that read it
def _recommend_words() -> frozenset[str]:
    """The settings and speedups `recommend` picks, from its JSON (in this process: what is tested
    is the text the processes below print)."""
    import contextlib
    import io
    import json

    from suite import cli

    with contextlib.redirect_stdout(io.StringIO()) as out:
        assert cli.main(["recommend", str(REFERENCE), "--max-rel-err", "1e-2", "--json"]) == 0
    doc = validated(json.loads(out.getvalue()), "recommend")
    words = {p["setting"] for p in doc["picks"] if " " not in p["setting"]}
    return frozenset(words | {f"{p['speedup']:.3g}x" for p in doc["picks"] if p["speedup"] is not None})


@pytest.mark.parametrize("columns", [80, 200])
def test_recommend_reads_cleanly_in_a_real_terminal_at_any_width(columns):
    lines = shown(in_pty(["recommend", str(REFERENCE), "--max-rel-err", "1e-2"], columns, ROOT))
    assert lines[0].startswith("Which precision")
    assert all(len(line) <= columns for line in lines)
    assert_whole(lines, _recommend_words())


def test_piped_tables_are_plain_text_with_whole_numbers():
    text = piped(["recommend", str(REFERENCE), "--max-rel-err", "1e-2"], ROOT)
    assert "\x1b" not in text and not REMNANT.search(text)
    assert_whole(text.splitlines(), _recommend_words())


def test_a_table_keeps_filtering_what_records_hold(monkeypatch, capsys):
    """The styles pass the CLI's filter; a cell from a record does not: its escape sequence,
    bell and bidi override are dropped before rich lays the table out."""
    from suite.cli import output
    from suite.core.text import Printable

    class Terminal:
        def __init__(self):
            self.text = ""

        def write(self, text):
            self.text += text
            return len(text)

        def flush(self):
            pass

        def isatty(self):
            return True

    terminal = Terminal()
    monkeypatch.setattr(sys, "stdout", Printable(terminal))
    monkeypatch.setenv("TERM", "xterm-256color")
    monkeypatch.delenv("NO_COLOR", raising=False)
    output.table([{"name": "fp8\x1b]0;pwned\x07\x1b[31m_rowwise\u202e", "speedup": "1.5x"}],
                 [("name", "precision"), ("speedup", "speedup")], "Title")
    assert "\x1b[" in terminal.text  # rich's own styles arrived
    assert "pwned" in terminal.text and "\x1b]0;" not in terminal.text and "\x07" not in terminal.text
    assert "\x1b[31m" not in terminal.text and "\u202e" not in terminal.text
    assert "fp8]0;pwned[31m_rowwise" in ESCAPES.sub("", terminal.text)


def test_a_table_too_wide_for_the_terminal_is_printed_row_by_row(monkeypatch, capsys):
    from suite.cli import output

    monkeypatch.setattr(output, "PIPED_WIDTH", 40)
    columns = [(f"c{i}", f"column {i}") for i in range(6)]
    output.table([{f"c{i}": f"{10 ** 6 + i}.25x" for i in range(6)}], columns, "Wide")
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "Wide" and "column 0: 1000000.25x" in lines
    assert_whole(lines, {f"{10 ** 6 + i}.25x" for i in range(6)})


ADVISE = ["advise", "deepseek-v3", "--device", "b200", "--gpus", "8", "--ep", "8"]  # 11 recipes, 48 GEMMs
ADVISE_H100 = ["advise", "llama3-8b", "--device", "h100", "--gpus", "8", "--seq", "8192", "--batch", "2"]  # 6 recipes


@functools.cache
def _advice(args: tuple[str, ...]) -> dict:
    """`advise --json` (in this process: what is tested is the text the processes below print)."""
    import contextlib
    import io
    import json

    from suite import cli

    with contextlib.redirect_stdout(io.StringIO()) as out:
        assert cli.main([*args, "--json"]) == 0
    return validated(json.loads(out.getvalue()), "advise")


def _rows_after(lines: list[str], first_words: list[str]) -> tuple[list[str], list[list[str]]]:
    """A table's heading line (the one starting with `first_words`) and the words of the lines
    after the rule under it."""
    head = next(i for i, line in enumerate(lines) if line.split()[:len(first_words)] == first_words)
    assert set(lines[head + 1].strip()) <= {"─", "-", " "}, lines[head + 1]
    return lines[head].split(), [line.split() for line in lines[head + 2:]]


@pytest.mark.parametrize("columns,args", [(100, ADVISE), (200, ADVISE), (200, ADVISE_H100)])
def test_advise_prints_tables_not_a_field_per_line_at_100_columns_and_wider(columns, args):
    """A GEMM per row (with every recipe's speedup where they fit side by side, else the best
    recipe's) and a recipe per row: deepseek-v3's 48 GEMMs and 11 recipes printed as 'heading:
    value' lines were 900 lines no one reads."""
    doc = _advice(tuple(args))
    lines = shown(in_pty(args, columns, ROOT))
    assert all(len(line) <= columns for line in lines), "\n".join(line for line in lines if len(line) > columns)
    able = {r["recipe"]: r for r in doc["recipes"] if r["unsupported"] is None}
    heading, rows = _rows_after(lines, ["layer", "pass", "MxKxN", "count"])
    recipes = [word for word in heading if word in able]
    best = max(able.values(), key=lambda r: r["step_speedup"])["recipe"]
    assert recipes == (list(able) if columns == 200 and args == ADVISE_H100 else [best]), heading
    names = {g["layer"].rpartition("*.")[2] for g in doc["gemms"]}
    gemms = [words for words in rows if words and words[0] in names]
    assert len(gemms) >= len(doc["gemms"])  # then the recipe table's keep cells, which name layers too
    for words, g in zip(gemms, doc["gemms"]):
        groups = [f"x{g['groups']}"] if g["groups"] > 1 else []
        expected = [g["layer"].rpartition("*.")[2], g["pass"], f"{g['m']}x{g['k']}x{g['n']}", *groups, str(g["count"]),
                    *[f"{g['recipes'][r]['speedup']:.2f}x" for r in recipes]]
        assert words[:len(expected)] == expected
    _, rows = _rows_after(lines, ["recipe"])
    assert [words[:2] for words in rows if words and words[0] in able] == [
        [name, f"{r['step_speedup']:.2f}x"] for name, r in able.items()]


def test_piped_advise_is_plain_text_with_whole_numbers():
    doc = _advice(tuple(ADVISE))
    text = piped(ADVISE, ROOT)
    assert "\x1b" not in text and not REMNANT.search(text)
    assert_whole(text.splitlines(), {f"{r['step_speedup']:.2f}x" for r in doc["recipes"] if r["step_speedup"]}
                 | {f"{g['m']}x{g['k']}x{g['n']}" for g in doc["gemms"]})
