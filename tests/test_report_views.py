"""What a reader sees of a report (issue #27): the committed reference runs rendered by the command
line, then their SVG plots and HTML read back. FP8's accuracy charted where its speed is emulated,
no plot of one series, ticks on every axis, short case names, one colour per precision, a diverged
loss curve clipped and marked, hover names, sortable long tables, empty columns hidden, backticks
as code, numbers sorted by value, a front page across scenarios, and nothing on stderr."""

from __future__ import annotations

import os
import re
import stat
import subprocess
import sys
import threading
from contextlib import contextmanager
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest

from suite import cli
from suite.analysis.frame.labels import sort_key
from suite.report import compare_page, figures, palette, plots
from suite.report.pages import MARKER, code_spans, filled
from suite.workloads.train_step import plots as step_plots

ROOT = Path(__file__).resolve().parent.parent
REFERENCE = ROOT / "results" / "reference"
TITLE = re.compile(r"<title>([^<]*)</title>")


def render(name: str, out: Path) -> subprocess.CompletedProcess:
    """`python -m suite report` of a committed run, as a user runs it (stderr captured)."""
    return subprocess.run([sys.executable, "-m", "suite", "report", str(REFERENCE / name), "--out", str(out), "--quiet"],
                          capture_output=True, text=True, cwd=ROOT, check=True)


@pytest.fixture(scope="module")
def fp8(tmp_path_factory) -> Path:
    """The cpu_fp8 report, rendered in this process (its plots in full): what is read of it is its
    files, not its stderr (the update and models reports' tests read that, of a process of their own)."""
    out = tmp_path_factory.mktemp("cpu_fp8") / "report"
    assert cli.main(["report", str(REFERENCE / "cpu_fp8"), "--out", str(out), "--quiet"]) == 0
    return out


@pytest.fixture(scope="module")
def update(tmp_path_factory):
    out = tmp_path_factory.mktemp("cpu_update") / "report"
    return out, render("cpu_update", out)


def svg_text(path: Path) -> str:
    return path.read_text(encoding="utf-8")


def test_the_fp8_report_charts_each_recipes_error_numerics_only(fp8):
    svg = svg_text(fp8 / "accuracy_gemm.svg")
    names = TITLE.findall(svg)
    assert any(n.startswith("fp8_tensorwise ") and "rel. error" in n for n in names)
    assert any(n.startswith("fp8_rowwise ") and "SQNR" in n for n in names)
    assert "fp8_tensorwise (numerics only)" in svg and "bf16" in svg  # the legend, as text
    for workload in ("linear", "ln_linear", "outlier"):
        assert "fp8_rowwise" in svg_text(fp8 / f"accuracy_{workload}.svg")


def test_no_plot_holds_a_single_series_it_cannot_compare(fp8):
    # only bf16 has real speed in cpu_fp8: throughput, speedup and speed-against-accuracy would show it alone
    assert not list(fp8.glob("throughput_*.svg")) and not list(fp8.glob("tradeoff_*.svg"))
    assert not list(fp8.glob("speedup_*.svg"))


def test_every_plot_has_tick_labels_on_both_axes(fp8, update):
    for svg in [*fp8.glob("*.svg"), *update[0].glob("*.svg")]:
        text = svg_text(svg)
        for axis in ("xtick", "ytick"):
            labels = re.findall(rf'<g id="{axis}_\d+">.*?<text[^>]*>([^<]+)</text>', text, re.S)
            assert [s for s in labels if s.strip()], (svg.name, axis)


def test_category_axes_sort_numbers_by_value():
    names = ["128x512x128 outlier=1e+06", "128x512x128 outlier=100", "128x512x128 outlier=30000",
             "128x512x128 outlier=1000"]
    assert sorted(names, key=sort_key) == [names[1], names[3], names[2], names[0]]
    df = pd.DataFrame({"shape": names, "m": [128] * 4, "k": [512] * 4, "n": [128] * 4})
    assert list(plots._categories(df)) == sorted(names, key=sort_key)


def test_a_dense_series_draws_one_point_per_cell_a_sparse_one_every_point():
    rng = np.random.default_rng(0)
    x, y = rng.uniform(1, 2, 100_000), rng.uniform(1, 2, 100_000)
    few = plots.MAX_POINTS
    assert list(plots._distinct(x[:few], y[:few], False, False)) == list(range(few))
    kept = plots._distinct(x, y, False, False)
    assert len(kept) <= (plots.GRID + 1) * (plots.GRID_ROWS + 1) and kept[0] == 0 and (np.diff(kept) > 0).all()
    cells = {(int((a - 1) * plots.GRID), int((b - 1) * plots.GRID_ROWS)) for a, b in zip(x[kept], y[kept])}
    assert len(cells) >= 0.99 * len(kept)  # (rounding at the range's ends aside) one point per cell


