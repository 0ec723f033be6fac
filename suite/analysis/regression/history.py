"""A scenario's stored runs as time series, and where each case's level changed.

`build(scenario, results_dir, options)` reads the scenario's runs and orders them by run id (their
UTC start time); `analyse(records, options)` gives every case its series of per-run values, the
values `compare` compares (`compare.measure`): its in-run speedup over the baseline precision (not
for the baseline itself, nor for emulated timing), from paired rounds where every run of the case
has one, else the ratio of medians (a series never mixes the two; each kind is tested apart), and
its median time. Both are series of one
device model (`device_name`): compare compares times only on one, and a speedup is a property of
the machine too (bf16 over fp32 is 3x on a CPU with AMX and 1/150 on one without), so runs on
another model (a CI runner that changed CPU between nights) start a series of their own rather
than a change point.

**Change points** are found in two steps. The search is seeded binary segmentation (Kovacs, Li,
Buhlmann and Munk 2023): `seeded_intervals` covers the series with intervals at every scale from the
whole series down to 2 x `min_runs` runs, and in each the split (at least `min_runs` runs on each
side) with the largest |z|, the difference of the mean log values after and before it over its
standard error, is found by prefix sums: O(n log n) for n runs. The search scans the series
winsorized (`winsorize`): a run further than `CLIP_SDS` robust sds from its local level (the median
of the 2 x `min_runs` - 1 runs around it, which follows a step and an episode of `min_runs` runs or
more) counts as that far, so one run caught by a burst of load cannot make a step. The robust sd
is the case's from successive differences (median |difference|, which a change of level moves by one
difference among many); the sd the scan divides by is that of the winsorized series about its local
level (clipped bursts still add to it), never below the robust one, the median of its metric's cases
nor the `--noise` floor, so a short episode does not inflate the spread it is judged by, as one
variance pooled over a whole segment did. A split is a candidate where |z| reaches the level
`scan_threshold`: 1 - confidence divided among every split the seeded intervals hold (Bonferroni
over the search; `search_p` is the split's p so adjusted, `ChangePoint.p_search`). The strongest
candidate of the series becomes a change point, and the two segments on either side of it are
searched again (their seeded intervals and the segment itself), until none has a candidate.

Then every change point is tested by compare's own test between its neighbours (the runs from the
change point before it to the one after: `stats.Fit`, the runs as the unit of replication, the
run-to-run spread pooled over every case those runs hold, a Student-t interval) at compare's
confidence, and dropped, weakest first, until every one left is regressed or improved there (its
interval excludes no change and clears the minimum effect). So every change point reported is one
the search finds at its search-adjusted level and compare calls between its two segments; with
2 x `min_runs` runs there is one split and no search, and history's call is compare's. The test is
not divided again among the splits: the search has spent that adjustment, and spending it twice
cost power (issue #38). `ChangePoint.p` is compare's p between the two segments, not adjusted for
the search. Calibration (false change points per series, power for steps, a reverted episode and
drift): docs/calibration.md.

A speedup change point whose case's own time did not change between the same runs while its
baseline precision's time changed the other way is `baseline-changed`, as in compare. Every change
point lists what differs between the runs before and after it (`suite.analysis.regression.envdiff`).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from suite.analysis.frame import derived
from suite.analysis.regression import compare, envdiff, stats
from suite.core.errors import UserError
from suite.results import columns, select, store

RUN_COLUMNS = ("run_id", "torch_version", columns.LIBRARIES, "cuda_version", "device_name", "git_sha")
SPEEDUP, TIME = "speedup", "time"


@dataclass(frozen=True)
class Options(compare.Decision):
    """How history decides (`compare.Decision`); `min_runs` is the runs a change point needs on each
    side: compare's recommended three (docs/calibration.md)."""

    min_runs: int = stats.RECOMMENDED_RUNS


