"""torchao's block-scaled formats (suite/precisions/mx): MXFP8, MXFP4, NVFP4.

What the formats predict (tests/block_reference.py holds an independent plain-torch
quantize-dequantize of each, from the specs):
- torchao's quantization equals the reference bit for bit, every scale rule and block size;
- a GEMM's, a layer's and an outlier sweep's measured errors are those of the reference operands,
  up to the bf16 rounding of the emulated GEMM's output (2^-8 relative at most);
- on standard normal data the relative error follows the mantissas: e4m3 (3 bits, step 2^-3
  relative) about 4x below e2m1 (1 bit): MXFP8 ~0.03-0.04 < NVFP4 ~0.1-0.13 < MXFP4 ~0.12-0.16;
- one outlier of 1e6 leaves MXFP8's other elements within ~2 dB of its clean SQNR (only its own
  block of 32 shares its scale), where one scale per tensor (e4m3 spans 448 / 2^-9 ~ 2.3e5)
  flushes everything else to zero, and so does NVFP4's tensor scale (block scales 2^15 below the
  tensor amax fall below e4m3's range).
"""

from __future__ import annotations

import math

import pytest
import torch

from block_reference import E2M1, E4M3, mx_qdq, nvfp4_qdq, tensorwise_fp8_qdq
from suite.core.errors import Unsupported
from suite.measure.timing import StopRule
from suite.precisions.mx.recipes import KERNEL, MXFP4, MXFP8, NVFP4, QDQLinearFn, capability_reason
from suite.scenario.plan import Case
from suite.workloads.gemm.workload import GEMM
from suite.workloads.linear.workload import LINEAR
from suite.workloads.outlier.workload import OUTLIER


@pytest.fixture(autouse=True, scope="module")
def _mx_formats():
    # at the first test, not at import: importing torchao costs each xdist worker 1.7 s of CPU when it
    # collects (both collect every file), though one runs this file
    pytest.importorskip("torchao.prototype.mx_formats")


CPU = torch.device("cpu")
BF16_ROUNDOFF = 2.0 ** -8  # bf16 keeps 8 significant bits: its relative rounding error is below this


def _data(rows=8, cols=128):
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(rows, cols, generator=gen)
    x[3, 40] = 1e4  # an outlier, an all-zero block, and a row far below the others
    x[5, :32] = 0
    x[6] *= 1e-3
    return x


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("block", [16, 32, 64])
@pytest.mark.parametrize("mode", ["floor", "rceil", "ceil"])
@pytest.mark.parametrize("recipe,fmt", [(MXFP8, E4M3), (MXFP4, E2M1)])
def test_mx_quantization_is_the_specs_bit_for_bit(recipe, fmt, mode, block, dtype):
    x = _data().to(dtype)
    ours = recipe.configured({"scale_mode": mode, "block_size": block}).qdq(x)
    assert torch.equal(ours, mx_qdq(x, fmt, block, mode))


@pytest.mark.parametrize("tensor_scale", [True, False])
def test_nvfp4_quantization_is_the_specs_bit_for_bit(tensor_scale):
    x = _data().to(torch.bfloat16)
    assert torch.equal(NVFP4.configured({"tensor_scale": tensor_scale}).qdq(x), nvfp4_qdq(x, tensor_scale))


def _gemm(recipe, params, m=64, k=128, n=48):
    case = Case("t", "gemm", recipe.name, "bf16", m, k, n, params, 0, StopRule())
    prepared = GEMM.prepare(case, recipe.configured(params), CPU)
    return prepared, prepared.check_output(prepared.fn())


def _reference_gemm_error(qdq, m=64, k=128, n=48):
    """The relative error of the GEMM of reference-quantized operands (bf16 inputs, as the recipe's)."""
    gen = torch.Generator().manual_seed(0)
    a, b = torch.randn(m, k, generator=gen), torch.randn(k, n, generator=gen)
    a16, w16 = a.bfloat16(), b.t().contiguous().bfloat16()
    out = qdq(a16).double() @ qdq(w16).double().t()
    exact = a.double() @ b.double()
    return float((out - exact).norm() / exact.norm())


