"""How often `compare` and `history` raise a false alarm, and how often they find a real slowdown.

    python -m benchmarks.calibrate                        # compare's table in docs/calibration.md
    python -m benchmarks.calibrate --out docs/calibration.md
    python -m benchmarks.calibrate --models "bursts 10%" --runs 3 --clean 20 --planted 5
    python -m benchmarks.calibrate --history --out docs/calibration.md   # history's table
    python -m benchmarks.calibrate --episodes --out docs/calibration.md  # history: episodes, steps, drift
    python -m benchmarks.calibrate --drift --out docs/calibration.md     # sequential against paired

Synthetic runs are built from one real record (`TEMPLATE`, a committed run of scenarios/cpu.toml):
its cases give the structure of every synthetic run (workloads, precisions, shapes, which case is the
baseline precision of which, all the record's columns, so that the comparison goes through the same
code as real runs) and each case's typical median time. Each group of one baseline-precision case
(fp32) and its speedup cases (bf16, fp16) is copied until a run has `GROUPS` groups: 20 speedup
cases and 10 baseline cases. What varies between the synthetic runs is controlled noise only
(`Noise`), applied to each case's true time to draw `SAMPLES` repetitions:

- iid: each repetition's time times a lognormal factor of that relative sd;
- shift: each run's value of a case moves between runs with that relative sd, half of the variance
  shared by the whole run (a slower runner), half the case's own (load while it ran);
- bimodal: that fraction of repetitions is 2x slow (threads descheduled mid-run);
- burst: that fraction of (run, case) pairs is 2x slow in all its repetitions (another job ran).

Every model other than iid keeps 1% iid noise underneath. A clean comparison draws both sides from
the same model; a planted one slows `PLANTED` speedup cases by the effect on the candidate side.
Counted per cell (model x runs per side): false alarms per case (a speedup, or a time, called
regressed or improved when nothing changed), P(exit 1) of the default gate on a clean comparison,
and power: the share of planted cases called regressed, and the share that fail the gate.
Everything is seeded: a cell's comparisons depend on the seed, the model, the run count and the
comparison's index only.

`--history` calibrates `suite.analysis.regression.history` the same way, on series of 6 to 30 synthetic runs
(`HISTORY_LENGTHS`): a clean history draws every run from the model; a planted one slows `PLANTED`
speedup cases by 20% from a run drawn at random with at least `STEP_MARGIN` runs on each side.
Counted per cell (model x runs): false change points per series (speedup, and time), and power: the
share of planted series with a change point within one run of the step (and exactly at it).
`--episodes` does the same on 30-run series (`EPISODE_RUNS`) for the changes of `SCHEDULES`: steps of
10% and 30%, a four-run episode 30% slower then reverted, a 30% drift over the series; counted per
cell: the share of flat speedup series flagged, and of planted ones where each change was found.
`--drift` sets timing one case after another against paired rounds (the suite's, docs/timing.md) under
drift *within* a run (`DRIFT_MODELS`: a slow trend, and a machine switching between two speeds): each
synthetic run then has a timeline (`timeline`), each repetition's time the machine's speed at its
moment (`drift`), and a paired run its `speedup_paired` from its rounds (`paired_speedups`). Counted
per drift model and mode, at 3 runs per side: the minimum detectable change of a typical speedup
(`compare`'s reach), false alarms, and the share of 20% slowdowns found.
`--out` replaces its own section of the page (between `<!-- begin NAME -->` and `<!-- end NAME -->`),
so each table is regenerated on its own.
"""

from __future__ import annotations

import argparse
import math
import os
import shlex
import sys
import time
import zlib
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from suite.analysis.regression import compare, history, stats
from suite.results import store

ROOT = Path(__file__).resolve().parent.parent
TEMPLATE = ROOT / "results" / "reference" / "cpu_amx" / "cpu" / "20261201T091332Z-cb2509.parquet"
GROUPS = 10  # baseline-precision cases per run, each with its speedup cases (2 each in the template)
SAMPLES = 30  # repetitions per case and run
PLANTED = 5  # speedup cases slowed on the candidate side of a planted comparison
RUN_COUNTS = (1, 2, 3, 5)
EFFECTS = (0.20, 0.50)
CLEAN, PLANTED_COMPARISONS, SEED = 200, 25, 20261201
# A record's columns from its own paired rounds, which a synthetic run does not copy.
PAIRED_COLUMNS = ("speedup_paired", "speedup_paired_low", "speedup_paired_high", "speedup_paired_level", "paired_ratios",
                  "paired_rounds")


@dataclass(frozen=True)
class Noise:
    name: str
    iid: float = 0.01
    shift: float = 0.0
    bimodal: float = 0.0
    burst: float = 0.0
    # Drift within a run (`drift`): a linear trend of up to this fraction over the run, and a machine
    # whose speed switches between two levels `steps` apart, `switches` times a run on average.
    trend: float = 0.0
    steps: float = 0.0
    switches: float = 0.0


MODELS = (
    Noise("iid 1%", iid=0.01), Noise("iid 5%", iid=0.05), Noise("iid 20%", iid=0.20),
    Noise("run shifts 3%", shift=0.03), Noise("run shifts 10%", shift=0.10),
    Noise("bimodal 10%", bimodal=0.10), Noise("bimodal 30%", bimodal=0.30),
    Noise("bursts 10%", burst=0.10),
)
BY_NAME = {m.name: m for m in MODELS}


def template(path: Path = TEMPLATE, groups: int = GROUPS) -> pd.DataFrame:
    """One synthetic run's rows (without samples), from the record in `path` (see `template_of`)."""
    return template_of(store.read_file(path), groups)


