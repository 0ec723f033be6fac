"""suite.analysis.regression.stats: distributions, runs as the unit of replication, verdicts, Holm's adjustment."""

from __future__ import annotations

import math

from statistics import NormalDist

import numpy as np
import pytest

from suite.analysis.regression import stats


def rng(seed=0):
    return np.random.default_rng(seed)


# --- distributions ---------------------------------------------------------------------------------

@pytest.mark.parametrize("alpha", [0.5, 0.05, 0.01, 1e-4, 1e-7])
def test_t_quantiles_match_closed_forms(alpha):
    # df = 1 (Cauchy): q = tan(pi/2 (1 - alpha)); df = 2: q = c sqrt(2 / (1 - c^2)) with c = 1 - alpha;
    # df -> inf: the normal.
    assert stats.t_quantile(alpha, 1) == pytest.approx(math.tan(math.pi / 2 * (1 - alpha)), rel=1e-9)
    c = 1 - alpha
    assert stats.t_quantile(alpha, 2) == pytest.approx(c * math.sqrt(2 / (1 - c * c)), rel=1e-9)
    z = NormalDist().inv_cdf(1 - alpha / 2)
    assert stats.t_quantile(alpha, math.inf) == pytest.approx(z, rel=1e-12)
    assert stats.t_quantile(alpha, 5e4) == pytest.approx(z, rel=1e-3)
    for df in (1, 2.5, 3, 10, 40, 1000):
        q = stats.t_quantile(alpha, df)
        assert stats.t_two_sided_p(q, df) == pytest.approx(alpha, rel=1e-9)


def test_t_table_values():
    # Printed tables (e.g. NIST/SEMATECH e-Handbook 1.3.6.7.2): two-sided 95% and 99% points.
    for alpha, df, q in [(0.05, 3, 3.182), (0.05, 10, 2.228), (0.01, 10, 3.169), (0.01, 40, 2.704),
                         (0.05, 100, 1.984)]:
        assert stats.t_quantile(alpha, df) == pytest.approx(q, abs=6e-4)


def test_incomplete_beta_and_gamma():
    # I_x(a, b) for integer a, b is a binomial tail: P(Binomial(a + b - 1, x) >= a).
    for a, b, x in [(2, 3, 0.4), (5, 1, 0.9), (7, 9, 0.3), (30, 40, 0.45)]:
        n = a + b - 1
        tail = sum(math.comb(n, j) * x**j * (1 - x) ** (n - j) for j in range(a, n + 1))
        assert stats.betainc(a, b, x) == pytest.approx(tail, rel=1e-10)
    # chi-square medians: df = 2 is exponential (2 ln 2); df = 1 is the square of the normal's 75% point.
    assert stats.chi2_median(2) == pytest.approx(2 * math.log(2), rel=1e-10)
    assert stats.chi2_median(1) == pytest.approx(NormalDist().inv_cdf(0.75) ** 2, rel=1e-10)
    assert stats.gammainc_lower(3, 2.0) == pytest.approx(1 - math.exp(-2) * (1 + 2 + 2), rel=1e-12)


def test_chi2_median_stops_bisecting_where_the_bracket_stops_moving_and_returns_the_same_float():
    """The 200 steps it used to take, against the early stop (issue #35: history needs a median per
    run count, up to the number of runs)."""
    def all_steps(df):
        lo, hi = 0.0, df + 10.0 * math.sqrt(df) + 10.0
        for _ in range(200):
            mid = (lo + hi) / 2.0
            if stats.gammainc_lower(df / 2.0, mid / 2.0) < 0.5:
                lo = mid
            else:
                hi = mid
        return (lo + hi) / 2.0

    for df in [*range(1, 41), 97, 250]:
        assert stats.chi2_median.__wrapped__(df) == all_steps(df), df


def test_holm_adjusts_step_down_and_skips_missing_tests():
    adjusted = stats.holm([0.01, 0.04, 0.03, math.nan, 0.005])
    # sorted 0.005, 0.01, 0.03, 0.04 with m = 4: x4, x3, x2, x1, each at least the one before
    assert adjusted[[4, 0, 2, 1]] == pytest.approx([0.02, 0.03, 0.06, 0.06])
    assert math.isnan(adjusted[3])
    assert stats.holm([0.5, 0.9]) == pytest.approx([1.0, 1.0])
    assert stats.holm([]).size == 0


# --- runs as the unit of replication ------------------------------------------------------------------

def runs_of(values: np.ndarray, prefix: str) -> dict:
    """{case: {run: value}} from a (runs, cases) array."""
    return {f"c{j}": {f"{prefix}{i}": float(values[i, j]) for i in range(values.shape[0])}
            for j in range(values.shape[1])}


