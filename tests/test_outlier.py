"""The outlier sweep: one planted activation value, SQNR of the untouched output rows.

Expected shape (standard normal activations, e4m3: max 448, smallest subnormal 2^-9). With one
value of magnitude A the tensorwise scale is 448 / A, so a typical value x lands at 448 x / A:
- A = 1e3: x * 0.45 stays mostly in the normal range: no measurable loss (< 1 dB);
- A = 1e5: x * 0.0045 is subnormal everywhere, with a step of 2^-9 / 0.0045 = 0.44 in x units:
  noise 0.44^2 / 12 = 1.6e-2 of the signal, ~18 dB, i.e. > 6 dB below the clean ~28.5 dB;
- A = 1e6: the step (4.4) is larger than almost every |x|: nearly all flush to zero, SQNR < 3 dB.
Rowwise and 1x128 block scales belong to the outlier's own row (block): the untouched rows are
quantized exactly as without it (drop ~0). bf16 has no scale at all.
"""

from __future__ import annotations

import pytest
import torch

from suite.core.errors import UserError
from suite.scenario.plan import Case
from suite.precisions.floating.recipes import BF16
from suite.precisions.fp8.recipes import FP8_BLOCK, FP8_ROWWISE, FP8_TENSORWISE
from suite.measure.timing import StopRule
from suite.workloads.outlier.workload import OUTLIER

CPU = torch.device("cpu")
MAGNITUDES = [1e2, 1e3, 1e4, 3e4, 1e5, 3e5, 1e6]


def sweep(precision, magnitudes=MAGNITUDES, m=64, k=512, n=64):
    out = []
    for magnitude in magnitudes:
        case = Case("t", "outlier", precision.name, None, m, k, n, {"outlier": magnitude}, 0, StopRule())
        out.append(OUTLIER.prepare(case, precision, CPU).check())
    return out


def test_tensorwise_sqnr_falls_as_the_outlier_grows():
    rows = sweep(FP8_TENSORWISE)
    sqnr = [r["sqnr_db"] for r in rows]
    # non-increasing, up to the noise of a 63 x 64 sample (0.3 dB)
    assert all(b <= a + 0.3 for a, b in zip(sqnr, sqnr[1:]))
    by = dict(zip(MAGNITUDES, rows))
    assert abs(by[1e3]["sqnr_drop_db"]) < 1.0
    assert by[1e5]["sqnr_drop_db"] > 6.0
    assert by[1e6]["sqnr_db"] < 3.0 and by[1e6]["sqnr_drop_db"] > 20.0
    assert 25.0 <= by[1e2]["sqnr_db_clean"] <= 32.0  # the e4m3 GEMM band without the outlier


@pytest.mark.parametrize("precision", [FP8_ROWWISE, FP8_BLOCK, BF16])
def test_row_and_block_scaling_leave_untouched_rows_alone(precision):
    for r in sweep(precision, [1e2, 1e4, 1e6]):
        assert abs(r["sqnr_drop_db"]) < 0.1


def test_outlier_param_is_required():
    case = Case("t", "outlier", "bf16", None, 8, 32, 8, {}, 0, StopRule())
    with pytest.raises(UserError, match="params.outlier"):
        OUTLIER.prepare(case, BF16, CPU)
    prepared = OUTLIER.prepare(Case("t", "outlier", "bf16", None, 8, 32, 8, {"outlier": 10}, 0, StopRule()), BF16, CPU)
    assert prepared.extra == {"outlier": 10.0, "scale_block": None, "gemm_path": None}
    assert prepared.flops == 2.0 * 8 * 32 * 8
