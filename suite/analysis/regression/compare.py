"""Compare two sets of runs case by case: did a speedup (or a time) change, and can we tell?

`compare(baseline_side, candidate_side, options)` joins the records of both sides on `case_id` and
gives every case one verdict:

| verdict           | meaning |
|-------------------|---------|
| regressed         | the speedup over the in-run baseline precision fell by at least the minimum effect: its whole interval lies below -minimum effect, and each side has at least `min_runs` runs of the case |
| improved          | the same, upwards |
| ambiguous         | the interval excludes no change but straddles the minimum effect: the speedup moved, by an amount the data cannot place above or below the minimum effect (more runs can) |
| baseline-changed  | the speedup changed (as for regressed/improved) while the case's own time did not and its baseline precision's time did, the other way: the baseline moved, not this precision (`Comparison.drift` says by how much) |
| unchanged         | the interval lies within +-minimum effect |
| noisy             | the interval straddles no change and reaches past the minimum effect: the data cannot tell |
| insufficient-runs | a side has fewer runs of the case than `min_runs` (default 3), or no case has 2 runs on a side: run-to-run noise is not observable, so no call is made (record 3 runs per side) |
| missing           | the case is on one side only (`detail` says which) |
| new-skip          | measured on the baseline side, skipped on the candidate side |
| new-failure       | not failed on the baseline side, failed on the candidate side |
| recovered         | skipped or failed on the baseline side, measured on the candidate side |
| skipped           | skipped on both sides |
| failed            | failed on both sides |
| n/a               | measured on both sides but has no speedup to compare (it is the baseline precision, its baseline case was not measured, or its timing is emulated); its `time_verdict` still applies |

Every case whose verdict is not "same" (not unchanged, skipped or failed on both sides, nor n/a with
an unchanged time) lists in `explanation` what differs between the two sides' runs of it: versions,
device, clocks, code hash, threads, and per case the kernel that ran where records hold one
(`suite.analysis.regression.envdiff`).

The headline verdict is about the speedup (a ratio inside one run, so it survives a different card,
clock or machine): the paired one (`speedup_paired`, from the rounds in which the case and its baseline
were timed interleaved, which a level drifting within the run does not move) where both sides have it
in every run, else the ratio of the two cases' medians; `speedup_kind` says which. The two kinds are
fitted apart (their run-to-run spreads differ), each with its own `spread` and `reach`: `speedup` (the
paired ones, where any case has them) and `speedup (ratio of medians)` beside them. Absolute times get the same treatment in `time_verdict` (regressed = slower),
only where both sides ran on the same device model. Statistics: `suite.analysis.regression.stats` (runs are the
unit of replication; each case's verdict at `confidence`).

The gate (`Comparison.failing`, the CLI's exit status): a case fails when its verdict (or, with the
`time:` prefix, its time verdict) is one of `fail_on`. For `regressed`, `improved` and `ambiguous`
(which `fail_on` may name, either way: a strict gate that fails on any change it cannot show to be
smaller than the minimum effect; the default does not) the change must also be significant at the family-wise `confidence` over every test the gate looks at (Holm's
step-down over the speedup tests, and the time tests when a `time:` verdict is named), so that a
comparison of many unchanged cases fails by chance at most 1 - confidence of the time. The default
gate is `DEFAULT_FAIL_ON`: a slower speedup, a slower absolute time on the same device (which is
also how the baseline precision getting slower shows: its speedup is 1 by definition), a new
failure, a new skip; `improved` never fails it, nor `ambiguous`, which is neither a pass nor a
regression: the report lists it among the cases that need attention. A baseline precision's time regression also fails a
`time:regressed` gate when speedups measured against it are baseline-changed at the family-wise
level: the speedup, a ratio inside one run, is immune to the whole-run shifts that leave an absolute
time test with few degrees of freedom, and the case's own unchanged time puts the change on the
baseline (`gate`).

Clock-normalised time (`cycles_verdict`): where both sides recorded the SM clock of a case
(`sm_clock_mhz_mean`, NVML telemetry; a CPU has none) in every run and the two differ by more than
`envdiff.CLOCK_TOLERANCE`, its time is compared again in cycles (each run's time x its own clock), fitted and
tested as the time is, and `detail` says where the two verdicts differ ("the change is the clock").
It informs and never gates, and `fail_on` has no `cycles:` prefix: a card's clock is often the
change's own doing (a kernel that draws more power runs a power-capped card at a lower clock), so a
slowdown the clock explains is still what the user pays; the gate's `time:` verdicts keep their meaning.
"""

from __future__ import annotations

import json
import math
from collections import Counter
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from suite.analysis.frame import derived, rows as frame_rows
from suite.analysis.regression import envdiff, stats
from suite.core.errors import UserError

MISSING, NEW_SKIP, NEW_FAILURE = "missing", "new-skip", "new-failure"
RECOVERED, SKIPPED, FAILED, NOT_APPLICABLE = "recovered", "skipped", "failed", "n/a"
BASELINE_CHANGED = "baseline-changed"
INSUFFICIENT_RUNS = stats.INSUFFICIENT
VERDICTS = (
    stats.REGRESSED, NEW_FAILURE, NEW_SKIP, BASELINE_CHANGED, stats.AMBIGUOUS, MISSING, stats.NOISY, INSUFFICIENT_RUNS,
    stats.IMPROVED, RECOVERED, stats.UNCHANGED, SKIPPED, FAILED, NOT_APPLICABLE,
)
# Verdicts that say a case is the same on both sides: it needs no explanation.
SAME = (stats.UNCHANGED, SKIPPED, FAILED)
TIME_PREFIX = "time:"
DEFAULT_FAIL_ON = (stats.REGRESSED, TIME_PREFIX + stats.REGRESSED, NEW_FAILURE, NEW_SKIP)
# Verdicts that are statistical decisions: the gate holds them to the family-wise level.
TESTED = (stats.REGRESSED, stats.IMPROVED, BASELINE_CHANGED, stats.AMBIGUOUS)
# The verdicts of a case with enough runs for a test (the gate's family, the reach's tested cases).
DECIDED = (stats.REGRESSED, stats.IMPROVED, stats.AMBIGUOUS, stats.UNCHANGED, stats.NOISY)
MOVED = (stats.REGRESSED, stats.IMPROVED)
METRICS = ("speedup", "time")
# The time in clock-normalised units, cycles = time x the run's mean SM clock (`sm_clock_mhz_mean`):
# where the two sides' clocks differ, whether a time change is the clock's (nvbench-compare confirms a
# change in cycles where clocks were recorded). A speedup needs none: a ratio of two times in one run,
# which a clock lower for the whole run slows alike.
CYCLES = "cycles"
# The two kinds of speedup a record may have: from paired rounds (`speedup_paired`: the cases of a
# setting timed together, docs/timing.md) and the ratio of the two cases' medians.
PAIRED, MEDIANS = "paired", "ratio of medians"