def test_pooled_spread_recovers_the_run_to_run_sd_and_intervals_cover():
    r = rng(20)
    sd, cases, k = 0.04, 40, 3
    base = runs_of(r.normal(0.0, sd, (k, cases)), "b")
    cand = runs_of(r.normal(0.0, sd, (k, cases)) + 0.3, "c")  # every case 35% better: not noise
    spread, changes = stats.run_changes(base, cand, 0.99)
    # the median of 80 variances with 2 df each: about 12% relative error in the sd, 25% is wide
    assert math.sqrt(spread.run_var + spread.case_var) == pytest.approx(sd, rel=0.25)
    assert spread.case_df == 2 * cases * (k - 1) and spread.run_df == 2 * (k - 1)
    assert len(changes) == cases
    assert all(ch.low < 0.3 < ch.high for ch in changes.values())
    assert all(ch.base.runs == ch.cand.runs == k for ch in changes.values())
    assert all(stats.verdict(ch) == stats.IMPROVED for ch in changes.values())


def test_a_case_with_a_burst_keeps_its_own_variance():
    r = rng(21)
    base = r.normal(0.0, 0.01, (3, 20))
    cand = r.normal(0.0, 0.01, (3, 20))
    cand[0, 0] -= math.log(2)  # one run of one case 2x slow
    spread, changes = stats.run_changes(runs_of(base, "b"), runs_of(cand, "c"), 0.99)
    hit, calm = changes["c0"], changes["c1"]
    assert hit.se > 10 * calm.se
    assert stats.verdict(hit) == stats.NOISY  # a third of its runs 2x slow: not a regression
    assert spread.case_var < 0.01**2 * 2  # the pooled floor does not take the burst in


def test_whole_run_shifts_are_shared_by_every_case_and_have_few_degrees_of_freedom():
    r = rng(22)
    shift = 0.05
    base = r.normal(0.0, 0.005, (3, 30)) + r.normal(0.0, shift, (3, 1))
    cand = r.normal(0.0, 0.005, (3, 30)) + r.normal(0.0, shift, (3, 1))
    spread, changes = stats.run_changes(runs_of(base, "b"), runs_of(cand, "c"), 0.99)
    assert spread.run_var > 10 * spread.case_var and spread.run_df == 4
    ch = changes["c0"]
    # the shift dominates the variance: the degrees of freedom are those of 6 runs, not of 180 values
    assert ch.df < 10
    # the pooled variance is a floor: a case whose own is smaller gets exactly it, none gets less
    var, _ = spread.change_variance(math.nan, math.nan, 3, 3)
    assert min(c.se for c in changes.values()) == pytest.approx(math.sqrt(var))


def test_one_run_per_side_gives_no_interval_unless_a_noise_floor_is_known():
    base = runs_of(np.array([[0.0, 0.1, 0.2]]), "b")
    cand = runs_of(np.array([[-0.4, 0.1, 0.2]]), "c")
    spread, changes = stats.run_changes(base, cand, 0.99)
    assert not spread.observable and "not observable" in spread.source
    assert math.isnan(changes["c0"].low) and stats.verdict(changes["c0"], min_runs=1) == stats.INSUFFICIENT
    assert changes["c0"].estimate == pytest.approx(-0.4)
    floored, changes = stats.run_changes(base, cand, 0.99, noise_sd=0.05)
    assert floored.observable and floored.sd == pytest.approx(math.log1p(0.05))
    ch = changes["c0"]
    assert ch.df == math.inf and ch.se == pytest.approx(math.log1p(0.05) * math.sqrt(2))
    assert stats.verdict(ch, min_runs=1) == stats.REGRESSED
    assert stats.verdict(ch) == stats.INSUFFICIENT  # the default asks for 3 runs per side


def test_detectable_change_is_the_typical_half_width():
    r = rng(23)
    spread, changes = stats.run_changes(runs_of(r.normal(0, 0.03, (3, 20)), "b"),
                                        runs_of(r.normal(0, 0.03, (3, 20)), "c"), 0.99)
    var, df = spread.change_variance(math.nan, math.nan, 3, 3)
    assert stats.detectable(spread, 3, 3, 0.99) == pytest.approx(math.expm1(stats.t_quantile(0.01, df) * math.sqrt(var)))
    assert stats.detectable(spread, 5, 5, 0.99) < stats.detectable(spread, 3, 3, 0.99)


def test_the_power_shift_is_the_noncentral_t_quantile_by_simulation():
    """t_power_shift(q, df): a t statistic centred there exceeds q with the given power, checked
    against (Z + nc) / sqrt(chi-square(df) / df) drawn 200000 times (seeded); at the normal's df
    it is q plus the normal quantile."""
    r = rng(31)
    for df in (2.0, 4.0, 13.0, 60.0):
        q = stats.t_quantile(0.01, df)
        for power in (0.5, 0.8, 0.95):
            nc = stats.t_power_shift(q, df, power)
            t = (r.standard_normal(200_000) + nc) / np.sqrt(r.chisquare(df, 200_000) / df)
            assert np.mean(t >= q) == pytest.approx(power, abs=0.005), (df, power)
    assert stats.t_power_shift(2.0, math.inf, 0.8) == pytest.approx(2.0 + 0.8416212335729143)


