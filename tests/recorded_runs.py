"""Real runs for the comparison tests, recorded on this machine: a few small GEMMs, short budget.

Comparisons need per-repetition samples measured for real (their spread, their outliers), not
numbers made up in a test. The runs are recorded once per pytest session (RUNS back-to-back runs of
SCENARIO) and shared by every module and every pytest-xdist worker. Sizes and sample counts are
chosen so that the recording costs seconds on any CPU: bf16 and fp16 run 30-115x slower than fp32 on
a CPU without native bf16 (256^3 takes about 25 ms a call there, against 0.3 ms with AMX; the largest
case here, 160^3, a quarter of that), and a busy machine's warm-up never settles, so it is capped.
"""

from __future__ import annotations

import fcntl
import os
import shutil
from pathlib import Path

from suite import pipeline
from suite.scenario import spec

SIZES = [96, 112, 128, 144, 160]  # the sweep's sizes, largest last

# tf32 is recorded as skipped on a CPU, so every comparison also sees a case skipped on both sides.
SCENARIO = f"""
name = "cmp"
description = "small GEMMs for the comparison tests"

[defaults]
device = "cpu"
baseline = "fp32"
# One thread: on a shared machine a two-thread GEMM waits for whichever thread was descheduled,
# which turns other people's load into our timing noise.
threads = 1

# Samples spread over the whole budget (the CI target is out of reach), so that a burst of load
# from another process touches a fraction of a case's samples, not all of them.
[defaults.timing]
warmup_s = 0.01
# Warm-up only has to get past the first calls (allocation, packing): under load the batch medians
# never agree, and an uncapped warm-up (1 s a case) would cost more than the measurement.
warmup_max_s = 0.05
min_samples = 20
max_samples = 5000
target_rel_ci = 0.0001
budget_s = 0.1

[[sweep]]
workload = "gemm"
precisions = ["fp32", "tf32", "bf16", "fp16"]
shapes = "square"
sizes = {SIZES}
"""
RUNS = 4  # the most any test pools
SPEEDUP_CASES = 10  # bf16 and fp16 at five sizes; fp32 is the baseline, tf32 is skipped


def record(folder: Path, runs: int = 2) -> list[Path]:
    """Run SCENARIO `runs` times into folder/results; returns the parquet files, oldest first."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "cmp.toml"
    path.write_text(SCENARIO, encoding="utf-8")
    scenario = spec.load(path)
    return [pipeline.run(pipeline.RunRequest(scenario, folder / "results", None, "cpu", progress=False)).path
            for _ in range(runs)]


def shared(tmp_path_factory, runs: int = 2) -> tuple[Path, list[Path]]:
    """The first `runs` of the session's recorded runs (recorded on first use under the session's
    base temp folder, RUNS of them, into a results folder of their own for each `runs` asked for,
    so a test that reads a whole folder sees just its runs): (results folder, parquet files)."""
    if not 1 <= runs <= RUNS:
        raise ValueError(f"at most {RUNS} recorded runs, asked for {runs}")
    base = session_folder(tmp_path_factory) / "recorded_runs"
    base.mkdir(exist_ok=True)
    # One recording for the whole session: a pytest-xdist worker that comes second waits for it.
    with open(base.parent / "recorded_runs.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (base / "results").is_dir():
            shutil.rmtree(base / "recording", ignore_errors=True)  # what a worker that failed mid-way left
            record(base / "recording", RUNS)
            (base / "recording" / "results").rename(base / "results")
        every = sorted((base / "results" / "cmp").glob("*.parquet"))
        results = base / f"first_{runs}"
        if not results.is_dir():
            (results / "cmp").mkdir(parents=True)
            for path in every[:runs]:
                shutil.copy2(path, results / "cmp" / path.name)
    return results, sorted((results / "cmp").glob("*.parquet"))


def session_folder(tmp_path_factory) -> Path:
    """The pytest session's temp folder, common to all pytest-xdist workers (each worker's own base
    temp folder lies inside it)."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base
