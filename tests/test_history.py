"""suite.analysis.regression.history and `python -m suite history`: per-run series, change points by compare's own
test, agreement with compare, baseline drift, what differs; the history page."""

from __future__ import annotations

import math
from statistics import NormalDist
from datetime import datetime, timedelta, timezone
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from benchmarks import calibrate
from suite import cli
from suite.analysis.regression import compare, history, stats
from suite.core.errors import UserError
from suite.report import history_page
from suite.results import store
from tests.recorded_runs import shared
from tests.json_docs import cli_json

ROOT = Path(__file__).resolve().parent.parent
REFERENCE = ROOT / "results" / "reference" / "cpu-torch-2.13.0-vs-2.14.1"
MOVED = ("regressed", "improved", "baseline-changed")


def test_the_cross_version_reference_has_no_change_point_and_compare_agrees():
    """The issue's case: six runs alternating torch 2.13.0 and 2.14.1, where compare finds 12 noisy
    speedups and nothing regressed; history used to report 10 change points there."""
    h = history.build("cpu", REFERENCE)
    assert len(h.runs) == 6 and h.change_points() == []
    assert {s.metric for s in h.series} == {"speedup", "time"} and len(h.series) == 12 + 18
    result = compare.compare(*compare.load_sides("torch=2.13.0,runs=all", "torch=2.14.1,runs=all", REFERENCE))
    assert result.counts()["noisy"] == 12 and not result.cases["verdict"].isin(MOVED).any()


@pytest.fixture(scope="module")
def tmpl() -> pd.DataFrame:
    return calibrate.template()


def calls(tmpl, noise: str, each: int, factor: float, seed: int) -> list[tuple[history.CaseSeries, str]]:
    """`each` runs, then `each` more in which the planted cases are `factor` slower: every series of
    their history, with compare's verdict of its case and metric between the two groups."""
    rng = np.random.default_rng(seed)
    slow = {c: factor for c in calibrate.planted_cases(tmpl)}
    df = calibrate.synthetic_history(tmpl, calibrate.HISTORY_BY_NAME[noise], 2 * each, rng, slow, each)
    runs = sorted(df["run_id"].unique())
    base, cand = (compare.Side(role, role, df[df["run_id"].isin(ids)])
                  for role, ids in (("baseline", runs[:each]), ("candidate", runs[each:])))
    cases = compare.compare(base, cand).cases.set_index("case_id")
    column = {"speedup": "verdict", "time": "time_verdict"}
    return [(s, cases.loc[s.case_id, column[s.metric]]) for s in history.analyse(df, "cpu").series]


# Effects around what 3 runs per side can call regressed (the whole interval past the 5% minimum
# effect: about 5% + 4% under 3% run shifts), so that both sides of each decision are exercised.
GRID = [("run shifts 3%", 1.08), ("run shifts 3%", 1.11), ("run shifts 10%", 1.15), ("iid 20%", 1.1),
        ("bursts 10%", 1.2)]


@pytest.mark.parametrize("noise, factor", GRID)
def test_on_three_runs_a_side_history_and_compare_make_the_same_calls(tmpl, noise, factor):
    """With 3 + 3 runs there is one split to try (3 runs on each side): its test is compare's between
    the two groups at the same confidence, so every case gets the same call, speedup and time."""
    found = {True: 0, False: 0}
    for seed in range(4):
        for s, expected in calls(tmpl, noise, 3, factor, seed):
            assert [cp.verdict for cp in s.change_points] == ([expected] if expected in MOVED else []), s.label
            assert all(cp.index == 3 and cp.confidence == 0.99 for cp in s.change_points)
            found[bool(s.change_points)] += 1
    assert found[True] and found[False]  # the grid exercises both decisions


