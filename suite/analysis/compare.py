"""Compare two sets of runs case by case: did a speedup (or a time) change, and can we tell?

`compare(baseline_df, candidate_df, options)` joins the records of both sides on `case_id` and gives
every case one verdict:

| verdict     | meaning |
|-------------|---------|
| regressed   | the speedup over the in-run baseline precision fell by at least the minimum effect, and the interval excludes no change |
| improved    | the same, upwards |
| unchanged   | the interval lies within +-minimum effect, or the change is significant but smaller than it |
| noisy       | the interval straddles no change and reaches past the minimum effect: the data cannot tell |
| missing     | the case is on one side only (`detail` says which) |
| new-skip    | measured on the baseline side, skipped on the candidate side |
| new-failure | not failed on the baseline side, failed on the candidate side |
| recovered   | skipped or failed on the baseline side, measured on the candidate side |
| skipped     | skipped on both sides |
| failed      | failed on both sides |
| n/a         | measured on both sides but has no speedup to compare (it is the baseline precision, its baseline case was not measured, or its timing is emulated) |

The headline verdict is about the speedup (a ratio inside one run, so it survives a different card,
clock or machine). Absolute times are compared as well, in `time_verdict`, only where both sides ran
on the same device model. Statistics: `suite.analysis.stats`.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from suite.analysis import derived, stats
from suite.errors import UserError

MISSING, NEW_SKIP, NEW_FAILURE = "missing", "new-skip", "new-failure"
RECOVERED, SKIPPED, FAILED, NOT_APPLICABLE = "recovered", "skipped", "failed", "n/a"
VERDICTS = (
    stats.REGRESSED, NEW_FAILURE, NEW_SKIP, MISSING, stats.NOISY, stats.IMPROVED, RECOVERED,
    stats.UNCHANGED, SKIPPED, FAILED, NOT_APPLICABLE,
)
TIME_PREFIX = "time:"
DEFAULT_FAIL_ON = (stats.REGRESSED,)


@dataclass(frozen=True)
class Options:
    min_effect: float = stats.DEFAULT_MIN_EFFECT
    confidence: float = stats.DEFAULT_CONFIDENCE
    resamples: int = stats.DEFAULT_RESAMPLES
    noise: float | None = None  # relative run-to-run sd; None: estimate it from the cases
    seed: int = 0
    any_scenario: bool = False

    def __post_init__(self):
        if not 0 < self.min_effect < 1:
            raise UserError(f"--min-effect {self.min_effect}: expected a fraction between 0 and 1 (0.05 = 5%)")
        if not 0.5 <= self.confidence < 1:
            raise UserError(f"--confidence {self.confidence}: expected a value in [0.5, 1), e.g. 0.99")
        if self.resamples < 100:
            raise UserError(f"--resamples {self.resamples}: at least 100 are needed for a percentile interval")
        if self.noise is not None and self.noise < 0:
            raise UserError(f"--noise {self.noise}: expected a relative sd >= 0 (0.03 = 3%)")


def parse_fail_on(text: str) -> tuple[str, ...]:
    """`regressed,new-failure,time:regressed` -> verdict names; `none` -> never fail."""
    if text.strip().lower() == "none":
        return ()
    names = tuple(t.strip().lower() for t in text.split(",") if t.strip())
    for name in names:
        bare = name[len(TIME_PREFIX):] if name.startswith(TIME_PREFIX) else name
        if bare not in VERDICTS:
            raise UserError(f"--fail-on {name!r}: unknown verdict; choose from {', '.join(VERDICTS)} "
                            f"(prefix {TIME_PREFIX!r} for absolute-time verdicts), or none")
    return names


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


@dataclass
class Comparison:
    baseline: Side
    candidate: Side
    options: Options
    cases: pd.DataFrame  # one row per case_id (see `compare`)
    noise: dict[str, stats.NoiseEstimate]
    time_compared: bool
    warnings: list[str] = field(default_factory=list)

    def counts(self) -> dict[str, int]:
        return {v: int(n) for v, n in self.cases["verdict"].value_counts().items()}

    def failing(self, fail_on: tuple[str, ...] = DEFAULT_FAIL_ON) -> pd.DataFrame:
        """Cases whose verdict (or `time:` verdict) is one of fail_on."""
        plain = {n for n in fail_on if not n.startswith(TIME_PREFIX)}
        timed = {n[len(TIME_PREFIX):] for n in fail_on if n.startswith(TIME_PREFIX)}
        hit = self.cases["verdict"].isin(plain) | self.cases["time_verdict"].isin(timed)
        return self.cases[hit]


def _samples(row) -> np.ndarray | None:
    xs = stats.as_samples(row.get("samples_ms"))
    return xs if len(xs) >= 2 else None  # one sample has no spread to resample


class _Replicates:
    """Bootstrap replicates of log(median time) per (run, case), drawn once and shared: a baseline
    precision's replicates serve every case whose speedup is measured against it. Each key gets its
    own generator, so results do not depend on the order cases are visited in."""

    def __init__(self, opts: Options):
        self.opts = opts
        self.cache: dict[tuple[str, str], tuple[float, np.ndarray] | None] = {}

    def __call__(self, record: dict) -> tuple[float, np.ndarray] | None:
        """(log median, replicates) of this record's samples, or None without samples."""
        key = (str(record["run_id"]), str(record["case_id"]))
        if key not in self.cache:
            xs = _samples(record)
            if xs is None:
                self.cache[key] = None
            else:
                rng = stats.keyed_rng(self.opts.seed, *key)
                self.cache[key] = stats.log_median_replicates(xs, self.opts.resamples, rng)
        return self.cache[key]