def test_series_are_found_as_groupby_finds_them():
    codes = np.array([2, 0, 2, -1, 1, 0, 2])
    assert [(c, list(at)) for c, at in plots._groups(codes)] == [(2, [0, 2, 6]), (0, [1, 5]), (1, [4])]
    assert plots._groups(np.array([], dtype=np.int64)) == []


def test_a_precision_keeps_its_colour_and_marker_whichever_plot_holds_it():
    alone = pd.DataFrame({"precision": ["bf16"], "variant": ["bf16"]})
    beside = pd.DataFrame({"precision": ["fp32", "bf16", "fp16"], "variant": ["fp32", "bf16", "fp16"]})
    assert palette.styles(alone)["bf16"] == palette.styles(beside)["bf16"] == palette.precision_style("bf16")
    colours = {palette.precision_style(p).colour for p in ("fp32", "bf16", "fp16", "fp8_tensorwise", "fp8_rowwise")}
    assert len(colours) == 5
    variants = pd.DataFrame({"precision": ["bf16_adamw8bit"] * 2,
                             "variant": ["bf16_adamw8bit (master=bf16_sr)", "bf16_adamw8bit"]})
    first, second = (palette.styles(variants)[v] for v in ("bf16_adamw8bit", "bf16_adamw8bit (master=bf16_sr)"))
    assert first.colour == second.colour and not first.hollow and second.hollow


def test_training_step_plots_name_cases_shortly_clip_the_diverged_run_and_keep_stderr_clean(update):
    out, done = update
    assert done.stderr.strip() == "", done.stderr  # no "Tight layout not applied", no warning at all
    svg = svg_text(out / "loss_train_step.svg")
    legend = re.findall(r'<g id="legend_\d+">(.*?)</g>\s*</g>\s*</g>', svg, re.S)
    texts = re.findall(r"<text[^>]*>([^<]+)</text>", " ".join(legend) or svg)
    assert "bf16_adamw8bit (master=bf16_sr)" in svg and max(len(t) for t in texts) < 80
    assert "diverged" in svg and "cut at the axis" in svg
    assert not [t for t in TITLE.findall(svg) if "{" in t]  # no parameter strings in hover names


def test_a_diverged_curve_does_not_set_the_axis():
    calm = [np.linspace(1.2, 1.0, 50), np.linspace(1.2, 1.001, 50)]
    wild = np.concatenate([np.linspace(1.2, 1.0, 25), np.linspace(1.0, 120.0, 25)])
    lo, hi = step_plots.clip_range([*calm, wild], [False, False, True])
    assert 0.9 < lo < 1.0 and 1.2 < hi < 1.3  # 0.001-nat differences stay a visible fraction of the axis
    assert step_plots._until_out(wild, lo, hi) < len(wild)


def test_each_named_point_carries_an_svg_title_and_inlined_ids_are_unique(tmp_path):
    fig, axes = figures.new(3, 2)
    points = axes[0, 0].scatter([1, 2], [3, 4])
    figures.name(points, ["a <b> & c", "second"])
    path = figures.save(fig, tmp_path / "one.svg")
    svg = svg_text(path)
    assert TITLE.findall(svg) == ["a &lt;b&gt; &amp; c", "second"] and "<a " not in svg
    ids = re.findall(r'\bid="([^"]+)"', figures.inline(path))
    assert ids and all(i.startswith("one-") for i in ids)


def test_long_tables_are_sortable_and_empty_columns_hidden(fp8):
    page = (fp8 / "index.html").read_text()
    tables = re.findall(r"<table([^>]*)>(.*?)</table>", page, re.S)
    for attrs, body in tables:
        if "<thead>" not in body:
            continue  # the environment's key-value table is no list
        rows = body.count("<tr") - body.count("<thead>")
        assert ('class="sortable"' in attrs) == (rows > 10), (attrs, rows)
    assert "% of peak" not in page and "not measured here" not in page  # empty in every CPU report
    assert filled([("a", "A"), ("b", "B")], [{"a": "1", "b": ""}, {"a": "", "b": None}]) == [("a", "A")]


def test_backticks_become_code_and_everything_else_stays_escaped():
    assert str(code_spans("run `python -m suite recommend` <now>")) == \
        "run <code>python -m suite recommend</code> &lt;now&gt;"
    assert str(code_spans("one ` alone")) == "one ` alone"


def scenarios_folder(tmp_path: Path, names=("cpu_dist", "cpu_update_slow_path")) -> Path:
    """A results folder holding committed runs of several scenarios (what `report results/` reads):
    the two smallest (the slow-path run is one of cpu_update), as the front page, not what it links,
    is the subject."""
    results = tmp_path / "results"
    for name in names:
        (results / name).mkdir(parents=True)
        for f in (REFERENCE / name).glob("*.parquet"):
            (results / name / f.name).write_bytes(f.read_bytes())
    return results