def template_of(df: pd.DataFrame, groups: int = GROUPS) -> pd.DataFrame:
    """One synthetic run's rows (without samples): the run's measured baseline-precision cases and
    their measured speedup cases, copied group by group until there are `groups` groups; `true_ms`
    is each case's median in the run."""
    ok = df[df["status"] == "ok"]
    bases = ok[ok["case_id"] == ok["baseline_case_id"]]
    real = [[b] + ok.index[(ok["baseline_case_id"] == ok.at[b, "case_id"]) & (ok["case_id"] != ok.at[b, "case_id"])].tolist()
            for b in bases.index]
    real = [group for group in real if len(group) > 1]
    if not real:
        raise ValueError("no baseline-precision case with a measured speedup case in the run")
    copies = []
    for g in range(groups):
        rows = ok.loc[real[g % len(real)]].copy()
        rows["case_id"] = rows["case_id"] + f".{g}"
        rows["baseline_case_id"] = rows["baseline_case_id"] + f".{g}"
        rows["params"] = f'{{"copy": {g}}}'  # distinct shape labels in reports
        copies.append(rows)
    out = pd.concat(copies, ignore_index=True)
    out["true_ms"] = out["time_ms_median"].astype(float)
    # what the record's own rounds said: each synthetic run draws its own (`synthetic_run`)
    return out.drop(columns=[c for c in PAIRED_COLUMNS if c in out])


def _rng(seed: int, *keys) -> np.random.Generator:
    return np.random.default_rng([seed, *(zlib.crc32(str(k).encode()) for k in keys)])


def synthetic_run(tmpl: pd.DataFrame, noise: Noise, rng: np.random.Generator, run_id: str,
                  slow: dict[str, float] | None = None, paired: bool = False) -> pd.DataFrame:
    """One run drawn from the model; `slow` = {case_id: factor} plants a slowdown. `paired`: each
    setting's cases timed in paired rounds (`timeline`), with their `speedup_paired`; else one case
    after another, with none."""
    return runs_frame(tmpl, [run_id], [synthetic_samples(tmpl, noise, rng, slow, paired)], paired)


def synthetic_samples(tmpl: pd.DataFrame, noise: Noise, rng: np.random.Generator,
                      slow: dict[str, float] | None = None, paired: bool = False) -> np.ndarray:
    """One run's repetitions drawn from the model (cases x SAMPLES), as `synthetic_run` describes."""
    n = len(tmpl)
    level_sd = math.log1p(noise.shift) / math.sqrt(2.0)
    level = np.exp(level_sd * (rng.standard_normal() + rng.standard_normal(n)))
    level *= np.where(rng.random(n) < noise.burst, 2.0, 1.0)
    factor = np.array([(slow or {}).get(c, 1.0) for c in tmpl["case_id"]])
    reps = np.exp(math.log1p(noise.iid) * rng.standard_normal((n, SAMPLES)))
    reps *= np.where(rng.random((n, SAMPLES)) < noise.bimodal, 2.0, 1.0)
    if noise.trend or noise.switches or paired:  # drawn after the rest: the drift-free tables stay as they were
        reps *= drift(noise, rng)(timeline(tmpl, rng, paired))
    return (tmpl["true_ms"].to_numpy(float) * level * factor)[:, None] * reps


def runs_frame(tmpl: pd.DataFrame, run_ids: list[str], samples: list[np.ndarray], paired: bool) -> pd.DataFrame:
    """The records of runs whose repetitions are drawn (`samples[r]`: run r's), oldest first: one
    frame built once (a copy of the template's 200-odd columns per run cost more than the draws)."""
    n = len(tmpl)
    run = tmpl.drop(columns="true_ms").iloc[np.tile(np.arange(n), len(run_ids))].reset_index(drop=True)
    flat = np.concatenate(samples)
    run["run_id"] = np.repeat(np.array(run_ids, dtype=object), n)
    run["samples_ms"] = list(flat)
    run["time_ms_median"] = np.median(flat, axis=1)
    run["time_ms_p10"], run["time_ms_p90"] = np.quantile(flat, [0.1, 0.9], axis=1)
    run["n_samples"] = SAMPLES
    run["speedup_paired"] = np.concatenate([paired_speedups(tmpl, s) for s in samples]) if paired else np.nan
    return run


# --- drift within a run: what timing one case after another suffers, and paired rounds cancel -------

ROUNDS = 10  # paired rounds per setting in a synthetic run: SAMPLES / ROUNDS repetitions a batch


def drift(noise: Noise, rng: np.random.Generator):
    """The machine's speed over one run, as a factor on a call's time at run time t in [0, 1): a
    linear trend, its slope drawn from +-`trend`, times a two-level switch (a job that starts and
    stops beside the benchmark): `steps` slower in one state, Poisson(`switches`) switches at
    uniform times, the first state a coin toss."""
    slope = rng.uniform(-noise.trend, noise.trend)
    switch_at = np.sort(rng.random(rng.poisson(noise.switches)))
    start = int(rng.integers(2))

    def factor(t: np.ndarray) -> np.ndarray:
        slow = (start + np.searchsorted(switch_at, t)) % 2 == 1
        return (1.0 + slope * (t - 0.5)) * np.where(slow, 1.0 + noise.steps, 1.0)

    return factor


def settings_of(tmpl: pd.DataFrame) -> np.ndarray:
    """Each row's setting: its baseline case's position among the settings (the template keeps a
    setting's rows together, baseline first)."""
    keys = list(dict.fromkeys(tmpl["baseline_case_id"]))
    return np.array([keys.index(b) for b in tmpl["baseline_case_id"]])


