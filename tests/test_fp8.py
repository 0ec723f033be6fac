"""FP8 numerics (suite.precisions.fp8_numerics) and the torchao / torch._scaled_mm recipes (suite.precisions.fp8).

Tolerances come from the formats. e4m3 keeps 3 mantissa bits: round-to-nearest moves a normal value
by at most half an ulp, 2^-4 of the value (relative), and a subnormal one by at most half the
smallest step, 2^-10 (absolute, in scaled units). The noise power of one quantization of standard
normal data is (2^-3)^2 / 12 * E[1/m^2] with m the significand in [1, 2) (log-uniform:
E[1/m^2] = 3 / (8 ln 2) = 0.541), i.e. 7.0e-4 of the signal: 31.5 dB. A GEMM of two independently
quantized operands adds both: 1.4e-3, 28.5 dB, so FP8 GEMM SQNR on random normal inputs lies in
25-32 dB. bf16 (7 mantissa bits) is 24 dB better per quantization: above 45 dB.
"""

from __future__ import annotations

import math
import sys

import pytest
import torch

from suite.precisions.fp8 import numerics as q
from suite import pipeline
from suite.scenario import spec
from suite.core.accuracy import error_metrics
from suite.core.errors import UserError
from suite.precisions.fp8 import recipes as fp8
from suite.precisions.fp8.recipes import FP8_BLOCK, FP8_ROWWISE, FP8_ROWWISE_GW_HP, FP8_TENSORWISE
from suite.precisions.floating.recipes import BF16
from suite.core.errors import Unsupported
from suite.workloads.gemm.workload import random_operands

CPU = torch.device("cpu")
FP8_BAND = (25.0, 32.0)  # dB, FP8 GEMM on random normal operands (derivation in the module doc)
BF16_FLOOR = 45.0  # dB


def sqnr_of(precision, m, k, n, params=None, seed=0):
    a, b = random_operands(m, k, n, seed, CPU)
    out = precision.gemm(a, b, params or {})()
    return error_metrics(out, a.double() @ b.double())["sqnr_db"], out


# --- quantization ------------------------------------------------------------------------------

@pytest.mark.parametrize("granularity", q.GRANULARITIES)
@pytest.mark.parametrize("pow2", [False, True])
def test_quantization_error_is_within_half_an_e4m3_ulp(granularity, pow2):
    x = torch.randn(96, 300, generator=torch.Generator().manual_seed(1)) * 3
    qx = q.quantize(x, granularity, pow2=pow2)
    assert qx.data.dtype == torch.float8_e4m3fn
    err = (qx.dequantize() - x).abs()
    # half an ulp: 2^-4 relative for normals; 2^-10 absolute (scaled units) for subnormals
    if granularity == "block":
        step = qx.inv_scale.repeat_interleave(1, 0).repeat_interleave(128, 1)[:, : x.shape[1]]
    else:
        step = qx.inv_scale.expand_as(x)
    bound = torch.maximum(x.abs() * 2**-4, step * 2**-10) * (1 + 1e-6)
    assert bool((err <= bound).all())


def test_scale_maps_amax_onto_the_largest_e4m3_value():
    x = torch.randn(8, 64, generator=torch.Generator().manual_seed(2))
    fmax = torch.finfo(torch.float8_e4m3fn).max  # 448
    tensorwise = q.quantize(x, "tensorwise")
    assert tensorwise.inv_scale.dim() == 0
    assert float(tensorwise.data.float().abs().max()) == fmax
    rowwise = q.quantize(x, "rowwise")
    assert rowwise.inv_scale.shape == (8, 1)
    assert torch.equal(rowwise.data.float().abs().amax(dim=1), torch.full((8,), fmax))