@pytest.mark.parametrize("recipe,params,qdq", [
    (MXFP8, {}, lambda x: mx_qdq(x, E4M3)),
    (MXFP8, {"scale_mode": "rceil"}, lambda x: mx_qdq(x, E4M3, mode="rceil")),
    (MXFP4, {}, lambda x: mx_qdq(x, E2M1)),
    (NVFP4, {}, lambda x: nvfp4_qdq(x)),
    (NVFP4, {"tensor_scale": False}, lambda x: nvfp4_qdq(x, False)),
])
@pytest.mark.parametrize("quantize", ["pre", "inline"])
def test_the_gemms_measured_error_is_the_reference_operands(recipe, params, qdq, quantize):
    prepared, metrics = _gemm(recipe, {**params, "quantize": quantize})
    assert prepared.extra["gemm_path"] == "torchao-emulated"
    assert metrics["rel_err"] == pytest.approx(_reference_gemm_error(qdq), abs=BF16_ROUNDOFF)


def test_relative_errors_follow_the_mantissas():
    err = {r.name: _gemm(r, {})[1]["rel_err"] for r in (MXFP8, MXFP4, NVFP4)}
    assert 0.02 < err["mxfp8"] < 0.06 and 0.08 < err["nvfp4"] < err["mxfp4"] < 0.2
    assert min(err["nvfp4"], err["mxfp4"]) > 2.5 * err["mxfp8"]  # 2 mantissa bits fewer: ~4x


def test_a_layer_step_quantizes_all_three_gemms_as_the_reference_does():
    """The output and both gradients of one Linear step equal the reference: each GEMM's operands
    quantized along its own inner dimension (the weight gradient's is the tokens)."""
    m, k, n = 64, 64, 32
    case = Case("t", "linear", "mxfp8", "bf16", m, k, n, {}, 0, StopRule())
    prepared = LINEAR.prepare(case, MXFP8, CPU)
    prepared.fn()
    measured = prepared.check()
    assert prepared.extra["gemm_path"] == "torchao-emulated"
    gen = torch.Generator().manual_seed(0)
    w = torch.randn(n, k, generator=gen) / k**0.5  # as build_layer makes it
    gen = torch.Generator().manual_seed(1)
    x, grad = torch.randn(m, k, generator=gen), torch.randn(m, n, generator=gen)
    xr, wr = x.bfloat16().float().requires_grad_(), w.bfloat16().float().requires_grad_()
    y = QDQLinearFn.apply(xr, wr, lambda t: mx_qdq(t, E4M3))
    y.bfloat16().float().backward(grad.bfloat16().float())
    exact_w = w.clone().requires_grad_()
    exact_x = x.clone().requires_grad_()
    (exact_x @ exact_w.t()).backward(grad)
    for got, ours, exact in ((measured["rel_err"], y, exact_x @ w.t()),
                             (measured["rel_err_grad_input"], xr.grad, exact_x.grad),
                             (measured["rel_err_grad_weight"], wr.grad, exact_w.grad)):
        want = float((ours.detach().double() - exact.detach().double()).norm() / exact.detach().double().norm())
        assert got == pytest.approx(want, abs=2 * BF16_ROUNDOFF)


def test_nvfp4_layers_run_the_suites_qdq_on_the_cpu():
    case = Case("t", "linear", "nvfp4", "bf16", 32, 32, 16, {}, 0, StopRule())
    prepared = LINEAR.prepare(case, NVFP4, CPU)
    prepared.fn()
    assert prepared.extra["gemm_path"] == "qdq-fp32" and 0.05 < prepared.check()["rel_err_grad_weight"] < 0.3


def _outlier(recipe, magnitude, params=None, m=32, k=256, n=32):
    params = {"outlier": magnitude, **(params or {})}
    case = Case("t", "outlier", recipe.name, None, m, k, n, params, 0, StopRule())
    configured = recipe.configured(params)
    return OUTLIER.prepare(case, configured, CPU).check()


def test_outliers_stay_in_mxfp8s_block_where_one_scale_per_tensor_collapses():
    from suite.precisions.fp8.recipes import FP8_TENSORWISE

    mx = [_outlier(MXFP8, v)["sqnr_elements_db"] for v in (1e1, 1e3, 1e5, 1e6)]
    tensorwise = [_outlier(FP8_TENSORWISE, v)["sqnr_elements_db"] for v in (1e1, 1e6)]
    nv = [_outlier(NVFP4, v)["sqnr_elements_db"] for v in (1e1, 1e6)]
    assert max(mx[:3]) - min(mx[:3]) < 0.5
    # at worst the outlier's block-mates (31 of the 32 x 256 others) all flush to zero: that energy
    # share adds to the clean quantization noise, and nothing else may
    lost = 31 / (32 * 256 - 1)
    assert mx[3] >= -10 * math.log10(10 ** (-mx[0] / 10) + lost) - 0.5
    assert tensorwise[0] - tensorwise[1] > 20 and nv[0] - nv[1] > 10