@dataclass(frozen=True)
class ChangePoint:
    """Where a series' level moved: `index` is the first run (position in `History.runs`) at the new
    level; levels are geometric means over the runs of each segment (speedup in x, time in ms)."""

    index: int
    metric: str
    before: float
    after: float
    ratio: float  # after / before, with its interval at `confidence`
    low: float
    high: float
    p: float  # two-sided p of no change by compare's test between the two segments, NOT adjusted for the search
    confidence: float  # the interval's confidence: compare's (the options')
    verdict: str  # regressed / improved (time: slower / faster), or baseline-changed
    runs_before: int
    runs_after: int
    explanation: tuple[str, ...] = ()  # what differs between the runs before and after
    cause: str = ""  # baseline-changed: which baseline moved, and how much
    # p of the split adjusted for the search over every split tried (`search_p`, Bonferroni); with
    # 2 x min_runs runs there is one split and no search: compare's p
    p_search: float = math.nan


@dataclass
class CaseSeries:
    """One case's per-run values of one metric (speedup, or time on one device model)."""

    case_id: str
    baseline_case_id: str
    workload: str
    precision: str
    baseline: str
    shape: str
    metric: str
    device: str  # the device model (device_name) the series' runs were measured on
    kind: str = ""  # a speedup series': paired (every run has speedup_paired) or ratio of medians
    run_index: list[int] = field(default_factory=list)  # positions in History.runs
    values: list[float] = field(default_factory=list)  # speedup (x) or median time (ms) per run
    change_points: list[ChangePoint] = field(default_factory=list)

    @property
    def key(self) -> tuple[str, str, str]:
        """Its tester's: the series of one metric, device model and speedup kind are tested together."""
        return self.metric, self.device, self.kind

    @property
    def label(self) -> str:
        return f"{self.workload} {self.precision} {self.shape}"

    def levels(self) -> list[tuple[int, int, float]]:
        """(first position, last position + 1, level) of each segment between change points."""
        cuts = [0, *(self.run_index.index(cp.index) for cp in self.change_points), len(self.values)]
        return [(self.run_index[a], self.run_index[b - 1] + 1, derived.geomean(self.values[a:b]))
                for a, b in zip(cuts, cuts[1:])]


@dataclass(frozen=True)
class HistoryRun:
    index: int
    run_id: str
    facts: dict  # RUN_COLUMNS' values as text ("" where the record has none)


@dataclass
class History:
    """The result of `analyse`: every series, its change points, and the spread they were judged by."""

    scenario: str
    runs: list[HistoryRun]
    series: list[CaseSeries]
    # metric -> run-to-run spread over all runs (as if no change); speedups of the two kinds apart:
    # "speedup" (paired, where any series is) and "speedup (ratio of medians)"
    spread: dict[str, stats.Spread]
    detectable: dict[str, float]  # the same keys -> the step a typical case is found with 80% power at, min_runs a side
    options: Options

    def change_points(self) -> list[tuple[CaseSeries, ChangePoint]]:
        return [(s, cp) for s in self.series for cp in s.change_points]


class _Tester:
    """compare's test between two sets of runs of one metric, with the fit of each pair of run sets
    kept: every case holding the same runs shares it (the spread is pooled over all of them). Also,
    for the search, each case's scale for winsorizing (`clip_var`) and the variance of its winsorized
    series (`scan_var`), from its runs in `order` (time), with `min_runs` runs a side."""

    def __init__(self, values: dict[str, dict[str, float]], noise: float | None, order: list[str],
                 min_runs: int = stats.RECOMMENDED_RUNS):
        self.values, self.noise, self.min_runs = values, noise, min_runs
        self.fits: dict[tuple[tuple[str, ...], tuple[str, ...]], stats.Fit] = {}
        series = {c: np.array([runs[r] for r in order if math.isfinite(runs.get(r, math.nan))])
                  for c, runs in values.items()}
        floor = math.log1p(noise) ** 2 if noise else 0.0
        self.clip_var = _at_least_pooled({c: _robust_var(y) for c, y in series.items()}, floor)
        winsorized = {c: _winsorized_var(y, math.sqrt(self.clip_var[c]), min_runs) for c, y in series.items()}
        # the search's variance: what the winsorized series it scans varies by (bursts of load, clipped,
        # still add to it), never below the robust scale, nor the median of the cases' (a short
        # series' own is a rough one), nor the floor
        self.scan_var = {c: max(v, self.clip_var[c]) for c, v in _at_least_pooled(winsorized, floor).items()}

    def fit(self, before: tuple[str, ...], after: tuple[str, ...]) -> stats.Fit:
        key = (before, after)
        if key not in self.fits:
            b, a = set(before), set(after)
            self.fits[key] = stats.fit({c: {r: v for r, v in runs.items() if r in b} for c, runs in self.values.items()},
                                       {c: {r: v for r, v in runs.items() if r in a} for c, runs in self.values.items()},
                                       self.noise)
        return self.fits[key]