def test_pow2_scales_are_powers_of_two_rounded_down():
    x = torch.randn(16, 64, generator=torch.Generator().manual_seed(3))
    exact = 1 / q.quantize(x, "rowwise").inv_scale
    pow2 = 1 / q.quantize(x, "rowwise", pow2=True).inv_scale
    assert torch.equal(torch.log2(pow2), torch.log2(pow2).round())
    assert bool(((pow2 <= exact) & (pow2 > exact / 2)).all())


def test_zeros_and_overflow_stay_finite():
    zeros = q.quantize(torch.zeros(4, 32), "rowwise")
    assert torch.equal(zeros.dequantize(), torch.zeros(4, 32))
    # a value past the format's range saturates at +-448 instead of becoming NaN
    cast = q.saturated_cast(torch.tensor([1e6, -1e6]), torch.tensor(1.0), torch.float8_e4m3fn)
    assert cast.float().tolist() == [448.0, -448.0]


def test_block_scales_are_local():
    x = torch.randn(4, 300, generator=torch.Generator().manual_seed(4))
    before = q.quantize(x, "block", block=(1, 128))
    assert before.inv_scale.shape == (4, 3)  # ceil(300 / 128) blocks per row, the last partial
    x[2, 130] = 1e4
    after = q.quantize(x, "block", block=(1, 128))
    changed = before.inv_scale != after.inv_scale
    assert changed[2, 1] and int(changed.sum()) == 1
    weight = q.quantize(torch.randn(256, 256), "block", block=q.WEIGHT_BLOCK)
    assert weight.inv_scale.shape == (2, 2)


def test_alignment_rule():
    assert q.alignment_reason(4096, 4096) is None
    reason = q.alignment_reason(4104, 4095)
    assert "K=4104" in reason and "N=4095" in reason


def test_missing_fp8_dtypes_give_a_reason(monkeypatch):
    monkeypatch.setattr(q, "E4M3", None)
    assert "float8" in q.missing_fp8_support()
    assert "float8" in FP8_TENSORWISE.unsupported(CPU)


# --- GEMM level --------------------------------------------------------------------------------

@pytest.mark.parametrize("precision", [FP8_TENSORWISE, FP8_ROWWISE, FP8_ROWWISE_GW_HP, FP8_BLOCK])
@pytest.mark.parametrize("quantize", ["pre", "inline"])
def test_fp8_gemm_sqnr_is_in_the_e4m3_band(precision, quantize):
    sqnr, out = sqnr_of(precision, 128, 256, 96, {"quantize": quantize})
    assert out.dtype == torch.bfloat16 and out.shape == (128, 96)
    assert FP8_BAND[0] <= sqnr <= FP8_BAND[1]


def test_bf16_gemm_is_far_more_accurate_than_fp8():
    assert sqnr_of(BF16, 128, 256, 96)[0] > BF16_FLOOR


def test_pre_and_inline_quantization_compute_the_same_numbers():
    a, b = random_operands(64, 128, 32, 0, CPU)
    for precision in (FP8_TENSORWISE, FP8_ROWWISE):
        pre = precision.gemm(a, b, {"quantize": "pre"})()
        inline = precision.gemm(a, b, {"quantize": "inline", "use_fast_accum": True})()
        assert torch.equal(pre, inline)


def test_cpu_tensorwise_path_matches_the_tensorwise_kernel():
    # suite broadcasts the single scale on the CPU (the tensorwise CPU kernel is a slow loop); the
    # result must be the tensorwise kernel's, up to one bf16 rounding (2^-8 relative)
    a, b = random_operands(32, 64, 48, 0, CPU)
    qa, qw = FP8_TENSORWISE._quantize(a.bfloat16(), b.t().contiguous().bfloat16())
    ours = FP8_TENSORWISE._matmul(qa, qw, use_fast_accum=False).float()
    # the product of the dequantized operands: exact in float32 at K = 64 but for its last bits
    exact = (qa.data.float() * qa.inv_scale) @ (qw.data.float() * qw.inv_scale).t()
    assert torch.allclose(ours, exact.bfloat16().float(), rtol=2**-8, atol=0)
    kernel = _cpu_scaled_mm(qa.data, qw.data.t(), qa.inv_scale, qw.inv_scale, out_dtype=torch.bfloat16)
    if kernel is not None:
        assert torch.allclose(ours, kernel.float(), rtol=2**-8, atol=0)


