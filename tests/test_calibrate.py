"""benchmarks/calibrate.py, small and seeded: on synthetic runs of known noise (built from one real
record) the comparison keeps false alarms under their ceiling and finds real slowdowns; the table in
docs/calibration.md meets the same targets."""

from __future__ import annotations

import math
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from benchmarks import calibrate
from suite import cli
from suite.analysis.regression import compare, stats
from suite.report import compare_page
from suite.results import store

ROOT = Path(__file__).resolve().parent.parent
SEED = 7  # not the docs' seed: these draws are fresh


@pytest.fixture(scope="module")
def tmpl() -> pd.DataFrame:
    return calibrate.template()


def test_the_template_is_the_real_record_copied_into_groups(tmpl):
    real = store.read_file(calibrate.TEMPLATE)
    assert len(tmpl) == 30 and (tmpl["case_id"] != tmpl["baseline_case_id"]).sum() == 20
    assert set(tmpl["precision"]) == {"fp32", "bf16", "fp16"} and tmpl["case_id"].is_unique
    medians = dict(zip(real["case_id"], real["time_ms_median"]))
    assert all(t == medians[c.rsplit(".", 1)[0]] for c, t in zip(tmpl["case_id"], tmpl["true_ms"]))


def most_alarms(tests: int, rate: float = 0.01, tail: float = 0.01) -> int:
    """The most false alarms `tests` tests at a true rate of `rate` give but with probability < tail:
    a small run can only show its rate is not above the ceiling to within its sampling error (the
    committed table, 200 comparisons a cell, is held to the ceiling itself below)."""
    k, below = 0, 0.0
    while True:
        below += math.comb(tests, k) * rate**k * (1 - rate) ** (tests - k)
        if 1.0 - below < tail:
            return k
        k += 1


@pytest.mark.parametrize("model", [m.name for m in calibrate.MODELS])
def test_three_runs_per_side_keep_false_alarms_rare(tmpl, model):
    cell = calibrate.run_cell(tmpl, calibrate.BY_NAME[model], 3, clean=6, planted=0, seed=SEED)
    assert cell.speedup_tests == 120 and cell.time_tests == 180
    assert cell.speedup_alarms <= most_alarms(120) and cell.time_alarms <= most_alarms(180)
    assert cell.exits <= 1  # P(exit 1) at most 5%: 2 of 6 would be improbable (3%)


@pytest.mark.parametrize("model, effect", [("iid 5%", 0.2), ("run shifts 3%", 0.2), ("run shifts 10%", 0.5)])
def test_three_runs_per_side_find_real_slowdowns(tmpl, model, effect):
    """The issue's power floors: 80% for a 20% slowdown under 5% i.i.d. noise and 3% run shifts, and
    for a 50% slowdown under 10% run shifts (5 planted cases in each of 4 comparisons)."""
    cell = calibrate.run_cell(tmpl, calibrate.BY_NAME[model], 3, clean=0, planted=4, seed=SEED, effects=(effect,))
    cases, found, _ = cell.planted[effect]
    assert cases == 20 and found >= 0.8 * cases


def test_one_run_per_side_never_calls_a_regression_even_with_bursts(tmpl):
    """The issue's worst cell: 1 run per side, 10% of run-case pairs 2x slow, 25% of cases flagged."""
    cell = calibrate.run_cell(tmpl, calibrate.BY_NAME["bursts 10%"], 1, clean=10, planted=2, seed=SEED)
    assert cell.speedup_alarms == cell.time_alarms == cell.exits == 0
    assert all(found == gated == 0 for _, found, gated in cell.planted.values())  # nor a real one: no call
    assert cell.speedup_tests == 200


def test_verdicts_are_the_same_through_parquet_and_the_cli(tmpl, tmp_path, monkeypatch, capsys):
    rng = np.random.default_rng(SEED)
    slow = {c: 1.5 for c in calibrate.planted_cases(tmpl)}
    base, cand = calibrate.sides(tmpl, calibrate.BY_NAME["run shifts 3%"], 3, rng, slow)
    direct = calibrate.run_compare(base, cand, compare.Options())
    for role, df in (("base", base), ("cand", cand)):
        for _, run in df.groupby("run_id"):
            records = [{k: None if isinstance(v, float) and np.isnan(v) else v for k, v in r.items()}
                       for r in run.to_dict("records")]
            for r in records:
                r["samples_ms"] = [float(x) for x in r["samples_ms"]]
            store.write_run(records, store.run_path(tmp_path / role, run["scenario"].iloc[0], run["run_id"].iloc[0]))
    scenario = base["scenario"].iloc[0]
    selectors = [f"{tmp_path / role}/{scenario},runs=all" for role in ("base", "cand")]
    stored = compare.compare(*compare.load_sides(*selectors, tmp_path), compare.Options())
    columns = ["case_id", "verdict", "speedup_verdict", "time_verdict", "gate"]
    pd.testing.assert_frame_equal(direct.cases[columns], stored.cases[columns])
    for column in ("speedup_ratio", "speedup_ratio_low", "time_ratio_high", "speedup_p"):
        assert direct.cases[column].to_numpy() == pytest.approx(stored.cases[column].to_numpy(), nan_ok=True)
    monkeypatch.setattr(compare_page, "render", lambda result, out: [])
    assert cli.main(["compare", *selectors, "--out", str(tmp_path / "out")]) == int(direct.cases["gate"].any()) == 1
    assert set(direct.cases.loc[direct.cases["gate"], "case_id"]) == set(slow)
    capsys.readouterr()


