"""The timing loop: stopping rule, warm-up rule, flush sizing and the CUDA clock's logic, all on
synthetic sample streams with a fake clock (virtual time: nothing here depends on this machine's
speed), and the CUDA device parts replaced by a fake event/graph/buffer API."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError

from suite.measure import timing
from suite.scenario import stop_rule
from suite.core.quantiles import median_interval, median_level, median_rank, rel_ci_of_median, rel_spread
from suite.measure.timing import CpuClock, CudaClock, StopRule, TimingUnsupported, flush_bytes, measure, warmup_done
from tests.virtual_clock import per_call, shared

MiB = 2**20


def run(ms, rule=StopRule(), **kw):
    clock = per_call(ms)
    return measure(lambda: None, clock, rule, wall=clock.wall, **kw), clock


# --- statistics -------------------------------------------------------------------------------


def test_spread_and_ci_of_the_median_by_hand():
    xs = [5.0, 1.0, 4.0, 2.0, 3.0]  # quartiles 2 and 4 (linear interpolation), median 3
    assert rel_spread(xs) == pytest.approx(2 / 3)
    # five values are too few for 95%: their range, which covers 1 - 2 / 2^5 = 93.75%
    assert median_interval(xs) == (1.0, 5.0, 0.9375)
    assert rel_ci_of_median(xs) == pytest.approx((5 - 1) / 2 / 3)
    assert rel_ci_of_median([1.0]) == math.inf
    # 30 values: x(10) and x(21), P(B <= 9) = 0.021387 for B ~ Binomial(30, 1/2), P(B <= 10) = 0.049369
    assert median_interval([float(i) for i in range(1, 31)]) == pytest.approx((10.0, 21.0, 1 - 2 * 0.0213873), abs=1e-6)


def binomial_cdf(k: int, n: int) -> float:
    """P(B <= k), B ~ Binomial(n, 1/2), summed exactly in integers."""
    return sum(math.comb(n, i) for i in range(k + 1)) / 2**n


@pytest.mark.parametrize("n", range(1, 80))
def test_the_median_interval_is_the_narrowest_order_statistics_at_95_percent_or_their_range(n):
    j, level = median_rank(n)
    assert level == pytest.approx(1 - 2 * binomial_cdf(j - 1, n), abs=1e-12)
    if n >= 6:  # enough values: at least 95%, and one rank further in would be below it
        assert level >= 0.95 and (j == (n + 1) // 2 or 1 - 2 * binomial_cdf(j, n) < 0.95)
    else:  # too few: the range, at the level it has (1 value 0%, 3 values 75%), which is said
        assert j == 1 and level == pytest.approx(1 - 2 ** (1 - n)) and level < 0.95


# Timing-like distributions of single samples, each with its true median: symmetric noise, a right
# skew (lognormal) and a long right tail (a fixed time plus an exponential wait).
SAMPLE_DISTRIBUTIONS = {
    "normal": (lambda rng, size: 1.0 + 0.05 * rng.standard_normal(size), 1.0),
    "lognormal": (lambda rng, size: np.exp(0.3 * rng.standard_normal(size)), 1.0),
    "tail": (lambda rng, size: 1.0 + rng.exponential(0.1, size), 1.0 + 0.1 * math.log(2)),
}
REPLICATES = 20000  # Monte Carlo error of a coverage near 95%: 0.15 points


def covered(draw, true: float, n: int, rng) -> tuple[float, float, float]:
    """Over REPLICATES samples of n: how often the median's order-statistic interval and the stored
    ± (rel_ci_of_median around the sample median) hold the true median, and the level they say
    (the order statistics taken for all samples at once, as `median_interval` takes them for one)."""
    xs = np.sort(draw(rng, (REPLICATES, n)), axis=1)
    j, level = median_rank(n)
    low, high, median = xs[:, j - 1], xs[:, n - j], np.median(xs, axis=1)
    plus_minus = (high - low) / 2 / median
    for row in range(3):  # the same as the suite's own functions give
        assert median_interval(list(xs[row])) == (low[row], high[row], level)
        assert rel_ci_of_median(list(xs[row])) == pytest.approx(plus_minus[row])
    hits = np.mean((low <= true) & (true <= high))
    return float(hits), float(np.mean(np.abs(median - true) <= plus_minus * median)), level


@pytest.mark.parametrize("name", SAMPLE_DISTRIBUTIONS)
def test_the_median_interval_covers_what_its_level_says(name):
    """Issue #38: McGill's 1.57 IQR / sqrt(n) covered 88% at n = 30 and 68-72% at n = 3-5 while
    called 95%. The order statistics cover their stated level within 2 points at every n, the
    range of 3 or 5 values included, and so does the record's ± around the median from 6 values on;
    with 3 to 5 it is the range's half-width around the middle value, short of the stored level by
    up to 5 points (3 values under the long tail: 70.6% against 75%), as the column and
    docs/timing.md say (they said "at least" before)."""
    draw, true = SAMPLE_DISTRIBUTIONS[name]
    rng = np.random.default_rng(38)
    for n in (3, 5, 6, 10, 30, 200):
        interval, plus_minus, level = covered(draw, true, n, rng)
        assert abs(interval - level) <= 0.02, (n, interval, level)
        if n >= 6:
            assert abs(plus_minus - level) <= 0.02, (n, plus_minus, level)
        else:
            assert level - 0.05 <= plus_minus < level, (n, plus_minus, level)
        assert level >= 0.95 or n <= 5


def test_the_paired_speedups_interval_covers_its_stored_level_at_every_round_count():
    """Issue #38: 1 to 5 rounds gave their range, called a 95% interval (1 round 0%, 3 rounds 75%);
    now `speedup_paired_level` says what it covers, and it does, within 2 points."""
    from types import SimpleNamespace

    from suite.measure import record

    rng = np.random.default_rng(3)
    for rounds in (1, 2, 3, 5, 6, 9, 20):
        hits, level = 0, None
        for _ in range(2000):
            base = 2.0 * np.exp(0.05 * rng.standard_normal(rounds))  # the true speedup is 2
            columns = record.paired_speedup(SimpleNamespace(batch_medians_ms=list(base)),
                                            SimpleNamespace(batch_medians_ms=[1.0] * rounds))
            hits += columns["speedup_paired_low"] <= 2.0 <= columns["speedup_paired_high"]
            level = columns["speedup_paired_level"]
        assert level == median_level(rounds) and abs(hits / 2000 - level) <= 0.02, (rounds, hits, level)


def test_a_committed_run_reads_with_its_paired_intervals_level_and_its_stored_ends():
    """Runs before issue #38 stored the same order statistics, called 95%: reading them adds the
    level their round count gives (5 rounds: their range, 93.75%) and leaves the ends as stored."""
    from pathlib import Path

    import pyarrow.parquet as pq

    from suite.results import store

    path = sorted((Path(__file__).parent.parent / "results/reference/paired_stability/quiet").rglob("*.parquet"))[0]
    stored = pq.read_table(path).to_pandas()
    assert "speedup_paired_level" not in stored and "rel_ci_level" not in stored
    df = store.read_file(path)
    paired = df["paired_rounds"].notna()
    assert paired.any()
    expected = [median_level(int(n)) for n in df.loc[paired, "paired_rounds"]]
    assert df.loc[paired, "speedup_paired_level"].tolist() == pytest.approx(expected)
    assert df["speedup_paired_low"].equals(stored["speedup_paired_low"])
    assert df.loc[~paired, "speedup_paired_level"].isna().all()


@pytest.mark.parametrize("drift", [0.0, 0.05])
def test_a_records_rel_ci_covers_at_least_its_stored_level(drift):
    """`rel_ci` is the larger of the samples' and the batch medians' half-widths, and `rel_ci_level`
    the lower of their levels: with independent samples (drift 0) the samples' interval holds it,
    with a level that moves from batch to batch (drift 5%) the batches' does."""
    rng = np.random.default_rng(7)
    hits, levels = 0, set()
    for _ in range(1000):
        offsets = np.repeat(drift * rng.standard_normal(4), 10)  # 4 batches of 10 samples
        samples = list(1.0 + offsets + 0.02 * rng.standard_normal(40))
        batches = [timing.Batch(0.0, 0.0, 10)] * 4
        m = timing.Measurement(samples, "budget", 0, 0.0, "perf_counter", batches=batches)
        hits += abs(m.median_ms - 1.0) <= m.rel_ci * m.median_ms
        levels.add(m.rel_ci_level)
    assert levels == {median_level(4)} and hits / 1000 >= median_level(4) - 0.02