def _cpu_scaled_mm(*args, **kwargs):
    """`torch._scaled_mm`'s result, or None where this process cannot run it with one scale per
    tensor: under AVX2 dispatch once a bf16 matmul has run (the suite avoids that kernel there:
    test_fp8_gemms_run_on_a_cpu_without_native_bf16_after_a_bf16_gemm)."""
    try:
        return torch._scaled_mm(*args, **kwargs)
    except RuntimeError as err:
        if "primitive descriptor" not in str(err):
            raise
        return None


def test_unaligned_dims_are_skipped_unless_padded():
    a, b = random_operands(64, 136 + 4, 48, 0, CPU)  # K = 140: not a multiple of 16
    with pytest.raises(Unsupported, match=r"K=140.*pad = true"):
        FP8_TENSORWISE.gemm(a, b, {})
    ref = a.double() @ b.double()
    for quantize in ("pre", "inline"):
        out = FP8_TENSORWISE.gemm(a, b, {"pad": True, "quantize": quantize})()
        assert out.shape == (64, 48)
        assert FP8_BAND[0] <= error_metrics(out, ref)["sqnr_db"] <= FP8_BAND[1]
    assert FP8_BLOCK.gemm(a, b, {})().shape == (64, 48)  # emulation has no alignment rule


@pytest.mark.parametrize("params, match", [
    ({"quantize": "later"}, "params.quantize"),
    ({"use_fast_accum": "yes"}, "params.use_fast_accum"),
    ({"pad": 1}, "params.pad"),
])
def test_bad_gemm_params_are_one_line_errors(params, match):
    a, b = random_operands(16, 32, 16, 0, CPU)
    with pytest.raises(UserError, match=match):
        FP8_ROWWISE.gemm(a, b, params)


def test_capability_and_emulation(monkeypatch):
    cuda = torch.device("cuda", 0)
    monkeypatch.setattr(torch.version, "hip", None)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (8, 0))
    assert "8.9" in FP8_ROWWISE.unsupported(cuda) and "8.0" in FP8_ROWWISE.unsupported(cuda)
    for capability in ((8, 9), (9, 0), (10, 0)):
        monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None, c=capability: c)
        assert FP8_ROWWISE.unsupported(cuda) is None
    assert FP8_TENSORWISE.unsupported(CPU) is None
    assert FP8_TENSORWISE.emulated(CPU) and not FP8_TENSORWISE.emulated(cuda)
    assert FP8_BLOCK.emulated(CPU) and FP8_BLOCK.emulated(cuda)  # float32 GEMM everywhere


# --- layer level (torchao) -------------------------------------------------------------------------

def test_torchao_recipes_convert_linears_with_emulation_on_cpu():
    torchao_float8 = pytest.importorskip("torchao.float8")
    for precision, recipe in ((FP8_TENSORWISE, "tensorwise"), (FP8_ROWWISE, "rowwise"),
                              (FP8_ROWWISE_GW_HP, "rowwise_with_gw_hp")):
        model = precision.configured({}).prepare_module(torch.nn.Sequential(torch.nn.Linear(64, 32)), CPU)
        layer = model[0]
        assert type(layer).__name__ == "Float8Linear"
        assert layer.weight.dtype == torch.float32  # master weights; bf16 comes from autocast
        assert layer.config.emulate and not layer.config.pad_inner_dim
        expected = torchao_float8.Float8LinearConfig.from_recipe_name(recipe)
        assert layer.config.cast_config_input == expected.cast_config_input
        assert layer.config.cast_config_input_for_grad_weight == expected.cast_config_input_for_grad_weight