def test_the_harness_command_line(capsys):
    with pytest.raises(SystemExit) as done:
        calibrate.main(["--help"])
    assert done.value.code == 0 and "bursts 10%" in capsys.readouterr().out
    assert calibrate.main(["--models", "iid 5%", "--runs", "2", "--clean", "1", "--planted", "1", "--jobs", "1"]) == 0
    table = capsys.readouterr().out
    assert table.startswith("| noise | runs/side |") and "| iid 5% | 2 | 0.00% (0/20) |" in table


def _cells(text: str) -> dict[tuple[str, int], dict[str, float]]:
    """The docs table: (noise, runs) -> column -> share (0..1)."""
    lines = text.splitlines()
    start = next(i for i, ln in enumerate(lines) if ln.startswith("| noise | runs/side |"))
    header = [h.strip() for h in lines[start].strip("|").split("|")]
    out = {}
    for line in lines[start + 2:]:
        if not line.startswith("|"):
            break
        values = [v.strip() for v in line.strip("|").split("|")]
        row = dict(zip(header, values))
        out[(row["noise"], int(row["runs/side"]))] = {
            k: float(re.match(r"([\d.]+)%", v).group(1)) / 100 for k, v in row.items() if k not in ("noise", "runs/side")}
    return out


def test_the_committed_table_meets_the_targets():
    text = (ROOT / "docs" / "calibration.md").read_text()
    assert "python -m benchmarks.calibrate" in text and str(calibrate.TEMPLATE.relative_to(ROOT)) in text
    cells = _cells(text)
    assert {m for m, _ in cells} == {m.name for m in calibrate.MODELS}
    assert {r for _, r in cells} == set(calibrate.RUN_COUNTS)
    for (model, runs), c in cells.items():
        if runs == 1:
            assert c["FA/case speedup"] == c["FA/case time"] == c["P(exit 1) clean"] == c["power 20%"] == 0
        if runs >= stats.DEFAULT_MIN_RUNS:  # every run count the defaults give a verdict (issue #38), not 3 alone
            assert c["FA/case speedup"] <= 0.01 and c["FA/case time"] <= 0.01, (model, runs)
            assert c["P(exit 1) clean"] <= 0.05, (model, runs)
    # the table reaches 2 runs per side (--min-runs 2) and bursts, where it shows why 2 is not the default
    assert max(r for r in calibrate.RUN_COUNTS if r < stats.DEFAULT_MIN_RUNS) == 2 and 5 in calibrate.RUN_COUNTS
    assert cells[("bursts 10%", 2)]["FA/case speedup"] > 0.015
    assert cells[("iid 5%", 3)]["power 20%"] >= 0.8
    assert cells[("run shifts 3%", 3)]["power 20%"] >= 0.8
    assert cells[("run shifts 10%", 3)]["power 50%"] >= 0.8


# --- history: change points over series of runs -----------------------------------------------------------

def test_history_keeps_false_change_points_rare_and_finds_and_places_a_step(tmpl):
    """A small seeded cell of the history calibration: 10-run series under 5% run shifts."""
    cell = calibrate.run_history_cell(tmpl, calibrate.HISTORY_BY_NAME["run shifts 5%"], 10, clean=5, planted=4, seed=SEED)
    assert cell.speedup_series == 100 and cell.time_series == 150
    assert cell.speedup_false <= most_alarms(100) and cell.time_false <= most_alarms(150)
    # Within one run of the step, at least 80%: 16 of 20 here (15 when compare's re-check was also
    # divided among the splits, which the search had already paid for: issue #38); over seeds 7-9, 8
    # histories each, 99 of 120 (83 of 120 before)
    assert cell.planted == 20 and cell.near >= 16 and cell.exact >= 14