# --- stopping rule ----------------------------------------------------------------------------


def test_a_steady_stream_converges():
    m, _ = run(lambda i, now: 1.0)
    assert m.stop_reason == "converged"
    assert m.rel_ci == 0 and m.median_ms == 1.0
    assert len(m.samples_ms) >= StopRule().min_samples


def test_converged_means_a_95_percent_interval_within_the_target():
    # five samples give only their range (93.75%): the rule's target is a 95% half-width, so a sixth
    assert timing.stop_reason([1.0] * 5, 0.0, StopRule(min_samples=5)) is None
    assert timing.stop_reason([1.0] * 6, 0.0, StopRule(min_samples=5)) == "converged"


def test_a_noisy_stream_stops_on_the_budget():
    # alternating 1 ms / 2 ms: IQR/median = 2/3, so the CI would need ~11000 samples to reach 1%
    rule = StopRule(budget_s=0.5, max_samples=5000)
    m, clock = run(lambda i, now: 1.0 + i % 2, rule)
    assert m.stop_reason == "budget"
    spent = m.batches[-1].end_s - m.batches[0].start_s
    # stops at the first check past the budget; a batch is ~10% of the budget
    assert rule.budget_s <= spent <= 1.2 * rule.budget_s
    assert m.rel_ci > rule.target_rel_ci


def test_max_samples_caps_the_count_exactly():
    rule = StopRule(budget_s=100.0, max_samples=200)
    m, _ = run(lambda i, now: 1.0 + i % 2, rule)
    assert m.stop_reason == "max_samples" and len(m.samples_ms) == 200