def _at_least_pooled(own: dict[str, float], floor: float) -> dict[str, float]:
    """Each case's variance, never below the median of the cases' (NaN: that median) nor the floor."""
    finite = [v for v in own.values() if math.isfinite(v)]
    pooled = float(np.median(finite)) if finite else math.nan
    return {c: max([x for x in (v, pooled) if math.isfinite(x)] + [floor]) for c, v in own.items()}


# A run-to-run sd from successive differences, which a level change moves by one difference out of
# many: median |difference| / (0.6745 sqrt 2) for Gaussian noise (Hampel's MAD constant).
MAD_OF_DIFFERENCES = 0.6744897501960817 * math.sqrt(2.0)
# Winsorizing: a run further than this many robust sds from its local level (`local_level`) counts
# as this far in the search (Huber-like clipping: a burst of load moves a run by 2x, 15 sds of quiet
# noise, and a mean over three runs with one of them would otherwise look like a step).
CLIP_SDS = 2.5


def _robust_var(values: np.ndarray) -> float:
    """A case's run-to-run variance from its series in run order; NaN with fewer than 3 runs."""
    if len(values) < 3:
        return math.nan
    return float(np.median(np.abs(np.diff(values))) / MAD_OF_DIFFERENCES) ** 2


def _sliding(y: np.ndarray, m: int, pick) -> np.ndarray:
    """pick (np.min or np.max) over each window of m consecutive runs: n - m + 1 values."""
    return pick(y[np.arange(len(y) - m + 1)[:, None] + np.arange(m)[None, :]], axis=1)


def _spread_back(w: np.ndarray, m: int, pick) -> np.ndarray:
    """For each run, pick over the windows of m runs that hold it (of the n - m + 1 in w)."""
    padded = np.concatenate([np.full(m - 1, np.nan), w, np.full(m - 1, np.nan)])
    rows = padded[np.arange(len(w) + m - 1)[:, None] + np.arange(m)[None, :]]
    return (np.nanmax if pick is np.max else np.nanmin)(rows, axis=1)


def local_level(y: np.ndarray, m: int) -> np.ndarray:
    """Each run's local level: y opened then closed (grey-scale morphology) with a window of m runs.
    Opening (the max over the m-run windows holding a run of each window's min) removes an upward
    spike narrower than m runs and keeps any plateau of m runs or more; closing does the same for a
    downward one. So the level follows a step and an episode of m runs (the shortest a change point
    allows: the pooled paired_stability runs' 3-run thread change) and ignores up to m - 1 bursts in
    a row, or scattered among quiet runs."""
    if m < 2 or len(y) < m:
        return y.copy()
    # each end padded with the median of its 2m - 1 runs, so the first and last runs are judged in
    # windows of m like the others
    pad = m - 1
    ends = [np.full(pad, np.median(part)) for part in (y[:2 * m - 1], y[-(2 * m - 1):])]
    z = np.concatenate([ends[0], y, ends[1]])
    opened = _spread_back(_sliding(z, m, np.min), m, np.max)
    return _spread_back(_sliding(opened, m, np.max), m, np.min)[pad:pad + len(y)]


def winsorize(y: np.ndarray, sd: float, m: int) -> np.ndarray:
    """y with each run's distance from its local level clipped to `CLIP_SDS` sds: what the search scans."""
    level = local_level(y, m)
    return level + np.clip(y - level, -CLIP_SDS * sd, CLIP_SDS * sd)


def _winsorized_var(y: np.ndarray, sd: float, m: int) -> float:
    """The mean square of the winsorized series about its local level: what bursts of load, clipped,
    add to a run's variance (for quiet Gaussian noise it is below the robust variance, which the
    search takes then). NaN with fewer than 3 runs, no scale, or min_runs 1 (nothing winsorized)."""
    if len(y) < 3 or not sd > 0 or m < 2:
        return math.nan
    resid = np.clip(y - local_level(y, m), -CLIP_SDS * sd, CLIP_SDS * sd)
    return float(np.mean(resid**2))