def test_history_finds_a_reverted_four_run_episode_and_keeps_flat_series_quiet(tmpl):
    """issue #38, a small seeded cell of `--episodes`: 30-run series under 3% run shifts; a 30% episode
    of four runs, then reverted, found (both ends within one run) in at least 90% of series; flat
    series flagged at most 5%; steps of 10% and 30% and a 30% drift found too."""
    cell = calibrate.run_episode_cell(tmpl, calibrate.HISTORY_BY_NAME["run shifts 3%"], 30, clean=10, planted=4,
                                      seed=SEED)
    assert cell.flat == 200 and cell.flagged <= 0.05 * cell.flat
    assert set(cell.planted) == set(calibrate.SCHEDULES) and all(n == 20 for n in cell.planted.values())
    assert cell.found["episode 30% x4"] >= 18
    # a 10% step is twice the 5% minimum effect its interval must clear (issue #38's verdict rule):
    # 18 of 20 here since compare's re-check is no longer divided among the splits again (12 before)
    assert cell.found["step 30%"] >= 18 and cell.found["step 10%"] >= 16 and cell.found["drift 30%"] >= 16


def test_history_page_section_is_written_in_place(tmp_path):
    page = tmp_path / "calibration.md"
    calibrate.write_section(page, "compare", "# Calibration\n\ncompare table")
    calibrate.write_section(page, "history", "## History\n\nold table")
    calibrate.write_section(page, "history", "## History\n\nnew table")
    calibrate.write_section(page, "compare", "# Calibration\n\ncompare table, again")
    text = page.read_text()
    assert text.index("compare table, again") < text.index("new table") and "old table" not in text
    assert text.count("<!-- begin history -->") == text.count("<!-- end compare -->") == 1


def test_the_harness_command_line_for_history(capsys, tmp_path):
    argv = ["--history", "--models", "iid 5%", "--runs", "10", "--clean", "1", "--planted", "1", "--jobs", "1",
            "--out", str(tmp_path / "c.md")]
    assert calibrate.main(argv) == 0
    assert capsys.readouterr().out.startswith("| noise | runs | false CPs/series speedup |")
    text = (tmp_path / "c.md").read_text()
    assert "<!-- begin history -->" in text and "| iid 5% | 10 | 0.00% (0/20) | 0.00% (0/30) |" in text


def _section_rows(text: str, section: str, head: str) -> list[dict[str, str]]:
    """The rows of the table that starts with `head` in the page's `section` (between its markers)."""
    part = text[text.index(f"<!-- begin {section} -->"):text.index(f"<!-- end {section} -->")]
    lines = part.splitlines()
    start = next(i for i, ln in enumerate(lines) if ln.startswith(head))
    header = [h.strip() for h in lines[start].strip("|").split("|")]
    return [dict(zip(header, (v.strip() for v in ln.strip("|").split("|")))) for ln in lines[start + 2:]
            if ln.startswith("|")]


def _history_cells(text: str) -> dict[tuple[str, int], dict[str, str]]:
    return {(r["noise"], int(r["runs"])): r for r in _section_rows(text, "history", "| noise | runs |")}


def _share(cell: str) -> tuple[int, int]:
    k, n = re.search(r"\((\d+)/(\d+)\)", cell).groups()
    return int(k), int(n)


def test_the_committed_history_table_meets_the_targets():
    """The issue's targets: false change points at most 1% per series at the default setting, for
    series of 6 to 30 runs under iid noise and run shifts; power at least 80% for a 20% step under 5%
    noise with at least 5 runs on each side, the step placed within one run. Under bursts, three in a
    row of one direction are a three-run episode and are found as one (the page says so): at most 10%
    there, what the committed run measured (9.0% at 30 runs). The committed table is a reduced run,
    labelled as such: 20 clean and 10 planted histories a cell, not the default's 6000 runs' worth."""
    text = (ROOT / "docs" / "calibration.md").read_text()
    cells = _history_cells(text)
    reduced = "**A reduced run**" in text[text.index("<!-- begin history -->"):text.index("<!-- end history -->")]
    assert {m for m, _ in cells} == set(calibrate.HISTORY_BY_NAME)
    assert {r for _, r in cells} == set(calibrate.HISTORY_LENGTHS) and min(calibrate.HISTORY_LENGTHS) == 6
    assert max(calibrate.HISTORY_LENGTHS) == 30
    for (model, runs), row in cells.items():
        for column in ("false CPs/series speedup", "false CPs/series time"):
            k, n = _share(row[column])
            ceiling = 0.10 if model == "bursts 10%" else 0.01
            assert n >= (400 if reduced else 2000) and k <= ceiling * n, (model, runs, column)
        if runs >= 2 * calibrate.STEP_MARGIN and model in ("iid 5%", "run shifts 5%"):
            k, n = _share(row["power 20% (±1 run)"])
            assert n >= (50 if reduced else 100) and k >= 0.8 * n, (model, runs)
    assert "python -m benchmarks.calibrate --history" in text


