"""The fidelity workload: the same GEMM timed by an independent harness (the case's peer) and by the
suite, interleaved in rounds by the runner, with the ratio recorded. Speed itself is never asserted here:
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


def test_the_peer_times_the_same_gemm_with_torch_benchmark_block_by_block():
    threads = torch.get_num_threads()
    case = cases("timer")[0]
    prepared = fidelity.FIDELITY.prepare(case, FP32, CPU)
    assert prepared.check_output is not None  # the GEMM's own check: its first call is the timed one
    metrics = prepared.check_output(prepared.fn())
    assert metrics["rel_err"] < 1e-5  # fp32 GEMM vs float64: ~1e-7 (see tests for gemm)
    times = prepared.peer.block(0.02)
    assert times and all(t > 0 for t in times) and prepared.peer.calls_per_sample >= 1
    assert prepared.extra == {"ref_harness": "torch.utils.benchmark.Timer.blocked_autorange",
                              "ref_cache": "warm", "ref_mode": "eager", "gemm_path": None}
    assert prepared.flops == 2 * 48 * 32 * 40
    assert torch.get_num_threads() == threads  # Timer restores the thread count it sets


def test_the_peers_columns_come_from_the_rounds():
    peer = fidelity.PeerTiming(fidelity.HARNESSES["timer"], lambda: None, cases("timer")[0].timing)
    peer.calls_per_sample = 10
    out = peer.columns([1.0, 2.0, 2.0, 4.0], [1.1, 0.9, 1.0, 1.2, 0.95], own_median_ms=3.0)
    assert out["ref_time_ms_median"] == 2.0 and out["ref_n_samples"] == 4 and out["ref_calls_per_sample"] == 10
    assert out["fidelity_ratio"] == 1.0 and out["fidelity_rounds"] == 5  # the rounds' median, not 3 / 2
    assert (out["fidelity_ratio_low"], out["fidelity_ratio_high"]) == (0.9, 1.2)  # five rounds: their range
    assert out["fidelity_ratio_medians"] == 1.5
    alone = peer.columns([2.0], [], own_median_ms=3.0)  # not interleaved: the ratio of medians
    assert alone["fidelity_ratio"] == alone["fidelity_ratio_medians"] == 1.5 and alone["fidelity_rounds"] == 0


def test_runner_interleaves_the_suite_and_its_peer_and_records_both():
    meta = {"run_id": "r", "device": "cpu", "device_name": "cpu"}
    record = inprocess.run_case(cases("timer")[0], CPU, CpuClock(), meta)
    assert record["status"] == "ok", record["reason"]
    assert record["pairing"] == "paired" and record["pairing_note"] is None  # with its peer
    assert record["fidelity_rounds"] >= FAST["min_samples"]
    assert record["fidelity_ratio_low"] <= record["fidelity_ratio"] <= record["fidelity_ratio_high"]
    assert record["fidelity_ratio_medians"] == pytest.approx(record["time_ms_median"] / record["ref_time_ms_median"])
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