def fail_on_names(text: str) -> tuple[str, ...]:
    """--fail-on's comma-joined names in lower case (`compare`'s and `history`'s); `none` -> (). A
    value naming nothing ("" or ",,": CI's "$FAIL_ON" left unset) is refused, not read as `none`:
    it would turn a gate off unseen."""
    if text.strip().lower() == "none":
        return ()
    names = tuple(t.strip().lower() for t in text.split(",") if t.strip())
    if not names:
        raise UserError(f"--fail-on {text!r} names no verdict: give the verdicts that fail the gate, or none to "
                        "never fail")
    return names


def parse_fail_on(text: str) -> tuple[str, ...]:
    """`regressed,new-failure,time:regressed` -> verdict names; `none` -> never fail."""
    names = fail_on_names(text)
    _check_fail_on(names)
    return names


def _check_fail_on(names) -> None:
    for name in names:
        if name.startswith(CYCLES + ":"):
            raise UserError(f"--fail-on {name!r}: the clock-normalised (cycles) verdict informs and never gates "
                            f"(docs/comparing.md); gate on {TIME_PREFIX}{name[len(CYCLES) + 1:]} instead")
        bare = name[len(TIME_PREFIX):] if name.startswith(TIME_PREFIX) else name
        if bare not in VERDICTS:
            raise UserError(f"--fail-on {name!r}: unknown verdict; choose from {', '.join(VERDICTS)} "
                            f"(prefix {TIME_PREFIX!r} for absolute-time verdicts), or none")


@dataclass(frozen=True)
class Decision:
    """How a change is decided, in compare and in history; invalid values are a UserError (the
    CLI's one-line error).

    - min_effect: the smallest change worth a regressed/improved verdict (0.05 = 5%).
    - confidence: each case's interval confidence (compare's gate holds it family-wise).
    - min_runs: runs per side a case needs for a regressed/improved verdict (fewer: insufficient-runs).
    - noise: a known relative run-to-run sd of one run's value, a floor under the estimate (None: none).
    """

    min_effect: float = stats.DEFAULT_MIN_EFFECT
    confidence: float = stats.DEFAULT_CONFIDENCE
    min_runs: int = stats.DEFAULT_MIN_RUNS
    noise: float | None = None

    def __post_init__(self):
        if not 0 < self.min_effect < 1:
            raise UserError(f"--min-effect {self.min_effect}: expected a fraction between 0 and 1 (0.05 = 5%)")
        if not 0.5 <= self.confidence < 1:
            raise UserError(f"--confidence {self.confidence}: expected a value in [0.5, 1), e.g. 0.99")
        if isinstance(self.min_runs, bool) or not isinstance(self.min_runs, int) or self.min_runs < 1:
            raise UserError(f"--min-runs {self.min_runs}: expected a whole number of runs >= 1 (default "
                            f"{type(self).min_runs})")
        if self.noise is not None and not 0 <= self.noise < 1:
            raise UserError(f"--noise {self.noise}: expected a relative sd in [0, 1) (0.03 = 3%)")


@dataclass(frozen=True)
class Options(Decision):
    """How a comparison decides (`Decision`) and gates.

    - fail_on: the verdicts that fail the gate (`parse_fail_on`); () never fails.
    - any_scenario: join on case_id even when the sides' scenarios differ.
    """

    fail_on: tuple[str, ...] = DEFAULT_FAIL_ON
    any_scenario: bool = False

    def __post_init__(self):
        super().__post_init__()
        _check_fail_on(self.fail_on)


@dataclass
class Side:
    """One side of a comparison: its records and what identifies them."""

    role: str  # "baseline" or "candidate"
    selector: str
    records: pd.DataFrame

    @property
    def run_ids(self) -> list[str]:
        return sorted(self.records["run_id"].unique())

    @property
    def scenario(self) -> str:
        return ", ".join(sorted(self.records["scenario"].dropna().unique()))

    def values(self, column: str) -> list[str]:
        if column not in self.records:
            return []
        return sorted({str(v) for v in self.records[column].dropna().unique()})

    def describe(self) -> str:
        torch = ", ".join(self.values("torch_version")) or "?"
        where = ", ".join(self.values("device_name")) or ", ".join(self.values("device")) or "?"
        runs = self.run_ids
        return f"{len(runs)} run(s) {', '.join(runs)}: torch {torch} on {where}"


@dataclass(frozen=True)
class Reach:
    """What the data of one metric (speedup, or time) can and cannot show: the report's headline."""

    metric: str
    spread: stats.Spread  # run-to-run spread, pooled over cases and sides
    compared: int  # cases measured on both sides with this metric
    tested: int  # ... of which have enough runs for a verdict
    runs: tuple[int, int]  # typical (median) runs per case on the baseline and candidate side
    detectable: float  # relative change a typical case is called regressed with 80% power at the per-case confidence; NaN if none
    gate_detectable: float  # ... that fails the gate with 80% power (Bonferroni over the gate's tests, Holm's first step); NaN if none
    worst: float  # the least favourable end of any tested case's interval, as a ratio (speedup: lowest; time: highest); NaN if none
    kind: str = ""  # speedups: PAIRED or MEDIANS, the kind these cases were compared on