# --- drift within a run: sequential against paired timing --------------------------------------------------

def test_a_paired_run_interleaves_each_settings_cases_in_rounds(tmpl):
    rng = np.random.default_rng(SEED)
    paired, sequential = calibrate.timeline(tmpl, rng, True), calibrate.timeline(tmpl, rng, False)
    assert paired.shape == sequential.shape == (len(tmpl), calibrate.SAMPLES)
    assert ((0 <= paired) & (paired < 1)).all() and ((0 <= sequential) & (sequential < 1)).all()
    # one after another: each case's repetitions in a slot of their own, in plan order
    assert (sequential[1:].min(axis=1) > sequential[:-1].max(axis=1)).all()
    # paired: a setting's cases share one slot, round after round, one batch each a round
    group = calibrate.settings_of(tmpl)
    members = np.flatnonzero(group == 0)
    per = calibrate.SAMPLES // calibrate.ROUNDS
    starts = paired[members][:, ::per]  # each batch's first repetition
    assert (starts.max(axis=0)[:-1] < starts.min(axis=0)[1:]).all()  # round r ends before round r + 1 begins
    assert paired[members].max() < paired[np.flatnonzero(group == 1)].min()
    orders = {tuple(np.argsort(starts[:, r])) for r in range(calibrate.ROUNDS)}
    assert len(orders) > 1  # the order is drawn afresh each round


def test_paired_rounds_recover_the_true_speedup_where_steps_move_the_ratio_of_medians(tmpl):
    """A machine halving its speed three times a run and no other noise: each round's ratio sees one
    speed, so the median of the rounds' ratios is the true speedup; the medians of cases timed one
    after the other are taken at different speeds."""
    noise = calibrate.Noise("steps", iid=0.0, steps=1.0, switches=3)
    true = dict(zip(tmpl["case_id"], tmpl["true_ms"]))
    wrong = 0
    for i in range(5):
        for paired in (True, False):
            run = calibrate.synthetic_run(tmpl, noise, np.random.default_rng([SEED, i]), "r", paired=paired)
            speed = run[run["case_id"] != run["baseline_case_id"]]
            truth = np.array([true[b] / true[c] for c, b in zip(speed["case_id"], speed["baseline_case_id"])])
            if paired:
                assert speed["speedup_paired"].to_numpy() == pytest.approx(truth, rel=1e-9)
            else:
                assert speed["speedup_paired"].isna().all()
                medians = dict(zip(run["case_id"], run["time_ms_median"]))
                ratio = np.array([medians[b] / medians[c] for c, b in zip(speed["case_id"], speed["baseline_case_id"])])
                wrong += int((np.abs(ratio / truth - 1) > 0.5).sum())
    assert wrong > 0


def test_under_steps_paired_timing_detects_far_smaller_changes(tmpl):
    cell = calibrate.run_drift_cell(tmpl, calibrate.DRIFT_BY_NAME["steps 20%"], clean=3, planted=1, seed=SEED)
    assert cell.median_detectable("paired") < 0.2 * cell.median_detectable("sequential")
    assert cell.tests["paired"] == cell.tests["sequential"] == 60
    assert cell.alarms["paired"] <= most_alarms(60) and cell.found["paired"] == cell.planted["paired"] == 5


def _drift_rows(text: str) -> dict[str, dict[str, str]]:
    return {r["drift"]: r for r in _section_rows(text, "drift", "| drift |")}


def _pct(cell: str) -> float:
    return float(re.match(r"±?([\d.]+)%", cell).group(1)) / 100