def timeline(tmpl: pd.DataFrame, rng: np.random.Generator, paired: bool) -> np.ndarray:
    """When (run time in [0, 1)) each repetition of each case ran: one case after another in plan
    order, each in its own slot; or, paired, each setting in its own slot, its cases' batches
    interleaved round after round, each round in a random order."""
    n = len(tmpl)
    j = (np.arange(SAMPLES) + 0.5) / SAMPLES
    if not paired:
        return (np.arange(n)[:, None] + j[None, :]) / n
    group = settings_of(tmpl)
    groups, per = group.max() + 1, SAMPLES // ROUNDS
    out = np.empty((n, SAMPLES))
    for g in range(groups):
        members = np.flatnonzero(group == g)
        for r in range(ROUNDS):
            for slot, i in enumerate(rng.permutation(members)):
                inside = (slot + (np.arange(per) + 0.5) / per) / len(members)
                out[i, r * per:(r + 1) * per] = (g + (r + inside) / ROUNDS) / groups
    return out


def paired_speedups(tmpl: pd.DataFrame, samples: np.ndarray) -> np.ndarray:
    """Each case's speedup from its paired rounds: the median over rounds of its baseline's batch
    median over its own (NaN for a baseline), as the suite records `speedup_paired`."""
    per = SAMPLES // ROUNDS
    batches = np.median(samples.reshape(len(samples), ROUNDS, per), axis=2)
    row = {c: i for i, c in enumerate(tmpl["case_id"])}
    out = np.full(len(samples), np.nan)
    for i, (c, b) in enumerate(zip(tmpl["case_id"], tmpl["baseline_case_id"])):
        if c != b:
            out[i] = np.median(batches[row[b]] / batches[i])
    return out