def seeded_intervals(n: int, m: int) -> list[tuple[int, int]]:
    """Seeded intervals (Kovacs, Li, Buhlmann, Munk 2023) of n runs that allow a split with m runs on
    each side: the whole series, then at each scale l = n / sqrt(2)^j down to 2m intervals of length l
    starting every max(1, l // 4) runs (the last ending at n): O(n) runs per scale, O(log n) scales.
    Every stretch of a series lies near the middle of an interval about twice its length, so a short
    episode is scanned against a few runs on either side rather than the whole series."""
    return list(_seeded_intervals(n, m))


# Every series of a history of n runs is searched over the same intervals: worked out once (30 ms
# for a thousand runs, twice a series).
@functools.lru_cache(maxsize=16)
def _seeded_intervals(n: int, m: int) -> tuple[tuple[int, int], ...]:
    """`seeded_intervals`, longest first, kept for the next series of as many runs."""
    out, length = {(0, n)}, float(n)
    while length > 2 * m:
        length /= math.sqrt(2.0)
        l = max(int(round(length)), 2 * m)
        if l < n:
            step = max(1, l // 4)
            out.update((s, s + l) for s in range(0, n - l + 1, step))
            out.add((n - l, n))
    return tuple(sorted(out, key=lambda se: (se[1] - se[0], se[0]), reverse=True))


@functools.lru_cache(maxsize=16)
def _interval_array(n: int, m: int) -> np.ndarray:
    """`seeded_intervals(n, m)` as an (intervals, 2) array of (start, end), read-only (shared)."""
    intervals = np.array(_seeded_intervals(n, m), dtype=int).reshape(-1, 2)
    intervals.setflags(write=False)
    return intervals


@functools.lru_cache(maxsize=16)
def search_size(n: int, m: int) -> int:
    """The splits the scan of a series of n runs tests: over every seeded interval, those with m runs
    on each side (the Bonferroni divisor of its level)."""
    return sum(e - s - 2 * m + 1 for s, e in _seeded_intervals(n, m)) if n >= 2 * m else 0


def scan_threshold(confidence: float, n: int, m: int) -> float:
    """The |z| a split must reach: two-sided, 1 - confidence shared among the `search_size` splits."""
    return stats.t_quantile((1.0 - confidence) / max(1, search_size(n, m)), math.inf)


def _scan(y: np.ndarray, sd: float, intervals: np.ndarray, m: int) -> tuple[np.ndarray, np.ndarray]:
    """(|z|, split) of the best split of each interval [s, e) of y (rows of `intervals`, all one
    length): the difference of the means after and before the split over its sd, by prefix sums."""
    total = np.concatenate([[0.0], np.cumsum(y - y.mean())])
    s, e = intervals[:, :1], intervals[:, 1:]
    k = s + np.arange(m, int(e[0, 0] - s[0, 0]) - m + 1)[None, :]
    left, right = k - s, e - k
    d = (total[e] - total[k]) / right - (total[k] - total[s]) / left
    se = sd * np.sqrt(1.0 / left + 1.0 / right)
    with np.errstate(invalid="ignore", divide="ignore"):
        z = np.where(se > 0, np.abs(d) / se, np.where(d == 0, 0.0, np.inf))
    best = np.argmax(z, axis=1)
    rows = np.arange(len(z))
    return z[rows, best], k[rows, best]


def _candidates(y: np.ndarray, sd: float, m: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Every seeded interval of y as arrays (start, end) and its best split with its |z|."""
    intervals = _interval_array(len(y), m)
    lengths = intervals[:, 1] - intervals[:, 0]
    z, k = np.zeros(len(intervals)), np.zeros(len(intervals), dtype=int)
    for length in np.unique(lengths):
        rows = np.flatnonzero(lengths == length)
        z[rows], k[rows] = _scan(y, sd, intervals[rows], m)
    return intervals, z, k


def _segment(tester: _Tester, case: str, runs: list[str], opts: Options) -> dict[int, float]:
    """Change points of one case's series: {position in `runs` of the first run at a new level: the
    search-adjusted p of its split}; seeded binary segmentation of the winsorized series, then
    compare's test between each change point's neighbours."""
    m, n = opts.min_runs, len(runs)
    if n < 2 * m:
        return {}
    if n == 2 * m:  # one split: no search, compare's test alone (its p is the search's)
        return _prune(tester, case, runs, {m: math.nan}, opts)
    y = winsorize(np.array([tester.values[case][r] for r in runs]), math.sqrt(tester.clip_var[case]), m)
    sd = math.sqrt(tester.scan_var[case])
    intervals, z, k = _candidates(y, sd, m)
    threshold, tests = scan_threshold(opts.confidence, n, m), search_size(n, m)
    found, stack = {}, [(0, n)]
    while stack:
        lo, hi = stack.pop()
        if hi - lo < 2 * m:
            continue
        inside = np.flatnonzero((intervals[:, 0] >= lo) & (intervals[:, 1] <= hi))
        # the segment itself too (a seeded interval only where it is the whole series)
        whole_z, whole_k = _scan(y, sd, np.array([[lo, hi]]), m)
        best_z, best_k = float(whole_z[0]), int(whole_k[0])
        if inside.size and z[inside].max() > best_z:  # the strongest; ties: the longest interval
            i = inside[np.argmax(z[inside])]
            best_z, best_k = float(z[i]), int(k[i])
        if not best_z >= threshold:
            continue
        found[best_k] = search_p(best_z, tests)
        stack += [(lo, best_k), (best_k, hi)]
    return _prune(tester, case, runs, found, opts)


def search_p(z: float, tests: int) -> float:
    """A split's p-value adjusted for the search (Bonferroni): its two-sided normal p times the splits
    searched, at most 1. A split is a candidate where this is at most 1 - confidence."""
    return min(1.0, tests * math.erfc(abs(z) / math.sqrt(2.0)))


def _judge(tester: _Tester, case: str, runs: list[str], lo: int, k: int, hi: int,
           opts: Options) -> tuple[stats.Change, str]:
    """compare's change of `case` between runs[lo:k] and runs[k:hi] and its verdict, at the options'
    confidence: compare's call on those runs. The search already spent the adjustment for the
    splits it tried (`scan_threshold`); dividing the confidence again here cost power (issue #38:
    a 20% step at 10 runs under 5% run shifts was found 72% of the time)."""
    change = tester.fit(tuple(runs[lo:k]), tuple(runs[k:hi])).change(case, opts.confidence)
    return change, stats.verdict(change, opts.min_effect, opts.min_runs)


def _prune(tester: _Tester, case: str, runs: list[str], found: dict[int, float], opts: Options) -> dict[int, float]:
    """Re-test each change point between its neighbours; drop the weakest that fails, until all pass."""
    found = dict(sorted(found.items()))
    while found:
        splits = list(found)
        bounds = [0, *splits, len(runs)]
        failing = []
        for j, k in enumerate(splits):
            change, verdict = _judge(tester, case, runs, bounds[j], k, bounds[j + 2], opts)
            if verdict not in compare.MOVED:
                failing.append((change.p if math.isfinite(change.p) else math.inf, k))
        if not failing:
            break
        del found[max(failing)[1]]
    return found


@dataclass(frozen=True)
class _Context:
    """What building change points needs besides the series: the testers, run facts, devices."""

    testers: dict[tuple[str, str, str], _Tester]  # (metric, device model, speedup kind) -> its runs' values
    device_of: dict[str, str]  # run id -> device model
    facts: envdiff.RunFacts
    opts: Options


def _cause(s: CaseSeries, before: tuple[str, ...], after: tuple[str, ...], ratio: float, verdict: str,
           ctx: _Context) -> str:
    """Why a speedup moved by `ratio`, when the baseline did it: its time moved the other way between
    the same runs while the case's own did not (compare's rule, at the per-case confidence); the
    baseline's change relative to this precision is the speedup's. "" otherwise."""
    devices = {ctx.device_of[r] for r in (*before, *after)}
    if len(devices) != 1:
        return ""
    fit = ctx.testers[(TIME, devices.pop(), "")].fit(before, after)
    if not {s.case_id, s.baseline_case_id} <= fit.cases:
        return ""
    o = ctx.opts
    own = stats.verdict(fit.change(s.case_id, o.confidence), o.min_effect, o.min_runs)
    base = fit.change(s.baseline_case_id, o.confidence)
    expected = stats.REGRESSED if verdict == stats.IMPROVED else stats.IMPROVED
    if own in compare.MOVED or stats.verdict(base, o.min_effect, o.min_runs) != expected:
        return ""
    slower = expected == stats.REGRESSED
    return (f"{s.baseline} got {ratio if slower else 1 / ratio:.3g}x {'slower' if slower else 'faster'} "
            f"(its own time {math.exp(-base.estimate):.3g}x); this case's own time {own}")


def _change_points(s: CaseSeries, runs: list[str], found: dict[int, float], ctx: _Context) -> list[ChangePoint]:
    tester = ctx.testers[s.key]
    sign = 1.0 if s.metric == SPEEDUP else -1.0  # the tester's values are log speedup, -log time
    splits = sorted(found)
    bounds = [0, *splits, len(runs)]
    out = []
    for j, k in enumerate(splits):
        change, verdict = _judge(tester, s.case_id, runs, bounds[j], k, bounds[j + 2], ctx.opts)
        before, after = tuple(runs[bounds[j]:k]), tuple(runs[k:bounds[j + 2]])
        ends = sorted(math.exp(sign * x) for x in (change.low, change.high))
        ratio = math.exp(sign * change.estimate)
        cause = _cause(s, before, after, ratio, verdict, ctx) if s.metric == SPEEDUP else ""
        explanation = [d.text for d in (*envdiff.between(ctx.facts, ctx.facts, before, after),
                                         *envdiff.case_between(ctx.facts, ctx.facts, before, after, s.case_id))]
        p_search = change.p if math.isnan(found[k]) else found[k]
        out.append(ChangePoint(
            s.run_index[k], s.metric, math.exp(sign * change.base.mean), math.exp(sign * change.cand.mean),
            ratio, ends[0], ends[1], change.p, ctx.opts.confidence,
            compare.BASELINE_CHANGED if cause else verdict, len(before), len(after), tuple(explanation), cause,
            p_search))
    return out


def _series(records: pd.DataFrame, runs: list[str], device_of: dict[str, str]) -> list[tuple[CaseSeries, dict]]:
    """Every case's series with its per-run values ({run id: value}), speedups first."""
    side = compare.SideRecords.of(records)
    position = {r: i for i, r in enumerate(runs)}
    out = []
    for case_id, rows in side.by_case.items():
        measured = compare.measure(rows, side)
        first = rows[0]
        named = dict(case_id=case_id, baseline_case_id=str(first.get("baseline_case_id") or ""),
                     workload=first["workload"], precision=first["precision"], baseline=str(first.get("baseline") or ""),
                     shape=derived.shape_label(first))
        # a series is paired only where every run of it is: a switch of kind would look like a step
        kind = compare.PAIRED if measured.all_paired else compare.MEDIANS
        per_metric = [(metric, device, {r: v for r, v in values.items() if device_of[r] == device})
                      for metric, values in ((SPEEDUP, measured.speedups_of(kind)),
                                             (TIME, {} if measured.emulated else measured.times))
                      for device in sorted({device_of[r] for r in values})]
        for metric, device, values in per_metric:
            if values:
                ordered = sorted(values, key=position.get)
                out.append((CaseSeries(**named, metric=metric, device=device, kind=kind if metric == SPEEDUP else "",
                                       run_index=[position[r] for r in ordered], values=[values[r] for r in ordered]),
                            values))
    return sorted(out, key=lambda sv: sv[0].metric != SPEEDUP)