def _side_status(rows: pd.DataFrame) -> tuple[str, str]:
    """A case's status on one side: ok if any pooled run measured it, else the commonest status."""
    if (rows["status"] == "ok").any():
        return "ok", ""
    status = rows["status"].value_counts().index[0]
    reasons = rows.loc[rows["status"] == status, "reason"].dropna()
    return status, str(reasons.iloc[0]) if len(reasons) else ""


@dataclass
class _Measured:
    """What one side says about one case: display values and bootstrap estimates."""

    speedup: float = math.nan  # geometric mean over runs of the in-run speedup
    time_ms: float = math.nan  # geometric mean over runs of the median time
    speedup_est: stats.SideEstimate | None = None
    time_est: stats.SideEstimate | None = None
    speedup_why: str = ""  # why there is no speedup
    emulated: bool = False
    rel_err: float = math.nan


def _measure(case_rows: pd.DataFrame, by_run: dict, reps: _Replicates, rng: np.random.Generator) -> _Measured:
    ok = case_rows[case_rows["status"] == "ok"]
    m = _Measured()
    m.emulated = bool(derived.is_emulated(ok).any())
    m.rel_err = float(pd.to_numeric(ok["rel_err"], errors="coerce").median()) if "rel_err" in ok else math.nan
    m.time_ms = derived.geomean(pd.to_numeric(ok["time_ms_median"], errors="coerce"))
    rows = ok.to_dict("records")
    timed = [r for r in map(reps, rows) if r is not None]
    if timed:  # -log time, so that larger is better, as for a speedup
        m.time_est = stats.side_estimate([-v for v, _ in timed], [-x for _, x in timed], rng)

    first = case_rows.iloc[0]
    base_id = first.get("baseline_case_id")
    if not isinstance(base_id, str) or not base_id:
        m.speedup_why = "no baseline precision in the scenario"
        return m
    if base_id == first["case_id"]:
        m.speedup_why = "this is the baseline precision (speedup 1 by definition)"
        return m
    if m.emulated:
        m.speedup_why = "timing is emulated on this device (numerics only, not speed)"
        return m
    speedups, values, replicates = [], [], []
    for row in rows:
        ref = by_run.get((row["run_id"], base_id))
        if ref is None or ref.get("status") != "ok":
            continue
        speedups.append(float(ref["time_ms_median"]) / float(row["time_ms_median"]))
        case_r, ref_r = reps(row), reps(ref)
        if case_r is not None and ref_r is not None:
            values.append(ref_r[0] - case_r[0])
            replicates.append(ref_r[1] - case_r[1])
    if not speedups:
        m.speedup_why = "its baseline-precision case was not measured in the same run"
        return m
    m.speedup = derived.geomean(speedups)
    m.speedup_est = stats.side_estimate(values, replicates, rng) if values else None
    return m


def _transition(base: str | None, cand: str | None) -> str | None:
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