def planted_cases(tmpl: pd.DataFrame, count: int = PLANTED) -> list[str]:
    """The speedup cases a planted comparison slows: spread over the groups."""
    speedup = tmpl[tmpl["case_id"] != tmpl["baseline_case_id"]]["case_id"].tolist()
    step = max(1, len(speedup) // count)
    return speedup[::step][:count]


def sides(tmpl: pd.DataFrame, noise: Noise, runs: int, rng: np.random.Generator,
          slow: dict[str, float] | None = None, paired: bool = False) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Baseline and candidate records of one comparison: `runs` synthetic runs per side."""
    ids = iter(f"20000101T{h:02d}{m:02d}00Z-{rng.integers(1 << 24):06x}" for h in range(24) for m in range(60))
    def side(factors: dict[str, float] | None) -> pd.DataFrame:
        run_ids, samples = [], []
        for _ in range(runs):  # each run's id drawn before its samples, as one run after another
            run_ids.append(next(ids))
            samples.append(synthetic_samples(tmpl, noise, rng, factors, paired))
        return runs_frame(tmpl, run_ids, samples, paired)

    base = side(None)
    return base, side(slow)


def run_compare(base: pd.DataFrame, cand: pd.DataFrame, options: compare.Options) -> compare.Comparison:
    return compare.compare(compare.Side("baseline", "synthetic", base), compare.Side("candidate", "synthetic", cand),
                           options)


@dataclass
class Cell:
    """Counts of one model x run count."""

    model: str
    runs: int
    clean: int = 0
    speedup_tests: int = 0
    speedup_alarms: int = 0  # unchanged speedups called regressed or improved
    speedup_ambiguous: int = 0  # unchanged speedups called ambiguous
    time_tests: int = 0
    time_alarms: int = 0
    exits: int = 0  # clean comparisons the default gate fails
    planted: dict[float, tuple[int, int, int]] = field(default_factory=dict)  # effect -> (cases, regressed, gated)

    def row(self) -> dict[str, str]:
        out = {
            "noise": self.model, "runs/side": str(self.runs),
            "FA/case speedup": _share(self.speedup_alarms, self.speedup_tests, 2),
            "FA/case time": _share(self.time_alarms, self.time_tests, 2),
            "P(exit 1) clean": _share(self.exits, self.clean, 1),
            "ambiguous/case": _share(self.speedup_ambiguous, self.speedup_tests, 2),
        }
        for effect, (n, found, gated) in sorted(self.planted.items()):
            out[f"power {effect:.0%}"] = _share(found, n, 0)
            out[f"gate power {effect:.0%}"] = _share(gated, n, 0)
        return out


def _share(k: int, n: int, digits: int) -> str:
    return f"{100 * k / n:.{digits}f}% ({k}/{n})" if n else ""


ALARMS = (stats.REGRESSED, stats.IMPROVED)


def cell_options(runs: int) -> compare.Options:
    """The options a row of `runs` runs per side is calibrated with: the defaults, but for 2 runs
    `--min-runs 2` (by default 2 runs per side are insufficient-runs: what opting in costs)."""
    return compare.Options(min_runs=max(2, min(runs, stats.DEFAULT_MIN_RUNS)))


def run_cell(tmpl: pd.DataFrame, noise: Noise, runs: int, clean: int, planted: int, seed: int,
             effects: tuple[float, ...] = EFFECTS, options: compare.Options | None = None) -> Cell:
    """`clean` comparisons without a change and `planted` per effect, drawn from the model, with
    `options` (None: `cell_options(runs)`)."""
    options = cell_options(runs) if options is None else options
    cell = Cell(noise.name, runs)
    for i in range(clean):
        result = run_compare(*sides(tmpl, noise, runs, _rng(seed, noise.name, runs, "clean", i)), options)
        cases = result.cases
        speedup = cases[cases["metric"] == "speedup"]
        timed = cases[cases["time_verdict"] != ""]
        cell.clean += 1
        cell.speedup_tests += len(speedup)
        cell.speedup_alarms += int(speedup["speedup_verdict"].isin(ALARMS).sum())
        cell.speedup_ambiguous += int((speedup["speedup_verdict"] == stats.AMBIGUOUS).sum())
        cell.time_tests += len(timed)
        cell.time_alarms += int(timed["time_verdict"].isin(ALARMS).sum())
        cell.exits += int(bool(cases["gate"].any()))
    targets = planted_cases(tmpl)
    for effect in effects:
        n = found = gated = 0
        for i in range(planted):
            rng = _rng(seed, noise.name, runs, f"planted {effect}", i)
            result = run_compare(*sides(tmpl, noise, runs, rng, {c: 1.0 + effect for c in targets}), options)
            hit = result.cases.set_index("case_id").loc[targets]
            n += len(targets)
            found += int((hit["speedup_verdict"] == stats.REGRESSED).sum())
            gated += int(hit["gate"].sum())
        cell.planted[effect] = (n, found, gated)
    return cell


def table(cells: list[Cell]) -> str:
    rows = [c.row() for c in cells]
    columns = list(rows[0])
    lines = ["| " + " | ".join(columns) + " |", "|" + "|".join("---" for _ in columns) + "|"]
    lines += ["| " + " | ".join(r.values()) + " |" for r in rows]
    return "\n".join(lines)


# --- drift within a run: sequential against paired timing ---------------------------------------------

DRIFT_MODELS = (
    Noise("trend 10%", trend=0.10),
    Noise("steps 20%", steps=0.20, switches=20),
    Noise("steps 100%", steps=1.0, switches=20),
    Noise("trend 10% + steps 20%", trend=0.10, steps=0.20, switches=20),
)
DRIFT_BY_NAME = {m.name: m for m in DRIFT_MODELS}
DRIFT_RUNS, DRIFT_EFFECT = 3, 0.20  # runs per side, and the planted slowdown
DRIFT_CLEAN, DRIFT_PLANTED = 100, 20
MODES = ("sequential", "paired")


@dataclass
class DriftCell:
    """One drift model, timed one case after another and in paired rounds: per mode the interval
    half-width of a typical speedup's change in each clean comparison (`stats.detectable`: what a
    change must exceed to be told from noise about half the time), its false alarms, and the planted
    cases found."""

    model: str
    detectable: dict[str, list[float]] = field(default_factory=lambda: {m: [] for m in MODES})
    tests: dict[str, int] = field(default_factory=lambda: dict.fromkeys(MODES, 0))
    alarms: dict[str, int] = field(default_factory=lambda: dict.fromkeys(MODES, 0))
    planted: dict[str, int] = field(default_factory=lambda: dict.fromkeys(MODES, 0))
    found: dict[str, int] = field(default_factory=lambda: dict.fromkeys(MODES, 0))

    def median_detectable(self, mode: str) -> float:
        return float(np.median(self.detectable[mode]))

    def row(self) -> dict[str, str]:
        out = {"drift": self.model}
        out.update({f"detectable {m}": f"±{self.median_detectable(m):.1%}" for m in MODES})
        out.update({f"FA/case {m}": _share(self.alarms[m], self.tests[m], 2) for m in MODES})
        out.update({f"power {DRIFT_EFFECT:.0%} {m}": _share(self.found[m], self.planted[m], 0) for m in MODES})
        return out


def run_drift_cell(tmpl: pd.DataFrame, noise: Noise, clean: int, planted: int, seed: int,
                   options: compare.Options = compare.Options()) -> DriftCell:
    """`clean` comparisons without a change and `planted` with a 20% slowdown of `PLANTED` speedup
    cases, DRIFT_RUNS runs per side, in each mode; the same draws' keys for both modes."""
    cell = DriftCell(noise.name)
    targets = planted_cases(tmpl)
    for mode in MODES:
        paired = mode == "paired"
        for i in range(clean):
            result = run_compare(*sides(tmpl, noise, DRIFT_RUNS, _rng(seed, "drift", noise.name, mode, i),
                                        paired=paired), options)
            speedup = result.cases[result.cases["metric"] == "speedup"]
            reach = result.reach["speedup"]
            cell.detectable[mode].append(stats.detectable(reach.spread, *reach.runs, options.confidence))
            cell.tests[mode] += len(speedup)
            cell.alarms[mode] += int(speedup["speedup_verdict"].isin(ALARMS).sum())
        for i in range(planted):
            rng = _rng(seed, "drift planted", noise.name, mode, i)
            result = run_compare(*sides(tmpl, noise, DRIFT_RUNS, rng, {c: 1.0 + DRIFT_EFFECT for c in targets},
                                        paired=paired), options)
            hit = result.cases.set_index("case_id").loc[targets]
            cell.planted[mode] += len(targets)
            cell.found[mode] += int((hit["speedup_verdict"] == stats.REGRESSED).sum())
    return cell


def drift_page(cells: list[DriftCell], command: str, seed: int, clean: int, planted: int) -> str:
    worst = max(cells, key=lambda c: c.median_detectable("sequential"))
    return DRIFT_PAGE.format(
        table=table(cells), command=command, seed=seed, clean=clean, planted=planted, runs=DRIFT_RUNS,
        rounds=ROUNDS, per=SAMPLES // ROUNDS, effect=f"{DRIFT_EFFECT:.0%}", planted_cases=PLANTED,
        worst=worst.model, worst_seq=f"±{worst.median_detectable('sequential'):.1%}",
        worst_paired=f"±{worst.median_detectable('paired'):.1%}")