def _spreads(logs: dict) -> list[tuple[str, str, str]]:
    """(name, metric, speedup kind) of the spreads a history reports: `speedup` (the paired series
    where any case has them), `speedup (ratio of medians)` beside them, `time` (every device)."""
    kinds = [k for k in (compare.PAIRED, compare.MEDIANS) if any(key[0] == SPEEDUP and key[2] == k for key in logs)]
    out = [(SPEEDUP if i == 0 else f"{SPEEDUP} ({kind})", SPEEDUP, kind) for i, kind in enumerate(kinds)]
    return out + ([(TIME, TIME, "")] if any(key[0] == TIME for key in logs) else [])


def _runs_table(df: pd.DataFrame) -> list[HistoryRun]:
    first = select.runs_of(df).iloc[::-1].reset_index(drop=True)  # oldest first
    run_columns = columns.with_libraries(RUN_COLUMNS)
    return [HistoryRun(i, str(r["run_id"]), {c: envdiff.as_text(r.get(c)) or "" for c in run_columns})
            for i, r in first.iterrows()]


def analyse(records: pd.DataFrame, scenario: str, options: Options = Options()) -> History:
    """Series and change points of these records (one scenario's runs; see the module docstring)."""
    runs = _runs_table(records)
    ids = [r.run_id for r in runs]
    device_of = {r.run_id: r.facts["device_name"] for r in runs}
    series = _series(records, ids, device_of)
    if not series:
        raise UserError(f"scenario {scenario!r}: no case was measured in {len(runs)} runs")
    logs: dict[tuple[str, str, str], dict] = {}  # CaseSeries.key -> case -> run -> log value
    for s, values in series:
        sign = 1.0 if s.metric == SPEEDUP else -1.0
        logs.setdefault(s.key, {})[s.case_id] = {r: sign * math.log(v) for r, v in values.items()}
    testers = {key: _Tester(values, options.noise, ids, options.min_runs) for key, values in logs.items()}
    ctx = _Context(testers, device_of, envdiff.RunFacts(records), options)
    for s, values in series:
        own_runs = [ids[i] for i in s.run_index]
        found = _segment(testers[s.key], s.case_id, own_runs, options)
        s.change_points = _change_points(s, own_runs, found, ctx)
    spread, detectable = {}, {}
    for name, metric, kind in _spreads(logs):
        values = {f"{c} {d}": v for (m, d, k), cases in logs.items() if m == metric and k == kind
                  for c, v in cases.items()}
        spread[name] = stats.fit(values, {}, options.noise).spread
        m = options.min_runs
        # the step found with 80% power, as its verdict (stats.verdict) calls it: past the minimum effect
        detectable[name] = stats.power_change(spread[name], m, m, options.confidence, options.min_effect)
    return History(scenario, runs, [s for s, _ in series], spread, detectable, options)


