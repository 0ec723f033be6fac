"""The docs cannot drift from the code: the README is a front page that starts with the two
commands, every registry name, column and nox session is documented, and the results-schema page
is exactly what the code's column definitions generate."""

from __future__ import annotations

import re
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from suite.results import columns
from suite.scenario import registry
from tests.test_workflow import nox_sessions

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text()
DOCS = {p.name: p.read_text() for p in (ROOT / "docs").glob("*.md")}
EVERYTHING = README + "\n".join(DOCS.values())


def test_the_readme_is_a_front_page_that_starts_with_the_two_commands():
    assert len(README.splitlines()) < 200
    first_block = README.split("```")[1]
    assert "nox -s cpu" in first_block and "nox -s tests" in first_block
    for link in re.findall(r"\]\((docs/[^)]+)\)", README):
        assert (ROOT / link).is_file(), f"README links to {link}, which does not exist"
    assert {f"docs/{name}" for name in DOCS} <= set(re.findall(r"\]\((docs/[^)]+)\)", README))


@pytest.mark.parametrize("name", sorted(registry.PRECISIONS) + sorted(registry.WORKLOADS))
def test_every_precision_and_workload_is_documented(name):
    assert f"`{name}`" in EVERYTHING


@pytest.mark.parametrize("session", sorted(nox_sessions()))
def test_every_nox_session_is_documented(session):
    assert f"`{session}`" in EVERYTHING


def test_the_generated_pages_match_the_code():
    assert DOCS["results-schema.md"] == columns.schema_markdown(), (
        "regenerate it: python -m suite.results.columns > docs/results-schema.md")
    assert DOCS["parameters.md"] == registry.parameters_markdown(), (
        "regenerate it: python -m suite.scenario.registry > docs/parameters.md")
    from suite.analysis.roofline import published

    assert published.markdown() in DOCS["model.md"], (
        "paste `python -m suite.analysis.roofline.published` between the markers of docs/model.md")


def test_every_column_a_results_file_holds_is_defined(tiny_scenario, tmp_path):
    from suite import pipeline

    written = set()
    for path in (ROOT / "results").rglob("*.parquet"):
        written |= set(pq.read_schema(path).names)
    run = pipeline.run(pipeline.RunRequest(tiny_scenario, tmp_path / "results", None, "cpu", progress=False))
    written |= set(pq.read_schema(run.path).names)
    assert not written - set(columns.BY_NAME), sorted(written - set(columns.BY_NAME))
    assert set(columns.CONTRACT) <= set(pq.read_schema(run.path).names)


def test_the_mfu_convention_is_stated_where_the_column_is_defined():
    # An FP8 step's MFU is taken against the FP8 peak while lm_head, attention and optimizer stay
    # bf16/fp32: a convention, so it is written beside the column (schema page and models page).
    assert "FP8 peak" in columns.BY_NAME["mfu"].description
    assert "FP8 peak" in DOCS["models.md"]


def test_the_readme_installs_without_nox_cpu_build_first_and_runs_a_scenario_file():
    """`pip install -e .` alone pulls PyPI's CUDA torch (GBs) on Linux: the CPU build goes first."""
    commands = [line.split("#")[0].strip() for block in re.findall(r"```bash\n(.*?)```", README, re.S)
                for line in block.splitlines()]
    cpu = commands.index("pip install torch --index-url https://download.pytorch.org/whl/cpu")
    assert cpu < commands.index("pip install -e .")
    own = [c for c in commands if c.startswith("python -m suite run ") and c.endswith(".toml")]
    assert own and any(c.startswith("cp scenarios/") for c in commands)