@dataclass(frozen=True)
class BaselineDrift:
    """Speedups against one baseline precision that moved together, one way, with the baseline's own
    time moving the matching way. `attributed`: they are baseline-changed (the baseline's time change
    is significant, theirs is not); otherwise the times are too uncertain to say which side moved
    (whole-run shifts blur absolute times far more than in-run speedups), and the report says so."""

    baseline: str  # the baseline precision, e.g. fp32
    speedup_ratio: float  # geometric mean of the moved speedups' change (candidate / baseline speedup)
    time_ratio: float  # geometric mean of the baseline cases' own time change (candidate / baseline time)
    cases: int  # the speedup cases that moved
    baseline_cases: int  # the baseline-precision cases behind them
    attributed: bool

    @property
    def slower(self) -> bool:
        return self.speedup_ratio > 1

    @property
    def sentence(self) -> str:
        """"speedups over fp32 rose because fp32 got 1.5x slower": the factor is how much the speedups
        moved, i.e. the baseline's change relative to the precisions measured against it."""
        factor = self.speedup_ratio if self.slower else 1 / self.speedup_ratio
        moved = "rose" if self.slower else "fell"
        if self.attributed:
            return (f"speedups over {self.baseline} {moved} because {self.baseline} got {factor:.3g}x "
                    f"{'slower' if self.slower else 'faster'}")
        return (f"speedups over {self.baseline} {moved} {factor:.3g}x on {self.cases} cases: {self.baseline} "
                f"got {'slower' if self.slower else 'faster'} or the others {'faster' if self.slower else 'slower'}, "
                f"absolute times cannot tell ({self.baseline}'s own time {self.time_ratio:.3g}x, not significant)")

    @property
    def detail(self) -> str:
        return (f"{self.cases} speedup(s) over {self.baseline} moved {self.speedup_ratio:.3g}x"
                + (" while their own times did not" if self.attributed else "")
                + f"; {self.baseline}'s own time changed {self.time_ratio:.3g}x (geometric mean over "
                f"{self.baseline_cases} case(s), candidate / baseline)")


@dataclass
class Comparison:
    """The result of `compare`: one row per case, and what the comparison as a whole can tell.

    Fields:
    - baseline, candidate: the two `Side`s (their records and selectors).
    - options: the `Options` it ran with (thresholds, minimum runs, the gate's `fail_on`).
    - cases: one row per case_id, sorted by verdict (worst first) then effect. Columns:
      identity (case_id, baseline_case_id, workload, precision, baseline, m, k, n, params, shape);
      base_status / cand_status and base_reason / cand_reason (a side's status: ok if any of its runs
      measured the case); base_runs / cand_runs (runs that measured it);
      speedup_kind ("paired" or "ratio of medians": which speedup the case is compared on);
      base_speedup / cand_speedup (geometric mean over runs of the in-run speedup) with _low/_high
      (that side's interval); speedup_ratio (candidate / baseline speedup) with _low/_high (the
      change's interval at `confidence`), speedup_p (two-sided p-value of no change),
      speedup_verdict; base_time_ms / cand_time_ms (geometric mean over runs of the median time);
      time_ratio (candidate / baseline time: > 1 is slower) with _low/_high, time_p, time_verdict;
      base_sm_clock_mhz / cand_sm_clock_mhz (geometric mean over runs of the mean SM clock while
      timed; NaN unless every run recorded one); cycles_ratio (candidate / baseline cycles, time x
      clock) with _low/_high, cycles_p, cycles_verdict: only where the clocks differ by more than
      envdiff.CLOCK_TOLERANCE and the time is compared (else NaN and ""); verdict (the headline verdict),
      metric ("speedup" where the verdict is about the speedup), detail, base_rel_err / cand_rel_err,
      effect (|log change|, for sorting), explanation (what differs between the sides' runs of the
      case, one line each; empty for a "same" verdict), gate (the case fails `options.fail_on`).
    - spread: test -> `stats.Spread`, the pooled run-to-run spread ("speedup", "speedup (ratio of
      medians)" where both kinds are compared, "time" only when compared, "cycles" where a case has a
      cycles verdict).
    - reach: test -> `Reach`, what that test's data can and cannot show.
    - time_compared: both sides ran on the same device model, so absolute times were compared.
    - drift: one `BaselineDrift` per baseline precision whose own time change moved speedups.
    - environment: what differs between the sides' runs (`envdiff.EnvDiff`); each case's own list is
      its `explanation` column.
    - warnings: notes for the reader (different suite code, uncommitted changes, failures, devices).
    """

    baseline: Side
    candidate: Side
    options: Options
    cases: pd.DataFrame
    spread: dict[str, stats.Spread]
    reach: dict[str, Reach]
    time_compared: bool
    drift: list[BaselineDrift] = field(default_factory=list)
    environment: envdiff.EnvDiff = envdiff.EnvDiff((), ())
    warnings: list[str] = field(default_factory=list)

    def counts(self) -> dict[str, int]:
        return {v: int(n) for v, n in self.cases["verdict"].value_counts().items()}

    def failing(self, fail_on: tuple[str, ...] | None = None) -> pd.DataFrame:
        """Cases that fail the gate `fail_on` (default: the options'); see the module docstring."""
        fail_on = self.options.fail_on if fail_on is None else fail_on
        return self.cases[gate(self.cases, fail_on, self.options.confidence)]


def _split(fail_on: tuple[str, ...]) -> tuple[set[str], set[str]]:
    """fail_on -> (names of verdicts, names of time verdicts)."""
    return ({n for n in fail_on if not n.startswith(TIME_PREFIX)},
            {n[len(TIME_PREFIX):] for n in fail_on if n.startswith(TIME_PREFIX)})


def _family(cases: pd.DataFrame, fail_on: tuple[str, ...]) -> dict[str, np.ndarray]:
    """metric -> p-values of the tests the gate looks at (NaN where a case has no test): speedup
    tests when fail_on names a tested verdict, or a time verdict a baseline-changed speedup can
    corroborate; time tests when it names time:regressed or time:improved. A case with too few runs
    is no test."""
    plain, timed = _split(fail_on)
    out = {}
    for metric, names in (("speedup", plain), ("time", timed)):
        if names & set(TESTED) or (metric == "speedup" and timed & set(MOVED)):
            tested = cases[f"{metric}_verdict"].isin(DECIDED)
            out[metric] = cases[f"{metric}_p"].where(tested, np.nan).to_numpy(float)
    return out


