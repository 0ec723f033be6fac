"""The runner: one record per case with the contract columns; failures and skips never stop a run."""

from __future__ import annotations

import io

import pytest
import torch

from suite import plan, runner, store
from suite.precisions import flags
from suite.timing import CpuClock

CPU = torch.device("cpu")
META = {"run_id": "r1", "device": "cpu", "device_name": "test cpu", "torch_version": torch.__version__}


def run_all(scenario, progress=None):
    return list(runner.run(plan.expand(scenario), CPU, META, progress))


def test_records_follow_the_contract(tiny_scenario):
    records = run_all(tiny_scenario)
    assert len(records) == 8
    for r in records:
        assert r["status"] in ("ok", "skipped")
        if r["status"] == "ok":
            assert r["n_samples"] == len(r["samples_ms"]) >= 3
            assert r["time_ms_p10"] <= r["time_ms_median"] <= r["time_ms_p90"]
            assert r["tflops"] == pytest.approx(2 * r["m"] * r["n"] * r["k"] / (r["time_ms_median"] * 1e-3) / 1e12)
            assert r["rel_err"] is not None and r["reason"] is None
    table = store._table(records)
    assert set(store.CONTRACT) <= set(table.column_names)


def test_tf32_skipped_on_cpu_with_reason(tiny_scenario):
    skipped = [r for r in run_all(tiny_scenario) if r["status"] == "skipped"]
    assert {r["precision"] for r in skipped} == {"tf32"}
    assert all("CUDA" in r["reason"] for r in skipped)


def test_flags_are_the_same_after_a_run(tiny_scenario):
    before = flags.snapshot()
    run_all(tiny_scenario)
    assert flags.snapshot() == before


def test_a_failing_case_is_recorded_and_the_run_goes_on(tiny_scenario, monkeypatch):
    from suite.precisions.floating import Half

    original = Half.gemm

    def broken(self, a, b, params):
        if self.name == "fp16":
            raise RuntimeError("simulated kernel failure\nsecond line")
        return original(self, a, b, params)

    monkeypatch.setattr(Half, "gemm", broken)
    records = run_all(tiny_scenario)
    failed = [r for r in records if r["status"] == "failed"]
    assert {r["precision"] for r in failed} == {"fp16"}
    assert all(r["reason"] == "RuntimeError: simulated kernel failure" for r in failed)
    assert sum(r["status"] == "ok" for r in records) == 4  # fp32 and bf16 at two sizes


def test_non_finite_output_fails_the_case(tiny_scenario, monkeypatch):
    from suite.precisions.floating import Half

    monkeypatch.setattr(Half, "gemm", lambda self, a, b, params: (lambda: torch.full((a.shape[0], b.shape[1]), float("inf"))))
    records = run_all(tiny_scenario)
    bad = [r for r in records if r["precision"] in ("bf16", "fp16")]
    assert all(r["status"] == "failed" and "non-finite" in r["reason"] for r in bad)


def test_progress_lines(tiny_scenario):
    out = io.StringIO()
    run_all(tiny_scenario, runner.Progress(8, out))
    lines = out.getvalue().splitlines()
    assert len(lines) == 8
    assert lines[0].startswith("[1/8] gemm fp32 32x32x32 ... ok")
    assert "elapsed" in lines[-1] and "left" in lines[-1]
    assert "skipped: TF32" in lines[1]


def test_cpu_clock_times_each_call():
    calls = []
    samples = CpuClock().time_batch(lambda: calls.append(1), 4)
    assert len(samples) == 4 == len(calls) and all(s >= 0 for s in samples)
