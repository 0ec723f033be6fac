"""Quantiles and spreads of timing samples: the one definition the timing loop, the stored
records and the readers of other harnesses' numbers share."""

from __future__ import annotations

import math


def quantile(sorted_xs: list[float], q: float) -> float:
    """Linear-interpolated quantile of an already sorted list (numpy's default method)."""
    pos = (len(sorted_xs) - 1) * q
    lo = math.floor(pos)
    hi = min(lo + 1, len(sorted_xs) - 1)
    return sorted_xs[lo] + (sorted_xs[hi] - sorted_xs[lo]) * (pos - lo)


def rel_spread(samples: list[float]) -> float:
    """Interquartile range over the median: the spread of single repetitions (does not shrink
    with more samples)."""
    if len(samples) < 2:
        return math.inf
    xs = sorted(samples)
    median = quantile(xs, 0.5)
    if median <= 0:
        return math.inf
    return (quantile(xs, 0.75) - quantile(xs, 0.25)) / median


def rel_ci_of_median(samples: list[float]) -> float:
    """Half-width of the 95% CI of the median over the median: 1.57 * IQR / sqrt(n) (McGill, Tukey
    and Larsen 1978, the notch of a box plot). Shrinks with more samples, unlike the spread itself."""
    if len(samples) < 2:
        return math.inf
    return 1.57 * rel_spread(samples) / math.sqrt(len(samples))