def family_size(cases: pd.DataFrame, fail_on: tuple[str, ...]) -> int:
    """How many tests the gate adjusts for (Holm's m)."""
    return int(sum(np.isfinite(p).sum() for p in _family(cases, fail_on).values()))


def gate(cases: pd.DataFrame, fail_on: tuple[str, ...], confidence: float) -> pd.Series:
    """Which cases fail `fail_on`: a listed verdict, and for a tested verdict a change that is still
    significant after Holm's adjustment over every test the gate looks at. A baseline-precision case
    whose time verdict is listed also fails when a speedup against it is baseline-changed at that
    level (the change is its own: see the module docstring)."""
    plain, timed = _split(fail_on)
    family = _family(cases, fail_on)
    adjusted = stats.holm(np.concatenate(list(family.values()))) if family else np.empty(0)
    significant = {metric: pd.Series(adjusted[i * len(cases):(i + 1) * len(cases)] < 1.0 - confidence,
                                     index=cases.index) for i, metric in enumerate(family)}
    hit = pd.Series(False, index=cases.index)
    for column, metric, names in (("verdict", "speedup", plain), ("time_verdict", "time", timed)):
        hit |= cases[column].isin(names - set(TESTED))
        if metric in significant:
            hit |= cases[column].isin(names & set(TESTED)) & significant[metric]
    if "speedup" in significant and timed & set(MOVED):
        blamed = cases["verdict"].eq(BASELINE_CHANGED) & significant["speedup"]
        hit |= cases["case_id"].isin(set(cases.loc[blamed, "baseline_case_id"])) & cases["time_verdict"].isin(timed)
    return hit


def _missing(value) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value))


def _side_status(rows: list[dict]) -> tuple[str, str]:
    """A case's status on one side: ok if any pooled run measured it, else the commonest status."""
    statuses = [r["status"] for r in rows]
    if "ok" in statuses:
        return "ok", ""
    status = Counter(statuses).most_common(1)[0][0]
    reasons = [r.get("reason") for r in rows if r["status"] == status and not _missing(r.get("reason"))]
    return status, str(reasons[0]) if reasons else ""


@dataclass
class Measured:
    """What one side measured of one case, run by run."""

    speedups: dict[str, float] = field(default_factory=dict)  # run_id -> in-run speedup (ratio of medians)
    paired: dict[str, float] = field(default_factory=dict)  # run_id -> in-run speedup from paired rounds
    times: dict[str, float] = field(default_factory=dict)  # run_id -> median time (ms)
    clocks: dict[str, float] = field(default_factory=dict)  # run_id -> mean SM clock while timed (MHz), where recorded
    speedup_why: str = ""  # why there is no speedup
    emulated: bool = False
    rel_err: float = math.nan

    @property
    def speedup(self) -> float:
        return derived.geomean(self.speedups.values())

    @property
    def time_ms(self) -> float:
        return derived.geomean(self.times.values())

    @property
    def clock_mhz(self) -> float:
        """Geometric mean over runs of the SM clock; NaN unless every timed run recorded one (a CPU,
        an older record): a side's cycles are its times scaled by their own runs' clocks."""
        return derived.geomean(self.clocks.values()) if self.times and self.clocks.keys() >= self.times.keys() \
            else math.nan

    @property
    def all_paired(self) -> bool:
        """Every run with a speedup has one from paired rounds."""
        return bool(self.speedups) and all(r in self.paired for r in self.speedups)

    def speedups_of(self, kind: str) -> dict[str, float]:
        """run_id -> speedup of that kind (PAIRED or MEDIANS)."""
        return {r: self.paired[r] for r in self.speedups} if kind == PAIRED else self.speedups


def speedup_kind(base: Measured, cand: Measured) -> str:
    """PAIRED where both sides have a paired speedup in every run (`speedup_paired`: the median of
    the rounds' ratios, which drift within a run does not move), else MEDIANS (the baseline's median
    time over the case's, each taken in its own window)."""
    return PAIRED if base.all_paired and cand.all_paired else MEDIANS


# The columns a comparison reads from the records (a record has some 140).
USED_COLUMNS = ("run_id", "case_id", "baseline_case_id", "workload", "precision", "baseline", "m", "k", "n", "params",
                "status", "reason", "time_ms_median", "rel_err", "emulated", "speedup_paired", "sm_clock_mhz_mean")


@dataclass(frozen=True)
class SideRecords:
    """One side's records as plain dicts of the columns a comparison reads, indexed by case."""

    by_case: dict[str, list[dict]]
    times: dict[tuple[str, str], float]  # (run_id, case_id) -> median time of a measured record
    paired: dict[tuple[str, str], float] = field(default_factory=dict)  # (run_id, case_id) -> speedup_paired
    unusable: dict[tuple[str, str], object] = field(default_factory=dict)  # measured, its median no positive number
    clocks: dict[tuple[str, str], float] = field(default_factory=dict)  # (run_id, case_id) -> mean SM clock (MHz)

    @classmethod
    def of(cls, records: pd.DataFrame) -> "SideRecords":
        rows = frame_rows.records(records[[c for c in USED_COLUMNS if c in records]])
        by_case: dict[str, list[dict]] = {}
        times, paired, unusable, clocks = {}, {}, {}, {}
        for r in rows:
            by_case.setdefault(r["case_id"], []).append(r)
            if r["status"] != "ok":
                continue
            for value, into in ((r["time_ms_median"], times), (r.get("speedup_paired"), paired),
                                (r.get("sm_clock_mhz_mean"), clocks)):
                if _positive(value):
                    into[(r["run_id"], r["case_id"])] = float(value)
            if not _positive(r["time_ms_median"]):
                unusable[(r["run_id"], r["case_id"])] = r["time_ms_median"]
        return cls(by_case, times, paired, unusable, clocks)


