"""A MoE layer's expert GEMMs: each expert's rows of A (M, K) times its weight (K, N).

The rows are sorted by expert (as after a MoE layer's permute); `routing.expert_tokens` says how
many each expert gets, and `offs` (int32) holds their cumulative ends, built here and checked
(torch does not check them on the CPU: offsets past M or out of order silently give wrong rows).
`impl = "grouped"` times the precision's grouped GEMM (`precision.grouped_gemm`); `impl = "loop"`
one GEMM per expert that has rows (`precision.gemm`, the same path the gemm workload times), the
outputs concatenated: the Python loop a MoE layer runs without a grouped kernel. Empty experts
cost the loop nothing and must cost a grouped kernel nothing either.

Accuracy: the output rows of every expert with rows (up to REFERENCE_ROWS in all, spread over the
experts) against float64 products of the same float32 inputs. FLOPs: 2 M K N; bytes: A, the
weights of the experts with rows, and the output.
"""

from __future__ import annotations

import json
import math

import torch

from suite.core.accuracy import error_metrics
from suite.workloads.base import Prepared, Workload
from suite.workloads.gemm.workload import REFERENCE_ROWS
from suite.workloads.grouped_gemm import GroupedGemmParams
from suite.workloads.grouped_gemm.routing import expert_tokens, imbalance


def offsets(counts: list[int], device) -> torch.Tensor:
    """Cumulative end row of each expert (int32, as torch._grouped_mm takes them)."""
    ends, total = [], 0
    for count in counts:
        if count < 0:
            raise ValueError(f"negative row count in {counts}")
        total += count
        ends.append(total)
    return torch.tensor(ends, dtype=torch.int32, device=device)


def operands(m: int, k: int, n: int, experts: int, seed: int, device) -> tuple[torch.Tensor, torch.Tensor]:
    """Standard normal A (M, K) and expert weights (E, K, N), float32, the same on every device."""
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(m, k, generator=gen)
    w = torch.randn(experts, k, n, generator=gen)
    return x.to(device), w.to(device)


def expert_loop(precision, x: torch.Tensor, w: torch.Tensor, counts: list[int], params: dict):
    """One `precision.gemm` per expert with rows, in expert order, outputs concatenated."""
    calls, start = [], 0
    for expert, count in enumerate(counts):
        if count:
            calls.append(precision.gemm(x[start:start + count], w[expert], params))
        start += count
    return lambda: torch.cat([call() for call in calls])


def reference_rows(counts: list[int]) -> list[tuple[int, int, int]]:
    """(expert, first row, rows) checked per expert with rows: REFERENCE_ROWS spread over them."""
    busy = [i for i, c in enumerate(counts) if c]
    each = max(1, math.ceil(REFERENCE_ROWS / max(1, len(busy))))
    starts = [sum(counts[:i]) for i in range(len(counts))]
    return [(i, starts[i], min(counts[i], each)) for i in busy]


class GroupedGemm(Workload):
    name = "grouped_gemm"

    def prepare(self, case, precision, device):
        opts = GroupedGemmParams.of(case.params)
        m, k, n = case.m, case.k, case.n
        counts = expert_tokens(m, opts.experts, opts.load, opts.align, opts.zipf_exponent)
        x, w = operands(m, k, n, opts.experts, case.seed, device)
        offs = offsets(counts, device)
        grouped = opts.impl == "grouped"
        fn = precision.grouped_gemm(x, w, offs, case.params) if grouped else \
            expert_loop(precision, x, w, counts, case.params)
        checked = reference_rows(counts)

        def check_output(out: torch.Tensor) -> dict:
            got = torch.cat([out[start:start + rows] for _, start, rows in checked])
            ref = torch.cat([x[start:start + rows].double() @ w[e].double() for e, start, rows in checked])
            return error_metrics(got, ref)

        busy = sum(1 for c in counts if c)
        operand = precision.operand_bytes()
        output = torch.empty((), dtype=precision.dtype).element_size()
        return Prepared(
            fn=fn, flops=2.0 * m * k * n,
            bytes_moved=float(operand * (m * k + busy * k * n) + output * m * n),
            check=lambda: check_output(fn()), check_output=check_output,
            extra={"imbalance": imbalance(counts), "empty_experts": len(counts) - busy,
                   "expert_tokens": json.dumps(counts),
                   "gemm_path": precision.gemm_path(device, "grouped" if grouped else "gemm")},
        )


GROUPED_GEMM = GroupedGemm()