def test_the_committed_drift_table_shows_what_it_claims():
    """The issue's table: the minimum detectable change at 3 runs per side, sequential against
    paired, under the drift model; paired timing keeps false alarms rare and finds 20% slowdowns."""
    text = (ROOT / "docs" / "calibration.md").read_text()
    rows = _drift_rows(text)
    assert set(rows) == set(calibrate.DRIFT_BY_NAME)
    assert "python -m benchmarks.calibrate --drift" in text
    for model, row in rows.items():
        seq, paired = _pct(row["detectable sequential"]), _pct(row["detectable paired"])
        k, n = _share(row["FA/case paired"])
        assert n >= 1000 and k <= 0.01 * n, model
        k, n = _share(row["power 20% paired"])
        assert n >= 100 and k >= 0.8 * n, model
        if calibrate.DRIFT_BY_NAME[model].switches:  # steps: what interleaving cancels
            assert paired <= seq / 5, model
        else:  # a slow trend barely separates neighbouring windows: both small
            assert max(paired, seq) < 0.05, model
    worst = max(rows.values(), key=lambda r: _pct(r["detectable sequential"]))
    assert (f"Under `{worst['drift']}` a speedup timed sequentially must change by about "
            f"{worst['detectable sequential']}") in " ".join(text.split())


# --- the verdict's false alarms at every run count the defaults allow ----------------------------------

def _run_values(noise: calibrate.Noise, runs: int, rng: np.random.Generator, metric: str,
                shared: float = 0.5) -> dict:
    """One side's per-run log values of calibrate's 30 cases, drawn from the noise model at the level
    of a run's median (stats' input, without building records): a log time is a whole-run shift
    (`shared` of the shift's variance) + the case's own shift + log 2 in a burst + the median of
    `SAMPLES` repetitions' iid noise; a speedup is its baseline's log time less the case's (10
    baselines, 2 speedups each: the whole-run shift cancels), a time is oriented as stats wants it."""
    sd = math.log1p(noise.shift)
    t = (sd * math.sqrt(shared) * rng.standard_normal((runs, 1))
         + sd * math.sqrt(1.0 - shared) * rng.standard_normal((runs, 30))
         + math.log(2.0) * (rng.random((runs, 30)) < noise.burst)
         + 1.25 * math.log1p(noise.iid) / math.sqrt(calibrate.SAMPLES) * rng.standard_normal((runs, 30)))
    values = (t[:, :10, None] - t[:, 10:].reshape(runs, 10, 2)).reshape(runs, 20) if metric == "speedup" else -t
    return {f"c{j}": {f"r{i}": float(values[i, j]) for i in range(runs)} for j in range(values.shape[1])}


def _false_alarms(noise: calibrate.Noise, runs: int, metric: str, comparisons: int, min_runs: int,
                  shared: float = 0.5) -> tuple[int, int]:
    """(regressed or improved, tests) over clean comparisons of `runs` runs per side (seeded)."""
    rng = np.random.default_rng([SEED, runs, int(1000 * noise.shift), int(1000 * noise.burst), int(10 * shared),
                                 len(metric)])
    alarms = tests = 0
    for _ in range(comparisons):
        base, cand = (_run_values(noise, runs, rng, metric, shared) for _ in range(2))
        verdicts = [stats.verdict(ch, min_runs=min_runs) for ch in stats.run_changes(base, cand)[1].values()]
        alarms += sum(v in calibrate.ALARMS for v in verdicts)
        tests += len(verdicts)
    return alarms, tests


SHIFTS_AND_BURSTS = [("run shifts 3%", 0.5), ("run shifts 10%", 0.5), ("run shifts 10%", 1.0), ("bursts 10%", 0.5)]


@pytest.mark.parametrize("runs", [3, 5, 8])
@pytest.mark.parametrize("model, shared", SHIFTS_AND_BURSTS)
def test_false_alarms_hold_at_every_run_count_the_defaults_allow(model, shared, runs):
    """Issue 38: per-case false alarms at most 1.5% under run shifts (half shared by the whole run, or
    all of it) and bursts at every run count the default --min-runs allows (3 and up), for speedups
    and times: 100 clean comparisons a cell (2000 speedup and 3000 time tests)."""
    assert stats.DEFAULT_MIN_RUNS == 3
    for metric in ("speedup", "time"):
        alarms, tests = _false_alarms(calibrate.BY_NAME[model], runs, metric, 100, stats.DEFAULT_MIN_RUNS, shared)
        assert tests == (2000 if metric == "speedup" else 3000) and alarms <= 0.015 * tests, (metric, alarms)


def test_two_runs_per_side_are_insufficient_by_default_because_bursts_break_the_level():
    """Why the default is 3: with 2 runs per side (`--min-runs 2`) the run-shift variance has 2
    degrees of freedom and bursts of load push false alarms past the 1.5% ceiling; by default those
    cases are insufficient-runs and never flagged."""
    noise = calibrate.BY_NAME["bursts 10%"]
    alarms, tests = _false_alarms(noise, 2, "speedup", 100, 2)
    assert alarms > 0.015 * tests
    assert _false_alarms(noise, 2, "speedup", 20, stats.DEFAULT_MIN_RUNS)[0] == 0