def test_a_folder_of_scenarios_opens_on_a_front_page(tmp_path, capsys, quick_png):  # the fixtures draw these plots
    results = scenarios_folder(tmp_path)
    out = tmp_path / "reports"
    # a comparison and a history where `compare` and `history` write them by default (--reports out)
    sides = [SimpleNamespace(scenario="cpu_dist", run_ids=[run])
             for run in ("20260101T000000Z-aaaaaa", "20260102T000000Z-bbbbbb")]
    comparison = compare_page.default_dir(SimpleNamespace(baseline=sides[0], candidate=sides[1]), out)
    for folder, title in ((comparison, "comparison: cpu_dist"), (out / "history" / "cpu_update", "history: cpu_update")):
        folder.mkdir(parents=True)
        (folder / MARKER).write_text("{}")
        (folder / "report.md").write_text(f"# mpsuite {title}\n")
        (folder / "index.html").write_text("<p>a report</p>")
    assert cli.main(["report", str(results), "--out", str(out), "--quiet"]) == 0
    page = (out / "index.html").read_text()
    links = re.findall(r'href="([^"]+)"', page)
    assert {"cpu_dist/index.html", "cpu_update/index.html", "history/cpu_update/index.html",
            "compare/cpu_dist/20260101T000000Z-aaaaaa_vs_20260102T000000Z-bbbbbb/index.html"} <= set(links)
    assert all((out / link).is_file() for link in links)
    assert "dist_train_step: bf16" in page and "train_step: bf16_adamw8bit" in page  # each scenario's headline line
    (out / "index.html").write_text("<p>my own page</p>")  # a page of the user's is never written over
    assert cli.main(["report", str(results), "--out", str(out), "--quiet"]) == 0
    assert (out / "index.html").read_text() == "<p>my own page</p>"
    assert "not written over it" in capsys.readouterr().err


@contextmanager
def fifos_released_after(fifos, after_s: float = 120.0):
    """A blocking open of one of `fifos` (the fault a test is about) is let go after `after_s`: from
    then on their other ends are opened, without blocking, until the block ends, so the command goes
    on and the test fails on what it asserts instead of hanging the suite. In this process: a
    `report` subprocess costs seconds of imports."""
    done = threading.Event()

    def release() -> None:
        if done.wait(after_s):
            return
        while not done.wait(0.05):
            for fifo in fifos:
                for flags in (os.O_RDONLY, os.O_WRONLY):  # frees a blocked writer, then a blocked reader
                    try:
                        os.close(os.open(fifo, flags | os.O_NONBLOCK))
                    except OSError:  # ENXIO: nobody reads it; or it is gone
                        pass

    watchdog = threading.Thread(target=release, name="fifo-watchdog", daemon=True)
    watchdog.start()
    try:
        yield
    finally:
        done.set()
        watchdog.join()


def test_a_fifo_where_the_front_page_reads_is_named_and_never_opened_blocking(tmp_path, capsys, quick_png):
    results, out = scenarios_folder(tmp_path), tmp_path / "reports"
    comparison = out / "compare" / "cpu_dist" / "a_vs_b"  # marked as a report, its report.md a FIFO
    comparison.mkdir(parents=True)
    (comparison / MARKER).write_text("{}")
    fifos = [comparison / "report.md", out / "index.html"]
    for fifo in fifos:
        os.mkfifo(fifo)

    with fifos_released_after(fifos):
        assert cli.main(["report", str(results), "--out", str(out)]) == 0
    err = capsys.readouterr().err
    assert f"{out / 'index.html'} cannot be read: it is a FIFO" in err and "not written over it" in err
    assert stat.S_ISFIFO(os.lstat(out / "index.html").st_mode)  # left as it was
    os.unlink(out / "index.html")
    with fifos_released_after(fifos[:1]):
        assert cli.main(["report", str(results), "--out", str(out)]) == 0
    page = (out / "index.html").read_text()
    assert "cpu_dist/index.html" in page and "cpu_update/index.html" in page  # the slow-path run is of cpu_update
    assert "a_vs_b" not in page  # the FIFO is no report of ours


def test_the_models_report_renders_quietly_with_its_case_names_level_and_whole(tmp_path):
    done = render("cpu_models", tmp_path / "report")
    assert done.stderr.strip() == "", done.stderr
    svg = svg_text(tmp_path / "report" / "speedup_train_step.svg")
    ticks = re.findall(r'<g id="xtick_\d+">.*?<text([^>]*)>([^<]+)</text>', svg, re.S)
    lines = [text for _, text in ticks]
    assert "vocab=50304" in lines and "batch=16" in lines  # one parameter a line, never cut
    assert not [a for a, _ in ticks if re.search(r"rotate\(-?[1-9]", a)]  # level: they fit
