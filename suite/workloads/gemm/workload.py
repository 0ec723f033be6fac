"""C[M, N] = A[M, K] @ B[K, N]: the kernel every other workload is made of."""

from __future__ import annotations

import torch

from suite.core.accuracy import error_metrics
from suite.workloads.base import Prepared, Workload

# Reference rows: the float64 check uses at most this many rows of A. Error statistics over 2048
# rows x N columns are plenty, and it keeps the fp64 GEMM cheap at M = 16384.
REFERENCE_ROWS = 2048


def random_operands(m: int, k: int, n: int, seed: int, device) -> tuple[torch.Tensor, torch.Tensor]:
    """Standard normal float32 operands, generated on the CPU so every device gets the same
    numbers for the same seed (never zeros: hardware power and speed depend on the data)."""
    gen = torch.Generator().manual_seed(seed)
    a = torch.randn(m, k, generator=gen)
    b = torch.randn(k, n, generator=gen)
    return a.to(device), b.to(device)


class Gemm(Workload):
    name = "gemm"

    def prepare(self, case, precision, device):
        m, k, n = case.m, case.k, case.n
        a, b = random_operands(m, k, n, case.seed, device)
        fn = precision.gemm(a, b, case.params)
        operand = precision.operand_bytes()
        output = torch.empty((), dtype=precision.dtype).element_size()

        def check_output(out):
            rows = min(m, REFERENCE_ROWS)
            ref = a[:rows].double() @ b.double()
            return error_metrics(out[:rows], ref)

        return Prepared(
            fn=fn,
            flops=2.0 * m * n * k,
            bytes_moved=float(operand * (m * k + k * n) + output * m * n),
            check=lambda: check_output(fn()),
            check_output=check_output,
            extra={"gemm_path": precision.gemm_path(device, "gemm")},
        )


GEMM = Gemm()