def test_min_samples_are_taken_even_past_the_budget():
    rule = StopRule(budget_s=0.001, min_samples=20, warmup_s=0.0)
    m, _ = run(lambda i, now: 50.0 + i % 3, rule)  # 50 ms calls: one call already spends the budget
    assert len(m.samples_ms) >= 20 and m.stop_reason == "budget"


def test_a_tighter_target_takes_more_samples():
    noisy = lambda i, now: 1.0 + 0.1 * ((i * 7919) % 13) / 13  # deterministic spread of ~10%
    loose, _ = run(noisy, StopRule(target_rel_ci=0.05, budget_s=10))
    tight, _ = run(noisy, StopRule(target_rel_ci=0.002, budget_s=10, max_samples=100000))
    assert loose.stop_reason == tight.stop_reason == "converged"
    assert loose.rel_ci <= 0.05 and tight.rel_ci <= 0.002
    assert len(tight.samples_ms) > len(loose.samples_ms)


def test_batches_cover_every_sample_in_time_order():
    m, _ = run(lambda i, now: 1.0 + i % 2, StopRule(budget_s=0.3))
    assert sum(b.reps for b in m.batches) == len(m.samples_ms)
    ends = [(b.start_s, b.end_s) for b in m.batches]
    assert all(s <= e for s, e in ends) and all(e1 <= s2 for (_, e1), (s2, _) in zip(ends, ends[1:]))
    assert m.window == (m.batches[0].start_s, m.batches[-1].end_s)
    assert m.warmup_s <= m.batches[0].start_s + 1e-12  # the warm-up is not measured


# --- warm-up rule -----------------------------------------------------------------------------


def test_warm_up_lasts_until_a_ramp_ends():
    # 50 ms first call (compile), then 2 ms falling linearly to 1 ms over 0.3 s (a clock ramping up)
    def ramp(i, now):
        return 50.0 if i == 0 else 1.0 + max(0.0, 0.3 - now) / 0.3

    m, _ = run(ramp, StopRule(warmup_max_s=5.0))
    assert m.warmup_reason == "settled"
    # settled means two consecutive batches within 3%: at most ~3% of ramp left, i.e. now >= ~0.29 s
    assert m.warmup_s >= 0.28
    assert m.median_ms == pytest.approx(1.0, rel=0.01)


def test_a_fixed_count_warm_up_would_have_measured_the_ramp():
    # the same stream with the rule's minimums only: the median would be off by tens of percent
    ramp = lambda i, now: 1.0 + max(0.0, 0.3 - now) / 0.3
    m, _ = run(ramp, StopRule(warmup_s=0.0, warmup_max_s=0.0, min_warmup=2, budget_s=0.05))
    assert m.warmup_reason == "cap" and m.median_ms > 1.3


def test_warm_up_stops_at_the_cap_when_never_settled():
    # batch medians alternate between 1 and 2 ms
    rule = StopRule(warmup_max_s=0.5)
    clock = per_call(lambda i, now: 1.0 + len(clock.batches) % 2)
    m = measure(lambda: None, clock, rule, wall=clock.wall)
    assert m.warmup_reason == "cap"
    assert rule.warmup_max_s <= m.warmup_s <= rule.warmup_max_s + 0.05  # one batch is ~25 ms


def test_a_rising_sm_clock_keeps_the_warm_up_going():
    reads = iter([1000, 1200, 1400, 1600, 1800, 1980, 1980, 1980, 1980, 1980] + [1980] * 100)
    seen = []

    def sm_clock():
        seen.append(next(reads))
        return seen[-1]

    m, _ = run(lambda i, now: 1.0, StopRule(warmup_s=0.0), sm_clock_mhz=sm_clock)
    assert m.warmup_reason == "settled"
    assert len(seen) >= 7 and seen[-1] == seen[-2] == 1980  # only once the clock stopped rising
    # the same steady stream without a sensor settles after batch 0 and two agreeing batches
    m2, _ = run(lambda i, now: 1.0, StopRule(warmup_s=0.0))
    assert len(m2.warmup_medians_ms) == 3


def test_slow_calls_warm_up_in_smaller_batches_near_the_cap():
    rule = StopRule()  # 0.1 s minimum, 1 s cap
    assert timing.warmup_batch(0.01, 0.0, rule) == 2500  # a quarter of warmup_s
    assert timing.warmup_batch(10.0, 0.0, rule) == 5  # at least 5 calls ...
    assert timing.warmup_batch(300.0, 0.2, rule) == 2  # ... unless the cap comes first
    assert timing.warmup_batch(300.0, 0.9, rule) == 1
    m, _ = run(lambda i, now: 300.0 + 30 * (i % 2))  # 0.3 s calls that never settle within 10%
    assert m.warmup_reason == "cap" and m.warmup_s < 1.0 + 0.35


def test_warmup_done_ignores_the_first_batch_and_honours_the_minimum_time():
    rule = StopRule(warmup_s=0.1, warmup_tol=0.03, warmup_agree=1)
    none = [None] * 3
    assert warmup_done([50.0, 1.0, 1.01], none, 0.2, 12, rule) == "settled"
    assert warmup_done([1.0, 1.0], none[:2], 0.2, 7, rule) is None  # batch 0 does not count
    assert warmup_done([50.0, 1.0, 1.01], none, 0.05, 12, rule) is None  # below warmup_s
    assert warmup_done([50.0, 1.0, 1.05], none, 0.2, 12, rule) is None  # 5% apart
    assert warmup_done([50.0, 1.0, 1.05], none, rule.warmup_cap_s, 12, rule) == "cap"
    assert warmup_done([50.0, 1.0, 1.0], [None, 1500.0, 1700.0], 0.2, 12, rule) is None  # clock rising