@pytest.mark.parametrize("noise, factor", GRID)
def test_on_longer_groups_history_never_finds_a_change_compare_calls_noise(tmpl, noise, factor):
    """With 6 + 6 runs a change point at the groups' boundary, with no other, is tested by compare's
    test between the groups at compare's 99% (the search alone is adjusted for the splits it tried,
    issue #38): it is the call compare makes on those groups."""
    for seed in range(3):
        for s, expected in calls(tmpl, noise, 6, factor, seed):
            for cp in s.change_points:
                if cp.index == 6 and cp.runs_before == cp.runs_after == 6:
                    assert expected in MOVED and cp.confidence == 0.99, s.label
                    assert cp.verdict == expected or compare.BASELINE_CHANGED in (cp.verdict, expected), s.label


@pytest.fixture(scope="module")
def store_with_a_step(tmp_path_factory):
    """Six copies of one real run: in the last three one bf16 case is 1.3x slower, and (per case)
    the recorded `kernel` and the torch version change with it."""
    _, paths = shared(tmp_path_factory, runs=2)
    real = store.read_file(paths[0])
    target = real[(real["precision"] == "bf16") & (real["status"] == "ok")].sort_values("rel_ci").iloc[0]["case_id"]
    results = tmp_path_factory.mktemp("hist") / "results"
    start = datetime(2026, 1, 1, tzinfo=timezone.utc)
    for i in range(6):
        records = []
        run_id = store.new_run_id(start + timedelta(days=i))
        for rec in real.to_dict("records"):
            rec = {k: None if isinstance(v, float) and math.isnan(v) else v for k, v in rec.items()}
            rec["run_id"] = run_id
            rec["started_at"] = start + timedelta(days=i)  # each run measured on its own day
            rec["torch_version"] = "2.13.0+cpu" if i < 3 else "2.14.1+cpu"
            if rec.get("samples_ms") is not None:
                factor = 1.3 if (i >= 3 and rec["case_id"] == target) else 1.0
                rec["samples_ms"] = [float(x) * factor for x in rec["samples_ms"]]
                rec["time_ms_median"] = float(rec["time_ms_median"]) * factor
                if rec.get("speedup_paired") is not None:  # its rounds' ratios move with it
                    rec["speedup_paired"] = float(rec["speedup_paired"]) / factor
            records.append(rec)
        store.write_run(records, store.run_path(results, "cmp", run_id))
    return results, target


def test_history_marks_the_change_point_of_the_slowed_case_only(store_with_a_step):
    results, target = store_with_a_step
    h = history.build("cmp", results)
    assert len(h.runs) == 6 and len(h.series) == 10 + 15  # speedups of bf16 and fp16; times of all three
    points = [(s.case_id, s.metric, cp.index) for s, cp in h.change_points()]
    assert points == [(target, "speedup", 3), (target, "time", 3)]
    (_, speedup), (_, time) = h.change_points()
    assert speedup.ratio == pytest.approx(1 / 1.3, rel=1e-9) and speedup.verdict == "regressed"
    assert time.ratio == pytest.approx(1.3, rel=1e-9) and time.verdict == "regressed"  # slower
    assert speedup.runs_before == speedup.runs_after == 3
    assert speedup.explanation == ("torch 2.13.0+cpu -> 2.14.1+cpu",)
    assert history.build("cmp", results, last=3).change_points() == []  # the newest three: flat


def test_a_slower_baseline_is_named_in_history_too(tmpl):
    """Three runs, then three in which fp32 is 1.5x slower: every speedup rose, and history says
    fp32 did it, as compare does (baseline-changed), with fp32's own time change points."""
    rng = np.random.default_rng(3)
    fp32 = {c for c, p in zip(tmpl["case_id"], tmpl["precision"]) if p == "fp32"}
    df = calibrate.synthetic_history(tmpl, calibrate.HISTORY_BY_NAME["run shifts 3%"], 6, rng,
                                     {c: 1.5 for c in fp32}, 3)
    h = history.analyse(df, "cpu")
    speedup = [cp for s in h.series if s.metric == "speedup" for cp in s.change_points]
    assert len(speedup) >= 15 and {cp.verdict for cp in speedup} <= {"baseline-changed", "improved"}
    blamed = [cp for cp in speedup if cp.verdict == "baseline-changed"]
    assert len(blamed) >= 15 and all(cp.cause.startswith("fp32 got 1.") and " slower" in cp.cause for cp in blamed)
    timed = {s.case_id for s in h.series if s.metric == "time" and s.change_points}
    assert fp32 <= timed


