"""What the harness itself costs (pytest-benchmark): planning, storing, reading, reporting.

`nox -s bench` runs these with timing; `nox -s tests` runs each once as a plain test (pytest's
--benchmark-disable in pyproject), so they also guard that the harness works at scale.
The records are synthetic: they measure the harness, not a GPU.
"""

from __future__ import annotations

import contextlib
import json
import random

from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from suite.scenario import plan, spec
from suite import cli
from suite.results import store

PRECISIONS = ["fp32", "tf32", "bf16", "fp16"]


def big_scenario_data(cases: int) -> dict:
    # 4 precisions x 25 sizes x (cases / 100) planted outlier values = `cases` cases.
    sizes = list(range(16, 16 + 25 * 16, 16))
    return {
        "name": "bench",
        "defaults": {"baseline": "fp32"},
        "sweep": [{"workload": "outlier", "precisions": PRECISIONS, "shapes": "square", "sizes": sizes,
                   "params": {"outlier": [float(10 + i) for i in range(cases // 100)]}}],
    }


def big_scenario(cases: int) -> spec.Scenario:
    return spec.parse(big_scenario_data(cases))


def big_scenario_file(cases: int, folder) -> str:
    """The same scenario as a TOML file (its values are lists of numbers and strings, which JSON
    and TOML write alike)."""
    data = big_scenario_data(cases)
    sweep = data["sweep"][0]
    text = 'name = "bench"\n[defaults]\nbaseline = "fp32"\n[[sweep]]\n' + "".join(
        f"{key} = {json.dumps(value)}\n" for key, value in sweep.items() if key != "params")
    text += f"params = {{ outlier = {json.dumps(sweep['params']['outlier'])} }}\n"
    path = folder / "bench.toml"
    path.write_text(text, encoding="utf-8")
    return str(path)


def synthetic_records(n: int) -> list[dict]:
    rng = random.Random(0)
    out = []
    for i in range(n):
        precision = PRECISIONS[i % 4]
        size = 64 * (1 + (i // 4) % 64)
        samples = [rng.uniform(1.0, 1.1) for _ in range(10)]
        out.append({
            "schema_version": store.SCHEMA_VERSION, "run_id": "20260101T000000Z-bec4e5", "scenario": "bench",
            "case_id": f"c{i}", "baseline_case_id": f"c{i - i % 4}", "workload": "gemm", "precision": precision,
            "baseline": "fp32", "status": "ok", "reason": None, "m": size, "k": size, "n": size,
            "params": f'{{"variant": {i // 256}}}', "time_ms_median": sorted(samples)[5], "time_ms_p10": samples[1],
            "time_ms_p90": samples[9], "n_samples": 10, "samples_ms": samples, "tflops": rng.uniform(1, 900),
            "peak_tflops": None, "rel_err": rng.uniform(1e-7, 1e-2), "max_abs_err": 0.1, "sqnr_db": 50.0,
            "device": "cuda", "device_name": "synthetic", "torch_version": "2.13.0",
        })
    return out


# Sizes timed only by `nox -s bench`; a plain test run (`nox -s tests`) runs each test at its smallest.
WHEN_TIMED = "only when timed (nox -s bench): seconds each, too long for every test run"


def test_plan_10k_cases(benchmark):
    scenario = big_scenario(10_000)
    cases = benchmark(plan.expand, scenario)
    assert len(cases) == 10_000


@pytest.mark.parametrize("cases", [10_000, 1_000_000])
def test_plan_command(benchmark, cases, tmp_path):
    """`python -m suite plan` as a user runs it: read and check the file, expand, print every case."""
    if cases > 10_000 and not benchmark.enabled:
        pytest.skip(f"{cases:,} cases {WHEN_TIMED}")
    path, out = big_scenario_file(cases, tmp_path), tmp_path / "plan.txt"

    def plan_command():
        with open(out, "w", encoding="utf-8") as stream, contextlib.redirect_stdout(stream):
            return cli.main(["plan", path, "--max-cases", str(cases)])

    assert benchmark.pedantic(plan_command, rounds=3, iterations=1) == 0
    with open(out, encoding="utf-8") as lines:
        assert sum(1 for _ in lines) == cases


@pytest.mark.parametrize("records", [10_000, 100_000])
def test_write_and_read_records(benchmark, records, tmp_path):
    if records > 10_000 and not benchmark.enabled:
        pytest.skip(f"{records:,} records {WHEN_TIMED}")
    written = synthetic_records(records)

    def roundtrip():
        path = store.write_run(written, tmp_path / "bench" / "run.parquet")
        return store.read_file(path)

    df = benchmark.pedantic(roundtrip, rounds=2, iterations=1)
    assert len(df) == records and df["samples_ms"].iloc[0] == pytest.approx(written[0]["samples_ms"])


def results_folder(records: int, folder: Path) -> Path:
    """A results folder holding one run of `records` synthetic records: up to 100k written by the
    store (whose writing test_write_and_read_records times), repeated with case ids of their own."""
    seed_records = min(records, 100_000)
    seed = pq.read_table(store.write_run(synthetic_records(seed_records), folder.parent / "seed" / "run.parquet"))

    def suffixed(table, name: str, copy: int) -> pa.Table:
        ids = pc.binary_join_element_wise(seed[name], f"-{copy}", "")
        return table.set_column(seed.schema.get_field_index(name), seed.schema.field(name), ids)

    copies = [suffixed(suffixed(seed, "case_id", c), "baseline_case_id", c) for c in range(records // seed_records)]
    folder.mkdir(parents=True)
    pq.write_table(pa.concat_tables(copies), folder / "run.parquet")
    return folder


@pytest.mark.parametrize("records", [10_000, 100_000, 1_000_000])
def test_read_and_report(benchmark, records, tmp_path):
    """`python -m suite report` as a user runs it on a results folder: read, analyse, plot, write."""
    if records > 10_000 and not benchmark.enabled:
        pytest.skip(f"{records:,} records {WHEN_TIMED}")
    folder, out = results_folder(records, tmp_path / "results" / "bench"), tmp_path / "report"

    def report_command():
        return cli.main(["report", str(folder), "--out", str(out), "--quiet"])

    assert benchmark.pedantic(report_command, rounds=3, iterations=1) == 0
    assert "more cases are in the results parquet" in (out / "report.md").read_text()
    assert sorted(p.name for p in out.glob("*.svg")) == ["speedup_gemm.svg", "throughput_gemm.svg", "tradeoff_gemm.svg"]
