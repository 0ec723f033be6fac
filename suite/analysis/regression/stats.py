"""Statistics for comparing timings across runs (numpy and the standard library only; no I/O).

Every comparison is made on a log scale and oriented so that a positive change is better:
- speedup (a ratio measured inside one run): d = log(candidate speedup / baseline speedup);
- absolute time: d = log(baseline time / candidate time).

**Runs are the unit of replication** (`run_changes`, used by `suite.analysis.regression.compare`). A run's value
of a case is its median over the run's repetitions (robust to a bimodal run, where a minority of
repetitions is 2x slow), so the samples inside a run only serve to locate it; what varies between
runs (another process on a shared machine, a throttled card, a different VM) is seen only by
comparing runs, and a single run on a side cannot show it. Per side, each run's values are
decomposed as `y[run, case] = mean[case] + shift[run] + residual` (a two-way random-effects layout):

- `shift[run]` is the run's level: the median over cases of how far the run sits from each case's
  mean. It is common to every case of the run, so it is estimated with few degrees of freedom (the
  number of runs less one per side), however many cases there are.
- the residual variance of one case on one side has k - 1 degrees of freedom (k runs): too few to
  trust alone, so it is pooled over all cases and both sides as a floor, robustly: the median of the
  per-case variances divided by the median of chi-square(k-1)/(k-1), which is what the median of
  variances of normal data is expected to be. A case whose own variance is larger (one run caught
  by a burst of load) keeps its own.

A side's mean then has variance (run variance + max(own, pooled residual variance)) / k, and the
change's interval is Student-t, its degrees of freedom combined from the two parts by
Welch-Satterthwaite (Satterthwaite 1946; the pooled part counted with half its degrees of freedom,
since cases measured in the same runs are not independent). Borrowing a variance from all cases
where one case's few replicates cannot estimate its own is the idea of the moderated t statistic
(Smyth 2004, limma); here the borrowed value is a robust floor rather than a weighted prior, and the
run-level term is that of a two-way random-effects model (Searle, Casella and McCulloch 1992).

A change is `regressed` / `improved` when its whole interval lies beyond the minimum effect
(default 5%, the practical threshold; asv uses 10%, TorchBench 7%), and both sides have at least the
minimum number of runs; with fewer, `insufficient-runs`. An interval inside +-minimum effect is
`unchanged`; one that excludes zero but straddles the minimum effect is `ambiguous` (a change, of a
size the data cannot place on either side of the threshold: nvbench's AMBIGUOUS); one that straddles
zero and reaches past the minimum effect is `noisy`. The minimum effect is tested on the interval,
never on the point estimate alone: a regressed verdict says the change is at least that large at the
per-case confidence.

**Runs per side.** The run-shift part of the variance has as many degrees of freedom as runs less
one per side: 2 with two runs a side. Where it is underestimated, Welch-Satterthwaite's degrees of
freedom jump towards the pooled part's (13 to 38 on the calibration's runs) and the t quantile
shrinks exactly when the standard error is too small: at 2 runs per side 2.6% of unchanged speedups
are flagged under bursts of load (1% promised). A verdict therefore needs `DEFAULT_MIN_RUNS` = 3
runs per side by default, the fewest at which the calibration (docs/calibration.md, and a seeded
simulation in tests/test_calibrate.py) keeps false alarms at the per-case level under run shifts and
bursts; `--min-runs 2` remains a choice, with its own row in the table.

**Family-wise error**: a gate that fails when any of m cases regressed would fail by chance far more
often than one case would; `holm` adjusts the p-values (Holm 1979 step-down, valid under any
dependence between cases) so that the exit status keeps the chosen confidence for the whole
comparison while each case's verdict stays at the per-case confidence.

The distributions (Student-t, chi-square) are computed here from the regularized incomplete beta
and gamma functions (continued fraction and series, as in Abramowitz and Stegun 26.5.8 and 6.5.29),
so that no SciPy is needed.

`suite.analysis.regression.history` applies the same test to the runs before and after each candidate change
point (`Fit` and `Fit.change`), so that every change point history reports is a change compare
calls between the same runs; the converse needs history's search to see the change first
(docs/comparing.md).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from statistics import NormalDist, median
from typing import Mapping, Sequence

import numpy as np

REGRESSED, IMPROVED, UNCHANGED, NOISY = "regressed", "improved", "unchanged", "noisy"
AMBIGUOUS = "ambiguous"
INSUFFICIENT = "insufficient-runs"
DEFAULT_MIN_EFFECT = 0.05
DEFAULT_CONFIDENCE = 0.99
# Fewest runs per side for a regressed/improved verdict: with one run the between-run spread of that
# side is not seen at all, and with two the run shifts' variance has too few degrees of freedom for
# the per-case level to hold (the module docstring; docs/calibration.md). Three is also what is recommended.
DEFAULT_MIN_RUNS = 3
RECOMMENDED_RUNS = 3
# The power `power_change` reports: the change a comparison finds this often.
DEFAULT_POWER = 0.8
# Beyond this many degrees of freedom Student-t is the normal distribution to within 1e-4 relative
# in the quantiles used here; the normal is exact to compute and the continued fraction is slow there.
NORMAL_DF = 1e5


# --- distributions ---------------------------------------------------------------------------------

def betainc(a: float, b: float, x: float) -> float:
    """Regularized incomplete beta function I_x(a, b), by its continued fraction (A&S 26.5.8) with
    the modified Lentz algorithm; the symmetry I_x(a, b) = 1 - I_(1-x)(b, a) keeps it where the
    fraction converges fast."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    if x > (a + 1.0) / (a + b + 2.0):
        return 1.0 - betainc(b, a, 1.0 - x)
    log_front = math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)
    tiny = 1e-300
    f, c, d = tiny, tiny, 0.0
    for j in range(1, 20000):
        if j == 1:
            num = 1.0
        else:
            n = j - 1
            m = n // 2
            if n % 2:
                num = -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1))
            else:
                num = m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m))
        d = 1.0 + num * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + num / c
        c = c if abs(c) > tiny else tiny
        f *= c * d
        if abs(c * d - 1.0) < 1e-15:
            break
    return math.exp(log_front) * f / a