# --- settings ---------------------------------------------------------------------------------


@pytest.mark.parametrize("bad", [
    {"graph_calls": 4},  # needs cuda_graph
    {"graph_calls": 4, "mode": "cuda_graph", "cache": "cold"},  # a flush per replay: only call 1 cold
    {"min_samples": 10, "max_samples": 5},
    {"warmup_s": 2.0, "warmup_max_s": 1.0},
    {"cache": "lukewarm"},
    {"mode": "graph"},
])
def test_inconsistent_timing_settings_are_rejected(bad):
    with pytest.raises(ValidationError):
        StopRule(**bad)


def test_the_warm_up_cap_defaults_to_one_second_or_warmup_s():
    assert StopRule().warmup_cap_s == stop_rule.DEFAULT_WARMUP_CAP_S == 1.0
    assert StopRule(warmup_s=2.0).warmup_cap_s == 2.0  # a longer minimum is never cut short
    assert StopRule(warmup_s=0.5, warmup_max_s=3.0).warmup_cap_s == 3.0


def test_cache_auto_is_cold_on_cuda_and_warm_on_cpu():
    assert StopRule().resolved_cache("cuda") == "cold"
    assert StopRule().resolved_cache("cpu") == "warm"
    assert StopRule(cache="warm").resolved_cache("cuda") == "warm"


# --- flush sizing -----------------------------------------------------------------------------


@pytest.mark.parametrize("l2_mib", [6, 40, 50, 60, 96, 126])  # T4/A100 40 MiB/H100 50/H200 60 (props)
def test_flush_is_at_least_the_l2(l2_mib):
    assert flush_bytes(l2_mib * MiB) >= l2_mib * MiB


@given(st.integers(min_value=1, max_value=2**40))
def test_flush_is_never_smaller_than_the_cache(cache_bytes):
    assert flush_bytes(cache_bytes) >= cache_bytes


def test_unknown_l2_flushes_256_mib():
    assert flush_bytes(None) == flush_bytes(0) == 256 * MiB


def test_llc_size_from_sysfs(tmp_path):
    for i, (level, kind, size) in enumerate([(1, "Data", "48K"), (1, "Instruction", "32K"), (2, "Unified", "2048K"),
                                             (3, "Unified", "300M")]):
        d = tmp_path / f"index{i}"
        d.mkdir()
        (d / "level").write_text(f"{level}\n")
        (d / "type").write_text(f"{kind}\n")
        (d / "size").write_text(f"{size}\n")
    assert timing.cpu_llc_bytes(tmp_path) == 300 * MiB
    assert timing.cpu_llc_bytes(tmp_path / "missing") is None


# --- clocks -----------------------------------------------------------------------------------


def test_cpu_clock_cold_cache_touches_the_flush_buffer_each_repetition():
    buffer = torch.zeros(4096, dtype=torch.uint8)
    clock = CpuClock(cache="cold", flush=timing._Flush(lambda: buffer))
    samples = clock.time_batch(lambda: None, 3)
    assert len(samples) == 3 and int(buffer[0]) == 3 and int(buffer[-1]) == 3


def test_cpu_clock_warm_cache_allocates_nothing():
    made = []
    clock = CpuClock(cache="warm", flush=timing._Flush(lambda: made.append(1)))
    clock.time_batch(lambda: None, 3)
    assert made == []


def test_cpu_clock_refuses_cuda_graphs():
    with pytest.raises(TimingUnsupported, match="CUDA"):
        CpuClock().for_rule(StopRule(mode="cuda_graph"))
    assert CpuClock().for_rule(StopRule()).cache == "warm"


class FakeCudaApi:
    """Events read a virtual GPU timeline (ms); a flush costs 7 ms of it, a call 1 ms."""

    FLUSH_MS, CALL_MS = 7.0, 1.0

    def __init__(self, l2=50 * MiB):
        self.t, self.l2 = 0.0, l2
        self.syncs = self.flushes = self.captures = 0
        self.buffers: list[int] = []

    def fn(self):
        self.t += self.CALL_MS

    def event(self):
        api = self

        class Event:
            def record(self):
                self.t = api.t

            def elapsed_time(self, end):
                return end.t - self.t

        return Event()

    def synchronize(self):
        self.syncs += 1

    def l2_bytes(self):
        return self.l2

    def buffer(self, nbytes):
        self.buffers.append(nbytes)
        api = self

        class Buffer:
            def zero_(self):
                api.t += api.FLUSH_MS
                api.flushes += 1

        return Buffer()

    def capture(self, fn, calls):
        self.captures += 1

        def replay():
            for _ in range(calls):
                fn()

        return replay


