"""A scenario's stored runs as time series: each case's speedup per run, and where it changed.

`build(scenario, results_dir)` orders the scenario's runs by run id (their UTC start time) and, for
every case with a speedup (not the baseline precision, not emulated), collects its speedup in each
run with a bootstrap interval from the stored samples (`suite.analysis.stats`).

Change points: binary segmentation (Scott and Knott 1974; Vostrikova 1981) on the log speedups.
For a segment, every split k is scored by a two-sample z statistic between the runs before and after
it: z = |mean(after) - mean(before)| / sqrt(var(mean before) + var(mean after)), each run's variance
being its bootstrap variance plus the run-to-run noise. The best split is a change point when
z exceeds the normal quantile for the chosen confidence with a Bonferroni correction for the splits
tried (k - 1 of them), and the level moves by at least the minimum effect; both halves are then
segmented again. Run-to-run noise is estimated from the spread of consecutive differences across
all cases (`stats.excess_noise`, divided by sqrt 2 for a difference of two runs).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from statistics import NormalDist

import numpy as np
import pandas as pd

from suite.analysis import derived, stats
from suite.results import select, store
from suite.core.errors import UserError

RUN_COLUMNS = ["run_id", "started_at", "torch_version", "torchao_version", "te_version", "cuda_version",
               "device_name", "git_sha"]
DEFAULT_RESAMPLES = 400


@dataclass(frozen=True)
class ChangePoint:
    index: int  # position (in History.runs) of the first run at the new level
    before: float  # speedup level (geometric mean) of the segment before
    after: float  # ... and after
    z: float

    @property
    def ratio(self) -> float:
        return self.after / self.before


@dataclass
class CaseSeries:
    case_id: str
    workload: str
    precision: str
    baseline: str
    shape: str
    run_index: list[int] = field(default_factory=list)  # positions in History.runs
    speedup: list[float] = field(default_factory=list)
    low: list[float] = field(default_factory=list)  # per-run sampling interval at the confidence
    high: list[float] = field(default_factory=list)
    log_se: list[float] = field(default_factory=list)
    change_points: list[ChangePoint] = field(default_factory=list)

    @property
    def label(self) -> str:
        return f"{self.workload} {self.precision} {self.shape}"


@dataclass
class History:
    scenario: str
    runs: pd.DataFrame  # one row per run, oldest first (RUN_COLUMNS)
    series: list[CaseSeries]
    noise: stats.NoiseEstimate
    min_effect: float
    confidence: float

    def change_points(self) -> list[tuple[CaseSeries, ChangePoint]]:
        return [(s, cp) for s in self.series for cp in s.change_points]


def split_threshold(candidates: int, confidence: float) -> float:
    """z a split must exceed: two-sided normal quantile, Bonferroni over the splits tried."""
    alpha = (1.0 - confidence) / max(1, candidates)
    return NormalDist().inv_cdf(1.0 - alpha / 2)


def _best_split(y: np.ndarray, var: np.ndarray) -> tuple[int, float]:
    best_k, best_z = -1, 0.0
    for k in range(1, len(y)):
        left, right = slice(0, k), slice(k, len(y))
        var_mean = var[left].sum() / k**2 + var[right].sum() / (len(y) - k) ** 2
        z = abs(y[right].mean() - y[left].mean()) / math.sqrt(var_mean) if var_mean > 0 else math.inf
        if z > best_z:
            best_k, best_z = k, z
    return best_k, best_z


def segment(y, var, min_effect: float, confidence: float) -> list[tuple[int, float]]:
    """Change points of the series y (log scale) with per-point variances var: [(k, z)], k being the
    index of the first point of each new level, sorted by k."""
    y, var = np.asarray(y, dtype=float), np.asarray(var, dtype=float)
    band = math.log1p(min_effect)
    found: list[tuple[int, float]] = []
    stack = [(0, len(y))]
    while stack:
        lo, hi = stack.pop()
        if hi - lo < 2:
            continue
        k, z = _best_split(y[lo:hi], var[lo:hi])
        if k < 0 or z <= split_threshold(hi - lo - 1, confidence):
            continue
        if abs(y[lo + k:hi].mean() - y[lo:lo + k].mean()) < band:
            continue
        found.append((lo + k, z))
        stack += [(lo, lo + k), (lo + k, hi)]
    return sorted(found)


def _runs_table(df: pd.DataFrame) -> pd.DataFrame:
    runs = select.runs_of(df).iloc[::-1].reset_index(drop=True)  # oldest first
    for column in RUN_COLUMNS:
        if column not in runs:
            runs[column] = None
    return runs[RUN_COLUMNS]


def _series(df: pd.DataFrame, positions: dict[str, int], resamples: int, seed: int,
            confidence: float) -> list[CaseSeries]:
    by_run = {(r["run_id"], r["case_id"]): r for r in df.to_dict("records")}
    ok = df[(df["status"] == "ok") & ~derived.is_emulated(df)]
    ok = ok[ok["baseline_case_id"].notna() & (ok["baseline_case_id"] != ok["case_id"])]
    out = []
    for case_id, rows in ok.groupby("case_id", sort=False):
        first = rows.iloc[0]
        s = CaseSeries(case_id, first["workload"], first["precision"], first.get("baseline"),
                       derived.shape_label(first))
        rng = stats.keyed_rng(seed, case_id)
        for _, row in rows.sort_values("run_id").iterrows():
            ref = by_run.get((row["run_id"], row["baseline_case_id"]))
            if ref is None or ref.get("status") != "ok":
                continue
            case_s, ref_s = stats.as_samples(row.get("samples_ms")), stats.as_samples(ref.get("samples_ms"))
            if len(case_s) < 2 or len(ref_s) < 2:
                continue  # no samples: no interval, and a point without one would look certain
            (ref_log, ref_reps), (case_log, case_reps) = (stats.log_median_replicates(x, resamples, rng)
                                                          for x in (ref_s, case_s))
            log_speedup, replicates = ref_log - case_log, ref_reps - case_reps
            est = stats.side_estimate([log_speedup], [replicates], rng)
            alpha = 1.0 - confidence
            lo, hi = np.quantile(est.replicates, [alpha / 2, 1 - alpha / 2])
            s.run_index.append(positions[row["run_id"]])
            s.speedup.append(math.exp(est.log_value))
            s.low.append(math.exp(lo))
            s.high.append(math.exp(hi))
            s.log_se.append(est.se)
        if s.run_index:
            out.append(s)
    return out


def _noise(series: list[CaseSeries]) -> stats.NoiseEstimate:
    diffs, ses, groups = [], [], []
    for s in series:
        y = np.log(s.speedup)
        for i in range(1, len(y)):
            diffs.append(y[i] - y[i - 1])
            ses.append(math.hypot(s.log_se[i], s.log_se[i - 1]))
            groups.append((s.run_index[i - 1], s.run_index[i]))
    noise = stats.excess_noise(diffs, ses, groups)
    return stats.NoiseEstimate(noise.sd / math.sqrt(2), noise.cases, noise.source)


def build(
    scenario: str,
    results_dir: str | Path = "results",
    *,
    last: int | None = None,
    min_effect: float = stats.DEFAULT_MIN_EFFECT,
    confidence: float = stats.DEFAULT_CONFIDENCE,
    resamples: int = DEFAULT_RESAMPLES,
    seed: int = 0,
) -> History:
    if last is not None and last < 2:
        raise UserError(f"--last {last}: a history needs at least 2 runs")
    folder = store.scenario_dir(results_dir, scenario)
    if not folder.is_dir():
        raise UserError(f"no results of scenario {scenario!r}: {folder} does not exist")
    df = store.read([folder])
    df = df[df["scenario"] == scenario]
    runs = _runs_table(df)
    if last is not None:
        runs = runs.iloc[-last:].reset_index(drop=True)
        df = df[df["run_id"].isin(set(runs["run_id"]))]
    if len(runs) < 2:
        raise UserError(f"scenario {scenario!r} has {len(runs)} run under {folder}; a history needs at least 2")
    positions = {run_id: i for i, run_id in enumerate(runs["run_id"])}
    series = _series(df, positions, resamples, seed, confidence)
    if not series:
        raise UserError(f"scenario {scenario!r}: no case has a measured speedup with samples in {len(runs)} runs "
                        "(a speedup needs a baseline precision measured in the same run)")
    noise = _noise(series)
    for s in series:
        y = np.log(s.speedup)
        found = segment(y, np.square(s.log_se) + noise.sd**2, min_effect, confidence)
        bounds = [0, *(k for k, _ in found), len(y)]
        for j, (k, z) in enumerate(found):
            before, after = y[bounds[j]:k].mean(), y[k:bounds[j + 2]].mean()
            s.change_points.append(ChangePoint(s.run_index[k], math.exp(before), math.exp(after), z))
    return History(scenario, runs, series, noise, min_effect, confidence)
