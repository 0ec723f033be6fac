"""Results files, pytest-benchmark JSON and scenario folders come from elsewhere (CI artifacts,
colleagues): nothing read from them writes outside its output folder, every bad file is one line
that names it, one bad file never blocks the others, and a run resumes only under the scenario it
started with. Each test names the finding of issue #13 it covers."""

from __future__ import annotations

import json
import math
import os
import random
import signal
import tracemalloc
from datetime import timedelta
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings, HealthCheck
from hypothesis import strategies as st
from markdown_it import MarkdownIt

from suite import cli, pipeline, report
from suite.report import plots
from suite.analysis.interchange import bench_json
from suite.measure import env
from suite.core import jsonl
from suite.results import atomic, journal, store
from suite.scenario import plan, spec
from tests.conftest import TINY_SCENARIO, quick_toml

HOSTILE = "../../escaped"
# What these tests assert is decided and written in this process; the plots' pixels are not
# among it (tests/conftest.py quick_png).
pytestmark = pytest.mark.usefixtures("quick_png")


@pytest.fixture
def sandbox(tmp_path, monkeypatch):
    """A working directory (tmp_path/work) for commands with default results/ and reports/ folders;
    `files_outside` then lists what was written anywhere else under tmp_path."""
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    return work


def files_outside(root: Path, *allowed: str) -> list[Path]:
    return sorted(p for p in root.rglob("*") if p.is_file() and not any(
        p.is_relative_to(root / a) for a in allowed))


def records_of(path: Path) -> list[dict]:
    return store.records_of(store.read_file(path))


def write_records(records: list[dict], folder: Path, name: str = "20260101T000000Z-abcdef.parquet") -> Path:
    """Records written as the store writes them (schema metadata and all), with no checks: a file
    as another tool or an attacker could leave it."""
    folder.mkdir(parents=True, exist_ok=True)
    return store.write_run(records, folder / name)


def measured_again(records: list[dict], run_id: str) -> list[dict]:
    """The same cases as another run, an hour later (the same measurement under a new run id would be
    read as one run: issue #24)."""
    return [{**r, "run_id": run_id, "started_at": r["started_at"] + timedelta(hours=1)} for r in records]


def one_error_line(err: str) -> str:
    lines = [line for line in err.splitlines() if "error:" in line]
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


def exported_doc(tiny_run: Path, tmp_path: Path) -> dict:
    out = tmp_path / "export.json"
    assert cli.main(["export", str(tiny_run), "-o", str(out)]) == 0
    return json.loads(out.read_text())


# --- 1. no writes outside the output folder --------------------------------------------------------


def test_1_a_workload_name_with_dot_dot_cannot_place_a_plot_outside_the_report(tiny_run, sandbox, tmp_path, capsys):
    doc = exported_doc(tiny_run, tmp_path)
    for bench in doc["benchmarks"]:
        bench["extra_info"]["mpsuite"]["workload"] = HOSTILE + "/gemm"
    (tmp_path / "inputs").mkdir()
    hostile = tmp_path / "inputs" / "hostile.json"
    hostile.write_text(json.dumps(doc))
    assert cli.main(["import", str(hostile), "--results", "results"]) == 0
    assert cli.main(["report", "results"]) == 0
    assert files_outside(tmp_path, "work/results", "work/reports", "inputs", "export.json") == []
    plots = sorted(p.name for p in (sandbox / "reports" / "tiny").glob("*.svg"))
    assert plots and all("/" not in name and not name.startswith(".") for name in plots)


def test_1_scenario_and_run_id_from_a_file_never_become_paths(tiny_run, sandbox, tmp_path, capsys):
    records = records_of(tiny_run)
    write_records([{**r, "scenario": HOSTILE} for r in records], sandbox / "results" / "a")
    write_records([{**r, "run_id": HOSTILE} for r in records], sandbox / "results" / "b")
    assert cli.main(["report", "results"]) == 2
    err = capsys.readouterr().err
    assert "scenario '../../escaped' cannot name a folder" in err and "run_id is not a run id" in err
    assert cli.main(["compare", "results/a", "results/b"]) == 2
    assert files_outside(tmp_path, "work/results") == []


def test_1_an_imported_scenario_name_must_be_a_folder_name(tiny_run, sandbox, tmp_path, capsys):
    doc = exported_doc(tiny_run, tmp_path)
    doc["mpsuite"]["run"]["scenario"] = HOSTILE
    path = tmp_path / "x.json"
    path.write_text(json.dumps(doc))
    assert cli.main(["import", str(path), "--results", "results"]) == 2
    assert "cannot name a folder" in one_error_line(capsys.readouterr().err)
    assert cli.main(["import", str(tiny_run.with_suffix(".json")), "--scenario", ".."]) == 2


# --- 2. resume refuses a changed scenario ----------------------------------------------------------

TWO = quick_toml("two", """
[[sweep]]
workload = "gemm"
precisions = ["fp32", "bf16"]
mkn = [[16, 16, 16], [32, 32, 32]]
""", baseline="fp32")