def t_two_sided_p(t: float, df: float) -> float:
    """P(|T| >= |t|) for Student-t with df degrees of freedom (df may be inf: the normal)."""
    if math.isnan(t):
        return math.nan
    if math.isinf(t):
        return 0.0
    if df >= NORMAL_DF:
        return math.erfc(abs(t) / math.sqrt(2.0))
    return betainc(df / 2.0, 0.5, df / (df + t * t))


def _t_log_pdf(t: float, df: float) -> float:
    return (math.lgamma((df + 1) / 2) - math.lgamma(df / 2) - 0.5 * math.log(df * math.pi)
            - (df + 1) / 2 * math.log1p(t * t / df))


# The quantile and the power shift are pure functions of their arguments, and a comparison asks for
# the same few again and again (each case whose own variance is under the pooled one has the same
# degrees of freedom; history asks at each split): each costs a root search over a continued fraction.
@functools.lru_cache(maxsize=65536)
def t_quantile(alpha: float, df: float) -> float:
    """q > 0 with P(|T| >= q) = alpha: the half-width, in standard errors, of a two-sided interval
    at confidence 1 - alpha. Newton's method on log q (the log tail is nearly linear there),
    started from the normal quantile with its first Cornish-Fisher correction, kept in a bracket."""
    if not 0.0 < alpha < 1.0:
        raise ValueError(f"alpha {alpha} is not in (0, 1)")
    z = NormalDist().inv_cdf(1.0 - alpha / 2.0)
    if df >= NORMAL_DF:
        return z
    lo, hi = math.log(1e-12), math.log(1e300)
    u = math.log(max(z + (z**3 + z) / (4.0 * df), 1e-6))
    target = math.log(alpha)
    for _ in range(200):
        q = math.exp(u)
        p = t_two_sided_p(q, df)
        h = math.log(p) - target if p > 0 else -math.inf
        if h > 0:
            lo = u
        else:
            hi = u
        slope = -2.0 * math.exp(_t_log_pdf(q, df)) * q / p if p > 0 else -math.inf
        step = h / slope if math.isfinite(slope) and slope < 0 else math.nan
        nxt = u - step
        if not (math.isfinite(nxt) and lo < nxt < hi):
            nxt = (lo + hi) / 2.0
        if abs(nxt - u) < 1e-13:
            return math.exp(nxt)
        u = nxt
    return math.exp(u)


