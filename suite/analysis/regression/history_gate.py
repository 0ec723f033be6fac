"""`history --fail-on`: the gate a nightly job runs over a scenario's history. It fails on what the
newest run(s) changed about the history, never again on what an earlier night already reported.

**New**, defined: the history of the same runs without the newest `new_runs` (by run id, their UTC
start) is what the same command reported the night before, over a window as long (`--last N` counts
N runs there too). A change point of tonight's history is new when that earlier history has none in
the same series (case, metric, device model) moving the same way within one run of it: the
calibrated location accuracy (docs/calibration.md), since a step's place can move by one as runs
arrive. A step is found once `min_runs` runs show its new level, so a regression that lands on one
night fails on the night its `min_runs`-th run arrives (the third with the default), and only then;
a step that only becomes clear as more runs arrive fails the night it does. A case is a new failure
(a new skip) when a newest run failed (skipped) it while the latest earlier run that holds it did not.

Verdicts (`--fail-on`, comma-joined): regressed, improved, baseline-changed (speedup change points;
baseline-changed: the speedup moved because the baseline precision's time did), time:regressed,
time:improved (time series' change points, the baseline precision's own included: a baseline
regression), new-failure, new-skip; or none. The change points were already held to the calibrated
false-alarm rate per series (`suite.analysis.regression.history`); the gate adds no test of its own.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import pandas as pd

from suite.analysis.frame import derived
from suite.analysis.regression import compare, history, stats
from suite.core.errors import UserError

TIME_PREFIX = compare.TIME_PREFIX
VERDICTS = (stats.REGRESSED, stats.IMPROVED, compare.BASELINE_CHANGED, TIME_PREFIX + stats.REGRESSED,
            TIME_PREFIX + stats.IMPROVED, compare.NEW_FAILURE, compare.NEW_SKIP)
# What a nightly job gates on: a speedup that fell (or moved because its baseline did), a time that
# rose (the baseline precision's too), a case that stopped working.
NIGHTLY = (stats.REGRESSED, compare.BASELINE_CHANGED, TIME_PREFIX + stats.REGRESSED, compare.NEW_FAILURE)


@dataclass(frozen=True)
class Failure:
    """One new finding of a listed verdict: a change point, or a case's status."""

    case_id: str
    label: str  # workload precision shape
    verdict: str  # as --fail-on names it
    run_id: str  # the first run at the new level, or the newest run with the new status
    text: str


@dataclass(frozen=True)
class Gate:
    fail_on: tuple[str, ...]
    new_runs: int
    failing: tuple[Failure, ...]
    earlier: str  # what "new" was judged against, in words

    def lines(self) -> list[str]:
        head = (f"gate --fail-on {','.join(self.fail_on)}: {len(self.failing)} new finding(s) in the newest "
                f"{self.new_runs} run(s) ({self.earlier}); exit status {1 if self.failing else 0}")
        return [head, *(f"  {f.text}" for f in self.failing)]


def parse_fail_on(text: str) -> tuple[str, ...]:
    """`regressed,time:regressed,new-failure` -> verdict names; `none` -> never fail."""
    names = compare.fail_on_names(text)
    for name in names:
        if name not in VERDICTS:
            raise UserError(f"--fail-on {name!r}: history's gate knows {', '.join(VERDICTS)}, or none")
    return names


def verdict_name(cp: history.ChangePoint) -> str:
    """A change point's verdict as --fail-on names it."""
    return cp.verdict if cp.metric == history.SPEEDUP else TIME_PREFIX + cp.verdict


def new_change_points(now: history.History, before: history.History | None) -> list[tuple[history.CaseSeries, history.ChangePoint]]:
    """The change points of `now` that `before` (the history without the newest runs) did not report
    (the module docstring's definition of new)."""
    position = {r.run_id: r.index for r in now.runs}
    known: dict[tuple[str, str, str], list[tuple[float, bool]]] = {}
    for s, cp in before.change_points() if before is not None else ():
        where = position.get(before.runs[cp.index].run_id, math.inf)
        known.setdefault((s.case_id, s.metric, s.device), []).append((where, cp.ratio > 1))
    return [(s, cp) for s, cp in now.change_points()
            if not any(abs(where - cp.index) <= 1 and up == (cp.ratio > 1)
                       for where, up in known.get((s.case_id, s.metric, s.device), ()))]


def new_statuses(records: pd.DataFrame, runs: list[str], new_runs: int) -> list[Failure]:
    """Cases a newest run failed or skipped that the latest earlier run holding them did not."""
    newest, rank = set(runs[-new_runs:]), {r: i for i, r in enumerate(runs)}
    held = records[records["run_id"].isin(rank)]
    ordered = held.assign(_rank=held["run_id"].astype(str).map(rank)).sort_values("_rank", kind="stable")
    in_newest = ordered["run_id"].isin(newest)
    # each case's row in the latest earlier run and in the latest newest run holding it: one pass
    # over the rows, not a sort per case (a nightly's history holds thousands of cases)
    earlier = dict(zip(ordered.loc[~in_newest, "case_id"], ordered.loc[~in_newest, "status"]))
    latest = {row["case_id"]: row for row in ordered[in_newest].to_dict("records")}
    out = []
    for case_id in held["case_id"].unique():
        if case_id not in earlier or case_id not in latest:
            continue
        last = latest[case_id]
        verdict = compare.transition(str(earlier[case_id]), str(last["status"]))
        if verdict in (compare.NEW_FAILURE, compare.NEW_SKIP):
            label = f"{last['workload']} {last['precision']} {derived.shape_label(last)}"
            out.append(Failure(case_id, label, verdict, str(last["run_id"]),
                               f"{verdict}: {label} in run {last['run_id']}: {last.get('reason') or 'no reason recorded'}"))
    return out


def check(records: pd.DataFrame, now: history.History, scenario: str, fail_on: tuple[str, ...], new_runs: int = 1,
          last: int | None = None) -> Gate:
    """The gate over `now` (the history of `window(records, last)`): every new finding whose verdict
    `fail_on` lists. `records`: every run of the scenario, so the earlier history spans as many runs."""
    if new_runs < 1 or new_runs >= len(now.runs):
        raise UserError(f"--new-runs {new_runs}: between 1 and the history's runs less one ({len(now.runs) - 1})")
    try:
        before = history.of_window(records, scenario, last, skip=new_runs, options=now.options)
        earlier = f"against the history of the {len(before.runs)} runs before them"
    except UserError:  # fewer than two earlier runs, or none measured: everything tonight is new
        before, earlier = None, "no history before them: every finding is new"
    failing = []
    for s, cp in new_change_points(now, before):
        verdict = verdict_name(cp)
        if verdict in fail_on:
            run = now.runs[cp.index].run_id
            unit = "x" if cp.metric == history.SPEEDUP else " ms"
            why = "; ".join([*([cp.cause] if cp.cause else []), *cp.explanation]) or "nothing recorded differs"
            failing.append(Failure(s.case_id, s.label, verdict, run,
                                   f"{verdict}: {s.label} {cp.metric} on {s.device}: {cp.before:.4g}{unit} -> "
                                   f"{cp.after:.4g}{unit} ({cp.ratio - 1:+.1%}) from run {run}; {why}"))
    runs = [r.run_id for r in now.runs]
    failing += [f for f in new_statuses(records, runs, new_runs) if f.verdict in fail_on]
    return Gate(fail_on, new_runs, tuple(failing), earlier)