@pytest.mark.parametrize("edit, named", [
    (lambda t: t.replace('baseline = "fp32"', 'baseline = "bf16"'), "defaults.baseline"),
    (lambda t: t.replace('device = "cpu"', 'device = "cpu"\nseed = 7'), "defaults.seed: 0 -> 7"),
    (lambda t: t.replace("budget_s = 0.02", "budget_s = 0.05"), "defaults.timing.budget_s: 0.02 -> 0.05"),
])
def test_2_resume_refuses_a_scenario_changed_after_the_run_started(write_scenario, tmp_path, capsys, edit, named):
    path = write_scenario(TWO, "two.toml")
    scenario = spec.load(path)
    cases = plan.expand(scenario)
    results = tmp_path / "results"
    run = store.start_run(results, "two", store.new_run_id(), {
        "plan": [c.case_id for c in cases], **pipeline.scenario_spec(scenario, "cpu"),
        "identity": {k: env.run_meta(env.resolve_device("cpu")).get(k) for k in pipeline.IDENTITY}})
    run_id = run.header["run_id"]
    run.close()
    path.write_text(edit(TWO), encoding="utf-8")
    assert cli.main(["run", str(path), "--resume", run_id, "--results", str(results), "--no-report", "--quiet"]) == 2
    line = one_error_line(capsys.readouterr().err)
    assert "changed since run" in line and named in line
    assert len(journal.read(store.journal_path(results, "two", run_id)).records) == 0  # nothing mixed in


# --- 3. import validates records against the contract ----------------------------------------------


def _first_bench(doc):
    return doc["benchmarks"][0]


@pytest.mark.parametrize("spoil, message", [
    (lambda d: d["benchmarks"].append(json.loads(json.dumps(_first_bench(d)))), "appear more than once"),
    (lambda d: _first_bench(d)["extra_info"]["mpsuite"].update(case_id=None), "have no case_id"),
    (lambda d: _first_bench(d)["stats"].update(median=float("nan")), "expected a time in seconds"),
    (lambda d: _first_bench(d)["stats"].update(data=[-1.0, 0.001]), "expected a time in seconds"),
    (lambda d: d["mpsuite"].update(schema_version=99), "schema_version is 99"),
])
def test_3_import_refuses_records_that_break_the_contract(tiny_run, tmp_path, capsys, spoil, message):
    doc = exported_doc(tiny_run, tmp_path)
    spoil(doc)
    path = tmp_path / "spoiled.json"
    path.write_text(json.dumps(doc))  # json writes NaN as NaN, as Python's reader accepts
    assert cli.main(["import", str(path), "--results", str(tmp_path / "results")]) == 2
    line = one_error_line(capsys.readouterr().err)
    assert str(path) in line and message in line
    assert not (tmp_path / "results").exists()


def test_3_a_results_file_with_duplicate_or_missing_case_ids_is_left_out_with_its_reason(tiny_run, tmp_path, capsys):
    records = records_of(tiny_run)
    bad = write_records(records + [records[0]], tmp_path / "results" / "tiny")
    good = write_records(records, tmp_path / "results" / "tiny", tiny_run.name)
    df = store.read([tmp_path / "results"])
    assert set(df["run_id"]) == {records[0]["run_id"]}
    assert f"left out {bad}: 1 case_id(s) appear more than once" in capsys.readouterr().err
    write_records([{**records[0], "case_id": None}, *records[1:]], tmp_path / "nulls")
    with pytest.raises(store.UserError, match="have no case_id"):
        store.read([next((tmp_path / "nulls").glob("*.parquet"))])
    assert good.exists()


def test_3_export_then_import_keeps_the_source_machine_fields(tiny_run, tmp_path):
    records = records_of(tiny_run)
    cuda = [{**r, "device": "cuda", "device_name": None, "status": "skipped", "reason": "no CUDA device",
             "time_ms_median": None, "time_ms_p10": None, "time_ms_p90": None, "samples_ms": None,
             "n_samples": None} for r in records]
    source = write_records(cuda, tmp_path / "src" / "tiny")
    out = tmp_path / "x.json"
    assert cli.main(["export", str(source), "-o", str(out)]) == 0
    imported = store.read_file(bench_json.import_file(out, tmp_path / "results"))
    assert imported["device_name"].isna().all() and set(imported["device"]) == {"cuda"}


# --- 4. a report is replaced whole; interrupted writes are repaired ---------------------------------


def test_4_a_render_killed_midway_leaves_the_previous_report_whole(tiny_run, tmp_path, monkeypatch):
    out = tmp_path / "reports" / "tiny"
    df = store.read_file(tiny_run)
    report.render(df, out)
    before = {p.name: p.read_bytes() for p in out.iterdir()}

    def killed(*args, **kwargs):
        raise KeyboardInterrupt  # as SIGINT halfway through the plots

    monkeypatch.setitem(plots.PLOTS, "speedup", killed)
    with pytest.raises(KeyboardInterrupt):
        report.render(df.assign(run_id="20270101T000000Z-000000", tflops=df["tflops"] * 3), out)  # new plots
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before
    assert [p.name for p in out.parent.iterdir()] == ["tiny"]  # the staging folder went too