def test_the_change_found_with_80_percent_power_is_called_regressed_that_often():
    """power_change: a case at the pooled spread (its own variance no larger on either side) changed
    by it is called regressed 80% of the time at 99%, by simulation through fit and verdict (3 runs
    per side, 3% noise, 40 cases, 80 draws, seeded); the interval's half-width (`detectable`) is
    smaller by the minimum effect and more. A case noisier than the pool needs a larger change."""
    r = rng(32)
    spread, _ = stats.run_changes(runs_of(r.normal(0, 0.03, (3, 40)), "b"), runs_of(r.normal(0, 0.03, (3, 40)), "c"))
    change = stats.power_change(spread, 3, 3, 0.99, 0.05)
    var, df = spread.change_variance(math.nan, math.nan, 3, 3)
    assert math.log1p(change) == pytest.approx(
        math.log1p(0.05) + stats.t_power_shift(stats.t_quantile(0.01, df), df, 0.8) * math.sqrt(var))
    assert change > stats.detectable(spread, 3, 3, 0.99) + 0.05
    found = tests = 0
    for _ in range(80):
        base, cand = r.normal(0, 0.03, (3, 40)), r.normal(-math.log1p(change), 0.03, (3, 40))
        both = stats.fit(runs_of(base, "b"), runs_of(cand, "c"))
        pooled = both.spread.case_var
        typical = [c for c in both.cases if max(both.base.own_var[c], both.cand.own_var[c]) <= pooled]
        found += sum(stats.verdict(both.change(c)) == stats.REGRESSED for c in typical)
        tests += len(typical)
    assert tests > 500 and 0.74 <= found / tests <= 0.86, (found, tests)


def test_a_fit_is_the_comparison_split_in_two_steps():
    """history tests many splits with one fit per pair of run sets: `fit` then `Fit.change` is
    exactly `run_changes`, and `Fit.test` is the change's estimate, standard error, df and p."""
    r = rng(24)
    base, cand = runs_of(r.normal(0, 0.03, (3, 12)), "b"), runs_of(r.normal(0.1, 0.03, (4, 12)), "c")
    spread, changes = stats.run_changes(base, cand, 0.95)
    both = stats.fit(base, cand)
    assert both.spread == spread and both.cases == set(changes)
    for case, ch in changes.items():
        assert both.change(case, 0.95) == ch
        assert both.test(case) == (ch.estimate, ch.se, ch.df, ch.p)


def _change(estimate, low, high, runs=3):
    side = stats.SideMean(0.0, 0.0, runs)
    return stats.Change(estimate, low, high, (high - low) / 4, 10.0, 0.01, side, side)


@pytest.mark.parametrize(
    "estimate, low, high, expected",
    [
        (math.log(0.8), math.log(0.75), math.log(0.85), stats.REGRESSED),
        (math.log(1.3), math.log(1.2), math.log(1.4), stats.IMPROVED),
        (0.0, math.log(0.97), math.log(1.03), stats.UNCHANGED),  # inside +-5%
        (math.log(0.98), math.log(0.97), math.log(0.99), stats.UNCHANGED),  # significant, within 5%
        (math.log(0.9), math.log(0.8), math.log(0.97), stats.AMBIGUOUS),  # 10% slower, interval reaches inside 5%
        (math.log(0.96), math.log(0.93), math.log(0.99), stats.AMBIGUOUS),  # 4% slower, interval reaches past 5%
        (math.log(1.06), math.log(1.01), math.log(1.12), stats.AMBIGUOUS),  # faster, straddles +5%
        (math.log(0.95), math.log(0.9), math.log(1 / 1.05), stats.REGRESSED),  # the interval just clears 5%
        (math.log(0.8), math.log(0.5), math.log(1.2), stats.NOISY),  # straddles 1, reaches past 5%
        (math.log(0.9), math.nan, math.nan, stats.INSUFFICIENT),  # no interval: spread not observable
    ],
)
def test_verdict_rules(estimate, low, high, expected):
    assert stats.verdict(_change(estimate, low, high), 0.05) == expected


def test_minimum_effect_and_minimum_runs_are_respected():
    ch = _change(math.log(0.93), math.log(0.92), math.log(0.94))  # clearly significant, 7% slower
    assert stats.verdict(ch, 0.05) == stats.REGRESSED
    assert stats.verdict(ch, 0.10) == stats.UNCHANGED
    assert stats.verdict(ch, 0.05, min_runs=4) == stats.INSUFFICIENT
    assert stats.verdict(_change(math.log(0.8), math.log(0.75), math.log(0.85), runs=1), 0.05) == stats.INSUFFICIENT
