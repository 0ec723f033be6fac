"""How a case runs (`suite.measure.executors`): the one choice of executor from a run's options and
device, the one choice, wherever a case lands, between a torchrun launch and a measurement in that
process, and the interface every executor keeps (units in, one record per case out)."""

from __future__ import annotations

import time

import pytest
import torch

from suite.measure import env, executors, record as records
from suite.measure.executors import torchrun
from suite.measure.executors.base import OneByOne, Unavailable, Unit, units
from suite.measure.executors.cuda_worker import CudaWorker
from suite.measure.executors.process import Process
from suite.measure.executors.thread import CaseThread, InThread
from suite.measure.timing import CpuClock, StopRule
from suite.scenario import plan

CPU = torch.device("cpu")
META = {"run_id": "20260101T120000Z-abcdef", "device": "cpu", "device_name": "test cpu"}
FAST = StopRule(warmup_s=0.0, min_samples=3, budget_s=0.02)


def case(workload="gemm", precision="fp32", size=16) -> plan.Case:
    shape = (size, size, size) if workload == "gemm" else (None, None, None)
    return plan.Case("ex", workload, precision, "fp32", *shape, params={}, seed=0, timing=FAST, device="cpu")


def chosen(options: executors.Options, device: str):
    executor = executors.choose(options, torch.device(device), device)
    executor.close()
    return type(executor)


def test_the_options_and_the_device_choose_the_executor(monkeypatch):
    assert chosen(executors.Options(), "cpu") is InThread
    assert chosen(executors.Options(isolate=True, case_timeout=5.0), "cpu") is Process
    # CUDA asked for where there is none: nothing is started, every case is skipped with the reason
    monkeypatch.setattr(env, "device_unavailable", lambda device: "no CUDA device" if device.type == "cuda" else None)
    assert chosen(executors.Options(), "cuda") is Unavailable
    assert chosen(executors.Options(isolate=True), "cuda") is Unavailable
    monkeypatch.setattr(env, "device_unavailable", lambda device: None)  # as on a GPU machine
    assert chosen(executors.Options(), "cuda") is CudaWorker
    assert chosen(executors.Options(isolate=True), "cuda") is Process


def test_a_launched_workload_runs_under_torchrun_wherever_its_case_lands(monkeypatch):
    launched = []
    monkeypatch.setattr(torchrun, "run_case",
                        lambda c, device, meta: launched.append(c.workload) or records.skipped(c, meta, "launched"))
    [alone] = executors.run_here(Unit((case("dist_train_step"),)), CPU, CpuClock(), META)
    assert alone["reason"] == "launched" and "pairing" not in alone
    [record] = executors.run_here(Unit((case(),)), CPU, CpuClock(), META)  # measured here
    assert launched == ["dist_train_step"] and record["status"] == "ok" and record["n_samples"] >= 3
    # a launched setting: one launch per case, one after another, and the records say so
    two = Unit((case("dist_train_step"), case("dist_train_step", "bf16")))
    group = min(c.case_id for c in two.cases)
    out = executors.run_here(two, CPU, CpuClock(), META)
    assert [r["reason"] for r in out] == ["launched"] * 2
    assert [r["case_id"] for r in out] == [c.case_id for c in two.cases]
    assert [(r["pairing"], r["pairing_note"], r["pairing_group"]) for r in out] == [
        ("sequential", executors.LAUNCHED_NOTE, group)] * 2
    if not torch.cuda.is_available():  # a Ray worker on a node without the GPU asked for
        [skipped] = executors.run_here(Unit((case(),)), torch.device("cuda"), None, META)
        assert (skipped["status"], skipped["reason"]) == ("skipped", "no CUDA device: torch.cuda.is_available() is False")


def test_a_unit_of_several_cases_yields_a_record_per_case_in_order():
    class Echo(OneByOne):
        def run_unit(self, unit, run_meta, progress):
            return [{"case_id": c.case_id, **run_meta} for c in unit.todo]

    cases = [case(size=s) for s in (16, 32, 48)]
    records = list(Echo().run([Unit(tuple(cases[:2])), Unit((cases[2],))], {"run_id": "r"}))
    assert [r["case_id"] for r in records] == [c.case_id for c in cases] and {r["run_id"] for r in records} == {"r"}


def test_units_are_the_settings_and_a_resumed_run_keeps_its_journaled_cases_as_partners():
    """A unit is a setting: a baseline and the precisions measured against it, at one shape; a case
    already in the journal of a resumed run is timed again beside the others but gets no record."""
    cases = [case(size=s, precision=p) for s in (16, 32) for p in ("fp32", "bf16", "fp16")]
    assert units(cases) == [Unit(tuple(cases[:3])), Unit(tuple(cases[3:]))]
    resumed = units(cases, done={cases[0].case_id, cases[3].case_id, cases[4].case_id, cases[5].case_id})
    assert resumed == [Unit(tuple(cases[:3]), frozenset({cases[0].case_id}))]
    assert resumed[0].todo == tuple(cases[1:3])
    lone = plan.Case("ex", "gemm", "fp32", None, 8, 8, 8, params={}, seed=0, timing=FAST, device="cpu")
    assert units([lone, *cases[:3]]) == [Unit((lone,)), Unit(tuple(cases[:3]))]


def test_every_case_of_a_missing_device_is_a_skipped_record_with_the_contract():
    records = list(Unavailable("no CUDA device").run(units([case(), case(size=32)]), META))
    assert [(r["status"], r["reason"]) for r in records] == [("skipped", "no CUDA device")] * 2
    assert all(r["run_id"] == META["run_id"] and r["started_at"] for r in records)


def test_the_case_thread_returns_records_raises_errors_and_reports_waiting():
    worker = CaseThread()
    waits = []
    assert worker.call(lambda: {"ok": 1}) == {"ok": 1}
    assert worker.call(lambda: (time.sleep(0.35), {"slow": 1})[1], waits.append) == {"slow": 1}
    assert waits and not worker.busy
    with pytest.raises(ZeroDivisionError):
        worker.call(lambda: 1 / 0)
    worker.close()
