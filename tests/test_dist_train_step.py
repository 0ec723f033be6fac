"""dist_train_step: 2-rank FSDP2 launches under torchrun on the CPU (gloo), a rank killed midway,
the collectives read from a profiler trace, and h100x8_fp8 planned on a CPU machine.

torchrun and two torch imports per launch cost seconds, so one scenario run (two launches: an fp32
case whose rank 1 dies at its third step, then a bf16 case) serves several tests."""

from __future__ import annotations

import json
import math
import statistics
from pathlib import Path

import pytest
import torch

from suite import pipeline
from suite.measure import collectives
from suite.measure.executors import torchrun
from suite.scenario import registry, spec
from suite.scenario.plan import expand

FAULT_RANK = Path(__file__).with_name("dist_fault_rank.py")


@pytest.fixture(scope="module")
def launched(tmp_path_factory):
    """Records of a 2-rank run: fp32 (rank 1 SIGKILLs itself at its third step), then bf16."""
    scenario = spec.parse({
        "name": "dist", "defaults": {"device": "cpu", "baseline": "fp32",
                                     "timing": {"warmup_s": 0.0, "warmup_max_s": 0.0, "min_warmup": 1,
                                                "min_samples": 2, "budget_s": 0.01}},
        "sweep": [{"workload": "dist_train_step", "precisions": ["fp32", "bf16"],
                   "params": {"model": "gpt2", "size": "tiny", "d_model": 32, "vocab": 128, "seq_len": 32,
                              "batch": 1, "steps": 2, "profile_steps": 1, "timeout_s": 120.0}}],
    })
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(torchrun, "ENTRY", [str(FAULT_RANK)])
        result = pipeline.run(pipeline.RunRequest(scenario, tmp_path_factory.mktemp("results"), reports=None, progress=False))
    return {r["precision"]: r for r in result.records.to_dict("records")}


def test_a_killed_rank_fails_its_case_with_that_ranks_error(launched):
    killed = launched["fp32"]
    assert killed["status"] == "failed"
    assert killed["reason"].startswith("rank 1 crashed: signal 9 (SIGKILL)"), killed["reason"]


def test_the_case_after_a_killed_rank_runs_and_measures_collectives(launched):
    ok = launched["bf16"]
    assert ok["status"] == "ok", ok["reason"]
    assert ok["world_size"] == 2 and ok["dist_backend"] == "gloo"
    # the slowest rank's median is the step time
    assert len(ok["rank_time_ms_median"]) == 2
    assert ok["time_ms_median"] == pytest.approx(max(ok["rank_time_ms_median"]))
    assert ok["time_ms_median"] == pytest.approx(statistics.median(ok["samples_ms"]))
    assert ok["tokens_per_s"] == pytest.approx(2 * 32 / (ok["time_ms_median"] / 1e3))
    assert math.isnan(ok["mfu"])  # no vendor peak for a CPU (null, read back as NaN)
    # bf16 parameters gathered: every parameter once per forward and once per backward (resharded
    # after forward), 2 bytes each; fp32 gradients reduce-scattered once, 4 bytes each. FSDP2 pads
    # each parameter to a multiple of world_size rows, so the sizes are at least these.
    n = ok["n_params"]
    assert 2 * 2 * n <= ok["allgather_bytes_per_step"] <= 2 * 2 * n * 1.1
    assert 4 * n <= ok["reduce_scatter_bytes_per_step"] <= 4 * n * 1.1
    assert ok["allgather_ms_per_step"] > 0 and ok["reduce_scatter_ms_per_step"] > 0
    assert len(ok["rank_peak_rss_mb"]) == 2 and min(ok["rank_peak_rss_mb"]) > 0
    # the loss: mean over ranks, against the fp32 run of the same sharding, within bf16's rounding
    assert len(ok["loss_curve"]) == 2 and abs(ok["loss_delta_vs_fp32"]) < 0.05
    assert "OMP_NUM_THREADS" in json.loads(ok["dist_env"])


def test_h100x8_fp8_plans_on_a_cpu_with_every_case_skipped(tmp_path):
    scenario = spec.load(Path(__file__).parent.parent / "scenarios" / "h100x8_fp8.toml")
    assert "+25.0%" in scenario.description and "+10.1%" in scenario.description
    result = pipeline.run(pipeline.RunRequest(scenario, tmp_path, reports=None, progress=False))
    assert len(result.records) and set(result.records["status"]) == {"skipped"}
    assert result.records["reason"].astype(bool).all()
    # with CUDA but fewer GPUs than world_size, the parent skips before launching anything
    case = next(c for c in expand(scenario) if c.precision == "bf16")
    workload = registry.workload("dist_train_step")
    reason = workload.launch_unsupported(case, registry.precision("bf16"), torch.device("cuda"))
    if torch.cuda.device_count() < 8:
        assert reason == f"needs 8 GPUs (world_size, one per rank); this machine has {torch.cuda.device_count()}"


def _event(name, dims=None, types=None, dur=1000.0, cat="cpu_op"):
    args = {"Input Dims": dims, "Input type": types} if dims is not None else {}
    return {"ph": "X", "name": name, "cat": cat, "dur": dur, "args": args}