def _positive(value) -> bool:
    return not _missing(value) and math.isfinite(value) and value > 0


def measure(rows: list[dict], side: SideRecords) -> Measured:
    """A run's value of a case is its median time (robust to a bimodal run); its speedup is the
    in-run baseline precision's median over it."""
    ok = [r for r in rows if r["status"] == "ok"]
    case_id, base_id = rows[0]["case_id"], rows[0].get("baseline_case_id")
    errors = [float(r["rel_err"]) for r in ok if not _missing(r.get("rel_err"))]
    m = Measured(emulated=any(not _missing(r.get("emulated")) and bool(r["emulated"]) for r in ok),
                  rel_err=float(np.median(errors)) if errors else math.nan)
    m.times = {r["run_id"]: side.times[(r["run_id"], case_id)] for r in ok if (r["run_id"], case_id) in side.times}
    m.clocks = {r: side.clocks[(r, case_id)] for r in m.times if (r, case_id) in side.clocks}
    if not isinstance(base_id, str) or not base_id:
        m.speedup_why = "no baseline precision in the scenario"
    elif base_id == case_id:
        m.speedup_why = "this is the baseline precision (speedup 1 by definition)"
    elif m.emulated:
        m.speedup_why = "timing is emulated on this device (numerics only, not speed)"
    else:
        speedups = {r: side.times[(r, base_id)] / t for r, t in m.times.items() if (r, base_id) in side.times}
        m.speedups = {r: s for r, s in speedups.items() if _positive(s)}  # a ratio of extremes under/overflows
        m.paired = {r: side.paired[(r, case_id)] for r in m.speedups if (r, case_id) in side.paired}
        if not m.speedups:
            m.speedup_why = _no_speedup(side, case_id, base_id, [r["run_id"] for r in ok])
    return m


def _no_speedup(side: SideRecords, case_id: str, base_id: str, runs: list[str]) -> str:
    """Why a measured case has no speedup: a median that is no positive time (a reader refuses
    one; a frame handed in directly may hold it) is named as such, never as "not measured"."""
    for r in runs:
        for case, whose in ((case_id, "its"), (base_id, "its baseline-precision case's")):
            if (r, case) in side.unusable:
                return f"{whose} median time in run {r} is {side.unusable[(r, case)]!r}, not a positive time"
    return "its baseline-precision case was not measured in the same run"


@dataclass
class _Case:
    """One case while it is being compared: its row of `Comparison.cases` and both sides' runs."""

    row: dict
    base: Measured
    cand: Measured
    base_runs: frozenset = frozenset()  # the runs of each side that hold the case
    cand_runs: frozenset = frozenset()
    key: str = "speedup"  # which of the comparison's speedup tests holds it (`_tests`)

    @property
    def measured(self) -> bool:
        return self.row["verdict"] is None  # both sides ok: the statistics decide


def transition(base: str | None, cand: str | None) -> str | None:
    """The verdict implied by the statuses alone, or None when both sides measured the case."""
    if base is None:
        return MISSING
    if cand is None:
        return MISSING
    if base == "ok" and cand == "ok":
        return None
    if cand == "failed":
        return FAILED if base == "failed" else NEW_FAILURE
    if cand == "skipped":
        return SKIPPED if base == "skipped" else NEW_SKIP
    return RECOVERED  # cand ok, base skipped or failed


def _devices(side: Side) -> set[tuple[str, str]]:
    """(device, device name) of a side's records; '' where absent (an all-skipped CUDA run has no name)."""
    named = side.records[["device", "device_name"]].astype(object)
    return {(str(d), str(n)) for d, n in named.where(named.notna(), "").drop_duplicates().to_numpy()}


def _same_device(base: Side, cand: Side) -> tuple[bool, str]:
    b, c = _devices(base), _devices(cand)
    if len(b) == 1 and b == c:
        return True, ""
    fmt = lambda s: " / ".join(f"{d} {n}" for d, n in sorted(s))  # noqa: E731
    return False, f"devices differ (baseline: {fmt(b)}; candidate: {fmt(c)}): absolute times are not compared, speedups are"


def _check_sides(base: Side, cand: Side, opts: Options) -> None:
    for side in (base, cand):
        if side.records.empty:
            raise UserError(f"{side.role} {side.selector!r} selects no runs")
    shared = set(base.run_ids) & set(cand.run_ids)
    if shared:
        raise UserError(f"baseline and candidate both select run(s) {', '.join(sorted(shared))}; "
                        "a run compared with itself says nothing (use skip=1 for the run before the newest)")
    if base.scenario != cand.scenario and not opts.any_scenario:
        raise UserError(f"baseline runs are of scenario {base.scenario!r} and candidate runs of {cand.scenario!r}; "
                        "select the same scenario on both sides, or pass --any-scenario to join on case_id anyway")


def _warnings(base: Side, cand: Side) -> list[str]:
    out = []
    for column, what in (("code_hash", "the suite's code"), ("git_sha", "the suite's git commit")):
        b, c = base.values(column), cand.values(column)
        if b and c and b != c:
            out.append(f"{what} differs between sides ({column} {', '.join(b)} vs {', '.join(c)}): "
                       "a change may come from the benchmark, not from the software under test")
            break
    for side in (base, cand):
        if "git_dirty" in side.records and side.records["git_dirty"].fillna(False).astype(bool).any():
            out.append(f"{side.role} runs were measured from a git tree with uncommitted changes")
    return out


def _failure_notes(rows: list[dict]) -> list[str]:
    """One line per side that has failed cases: how many, how many are new, the first reason."""
    notes = []
    for prefix, role in (("base", "baseline"), ("cand", "candidate")):
        failed = [r for r in rows if r[f"{prefix}_status"] == "failed"]
        if not failed:
            continue
        new = sum(r["verdict"] == NEW_FAILURE for r in failed) if prefix == "cand" else 0
        first = failed[0]
        notes.append(f"{len(failed)} case(s) failed on the {role} side" + (f" ({new} new)" if new else "")
                     + f"; e.g. {first['workload']} {first['precision']} {first['shape']}: {first[f'{prefix}_reason']}")
    return notes


