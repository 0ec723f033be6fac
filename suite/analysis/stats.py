"""Statistics for comparing timings across runs (numpy only, no plotting, no I/O).

Every comparison is made on a log scale and oriented so that a positive change is better:
- speedup (a ratio measured inside one run): d = log(candidate speedup / baseline speedup);
- absolute time: d = log(baseline time / candidate time).

Uncertainty has two sources:
1. Sampling inside a run. The stored per-repetition samples are bootstrapped: the samples of every
   run are resampled with replacement and the median taken again (Efron and Tibshirani 1993, ch. 13
   percentile interval). A side pooled from several runs is resampled in two stages, runs first and
   then samples inside each drawn run, so run-to-run variation counts too.
2. Run-to-run noise that one run cannot see: a shared or throttled machine makes a whole case slower
   for the moment it is measured, and its samples agree with each other. `excess_noise` estimates it
   from the spread of the changes across the compared cases, the way a random-effects meta-analysis
   estimates between-study variance (DerSimonian and Laird 1986) but with a median/MAD so that a
   minority of cases that really changed do not inflate it. It enters the interval as a heavy-tailed
   (Student-t, 3 degrees of freedom) term, so one case caught by a burst of load is `noisy`, not
   `regressed`.

A change is a `regressed` / `improved` verdict when its interval excludes zero (significant at the
chosen confidence) and its estimate is at least the minimum effect (default 5%, the practical
threshold; asv uses 10%, TorchBench 7%). An interval inside +-minimum effect is `unchanged`; one that
straddles zero but reaches past the minimum effect is `noisy`: the data cannot tell.
"""

from __future__ import annotations

import math
import zlib
from dataclasses import dataclass
from typing import Sequence

import numpy as np

REGRESSED, IMPROVED, UNCHANGED, NOISY = "regressed", "improved", "unchanged", "noisy"
DEFAULT_MIN_EFFECT = 0.05
DEFAULT_CONFIDENCE = 0.99
DEFAULT_RESAMPLES = 2000
# 1 / Phi^-1(3/4): turns a median absolute deviation into a standard deviation for normal data.
MAD_TO_SD = 1.4826
# Fewest cases from which run-to-run noise is estimated; with fewer the MAD is itself too noisy.
MIN_CASES_FOR_NOISE = 5
# Run-to-run noise is heavy-tailed: on a shared machine a case measured while another process ran is
# 1.5-2x slower, not 2 sd slower. It is modelled as Student-t with 3 degrees of freedom (finite
# variance, heavy tails; the usual robust choice, Lange, Little and Taylor 1989), scaled to have the
# MAD that was measured. Median |T_3| = 0.7649 (t_3 75th percentile), median |N(0,1)| = 0.6745.
NOISE_DF = 3
T_MAD_OVER_NORMAL_MAD = 0.7649 / 0.6745
NOISE_DRAWS = 10


def as_samples(values) -> np.ndarray:
    """Positive finite timing samples as a float array (None, NaN, non-positive values dropped)."""
    if values is None:
        return np.empty(0)
    xs = np.asarray(list(values), dtype=float)
    return xs[np.isfinite(xs) & (xs > 0)]


# Up to this many samples the bootstrap resamples them directly; beyond it the median's bootstrap
# distribution is drawn exactly from order statistics, O(n) instead of O(resamples * n).
DIRECT_MAX = 256
_GRID = 16  # integration points per 1/n when tabulating an order statistic's distribution


def order_stat_cdf(n: int, k: int) -> np.ndarray:
    """P(X*_(k) <= x_(j)) for j = 1..n: where the k-th smallest of a bootstrap resample of n sorted
    values lands. It equals P(Binomial(n, j/n) >= k) = I_{j/n}(k, n - k + 1), the Beta(k, n-k+1)
    CDF at j/n, obtained here by integrating the Beta density on a grid of 16 points per 1/n."""
    p = np.linspace(0.0, 1.0, n * _GRID + 1)
    with np.errstate(divide="ignore"):
        log_pdf = (k - 1) * np.log(p) + (n - k) * np.log1p(-p)
    log_pdf -= np.max(log_pdf[np.isfinite(log_pdf)])
    pdf = np.exp(log_pdf)
    cdf = np.concatenate([[0.0], np.cumsum((pdf[1:] + pdf[:-1]) / 2)])
    return cdf[_GRID::_GRID] / cdf[-1]