def load(scenario: str, results_dir: str | Path = "results") -> pd.DataFrame:
    """Every stored record of a scenario under results_dir."""
    folder = store.scenario_dir(results_dir, scenario)
    if not folder.is_dir():
        raise UserError(f"no results of scenario {scenario!r}: {folder} does not exist")
    df = store.read([folder], lean=True)  # per-sample lists stay Arrow: a history reads none of them
    return df[df["scenario"] == scenario]


def window(records: pd.DataFrame, last: int | None = None, skip: int = 0) -> pd.DataFrame:
    """The records of the newest `last` runs (all: None) once the `skip` newest are left out."""
    runs = select.runs_of(records)["run_id"].tolist()[skip:]  # newest first
    return records[records["run_id"].isin(set(runs[:last] if last is not None else runs))]


def build(scenario: str, results_dir: str | Path = "results", *, last: int | None = None,
          options: Options = Options()) -> History:
    """The history of a scenario's runs under results_dir (`last`: only the newest N)."""
    check_last(last)
    return of_window(load(scenario, results_dir), scenario, last, options=options)


def check_last(last: int | None) -> None:
    if last is not None and last < 2:
        raise UserError(f"--last {last}: a history needs at least 2 runs")


def of_window(records: pd.DataFrame, scenario: str, last: int | None = None, skip: int = 0,
              options: Options = Options()) -> History:
    """The history of `window(records, last, skip)`; a UserError with fewer than 2 runs."""
    df = window(records, last, skip)
    runs = df["run_id"].nunique()
    if runs < 2:
        before = f" before the newest {skip}" if skip else ""
        raise UserError(f"scenario {scenario!r} has {runs} run(s){before}; a history needs at least 2")
    return analyse(df, scenario, options)