def gammainc_lower(s: float, x: float) -> float:
    """Regularized lower incomplete gamma function P(s, x), by its series (A&S 6.5.29)."""
    if x <= 0.0:
        return 0.0
    term = total = 1.0 / s
    k = 0
    while abs(term) > 1e-17 * abs(total) and k < 100000:
        k += 1
        term *= x / (s + k)
        total += term
    return min(1.0, math.exp(s * math.log(x) - x - math.lgamma(s)) * total)


@functools.lru_cache(maxsize=None)
def chi2_median(df: int) -> float:
    """The median of the chi-square distribution with df degrees of freedom (bisection on its CDF).
    The bracket is a function of itself alone, so once a step leaves it unchanged (it has shrunk to
    one or two floats, after about 60 of the 200 steps) every later step would too: stopping there
    returns the same float, at a third of the cost."""
    lo, hi = 0.0, df + 10.0 * math.sqrt(df) + 10.0
    for _ in range(200):
        mid = (lo + hi) / 2.0
        bracket = (mid, hi) if gammainc_lower(df / 2.0, mid / 2.0) < 0.5 else (lo, mid)
        if bracket == (lo, hi):
            break
        lo, hi = bracket
    return (lo + hi) / 2.0


def holm(p_values: Sequence[float]) -> np.ndarray:
    """Holm's step-down adjusted p-values (Holm 1979), in the order given; NaN stays NaN and does not
    count towards m. Rejecting where the adjusted p-value is below alpha keeps the family-wise error
    at alpha whatever the dependence between the tests."""
    p = np.asarray(p_values, dtype=float)
    out = np.full(p.shape, np.nan)
    ok = np.flatnonzero(np.isfinite(p))
    if not len(ok):
        return out
    order = ok[np.argsort(p[ok], kind="stable")]
    m = len(order)
    adjusted = np.minimum(1.0, np.maximum.accumulate((m - np.arange(m)) * p[order]))
    out[order] = adjusted
    return out


# --- runs as the unit of replication (compare) ------------------------------------------------------

# One side of one metric: case -> run -> that run's log value of the case (oriented: larger is better).
RunValues = Mapping[str, Mapping[str, float]]


@dataclass(frozen=True)
class _SideFit:
    """One side's decomposition: per case its mean over runs, run count and residual variance."""

    means: dict[str, float]
    runs: dict[str, int]
    own_var: dict[str, float]  # residual variance (k - 1 degrees of freedom); NaN with one run
    run_var: float  # variance of the run shifts; NaN with fewer than two runs
    run_df: int


def _fit_side(values: RunValues) -> _SideFit:
    cases = {c: {r: float(v) for r, v in runs.items() if math.isfinite(v)} for c, runs in values.items()}
    cases = {c: runs for c, runs in cases.items() if runs}
    means = {c: float(np.mean(list(runs.values()))) for c, runs in cases.items()}
    deviations: dict[str, list[float]] = {}
    for c, runs in cases.items():
        if len(runs) >= 2:
            for r, v in runs.items():
                deviations.setdefault(r, []).append(v - means[c])
    # statistics.median: np.median's value (the middle one, or the two middle ones' sum / 2), without
    # its per-call cost, which was most of a fit's on many runs (history refits one per change point)
    shift = {r: float(median(d)) for r, d in deviations.items()}
    own_var = {}
    for c, runs in cases.items():
        k = len(runs)
        if k < 2:
            own_var[c] = math.nan
            continue
        s = np.array([shift.get(r, 0.0) for r in runs])
        resid = np.array(list(runs.values())) - means[c] - (s - s.mean())
        own_var[c] = float(np.sum(resid**2) / (k - 1))
    n = len(shift)
    run_var = float(np.var(list(shift.values()), ddof=1)) if n >= 2 else math.nan
    return _SideFit(means, {c: len(r) for c, r in cases.items()}, own_var, run_var, max(n - 1, 0))