def test_high_precision_modules_are_left_alone():
    pytest.importorskip("torchao.float8")

    class TinyLM(torch.nn.Module):
        high_precision_modules = ("lm_head",)

        def __init__(self):
            super().__init__()
            self.block = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.GELU(), torch.nn.Linear(64, 32))
            self.lm_head = torch.nn.Linear(32, 50257)  # vocab not a multiple of 16: must stay as it is

        def forward(self, x):
            return self.lm_head(self.block(x))

    assert fp8.fp8_linears(TinyLM()) == {"block.0", "block.2"}
    model = FP8_ROWWISE.configured({}).prepare_module(TinyLM(), CPU)
    assert [type(m).__name__ for m in (model.block[0], model.block[2], model.lm_head)] == [
        "Float8Linear", "Float8Linear", "Linear"]
    with FP8_ROWWISE.autocast(CPU):
        assert model(torch.randn(4, 32)).shape == (4, 50257)


def test_torchao_unaligned_layer_needs_pad():
    pytest.importorskip("torchao.float8")
    with pytest.raises(Unsupported, match="K=40"):
        FP8_TENSORWISE.configured({}).prepare_module(torch.nn.Linear(40, 32), CPU)
    padded = FP8_TENSORWISE.configured({"pad": True}).prepare_module(torch.nn.Linear(40, 32), CPU)
    assert padded.config.pad_inner_dim
    with FP8_TENSORWISE.autocast(CPU):
        y = padded(torch.randn(16, 40, dtype=torch.bfloat16))
    assert y.shape == (16, 32) and bool(torch.isfinite(y).all())


def test_missing_torchao_is_a_skip_with_the_import_error(monkeypatch):
    monkeypatch.setitem(sys.modules, "torchao.float8", None)  # makes `import torchao.float8` fail
    with pytest.raises(Unsupported, match="torchao is not importable: .*Error"):
        FP8_TENSORWISE.prepare_module(torch.nn.Linear(32, 32), CPU)
    with pytest.raises(Unsupported, match="GEMM-level"):
        FP8_BLOCK.prepare_module(torch.nn.Linear(32, 32), CPU)
    with pytest.raises(Unsupported, match="no nn.Linear"):
        fp8.fp8_linears(torch.nn.LayerNorm(32))


# --- the cpu_fp8 scenario end to end ------------------------------------------------------------

@pytest.mark.slow
def test_cpu_fp8_scenario_end_to_end(tmp_path, quick_png):  # what it asserts is numbers and text
    scenario = spec.load("scenarios/cpu_fp8.toml")
    result = pipeline.run(pipeline.RunRequest(scenario, tmp_path / "results", tmp_path / "reports", progress=False))
    records = result.records.to_dict("records")
    assert result.failed == 0 and result.path.exists()
    by = {}
    for r in records:
        by.setdefault((r["workload"], r["precision"]), []).append(r)

    # random normal GEMMs and Linear outputs: the e4m3 band (derivation in the module doc)
    for workload in ("gemm", "linear"):
        for precision in ("fp8_tensorwise", "fp8_rowwise"):
            ok = [r for r in by[(workload, precision)] if r["status"] == "ok"]
            assert ok and all(FP8_BAND[0] <= r["sqnr_db"] <= FP8_BAND[1] for r in ok)
            assert all(r["emulated"] for r in ok)
    assert all(r["sqnr_db"] > BF16_FLOOR for r in by[("gemm", "bf16")])

    # outlier rows: tensorwise collapses at 1e6 (all untouched values flush to zero), rowwise does not
    rows = by[("outlier", "fp8_tensorwise")] + by[("outlier", "fp8_rowwise")]
    outlier = {(r["precision"], r["outlier"]): r for r in rows}
    assert outlier[("fp8_tensorwise", 1e6)]["sqnr_db"] < 3.0
    assert all(abs(outlier[("fp8_rowwise", m)]["sqnr_drop_db"]) < 0.1 for m in (1e2, 1e4, 1e6))

    unaligned = [r for r in by[("gemm", "fp8_tensorwise")] if r["k"] == 520]
    assert {r["status"] for r in unaligned} == {"ok", "skipped"}
    assert all(r["reason"] and r["reason"].startswith("Transformer Engine") for r in by[("gemm", "te_current")])

    # the report never presents emulated FP8 timings as speed
    report = (tmp_path / "reports" / "cpu_fp8" / "report.md").read_text()
    fp8_rows = [line for line in report.splitlines() if "| fp8_" in line and "emulated: timing" in line]
    assert fp8_rows
    for line in fp8_rows:
        cells = [c.strip() for c in line.strip("|").split("|")]
        assert not any(c.endswith("x") and c[:-1].replace(".", "").isdigit() for c in cells)  # no speedup
    assert (tmp_path / "reports" / "cpu_fp8" / "outlier_sqnr_outlier.svg").exists()
    assert not math.isnan(outlier[("fp8_tensorwise", 1e5)]["sqnr_drop_db"])


