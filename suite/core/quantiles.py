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


# Fewest batches whose medians say anything about drift between them (three points have a spread;
# two have a difference, whose interquartile range is half of it).
MIN_BATCHES = 3


def batch_medians(samples: list[float], sizes: list[int]) -> list[float]:
    """The median of each batch of `samples`, taken in order, `sizes[i]` samples in batch i."""
    out, start = [], 0
    for size in sizes:
        chunk = sorted(samples[start:start + size])
        start += size
        if chunk:
            out.append(quantile(chunk, 0.5))
    return out


def rel_ci_of_batches(medians: list[float]) -> float | None:
    """The median's relative 95% CI counted with batches as the replicates (`rel_ci_of_median` of the
    batch medians): what a level that drifts from batch to batch (another job, a clock change)
    adds to the spread within each batch. None with fewer than MIN_BATCHES batches."""
    return rel_ci_of_median(medians) if len(medians) >= MIN_BATCHES else None


def median_interval(xs: list[float], confidence: float = 0.95) -> tuple[float, float]:
    """A distribution-free interval of the median of `xs`: the order statistics x(j) and x(n+1-j)
    with the largest j whose coverage, 1 - 2 P(B < j) for B ~ Binomial(n, 1/2), is at least
    `confidence` (Conover, Practical Nonparametric Statistics, 3rd ed., 3.2). With too few values for
    that (5 or fewer at 95%) it is their range, whose coverage 1 - 2^(1-n) is lower (5 values: 94%)."""
    if not xs:
        return math.nan, math.nan
    s, n = sorted(xs), len(xs)
    j, below = 1, 0.5**n  # P(B <= j - 1)
    while j < (n + 1) // 2:
        step = below + math.comb(n, j) * 0.5**n  # P(B <= j)
        if 1 - 2 * step < confidence:
            break
        j, below = j + 1, step
    return s[j - 1], s[n - j]