@dataclass(frozen=True)
class Spread:
    """The run-to-run spread of one metric's per-run log values, pooled over cases and both sides.

    A run's value of a case varies between runs by `run_var` (shared by every case of the run) plus
    `case_var` (its own); `floor` is a known per-run variance the user gave (`--noise`), below which
    no case's variance is taken."""

    run_var: float  # variance of whole-run shifts (0 when not observable)
    run_df: int  # its degrees of freedom: runs - 1, summed over the sides
    case_var: float  # pooled per-case (residual) variance; NaN when no case has 2 runs on a side
    case_df: int  # sum over cases and sides of runs - 1
    case_sides: int  # how many (case, side) variances were pooled
    floor: float = 0.0

    @property
    def observable(self) -> bool:
        return math.isfinite(self.case_var) or self.floor > 0

    @property
    def variance(self) -> float:
        """Run-to-run variance of one run's log value of a typical case (NaN when not observable)."""
        if not math.isfinite(self.case_var):
            return self.floor if self.floor > 0 else math.nan
        return max(self.run_var + self.case_var, self.floor)

    @property
    def sd(self) -> float:
        return math.sqrt(self.variance)

    @property
    def relative(self) -> float:
        return expm1(self.sd)

    @property
    def source(self) -> str:
        if math.isfinite(self.case_var):
            given = " (floored by --noise)" if self.floor > self.run_var + self.case_var else ""
            return f"estimated from {self.case_sides} case-sides with 2 or more runs{given}"
        if self.floor > 0:
            return "as given by --noise (no case has 2 runs on a side)"
        return "not observable: no case has 2 runs on either side"

    def side_variance(self, own: float) -> float:
        """Per-run variance of one side of one case whose own residual variance is `own` (NaN:
        unknown, one run): the run shifts' plus the larger of its own and the pooled."""
        if not math.isfinite(self.case_var):
            return self.floor
        case = max(own, self.case_var) if math.isfinite(own) else self.case_var
        return max(self.run_var + case, self.floor)

    def change_variance(self, own_base: float, own_cand: float, kb: int, kc: int) -> tuple[float, float]:
        """(variance, degrees of freedom) of the difference of the sides' means of a case with kb
        and kc runs and these own residual variances (NaN: unknown, the pooled one is used)."""
        inv = 1.0 / kb + 1.0 / kc
        if not math.isfinite(self.case_var):  # the floor alone: a known variance
            return self.floor * inv, math.inf
        vb = max(own_base, self.case_var) if math.isfinite(own_base) else self.case_var
        vc = max(own_cand, self.case_var) if math.isfinite(own_cand) else self.case_var
        a, b = self.run_var * inv, vb / kb + vc / kc
        if self.floor * inv > a + b:
            return self.floor * inv, math.inf
        # Welch-Satterthwaite: the run part has few degrees of freedom, the pooled part counts half.
        df_a, df_b = self.run_df, self.case_df / 2.0
        denom = (a * a / df_a if a > 0 and df_a > 0 else 0.0) + (b * b / df_b if b > 0 else 0.0)
        return a + b, ((a + b) ** 2 / denom) if denom > 0 else math.inf


def _pool(fits: Sequence[_SideFit], noise_sd: float | None) -> Spread:
    run_df = sum(f.run_df for f in fits if math.isfinite(f.run_var))
    run_var = (sum(f.run_var * f.run_df for f in fits if math.isfinite(f.run_var)) / run_df) if run_df else 0.0
    scaled, case_df = [], 0
    for f in fits:
        for c, var in f.own_var.items():
            if math.isfinite(var):
                nu = f.runs[c] - 1
                scaled.append(var / (chi2_median(nu) / nu))
                case_df += nu
    case_var = float(np.median(scaled)) if scaled else math.nan
    floor = math.log1p(noise_sd) ** 2 if noise_sd else 0.0
    return Spread(run_var, run_df, case_var, case_df, len(scaled), floor)


@dataclass(frozen=True)
class SideMean:
    """One side's estimate of a case: the mean of its per-run log values, that mean's sd, and its
    interval at the change's confidence and degrees of freedom."""

    mean: float
    se: float
    runs: int
    low: float = math.nan
    high: float = math.nan