def _same_device(base: Side, cand: Side) -> tuple[bool, str]:
    b = {tuple(x) for x in base.records[["device", "device_name"]].astype(str).drop_duplicates().to_numpy()}
    c = {tuple(x) for x in cand.records[["device", "device_name"]].astype(str).drop_duplicates().to_numpy()}
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


def _identity(rows: pd.DataFrame) -> dict:
    first = rows.iloc[0]
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


def _noise_for(metric: str, rows: list[dict], opts: Options) -> stats.NoiseEstimate:
    """The run-to-run noise added to every interval: as given, or what the spread of the changes
    across cases leaves unexplained by their bootstrap standard errors. Pooled sides are no
    exception: their replicates already resample runs, so only the excess over that is added,
    while a case's own 2-4 runs alone make too narrow an interval (the percentile bootstrap of a
    handful of values under-covers)."""
    if opts.noise is not None:
        return stats.given_noise(opts.noise)
    usable = [r for r in rows if r.get(f"_{metric}_reps") is not None]
    return stats.excess_noise(
        [r[f"_{metric}_d"] for r in usable],
        [float(np.std(r[f"_{metric}_reps"], ddof=1)) for r in usable],
        [(r["workload"], r["precision"]) for r in usable],
    )


def compare(baseline: Side, candidate: Side, options: Options = Options()) -> Comparison:
    """Join both sides on case_id and give each case a verdict (see the module docstring).

    Columns of `Comparison.cases`: the case's identity (case_id, baseline_case_id, workload,
    precision, baseline, m, k, n, params, shape), base_status / cand_status (+ _reason), base_/cand_speedup with
    _low/_high (per-side interval from sampling), speedup_ratio (candidate / baseline speedup) with
    _low/_high, speedup_verdict, base_/cand_time_ms, time_ratio (candidate / baseline time: > 1 is
    slower) with _low/_high, time_verdict, verdict, metric, detail, base_/cand_rel_err, effect
    (|log change| used for sorting)."""
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
    b_by_run = {(r["run_id"], r["case_id"]): r for r in baseline.records.to_dict("records")}
    c_by_run = {(r["run_id"], r["case_id"]): r for r in candidate.records.to_dict("records")}
    b_groups = dict(tuple(baseline.records.groupby("case_id", sort=False)))
    c_groups = dict(tuple(candidate.records.groupby("case_id", sort=False)))
    order = list(dict.fromkeys([*baseline.records["case_id"], *candidate.records["case_id"]]))
    b_reps, c_reps = _Replicates(options), _Replicates(options)
    alpha = 1.0 - options.confidence

    rows: list[dict] = []
    for case_id in order:
        b_rows, c_rows = b_groups.get(case_id), c_groups.get(case_id)
        row = _identity(b_rows if b_rows is not None else c_rows)
        b_status, b_reason = _side_status(b_rows) if b_rows is not None else (None, "")
        c_status, c_reason = _side_status(c_rows) if c_rows is not None else (None, "")
        row.update(base_status=b_status, cand_status=c_status, base_reason=b_reason, cand_reason=c_reason)
        row["verdict"] = _transition(b_status, c_status)
        row["detail"] = ""
        if b_status is None or c_status is None:
            row["detail"] = "candidate only" if b_status is None else "baseline only"
        elif row["verdict"] in (NEW_FAILURE, FAILED, NEW_SKIP, SKIPPED):
            row["detail"] = c_reason
        elif row["verdict"] == RECOVERED:
            row["detail"] = f"was {b_status}: {b_reason}"
        rng = stats.keyed_rng(options.seed, case_id)
        b = _measure(b_rows, b_by_run, b_reps, rng) if b_status == "ok" else _Measured()
        c = _measure(c_rows, c_by_run, c_reps, rng) if c_status == "ok" else _Measured()
        row.update(base_speedup=b.speedup, cand_speedup=c.speedup, base_time_ms=b.time_ms,
                   cand_time_ms=c.time_ms, base_rel_err=b.rel_err, cand_rel_err=c.rel_err)
        for prefix, m in (("base", b), ("cand", c)):
            est = m.speedup_est
            low, high = (np.quantile(est.replicates, [alpha / 2, 1 - alpha / 2]) if est else (math.nan, math.nan))
            row[f"{prefix}_speedup_low"], row[f"{prefix}_speedup_high"] = float(np.exp(low)), float(np.exp(high))
        row["_speedup_reps"] = row["_time_reps"] = None
        if row["verdict"] is None:
            if b.speedup_est and c.speedup_est:
                row["_speedup_d"] = c.speedup_est.log_value - b.speedup_est.log_value
                row["_speedup_reps"] = c.speedup_est.replicates - b.speedup_est.replicates
            if time_ok and b.time_est and c.time_est and not (b.emulated or c.emulated):
                row["_time_d"] = c.time_est.log_value - b.time_est.log_value  # -log time: + is faster
                row["_time_reps"] = c.time_est.replicates - b.time_est.replicates
            row["_why"] = b.speedup_why or c.speedup_why
            row["_has_speedup"] = math.isfinite(b.speedup) and math.isfinite(c.speedup)
        row["_rng"] = rng
        rows.append(row)

    warnings += _failure_notes(rows)
    noise = {metric: _noise_for(metric, rows, options) for metric in ("speedup", "time")}
    for row in rows:
        _finish_row(row, noise, options, time_ok)
    cases = pd.DataFrame(rows)
    cases = cases.drop(columns=[c for c in cases.columns if c.startswith("_")])
    cases["priority"] = cases["verdict"].map({v: i for i, v in enumerate(VERDICTS)})
    cases = cases.sort_values(["priority", "effect"], ascending=[True, False], na_position="last")
    cases = cases.drop(columns="priority").reset_index(drop=True)
    if not time_ok:
        noise.pop("time")
    return Comparison(baseline, candidate, options, cases, noise, time_ok, warnings)