def test_cuda_clock_flushes_outside_the_events():
    api = FakeCudaApi()
    clock = CudaClock(api=api).for_rule(StopRule())  # auto -> cold on CUDA
    assert clock.cache == "cold"
    samples = clock.time_batch(api.fn, 5)
    assert samples == [1.0] * 5  # the 7 ms flushes are not in the samples
    assert api.flushes == 5 and api.syncs == 1  # one synchronize per batch, not per call
    assert api.buffers == [2 * 50 * MiB]


def test_cuda_clock_warm_cache_never_flushes():
    api = FakeCudaApi()
    clock = CudaClock(api=api).for_rule(StopRule(cache="warm"))
    assert clock.time_batch(api.fn, 4) == [1.0] * 4
    assert api.flushes == 0 and api.buffers == []


def test_cuda_graph_is_captured_once_and_replays_are_divided_by_its_calls():
    api = FakeCudaApi()
    rule = StopRule(mode="cuda_graph", cache="warm", graph_calls=4, budget_s=0.01, warmup_s=0.0)
    clock = CudaClock(api=api).for_rule(rule)
    m = measure(api.fn, clock, rule)
    assert api.captures == 1
    assert m.timing_mode == "cuda_graph" and m.cache == "warm"
    assert set(m.samples_ms) == {1.0}  # 4 ms per replay / 4 calls


def test_a_graph_replay_sizes_batches_as_graph_calls_calls():
    # 1 ms calls, 10 per replay: a batch is a tenth of the budget in replays (or min_samples of them),
    # not ten times that, as sizing by the per-call time would make it
    api = FakeCudaApi()
    rule = StopRule(mode="cuda_graph", cache="warm", graph_calls=10, budget_s=0.2, warmup_s=0.05, warmup_max_s=0.1)
    m = measure(api.fn, CudaClock(api=api).for_rule(rule), rule, wall=lambda: api.t / 1e3)
    replay_s = 10 * FakeCudaApi.CALL_MS / 1e3
    assert set(m.samples_ms) == {1.0} and m.first_call_ms == 1.0 and set(m.warmup_medians_ms) == {1.0}
    longest = max(0.1 * rule.budget_s, rule.min_samples * replay_s) + replay_s
    assert m.batches and all(b.end_s - b.start_s <= longest + 1e-9 for b in m.batches)
    assert m.warmup_s <= rule.warmup_cap_s + replay_s + 1e-9
    assert m.warmup_calls % 10 == 0  # whole replays: calls, not repetitions


def test_a_graph_replay_counts_as_graph_calls_calls_against_the_case_cap():
    # 1 ms calls, 100 per replay: 0.1 s a repetition, so 2 warm-up + 5 samples (0.7 s) do not fit a
    # 0.5 s cap: a slow case, and the cap is overrun by at most one replay
    api = FakeCudaApi()
    rule = StopRule(mode="cuda_graph", cache="warm", graph_calls=100, budget_s=0.1, warmup_s=0.0, case_cap_s=0.5)
    m = measure(api.fn, CudaClock(api=api).for_rule(rule), rule, wall=lambda: api.t / 1e3)
    assert m.warmup_reason == "slow" and m.stop_reason == "cap" and not m.first_call_kept
    assert api.t / 1e3 <= rule.case_cap_s + 0.1 + 1e-9
    assert set(m.samples_ms) == {1.0}


def test_derived_clocks_share_one_flush_buffer():
    api = FakeCudaApi()
    base = CudaClock(api=api)
    for rule in (StopRule(), StopRule(budget_s=0.5)):
        base.for_rule(rule).time_batch(api.fn, 2)
    assert len(api.buffers) == 1


# --- the cost bound: calibration and the whole-case cap ---------------------------------------


def test_a_30_s_call_with_a_1_s_budget_keeps_the_floor_sample_and_says_why():
    rule = StopRule(budget_s=1.0)
    m, clock = run(lambda i, now: 30_000.0, rule)
    assert clock.calls == 1  # the calibration call is the one sample: nothing paid twice
    assert len(m.samples_ms) == rule.floor_samples == 1 and m.first_call_kept
    assert m.stop_reason == "cap" and m.warmup_reason == "slow"
    assert m.rel_ci == math.inf  # one sample says nothing about its spread, and the record says so
    assert m.case_cap_s == rule.case_cap("cpu") == 10.0
    assert clock.now <= m.case_cap_s + 30.0  # past the cap by at most the one call


@pytest.mark.parametrize("call_ms", [400.0, 900.0, 1_700.0, 2_500.0, 4_000.0, 9_000.0, 12_000.0])
def test_slow_calls_take_fewer_samples_and_never_overrun_the_cap_by_more_than_one_call(call_ms):
    rule = StopRule(budget_s=0.5, case_cap_s=10.0)
    m, clock = run(lambda i, now: call_ms, rule)
    assert clock.now <= rule.case_cap_s + call_ms / 1e3
    assert rule.floor_samples <= len(m.samples_ms) <= max(rule.min_samples, 1)
    if len(m.samples_ms) < rule.min_samples:
        assert m.stop_reason == "cap"
        assert clock.now + call_ms / 1e3 > rule.case_cap_s  # as many as fit: one more would cross it
    else:
        assert m.stop_reason in ("budget", "converged")