@dataclass(frozen=True)
class Change:
    """A case's change from baseline to candidate, on the log scale (positive = better), with its
    interval at the per-case confidence and the two-sided p-value of no change."""

    estimate: float
    low: float
    high: float
    se: float
    df: float
    p: float
    base: SideMean
    cand: SideMean

    @property
    def runs(self) -> int:
        """The fewer runs of the two sides."""
        return min(self.base.runs, self.cand.runs)

    @property
    def ratio(self) -> float:
        """Candidate over baseline speedup (or baseline over candidate time): > 1 is better."""
        return exp(self.estimate)

    @property
    def ratio_low(self) -> float:
        return exp(self.low)

    @property
    def ratio_high(self) -> float:
        return exp(self.high)


def exp(x: float) -> float:
    """math.exp, inf where it would overflow: an interval from a wide spread of extreme values is
    wide, never an OverflowError."""
    try:
        return math.exp(x)
    except OverflowError:
        return math.inf


def expm1(x: float) -> float:
    """math.expm1, inf where it would overflow (as `exp`)."""
    try:
        return math.expm1(x)
    except OverflowError:
        return math.inf


@dataclass(frozen=True)
class Fit:
    """Both sides' decomposition and their pooled spread: what every case's change is computed from."""

    base: _SideFit
    cand: _SideFit
    spread: Spread

    @property
    def cases(self) -> set[str]:
        """The cases on both sides."""
        return self.base.means.keys() & self.cand.means.keys()

    def test(self, case: str) -> tuple[float, float, float, float]:
        """(estimate, standard error, degrees of freedom, two-sided p of no change) of one case on
        both sides; NaN but the estimate when the spread is not observable."""
        fb, fc = self.base, self.cand
        d = fc.means[case] - fb.means[case]
        if not self.spread.observable:
            return d, math.nan, math.nan, math.nan
        var, df = self.spread.change_variance(fb.own_var[case], fc.own_var[case], fb.runs[case], fc.runs[case])
        se = math.sqrt(var)
        if se > 0:
            return d, se, df, t_two_sided_p(d / se, df)
        return d, se, df, 1.0 if d == 0 else 0.0

    def change(self, case: str, confidence: float = DEFAULT_CONFIDENCE) -> Change:
        """The case's change with its interval at `confidence` (NaN without an observable spread)."""
        fb, fc = self.base, self.cand
        kb, kc = fb.runs[case], fc.runs[case]
        d, se, df, p = self.test(case)
        if not self.spread.observable:
            nan = math.nan
            return Change(d, nan, nan, nan, nan, nan, SideMean(fb.means[case], nan, kb), SideMean(fc.means[case], nan, kc))
        q = t_quantile(1.0 - confidence, df)
        sides = []
        for fit, k in ((fb, kb), (fc, kc)):
            mean, side_se = fit.means[case], math.sqrt(self.spread.side_variance(fit.own_var[case]) / k)
            sides.append(SideMean(mean, side_se, k, mean - q * side_se, mean + q * side_se))
        return Change(d, d - q * se, d + q * se, se, df, p, *sides)


def fit(base: RunValues, cand: RunValues, noise_sd: float | None = None) -> Fit:
    """Decompose both sides' per-run log values and pool their run-to-run spread (module docstring);
    `noise_sd` is a known relative run-to-run sd (0.03 = 3%) used as a floor."""
    fb, fc = _fit_side(base), _fit_side(cand)
    return Fit(fb, fc, _pool([fb, fc], noise_sd))


def run_changes(base: RunValues, cand: RunValues, confidence: float = DEFAULT_CONFIDENCE,
                noise_sd: float | None = None) -> tuple[Spread, dict[str, Change]]:
    """Each case's change between the sides from its per-run log values (see the module docstring).
    Cases on one side only are left out. Without an observable spread the intervals are NaN."""
    both = fit(base, cand, noise_sd)
    return both.spread, {case: both.change(case, confidence) for case in both.cases}


