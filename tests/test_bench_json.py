"""pytest-benchmark JSON both ways, checked with pytest-benchmark itself."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from suite.analysis import bench_json, compare
from suite import cli
from suite.results import select, store
from suite.errors import UserError
from tests.recorded_runs import shared

pytest_benchmark_stats = pytest.importorskip("pytest_benchmark.stats")


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    results, paths = shared(tmp_path_factory, runs=2)
    return results, [store.read_file(p) for p in paths]


def test_stats_are_computed_the_way_pytest_benchmark_computes_them():
    for n in (1, 2, 5, 6, 7, 8, 101):
        data = list(np.random.default_rng(n).lognormal(-7, 0.4, n))
        theirs = pytest_benchmark_stats.Stats()
        for x in data:
            theirs.update(x)
        ours = bench_json.benchmark_stats(data)
        for field in pytest_benchmark_stats.Stats.fields:
            expected = getattr(theirs, field)  # numbers, and 'outliers' as text ("1;0")
            if isinstance(expected, (int, float)):
                expected = pytest.approx(expected, rel=1e-12)
            assert ours[field] == expected, (n, field)


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
    assert bench["stats"]["rounds"] == len(row["samples_ms"])
    # The real command: it must load both files and print every case of both runs.
    out = subprocess.run(
        [sys.executable, "-m", "pytest_benchmark", "compare", *map(str, written), "--columns", "min,median,rounds",
         "--group-by", "name"],
        capture_output=True, text=True, timeout=120, cwd=tmp_path,
    )
    assert out.returncode == 0, out.stderr
    for name in {b["name"] for b in doc["benchmarks"]}:
        assert out.stdout.count(name) >= 2, name  # one row per run


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
    )
    assert done.returncode == 0, done.stdout + done.stderr
    files = [out, out]  # imported twice: two runs (each import is a new run id)
    results = tmp_path / "results"
    assert cli.main(["import", *map(str, files), "--results", str(results), "--scenario", "sums"]) == 0
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
    assert (result.cases["time_ratio"] == 1.0).all()  # the same file imported twice


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