DRIFT_PAGE = """\
## Drift within a run: sequential against paired timing

The noise models above move a case's whole run, or single repetitions; a busy machine also drifts
*within* a run, and a speedup timed one case after another takes its two medians at two moments.
Here each synthetic run has a timeline: one case after another in plan order, each in its own slot
(**sequential**, as before paired timing), or each setting's cases (fp32 and the bf16 and fp16
cases against it) in one slot, their batches interleaved in {rounds} rounds of {per} repetitions,
each round in a random order, the speedup the median over rounds of the baseline's batch median
over the case's (**paired**, `speedup_paired`, what `python -m suite run` records:
docs/timing.md). The machine's speed over the run follows the drift model of the row, with 1%
iid noise underneath:

| drift model | what varies |
|---|---|
| trend 10% | a linear trend over the run, its slope drawn from ±10% per run |
| steps 20% / 100% | the machine switches between two speeds 20% (100%: half the speed, another job on a two-core machine) apart, at 20 random moments a run on average |
| trend 10% + steps 20% | both |

{runs} runs per side; per drift model and mode, {clean} clean comparisons and {planted} with
{planted_cases} speedup cases slowed by {effect}. Produced by `benchmarks/calibrate.py`, seed {seed}:

```bash
{command}
```

**Columns.** **detectable**: the half-width of a typical speedup change's interval at {runs} runs
per side (`stats.detectable`, as a ratio; median over the clean comparisons): a change of this size
is told from noise about half the time (the report's headline gives the change found with 80%
power, larger by the minimum effect and more); **FA/case**: unchanged speedups called regressed or improved; **power {effect}**:
planted cases called regressed. Under `{worst}` a speedup timed sequentially must change by about
{worst_seq} to be told from drift; timed in paired rounds, by {worst_paired}.

{table}
"""


# --- history: change points over series of runs --------------------------------------------------------

HISTORY_MODELS = (
    Noise("iid 1%", iid=0.01), Noise("iid 5%", iid=0.05), Noise("iid 20%", iid=0.20),
    Noise("run shifts 3%", shift=0.03), Noise("run shifts 5%", shift=0.05), Noise("run shifts 10%", shift=0.10),
    Noise("bursts 10%", burst=0.10),
)
HISTORY_BY_NAME = {m.name: m for m in HISTORY_MODELS}
HISTORY_LENGTHS = (6, 10, 20, 30)
# Clean histories per cell: this many runs' worth (1000 histories of 6 runs, 200 of 30), so that every
# cell costs about the same and the short series, whose one split is tested at the full confidence,
# get the most histories: false change points cluster (a history's series share its run shifts), and
# 200 histories of 6 runs put a true 0.8% anywhere between 0.6% and 1.1%.
HISTORY_CLEAN_RUNS, HISTORY_PLANTED = 6000, 40
STEP, STEP_MARGIN = 0.20, 5  # the planted step, and the fewest runs on each side of it


def synthetic_history(tmpl: pd.DataFrame, noise: Noise, runs: int, rng: np.random.Generator,
                      slow: dict[str, float] | None = None, step: int | None = None,
                      until: int | None = None) -> pd.DataFrame:
    """`runs` synthetic runs, oldest first; `slow` ({case_id: factor}) applies from run `step` on
    (until run `until`, where it is reverted: an episode)."""
    return synthetic_series(tmpl, noise, rng, [slow if step is not None and step <= i < (until or runs) else None
                                               for i in range(runs)])


def synthetic_series(tmpl: pd.DataFrame, noise: Noise, rng: np.random.Generator,
                     slow: list[dict[str, float] | None]) -> pd.DataFrame:
    """One synthetic run per entry of `slow`, oldest first, each with its planted factors."""
    run_ids, samples = [], []
    for i, factors in enumerate(slow):
        run_ids.append(f"20000101T{i // 60:02d}{i % 60:02d}00Z-{rng.integers(1 << 24):06x}")
        samples.append(synthetic_samples(tmpl, noise, rng, factors))
    return runs_frame(tmpl, run_ids, samples, paired=False)


@dataclass
class HistoryCell:
    """Counts of one model x series length."""

    model: str
    runs: int
    speedup_series: int = 0
    speedup_false: int = 0  # change points in clean speedup series
    time_series: int = 0
    time_false: int = 0
    planted: int = 0  # planted speedup series (and as many time series)
    near: int = 0  # planted speedup series with a change point within one run of the step
    exact: int = 0  # ... at the step itself
    time_near: int = 0

    def row(self) -> dict[str, str]:
        return {
            "noise": self.model, "runs": str(self.runs),
            "false CPs/series speedup": _share(self.speedup_false, self.speedup_series, 2),
            "false CPs/series time": _share(self.time_false, self.time_series, 2),
            f"power {STEP:.0%} (±1 run)": _share(self.near, self.planted, 0),
            "at the step": _share(self.exact, self.planted, 0),
            f"time power {STEP:.0%} (±1 run)": _share(self.time_near, self.planted, 0),
        }