@pytest.mark.parametrize("recipe,params,qdq,tolerance", [
    (MXFP8, {}, lambda x: mx_qdq(x, E4M3), 1e-6),
    (MXFP4, {"block_size": 64}, lambda x: mx_qdq(x, E2M1, 64), 1e-6),
    (NVFP4, {}, lambda x: nvfp4_qdq(x), 1e-6),
    ("fp8_tensorwise", {}, tensorwise_fp8_qdq, 1e-3),  # the suite's scale is computed in float64
])
def test_the_outlier_sweeps_element_sqnr_is_the_reference_ones(recipe, params, qdq, tolerance):
    if isinstance(recipe, str):
        from suite.scenario import registry

        recipe = registry.precision(recipe)
    measured = _outlier(recipe, 1e6, params)
    gen = torch.Generator().manual_seed(0)
    a = torch.randn(32, 256, generator=gen)
    a[0, 128] = 1e6
    others = torch.ones_like(a, dtype=torch.bool)
    others[0, 128] = False
    q = qdq(a.bfloat16())
    want = 20 * math.log10(float(a[others].double().norm() / (q[others].double() - a[others].double()).norm()))
    assert measured["sqnr_elements_db"] == pytest.approx(want, abs=tolerance)
    assert measured["outlier_rel_err"] == pytest.approx(abs(float(q[0, 128]) - 1e6) / 1e6, abs=tolerance)


def test_a_hopper_gpu_skips_with_the_capability(monkeypatch):
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (9, 0))
    monkeypatch.setattr(torch.version, "hip", None)
    cuda = torch.device("cuda")
    for recipe in (MXFP8, MXFP4, NVFP4):
        assert recipe.unsupported(cuda) == "needs compute capability 10.0; this GPU is 9.0"
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (10, 0))
    assert capability_reason(cuda) is None and MXFP8.gemm_path(cuda, "gemm") == KERNEL
    assert "32-value blocks" in MXFP8.configured({"block_size": 64}).unsupported(cuda)


@pytest.mark.parametrize("tensor_scale", [True, False])
def test_nvfp4_runs_on_blackwell_and_a_hopper_gpu_skips_naming_the_capability(monkeypatch, tensor_scale):
    """NVFP4's blocks are 16 values by design: the 32-value rule of MX kernels is not its gate (it
    once was, and every NVFP4 case skipped on a B200)."""
    monkeypatch.setattr(torch.version, "hip", None)
    cuda, recipe = torch.device("cuda"), NVFP4.configured({"tensor_scale": tensor_scale})
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (10, 0))
    assert recipe.unsupported(cuda) is None and recipe.scale_block() == 16
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (9, 0))
    assert recipe.unsupported(cuda) == "needs compute capability 10.0; this GPU is 9.0"


def test_a_hopper_run_records_the_skip(monkeypatch):
    """Through the runner, as an H100 run would record it (the capability faked)."""
    from suite.measure import inprocess

    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (9, 0))
    monkeypatch.setattr(torch.version, "hip", None)
    case = Case("t", "gemm", "mxfp8", "bf16", 64, 64, 64, {}, 0, StopRule())
    record = inprocess.run_case(case, torch.device("cuda"), None, {})
    assert record["status"] == "skipped" and record["reason"] == "needs compute capability 10.0; this GPU is 9.0"


def test_inner_dimensions_must_hold_whole_blocks():
    with pytest.raises(Unsupported, match="K=100 is not a multiple of it"):
        _gemm(MXFP8, {}, k=100)
    assert "token count (M = 48)" in MXFP8.configured({"block_size": 32}).tokens_unsupported(48, CPU)


