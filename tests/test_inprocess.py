"""A case measured in this process (`suite.measure.inprocess`): one record per case with the contract
columns; failures and skips never stop a run."""

from __future__ import annotations

import pytest
import torch

from suite.measure import inprocess
from suite.measure.timing import CpuClock
from suite.precisions import flags
from suite.results import store
from suite.scenario import plan
from tests.conftest import run_cases

CPU = torch.device("cpu")
META = {"run_id": "r1", "device": "cpu", "device_name": "test cpu", "torch_version": torch.__version__}


def run_all(scenario, progress=None):
    return run_cases(plan.expand(scenario), META, progress)


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
    from suite.precisions.floating.recipes import Half

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
    from suite.precisions.floating.recipes import Half

    monkeypatch.setattr(Half, "gemm", lambda self, a, b, params: (lambda: torch.full((a.shape[0], b.shape[1]), float("inf"))))
    records = run_all(tiny_scenario)
    bad = [r for r in records if r["precision"] in ("bf16", "fp16")]
    assert all(r["status"] == "failed" and "non-finite" in r["reason"] for r in bad)


def test_cpu_clock_times_each_call():
    calls = []
    samples = CpuClock().time_batch(lambda: calls.append(1), 4)
    assert len(samples) == 4 == len(calls) and all(s >= 0 for s in samples)


# --- the cost bound through a case run here: a faked 30 s call on a virtual clock -------------------


class VirtualClock:
    """A CPU clock on virtual time: every call of fn takes `call_ms` (fn still runs, so the
    accuracy check sees a real output)."""

    name, timing_mode, cache, device_type = "virtual", "eager", "warm", "cpu"

    def __init__(self, call_ms: float):
        self.call_ms, self.now, self.calls = call_ms, 0.0, 0

    def for_rule(self, rule):
        return self

    def prepare(self, fn):
        return fn

    def time_batch(self, fn, reps):
        out = []
        for _ in range(reps):
            fn()
            self.calls += 1
            self.now += self.call_ms / 1e3
            out.append(self.call_ms)
        return out

    def sync(self):
        pass

    def wall(self):
        return self.now


def test_a_30_s_call_with_a_1_s_budget_is_one_checked_call_and_a_record_that_says_so():
    from suite.measure.timing import StopRule

    rule = StopRule(budget_s=1.0)
    case = plan.Case("cost", "gemm", "bf16", "fp32", 64, 64, 64, params={}, seed=0, timing=rule, device="cpu")
    clock = VirtualClock(30_000.0)
    record = inprocess.run_case(case, CPU, clock, META)
    assert record["status"] == "ok" and record["rel_err"] < 1e-2  # the checked output is the timed one's
    assert clock.calls == 1  # one call: calibration, accuracy check and sample at once
    assert record["n_samples"] == rule.floor_samples == 1 and record["samples_ms"] == [30_000.0]
    assert record["stop_reason"] == "cap" and record["warmup_reason"] == "slow" and record["first_call_kept"]
    assert record["rel_ci"] == float("inf") and record["case_cap_s"] == 10.0
    assert clock.now <= record["case_cap_s"] + 30.0  # the cap plus at most the one call