def test_fp8_training_cases_with_unaligned_token_counts_are_skipped_before_touching_the_gpu():
    from suite.precisions.te import recipes as te
    from suite.scenario.plan import Case
    from suite.scenario.stop_rule import StopRule
    from suite.workloads.linear.workload import LINEAR

    cuda = torch.device("cuda")  # a device object only: the check comes before any tensor
    for recipe in (FP8_TENSORWISE, FP8_ROWWISE):
        assert "multiple of 16" in recipe.tokens_unsupported(100, cuda)
        assert recipe.tokens_unsupported(96, cuda) is None
        assert recipe.tokens_unsupported(100, CPU) is None  # emulated on the CPU: no _scaled_mm rule
    assert FP8_ROWWISE_GW_HP.tokens_unsupported(100, cuda) is None  # its weight gradient stays bf16
    assert "multiple of 8" in te.TE_CURRENT.tokens_unsupported(100, cuda)
    case = Case("t", "linear", "fp8_rowwise", None, 100, 64, 64, {}, 0, StopRule())
    with pytest.raises(Unsupported, match=r"token count \(M = 100\)"):
        LINEAR.prepare(case, FP8_ROWWISE, cuda)


def test_rowwise_without_fast_accumulation_runs_the_kernel_torchao_training_runs(monkeypatch):
    # torchao's training path (float8 addmm_float8_unwrapped): for rowwise scales without fast
    # accumulation, the tensorwise kernel with unit scales, then the row x column scales on its bf16
    # output. The suite's GEMM is that computation, to the bit; with fast accumulation the rowwise kernel.
    a, b = random_operands(32, 64, 48, 0, CPU)
    calls = []
    real = torch._scaled_mm

    def spy(x, y, scale_a, scale_b, **kw):
        calls.append((scale_a.clone(), scale_b.clone(), kw.get("use_fast_accum")))
        return real(x, y, scale_a, scale_b, **kw)

    monkeypatch.setattr(torch, "_scaled_mm", spy)
    qa0, qw0 = FP8_ROWWISE._quantize(a.bfloat16(), b.t().contiguous().bfloat16())
    FP8_ROWWISE._matmul(qa0, qw0, use_fast_accum=False)
    FP8_ROWWISE._matmul(qa0, qw0, use_fast_accum=True)
    (unit_a, unit_b, slow), (row_a, row_b, fast) = calls
    assert (unit_a == 1).all() and (unit_b == 1).all() and slow is False  # the kernel got unit scales
    assert torch.equal(row_a, qa0.inv_scale) and fast is True  # the rowwise kernel, scales inside
    monkeypatch.setattr(torch, "_scaled_mm", real)
    qa, qw = FP8_ROWWISE._quantize(a.bfloat16(), b.t().contiguous().bfloat16())
    ones_a, ones_b = torch.ones(32, 1), torch.ones(1, 48)
    unit = torch._scaled_mm(qa.data, qw.data.t(), ones_a, ones_b, out_dtype=torch.bfloat16)
    expected = (unit * (qa.inv_scale * qw.inv_scale.t())).to(torch.bfloat16)
    assert torch.equal(FP8_ROWWISE._matmul(qa, qw, use_fast_accum=False), expected)
    rowwise = torch._scaled_mm(qa.data, qw.data.t(), qa.inv_scale, qw.inv_scale.t().contiguous(),
                               out_dtype=torch.bfloat16, use_fast_accum=True)
    assert torch.equal(FP8_ROWWISE._matmul(qa, qw, use_fast_accum=True), rowwise)
    ref = a.double() @ b.double()
    assert FP8_BAND[0] <= error_metrics(FP8_ROWWISE.gemm(a, b, {})(), ref)["sqnr_db"] <= FP8_BAND[1]