def test_a_run_draws_sqnr_against_the_outlier_and_the_block_size(tmp_path, write_scenario):
    import pandas as pd

    from conftest import quick_toml
    from suite import pipeline
    from suite.report import render
    from suite.scenario import spec

    text = quick_toml("mx", """
        [[sweep]]
        workload = "outlier"
        precisions = ["bf16", "fp8_tensorwise", "mxfp8"]
        mkn = [[16, 128, 16]]
        params = { outlier = [1e1, 1e3, 1e6] }
        [[sweep]]
        workload = "outlier"
        precisions = ["bf16", "mxfp8"]
        mkn = [[16, 128, 16]]
        params = { outlier = 1e6, block_size = [16, 32, 64] }
        """, baseline="bf16")
    result = pipeline.run(pipeline.RunRequest(spec.load(write_scenario(text)), tmp_path / "results", None,
                                              progress=False))
    assert (result.records["status"] == "ok").all()
    files = {f.name for f in render(pd.read_parquet(result.path), tmp_path / "report")}
    assert {"outlier_elements_outlier.svg", "outlier_block_size_outlier.svg", "outlier_sqnr_outlier.svg"} <= files
    page = (tmp_path / "report" / "report.md").read_text()
    line = next(line for line in page.splitlines() if "SQNR of A's other elements" in line)
    assert "fp8_tensorwise" in line and "mxfp8" in line


# --- the committed reference run (results/reference/cpu_mx, docs/reference-runs.md) ---------------

REFERENCE = __import__("pathlib").Path(__file__).resolve().parent.parent / "results" / "reference" / "cpu_mx"


@pytest.fixture(scope="module")
def reference_run():
    from suite.results import store

    files = sorted(REFERENCE.glob("*.parquet"))
    assert files, "the cpu_mx reference run is committed"
    return store.read_file(files[-1])


def _rows(df, workload, **params):
    import json

    keep = df["params"].map(lambda p: all(json.loads(p).get(k) == v for k, v in params.items()))
    return df[(df["workload"] == workload) & (df["status"] == "ok") & keep]


def test_the_reference_run_shows_mxfp8_flat_where_tensorwise_collapses(reference_run):
    df = reference_run
    assert set(df["status"]) <= {"ok", "skipped"} and (df[df["status"] == "skipped"]["reason"].str.len() > 0).all()
    sweep = df[(df["workload"] == "outlier") & df["params"].str.contains('"outlier"') & ~df["params"].str.contains("block")]
    by = {p: g.set_index("outlier")["sqnr_elements_db"] for p, g in sweep[~sweep["params"].str.contains("tensor_scale")]
          .groupby("precision")}
    assert by["mxfp8"].max() - by["mxfp8"].min() < 2.0 and by["mxfp4"].max() - by["mxfp4"].min() < 0.5
    assert by["fp8_tensorwise"][1e1] - by["fp8_tensorwise"][1e6] > 25 and by["nvfp4"][1e1] - by["nvfp4"][1e6] > 15


def test_the_reference_runs_errors_follow_the_mantissas(reference_run):
    for workload in ("gemm", "linear"):
        err = _rows(reference_run, workload).groupby("precision")["rel_err"].min()
        assert err["bf16"] < err["mxfp8"] < err["nvfp4"] < err["mxfp4"]
        assert err["nvfp4"] > 2.5 * err["mxfp8"]


@pytest.mark.parametrize("recipe,params,qdq", [
    ("mxfp8", {"quantize": "inline"}, lambda x: mx_qdq(x, E4M3)),
    ("mxfp8", {"quantize": "inline", "scale_mode": "rceil"}, lambda x: mx_qdq(x, E4M3, mode="rceil")),
    ("mxfp4", {"quantize": "inline"}, lambda x: mx_qdq(x, E2M1)),
    ("nvfp4", {"quantize": "inline"}, lambda x: nvfp4_qdq(x)),
])
def test_the_reference_runs_gemm_errors_are_the_independent_computations(reference_run, recipe, params, qdq):
    from suite.workloads.gemm.workload import random_operands

    df = _rows(reference_run, "gemm")
    row = df[(df["precision"] == recipe) & (df["params"].map(lambda p: __import__("json").loads(p)) == params)].iloc[0]
    a, b = random_operands(int(row["m"]), int(row["k"]), int(row["n"]), int(row["seed"]), CPU)
    out = qdq(a.bfloat16()).double() @ qdq(b.t().contiguous().bfloat16()).double().t()
    exact = a.double() @ b.double()
    rows = slice(0, min(int(row["m"]), 2048))
    want = float((out[rows] - exact[rows]).norm() / exact[rows].norm())
    assert row["rel_err"] == pytest.approx(want, abs=BF16_ROUNDOFF)


