"""The `linear` and `ln_linear` workloads: one training step, accuracy of output and gradients.

Bands (dB, random normal data; derivation in tests/test_fp8.py): one e4m3 quantization costs 31.5 dB
of SQNR, a product of two quantized operands 28.5 dB: FP8 outputs and e4m3 gradients in 25-32 dB.
e5m2 has 2 mantissa bits, 4x the e4m3 noise power per quantization, so torchao tensorwise
gradients (e5m2 grad_output times an e4m3 operand: 2.8e-3 + 0.7e-3 of the signal) sit near
24.5 dB: band 22-27. bf16 (7 mantissa bits) is above 45 dB, and so is the grad-weight GEMM that
rowwise_with_gw_hp keeps in bf16.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from suite.core.errors import UserError
from suite.scenario.plan import Case
from suite.precisions import flags
from suite.precisions.floating.recipes import BF16, FP32
from suite.precisions.fp8.recipes import FP8_BLOCK, FP8_ROWWISE, FP8_ROWWISE_GW_HP, FP8_TENSORWISE
from suite.measure.timing import StopRule
from suite.core.errors import Unsupported
from suite.measure import inprocess
from suite.measure.timing import clock_for
from suite.workloads.linear.workload import LINEAR, LN_LINEAR

CPU = torch.device("cpu")
E4M3_BAND = (25.0, 32.0)
E5M2_GRAD_BAND = (22.0, 27.0)
BF16_FLOOR = 45.0
M, K, N = 64, 128, 96


def run(workload, precision, **params):
    case = Case("t", workload.name, precision.name, None, M, K, N, params, 0, StopRule())
    with precision.active():  # prepare, first call, check: as the runner calls them
        prepared = workload.prepare(case, precision, CPU)
        first = inprocess.timed_first_call(prepared, lambda: None)
        return prepared, {**first, **prepared.check()}


def within(value, band):
    return band[0] <= value <= band[1]


def test_bf16_step_is_accurate_and_counts_three_gemms():
    prepared, metrics = run(LINEAR, BF16)
    assert prepared.flops == 6.0 * M * N * K
    assert "compile_s" not in metrics  # not compiled: no compile time
    for key in ("sqnr_db", "sqnr_grad_input_db", "sqnr_grad_weight_db"):
        assert metrics[key] > BF16_FLOOR


def test_fp32_step_matches_its_fp32_reference():
    _, metrics = run(LINEAR, FP32)
    assert metrics["rel_err"] < 1e-6 and metrics["rel_err_grad_weight"] < 1e-6


def test_torchao_tensorwise_has_e5m2_gradients():
    pytest.importorskip("torchao.float8")
    _, metrics = run(LINEAR, FP8_TENSORWISE)
    assert within(metrics["sqnr_db"], E4M3_BAND)
    assert within(metrics["sqnr_grad_input_db"], E5M2_GRAD_BAND)
    assert within(metrics["sqnr_grad_weight_db"], E5M2_GRAD_BAND)


def test_torchao_rowwise_recipes_differ_only_in_grad_weight():
    pytest.importorskip("torchao.float8")
    _, rowwise = run(LINEAR, FP8_ROWWISE)
    _, gw_hp = run(LINEAR, FP8_ROWWISE_GW_HP)
    for metrics in (rowwise, gw_hp):
        assert within(metrics["sqnr_db"], E4M3_BAND)
        assert within(metrics["sqnr_grad_input_db"], E4M3_BAND)
    assert within(rowwise["sqnr_grad_weight_db"], E4M3_BAND)
    assert gw_hp["sqnr_grad_weight_db"] > BF16_FLOOR


def test_ln_linear_step_runs_under_each_kind_of_recipe():
    pytest.importorskip("torchao.float8")
    _, bf16 = run(LN_LINEAR, BF16)
    _, fp8 = run(LN_LINEAR, FP8_ROWWISE)
    assert bf16["sqnr_db"] > BF16_FLOOR
    # the sigmoid compresses the output error, so only its ordering is format-bound here
    assert 25.0 <= fp8["sqnr_db"] < bf16["sqnr_db"]
    assert within(fp8["sqnr_grad_weight_db"], E4M3_BAND)


def test_compiled_step_records_compile_time_and_same_numerics():
    pytest.importorskip("torchao.float8")
    before = flags.snapshot()
    eager, eager_metrics = run(LINEAR, FP8_ROWWISE)
    # aot_eager: the dynamo + AOT autograd path of torch.compile without inductor's C++ build time
    compiled, compiled_metrics = run(LINEAR, FP8_ROWWISE, compile=True, compile_backend="aot_eager")
    assert compiled_metrics["compile_s"] > 0 and "compile_s" not in eager_metrics
    assert compiled_metrics["sqnr_db"] == pytest.approx(eager_metrics["sqnr_db"], abs=0.5)
    assert compiled_metrics["sqnr_grad_weight_db"] == pytest.approx(eager_metrics["sqnr_grad_weight_db"], abs=0.5)
    y = compiled.fn()
    assert y.shape == (M, N)
    assert flags.snapshot() == before
    del compiled
    torch._dynamo.reset()


def test_bad_params_and_layer_level_limits():
    with pytest.raises(UserError, match="params.compile"):
        run(LINEAR, BF16, compile="yes")
    with pytest.raises(Unsupported, match="GEMM-level"):
        run(LINEAR, FP8_BLOCK)


# --- where a step's time goes: the profiler's split (suite/measure/attribution.py) ---------------


def test_the_profiler_splits_a_step_into_gemms_and_the_rest():
    from suite.measure import attribution

    pytest.importorskip("torchao.float8")
    bf16, _ = run(LINEAR, BF16)
    fp8, _ = run(LINEAR, FP8_TENSORWISE)
    assert bf16.split_kernels and fp8.split_kernels
    timed = SimpleNamespace(median_ms=1.0, case_cap_s=30.0)  # what the timing loop measured
    with BF16.active():
        plain = attribution.untimed(bf16, lambda: None, CPU, timed)
    emulated = attribution.untimed(fp8, lambda: None, CPU, timed)
    # both sides found (which one is larger on a small emulated step depends on the machine's load)
    for split in (plain, emulated):
        assert split["measured_gemm_ms"] > 0 and split["measured_other_ms"] > 0
        assert split["kernels"] and split["kernel"]  # the same look names the step's GEMM implementations


def test_a_layer_record_carries_the_split():
    pytest.importorskip("torchao.float8")
    case = Case("t", "linear", "fp8_rowwise", "bf16", M, K, N, {}, 0, StopRule(budget_s=0.05, warmup_s=0.0))
    record = inprocess.run_case(case, CPU, clock_for(CPU), {"device": "cpu"})
    assert record["status"] == "ok" and record["measured_gemm_ms"] > 0 and record["measured_other_ms"] > 0


def test_gpu_kernels_are_split_by_name():
    """The GPU side of the split, on events as torch.profiler's key_averages gives them (cuBLAS,
    cuBLASLt and CUTLASS GEMM kernel names; triton and ATen elementwise cast kernels)."""

    from suite.measure import attribution

    def kernel(name, us, device="DeviceType.CUDA"):
        return SimpleNamespace(key=name, device_type=device, self_device_time_total=us, self_cpu_time_total=0.0)

    events = [kernel("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x256x64_warpgroupsize2x1x1", 300.0),
              kernel("nvjet_tst_128x256_64x4_1x2_h_bz_coopA_TNT", 150.0),
              kernel("void cutlass::Kernel2<cutlass_80_tensorop_bf16_s16816gemm_relu_bf16_256x128_32x3_tn_align8>", 30.0),
              kernel("triton_red_fused_abs_max_0", 60.0), kernel("triton_poi_fused__to_copy_clamp_mul_1", 90.0),
              kernel("void at::native::vectorized_elementwise_kernel<4, at::native::AbsFunctor<c10::BFloat16>>", 30.0),
              kernel("aten::mm", 500.0, device="DeviceType.CPU")]  # the host op: not counted on a GPU
    assert attribution.split(events, on_gpu=True, steps=3) == {"measured_gemm_ms": 0.16, "measured_other_ms": 0.06}
    assert attribution.split(events[3:5], on_gpu=True, steps=3) == {}  # no GEMM found: no split


def test_a_layer_steps_mfu_counts_each_gemm_at_its_formats_peak_and_bf16s(monkeypatch):
    # fp8_rowwise_gw_hp runs its weight-gradient GEMM in bf16: its own peak is 2 GEMMs at FP8's
    # and 1 at bf16's (issue #36); every recipe is also set against the bf16 peak
    from suite.workloads.linear import workload as lw

    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "NVIDIA H100 80GB HBM3")
    cuda, flops = torch.device("cuda"), 6.0 * M * N * K
    fp8, bf16 = 1979.0, 989.5  # suite/core/peaks.py, dense TFLOP/s
    gw_hp = lw.step_mfu(flops, "fp8_rowwise_gw_hp", cuda)(1e-3)
    achieved = flops / 1e-3 / 1e12
    assert gw_hp["mfu"] == pytest.approx(achieved * (2 / fp8 + 1 / bf16) / 3)
    assert gw_hp["mfu_bf16"] == pytest.approx(achieved / bf16)
    assert lw.step_mfu(flops, "fp8_rowwise", cuda)(1e-3)["mfu"] == pytest.approx(achieved / fp8)
    assert lw.step_mfu(flops, "bf16", CPU)(1e-3) == {"mfu": None, "mfu_bf16": None}
    prepared, _ = run(LINEAR, BF16)
    assert prepared.derive(1e-3) == {"mfu": None, "mfu_bf16": None}  # on the CPU: no vendor peak
