"""The committed reference runs: every run docs/reference-runs.md lists is in the repository and
renders, every report folder it names is there, and the links of reports/README.md resolve. (A run
the docs cite but nobody committed, `git add -f` forgotten, fails here.)"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from suite import report
from suite.analysis.frame import derived
from suite.results import store

ROOT = Path(__file__).resolve().parent.parent
LIST = ROOT / "docs" / "reference-runs.md"


def listed() -> list[str]:
    """The first column of the list's table: a results folder or a glob of run files."""
    rows = [line for line in LIST.read_text(encoding="utf-8").splitlines() if line.startswith("| `results/")]
    return [path for row in rows for path in re.findall(r"`(results/reference/[^`]+)`", row.split(" | ")[0])]


def test_the_list_names_every_committed_reference_folder():
    runs = listed()
    assert len(runs) >= 10
    tops = {Path(p).parts[2] for p in runs}
    assert tops == {p.name for p in (ROOT / "results" / "reference").iterdir() if p.is_dir()}


@pytest.mark.parametrize("path", listed())
def test_each_listed_run_is_committed_and_renders(path):
    files = sorted(ROOT.glob(path)) if "*" in path else sorted((ROOT / path).rglob("*.parquet"))
    assert files, f"{path}: listed in docs/reference-runs.md, not in the repository (git add -f)"
    df = derived.latest_runs(store.read(files))
    for name in df["scenario"].unique():
        text = report.markdown(report.build_view(derived.rows(df, df["scenario"] == name)))
        assert text.startswith("#") and "nan" not in text.replace("nano", "")


def test_every_report_and_run_the_docs_and_readme_cite_exists():
    cited = set()
    for page in [ROOT / "README.md", *(ROOT / "docs").glob("*.md")]:
        cited |= set(re.findall(r"(?:results|reports)/reference/[A-Za-z0-9_.\-]+(?:/[A-Za-z0-9_.\-]+)*",
                                page.read_text(encoding="utf-8")))
    missing = sorted(c for c in cited if not (ROOT / c.rstrip(".")).exists())
    assert not missing, f"cited, not committed: {missing}"


def test_the_reports_readme_links_resolve():
    text = (ROOT / "reports" / "README.md").read_text(encoding="utf-8")
    links = re.findall(r"\]\(([^)#]+)\)", text)
    assert links and all((ROOT / "reports").joinpath(link).resolve().exists() for link in links), links
    # results/ holds parquet files only (pd.read_parquet("results") reads it whole): no README there
    assert "results/README.md" not in text and not (ROOT / "results" / "README.md").exists()
