"""Precision recipes: capability checks, and every global flag restored after a case."""

from __future__ import annotations

import pytest
import torch

from suite.scenario import registry
from suite.precisions import flags
from suite.precisions.floating.recipes import BF16, FP16, FP32, TF32

CPU = torch.device("cpu")


def test_every_registered_precision_loads():
    for name in registry.PRECISIONS:
        assert registry.precision(name).name == name


def test_tf32_is_skipped_off_cuda_with_a_reason():
    assert "CUDA" in TF32.unsupported(CPU)
    for p in (FP32, BF16, FP16):
        assert p.unsupported(CPU) is None


@pytest.mark.parametrize("tf32", [True, False])
def test_new_api_is_set_and_restored(tf32):
    if not flags.has_fp32_precision_api():
        pytest.skip(f"torch {torch.__version__} predates the fp32_precision API (2.9)")
    before = flags.snapshot()
    with flags.float32_matmul(tf32=tf32):
        expected = "tf32" if tf32 else "ieee"
        assert torch.backends.cuda.matmul.fp32_precision == expected
        assert torch.backends.cudnn.conv.fp32_precision == expected
    assert flags.snapshot() == before


@pytest.mark.parametrize("tf32", [True, False])
def test_the_legacy_precision_agrees_with_the_new_api_and_both_are_restored(tf32):
    # inductor still reads torch.get_float32_matmul_precision(), which raises where the new API says
    # tf32 and the legacy value was left at "highest" (pytorch/pytorch#166387)
    if not flags.has_fp32_precision_api():
        pytest.skip(f"torch {torch.__version__} predates the fp32_precision API (2.9)")
    before = flags.snapshot()
    legacy = torch.get_float32_matmul_precision()
    with flags.float32_matmul(tf32=tf32):
        assert torch.get_float32_matmul_precision() == ("high" if tf32 else "highest")
        assert torch.backends.cuda.matmul.fp32_precision == ("tf32" if tf32 else "ieee")
        assert flags.snapshot()["float32_matmul_precision"] != "mixed"
    assert torch.get_float32_matmul_precision() == legacy and flags.snapshot() == before
    assert torch.backends.cuda.matmul.fp32_precision == before["cuda.matmul.fp32_precision"]


def test_legacy_api_is_set_and_restored(monkeypatch):
    # Exercise the pre-2.9 branch on whatever torch is installed (the legacy knobs still exist).
    monkeypatch.setattr(flags, "has_fp32_precision_api", lambda: False)
    before = (torch.backends.cuda.matmul.allow_tf32, torch.get_float32_matmul_precision())
    try:
        with flags.float32_matmul(tf32=True):
            assert torch.backends.cuda.matmul.allow_tf32 is True
            assert torch.get_float32_matmul_precision() == "high"
        assert (torch.backends.cuda.matmul.allow_tf32, torch.get_float32_matmul_precision()) == before
    finally:
        # The legacy setter touched the new-API state too; put the process back as it started.
        torch.backends.cuda.matmul.fp32_precision = "none"
        torch.backends.fp32_precision = "none"


def test_flags_restored_when_the_case_raises():
    before = flags.snapshot()
    with pytest.raises(RuntimeError):
        with FP32.active():
            raise RuntimeError("boom")
    assert flags.snapshot() == before


def test_half_precisions_restore_reduction_flags():
    m = torch.backends.cuda.matmul
    m.allow_bf16_reduced_precision_reduction = False
    try:
        with BF16.active():
            assert m.allow_bf16_reduced_precision_reduction is True
        assert m.allow_bf16_reduced_precision_reduction is False
    finally:
        m.allow_bf16_reduced_precision_reduction = True


def test_autocast_only_for_half_types():
    x, w = torch.randn(4, 8), torch.randn(8, 8)
    with BF16.autocast(CPU):
        assert (x @ w).dtype == torch.bfloat16
    with FP32.autocast(CPU):
        assert (x @ w).dtype == torch.float32
    assert FP16.grad_scaler and not BF16.grad_scaler


def test_gemm_runs_in_the_precision_dtype():
    a, b = torch.randn(16, 32), torch.randn(32, 8)
    for p, dtype in ((FP32, torch.float32), (BF16, torch.bfloat16), (FP16, torch.float16)):
        assert p.gemm(a, b, {})().dtype == dtype


def test_records_say_whether_half_precision_gemms_may_reduce_in_half_precision():
    # bf16/fp16 "accumulate in float32" only while cuBLAS is not allowed reduced-precision split-K
    # reductions: both flags are in every record's matmul_flags, with their values.
    snap = flags.snapshot()
    for t in ("bf16", "fp16"):
        key = f"cuda.matmul.allow_{t}_reduced_precision_reduction"
        assert snap[key] == str(getattr(torch.backends.cuda.matmul, f"allow_{t}_reduced_precision_reduction"))