def keyed_rng(seed: int, *keys: str) -> np.random.Generator:
    """One generator per key (a case id, a run and case id): a case's interval then depends on the
    seed and its own samples only, never on which other cases exist or the order they are visited."""
    return np.random.default_rng([seed, *(zlib.crc32(str(k).encode()) for k in keys)])


def log_median_replicates(samples: np.ndarray, resamples: int, rng: np.random.Generator) -> tuple[float, np.ndarray]:
    """(log of the median, its bootstrap replicates): one side of a log speedup, log(ref) - log(case)."""
    return math.log(float(np.median(samples))), boot_log_medians(samples, resamples, rng)


def boot_log_medians(samples: np.ndarray, resamples: int, rng: np.random.Generator) -> np.ndarray:
    """`resamples` bootstrap replicates of log(median(samples)).

    Large samples draw the resample's middle order statistic(s) by inverting `order_stat_cdf`;
    for an even n the two middle ones share one uniform draw (they are nearly comonotone), which
    matches direct resampling to within its Monte Carlo error (tests/test_stats.py checks this)."""
    n = len(samples)
    if n <= DIRECT_MAX:
        idx = rng.integers(0, n, size=(resamples, n))
        return np.log(np.median(samples[idx], axis=1))
    xs = np.sort(samples)
    u = rng.random(resamples)

    def draw(k: int) -> np.ndarray:
        return xs[np.minimum(np.searchsorted(order_stat_cdf(n, k), u), n - 1)]

    middle = draw((n + 1) // 2)
    if n % 2 == 0:
        middle = (middle + draw(n // 2 + 1)) / 2
    return np.log(middle)


@dataclass(frozen=True)
class SideEstimate:
    """One side of a comparison for one case: log value (mean over runs) and its replicates.

    The log value is oriented so that larger is better: log speedup, or -log time."""

    log_value: float
    replicates: np.ndarray
    runs: int

    @property
    def se(self) -> float:
        return float(np.std(self.replicates, ddof=1)) if len(self.replicates) > 1 else math.inf


def side_estimate(values: Sequence[float], replicates: Sequence[np.ndarray], rng: np.random.Generator) -> SideEstimate:
    """Pool runs: the mean of the per-run log values, with two-stage bootstrap replicates (runs
    drawn with replacement, then each drawn run's own sample replicate). A run drawn twice in one
    replicate reuses its within-run draw, which slightly understates the within-run part when runs
    are few; the run-to-run part, which pooling is for, is resampled fully."""
    if not values or len(values) != len(replicates):
        raise ValueError("one replicate array per run value is needed")
    point = float(np.mean(values))
    per_run = np.stack(list(replicates))  # (runs, resamples)
    if len(values) == 1:
        return SideEstimate(point, per_run[0], 1)
    resamples = per_run.shape[1]
    pick = rng.integers(0, len(values), size=(resamples, len(values)))
    reps = per_run[pick, np.arange(resamples)[:, None]].mean(axis=1)
    return SideEstimate(point, reps, len(values))


@dataclass(frozen=True)
class Change:
    """A case's change from baseline to candidate, on the log scale (positive = better)."""

    estimate: float
    low: float
    high: float
    se: float

    @property
    def ratio(self) -> float:
        """Candidate over baseline speedup (or baseline over candidate time): > 1 is better."""
        return math.exp(self.estimate)

    @property
    def ratio_low(self) -> float:
        return math.exp(self.low)

    @property
    def ratio_high(self) -> float:
        return math.exp(self.high)


def interval(
    estimate: float,
    replicates: np.ndarray,
    noise: "NoiseEstimate | float",
    confidence: float,
    rng: np.random.Generator,
) -> Change:
    """Percentile interval of the change: the bootstrap replicates (within-run sampling) plus an
    independent run-to-run noise draw, Student-t with NOISE_DF degrees of freedom. Each replicate is
    paired with NOISE_DRAWS noise draws so that the tail quantiles of the sum are stable."""
    scale = noise.t_scale if isinstance(noise, NoiseEstimate) else float(noise) / T_MAD_OVER_NORMAL_MAD
    draws = np.asarray(replicates, dtype=float)
    if scale > 0:
        draws = np.repeat(draws, NOISE_DRAWS) + scale * rng.standard_t(NOISE_DF, size=len(draws) * NOISE_DRAWS)
    alpha = 1.0 - confidence
    low, high = np.quantile(draws, [alpha / 2, 1 - alpha / 2])
    se = float(np.std(draws, ddof=1)) if len(draws) > 1 else math.inf
    # The percentile interval is centred on the replicates; keep the point estimate inside it.
    return Change(estimate, min(float(low), estimate), max(float(high), estimate), se)


def verdict(change: Change, min_effect: float = DEFAULT_MIN_EFFECT) -> str:
    """regressed / improved / unchanged / noisy from the interval and the minimum effect."""
    if not (math.isfinite(change.low) and math.isfinite(change.high)):
        return NOISY
    band = math.log1p(min_effect)
    if change.high < 0 and change.estimate <= -band:
        return REGRESSED
    if change.low > 0 and change.estimate >= band:
        return IMPROVED
    if change.low >= -band and change.high <= band:
        return UNCHANGED
    if change.high < 0 or change.low > 0:
        # Significant, but the estimate is smaller than the minimum effect worth reporting.
        return UNCHANGED
    return NOISY


@dataclass(frozen=True)
class NoiseEstimate:
    """Run-to-run noise of a log change beyond what the samples explain. `sd` is on the normal
    scale (1.4826 MAD); the noise itself is drawn heavy-tailed (`t_scale`, see `interval`)."""

    sd: float
    cases: int
    source: str  # "estimated", "given", or why it could not be estimated

    @property
    def relative(self) -> float:
        return math.expm1(self.sd)

    @property
    def t_scale(self) -> float:
        """Scale of the Student-t with the same MAD as a normal of this sd."""
        return self.sd / T_MAD_OVER_NORMAL_MAD


def excess_noise(changes: Sequence[float], ses: Sequence[float], groups: Sequence[object]) -> NoiseEstimate:
    """Robust estimate of the run-to-run sd of log changes, beyond the bootstrap standard errors.

    Each change is centred on the median of its group (e.g. one workload x precision), so a change
    shared by a whole group (bf16 got faster everywhere) is not mistaken for noise; groups of fewer
    than 3 cases cannot be centred and are left out. The residuals' MAD, scaled to an sd and
    corrected for the centring (g / (g - 1)), gives the total spread; the typical (median) sampling
    variance is subtracted, as in DerSimonian-Laird, and what is left, if positive, is the noise."""
    d = np.asarray(changes, dtype=float)
    se = np.asarray(ses, dtype=float)
    keys = np.asarray([str(g) for g in groups])
    keep = np.isfinite(d) & np.isfinite(se)
    d, se, keys = d[keep], se[keep], keys[keep]
    residuals: list[float] = []
    used_se: list[float] = []
    for key in np.unique(keys):
        members = keys == key
        g = int(members.sum())
        if g < 3:
            continue
        r = (d[members] - np.median(d[members])) * math.sqrt(g / (g - 1))
        residuals += r.tolist()
        used_se += se[members].tolist()
    if len(residuals) < MIN_CASES_FOR_NOISE:
        return NoiseEstimate(0.0, len(residuals), f"not estimated: {len(residuals)} case(s) in groups of 3 or more, "
                             f"{MIN_CASES_FOR_NOISE} needed")
    r = np.asarray(residuals)
    spread = MAD_TO_SD * float(np.median(np.abs(r - np.median(r))))
    sampling = float(np.median(np.square(used_se)))
    return NoiseEstimate(math.sqrt(max(0.0, spread**2 - sampling)), len(residuals), "estimated")


def given_noise(relative_sd: float) -> NoiseEstimate:
    """A noise level the user set (`--noise 0.03`: 3% run-to-run sd)."""
    if relative_sd < 0:
        raise ValueError("noise must be >= 0")
    return NoiseEstimate(math.log1p(relative_sd), 0, "given")
