"""Error metrics, and the accuracy of each precision's GEMM within bands derived from its format."""

from __future__ import annotations

import math

import pytest
import torch

from suite.core import accuracy
from suite.scenario import registry
from suite.scenario.plan import Case
from suite.measure.timing import StopRule


def test_metrics_on_a_hand_made_case():
    ref = torch.tensor([3.0, 4.0])  # norm 5
    out = torch.tensor([3.0, 4.5])  # error norm 0.5
    m = accuracy.error_metrics(out, ref)
    assert m["rel_err"] == pytest.approx(0.1)
    assert m["max_abs_err"] == pytest.approx(0.5)
    assert m["sqnr_db"] == pytest.approx(20.0)  # -20 log10(0.1)


def test_exact_result_has_infinite_sqnr():
    x = torch.randn(10)
    m = accuracy.error_metrics(x, x)
    assert m["rel_err"] == 0 and math.isinf(m["sqnr_db"])


def test_non_finite_output_is_an_error():
    with pytest.raises(accuracy.NonFiniteOutput, match="2 non-finite values"):
        accuracy.error_metrics(torch.tensor([1.0, math.nan, math.inf]), torch.ones(3))


def gemm_error(precision: str, size: int = 256) -> float:
    case = Case("t", "gemm", precision, None, size, size, size, {}, seed=0, timing=StopRule())
    prepared = registry.workload("gemm").prepare(case, registry.precision(precision), torch.device("cpu"))
    return prepared.check()["rel_err"]


# Bands from the formats. Unit roundoff u = 2^-p for p significand bits: fp32 p=24 (6e-8),
# fp16 p=11 (4.9e-4), bf16 p=8 (3.9e-3). Rounding both operands and the output gives a relative
# Frobenius error of a fraction of u to ~u (uniform rounding error has RMS u/sqrt(3) per rounding,
# about three roundings add in quadrature), while fp32 accumulation adds ~u*sqrt(K) at most.
@pytest.mark.parametrize(
    "precision, low, high",
    [("fp32", 0.0, 1e-5), ("bf16", 1e-3, 1e-2), ("fp16", 1e-4, 1e-3)],
)
@pytest.mark.parametrize("size", [64, 256])
def test_gemm_error_band(precision, low, high, size):
    err = gemm_error(precision, size)
    assert low < err < high, f"{precision} rel_err {err:.3g} outside ({low}, {high})"


def test_error_ordering_follows_mantissa_bits():
    assert gemm_error("fp32") < gemm_error("fp16") < gemm_error("bf16")