def _identity(rows: list[dict]) -> dict:
    first = rows[0]
    params = first.get("params")
    return {
        "case_id": first["case_id"],
        "baseline_case_id": first.get("baseline_case_id"),
        "workload": first["workload"],
        "precision": first["precision"],
        "baseline": first.get("baseline"),
        "m": first.get("m"), "k": first.get("k"), "n": first.get("n"),
        "params": params if isinstance(params, str) else json.dumps(params or {}),
        "shape": derived.shape_label(first),
    }


def _run_values(cases: list[_Case], metric: str, time_ok: bool, kind: str | None = None) -> tuple[dict, dict]:
    """Both sides' per-run log values of a metric (oriented: larger is better), for the cases that
    have it on both sides (speedups: of the `kind` the case is compared on; cycles: a clock in every
    run of both sides): {case_id: {run_id: value}}."""
    base, cand = {}, {}
    for c in cases:
        if not c.measured:
            continue
        if metric == "speedup":
            if speedup_kind(c.base, c.cand) != kind:
                continue
            b, k = c.base.speedups_of(kind), c.cand.speedups_of(kind)
            sign = 1.0
        else:
            if not time_ok or c.base.emulated or c.cand.emulated:
                continue
            b, k = c.base.times, c.cand.times
            if metric == CYCLES:  # each run's time scaled by its own clock: cycles, up to a constant
                if not (math.isfinite(c.base.clock_mhz) and math.isfinite(c.cand.clock_mhz)):
                    continue
                b, k = ({r: t * m.clocks[r] for r, t in times.items()} for m, times in ((c.base, b), (c.cand, k)))
                if not all(_positive(v) for v in (*b.values(), *k.values())):  # a product out of float's range
                    continue
            sign = -1.0  # -log time: faster is larger
        if b and k:
            base[c.row["case_id"]] = {r: sign * math.log(v) for r, v in b.items()}
            cand[c.row["case_id"]] = {r: sign * math.log(v) for r, v in k.items()}
    return base, cand


def _tests(work: list[_Case]) -> dict[str, tuple[str, str | None]]:
    """The comparison's tests: key -> (metric, speedup kind). Speedups of the two kinds are fitted
    apart (a paired speedup's run-to-run spread is not a ratio of medians'): `speedup` is the paired
    ones where any case has them, `speedup (ratio of medians)` the others beside them; `time`."""
    kinds = {speedup_kind(c.base, c.cand) for c in work if c.measured and c.base.speedups and c.cand.speedups}
    out: dict[str, tuple[str, str | None]] = {}
    for kind in (PAIRED, MEDIANS):
        if kind in kinds or (kind == MEDIANS and not kinds):
            out["speedup" if not out else f"speedup ({kind})"] = ("speedup", kind)
    out["time"] = ("time", None)
    for c in work:
        c.key = next((key for key, (m, kind) in out.items() if m == "speedup" and kind == speedup_kind(c.base, c.cand)),
                     "speedup")
    return out


def _too_few_runs(ch: stats.Change, opts: Options, spread: stats.Spread) -> str:
    if not spread.observable:
        return (f"{ch.base.runs} run(s) on the baseline side, {ch.cand.runs} on the candidate side, and no case has 2 "
                f"runs on a side: run-to-run noise cannot be measured; record {stats.RECOMMENDED_RUNS} runs per "
                f"side (runs={stats.RECOMMENDED_RUNS})")
    return (f"{ch.base.runs} run(s) on the baseline side, {ch.cand.runs} on the candidate side; a verdict needs "
            f"{opts.min_runs} per side (record {stats.RECOMMENDED_RUNS}: runs={stats.RECOMMENDED_RUNS})")


def _finish(c: _Case, changes: dict[str, dict[str, stats.Change]], spread: dict[str, stats.Spread],
            opts: Options) -> None:
    """Intervals and verdicts of one case, once the run-to-run spread is known."""
    row, b, k = c.row, c.base, c.cand
    row.update(base_speedup=b.speedup, cand_speedup=k.speedup, base_time_ms=b.time_ms, cand_time_ms=k.time_ms,
               base_rel_err=b.rel_err, cand_rel_err=k.rel_err, base_runs=len(b.times), cand_runs=len(k.times))
    for key in ("base_speedup_low", "base_speedup_high", "cand_speedup_low", "cand_speedup_high", "speedup_ratio",
                "speedup_ratio_low", "speedup_ratio_high", "speedup_p", "time_ratio", "time_ratio_low",
                "time_ratio_high", "time_p", "effect"):
        row[key] = math.nan
    row["speedup_verdict"] = row["time_verdict"] = row["metric"] = row["speedup_kind"] = ""
    if not c.measured:
        return
    notes = {}
    ch = changes[c.key].get(row["case_id"])
    if ch is not None:
        kind = speedup_kind(b, k)
        row.update(speedup_kind=kind, base_speedup=derived.geomean(b.speedups_of(kind).values()),
                   cand_speedup=derived.geomean(k.speedups_of(kind).values()))
        row.update(speedup_ratio=ch.ratio, speedup_ratio_low=ch.ratio_low, speedup_ratio_high=ch.ratio_high,
                   speedup_p=ch.p, effect=abs(ch.estimate))
        row.update(base_speedup_low=stats.exp(ch.base.low), base_speedup_high=stats.exp(ch.base.high),
                   cand_speedup_low=stats.exp(ch.cand.low), cand_speedup_high=stats.exp(ch.cand.high))
        row["speedup_verdict"] = stats.verdict(ch, opts.min_effect, opts.min_runs)
        if row["speedup_verdict"] == INSUFFICIENT_RUNS:
            notes["speedup"] = _too_few_runs(ch, opts, spread[c.key])
    ch = changes["time"].get(row["case_id"])
    if ch is not None:
        # time_ratio is candidate / baseline time: the inverse of the (faster = positive) change
        row.update(time_ratio=stats.exp(-ch.estimate), time_ratio_low=stats.exp(-ch.high),
                   time_ratio_high=stats.exp(-ch.low), time_p=ch.p)
        row["time_verdict"] = stats.verdict(ch, opts.min_effect, opts.min_runs)
        if row["time_verdict"] == INSUFFICIENT_RUNS:
            notes["time"] = _too_few_runs(ch, opts, spread["time"])
    if row["speedup_verdict"]:
        row["verdict"], row["metric"] = row["speedup_verdict"], "speedup"
        row["detail"] = notes.get("speedup", "")
    else:
        row["verdict"] = NOT_APPLICABLE
        row["detail"] = b.speedup_why or k.speedup_why
        if math.isfinite(row["time_ratio"]) and row["time_ratio"] > 0:
            row["effect"] = abs(math.log(row["time_ratio"]))
        if "time" in notes:
            row["detail"] += f"; time: {notes['time']}"


