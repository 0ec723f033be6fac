"""The fidelity workload: the same GEMM timed by an independent harness (in its untimed check) and
by the suite (through the runner), with the ratio recorded. Speed itself is never asserted here:
the 0.9-1.1 agreement is measured by running `scenarios/fidelity.toml` (see the README)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from suite.scenario import plan, spec
from suite.measure import inprocess
from suite.precisions.floating.recipes import FP32
from suite.measure.timing import CpuClock
from suite.workloads.fidelity import workload as fidelity
from suite.core.errors import Unsupported

CPU = torch.device("cpu")
CUDA = torch.device("cuda")  # a device object only: nothing here touches a GPU
SCENARIOS = Path(__file__).resolve().parent.parent / "scenarios"
FAST = {"warmup_s": 0.0, "warmup_max_s": 0.2, "min_samples": 3, "budget_s": 0.02}


def cases(harness: str, **timing):
    scenario = spec.parse({
        "name": "fid", "defaults": {"device": "cpu"},
        "sweep": [{"workload": "fidelity", "precisions": ["fp32"], "mkn": [[48, 32, 40]],
                   "params": {"harness": harness}, "timing": {**FAST, **timing}}],
    })
    return plan.expand(scenario)


def test_harness_must_match_the_case_timing():
    assert fidelity.harness_for(cases("timer")[0], CPU).name == "timer"  # auto = warm on a CPU
    with pytest.raises(ValueError, match='cache = "warm"'):
        fidelity.harness_for(cases("timer", cache="cold")[0], CPU)
    with pytest.raises(ValueError, match='mode = "cuda_graph"'):
        fidelity.harness_for(cases("do_bench_cudagraph", cache="warm")[0], CUDA)
    # an unknown harness is refused when the scenario loads, before anything runs
    with pytest.raises(spec.ScenarioError, match="params.harness: 'nvbench' is not valid for workload 'fidelity': "
                                                 "Input should be 'timer', 'do_bench' or 'do_bench_cudagraph'"):
        cases("nvbench")


def test_gpu_harnesses_are_skipped_on_a_cpu():
    with pytest.raises(Unsupported, match="needs a CUDA device"):
        fidelity.harness_for(cases("do_bench", cache="cold")[0], CPU)
    with pytest.raises(Unsupported, match="needs a CUDA device"):
        fidelity.harness_for(cases("do_bench_cudagraph", mode="cuda_graph", cache="warm")[0], CPU)


def test_check_times_the_same_gemm_with_torch_benchmark():
    threads = torch.get_num_threads()
    case = cases("timer")[0]
    prepared = fidelity.FIDELITY.prepare(case, FP32, CPU)
    metrics = prepared.check()
    assert metrics["rel_err"] < 1e-5  # fp32 GEMM vs float64: ~1e-7 (see tests for gemm)
    assert metrics["ref_time_ms_median"] > 0 and metrics["ref_n_samples"] >= 1
    assert prepared.extra == {"ref_harness": "torch.utils.benchmark.Timer.blocked_autorange",
                              "ref_cache": "warm", "ref_mode": "eager", "gemm_path": None}
    assert prepared.flops == 2 * 48 * 32 * 40
    assert torch.get_num_threads() == threads  # Timer restores the thread count it sets


def test_runner_records_both_medians_and_their_ratio():
    meta = {"run_id": "r", "device": "cpu", "device_name": "cpu"}
    record = inprocess.run_case(cases("timer")[0], CPU, CpuClock(), meta)
    assert record["status"] == "ok", record["reason"]
    assert record["fidelity_ratio"] == pytest.approx(record["time_ms_median"] / record["ref_time_ms_median"])
    assert record["timing_mode"] == "eager" and record["cache"] == "warm"
    assert record["stop_reason"] in ("converged", "budget", "max_samples")
    assert record["warmup_reason"] in ("settled", "cap") and record["rel_spread"] >= 0
    assert record["telemetry"] is None and record["samples_throttled"] is None  # no NVML on a CPU run

    skipped = inprocess.run_case(cases("do_bench_cudagraph", mode="cuda_graph", cache="warm")[0], CPU, CpuClock(), meta)
    assert skipped["status"] == "skipped" and "cuda_graph needs a CUDA device" in skipped["reason"]
    mismatched = inprocess.run_case(cases("timer", cache="cold")[0], CPU, CpuClock(), meta)
    assert mismatched["status"] == "failed" and 'cache = "warm"' in mismatched["reason"]


@pytest.mark.parametrize("name", ["fidelity", "gpu_check_fidelity"])
def test_scenario_sweeps_pair_each_harness_with_matching_timing(name):
    scenario = spec.load(SCENARIOS / f"{name}.toml")
    harnesses = set()
    for case in plan.expand(scenario):
        harnesses.add(case.params.get("harness", "timer"))  # the default is left out of a case's params
        for device in (CPU, CUDA):
            try:
                fidelity.harness_for(case, device)
            except Unsupported:
                pass  # e.g. triton or CUDA missing here; a ValueError (mismatch) would fail the test
    assert harnesses == set(fidelity.HARNESSES)


def test_median_is_requested_from_every_triton_api_version():
    def v3(fn, warmup=25, rep=100, grad_to_none=None, quantiles=None, return_mode="mean"): ...
    def v2(fn, warmup=25, rep=100, grad_to_none=None, quantiles=None, fast_flush=True): ...
    def v1(fn, warmup=25, rep=100, grad_to_none=None, percentiles=(0.2, 0.8)): ...

    assert fidelity._median_kwargs(v3) == {"return_mode": "median"}
    assert fidelity._median_kwargs(v2) == {"quantiles": [0.5]}
    assert fidelity._median_kwargs(v1) == {"percentiles": None}
    assert fidelity._first((1.5, 1.0, 2.0)) == fidelity._first([1.5]) == fidelity._first(1.5) == 1.5
