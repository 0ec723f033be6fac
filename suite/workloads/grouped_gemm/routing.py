"""How a MoE router's tokens fall on the experts: the rows of each expert's GEMM (torch-free, so
the roofline model reads the same groups the workload multiplies).

A load names a distribution of the M routed rows over E experts; counts are whole multiples of
`align` (torchtitan pads every expert's group to 16 rows for FP8 and 32 for MXFP8), apportioned
by largest remainders so they sum to M exactly:
- balanced: M / E each (an ideal router, or capacity-factor dropping);
- zipf: expert i (from 1) in proportion to i^-s, the skew of real routers' popular experts;
- one_hot: one expert takes all but one group per other expert (the worst case short of empty ones);
- half_empty: the first half of the experts share M evenly, the other half get nothing (empty
  groups: a kernel must skip them, a loop must not multiply them).
"""

from __future__ import annotations

import math

from suite.core.errors import UserError

LOADS = ("balanced", "zipf", "one_hot", "half_empty")


def _apportion(units: int, weights: list[float]) -> list[int]:
    """`units` split in proportion to `weights`, whole numbers summing to `units` (largest remainders)."""
    total = sum(weights)
    shares = [units * w / total for w in weights]
    counts = [math.floor(s) for s in shares]
    by_remainder = sorted(range(len(weights)), key=lambda i: (counts[i] - shares[i], i))
    for i in by_remainder[:units - sum(counts)]:
        counts[i] += 1
    return counts


def expert_tokens(tokens: int, experts: int, load: str, align: int = 1, zipf_exponent: float = 1.0) -> list[int]:
    """Rows of each expert, in expert order (the rows are sorted by expert, as after a MoE permute)."""
    if tokens % align:
        raise UserError(f"grouped GEMM: M = {tokens} routed tokens is not a multiple of align = {align}")
    units = tokens // align
    if load == "balanced":
        counts = _apportion(units, [1.0] * experts)
    elif load == "zipf":
        counts = _apportion(units, [(i + 1) ** -zipf_exponent for i in range(experts)])
    elif load == "one_hot":
        rest = min(experts - 1, units)
        counts = [units - rest] + [1] * rest + [0] * (experts - 1 - rest)
    elif load == "half_empty":
        busy = math.ceil(experts / 2)
        counts = _apportion(units, [1.0] * busy) + [0] * (experts - busy)
    else:
        raise UserError(f"unknown load {load!r}; known: {', '.join(LOADS)}")
    return [c * align for c in counts]


def imbalance(counts: list[int]) -> float:
    """The busiest expert's rows over the mean (1 = balanced; E = one expert takes everything)."""
    mean = sum(counts) / len(counts)
    return max(counts) / mean if mean else 1.0