class _Ops(torch.utils._python_dispatch.TorchDispatchMode):
    """The aten ops a call runs, and the (M, N) float32 tensors they make."""

    def __init__(self, shape):
        super().__init__()
        self.shape, self.ops, self.big_fp32 = shape, [], 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        self.ops.append(func.overloadpacket.__name__)
        if isinstance(out, torch.Tensor) and out.dtype == torch.float32 and tuple(out.shape) == self.shape:
            self.big_fp32 += 1
        return out


@pytest.mark.parametrize("fast", [False, True])
def test_rowwise_pre_timing_runs_no_per_call_work_torchao_does_not(fast):
    # torchao 0.18's float8_ops.addmm_float8_unwrapped per call: two scale reciprocals, for rowwise
    # without fast accumulation unit scales, one (M, N) float32 product of the scales multiplied into
    # the bf16 output in place. The "pre" call may do less (its scales are inverted already), never more.
    ao_ops = pytest.importorskip("torchao.float8.float8_ops")
    m, k, n = 32, 64, 48
    a, b = random_operands(m, k, n, 0, CPU)
    call = FP8_ROWWISE.gemm(a, b, {"quantize": "pre", "use_fast_accum": fast})
    qa, qw = FP8_ROWWISE._quantize(a.bfloat16(), b.t().contiguous().bfloat16())
    with _Ops((m, n)) as ours:
        out = call()
    args = (qa.data, qa.inv_scale.reciprocal(), qw.data.t(), qw.inv_scale.reciprocal().t())  # torchao's layout
    with _Ops((m, n)) as theirs:  # its ops, counted on shapes alone (meta tensors): a kernel need not run
        ao_ops.addmm_float8_unwrapped(*(t.to("meta") for t in args), torch.bfloat16, use_fast_accum=fast)
    left = list(theirs.ops)
    for op in ours.ops:
        assert op in left, f"{op} per call: torchao's {theirs.ops} has no more of it (ours: {ours.ops})"
        left.remove(op)
    assert ours.big_fp32 <= theirs.big_fp32
    try:
        ref = ao_ops.addmm_float8_unwrapped(*args, torch.bfloat16, use_fast_accum=fast)
    except RuntimeError as err:  # torchao's unit scales under AVX2 dispatch (see _cpu_scaled_mm)
        assert "primitive descriptor" in str(err)
        ref = ((qa.data.float() * qa.inv_scale) @ (qw.data.float() * qw.inv_scale).t()).bfloat16()
        assert torch.allclose(out.float(), ref.float(), rtol=2**-7, atol=0)  # two bf16 roundings apart at most
    else:
        assert torch.equal(out, ref)


