"""pytest-benchmark JSON both ways, checked with pytest-benchmark itself."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from datetime import datetime, timedelta

import numpy as np
import pandas as pd
import pytest

from suite.analysis.interchange import bench_json
from suite.analysis.regression import compare
from suite import cli
from suite.results import select, store
from suite.core.errors import UserError
from tests.recorded_runs import shared

pytest.importorskip("pytest_benchmark")


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    results, paths = shared(tmp_path_factory, runs=2)
    return results, [store.read_file(p) for p in paths]


def pytest_benchmark_cli(*args, cwd) -> str:
    out = subprocess.run([sys.executable, "-m", "pytest_benchmark", *map(str, args)],
                         capture_output=True, text=True, timeout=120, cwd=cwd)
    assert out.returncode == 0, out.stderr
    return out.stdout


def test_export_is_read_by_pytest_benchmark_compare(recorded, tmp_path):
    results, (a, b) = recorded
    written = bench_json.export(select.select(f"{results}/cmp,runs=all", results), tmp_path / "pb")
    assert [p.name[:5] for p in written] == ["0001_", "0002_"]
    doc = json.loads(written[0].read_text())
    measured = a[a["status"] == "ok"]
    assert len(doc["benchmarks"]) == len(measured)
    assert len(doc["mpsuite"]["not_measured"]) == (a["status"] != "ok").sum()  # tf32: skipped on a CPU
    bench = doc["benchmarks"][0]
    row = measured[measured["case_id"] == bench["extra_info"]["mpsuite"]["case_id"]].iloc[0]
    assert bench["stats"]["median"] == pytest.approx(row["time_ms_median"] / 1e3, rel=1e-12)
    assert bench["stats"]["rounds"] == len(row["samples_ms"]) == len(bench["stats"]["data"])
    # times as pytest-benchmark writes them: ISO 8601 text (the records hold a timestamp)
    started = a["started_at"].iloc[0]  # the run's first case
    assert datetime.fromisoformat(doc["datetime"]) == datetime.fromisoformat(doc["commit_info"]["time"]) == started
    # The real command: it must load both files and print every case of both runs.
    out = pytest_benchmark_cli("compare", *written, "--columns", "min,median,rounds", "--group-by", "name", cwd=tmp_path)
    for name in {b["name"] for b in doc["benchmarks"]}:
        assert out.count(name) >= 2, name  # one row per run


def test_compare_tables_show_the_torch_build_and_the_precision(recorded, tmp_path):
    _, (a, b) = recorded
    # the same machine's two runs, labelled as two torch builds (what a version matrix compares)
    runs = pd.concat([a.assign(torch_version="2.13.0+cpu"), b.assign(torch_version="2.14.1+cu130")])
    written = bench_json.export(runs, tmp_path / "pb")
    assert [p.relative_to(tmp_path / "pb").parts[0] for p in written] == ["torch2.13.0-cpu", "torch2.14.1-cu130"]
    # paths as a user types them (given absolute paths, pytest-benchmark 5.3 cuts the common folder
    # one character short: "(b/torch2.13.0-cpu/...)")
    relative = [p.relative_to(tmp_path) for p in written]
    rows = [line for line in pytest_benchmark_cli("compare", *relative, cwd=tmp_path).splitlines()
            if line.startswith(tuple(a["workload"]))]
    assert rows and all("(torch2.13.0-cpu/0001_" in row or "(torch2.14.1-cu130/0002_" in row for row in rows)
    measured = set(a.loc[a["status"] == "ok", "precision"])
    assert {p for p in measured if any(f"[{p}-" in row for row in rows)} == measured
    # by number from pytest-benchmark's storage, each build's median in its own labelled column
    out = pytest_benchmark_cli("--storage", f"file://{tmp_path / 'pb'}", "compare", "0001", "0002",
                               "--between", "median", cwd=tmp_path)
    assert "torch2.13.0-cpu/0001_" in out and "torch2.14.1-cu130/0002_" in out


def test_export_without_pytest_benchmark_says_what_to_install(recorded, tmp_path, monkeypatch):
    _, (a, _) = recorded
    monkeypatch.setitem(sys.modules, "pytest_benchmark.stats", None)  # import fails as if absent
    with pytest.raises(UserError, match=r"pip install 'mpsuite\[pytest-benchmark\]'"):
        bench_json.export(a, tmp_path / "pb")
    assert not (tmp_path / "pb").exists()


def test_export_then_import_gives_back_the_same_run(recorded, tmp_path):
    _, (a, _) = recorded
    path = bench_json.export(a, tmp_path / "run.json")[0]
    back_path = bench_json.import_file(path, tmp_path / "results", label="round-trip")
    back = store.read_file(back_path)
    assert back_path.parent.name == "cmp" and back["run_id"].iloc[0] != a["run_id"].iloc[0]
    assert back["source_run_id"].iloc[0] == a["run_id"].iloc[0] and (back["label"] == "round-trip").all()
    assert sorted(back["case_id"]) == sorted(a["case_id"])
    merged = a.merge(back, on="case_id", suffixes=("", "_back"))
    assert (merged["status"] == merged["status_back"]).all()
    ok = merged[merged["status"] == "ok"]
    for x, y in zip(ok["samples_ms"], ok["samples_ms_back"]):
        assert np.allclose(x, y, rtol=1e-12)
    # Compared with its original, nothing moved: every speedup ratio is exactly 1 (one run per side
    # cannot tell more than that: insufficient-runs).
    result = compare.compare(compare.Side("baseline", "a", a), compare.Side("candidate", "b", back))
    speedup = result.cases[result.cases["metric"] == "speedup"]
    assert len(speedup) and speedup["speedup_ratio"].to_numpy() == pytest.approx(np.ones(len(speedup)), rel=1e-12)
    assert set(speedup["verdict"]) == {"insufficient-runs"}
    assert set(select.select("label=round-trip", tmp_path / "results")["run_id"]) == {back["run_id"].iloc[0]}


BENCH_TEST = """
import pytest

