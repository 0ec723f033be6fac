"""The reports as a reader meets them: the committed reference runs rendered by the command line,
opened in the system's headless chromium at 1400 px (skipped where there is none), and looked at
through the page: every plot inlined as SVG with tick labels, each point naming its case under the
mouse, FP8 recipes on cpu_fp8's accuracy chart, tables of more than ten rows sorted by a click,
numbers on one line, compare's verdicts on screen, and the front page linking every report.

Each page's screenshot is written to $MPSUITE_SCREENSHOTS when set; `report.png`, the top of the cpu
report, is the README's picture (`docs/report.png`; docs/development.md)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from suite import cli

ROOT = Path(__file__).resolve().parent.parent
REFERENCE = ROOT / "results" / "reference"
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="no chromium on PATH (Debian: apt install chromium)")
WIDTH = 1400
# The committed runs each page is rendered from (scenario folder -> results folder).
RUNS = {"cpu": "cpu_amx", "cpu_fp8": "cpu_fp8", "cpu_update": "cpu_update"}
COMPARED = "cpu-torch-2.13.0-vs-2.14.1"


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    """A folder of three scenarios' reports, the comparison in compare/, and the front page."""
    tmp = tmp_path_factory.mktemp("site")
    for name, folder in RUNS.items():
        shutil.copytree(REFERENCE / folder, tmp / "results" / name)
    out = tmp / "reports"
    assert cli.main(["compare", "torch=2.13.0,runs=all", "torch=2.14.1,runs=all", "--results",
                     str(REFERENCE / COMPARED), "--out", str(out / "compare" / COMPARED), "--quiet"]) == 0
    assert cli.main(["report", str(tmp / "results"), "--out", str(out), "--quiet"]) == 0
    return out


@pytest.fixture(scope="module")
def browser():
    sync_api = pytest.importorskip("playwright.sync_api")
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu"])
        try:
            yield browser
        finally:
            browser.close()


def open_page(browser, path: Path, shot: str | None = None):
    page = browser.new_page(viewport={"width": WIDTH, "height": 900})
    page.goto(path.as_uri())
    assert not page.evaluate("document.documentElement.scrollWidth > window.innerWidth")  # no page-wide scroll
    if shot and os.environ.get("MPSUITE_SCREENSHOTS"):
        folder = Path(os.environ["MPSUITE_SCREENSHOTS"])
        folder.mkdir(parents=True, exist_ok=True)
        top = {"clip": {"x": 0, "y": 0, "width": WIDTH, "height": 1300}} if shot == "report" else {}
        page.screenshot(path=str(folder / f"{shot}.png"), full_page=True, **top)
    return page


NAMED_UNDER_MOUSE = """() => Array.from(document.querySelectorAll('svg.plot g.named')).slice(0, 40).map(g => {
  const shape = g.querySelector('path, use, rect');
  if (!shape) return null;
  const box = shape.getBoundingClientRect();
  window.scrollTo(0, window.scrollY + box.top - 200);
  const b = shape.getBoundingClientRect();
  const hit = document.elementFromPoint(b.left + b.width / 2, b.top + b.height / 2);
  const owner = hit && hit.closest('g.named');
  return owner ? owner.querySelector(':scope > title').textContent : null;
})"""


def test_the_fp8_report_charts_each_recipes_accuracy_with_named_points(site, browser):
    page = open_page(browser, site / "cpu_fp8" / "index.html", "cpu_fp8")
    plots = page.locator("svg.plot")
    assert plots.count() >= 4 and page.locator("img").count() == 0  # inlined: an <img> shows no names
    for i in range(plots.count()):  # every plot has labelled ticks on both axes
        ticks = plots.nth(i).evaluate("s => [s.querySelectorAll('g[id*=-xtick_] text').length, "
                                      "s.querySelectorAll('g[id*=-ytick_] text').length]")
        assert min(ticks) > 0, (i, ticks)
    accuracy = page.locator("figure", has_text="gemm accuracy").locator("svg.plot")
    text = accuracy.evaluate("s => s.textContent")
    assert "numerics only" in text and "fp8_tensorwise" in text and "bf16" in text
    named = [t for t in page.evaluate(NAMED_UNDER_MOUSE) if t]
    assert len(named) >= 10 and any("fp8_" in t and "rel. error" in t for t in named), named[:5]