def test_a_first_call_timed_by_the_caller_is_calibration_and_not_paid_again():
    # The runner times the first call (its output feeds the accuracy check) and says what it spent.
    m, clock = run(lambda i, now: 30_000.0, StopRule(budget_s=1.0), first_call_ms=30_000.0, spent_s=30.4)
    assert clock.calls == 0 and m.samples_ms == [30_000.0] and m.stop_reason == "cap"
    fast, fast_clock = run(lambda i, now: 1.0, StopRule(), first_call_ms=5.0, spent_s=0.01)
    assert fast.first_call_ms == 5.0 and not fast.first_call_kept  # a cold first call is not a sample
    assert fast.stop_reason == "converged" and fast.median_ms == 1.0


def test_the_floor_can_ask_for_more_than_one_sample():
    rule = StopRule(budget_s=1.0, case_cap_s=10.0, floor_samples=2, min_samples=3)
    m, clock = run(lambda i, now: 30_000.0, rule)
    assert len(m.samples_ms) == 2 and m.stop_reason == "cap" and clock.calls == 2


def test_the_default_cap_depends_on_the_device_and_grows_with_the_rule():
    assert StopRule().case_cap("cpu") == 10.0 and StopRule().case_cap("cuda") == 30.0
    assert StopRule(budget_s=20.0).case_cap("cpu") == 2 * (1.0 + 20.0)  # never below what the rule asks
    assert StopRule(case_cap_s=3.0).case_cap("cuda") == 3.0


@pytest.mark.parametrize("bad", [{"floor_samples": 6}, {"budget_s": 1e308}, {"case_cap_s": 0}, {"case_cap_s": 1e9}])
def test_cost_settings_out_of_range_are_rejected(bad):
    with pytest.raises(ValidationError):
        StopRule(**bad)


def test_a_fast_case_is_untouched_by_the_cap():
    # 1 ms calls with the defaults: warm-up and budget, far inside the 10 s cap
    m, clock = run(lambda i, now: 1.0 + 0.2 * (i % 2), StopRule(budget_s=0.5))
    assert m.stop_reason == "budget" and len(m.samples_ms) > 100 and clock.now < 2.0


# --- the interval tells the truth: drift between batches ----------------------------------------


def test_a_level_that_drifts_between_batches_widens_the_interval():
    # a machine 6% slower in every third batch: pooled as if independent, the samples put the median
    # on the faster level exactly; the batches' medians, at 1.0 or 1.06, say 3%
    clock = per_call(lambda i, now: 1.0 + 0.06 * (len(clock.batches) % 3 == 0))
    m = measure(lambda: None, clock, StopRule(budget_s=0.5, warmup_s=0.0), wall=clock.wall)
    assert len(m.batches) >= timing.MIN_BATCHES
    assert m.rel_ci_window < StopRule().target_rel_ci < m.rel_ci_batches == m.rel_ci
    assert m.stop_reason == "budget"  # a level that drifts is not called known
    steady, _ = run(lambda i, now: 1.0, StopRule(budget_s=0.5))
    assert steady.rel_ci == steady.rel_ci_batches == 0 and len(steady.batches) >= timing.MIN_BATCHES
    assert steady.stop_reason == "converged"


def test_even_a_fast_call_comes_in_batches_enough_to_see_drift():
    m, _ = run(lambda i, now: 0.001, StopRule(budget_s=1.0))  # 1 µs: max_samples fill in far less than a batch
    assert len(m.batches) >= timing.MIN_BATCHES and m.rel_ci_batches is not None
    assert m.stop_reason == "converged"


# --- paired rounds: the cases of a setting timed together ----------------------------------------


QUICK = StopRule(budget_s=0.5, warmup_s=0.0, target_rel_ci=1e-9)  # never converged: the rounds run the budget


def parties(clock, rule=QUICK, **calls_ms):
    return [timing.Party(name, (lambda ms=ms: ms), clock, rule) for name, ms in calls_ms.items()]


def test_interleaved_rounds_cancel_a_step_in_the_machines_speed():
    """The machine gets twice as slow half-way through (another job starts): timed one after the
    other, the baseline's window sees one speed and the candidate's the other, and their ratio of
    medians is off by 2x; timed in paired rounds, each round's ratio sees one speed, and the median
    of the rounds' ratios is the true speedup."""
    from suite.measure import record

    step = lambda now: 1.0 if now < 0.6 else 2.0
    clock = shared(step)
    fp32, bf16 = measure(lambda: 2.0, clock, QUICK, wall=clock.wall), None
    bf16 = measure(lambda: 1.0, clock, QUICK, wall=clock.wall)
    assert fp32.median_ms / bf16.median_ms == pytest.approx(1.0, abs=0.01)  # the true speedup is 2

    clock = shared(step)
    out = timing.measure_paired(parties(clock, fp32=2.0, bf16=1.0), seed=1, wall=clock.wall)
    assert out.paired and out.note is None and all(e is None for e in out.errors)
    base, own = out.measurements
    columns = record.paired_speedup(base, own)
    assert columns["speedup_paired"] == pytest.approx(2.0, rel=1e-3)
    assert columns["speedup_paired_low"] <= 2.0 <= columns["speedup_paired_high"]
    assert columns["paired_rounds"] == len(out.order) == len(base.batches) == len(own.batches) >= QUICK.min_samples
    assert clock.now > 0.6  # the step happened inside the window