# --- inline casts on a GPU: torchao's cast kernels, not its PyTorch quantizer (issue #36) -------------


def test_an_inline_gemm_on_a_gpu_chooses_torchaos_cast_kernels_and_records_them():
    cuda, cpu = torch.device("cuda"), torch.device("cpu")
    inline = {"quantize": "inline"}
    assert MXFP8.configured(inline).fast_cast(cuda) and NVFP4.configured(inline).fast_cast(cuda)
    assert MXFP8.configured({**inline, "scale_mode": "rceil"}).fast_cast(cuda)
    assert not MXFP4.fast_cast(cuda)  # torchao 0.18 has no MXFP4 cast kernel
    assert not MXFP8.configured({**inline, "scale_mode": "even"}).fast_cast(cuda)  # triton: floor, rceil only
    assert not MXFP8.fast_cast(cuda, "eager") and not MXFP8.fast_cast(cpu)  # asked for, or a CPU
    assert MXFP8.configured(inline).gemm_path(cuda, "gemm") == KERNEL + "+triton-cast"
    assert NVFP4.configured(inline).gemm_path(cuda, "gemm") == KERNEL + "+triton-cast"
    assert MXFP8.configured({**inline, "cast": "eager"}).gemm_path(cuda, "gemm") == KERNEL + "+eager-cast"
    assert MXFP4.configured(inline).gemm_path(cuda, "gemm") == KERNEL + "+eager-cast"
    assert MXFP8.configured({}).gemm_path(cuda, "gemm") == KERNEL  # pre: the casts are not timed
    assert MXFP8.configured(inline).gemm_path(cpu, "gemm") == "torchao-emulated"


def test_a_fast_cast_passes_torchaos_kernel_choice(monkeypatch):
    # MXTensor.to_mx(mxfp8_dim0_cast_kernel_choice=TRITON) needs unswizzled scales (the GEMM's dispatch
    # swizzles them, as torchao's mxfp8_linear forward); NVFP4Tensor.to_nvfp4(use_triton_kernel=True)
    from suite.precisions.mx import recipes

    api, calls = recipes.ao(), []
    fake = type("Fake", (), {"to_mx": staticmethod(lambda *a, **kw: calls.append(("mx", kw))),
                             "to_nvfp4": staticmethod(lambda *a, **kw: calls.append(("nv", kw)))})
    monkeypatch.setattr(api, "MXTensor", fake)
    monkeypatch.setattr(api, "NVFP4Tensor", fake)
    x = torch.randn(32, 64, dtype=torch.bfloat16)
    for recipe in (MXFP8, NVFP4):
        recipe.quantize(x, fast=True)
        recipe.quantize(x)
    (_, mx_fast), (_, mx_eager), (_, nv_fast), (_, nv_eager) = calls
    dim0 = api.config.MXFP8Dim0CastKernelChoice
    assert mx_fast["mxfp8_dim0_cast_kernel_choice"] == dim0.TRITON and mx_fast["is_swizzled_scales"] is False
    assert mx_eager["mxfp8_dim0_cast_kernel_choice"] == dim0.TORCH
    assert nv_fast["use_triton_kernel"] is True and nv_eager["use_triton_kernel"] is False


def test_an_inline_gemm_quantizes_with_the_cast_it_chose(monkeypatch):
    from suite.precisions.mx import recipes

    seen = []
    real = recipes.BlockScaled.quantize
    monkeypatch.setattr(recipes.BlockScaled, "quantize",
                        lambda self, x, weight=False, fast=False: seen.append(fast) or real(self, x, weight))
    monkeypatch.setattr(recipes.BlockScaled, "fast_cast", lambda self, device, cast="fast": cast == "fast")
    _gemm(MXFP8, {"quantize": "inline"})
    _gemm(MXFP8, {"quantize": "inline", "cast": "eager"})
    assert seen == [True, True, False, False]
    monkeypatch.setattr(recipes.importlib.util, "find_spec", lambda name: None)  # no mslk
    with pytest.raises(Unsupported, match="needs mslk"):
        _gemm(NVFP4, {"quantize": "inline"})