@pytest.mark.parametrize("n", [200, 2000])
def test_sum(benchmark, n):
    benchmark(sum, range(n))
"""


def test_import_of_a_file_written_by_pytest_benchmark(tmp_path, capsys):
    (tmp_path / "test_sum.py").write_text(textwrap.dedent(BENCH_TEST))
    out = tmp_path / "run.json"
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_sum.py", f"--benchmark-json={out}",
         "--benchmark-max-time=0.02", "--benchmark-min-rounds=20", "-o", "addopts="],
        capture_output=True, text=True, timeout=120, cwd=tmp_path,
        # pytest-benchmark turns itself off in a pytest-xdist worker, and would in this child too
        env={k: v for k, v in os.environ.items() if not k.startswith("PYTEST_XDIST")},
    )
    assert done.returncode == 0, done.stdout + done.stderr
    later = json.loads(out.read_text())  # the same numbers saved again an hour later: a second run
    later["datetime"] = (datetime.fromisoformat(later["datetime"]) + timedelta(hours=1)).isoformat()
    files = [out, tmp_path / "later.json"]
    files[1].write_text(json.dumps(later))
    results = tmp_path / "results"
    assert cli.main(["import", *map(str, files), "--results", str(results), "--scenario", "sums"]) == 0
    assert cli.main(["import", str(out), "--results", str(results), "--scenario", "sums"]) == 2  # imported already
    assert "already imported" in capsys.readouterr().err
    df = store.read([results / "sums"])
    assert df["run_id"].nunique() == 2 and set(df["workload"]) == {"pytest-benchmark"}
    doc = json.loads(files[0].read_text())
    first = df[df["pytest_benchmark_name"] == doc["benchmarks"][0]["fullname"]].sort_values("run_id").iloc[0]
    assert first["n_samples"] == doc["benchmarks"][0]["stats"]["rounds"] >= 20
    assert first["time_ms_median"] == pytest.approx(doc["benchmarks"][0]["stats"]["median"] * 1e3, rel=1e-12)
    # Two imported runs compare on absolute time (same machine); they have no speedup. One run per
    # side: the time verdict waits for more runs.
    result = compare.compare(*compare.load_sides(f"{results}/sums,skip=1", f"{results}/sums", results))
    assert set(result.cases["verdict"]) == {"n/a"} and result.time_compared
    assert set(result.cases["time_verdict"]) == {"insufficient-runs"}
    assert (result.cases["time_ratio"] == 1.0).all()  # the same numbers, saved twice


def test_import_refuses_what_is_not_pytest_benchmark_json(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(UserError, match="not readable as JSON"):
        bench_json.import_file(bad, tmp_path)
    bad.write_text(json.dumps({"hello": 1}))
    with pytest.raises(UserError, match="not a pytest-benchmark JSON file"):
        bench_json.import_file(bad, tmp_path)
    with pytest.raises(UserError, match="no such file"):
        bench_json.import_file(tmp_path / "missing.json", tmp_path)


def test_export_of_several_runs_needs_a_folder(recorded, tmp_path):
    results, _ = recorded
    both = select.select(f"{results}/cmp,runs=all", results)
    with pytest.raises(UserError, match="give a folder"):
        bench_json.export(both, tmp_path / "one.json")


def test_a_re_export_into_its_folder_replaces_the_earlier_export_whole(recorded, tmp_path, capsys):
    results, (a, b) = recorded
    out = tmp_path / "pb"
    assert cli.main(["export", f"{results}/cmp,runs=all", "-o", str(out), "--results", str(results)]) == 0
    assert len(list(out.rglob("*.json"))) == 2
    # the newest run alone: one 0001_ file, never beside the earlier export's 0001_ and 0002_
    assert cli.main(["export", f"{results}/cmp", "-o", str(out), "--results", str(results), "--quiet"]) == 0
    (only,) = out.rglob("*.json")
    assert only.name == f"0001_{max(a['run_id'].iloc[0], b['run_id'].iloc[0])}.json"
    assert json.loads((out / bench_json.EXPORT_MARKER).read_text())["files"] == [only.relative_to(out).as_posix()]


def test_export_refuses_a_folder_holding_files_it_did_not_write(recorded, tmp_path, capsys):
    results, _ = recorded
    out = tmp_path / "pb"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    export = ["export", f"{results}/cmp", "-o", str(out), "--results", str(results)]
    assert cli.main(export) == 2
    err = capsys.readouterr().err.strip()
    assert "not an export folder" in err and "'notes.txt'" in err and "\n" not in err
    assert [p.name for p in out.iterdir()] == ["notes.txt"]  # nothing written, nothing removed
    (out / "notes.txt").unlink()
    assert cli.main(export) == 0
    (out / "torch-other").mkdir()
    (out / "torch-other" / "0001_mine.json").write_text("{}")  # added to an export's folder: refused, kept
    assert cli.main(export) == 2
    assert "holds 'torch-other/0001_mine.json', which no export wrote" in capsys.readouterr().err
    assert (out / "torch-other" / "0001_mine.json").read_text() == "{}" and len(list(out.rglob("*.json"))) == 2