def test_4_a_report_never_replaces_a_folder_of_other_files(tiny_run, tmp_path):
    out = tmp_path / "mine"
    out.mkdir()
    (out / "thesis.tex").write_text("precious")
    with pytest.raises(store.UserError, match="not an mpsuite report"):
        report.render(store.read_file(tiny_run), out)
    assert (out / "thesis.tex").read_text() == "precious"


def test_4_resume_of_a_run_killed_before_its_report_renders_the_report(tiny_run, tmp_path, capsys):
    results, reports = tmp_path / "results", tmp_path / "reports"
    stored = write_records(records_of(tiny_run), results / "tiny", tiny_run.name)
    leftover = store.journal_path(results, "tiny", stored.stem)  # killed before the journal went
    leftover.parent.mkdir(parents=True)
    leftover.write_bytes(jsonl.encode({"kind": "header", "format": 1, "run_id": stored.stem, "scenario": "tiny"}))
    scenario = tmp_path / "tiny.toml"
    scenario.write_text(TINY_SCENARIO)
    assert cli.main(["run", str(scenario), "--resume", stored.stem, "--results", str(results),
                     "--reports", str(reports), "--quiet"]) == 0
    assert "already complete" in capsys.readouterr().err
    assert (reports / "tiny" / "index.html").exists() and not leftover.exists()


def test_4_temporaries_of_dead_processes_are_removed_and_live_ones_kept(tmp_path):
    dead = atomic.Owner(atomic.machine(), 2 ** 22 + 12345)  # above the default pid_max: no process has it
    orphan = tmp_path / atomic.temporary_name("x.parquet", dead)
    orphan.write_bytes(b"half a file")
    staging = tmp_path / atomic.temporary_name("tiny", dead)
    staging.mkdir()
    mine = tmp_path / atomic.temporary_name("y.parquet")
    mine.write_bytes(b"being written")
    assert sorted(atomic.remove_stale(tmp_path)) == sorted([orphan, staging])
    assert mine.exists()


# --- 5. Markdown and terminal output are escaped ---------------------------------------------------

NASTY = "line\rbreak\n# Heading ![x](http://evil/x.png) <img src=x onerror=alert(1)> [link](http://evil) *bold* | cell"


def test_5_report_md_renders_record_text_as_text(tiny_run, tmp_path):
    records = records_of(tiny_run)
    records = [{**r, "scenario_description": NASTY, "reason": NASTY if r["status"] != "ok" else None}
               for r in records]
    out = tmp_path / "rep"
    report.render(store.read_file(write_records(records, tmp_path / "r")), out)
    text = (out / "report.md").read_text()
    assert "\r" not in text
    tokens = MarkdownIt("commonmark").enable("table").parse(text)
    flat = [t for tok in tokens for t in [tok, *(tok.children or [])]]
    assert not [t for t in flat if t.type in ("html_inline", "html_block", "link_open")]
    images = [t.attrGet("src") for t in flat if t.type == "image"]
    assert images and all(src.endswith(".svg") and "/" not in src for src in images)  # our plots only
    headings = [tokens[i + 1].content for i, t in enumerate(tokens) if t.type == "heading_open"]
    assert not [h for h in headings if "Heading" in h]
    rows = [t for t in tokens if t.type == "tr_open"]
    assert rows  # the tables are still tables: the '|' in the reason did not add a cell
    widths = {sum(1 for _ in group) for group in _row_cells(tokens)}
    assert len(widths) <= 4  # summary, not-measured, crossover and case tables: each row as wide as its header


def _row_cells(tokens):
    cells, inside = [], False
    for t in tokens:
        if t.type == "tr_open":
            cells, inside = [], True
        elif t.type in ("td_open", "th_open") and inside:
            cells.append(t)
        elif t.type == "tr_close":
            inside = False
            yield cells


def test_5_list_strips_control_characters_from_descriptions(write_scenario, capsys):
    path = write_scenario(quick_toml("ctl", """
        [[sweep]]
        workload = "gemm"
        precisions = ["fp32"]
        mkn = [[16, 16, 16]]
    """, description="title\x1b]0;pwned\x07 and \x1b[2J cleared"))
    assert cli.main(["list", "--scenarios", str(path.parent)]) == 0
    out = capsys.readouterr().out
    assert "\x1b" not in out and "\x07" not in out and "title" in out


# --- 6. one-line errors ----------------------------------------------------------------------------

