"""Outlier robustness: one large activation value, and what it does to every other row's GEMM.

A (M, K) standard normal activation gets one value of magnitude `params.outlier` at row 0; the
recipe's GEMM (`precision.gemm`, the same path the `gemm` workload times) multiplies it by a
standard normal B (K, N). Accuracy is measured on the untouched rows 1..M-1 of the output against
float64, so it shows how far the outlier's scale reaches:
- tensorwise: the one scale is set by the outlier, the other values shrink towards and below
  e4m3's smallest subnormal (2^-9) and flush to zero: SQNR falls once outlier / typical value
  approaches e4m3's dynamic range (448 / 2^-9 ~ 2.3e5);
- rowwise and 1x128 block scaling: the outlier's scale covers only its own row (block), so the
  untouched rows are quantized exactly as without it.

Columns: `sqnr_db` / `rel_err` / `max_abs_err` on the untouched rows; `sqnr_db_clean`, the same
recipe and rows without the outlier; `sqnr_drop_db` = clean - with (how much the outlier cost).
Beside the GEMM, A's quantization itself (`precision.operand_values`): `sqnr_elements_db`, the SQNR
of every element of A but the outlier, its own row and block included, which is where block formats
pay: the elements sharing the outlier's scale (32 for MX, 16 for NVFP4, `scale_block`) flush to
zero once it is large enough, and an NVFP4 tensor scale set by the outlier pushes every block scale
below e4m3's range; `outlier_rel_err`, the outlier's own error (MX's floor scale clips it).
"""

from __future__ import annotations

import torch

from suite.core.accuracy import error_metrics
from suite.core.errors import UserError
from suite.workloads.outlier import OutlierParams
from suite.workloads.base import Prepared, Workload
from suite.workloads.gemm.workload import REFERENCE_ROWS, random_operands


class Outlier(Workload):
    name = "outlier"

    def prepare(self, case, precision, device):
        magnitude = OutlierParams.of(case.params).outlier
        m, k, n = case.m, case.k, case.n
        if m < 2:
            raise UserError(f"outlier: needs M >= 2 (row 0 holds the outlier, the others are measured), got {m}")
        clean, b = random_operands(m, k, n, case.seed, device)
        a = clean.clone()
        a[0, k // 2] = magnitude  # the middle column: inside a 1x128 block, not at an edge
        fn = precision.gemm(a, b, case.params)
        rows = min(m, REFERENCE_ROWS)  # row 0 plus up to REFERENCE_ROWS - 1 untouched rows

        def untouched_error(out: torch.Tensor, operand: torch.Tensor) -> dict:
            ref = operand[1:rows].double() @ b.double()
            return error_metrics(out[1:rows], ref)

        def check() -> dict:
            metrics = untouched_error(fn(), a)
            clean_sqnr = untouched_error(precision.gemm(clean, b, case.params)(), clean)["sqnr_db"]
            return {
                **metrics,
                "sqnr_db_clean": clean_sqnr,
                "sqnr_drop_db": clean_sqnr - metrics["sqnr_db"],
                **element_errors(precision.operand_values(a), a, (0, k // 2)),
            }

        return Prepared(fn=fn, flops=2.0 * m * n * k, bytes_moved=None, check=check,
                        extra={"outlier": magnitude, "scale_block": precision.scale_block(),
                               "gemm_path": precision.gemm_path(device, "gemm")})


def element_errors(values: torch.Tensor | None, a: torch.Tensor, at: tuple[int, int]) -> dict:
    """How A's quantization treats the outlier at `at` and every other element: the SQNR of all the
    others (its own block's included: where a block's shared scale hurts them), and the outlier's own
    relative error. Nothing where the recipe hides its quantization (`values` None)."""
    if values is None:
        return {}
    others = torch.ones_like(a, dtype=torch.bool)
    others[at] = False
    rest = error_metrics(values[others], a[others])
    own = abs(float(values[at]) - float(a[at])) / abs(float(a[at]))
    return {"sqnr_elements_db": rest["sqnr_db"], "outlier_rel_err": own}


OUTLIER = Outlier()