def verdict(change: Change, min_effect: float = DEFAULT_MIN_EFFECT, min_runs: int = DEFAULT_MIN_RUNS) -> str:
    """regressed / improved (the whole interval beyond the minimum effect), unchanged (the interval
    within it), ambiguous (the interval excludes no change but straddles the minimum effect), noisy
    (it straddles no change and reaches past the minimum effect); insufficient-runs when a side has
    fewer than min_runs runs or the spread is not observable."""
    if change.runs < min_runs or not (math.isfinite(change.low) and math.isfinite(change.high)):
        return INSUFFICIENT
    band = math.log1p(min_effect)
    if change.high <= -band:
        return REGRESSED
    if change.low >= band:
        return IMPROVED
    if change.low >= -band and change.high <= band:
        return UNCHANGED
    if change.high < 0 or change.low > 0:
        return AMBIGUOUS
    return NOISY


def detectable(spread: Spread, kb: int, kc: int, confidence: float = DEFAULT_CONFIDENCE) -> float:
    """The relative change a typical case (pooled variance, kb and kc runs) needs before its interval
    excludes no change: the interval's half-width, as a ratio - 1. NaN when not observable. A change
    of this size excludes no change about half the time; a verdict also needs the minimum effect
    (`verdict`), so `power_change` is the change found with a given power."""
    if not spread.observable or kb < 1 or kc < 1:
        return math.nan
    var, df = spread.change_variance(math.nan, math.nan, kb, kc)
    return expm1(t_quantile(1.0 - confidence, df) * math.sqrt(var))


def power_change(spread: Spread, kb: int, kc: int, confidence: float = DEFAULT_CONFIDENCE,
                 min_effect: float = DEFAULT_MIN_EFFECT, power: float = DEFAULT_POWER) -> float:
    """The relative change (a ratio - 1) a typical case (pooled variance, kb and kc runs) is called
    regressed (or improved) with probability `power` at `confidence`: its interval must clear the
    minimum effect, so the change is the minimum effect plus `t_power_shift` standard errors, on the
    log scale (the power of a one-sided t-test at the design's degrees of freedom). NaN when not
    observable."""
    if not spread.observable or kb < 1 or kc < 1:
        return math.nan
    var, df = spread.change_variance(math.nan, math.nan, kb, kc)
    shift = t_power_shift(t_quantile(1.0 - confidence, df), df, power)
    return expm1(math.log1p(min_effect) + shift * math.sqrt(var))


# math.erfc over an array, element by element (numpy has no erfc): the grid's arithmetic in numpy,
# the same values as a loop over its elements
_erfc = np.frompyfunc(math.erfc, 1, 1)


@functools.lru_cache(maxsize=65536)
def t_power_shift(q: float, df: float, power: float = DEFAULT_POWER) -> float:
    """The noncentrality nc (in standard errors) at which a t statistic with df degrees of freedom
    exceeds q with probability `power`: P((Z + nc) / sqrt(V) >= q) = power, Z standard normal and
    V chi-square(df) / df, so nc solves E_V[Phi(nc - q sqrt(V))] = power. The expectation is a sum
    over a grid of log V (its density normalised on the grid), the root by bisection; with df at
    the normal's (V = 1) it is q plus the normal quantile of `power`."""
    z = NormalDist().inv_cdf(power)
    if df >= NORMAL_DF:
        return q + z
    sd = math.sqrt(2.0 / df)
    log_v = np.linspace(max(-40.0, -12.0 * sd - 2.0 * sd * sd), 12.0 * sd, 401)
    v = np.exp(log_v)
    log_density = (df / 2.0) * (math.log(df / 2.0) + log_v) - df * v / 2.0 - math.lgamma(df / 2.0)
    weight = np.exp(log_density - log_density.max())
    weight /= weight.sum()
    root = q * np.sqrt(v)
    lo, hi = z, q + z + 10.0 * (1.0 + q)
    for _ in range(45):  # the bracket to about 1e-12 of its width
        nc = (lo + hi) / 2.0
        achieved = float(np.dot(weight, 0.5 * _erfc((root - nc) / math.sqrt(2.0)).astype(float)))
        lo, hi = (nc, hi) if achieved < power else (lo, nc)
    return (lo + hi) / 2.0