MALFORMED = [
    {"benchmarks": [1]},
    {"benchmarks": [{"stats": "fast"}]},
    {"benchmarks": [{"stats": {"median": "0.1"}}]},
    {"benchmarks": [{"stats": {"median": 0.1, "data": "abc"}}]},
    {"benchmarks": [{"stats": {"median": 0.1, "data": [0.1, "x"]}}]},
    {"benchmarks": [{"stats": {"median": 0.1}, "extra_info": []}]},
    {"benchmarks": [{"stats": {"median": 0.1}, "params": 3}]},
    {"benchmarks": [], "mpsuite": {"not_measured": [7]}},
    {"benchmarks": [{"stats": {"median": 0.1}}], "machine_info": {"cpu": "fast"}},
    {"benchmarks": [{"stats": {"median": 0.1}}], "mpsuite": []},
]


@pytest.mark.parametrize("doc", MALFORMED, ids=range(len(MALFORMED)))
def test_6_malformed_pytest_benchmark_json_is_one_line(tmp_path, capsys, doc):
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(doc))
    assert cli.main(["import", str(path), "--results", str(tmp_path / "results")]) == 2
    assert str(path) in one_error_line(capsys.readouterr().err)


def test_6_deeply_nested_json_is_one_line(tmp_path, capsys):
    path = tmp_path / "deep.json"
    path.write_text("[" * 100_000 + "]" * 100_000)
    assert cli.main(["import", str(path)]) == 2
    assert "nested too deeply" in one_error_line(capsys.readouterr().err)


def test_6_outputs_into_a_folder_that_cannot_exist_are_one_line(tiny_run, tmp_path, capsys):
    blocker = tmp_path / "a_file"
    blocker.write_text("")
    target = str(blocker / "sub")
    other = write_records(measured_again(records_of(tiny_run), "20260101T000000Z-000002"), tmp_path / "other" / "tiny")
    write_records(records_of(tiny_run), tmp_path / "other" / "tiny", tiny_run.name)
    for argv in (["report", str(tiny_run), "--out", target],
                 ["compare", str(tiny_run), str(other), "--out", target],
                 ["history", "tiny", "--results", str(tmp_path / "other"), "--out", target],
                 ["export", str(tiny_run), "-o", target + "/x.json"],
                 ["import", str(tmp_path / "x.json"), "--results", target]):
        if argv[0] == "import":
            assert cli.main(["export", str(tiny_run), "-o", str(tmp_path / "x.json")]) == 0
            capsys.readouterr()
        assert cli.main(argv) == 2, argv
        assert "a_file" in one_error_line(capsys.readouterr().err), argv