def test_a_kernel_change_is_listed_where_it_happened(tmpl):
    rng = np.random.default_rng(4)
    target = calibrate.planted_cases(tmpl)[0]
    df = calibrate.synthetic_history(tmpl, calibrate.HISTORY_BY_NAME["iid 1%"], 6, rng, {target: 1.4}, 3)
    late = df["run_id"].isin(sorted(df["run_id"].unique())[3:])
    df["kernel"] = "onednn:brgemm:avx512_core_amx"
    df.loc[late & (df["case_id"] == target), "kernel"] = "onednn:ref:any"
    (s, cp), = [(s, cp) for s, cp in history.analyse(df, "cpu").change_points() if s.metric == "speedup"]
    assert s.case_id == target and cp.explanation == ("kernel changed: onednn:brgemm:avx512_core_amx -> onednn:ref:any",)


def test_history_command_writes_a_report_and_json(store_with_a_step, tmp_path, capsys, quick_png):  # what it writes, not pixels (the next test draws)
    results, _ = store_with_a_step
    out = tmp_path / "h"
    assert cli.main(["history", "cmp", "--results", str(results), "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "2 change point(s)" in printed and "torch 2.13.0+cpu -> 2.14.1+cpu" in printed
    names = {p.name for p in out.iterdir()}
    assert {"history_gemm_bf16_speedup.svg", "history_gemm_fp16_speedup.svg", "history_gemm_fp32_time.svg",
            "report.md", "index.html"} <= names
    md, page = (out / "report.md").read_text(), (out / "index.html").read_text()
    assert "## Change points" in md and "-23.1%" in md  # 1/1.3 - 1
    assert "nan" not in md.lower() and "nan" not in page.lower()  # no "CUDA nan" for a CPU build
    doc = cli_json(capsys, ["history", "cmp", "--results", str(results), "--out", str(out), "--json"])
    assert doc["change_points"] == 2 and doc["options"]["min_runs"] == 3


def test_the_plot_has_no_text_inside_its_axes(store_with_a_step, tmp_path, monkeypatch):
    """Step sizes go to the legend (beside the axes) and the table, never onto the data: nothing can
    overlap however many change points there are."""
    results, _ = store_with_a_step
    drawn = []
    from suite.report import figures

    real = figures.save

    def keep(fig, path):
        drawn.append([(t.get_text(), ax.get_legend() is not None) for ax in fig.axes for t in ax.texts])
        drawn.append([t.get_text() for ax in fig.axes if ax.get_legend() for t in ax.get_legend().get_texts()])
        return real(fig, path)

    monkeypatch.setattr(figures, "save", keep)
    history_page.render(history.build("cmp", results), tmp_path / "p")
    texts, legends = drawn[0::2], drawn[1::2]
    assert all(t == [] for t in texts)
    assert any("-23% at #3" in label for labels in legends for label in labels)


def test_history_needs_runs_and_valid_options(tmp_path, store_with_a_step):
    with pytest.raises(UserError, match="does not exist"):
        history.build("nope", tmp_path)
    results, _ = store_with_a_step
    with pytest.raises(UserError, match="at least 2 runs"):
        history.build("cmp", results, last=1)
    with pytest.raises(UserError, match="--min-runs 0"):
        history.Options(min_runs=0)


def test_cli_defaults_are_the_library_defaults():
    parsed = cli.parser().parse_args(["history", "cpu"])
    assert parsed.min_runs == cli.history.DEFAULT_MIN_RUNS == history.Options().min_runs == stats.RECOMMENDED_RUNS
    assert parsed.confidence == history.Options().confidence and parsed.noise is None


def test_the_search_p_is_bonferroni_over_the_splits_scanned_and_against_the_normal():
    """`ChangePoint.p_search` (issue #38): the split's two-sided normal p times the splits the search
    tried, at most 1; a split is a candidate exactly where it is at most 1 - confidence."""
    normal = NormalDist()  # scipy is not among the test dependencies; the standard library's normal is exact
    tests = history.search_size(30, 3)
    for z in (2.0, 4.0, 4.5, 6.0):
        assert history.search_p(z, tests) == pytest.approx(min(1.0, tests * 2 * (1 - normal.cdf(z))), rel=1e-6)
    threshold = history.scan_threshold(0.99, 30, 3)
    assert history.search_p(threshold, tests) == pytest.approx(0.01, rel=1e-6)
    assert history.search_p(1.0, tests) == 1.0


def test_winsorizing_clips_a_burst_and_keeps_a_step_and_a_four_run_episode():
    """The search's series (issue #38): a run 2x slow (a burst), or two in a row, counts as CLIP_SDS
    sds from its local level; a step and an episode of three runs (min_runs) are followed by the local
    level, so they are kept whole."""
    quiet = np.zeros(20)
    burst = quiet.copy()
    burst[[4, 11, 12]] = math.log(2.0)  # one burst, and two in a row
    assert history.winsorize(burst, 0.01, 3) == pytest.approx(np.where(burst > 0, history.CLIP_SDS * 0.01, 0.0))
    step = np.where(np.arange(20) >= 9, 0.3, 0.0)
    episode = np.where((np.arange(20) >= 8) & (np.arange(20) < 11), 0.3, 0.0)
    for y in (step, episode, step[::-1]):
        assert history.winsorize(y, 0.01, 3) == pytest.approx(y)
        assert history.local_level(y, 3) == pytest.approx(y)


# --- issue #38: seeded binary segmentation, every change point one compare calls between its neighbours -----

def reference_histories():
    """Every committed reference folder holding a scenario with 2 or more runs."""
    folders = sorted({p.parent for p in (ROOT / "results" / "reference").rglob("*.parquet")})
    for folder in folders:
        df = store.read([folder])
        for scenario, records in df.groupby("scenario"):
            if records["run_id"].nunique() >= 2:
                yield f"{folder.relative_to(ROOT)}:{scenario}", records, scenario


def compare_calls(records: pd.DataFrame, before: list[str], after: list[str], opts: history.Options,
                  confidence: float) -> pd.DataFrame:
    """compare's cases between two sets of runs of these records, at `confidence`."""
    base, cand = (compare.Side(role, role, records[records["run_id"].isin(ids)])
                  for role, ids in (("baseline", before), ("candidate", after)))
    decision = compare.Options(min_effect=opts.min_effect, confidence=confidence, min_runs=opts.min_runs,
                                noise=opts.noise)
    return compare.compare(base, cand, decision).cases.set_index("case_id")


def assert_compare_calls_each_change_point(h: history.History, records: pd.DataFrame, name: str) -> int:
    """Each change point is a change compare calls between its neighbouring change points' runs."""
    column = {"speedup": "verdict", "time": "time_verdict"}
    ids = [r.run_id for r in h.runs]
    for s in h.series:
        own = [ids[i] for i in s.run_index]
        bounds = [0, *(s.run_index.index(cp.index) for cp in s.change_points), len(own)]
        for j, cp in enumerate(s.change_points):
            cases = compare_calls(records, own[bounds[j]:bounds[j + 1]], own[bounds[j + 1]:bounds[j + 2]],
                                  h.options, cp.confidence)
            assert cases.loc[s.case_id, column[s.metric]] in MOVED, (name, s.label, s.metric, cp.index)
            # compare's own call at its own confidence: the search alone is adjusted for the splits
            assert cp.confidence == h.options.confidence
            assert cp.p == pytest.approx(cases.loc[s.case_id, "speedup_p" if s.metric == "speedup" else "time_p"])
            assert cp.p_search <= 1 - h.options.confidence
    return len(h.change_points())


def test_every_change_point_on_the_reference_runs_is_one_compare_calls_between_its_neighbours():
    """At --min-runs 1, 2 and 3, so that the short reference histories have splits to find; and the
    paired_stability runs of `cpu` pooled in time order (15 runs: 2, 1, 2, 2, 2 threads)."""
    seen = 0
    pooled = store.read(sorted((ROOT / "results" / "reference" / "paired_stability").glob("*/cpu")))
    for name, records, scenario in [*reference_histories(), ("paired_stability pooled", pooled, "cpu")]:
        for m in (1, 2, 3):
            h = history.analyse(records, scenario, history.Options(min_runs=m))
            seen += assert_compare_calls_each_change_point(h, records, f"{name} m={m}")
    assert seen  # some change points among them (the pooled runs' thread changes)


@pytest.mark.parametrize("noise", [None, 0.02])
def test_history_with_steps_and_gaps_finds_them_and_compare_calls_each(tmpl, noise):
    """40 runs, a 25% step at run 8 and a 20% step back at run 32, a case missing from some runs (its
    series and the fits of the others differ), the noise floor on and off."""
    rng = np.random.default_rng(35)
    planted = calibrate.planted_cases(tmpl)
    df = pd.concat([calibrate.synthetic_history(tmpl, calibrate.HISTORY_BY_NAME["run shifts 3%"], 20, rng,
                                                {c: 1.25 for c in planted}, 8),
                    calibrate.synthetic_history(tmpl, calibrate.HISTORY_BY_NAME["run shifts 3%"], 20, rng,
                                                {c: 1.25 for c in planted}, 0, 12).assign(
                        run_id=lambda d: d["run_id"].str.replace("20000101", "20000102"))])
    runs = sorted(df["run_id"].unique())
    df = df[~((df["case_id"] == planted[1]) & df["run_id"].isin(runs[5:9]))]
    h = history.analyse(df, "cpu", history.Options(noise=noise))
    assert_compare_calls_each_change_point(h, df, f"noise {noise}")
    where = {(s.case_id, s.metric): [cp.index for cp in s.change_points] for s in h.series if s.change_points}
    for c in planted:  # planted[1] has no runs 5 to 8: its first run at the new level is run 9
        assert where[(c, "speedup")] == [9 if c == planted[1] else 8, 32], c
    assert {c for c, _ in where} == set(planted)


def test_the_pooled_paired_stability_runs_show_the_thread_changes():
    """issue #38: the committed paired_stability runs pooled in time order, 3 runs each of 2, 1 and 2
    threads: compare between adjacent blocks calls bf16 256^3's speedup change (1.88 -> 3.39 -> 1.82),
    and history finds both change points, each with compare's own call."""
    folder = ROOT / "results" / "reference" / "paired_stability"
    records = store.read([folder / part / "cpu" for part in ("hog", "hog_threads1", "bursts")])
    h = history.analyse(records, "cpu")
    assert len(h.runs) == 9 and [r.facts["run_id"] for r in h.runs] == sorted(records["run_id"].unique())
    ids = [r.run_id for r in h.runs]
    series = next(s for s in h.series if s.metric == "speedup" and s.label == "gemm bf16 256x256x256")
    for lo, k, hi in ((0, 3, 6), (3, 6, 9)):
        cases = compare_calls(records, ids[lo:k], ids[k:hi], h.options, h.options.confidence)
        assert cases.loc[series.case_id, "verdict"] in MOVED
    assert [cp.index for cp in series.change_points] == [3, 6]
    first, second = series.change_points
    assert first.ratio > 1.5 and second.ratio < 1 / 1.5 and first.confidence == second.confidence == 0.99
    assert assert_compare_calls_each_change_point(h, records, "paired_stability") >= 2


def test_seeded_intervals_cost_n_log_n_and_hold_every_stretch_in_one_about_its_size():
    """The search scans O(n log n) runs in all (each interval once, by prefix sums), and every stretch
    of L >= 2 m runs holds a seeded interval of at least L / 2 runs: a short episode is scanned against
    a few runs around it, not against the whole series."""
    m = 3
    for n in (6, 7, 30, 100, 1000, 4000):
        intervals = history.seeded_intervals(n, m)
        assert (0, n) in intervals and all(0 <= s and e <= n and e - s >= 2 * m for s, e in intervals)
        assert sum(e - s for s, e in intervals) <= 8 * n * max(1.0, math.log2(n)), n
        assert history.search_size(n, m) == sum(e - s - 2 * m + 1 for s, e in intervals)
    n = 60
    intervals = history.seeded_intervals(n, m)
    for a in range(n):
        for b in range(a + 2 * m, n + 1):
            assert any(a <= s and e <= b and 2 * (e - s) >= b - a for s, e in intervals), (a, b)


def test_the_search_level_is_bonferroni_over_every_split_it_scans():
    assert history.search_size(6, 3) == 1 and history.scan_threshold(0.99, 6, 3) == pytest.approx(2.5758, abs=1e-4)
    tests = history.search_size(30, 3)
    assert tests > 25  # more than one segment's splits: every interval's
    assert history.scan_threshold(0.99, 30, 3) == pytest.approx(stats.t_quantile(0.01 / tests, math.inf))


def test_a_flat_history_needs_no_exact_fit(tmpl, monkeypatch):
    """The search needs no compare fit: on histories without a change point compare's fit runs only
    for the spreads the history reports (2: speedup and time), from 20 to 80 runs."""
    counts = []
    for runs in (20, 40, 80):
        df = calibrate.synthetic_history(tmpl, calibrate.HISTORY_BY_NAME["iid 1%"], runs, np.random.default_rng(runs))
        fits = []
        with monkeypatch.context() as patch:
            patch.setattr(stats, "fit", lambda *a, real=stats.fit, **k: fits.append(1) or real(*a, **k))
            h = history.analyse(df, "cpu")
        if not h.change_points():
            counts.append(len(fits))
    assert len(counts) >= 2 and set(counts) == {2}, counts


def test_many_run_files_read_as_one_batch_equal_each_file_read_alone(tmpl, tmp_path, capsys, monkeypatch):
    """store.read checks and converts the files of one schema together (their tables compacted as
    read, every 5 here): its records are those of read_file on each good file, in file order; a file
    breaking the contract among them (found by halving the batch) is named and left out, a copied
    run counted once, and the history has every other run."""
    monkeypatch.setattr(store, "COMPACT", 5)
    df = calibrate.synthetic_history(tmpl, calibrate.HISTORY_BY_NAME["run shifts 3%"], 24, np.random.default_rng(3))
    folder = tmp_path / "results" / "cpu"
    paths = []
    for run_id, run in df.groupby("run_id", sort=True):
        records = store.records_of(run)
        if len(paths) == 9:
            records[4]["time_ms_median"] = -1.0  # out of its column's range
        paths.append(store.write_run(records, store.run_path(tmp_path / "results", "cpu", str(run_id))))
    copy = folder / "zz-copy.parquet"
    copy.write_bytes(paths[3].read_bytes())
    read = store.read([folder], lean=True)
    err = capsys.readouterr().err
    assert f"left out {paths[9]}: column time_ms_median holds -1.0" in err and err.count("left out") == 1
    assert "counted once" in err and str(copy) in err
    alone = pd.concat([store.read_file(p, lean=True) for p in paths if p != paths[9]], ignore_index=True)
    pd.testing.assert_frame_equal(read, store.as_categories(alone[read.columns], store.RUN_CONSTANT))
    h = history.build("cpu", tmp_path / "results")
    assert len(h.runs) == 23 and paths[9].stem not in {r.run_id for r in h.runs}


def test_the_plot_labels_about_forty_runs_the_newest_always():
    for runs in (2, 40, 41, 100, 1000, 1001):
        shown = history_page.labelled_runs(runs)
        assert shown[0] == 0 and shown[-1] == runs - 1 and shown == sorted(set(shown))
        assert len(shown) == runs if runs <= history_page.MAX_RUN_LABELS else len(shown) <= history_page.MAX_RUN_LABELS + 1