def run_history_cell(tmpl: pd.DataFrame, noise: Noise, runs: int, clean: int | None, planted: int, seed: int,
                     options: history.Options = history.Options()) -> HistoryCell:
    """`clean` histories without a change (None: HISTORY_CLEAN_RUNS // runs) and `planted` with a 20%
    step, drawn from the model."""
    cell = HistoryCell(noise.name, runs)
    for i in range(HISTORY_CLEAN_RUNS // runs if clean is None else clean):
        h = history.analyse(synthetic_history(tmpl, noise, runs, _rng(seed, "history", noise.name, runs, i)),
                            "synthetic", options)
        for s in h.series:
            if s.metric == history.SPEEDUP:
                cell.speedup_series, cell.speedup_false = cell.speedup_series + 1, cell.speedup_false + len(s.change_points)
            else:
                cell.time_series, cell.time_false = cell.time_series + 1, cell.time_false + len(s.change_points)
    targets = planted_cases(tmpl)
    for i in range(planted if runs >= 2 * STEP_MARGIN else 0):
        rng = _rng(seed, "history step", noise.name, runs, i)
        step = int(rng.integers(STEP_MARGIN, runs - STEP_MARGIN + 1))
        h = history.analyse(synthetic_history(tmpl, noise, runs, rng, {c: 1.0 + STEP for c in targets}, step),
                            "synthetic", options)
        for s in (s for s in h.series if s.case_id in targets):
            where = [abs(cp.index - step) for cp in s.change_points]
            if s.metric == history.SPEEDUP:
                cell.planted += 1
                cell.near += any(d <= 1 for d in where)
                cell.exact += 0 in where
            else:
                cell.time_near += any(d <= 1 for d in where)
    return cell


def history_page(text: str, command: str, seed: int, clean: int | None, planted: int) -> str:
    count = (f"{HISTORY_CLEAN_RUNS} runs' worth of them: {HISTORY_CLEAN_RUNS // min(HISTORY_LENGTHS)} histories of "
             f"{min(HISTORY_LENGTHS)} runs down to {HISTORY_CLEAN_RUNS // max(HISTORY_LENGTHS)} of "
             f"{max(HISTORY_LENGTHS)}" if clean is None else f"{clean} of them")
    if clean is not None:  # fewer than the default: the page says so
        count += (f". **A reduced run**: the default is {HISTORY_CLEAN_RUNS} runs' worth of clean histories a cell "
                  f"and {HISTORY_PLANTED} planted ones; this table has {clean} and {planted}")
    m = history.Options().min_runs
    return HISTORY_PAGE.format(table=text, command=command, seed=seed, clean=count, planted=planted,
                               step=f"{STEP:.0%}", margin=STEP_MARGIN, planted_cases=PLANTED, min_runs=m, fewer=m - 1)


HISTORY_PAGE = """\
## History: change points over series of runs

How often `python -m suite history` marks a change point where nothing changed, and how often it
finds a planted step and where, on series of synthetic runs built as above (the same template, the
same noise models, plus run shifts of 5%). Default settings: confidence 99%, minimum effect 5%,
{min_runs} runs on each side of a change point. Produced by `benchmarks/calibrate.py`, seed {seed}:

```bash
{command}
```

A clean history draws every run from the model and has 20 speedup and 30 time series; a cell has
{clean}.
A planted history slows {planted_cases} speedup cases by {step} from a run drawn at random with at
least {margin} runs on each side ({planted} histories per cell; none for 6 runs, which cannot have
{margin} on each side).

**Columns.**

- **false CPs/series speedup**, **time**: change points per clean series (a series with two counts
  twice), in the speedup series and in the time series.
- **power {step} (±1 run)**: the share of planted speedup series with a change point within one run
  of the step; **at the step**: exactly at it; **time power**: the same for the planted cases'
  times (whole-run shifts do not cancel in a time as they do in a speedup).

With bursts (10% of run-case pairs 2x slow) the search scans each series winsorized (a run more
than 2.5 robust sds from its local level counts as that far; `history.winsorize`), so one burst run,
or {fewer} in a row, makes no step; {min_runs} bursts in a row of one direction (the case's own time,
or its baseline's) are exactly a {min_runs}-run episode, such as the thread change of the pooled
paired_stability runs, and are found as one (two change points): a run starts such a run of
{min_runs} with probability 0.1^{min_runs} in each direction, so about 5% of 30-run series hold one, most
of the false change points under bursts. A local level over more runs would ignore them, and a
{min_runs}-run change with them. Drop or rerun runs caught by bursts of load.

{table}
"""


# --- history: short episodes, steps of 10 and 30%, drift (issue #38) ---------------------------------------

EPISODE_RUNS, EPISODE_CLEAN, EPISODE_PLANTED = 30, 40, 20
EPISODE_MARGIN = 5  # the fewest runs before a planted change and after it (after an episode's end)


def _step(factor: float):
    def schedule(runs: int, rng: np.random.Generator) -> tuple[list[float], tuple[int, ...]]:
        at = int(rng.integers(EPISODE_MARGIN, runs - EPISODE_MARGIN + 1))
        return [factor if i >= at else 1.0 for i in range(runs)], (at,)
    return schedule


def _episode(factor: float, length: int):
    def schedule(runs: int, rng: np.random.Generator) -> tuple[list[float], tuple[int, ...]]:
        at = int(rng.integers(EPISODE_MARGIN, runs - EPISODE_MARGIN - length + 1))
        return [factor if at <= i < at + length else 1.0 for i in range(runs)], (at, at + length)
    return schedule


def _drift(total: float):
    def schedule(runs: int, rng: np.random.Generator) -> tuple[list[float], tuple[int, ...]]:
        return [(1.0 + total) ** (i / (runs - 1)) for i in range(runs)], ()
    return schedule


# name -> schedule(runs, rng): the planted cases' slowdown per run and where its changes are. A
# change is found where a change point lies within one run of each (drift: where any is found).
SCHEDULES = {"step 10%": _step(1.10), "step 30%": _step(1.30), "episode 30% x4": _episode(1.30, 4),
             "drift 30%": _drift(0.30)}


@dataclass
class EpisodeCell:
    """Counts of one model x series length: flat series flagged, and planted changes found."""

    model: str
    runs: int
    flat: int = 0  # speedup series of clean histories
    flagged: int = 0  # ... with a change point
    planted: dict[str, int] = field(default_factory=dict)  # schedule -> planted speedup series
    found: dict[str, int] = field(default_factory=dict)

    def row(self) -> dict[str, str]:
        return {"noise": self.model, "runs": str(self.runs), "flat series flagged": _share(self.flagged, self.flat, 1),
                **{f"found: {name}": _share(self.found.get(name, 0), self.planted.get(name, 0), 0)
                   for name in SCHEDULES}}


def run_episode_cell(tmpl: pd.DataFrame, noise: Noise, runs: int, clean: int, planted: int, seed: int,
                     options: history.Options = history.Options()) -> EpisodeCell:
    """`clean` histories without a change, and `planted` per schedule of SCHEDULES in which the
    planted speedup cases follow it."""
    cell, targets = EpisodeCell(noise.name, runs), planted_cases(tmpl)
    for i in range(clean):
        h = history.analyse(synthetic_history(tmpl, noise, runs, _rng(seed, "episode clean", noise.name, runs, i)),
                            "synthetic", options)
        flags = [bool(s.change_points) for s in h.series if s.metric == history.SPEEDUP]
        cell.flat, cell.flagged = cell.flat + len(flags), cell.flagged + sum(flags)
    for name, schedule in SCHEDULES.items():
        for i in range(planted):
            rng = _rng(seed, "episode", name, noise.name, runs, i)
            factors, changes = schedule(runs, rng)
            h = history.analyse(synthetic_series(tmpl, noise, rng, [{c: f for c in targets} for f in factors]),
                                "synthetic", options)
            for s in (s for s in h.series if s.case_id in targets and s.metric == history.SPEEDUP):
                at = [cp.index for cp in s.change_points]
                hit = all(any(abs(k - c) <= 1 for k in at) for c in changes) if changes else bool(at)
                cell.planted[name] = cell.planted.get(name, 0) + 1
                cell.found[name] = cell.found.get(name, 0) + hit
    return cell


def episode_page(text: str, command: str, seed: int, clean: int, planted: int) -> str:
    return EPISODE_PAGE.format(table=text, command=command, seed=seed, clean=clean, planted=planted,
                               planted_cases=PLANTED, margin=EPISODE_MARGIN)


EPISODE_PAGE = """\
## History: short episodes, steps and drift

How often `python -m suite history` (default settings) flags a flat series, and finds a planted
change, on series of synthetic runs as above. Produced by `benchmarks/calibrate.py`, seed {seed}:

```bash
{command}
```

**flat series flagged**: speedup series with any change point, in {clean} clean histories per cell
(20 speedup series each). **found**: of {planted} histories per change and cell, in which
{planted_cases} speedup cases are slowed, the share of those series where each planted change has a
change point within one run of it: a step of 10% or 30% from a run drawn at random with at least
{margin} runs on each side; an episode of four runs 30% slower, then reverted (both its ends
found); a drift of 30% spread evenly over the series (any change point found).

{table}
"""


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.calibrate", description=__doc__.split("\n\n")[0])
    p.add_argument("--history", action="store_true", help="calibrate history's change points instead of compare")
    p.add_argument("--episodes", action="store_true", help="calibrate history on short episodes, steps of 10 and "
                   "30%% and drift (default: 30 runs a series)")
    p.add_argument("--drift", action="store_true", help="sequential against paired timing under drift within a run "
                   f"({DRIFT_RUNS} runs per side)")
    p.add_argument("--models", help="noise models, comma-separated (default: all of the mode's): "
                   + ", ".join(BY_NAME | HISTORY_BY_NAME | DRIFT_BY_NAME).replace("%", "%%"))
    p.add_argument("--runs", help="compare: runs per side, comma-separated (default: "
                   f"{','.join(map(str, RUN_COUNTS))}); --history: runs per series "
                   f"(default: {','.join(map(str, HISTORY_LENGTHS))})")
    p.add_argument("--clean", type=int, help=f"clean comparisons per cell (default {CLEAN}); --history: clean "
                   f"histories per cell (default: {HISTORY_CLEAN_RUNS} runs' worth, i.e. {HISTORY_CLEAN_RUNS} / runs)")
    p.add_argument("--planted", type=int, help=f"comparisons per planted effect and cell (histories with a step per "
                   f"cell) (default {PLANTED_COMPARISONS} ({HISTORY_PLANTED}))")
    p.add_argument("--seed", type=int, default=SEED, help=f"seed (default {SEED})")
    p.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="cells computed in parallel (default: one per CPU)")
    p.add_argument("--out", help="write the mode's section of the Markdown page here (docs/calibration.md) as well as "
                   "printing the table")
    args = p.parse_args(argv)
    mode = "history" if args.history else "episodes" if args.episodes else "drift" if args.drift else "compare"
    catalogue = {"history": HISTORY_BY_NAME, "episodes": HISTORY_BY_NAME, "drift": DRIFT_BY_NAME, "compare": BY_NAME}[mode]
    models = [catalogue[name.strip()] for name in (args.models or ",".join(catalogue)).split(",") if name.strip()]
    default_counts = {"history": HISTORY_LENGTHS, "episodes": (EPISODE_RUNS,), "drift": (DRIFT_RUNS,),
                      "compare": RUN_COUNTS}[mode]
    counts = [int(r) for r in (args.runs or ",".join(map(str, default_counts))).split(",")]
    clean = args.clean if args.clean is not None else \
        {"history": None, "episodes": EPISODE_CLEAN, "drift": DRIFT_CLEAN, "compare": CLEAN}[mode]
    planted = args.planted if args.planted is not None else \
        {"history": HISTORY_PLANTED, "episodes": EPISODE_PLANTED, "drift": DRIFT_PLANTED,
         "compare": PLANTED_COMPARISONS}[mode]
    tmpl = template()
    cells = _cells(mode, tmpl, [(noise, runs) for noise in models for runs in counts], clean, planted, args)
    text = table(cells)
    print(text)
    if args.out:
        given = list(sys.argv[1:] if argv is None else argv)
        command = shlex.join(["python", "-m", "benchmarks.calibrate", *given])
        section = {"history": lambda: history_page(text, command, args.seed, clean, planted),
                   "episodes": lambda: episode_page(text, command, args.seed, clean, planted),
                   "drift": lambda: drift_page(cells, command, args.seed, clean, planted),
                   "compare": lambda: page(text, command, args.seed, clean, planted, tmpl)}[mode]
        write_section(Path(args.out), mode, section())
    return 0


