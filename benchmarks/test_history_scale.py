"""What `python -m suite history` costs over many stored runs (pytest-benchmark; issue #35).

A year of nightlies of `scenarios/cpu.toml` is a few hundred runs of 18 measured cases (6 shapes x
fp32, bf16, fp16; tf32 is skipped on a CPU). The runs are synthetic (`benchmarks.calibrate`: the
cases of the committed AMX run, drawn with 3% run shifts, a 20% step in a few bf16/fp16 cases a
third of the way in) and written one parquet file each, as the suite stores them; the command reads
them, finds the change points and writes the page, as a user runs it. `nox -s bench` times 1000
runs (the target: 10 s and 1 GB on 2 cores); `nox -s tests` runs 100 once, as a plain test.

    python -m benchmarks.test_history_scale 1000 /tmp/hist   # write the runs, time one history, print RSS
"""

from __future__ import annotations

import contextlib
import io
import resource
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from benchmarks import calibrate
from suite import cli
from suite.results import store

WHEN_TIMED = "only when timed (nox -s bench): the runs take a minute to write"
STEP = 1.2  # the planted step: speedup and time change points in `calibrate.planted_cases`


def history_results(runs: int, folder: Path, seed: int = 35) -> Path:
    """`runs` synthetic runs of the cpu scenario in folder/cpu/, one parquet file each."""
    tmpl = calibrate.template(groups=6)  # the AMX run's 6 settings: 18 measured cases a run
    rng = np.random.default_rng(seed)
    slow = {c: STEP for c in calibrate.planted_cases(tmpl, 2)}
    df = calibrate.synthetic_history(tmpl, calibrate.HISTORY_BY_NAME["run shifts 3%"], runs, rng, slow, runs // 3)
    # the frame to records once, then a run's records each (records_of's cost is per column: once
    # per run it was half the time these 100 runs took to write)
    runs_records: dict[str, list[dict]] = {}
    for record in store.records_of(df):
        runs_records.setdefault(str(record["run_id"]), []).append(record)
    for run_id, records in runs_records.items():
        store.write_run(records, store.run_path(folder, "cpu", run_id))
    return folder


def history_command(results: Path, out: Path) -> dict:
    """`python -m suite history cpu --json` on these results: its JSON."""
    import json

    stream = io.StringIO()
    with contextlib.redirect_stdout(stream):
        assert cli.main(["history", "cpu", "--results", str(results), "--out", str(out), "--json", "--quiet"]) == 0
    return json.loads(stream.getvalue())


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


@pytest.mark.parametrize("runs", [100, 1000])
def test_history_of_many_runs(benchmark, runs, tmp_path):
    """The whole command over `runs` runs; the planted step is found in each planted series."""
    if runs > 100 and not benchmark.enabled:
        pytest.skip(f"{runs} runs {WHEN_TIMED}")
    results = history_results(runs, tmp_path / "results")
    doc = benchmark.pedantic(history_command, args=(results, tmp_path / "page"), rounds=3, iterations=1)
    benchmark.extra_info["peak_rss_mb"] = round(peak_rss_mb())
    assert len(doc["runs"]) == runs
    found = {(s["case_id"], s["metric"]) for s in doc["series"] for cp in s["change_points"]
             if abs(cp["index"] - runs // 3) <= 1}
    planted = calibrate.planted_cases(calibrate.template(groups=6), 2)
    assert {(c, m) for c in planted for m in ("speedup", "time")} <= found


if __name__ == "__main__":  # one measurement, in a fresh process: time and peak memory
    count, where = int(sys.argv[1]), Path(sys.argv[2])
    if not (where / "cpu").is_dir():
        history_results(count, where)
    start = time.perf_counter()
    doc = history_command(where, where.parent / f"{where.name}-page")
    print(f"{len(doc['runs'])} runs: {time.perf_counter() - start:.2f} s, peak RSS {peak_rss_mb():.0f} MB, "
          f"{doc['change_points']} change point(s)")