def test_collective_bytes_are_read_at_their_dtype_and_times_matched_to_their_collective():
    trace = {"traceEvents": [
        # float8 weights gathered as bytes, bf16 ones as bf16: the gathered output (argument 0) counts
        _event("c10d::_allgather_base_", [[1000], [500], [], []], ["unsigned char", "unsigned char", "", ""]),
        _event("c10d::_allgather_base_", [[100], [50], [], []], ["c10::BFloat16", "c10::BFloat16", "", ""]),
        # the unreduced input (argument 1) of a reduce-scatter counts
        _event("c10d::_reduce_scatter_base_", [[30], [60], [], []], ["float", "float", "", ""]),
        _event("gloo:all_gather", [[500]], ["unsigned char"], dur=2000.0),
        _event("gloo:all_reduce", [[60]], ["float"], dur=3000.0),  # gloo's reduce-scatter
        _event("gloo:all_reduce", [[2]], ["float"], dur=7000.0),  # a grad-norm all-reduce: not a reduce-scatter
    ]}
    out = collectives.summarise(trace, steps=2)
    assert out["allgather_bytes_per_step"] == (1000 + 200) // 2
    assert out["reduce_scatter_bytes_per_step"] == 60 * 4 // 2
    assert out["allgather_ms_per_step"] == pytest.approx(1.0)
    assert out["reduce_scatter_ms_per_step"] == pytest.approx(1.5)
    assert out["collective_timer"] == "gloo ops"
    nccl = collectives.summarise({"traceEvents": [
        _event("ncclDevKernel_AllGather_RING_LL(ncclDevKernelArgsStorage<4096ul>)", cat="kernel", dur=500.0),
        _event("ncclDevKernel_ReduceScatter_Sum_f32_RING_LL(x)", cat="kernel", dur=250.0),
    ]}, steps=1)
    assert (nccl["allgather_ms_per_step"], nccl["reduce_scatter_ms_per_step"]) == (0.5, 0.25)
    assert nccl["collective_timer"] == "nccl kernels"
    with pytest.raises(ValueError, match="unknown element type"):
        collectives.summarise({"traceEvents": [
            _event("c10d::_allgather_base_", [[8], [4]], ["c10::Float4_e2m1fn_x2", "x"])]}, steps=1)


def test_fp8_all_gather_is_the_tensorwise_recipes_parameter():
    tensorwise = registry.precision("fp8_tensorwise").configured({"fp8_all_gather": True})
    assert tensorwise.fsdp_float8_all_gather
    assert not registry.precision("fp8_tensorwise").configured({}).fsdp_float8_all_gather
    # the other recipes do not declare it: a scenario naming it for them alone is refused
    with pytest.raises(Exception, match="fp8_all_gather"):
        spec.parse({"name": "x", "defaults": {"device": "cpu"},
                    "sweep": [{"workload": "dist_train_step", "precisions": ["bf16"],
                               "params": {"fp8_all_gather": True}}]})


TORCHRUN_SUMMARY = """
============================================================
suite.measure.executors.rank FAILED
------------------------------------------------------------
Failures:
[1]:
  time      : 2026-12-01_13:55:33
  host      : box
  rank      : 0 (local_rank: 0)
  exitcode  : 1 (pid: 101)
  error_file: <N/A>
------------------------------------------------------------
Root Cause (first observed failure):
[0]:
  time      : 2026-12-01_13:55:32
  host      : box
  rank      : 1 (local_rank: 1)
  exitcode  : -9 (pid: 102)
  error_file: <N/A>
  traceback : Signal 9 (SIGKILL) received by PID 102
============================================================
"""


def test_the_reason_is_the_rank_that_failed_first_not_the_ones_that_followed(tmp_path):
    (tmp_path / "rank0.error.json").write_text(json.dumps(
        {"rank": 0, "time": 2.0, "error": "RuntimeError: Connection reset by peer"}))
    (tmp_path / "rank1.log").write_text("loading\nKilled by the test\n")
    reason, log = torchrun.failure(tmp_path, 2, TORCHRUN_SUMMARY, 1)
    assert reason == "rank 1 crashed: signal 9 (SIGKILL): Killed by the test" and "loading" in log
    # a rank torchrun stopped (SIGTERM) because another raised is not the cause
    stopped = TORCHRUN_SUMMARY.replace("exitcode  : -9", "exitcode  : -15")
    assert torchrun.failure(tmp_path, 2, stopped, 1)[0] == "rank 0: RuntimeError: Connection reset by peer"
    # without torchrun's summary, the earliest error written
    (tmp_path / "rank1.error.json").write_text(json.dumps({"rank": 1, "time": 1.0, "error": "ValueError: bad"}))
    assert torchrun.failure(tmp_path, 2, "", 1)[0] == "rank 1: ValueError: bad"
    assert torchrun.failure(tmp_path / "none", 2, "torchrun: error: bad args\n", 2)[0] == (
        "torchrun failed: exit status 2: torchrun: error: bad args")


def test_a_launch_past_its_timeout_is_stopped_and_fails(tmp_path):
    case = next(c for c in expand(spec.parse({
        "name": "t", "defaults": {"device": "cpu"},
        "sweep": [{"workload": "dist_train_step", "precisions": ["fp32"], "params": {"timeout_s": 0.5}}]})))
    columns, status, reason, _ = torchrun.Launch(case, torch.device("cpu"), tmp_path, 2, 0.5).run()
    assert (columns, status) == (None, "failed")
    assert reason == "timed out after 0.5 s (ranks without a result: 0, 1)"