def _drift_cell(tmpl, noise, runs, clean, planted, seed) -> DriftCell:
    return run_drift_cell(tmpl, noise, clean, planted, seed)


def _cells(mode: str, tmpl: pd.DataFrame, grid: list, clean, planted: int, args) -> list:
    """The mode's cells of the grid (model x runs), computed in parallel."""
    cell = {"history": run_history_cell, "episodes": run_episode_cell, "drift": _drift_cell, "compare": run_cell}[mode]
    started = time.monotonic()
    # Cells are independent and seeded by their own keys, so the order they finish in changes nothing.
    with ProcessPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        futures = [pool.submit(cell, tmpl, noise, runs, clean, planted, args.seed) for noise, runs in grid]
        cells = []
        for (noise, runs), future in zip(grid, futures):
            cells.append(future.result())
            print(f"  {noise.name}, {runs} run(s) ({time.monotonic() - started:.0f} s)", file=sys.stderr)
    return cells


def write_section(path: Path, name: str, text: str) -> None:
    """Put `text` between `<!-- begin name -->` and `<!-- end name -->` in the page at path: in place
    of that section where the page has it, else after the page's other sections."""
    begin, end = f"<!-- begin {name} -->", f"<!-- end {name} -->"
    block = f"{begin}\n{text.strip()}\n{end}\n"
    old = path.read_text(encoding="utf-8") if path.exists() else ""
    if begin in old and end in old:
        new = old[:old.index(begin)] + block + old[old.index(end) + len(end):].lstrip("\n")
    else:
        new = (old.rstrip("\n") + "\n\n" if "<!-- end " in old else "") + block
    path.write_text(new, encoding="utf-8")


