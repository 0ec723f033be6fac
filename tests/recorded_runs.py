"""Real runs for the comparison tests, recorded on this machine: a few small GEMMs, short budget.

Comparisons need per-repetition samples measured for real (their spread, their outliers), not
numbers made up in a test. One call records `runs` back-to-back runs of SCENARIO in a few seconds.
"""

from __future__ import annotations

from pathlib import Path

import torch

from suite import pipeline, spec

# tf32 is recorded as skipped on a CPU, so every comparison also sees a case skipped on both sides.
SCENARIO = """
name = "cmp"
description = "small GEMMs for the comparison tests"

[defaults]
device = "cpu"
baseline = "fp32"

# Samples spread over the whole budget (the CI target is out of reach), so that a burst of load
# from another process touches a fraction of a case's samples, not all of them.
[defaults.timing]
warmup_s = 0.01
min_samples = 50
max_samples = 5000
target_rel_ci = 0.0001
budget_s = 0.08

[[sweep]]
workload = "gemm"
precisions = ["fp32", "tf32", "bf16", "fp16"]
shapes = "square"
sizes = [128, 192, 256, 384, 512]
"""
SPEEDUP_CASES = 10  # bf16 and fp16 at five sizes; fp32 is the baseline, tf32 is skipped


def record(folder: Path, runs: int = 2) -> list[Path]:
    """Run SCENARIO `runs` times into folder/results; returns the parquet files, oldest first.

    One thread: on a shared machine a two-thread GEMM waits for whichever thread was descheduled,
    which turns other people's load into our timing noise."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "cmp.toml"
    path.write_text(SCENARIO, encoding="utf-8")
    scenario = spec.load(path)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return [
            pipeline.run_scenario(scenario, folder / "results", None, "cpu", progress=False).path
            for _ in range(runs)
        ]
    finally:
        torch.set_num_threads(threads)


def shared(tmp_path_factory, runs: int = 2) -> tuple[Path, list[Path]]:
    """The same recorded runs for every test module of one pytest session (recorded on first use
    under the session's base temp folder): (results folder, parquet files oldest first)."""
    folder = tmp_path_factory.getbasetemp() / f"recorded_runs_{runs}"
    results = folder / "results"
    if not results.is_dir():
        record(folder, runs)
    return results, sorted((results / "cmp").glob("*.parquet"))