def test_the_rounds_order_is_random_seeded_and_every_party_runs_once_a_round():
    def order(seed):
        clock = shared()
        return timing.measure_paired(parties(clock, a=1.0, b=1.0, c=1.0), seed=seed, wall=clock.wall).order

    first = order(7)
    assert first == order(7) and first != order(8)
    assert all(sorted(r) == [0, 1, 2] for r in first)
    assert len({tuple(r) for r in first}) > 1  # not one fixed order


def test_the_parties_share_one_budget_and_each_batch_lasts_about_a_slice():
    clock = shared()
    out = timing.measure_paired(parties(clock, a=1.0, b=4.0), seed=0, wall=clock.wall)
    a, b = out.measurements
    assert a.stop_reason == b.stop_reason == "budget"
    spent = b.batches[-1].end_s - min(a.batches[0].start_s, b.batches[0].start_s)
    assert 2 * QUICK.budget_s <= spent <= 2.3 * QUICK.budget_s  # both budgets, spent together
    slice_ms = timing.ROUND_FRACTION * QUICK.budget_s * 1e3
    assert {r.reps for r in a.batches} == {int(slice_ms / 1.0)} and {r.reps for r in b.batches} == {int(slice_ms / 4.0)}


def test_each_party_runs_under_its_own_flags_and_none_leak():
    """Each party's batches (and its first call and warm-up) run inside its own context, entered and
    restored around each: the global state one case sets is never in force during another's calls."""
    from suite.precisions import flags

    before = flags.snapshot()
    seen = {"ieee": set(), "tf32": set()}
    clock = shared()

    def call(name):
        seen[name].add(flags.snapshot()["float32_matmul_precision"])
        return 1.0

    out = timing.measure_paired(
        [timing.Party("ieee", lambda: call("ieee"), clock, QUICK, lambda: flags.float32_matmul(tf32=False)),
         timing.Party("tf32", lambda: call("tf32"), clock, QUICK, lambda: flags.float32_matmul(tf32=True))],
        seed=3, wall=clock.wall)
    assert out.paired and len(out.order) >= QUICK.min_samples
    assert seen == {"ieee": {"highest"}, "tf32": {"high"}}
    assert flags.snapshot() == before


def test_a_party_whose_calls_raise_is_dropped_and_the_others_get_their_measurements():
    clock = shared()
    count = {"n": 0}

    def breaks():
        count["n"] += 1
        if count["n"] > 30:
            raise RuntimeError("kernel failure")
        return 1.0

    out = timing.measure_paired([*parties(clock, a=1.0), timing.Party("b", breaks, clock, QUICK),
                                 *parties(clock, c=2.0)], seed=0, wall=clock.wall)
    assert out.paired and isinstance(out.errors[1], RuntimeError) and out.measurements[1] is None
    a, _, c = out.measurements
    assert a.stop_reason == c.stop_reason == "budget" and len(a.batches) == len(c.batches) == len(out.order)


def test_a_slow_path_with_nothing_left_to_pair_is_timed_one_case_after_another_and_says_why():
    clock = shared()
    out = timing.measure_paired(parties(clock, fp32=0.1, bf16=30.0), seed=0, wall=clock.wall)  # 300x
    assert not out.paired and "one bf16 call takes 300x one fp32 call" in out.note and not out.order
    assert out.alone == {}  # nothing stayed paired: the whole setting is sequential
    fp32, bf16 = out.measurements
    assert fp32.stop_reason in ("budget", "max_samples") and bf16.stop_reason == "budget"
    assert fp32.batches[-1].end_s <= bf16.batches[0].start_s  # one after the other
    # a call too slow for the case cap to hold a warm-up and the minimum samples: the same
    clock = shared()
    out = timing.measure_paired(parties(clock, fp32=1.0, bf16=5_000.0), seed=0, wall=clock.wall)
    assert not out.paired and "too slow for the case cap (10 s) to hold a warm-up and 5 samples" in out.note
    assert out.measurements[1].warmup_reason == "slow"


@pytest.mark.parametrize("fp16_ms", [30.0, 5_000.0])  # 300x once warm; too slow for the cap at once
def test_one_slow_precision_is_timed_alone_and_the_others_stay_paired(fp16_ms):
    """fp16 on a CPU without native fp16 (an EPYC without AVX512-FP16: seconds a call), bf16 native:
    fp16 is timed on its own after the rounds, fp32 and bf16 stay paired, whatever the CPU."""
    clock = shared()
    out = timing.measure_paired(parties(clock, fp32=0.1, bf16=0.05, fp16=fp16_ms), seed=0, wall=clock.wall)
    assert out.paired and out.note is None and all(e is None for e in out.errors)
    assert list(out.alone) == [2] and "one fp16 call takes" in out.alone[2]
    assert len(out.order) >= QUICK.min_samples and all(sorted(r) == [0, 1] for r in out.order)  # fp16 in none
    fp32, bf16, fp16 = out.measurements
    assert len(fp32.batches) == len(bf16.batches) == len(out.order)
    # its samples after the rounds; a call too slow for the case cap (10 s) has spent the cap on its
    # first, calibrating, call and the rounds, and keeps that call alone
    rounds_end = max(fp32.batches[-1].end_s, bf16.batches[-1].end_s)
    later = [b for b in fp16.batches if b.start_s >= rounds_end]
    assert later if fp16_ms < 1_000 else fp16.stop_reason == "cap" and len(fp16.batches) == 1
    assert fp16.samples_ms and all(abs(s / fp16_ms - 1) <= 0.002 + 1e-9 for s in fp16.samples_ms)