def _finish_row(row: dict, noise: dict[str, stats.NoiseEstimate], opts: Options, time_ok: bool) -> None:
    """Intervals and verdicts of one case, once the run-to-run noise is known."""
    for key in ("speedup_ratio", "speedup_ratio_low", "speedup_ratio_high", "time_ratio", "time_ratio_low",
                "time_ratio_high", "effect"):
        row[key] = math.nan
    row["speedup_verdict"] = row["time_verdict"] = ""
    row["metric"] = ""
    measured = row["verdict"] is None
    if measured and row["_speedup_reps"] is not None:
        ch = stats.interval(row["_speedup_d"], row["_speedup_reps"], noise["speedup"], opts.confidence, row["_rng"])
        row.update(speedup_ratio=ch.ratio, speedup_ratio_low=ch.ratio_low, speedup_ratio_high=ch.ratio_high)
        row["speedup_verdict"] = stats.verdict(ch, opts.min_effect)
        row["effect"] = abs(ch.estimate)
    elif measured and row["_has_speedup"]:
        row["speedup_ratio"] = row["cand_speedup"] / row["base_speedup"]
        row["speedup_verdict"] = stats.NOISY
        row["effect"] = abs(math.log(row["speedup_ratio"]))
    if measured and row["_time_reps"] is not None:
        ch = stats.interval(row["_time_d"], row["_time_reps"], noise["time"], opts.confidence, row["_rng"])
        # time_ratio is candidate / baseline time: the inverse of the (faster = positive) change
        row.update(time_ratio=1 / ch.ratio, time_ratio_low=1 / ch.ratio_high, time_ratio_high=1 / ch.ratio_low)
        row["time_verdict"] = stats.verdict(ch, opts.min_effect)
    elif measured and time_ok and math.isfinite(row["base_time_ms"]) and math.isfinite(row["cand_time_ms"]):
        row["time_ratio"] = row["cand_time_ms"] / row["base_time_ms"]
        row["time_verdict"] = stats.NOISY
    if not measured:
        return
    if row["speedup_verdict"]:
        row["verdict"], row["metric"] = row["speedup_verdict"], "speedup"
        if row["_speedup_reps"] is None:
            row["detail"] = "no per-repetition samples: no interval"
    else:
        row["verdict"], row["metric"] = NOT_APPLICABLE, ""
        row["detail"] = row["_why"]
        if row["time_verdict"] and math.isfinite(row["time_ratio"]):
            row["effect"] = abs(math.log(row["time_ratio"]))


def load_sides(baseline: str, candidate: str, results_dir) -> tuple[Side, Side]:
    """Select both sides' runs from the store (see `suite.results.select` for the selector syntax)."""
    from suite.results import select

    return (
        Side("baseline", baseline, select.select(baseline, results_dir, role="baseline")),
        Side("candidate", candidate, select.select(candidate, results_dir, role="candidate")),
    )