def test_6_a_file_with_the_suites_metadata_but_no_scenario_column_is_left_out(tiny_run, tmp_path, capsys):
    table = pq.read_table(tiny_run).drop_columns(["scenario"])
    folder = tmp_path / "results" / "x"
    folder.mkdir(parents=True)
    pq.write_table(table, folder / tiny_run.name)
    assert cli.main(["report", str(tmp_path / "results"), "--all-runs", "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert "no scenario column" in err and one_error_line(err).startswith("mpsuite: error: no results")


def test_6_huge_time_bounds_are_one_line(write_scenario, capsys):
    path = write_scenario(TWO.replace("budget_s = 0.02", "budget_s = 1e308"))
    assert cli.main(["plan", str(path)]) == 2
    assert "budget_s" in one_error_line(capsys.readouterr().err)


# --- 7. the size of a plan -------------------------------------------------------------------------


def _huge(write_scenario, cases_per_value: int, values: int) -> Path:
    return write_scenario(quick_toml("huge", f"""
        [[sweep]]
        workload = "outlier"
        precisions = ["fp32"]
        shapes = "square"
        sizes = {list(range(16, 16 + 16 * cases_per_value, 16))}
        params.outlier = {[float(10 + i) for i in range(values)]}
    """))


def test_7_a_huge_plan_is_refused_with_its_count_and_the_flag_to_proceed(write_scenario, tmp_path, capsys):
    path = _huge(write_scenario, 1000, 1000)  # 10^6 cases
    for command in ("plan", "run"):
        assert cli.main([command, str(path), "--results", str(tmp_path / "r")] if command == "run"
                        else [command, str(path)]) == 2
        line = one_error_line(capsys.readouterr().err)
        assert "1,000,000 cases" in line and "--max-cases 1000000" in line
    assert cli.main(["list", "--scenarios", str(path.parent)]) == 0
    assert "<= 1,000,000 cases" in capsys.readouterr().out
    assert not (tmp_path / "r").exists()


def test_7_ten_billion_cases_are_counted_not_built(write_scenario, capsys):
    path = _huge(write_scenario, 100_000, 100_000)
    assert plan.count(spec.load(path)) == 10 ** 10
    assert cli.main(["plan", str(path)]) == 2  # refused from the count: nothing is built
    assert "10,000,000,000 cases" in one_error_line(capsys.readouterr().err)
    small = spec.load(_huge(write_scenario, 100, 10))
    assert plan.count(small) == len(plan.expand(small)) == 1000


# --- 8. availability: one bad file never blocks the rest -------------------------------------------


def test_8_a_corrupt_parquet_is_named_and_the_other_runs_still_report_and_compare(tiny_run, tmp_path, capsys):
    folder = tmp_path / "results" / "tiny"
    first = write_records(records_of(tiny_run), folder, "20260101T000000Z-000001.parquet")
    second = write_records(measured_again(records_of(tiny_run), "20260101T000000Z-000002"), folder,
                           "20260101T000000Z-000002.parquet")
    corrupt = folder / "20260101T000000Z-000003.parquet"
    corrupt.write_bytes(b"PAR1 this is not parquet PAR1")
    results = str(tmp_path / "results")
    assert cli.main(["report", results, "--out", str(tmp_path / "rep")]) == 0
    assert f"left out {corrupt}" in capsys.readouterr().err
    assert cli.main(["compare", str(first), str(second), "--results", results,
                     "--reports", str(tmp_path / "reports"), "--fail-on", "none"]) == 0
    assert cli.main(["history", "tiny", "--results", results, "--out", str(tmp_path / "hist")]) == 0
    assert f"left out {corrupt}" in capsys.readouterr().err


def test_8_an_invalid_or_duplicate_scenario_file_does_not_block_the_others(write_scenario, tmp_path, capsys):
    good = write_scenario(TINY_SCENARIO, "tiny.toml")
    write_scenario("name = [", "broken.toml")
    write_scenario(TWO, "two.toml")
    write_scenario(TWO, "two_again.toml")
    folder = str(good.parent)
    assert cli.main(["plan", "tiny", "--scenarios", folder]) == 0
    captured = capsys.readouterr()
    assert "broken.toml" in captured.err and len(captured.out.splitlines()) == 8
    assert cli.main(["list", "--scenarios", folder]) == 2
    captured = capsys.readouterr()
    assert captured.out.startswith("tiny") and "two" not in captured.out
    assert "broken.toml" in captured.err and "two_again.toml" in captured.err
    assert cli.main(["plan", "two", "--scenarios", folder]) == 2
    assert "already used by" in one_error_line(capsys.readouterr().err)


def test_8_unfinished_runs_are_named_by_run_and_report(write_scenario, tmp_path, capsys):
    path = write_scenario(TWO, "two.toml")
    results = tmp_path / "results"
    run = store.start_run(results, "two", store.new_run_id(), {"plan": []})
    run.close()
    headerless = store.journal_path(results, "two", store.new_run_id())
    headerless.write_bytes(b"")
    assert store.incomplete_runs(results, "two") == [run.header["run_id"]]  # the headerless one cannot resume
    assert cli.main(["report", str(results)]) == 2
    assert run.header["run_id"] in one_error_line(capsys.readouterr().err)
    assert cli.main(["run", str(path), "--results", str(results), "--no-report", "--quiet"]) == 0
    assert f"--resume {run.header['run_id']}" in capsys.readouterr().err


def test_8_a_journal_without_a_plan_reports_as_a_partial_run(tiny_run, tmp_path, capsys):
    """A journal header need not carry a plan (an older or a hand-made one): its run is reported
    as partial without the planned count (it raised KeyError: 'run_planned_cases')."""
    results = tmp_path / "results"
    run = store.start_run(results, "tiny", "20260101T000000Z-000004", {})
    run.close()
    with open(run.path, "ab") as f:
        f.write(jsonl.encode({"kind": "case", "record": {**records_of(tiny_run)[0], "run_id": "20260101T000000Z-000004"}}))
    assert cli.main(["report", str(results), "--out", str(tmp_path / "rep")]) == 0
    assert "Partial report: run 20260101T000000Z-000004 stopped after 1 cases;" in \
        (tmp_path / "rep" / "report.md").read_text()


def test_8_an_unwritable_reports_folder_is_found_before_any_case_runs(write_scenario, tmp_path, capsys):
    path = write_scenario(TWO, "two.toml")
    (tmp_path / "reports").write_text("a file, not a folder")
    assert cli.main(["run", str(path), "--results", str(tmp_path / "results"), "--reports",
                     str(tmp_path / "reports"), "--quiet"]) == 2
    assert "cannot write a report" in one_error_line(capsys.readouterr().err)
    assert not (tmp_path / "results").exists()


def test_8_an_interrupt_while_rendering_says_the_run_is_stored(write_scenario, tmp_path, capsys, monkeypatch):
    path = write_scenario(TWO, "two.toml")

    def interrupted(*args, **kwargs):
        os.kill(os.getpid(), signal.SIGTERM)
        raise AssertionError("the signal did not stop the report")

    monkeypatch.setattr(report, "build_view", interrupted)
    assert cli.main(["run", str(path), "--results", str(tmp_path / "results"), "--reports",
                     str(tmp_path / "reports"), "--quiet"]) == 128 + signal.SIGTERM
    err = capsys.readouterr().err
    (stored,) = (tmp_path / "results" / "two").glob("*.parquet")
    assert f"the run is stored in {stored}" in err


# --- 9. strict types ---------------------------------------------------------------------------------


@pytest.mark.parametrize("mkn", ["[[true, 64, 64]]", '[["64", 64, 64]]', "[[64.0, 64, 64]]"])
def test_9_shapes_are_integers_not_coerced(write_scenario, mkn):
    path = write_scenario(TWO.replace("[[16, 16, 16], [32, 32, 32]]", mkn))
    with pytest.raises(spec.ScenarioError, match=r"mkn\[0\]\[0\]"):
        spec.load(path)


@pytest.mark.parametrize("name", [".", "..", ".hidden"])
def test_9_a_scenario_name_must_name_a_folder(write_scenario, name):
    with pytest.raises(spec.ScenarioError, match="name: .* cannot name a folder"):
        spec.load(write_scenario(TWO.replace('name = "two"', f'name = "{name}"')))


# --- property: hostile files through import, report and compare --------------------------------------

# --- 10. numbers out of the range the arithmetic needs (issue #35) ------------------------------------

REFERENCE = Path(__file__).resolve().parent.parent / "results/reference/cpu_amx/cpu/20261201T091332Z-cb2509.parquet"
BAD_RUN = "20261201T091332Z-bad000"


def _spoiled(column: str, value: float, baseline: bool) -> list[dict]:
    """The reference run's records under another run id, `column` = `value` in every ok case of the
    baseline precision (`baseline`) or of the others."""
    records = [{**r, "run_id": BAD_RUN} for r in store.records_of(store.read_file(REFERENCE))]
    for r in records:
        if r["status"] == "ok" and (r["precision"] == r["baseline"]) == baseline:
            r[column] = value
    return records


def _old_schema_file(path: Path, m: pa.Array) -> Path:
    """The reference run as a schema-1 file (started_at as ISO text, as then), `m` as given: its
    migration recomputes case ids from m, k and n."""
    table = pq.read_table(REFERENCE)
    table = table.set_column(table.schema.get_field_index("started_at"), "started_at",
                             pa.array([t.isoformat() for t in table.column("started_at").to_pylist()]))
    table = table.set_column(table.schema.get_field_index("m"), "m", m)
    pq.write_table(table.replace_schema_metadata({store.META_KEY: b"1"}), path)
    return path


def _hostile(kind: str, path: Path) -> Path:
    rows = pq.read_metadata(REFERENCE).num_rows
    if kind == "old m abc":
        return _old_schema_file(path, pa.array(["abc"] + ["64"] * (rows - 1)))
    if kind == "old m inf":
        return _old_schema_file(path, pa.array([math.inf] + [64.0] * (rows - 1)))
    column, value, baseline = {"speedup 0": ("speedup_paired", 0.0, False),
                               "speedup 1e308": ("speedup_paired", 1e308, False),
                               "median 5e-324": ("time_ms_median", 5e-324, True),
                               "median 0": ("time_ms_median", 0.0, True)}[kind]
    return store.write_run(_spoiled(column, value, baseline), path)


@pytest.mark.parametrize("kind, column", [("old m abc", "m"), ("old m inf", "m"), ("speedup 0", "speedup_paired"),
                                          ("speedup 1e308", "speedup_paired"), ("median 5e-324", "time_ms_median"),
                                          ("median 0", "time_ms_median")])
def test_10_a_number_out_of_range_is_named_and_the_good_run_beside_it_reports(tmp_path, capsys, kind, column):
    folder = tmp_path / "results" / "cpu"
    folder.mkdir(parents=True)
    good = folder / REFERENCE.name
    good.write_bytes(REFERENCE.read_bytes())
    bad = _hostile(kind, folder / f"{BAD_RUN}.parquet")
    assert cli.main(["report", str(folder), "--out", str(tmp_path / "rep")]) == 0
    assert f"left out {bad}: column {column} holds " in capsys.readouterr().err
    assert "bf16 is 3.74x faster than fp32" in (tmp_path / "rep" / "report.md").read_text()
    for argv in (["report", str(bad), "--out", str(tmp_path / "one")],
                 ["compare", str(good), str(bad), "--out", str(tmp_path / "cmp"), "--fail-on", "none"]):
        assert cli.main(argv) == 2, argv
        line = one_error_line(capsys.readouterr().err)
        assert str(bad) in line and f"column {column} holds " in line, line


def _runs(df, column: str | None, values: list[float], first: int = 1) -> pd.DataFrame:
    """Copies of a run under run ids ending in first, first + 1, ..., `column` of the non-baseline
    (speedups) or the baseline (times) ok cases set to each value in turn; the medians a little
    apart, as runs are."""
    out = []
    for i, value in enumerate(values, first):
        d = df.assign(run_id=df["run_id"].str[:-1] + str(i), time_ms_median=df["time_ms_median"] * (1 + 0.01 * i))
        if column:
            baseline = d["precision"] == d["baseline"]
            d.loc[(d["status"] == "ok") & (baseline if column == "time_ms_median" else ~baseline), column] = value
        out.append(d)
    return pd.concat(out, ignore_index=True)


@pytest.mark.parametrize("column, value", [("speedup_paired", 1e308), ("speedup_paired", 0.0),
                                           ("time_ms_median", 5e-324), ("time_ms_median", 0.0)])
def test_10_compare_and_the_headline_take_numbers_a_reader_refuses_without_crashing(column, value):
    """Defence in depth: frames handed in directly (a notebook) never reach the reader's checks."""
    from suite.analysis.frame import derived
    from suite.analysis.outcome import summary
    from suite.analysis.regression import compare

    df = store.read_file(REFERENCE)
    base = compare.Side("baseline", "b", _runs(df, "speedup_paired", [1.0, 1.1, 1.2]))
    cand = compare.Side("candidate", "c", _runs(df, column, [value, value, 1.1], first=4))
    assert len(compare.compare(base, cand, compare.Options(fail_on=())).cases)
    assert summary.headline(derived.prepare(_runs(df, column, [value])))


def test_10_a_baseline_median_of_0_is_never_read_as_not_measured():
    from suite.analysis.regression import compare

    df = store.read_file(REFERENCE)
    cand = compare.Side("candidate", "c", _runs(df, "time_ms_median", [0.0], first=2))
    cases = compare.compare(compare.Side("baseline", "b", _runs(df, None, [0])), cand, compare.Options(fail_on=())).cases
    details = {d.split(";")[0] for d in cases.loc[cases["precision"] == "bf16", "detail"]}
    assert details == {"its baseline-precision case's median time in run 20261201T091332Z-cb2502 is 0.0, not a "
                       "positive time"}


FUZZ = settings(max_examples=60, deadline=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
JSON = st.recursive(st.none() | st.booleans() | st.floats() | st.integers() | st.text(max_size=20),
                    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner, max_size=4),
                    max_leaves=20)
TEXT = st.sampled_from([HOSTILE, "..", ".", "", "/tmp/x", "a\x1b[2Jb", "\r# h", None, "fp32", "gemm"])


@st.composite
def hostile_document(draw):
    """A pytest-benchmark document with some parts replaced by random JSON or hostile strings."""
    bench = {"name": draw(TEXT), "fullname": draw(TEXT), "params": draw(JSON),
             "stats": {"median": draw(st.floats(allow_nan=True) | JSON), "data": draw(JSON)},
             "extra_info": {"mpsuite": {"workload": draw(TEXT), "case_id": draw(TEXT), "precision": draw(TEXT)}}}
    doc = {"benchmarks": [bench], "machine_info": draw(JSON), "commit_info": draw(JSON),
           "mpsuite": {"run": {"scenario": draw(TEXT), "device_name": draw(TEXT)}}}
    return draw(st.sampled_from([doc, draw(JSON)]))


@FUZZ
@given(doc=hostile_document(), raw=st.binary(max_size=64), as_bytes=st.booleans())
def test_hostile_files_give_one_line_errors_and_never_write_outside(tmp_path, capsys, doc, raw, as_bytes):
    case = tmp_path / f"case{abs(hash((repr(doc), raw))) % 10**9}"
    (case / "in").mkdir(parents=True, exist_ok=True)
    source = case / "in" / "doc.json"
    source.write_bytes(raw) if as_bytes else source.write_text(json.dumps(doc))
    results, reports = case / "results", case / "reports"
    statuses = []
    for argv in (["import", str(source), "--results", str(results)],
                 ["report", str(results), "--out", str(reports / "r")],
                 ["compare", str(results), str(results), "--results", str(results), "--reports", str(reports)]):
        status = cli.main(argv)
        err = capsys.readouterr().err
        assert "Traceback" not in err and status in (0, 1, 2), (argv, err)
        if status == 2:
            one_error_line(err)
        statuses.append(status)
    assert files_outside(case, "in", "results", "reports") == []


# --- 10. hostile values (issue #35): JSON limits, numbers no float holds, times no UTC holds -----------

DEEP = "[" * 100_000 + "]" * 100_000


def test_10_json_nested_deep_in_params_leaves_its_file_out_and_the_good_run_reports(tiny_run, tmp_path, capsys):
    folder = tmp_path / "results" / "tiny"
    write_records(records_of(tiny_run), folder, tiny_run.name)
    bad = write_records([{**r, "params": DEEP} for r in measured_again(records_of(tiny_run), "20260101T000000Z-000002")],
                        folder, "20260101T000000Z-000002.parquet")
    assert cli.main(["report", str(tmp_path / "results"), "--out", str(tmp_path / "rep")]) == 0
    assert f"left out {bad}: column params holds JSON nested too deeply" in capsys.readouterr().err
    assert (tmp_path / "rep" / "index.html").exists()


def test_10_a_deep_journal_line_is_refused_in_one_line_wherever_it_is(tiny_run, tmp_path, capsys):
    results = tmp_path / "results"
    write_records(records_of(tiny_run), results / "tiny", tiny_run.name)
    run = store.start_run(results, "tiny", "20260101T000000Z-000003", {"plan": []})
    run.close()
    with open(run.path, "ab") as f:  # a whole line (a torn one would be cut off): no crash writes it
        f.write(jsonl.encode({"kind": "case", "record": {**records_of(tiny_run)[0], "params": "{}"}})
                .replace(b'"params":"{}"', b'"params":' + DEEP.encode()))
    with pytest.raises(journal.JournalError, match="line 2 is refused: JSON nested too deeply"):
        journal.read(run.path)
    assert cli.main(["report", str(results), "--out", str(tmp_path / "rep")]) == 0
    assert f"left out {run.path}: line 2 is refused" in capsys.readouterr().err
    with pytest.raises(journal.JournalError, match="line 2 is refused"):  # nor resumed
        store.continue_run(results, "tiny", "20260101T000000Z-000003")


@pytest.mark.parametrize("number", ["1" + "0" * 400, "1" * 5000, "1e400"])
@pytest.mark.parametrize("field", ["median", "data"])
def test_10_a_time_no_float_holds_is_one_line_naming_it(tiny_run, tmp_path, capsys, number, field):
    doc = exported_doc(tiny_run, tmp_path)
    _first_bench(doc)["stats"][field] = "NUMBER" if field == "median" else [0.001, "NUMBER"]
    path = tmp_path / "huge.json"
    path.write_text(json.dumps(doc).replace('"NUMBER"', number))
    assert cli.main(["import", str(path), "--results", str(tmp_path / "results")]) == 2
    line = one_error_line(capsys.readouterr().err)
    assert str(path) in line and f"benchmarks[0].stats.{field}" in line and "expected a time in seconds" in line


def test_10_a_time_past_year_9999_in_utc_is_refused_naming_its_field(tiny_run, tmp_path, capsys):
    doc = exported_doc(tiny_run, tmp_path)
    doc["datetime"] = "9999-12-31T23:59:59-05:00"
    path = tmp_path / "late.json"
    path.write_text(json.dumps(doc))
    assert cli.main(["import", str(path), "--results", str(tmp_path / "results")]) == 2
    assert "datetime is '9999-12-31T23:59:59-05:00'" in one_error_line(capsys.readouterr().err)
    folder = tmp_path / "results" / "tiny"
    write_records(records_of(tiny_run), folder, tiny_run.name)
    late = write_records([{**r, "started_at": "9999-12-31T23:59:59-05:00"} for r in
                          measured_again(records_of(tiny_run), "20260101T000000Z-000004")], folder)
    assert cli.main(["report", str(tmp_path / "results"), "--out", str(tmp_path / "rep")]) == 0
    assert f"left out {late}: started_at is a time outside years 1 to 9999 in UTC" in capsys.readouterr().err
    assert cli.main(["export", str(late), "-o", str(tmp_path / "x.json")]) == 2
    one_error_line(capsys.readouterr().err)


def test_10_an_import_takes_memory_a_small_multiple_of_its_file(tmp_path):
    """Every round as a float object in a list was 32 bytes for 7 of text, twice over, and the file was
    read into a buffer of the whole 1 GiB limit: 10x the file and 1 GiB. Rounds are read packed now."""
    rng = random.Random(0)
    benches = [{"name": f"test_{i}", "fullname": f"t.py::test_{i}", "stats": {
        "median": 0.0015, "q1": 0.0012, "q3": 0.0018, "rounds": 100_000, "iterations": 1,
        "data": [round(rng.uniform(0.001, 0.002), 4) for _ in range(100_000)]}} for i in range(3)]
    path = tmp_path / "rounds.json"
    path.write_text(json.dumps({"benchmarks": benches, "datetime": "2026-01-01T00:00:00+00:00"}))
    size = path.stat().st_size
    tracemalloc.start()
    try:
        stored = bench_json.import_file(path, tmp_path / "results")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 4 * size + 4 * 2**20, f"{peak / size:.1f}x a file of {size:,} bytes"
    imported = store.read_file(stored)
    assert imported["n_samples"].tolist() == [100_000] * 3
    assert imported["samples_ms"][0][:3].tolist() == [x * 1e3 for x in benches[0]["stats"]["data"][:3]]


def test_10_times_in_nanoseconds_are_checked_without_a_cast_that_fails(tiny_run, tmp_path):
    table = pq.read_table(tiny_run)
    i = table.column_names.index("started_at")
    ns = pa.timestamp("ns", tz="UTC")
    nanos = pc.add(pc.cast(pc.cast(table.column(i), ns), pa.int64()), 1).cast(ns)  # not whole microseconds
    path = tmp_path / "results" / "tiny" / tiny_run.name
    path.parent.mkdir(parents=True)
    pq.write_table(table.set_column(i, pa.field("started_at", ns), nanos), path)
    assert len(store.read_file(path)) == table.num_rows