def test_a_precision_timed_alone_after_the_rounds_is_warmed_up_then_not_by_the_rounds_time():
    """Its warm-up cap counts from when it is timed, not from before the others' rounds: rounds
    longer than the cap would otherwise end its warm-up at once, on two calls."""
    rule = QUICK.model_copy(update={"warmup_max_s": 0.3})  # the rounds run 0.5 s
    clock = shared()
    out = timing.measure_paired(parties(clock, rule, fp32=0.1, bf16=0.05, fp16=30.0), seed=0, wall=clock.wall)
    fp16 = out.measurements[2]
    assert list(out.alone) == [2] and fp16.warmup_s <= 0.3 + 0.03 and fp16.warmup_calls > 2


def test_two_slow_precisions_are_timed_alone_beside_the_pair_of_the_other_two():
    clock = shared()
    out = timing.measure_paired(parties(clock, fp32=0.1, tf32=0.1, bf16=30.0, fp16=40.0), seed=0, wall=clock.wall)
    assert out.paired and sorted(out.alone) == [2, 3] and all(sorted(r) == [0, 1] for r in out.order)
    assert all(m is not None for m in out.measurements)


def test_a_slow_call_that_fits_a_rounds_slice_is_still_paired():
    # 150x slower, but one call (15 ms) fits a round's slice of the 0.5 s budget (25 ms): the rounds
    # hold one call of it each, and a stalling fast case (a busy machine) cannot end the pairing
    clock = shared()
    out = timing.measure_paired(parties(clock, fp32=0.1, bf16=15.0), seed=0, wall=clock.wall)
    assert out.paired and out.note is None and len(out.order) >= QUICK.min_samples
    assert all(b.reps == 1 for b in out.measurements[1].batches)


def test_differing_rules_and_a_lone_party_are_not_paired():
    clock = shared()
    other = QUICK.model_copy(update={"budget_s": 0.2})
    out = timing.measure_paired([*parties(clock, a=1.0), *parties(clock, other, b=1.0)], seed=0, wall=clock.wall)
    assert not out.paired and "rules differ" in out.note and all(m is not None for m in out.measurements)
    out = timing.measure_paired(parties(clock, a=1.0), seed=0, wall=clock.wall)
    assert not out.paired and "nothing to pair with" in out.note and out.measurements[0].stop_reason == "budget"


def test_the_caps_bound_the_rounds_together():
    # 40 ms calls, 1 s caps, a 10 s budget: the rounds stop at the two caps, not the budget
    rule = StopRule(budget_s=10.0, warmup_s=0.0, case_cap_s=1.0)
    clock = shared()
    out = timing.measure_paired(parties(clock, rule, a=40.0, b=40.0), seed=0, wall=clock.wall)
    assert out.paired and {m.stop_reason for m in out.measurements} == {"cap"}
    assert clock.now <= 2 * rule.case_cap_s + 2 * 0.04


def test_a_peer_harness_takes_its_block_in_each_round():
    clock = shared()
    blocks = []

    class Peer:
        def block(self, seconds):
            blocks.append(seconds)
            clock.now += seconds
            return [1.0]

    out = timing.measure_paired(parties(clock, suite=1.0), seed=0, peer=Peer(), wall=clock.wall)
    assert out.paired and len(out.peer_ms) == len(out.order) == len(blocks) == len(out.measurements[0].batches)
    assert all(sorted(r) == [0, 1] for r in out.order)
    assert set(blocks) == {timing.ROUND_FRACTION * QUICK.budget_s}


def test_paired_rounds_on_cuda_take_events_per_batch_and_flush_outside_them():
    api = FakeCudaApi()
    rule = StopRule(budget_s=0.05, warmup_s=0.0)  # auto: cold on CUDA
    base = CudaClock(api=api)
    clocks = [base.for_rule(rule) for _ in range(2)]  # as a run derives each case's: one flush buffer
    fns = [api.fn, lambda: (api.fn(), api.fn())]  # 1 ms and 2 ms calls
    syncs_before = api.syncs
    out = timing.measure_paired([timing.Party(n, f, c, rule) for n, f, c in zip(("a", "b"), fns, clocks)],
                                seed=0, wall=lambda: api.t / 1e3)
    a, b = out.measurements
    assert out.paired and set(a.samples_ms) == {1.0} and set(b.samples_ms) == {2.0}  # flushes not in them
    assert api.syncs - syncs_before >= len(a.batches) + len(b.batches)  # one synchronize per batch
    assert api.flushes >= len(a.samples_ms) + len(b.samples_ms) and len(api.buffers) == 1
