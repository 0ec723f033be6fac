"""What the roofline model counts of a grouped GEMM case (`suite.analysis.roofline.model`, through the
workload's `groups` hook): its rows per expert, and whether one kernel multiplies them all."""

from __future__ import annotations

from suite.workloads.grouped_gemm import GroupedGemmParams
from suite.workloads.grouped_gemm.routing import expert_tokens


def groups(tokens: int, params: dict) -> tuple[list[int], bool]:
    """(rows per expert, whether one kernel multiplies them all) of a case: what the roofline model
    counts (a loop runs one GEMM per expert that has rows). The model asks for any M: one that is
    not a multiple of `align` is padded up to one, as a MoE layer pads its groups."""
    opts = GroupedGemmParams.of(params)
    padded = -(-tokens // opts.align) * opts.align
    return expert_tokens(padded, opts.experts, opts.load, opts.align, opts.zipf_exponent), opts.impl == "grouped"
