"""Quantiles and spreads of timing samples: the one definition the timing loop, the stored
records and the readers of other harnesses' numbers share."""

from __future__ import annotations

import functools
import math
from typing import NamedTuple


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
    """Half-width of the median's distribution-free interval (`median_interval`) over the median:
    the "±" the stopping rule and the records use, at that interval's level (`median_level`: at least
    95% from 6 samples, the range's 1 - 2^(1-n) below). Shrinks with more samples, unlike the spread
    itself. inf for fewer than two samples or a median not above 0. Up to issue #38 it was McGill's
    notch, 1.57 IQR / sqrt(n), a constant for comparing two medians that covers 88-91% from 30
    samples and 68-72% at 3-5."""
    if len(samples) < 2:
        return math.inf
    xs = sorted(samples)
    median = quantile(xs, 0.5)
    if median <= 0:
        return math.inf
    low, high, _ = median_interval(xs)
    return (high - low) / 2 / median


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
    """The median's relative interval counted with batches as the replicates (`rel_ci_of_median` of
    the batch medians, at `median_level` of their count: 3 batches 75%, 6 or more at least 95%): what
    a level that drifts from batch to batch (another job, a clock change) adds to the spread within
    each batch. None with fewer than MIN_BATCHES batches."""
    return rel_ci_of_median(medians) if len(medians) >= MIN_BATCHES else None


def rel_ci_level(n_samples: int, n_batches: int) -> float | None:
    """What a record's `rel_ci` (the larger of the samples' and the batch medians' half-widths)
    covers, whether the samples are independent (the samples' interval's level then holds) or the
    level drifts between batches (the batches' then does): the lower of the two levels, the
    batches' counted from MIN_BATCHES of them; within 2 points from 6 values on, while with 3 to 5
    (their range) the ± around the middle value covers up to 5 points less (docs/timing.md). None
    where rel_ci is inf (fewer than two samples)."""
    if n_samples < 2:
        return None
    levels = [median_level(n_samples)] + ([median_level(n_batches)] if n_batches >= MIN_BATCHES else [])
    return min(levels)


class MedianInterval(NamedTuple):
    """An interval of a median and the probability that it covers the true median (`level`)."""

    low: float
    high: float
    level: float


@functools.lru_cache(maxsize=4096)  # the stopping rule asks after every batch
def median_rank(n: int, confidence: float = 0.95) -> tuple[int, float]:
    """The rank j of the order statistics x(j), x(n+1-j) bounding the median of n values, and their
    exact coverage 1 - 2 P(B < j) for B ~ Binomial(n, 1/2) (Conover, Practical Nonparametric
    Statistics, 3rd ed., 3.2): the largest j whose coverage is at least `confidence`, or j = 1 (the
    range, coverage 1 - 2^(1-n)) where n is too small for it (5 or fewer at 95%: 5 values 93.75%,
    3 values 75%, 1 value 0%)."""
    if n < 1:
        return 0, math.nan
    # P(B = i) term by term in logs: 2^-n underflows from n = 1075 (max_samples may be 100000)
    log_term, j = -n * math.log(2), 1  # log P(B = j - 1)
    below = math.exp(log_term)  # P(B <= j - 1)
    while j < (n + 1) // 2:
        log_term += math.log((n - j + 1) / j)  # log P(B = j)
        step = below + math.exp(log_term)  # P(B <= j)
        if 1 - 2 * step < confidence:
            break
        j, below = j + 1, step
    return j, 1 - 2 * below


def median_level(n: int, confidence: float = 0.95) -> float:
    """The coverage `median_interval` achieves with n values (nan for none)."""
    return median_rank(n, confidence)[1]


def median_interval(xs: list[float], confidence: float = 0.95) -> MedianInterval:
    """A distribution-free interval of the median of `xs` with its exact coverage (`median_rank`):
    at least `confidence` where the values allow it, else their range and the lower level it has.
    Exact for independent values from any continuous distribution."""
    if not xs:
        return MedianInterval(math.nan, math.nan, math.nan)
    s, n = sorted(xs), len(xs)
    j, level = median_rank(n, confidence)
    return MedianInterval(s[j - 1], s[n - j], level)
