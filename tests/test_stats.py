"""suite.analysis.stats: bootstrap of medians, the noise estimate, intervals and verdicts."""

from __future__ import annotations

import math

import numpy as np
import pytest

from suite.analysis import stats


def rng(seed=0):
    return np.random.default_rng(seed)


def test_as_samples_drops_what_cannot_be_a_time():
    assert stats.as_samples(None).size == 0
    assert stats.as_samples([1.0, float("nan"), -2.0, 0.0, float("inf"), 3.0]).tolist() == [1.0, 3.0]


@pytest.mark.parametrize("n", [300, 301, 1000])
def test_order_statistic_bootstrap_matches_direct_resampling(n):
    """The fast path (n > DIRECT_MAX) must give the distribution direct resampling gives: quantiles of
    the log-median replicates agree within Monte Carlo error. With 4000 direct resamples the 2.5%
    and 97.5% quantiles of a distribution with sd s are known to about 0.1 s, hence 0.15 s."""
    assert n > stats.DIRECT_MAX
    r = rng(n)
    x = r.lognormal(0.0, 0.3, size=n) * np.where(r.random(n) < 0.1, 2.0, 1.0)  # a slow tail, like load
    fast = stats.boot_log_medians(x, 20000, rng(1))
    idx = rng(2).integers(0, n, size=(4000, n))
    direct = np.log(np.median(x[idx], axis=1))
    s = direct.std()
    for q in (0.025, 0.5, 0.975):
        assert abs(np.quantile(fast, q) - np.quantile(direct, q)) < 0.15 * s + 1e-12
    assert fast.std() == pytest.approx(s, rel=0.1)


def test_order_stat_cdf_is_the_binomial_tail():
    """P(k-th smallest of a resample <= x_(j)) = P(Binomial(n, j/n) >= k), computed exactly here."""
    n, k = 301, 151
    cdf = stats.order_stat_cdf(n, k)
    assert np.all(np.diff(cdf) >= 0) and cdf[-1] == pytest.approx(1.0)
    for j in (130, 145, 151, 160, 175):
        p = j / n
        exact = sum(math.comb(n, i) * p**i * (1 - p) ** (n - i) for i in range(k, n + 1))
        assert cdf[j - 1] == pytest.approx(exact, abs=2e-3)


def test_small_samples_are_resampled_directly_and_deterministically():
    x = np.array([1.0, 1.1, 1.2, 1.3, 5.0])
    a = stats.boot_log_medians(x, 1000, rng(3))
    b = stats.boot_log_medians(x, 1000, rng(3))
    assert np.array_equal(a, b)
    assert set(np.round(np.exp(a), 6)) <= set(x)  # a median of 5 values is one of them


def test_pooled_side_widens_when_runs_disagree():
    reps_a = stats.boot_log_medians(rng(4).normal(10, 0.1, 200), 2000, rng(5))
    reps_b = stats.boot_log_medians(rng(6).normal(10, 0.1, 200), 2000, rng(7))
    agree = stats.side_estimate([0.0, 0.0], [reps_a - reps_a.mean(), reps_b - reps_b.mean()], rng(8))
    disagree = stats.side_estimate([0.0, 0.4], [reps_a - reps_a.mean(), reps_b - reps_b.mean() + 0.4], rng(8))
    assert agree.runs == disagree.runs == 2
    assert disagree.log_value == pytest.approx(0.2)
    assert disagree.se > 5 * agree.se


def _change(estimate, low, high):
    return stats.Change(estimate, low, high, (high - low) / 4)


@pytest.mark.parametrize(
    "estimate, low, high, expected",
    [
        (math.log(0.8), math.log(0.75), math.log(0.85), stats.REGRESSED),
        (math.log(1.3), math.log(1.2), math.log(1.4), stats.IMPROVED),
        (0.0, math.log(0.97), math.log(1.03), stats.UNCHANGED),  # inside +-5%
        (math.log(0.98), math.log(0.97), math.log(0.99), stats.UNCHANGED),  # significant, below 5%
        (math.log(0.8), math.log(0.5), math.log(1.2), stats.NOISY),  # straddles 1, reaches past 5%
        (math.log(0.9), math.log(0.8), math.inf, stats.NOISY),
    ],
)
def test_verdict_rules(estimate, low, high, expected):
    assert stats.verdict(_change(estimate, low, high), 0.05) == expected


def test_minimum_effect_is_respected():
    ch = _change(math.log(0.93), math.log(0.92), math.log(0.94))  # clearly significant, 7% slower
    assert stats.verdict(ch, 0.05) == stats.REGRESSED
    assert stats.verdict(ch, 0.10) == stats.UNCHANGED


def test_excess_noise_recovers_a_known_spread_and_ignores_real_changes():
    r = rng(9)
    tau = 0.10
    groups = [("gemm", p) for p in ("bf16", "fp16") for _ in range(100)]
    d = r.normal(0.0, tau, 200) + np.where(np.arange(200) < 100, 0.3, 0.0)  # bf16 all 35% faster
    d[:10] -= 1.0  # ten cases really regressed
    se = np.full(200, 0.02)
    est = stats.excess_noise(d, se, groups)
    # MAD-based sd of 200 normal draws has a relative sd of about 1.17/sqrt(200) = 8%; 25% is wide.
    assert est.source == "estimated" and est.sd == pytest.approx(math.sqrt(tau**2 - 0.02**2), rel=0.25)


def test_excess_noise_needs_enough_cases_and_subtracts_sampling():
    assert stats.excess_noise([0.1, -0.1], [0.01, 0.01], ["a", "a"]).source.startswith("not estimated")
    quiet = stats.excess_noise(np.linspace(-0.01, 0.01, 9), np.full(9, 0.05), ["a"] * 9)
    assert quiet.sd == 0.0  # the spread is all sampling error
    assert stats.given_noise(0.03).relative == pytest.approx(0.03)
    with pytest.raises(ValueError):
        stats.given_noise(-0.1)


def test_interval_with_heavy_tailed_noise_is_wider_than_sampling_alone():
    reps = rng(10).normal(0.0, 0.01, 2000)
    bare = stats.interval(0.0, reps, 0.0, 0.99, rng(11))
    noisy = stats.interval(0.0, reps, stats.NoiseEstimate(0.05, 20, "estimated"), 0.99, rng(11))
    # sampling alone: +-2.58 * 0.01; t3 noise of MAD-equivalent sd 0.05 has a 99.5% quantile of
    # 5.84 * 0.05 / 1.134 = 0.26, far wider than a normal's 0.13.
    assert bare.high == pytest.approx(0.0258, rel=0.15)
    assert 0.2 < noisy.high < 0.33 and -0.33 < noisy.low < -0.2
    assert noisy.low <= noisy.estimate <= noisy.high