def page(text: str, command: str, seed: int, clean: int, planted: int, tmpl: pd.DataFrame) -> str:
    speedups = int((tmpl["case_id"] != tmpl["baseline_case_id"]).sum())
    return PAGE.format(table=text, command=command, seed=seed, clean=clean, planted=planted,
                       default_min_runs=stats.DEFAULT_MIN_RUNS,
                       template=TEMPLATE.relative_to(ROOT), speedups=speedups, cases=len(tmpl), samples=SAMPLES,
                       planted_cases=PLANTED)


PAGE = """\
# Calibration of the comparison's verdicts and of history's change points

How often `python -m suite compare` calls an unchanged case regressed or improved, how often a clean
comparison exits 1, and how often it finds a planted slowdown, measured on synthetic runs with
known noise; the same for `python -m suite history` [below](#history-change-points-over-series-of-runs).
Produced by `benchmarks/calibrate.py` (`nox -s calibrate`), seed {seed}:

```bash
{command}
```

**Runs.** Every synthetic run has the cases of one real record, `{template}` (`scenarios/cpu.toml`
on a 2-core VM): its fp32 cases and the bf16 and fp16 cases measured against them, copied to
{cases} cases ({speedups} speedups), each case's median in the record as its true time, all the
record's columns, so that the comparison reads them as it reads real runs. Each case draws {samples}
repetitions per run from the noise model of its row:

| noise model | what varies |
|---|---|
| iid 1% / 5% / 20% | each repetition's time, by a lognormal factor of that relative sd |
| run shifts 3% / 10% | a case's level from run to run, by that relative sd: half the variance shared by the whole run (a slower runner), half the case's own (load while it ran); 1% iid underneath |
| bimodal 10% / 30% | that share of the repetitions is 2x slow (threads descheduled mid-run); 1% iid underneath |
| bursts 10% | 10% of (run, case) pairs are 2x slow in every repetition (another job ran meanwhile); 1% iid underneath |

A clean comparison draws both sides from the same model ({clean} per cell); a planted one slows
{planted_cases} speedup cases by 20% or 50% on the candidate side ({planted} comparisons per effect
and cell). Every row has the default options, but the rows of 2 runs per side, which have
`--min-runs 2`: by default ({default_min_runs} runs per side) a case with 2 runs is
`insufficient-runs`, and these rows show what opting in to 2 costs.

**Columns.**

- **FA/case speedup**, **FA/case time**: the share of unchanged cases whose speedup (time) verdict
  is `regressed` or `improved` (per-case confidence 99%, minimum effect 5%: the whole interval
  beyond it); **ambiguous/case**: the share of unchanged speedups called `ambiguous` (a change whose
  interval straddles the minimum effect: neither a pass nor a regression, never gated by default).
- **P(exit 1) clean**: the share of clean comparisons the default gate fails
  (`--fail-on regressed,time:regressed,new-failure,new-skip`, family-wise 99% by Holm's method).
- **power 20%**, **power 50%**: the share of planted cases whose speedup verdict is `regressed`;
  **gate power**: the share that fail the default gate (their speedup, or their time, regressed at
  the family-wise level).

With 1 run per side no case is ever `regressed` or `improved`: run-to-run noise is not observable
from one run, the verdict is `insufficient-runs`. With 2 (`--min-runs 2`) the run shifts' variance
has 2 degrees of freedom; where it is underestimated, Welch-Satterthwaite's degrees of freedom grow
and the t quantile shrinks exactly when the standard error is too small, so bursts of load raise
false alarms above the per-case level: hence the default of {default_min_runs}. With bursts, a case that has a burst in any of its
runs or its baseline's comes out `noisy`, so power falls as runs are added (more runs, more bursts);
a run-to-run noise of 10% hides 20% changes at 3 runs. Record 3 runs per side.

{table}
"""


if __name__ == "__main__":
    raise SystemExit(main())