def test_a_long_table_sorts_by_a_click_and_numbers_stay_on_one_line(site, browser):
    page = open_page(browser, site / "cpu" / "index.html", "cpu")
    open_page(browser, site / "cpu" / "index.html", "report")  # the README's picture: the top of the page
    table = page.locator("table.sortable").last
    assert table.locator("tbody tr").count() > 10
    column = table.locator("th", has_text="median ms").first
    cells = "(t, i) => Array.from(t.tBodies[0].rows).map(r => parseFloat(r.cells[i].textContent)).filter(v => Number.isFinite(v))"
    index = column.evaluate("th => th.cellIndex")
    column.click()
    up = table.evaluate(cells, index)
    column.click()
    down = table.evaluate(cells, index)
    assert up == sorted(up) and down == sorted(down, reverse=True) and len(up) > 10
    lines = page.evaluate("""() => Array.from(document.querySelectorAll('td.num')).map(td => {
        const r = document.createRange(); r.selectNodeContents(td);
        return new Set(Array.from(r.getClientRects()).map(c => Math.round(c.top))).size; })""")
    assert lines and max(lines) == 1
    headers = page.locator("th").all_inner_texts()
    assert "% of peak" not in headers and not any("not measured here" in h for h in headers)  # empty on a CPU


def test_compares_verdicts_are_on_screen_at_1400_px(site, browser):
    page = open_page(browser, site / "compare" / COMPARED / "index.html", "compare")
    table = page.locator("h2", has_text="All cases").locator("xpath=following-sibling::div[1]//table")
    for title in ("verdict", "time verdict", "speedup change [interval]"):
        box = table.locator("th", has_text=title).first.bounding_box()
        assert box["x"] + box["width"] <= WIDTH, title
    assert any(t for t in page.evaluate(NAMED_UNDER_MOUSE) if t)


def test_each_point_of_a_history_names_its_case_run_and_value(tmp_path, browser):
    """A history's points are one line's markers a plot (thousands of them cost a tenth of a
    scatter's), each still naming its case, run and value under the mouse."""
    out = tmp_path / "history"
    assert cli.main(["history", "cpu", "--results", str(REFERENCE / COMPARED), "--out", str(out), "--quiet"]) == 0
    page = open_page(browser, out / "index.html", "history")
    assert page.locator("svg.plot").count() >= 3
    named = [t for t in page.evaluate(NAMED_UNDER_MOUSE) if t]
    assert len(named) >= 10 and all(", run #" in t and t.endswith("x") for t in named), named[:5]  # speedups first


def test_training_step_report_reads(site, browser):
    page = open_page(browser, site / "cpu_update" / "index.html", "cpu_update")
    loss = page.locator("figure", has_text="train_step loss").locator("svg.plot")
    text = loss.evaluate("s => s.textContent")
    assert "bf16_adamw8bit (master=bf16_sr)" in text and "nats" in text
    assert max(len(t) for t in loss.locator("g[id*=-legend_] text").all_text_contents()) < 80  # no parameter strings


def test_the_front_page_links_every_scenario_its_history_and_comparison(site, browser):
    page = open_page(browser, site / "index.html", "front")
    links = page.eval_on_selector_all("a", "as => as.map(a => a.getAttribute('href'))")
    assert {f"{name}/index.html" for name in RUNS} <= set(links)
    assert f"compare/{COMPARED}/index.html" in links
    assert all((site / link).is_file() for link in links)
    row = page.locator("tr", has_text="cpu_fp8").first.inner_text()
    assert "fp8_tensorwise" in row  # its headline line