def test_fp8_gemms_run_on_a_cpu_without_native_bf16_after_a_bf16_gemm():
    """With torch dispatching to AVX2 (a CPU without AVX512-BF16/AMX), a CPU `torch._scaled_mm` with
    one scale per tensor fails once the process has run a bf16 matmul ("could not create a primitive
    descriptor for the matmul primitive", torch 2.13): the recipes pass the CPU row and column
    scales instead (every FP8 cpu scenario runs bf16 first)."""
    import subprocess

    code = ("import torch; from suite.precisions.fp8.recipes import FP8_ROWWISE, FP8_TENSORWISE\n"
            "a, b = torch.randn(64, 128), torch.randn(128, 32)\n"
            "a.bfloat16() @ b.bfloat16()\n"
            "for recipe in (FP8_ROWWISE, FP8_TENSORWISE):\n"
            "    for quantize in ('pre', 'inline'):\n"
            "        recipe.gemm(a, b, {'quantize': quantize})()\n"
            "print('ok')")
    env = {**__import__("os").environ, "ATEN_CPU_CAPABILITY": "avx2", "ONEDNN_MAX_CPU_ISA": "AVX2"}
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert proc.stdout.strip() == "ok", proc.stderr[-2000:]


# --- the forward GEMM's accumulation: torchao's default unless a case says otherwise (issue #36) ---


@pytest.mark.parametrize("recipe", [FP8_TENSORWISE, FP8_ROWWISE])
@pytest.mark.parametrize("quantize", ["pre", "inline"])
def test_the_gemm_accumulates_fast_unless_told_not_to_as_torchaos_forward(monkeypatch, recipe, quantize):
    # torchao/float8/config.py: Float8LinearConfig.gemm_config_output = Float8GemmConfig(use_fast_accum=True);
    # an unset use_fast_accum times that kernel (rowwise: the scales inside it), false the gradient GEMMs'
    a, b = random_operands(32, 64, 48, 0, CPU)
    calls, real = [], torch._scaled_mm

    def spy(x, y, scale_a, scale_b, **kw):
        calls.append((bool((scale_a == 1).all() and (scale_b == 1).all()), kw.get("use_fast_accum")))
        return real(x, y, scale_a, scale_b, **kw)

    monkeypatch.setattr(torch, "_scaled_mm", spy)
    recipe.gemm(a, b, {"quantize": quantize})()
    recipe.gemm(a, b, {"quantize": quantize, "use_fast_accum": False})()
    (unit_fast, fast), (unit_slow, slow) = calls
    assert fast is True and not unit_fast
    assert slow is False and unit_slow == (recipe is FP8_ROWWISE)  # rowwise's slow path: unit scales
    from suite.precisions.fp8 import FP8GemmParams
    assert FP8GemmParams.of({}).fast_accum() and FP8GemmParams.of({"use_fast_accum": True}).fast_accum()
    assert not FP8GemmParams.of({"use_fast_accum": False}).fast_accum()


def test_every_fp8_grouped_gemm_of_the_gpu_scenarios_accumulates_fast():
    # torchao's FP8 MoE grouped GEMMs run torch._scaled_grouped_mm with use_fast_accum=True
    # (prototype/moe_training/fp8_grouped_mm.py); the GPU scenarios' grouped sweeps set nothing
    from pathlib import Path

    from suite.precisions.fp8 import FP8GemmParams
    from suite.scenario import plan

    grouped = [c for path in sorted(Path("scenarios").glob("*.toml")) for c in plan.expand(spec.load(str(path)))
               if c.workload == "grouped_gemm" and c.precision.startswith("fp8_")]
    assert {c.scenario for c in grouped} >= {"h100_fp8", "b200_mx"}
    assert all(FP8GemmParams.of(c.params).fast_accum() for c in grouped)
    # the case ids of explicit true and false stay theirs; unset is its own (the default) case
    ids = {c.params.get("use_fast_accum") for c in plan.expand(spec.load("scenarios/h100_fp8.toml"))
           if c.workload == "gemm" and c.precision == "fp8_rowwise"}
    assert ids == {True, False}