def _clock_changes(work: list[_Case], changes: dict[str, stats.Change], opts: Options) -> None:
    """Each case's SM clock per side (NaN where a side's runs did not all record one) and, where the
    time is compared and the two clocks differ (`envdiff.clocks_differ`), its change in clock-normalised time
    (`changes`: the cycles test, fitted as the time is): ratio, interval, p and verdict; a sentence
    in `detail` where that verdict is not the time's. It informs and never gates (module docstring)."""
    for c in work:
        row = c.row
        row.update(base_sm_clock_mhz=c.base.clock_mhz, cand_sm_clock_mhz=c.cand.clock_mhz, cycles_ratio=math.nan,
                   cycles_ratio_low=math.nan, cycles_ratio_high=math.nan, cycles_p=math.nan, cycles_verdict="")
        ch = changes.get(row["case_id"])
        if ch is None or not row["time_verdict"] or not envdiff.clocks_differ(c.base.clock_mhz, c.cand.clock_mhz):
            continue
        row.update(cycles_ratio=stats.exp(-ch.estimate), cycles_ratio_low=stats.exp(-ch.high),
                   cycles_ratio_high=stats.exp(-ch.low), cycles_p=ch.p)
        row["cycles_verdict"] = stats.verdict(ch, opts.min_effect, opts.min_runs)
        if row["cycles_verdict"] != row["time_verdict"]:
            row["detail"] = "; ".join(filter(None, (row["detail"], clock_sentence(row))))


def clock_sentence(row: dict) -> str:
    """What a case's time and clock-normalised time verdicts say together, where they differ: "slower
    by 8.0% in time but unchanged in clock-normalised time (SM clock 1980 -> 1830 MHz): the change is
    the clock"."""
    def said(verdict: str, ratio: float) -> str:
        if verdict == stats.REGRESSED:
            return f"slower by {ratio - 1:.1%}"
        return f"faster by {1 - ratio:.1%}" if verdict == stats.IMPROVED else verdict

    time, cycles = row["time_verdict"], row["cycles_verdict"]
    text = (f"{said(time, row['time_ratio'])} in time but {said(cycles, row['cycles_ratio'])} in clock-normalised "
            f"time (SM clock {row['base_sm_clock_mhz']:.0f} -> {row['cand_sm_clock_mhz']:.0f} MHz)")
    if cycles == stats.UNCHANGED and time in MOVED:
        return text + ": the change is the clock"
    if time == stats.UNCHANGED and cycles in MOVED:
        return text + ": the clock change hides it"
    return text


def _reach(metric: str, kind: str | None, cases: pd.DataFrame, spread: stats.Spread,
           changes: dict[str, stats.Change], opts: Options) -> Reach:
    compared = list(changes.values())
    m = max(1, family_size(cases, opts.fail_on))  # every test the gate adjusts for, of all kinds
    if kind is not None:
        cases = cases[cases["speedup_kind"] == kind]
    tested = cases[cases[f"{metric}_verdict"].isin(DECIDED)]
    runs = ((int(np.median([c.base.runs for c in compared])), int(np.median([c.cand.runs for c in compared])))
            if compared else (0, 0))
    if metric == "speedup":
        worst = float(tested["speedup_ratio_low"].min()) if len(tested) else math.nan
    else:
        worst = float(tested["time_ratio_high"].max()) if len(tested) else math.nan
    found = (stats.power_change(spread, *runs, opts.confidence, opts.min_effect),
             stats.power_change(spread, *runs, 1.0 - (1.0 - opts.confidence) / m, opts.min_effect))
    return Reach(metric, spread, len(compared), len(tested), runs, *(found if compared else (math.nan, math.nan)),
                 worst, kind or "")


def _baseline_changes(work: list[_Case]) -> None:
    """A speedup that moved while the case's own time did not, and its baseline precision's time
    moved the other way (slower baseline: speedups rise), is baseline-changed."""
    rows = {c.row["case_id"]: c.row for c in work}
    moved: dict[str, int] = {}
    for c in work:
        row = c.row
        base = rows.get(row["baseline_case_id"])
        if row["verdict"] not in MOVED or base is None or row["time_verdict"] in MOVED:
            continue
        expected = stats.REGRESSED if row["verdict"] == stats.IMPROVED else stats.IMPROVED
        if base["time_verdict"] != expected:
            continue
        row["verdict"] = BASELINE_CHANGED
        row["detail"] = (f"{base['precision']}'s time changed {base['time_ratio']:.3g}x ({expected}); this case's own "
                         f"time {row['time_ratio']:.3g}x ({row['time_verdict'] or 'not compared'})")
        moved[base["case_id"]] = moved.get(base["case_id"], 0) + 1
    for case_id, n in moved.items():
        rows[case_id]["detail"] += f"; its time change moved {n} speedup(s) against it (baseline-changed)"


def _drift(cases: pd.DataFrame, min_effect: float) -> list[BaselineDrift]:
    """One BaselineDrift per baseline precision and direction: its baseline-changed speedups, or else
    two or more speedups that moved one way while its time moved the matching way by at least the
    minimum effect, without significance (attribution left open)."""
    moved = cases[cases["verdict"].isin([*MOVED, BASELINE_CHANGED])]
    by_id = cases.set_index("case_id")
    out = []
    for (baseline, up), group in moved.groupby([moved["baseline"], moved["speedup_ratio"] > 1], sort=True):
        blamed = group[group["verdict"] == BASELINE_CHANGED]
        bases = by_id.loc[sorted(set((blamed if len(blamed) else group)["baseline_case_id"]) & set(by_id.index))]
        time_ratio = derived.geomean(bases["time_ratio"])
        matching = time_ratio >= 1 + min_effect if up else time_ratio <= 1 / (1 + min_effect)
        if len(blamed) or (len(group) >= 2 and matching):
            chosen = blamed if len(blamed) else group
            out.append(BaselineDrift(str(baseline), derived.geomean(chosen["speedup_ratio"]), time_ratio,
                                     len(chosen), len(bases), bool(len(blamed))))
    return out


def _explain(work: list[_Case], base: Side, cand: Side) -> envdiff.EnvDiff:
    """Each case's `explanation`: what differs between the runs of each side that hold it (its
    kernel too, where recorded), for every verdict that is not "same". Returns the sides' whole diff."""
    b, c = envdiff.RunFacts(base.records), envdiff.RunFacts(cand.records)
    run_level: dict[tuple[frozenset, frozenset], tuple[envdiff.Difference, ...]] = {}
    labels = {}
    for case in work:
        row = case.row
        labels[row["case_id"]] = f"{row['workload']} {row['precision']} {row['shape']}"
        same = row["verdict"] in SAME or (row["verdict"] == NOT_APPLICABLE
                                          and row["time_verdict"] in ("", stats.UNCHANGED))
        if same:
            row["explanation"] = []
            continue
        key = (case.base_runs, case.cand_runs)
        if key not in run_level:
            run_level[key] = envdiff.between(b, c, *key)
        own = envdiff.case_between(b, c, *key, row["case_id"])
        row["explanation"] = [d.text for d in (*run_level[key], *own)]
    return envdiff.diff_facts(b, c, labels)


def _start(case_id: str, b_rows: list[dict] | None, c_rows: list[dict] | None, b_side: SideRecords,
           c_side: SideRecords) -> _Case:
    """A case's row from the statuses alone, and what each side measured of it."""
    row = _identity(b_rows if b_rows is not None else c_rows)
    b_status, b_reason = _side_status(b_rows) if b_rows is not None else (None, "")
    c_status, c_reason = _side_status(c_rows) if c_rows is not None else (None, "")
    row.update(base_status=b_status, cand_status=c_status, base_reason=b_reason, cand_reason=c_reason)
    row["verdict"] = transition(b_status, c_status)
    row["detail"] = ""
    if b_status is None or c_status is None:
        row["detail"] = "candidate only" if b_status is None else "baseline only"
    elif row["verdict"] in (NEW_FAILURE, FAILED, NEW_SKIP, SKIPPED):
        row["detail"] = c_reason
    elif row["verdict"] == RECOVERED:
        row["detail"] = f"was {b_status}: {b_reason}"
    b = measure(b_rows, b_side) if b_status == "ok" else Measured()
    c = measure(c_rows, c_side) if c_status == "ok" else Measured()
    runs = [frozenset(r["run_id"] for r in rows or []) for rows in (b_rows, c_rows)]
    return _Case(row, b, c, *runs)


def compare(baseline: Side, candidate: Side, options: Options = Options()) -> Comparison:
    """Join both sides on case_id and give each case a verdict (see the module docstring and
    `Comparison` for what the result holds)."""
    _check_sides(baseline, candidate, options)
    time_ok, device_note = _same_device(baseline, candidate)
    warnings = _warnings(baseline, candidate) + ([device_note] if device_note else [])

    b_cases, c_cases = set(baseline.records["case_id"]), set(candidate.records["case_id"])
    if not b_cases & c_cases:
        raise UserError(
            f"no case is on both sides: baseline has {len(b_cases)} case(s) of scenario {baseline.scenario!r}, "
            f"candidate {len(c_cases)} of {candidate.scenario!r}, none with the same case_id "
            "(same workload, precision, shape and parameters)"
        )
    b_side, c_side = SideRecords.of(baseline.records), SideRecords.of(candidate.records)
    order = list(dict.fromkeys([*baseline.records["case_id"], *candidate.records["case_id"]]))
    work = [_start(case_id, b_side.by_case.get(case_id), c_side.by_case.get(case_id), b_side, c_side)
            for case_id in order]

    warnings += _failure_notes([c.row for c in work])
    tests = _tests(work)
    spread, changes = {}, {}
    for key, (metric, kind) in tests.items():
        spread[key], changes[key] = stats.run_changes(*_run_values(work, metric, time_ok, kind), options.confidence,
                                                      options.noise)
    cycles_spread, cycles = stats.run_changes(*_run_values(work, CYCLES, time_ok), options.confidence, options.noise)
    for c in work:
        _finish(c, changes, spread, options)
    _baseline_changes(work)
    _clock_changes(work, cycles, options)
    environment = _explain(work, baseline, candidate)
    cases = pd.DataFrame([c.row for c in work])
    cases["priority"] = cases["verdict"].map({v: i for i, v in enumerate(VERDICTS)})
    cases = cases.sort_values(["priority", "effect"], ascending=[True, False], na_position="last")
    cases = cases.drop(columns="priority").reset_index(drop=True)
    cases["gate"] = gate(cases, options.fail_on, options.confidence)
    keys = [key for key, (metric, _) in tests.items() if metric != "time" or time_ok]
    reach = {key: _reach(*tests[key], cases, spread[key], changes[key], options) for key in keys}
    spreads = {key: spread[key] for key in keys}
    if cases["cycles_verdict"].ne("").any():
        spreads[CYCLES] = cycles_spread
    return Comparison(baseline, candidate, options, cases, spreads, reach, time_ok, _drift(cases, options.min_effect),
                      environment, warnings)


def load_sides(baseline: str, candidate: str, results_dir) -> tuple[Side, Side]:
    """Select both sides' runs from the store (see `suite.results.select` for the selector syntax)."""
    from suite.results import select

    return (
        Side("baseline", baseline, select.select(baseline, results_dir, role="baseline")),
        Side("candidate", candidate, select.select(candidate, results_dir, role="candidate")),
    )
