"""suite.analysis.regression.history and `python -m suite history`: per-run series, change points by compare's own
test, agreement with compare, baseline drift, what differs; the history page."""

from __future__ import annotations

import math
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
    """With 6 + 6 runs history tries 7 splits, each at 99% / 7: a change point at the groups' boundary
    is one compare calls regressed, improved or baseline-changed at 99% on those groups."""
    for seed in range(3):
        for s, expected in calls(tmpl, noise, 6, factor, seed):
            for cp in s.change_points:
                if cp.index == 6 and cp.runs_before == cp.runs_after == 6:
                    assert expected in MOVED and cp.confidence == pytest.approx(1 - 0.01 / 7), s.label


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


def test_history_command_writes_a_report_and_json(store_with_a_step, tmp_path, capsys):
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


def test_split_confidence_is_bonferroni_over_the_splits_a_segment_allows():
    assert history.split_confidence(0.99, 6, 3) == pytest.approx(0.99)  # one split: compare's own level
    assert history.split_confidence(0.99, 30, 3) == pytest.approx(1 - 0.01 / 25)


# --- issue #35: every split scored at once, the same change points as refitting each split ---------

def refit_every_split(tester, case, runs, lo, hi, m):
    """The split search as it was: compare's fit refitted from scratch for every split."""
    best, best_p = None, math.inf
    for k in range(lo + m, hi - m + 1):
        p = tester.fit(tuple(runs[lo:k]), tuple(runs[k:hi])).test(case)[3]
        if math.isfinite(p) and p < best_p:
            best, best_p = k, p
    return best


def outcome(h: history.History) -> list:
    return [(s.case_id, s.metric, s.device, [(cp.index, cp.p, cp.ratio, cp.low, cp.high, cp.verdict, cp.cause,
                                              cp.explanation) for cp in s.change_points]) for s in h.series]


def reference_histories():
    """Every committed reference folder holding a scenario with 2 or more runs."""
    folders = sorted({p.parent for p in (ROOT / "results" / "reference").rglob("*.parquet")})
    for folder in folders:
        df = store.read([folder])
        for scenario, records in df.groupby("scenario"):
            if records["run_id"].nunique() >= 2:
                yield f"{folder.relative_to(ROOT)}:{scenario}", records, scenario


def test_history_of_the_reference_runs_is_what_refitting_every_split_gives(monkeypatch):
    """Verdicts, p-values, intervals of every change point on results/reference/**, bit for bit,
    against the split search refitting every split (at --min-runs 1, 2 and 3, so that the short
    reference histories have splits to find)."""
    seen = 0
    for name, records, scenario in reference_histories():
        for m in (1, 2, 3):
            opts = history.Options(min_runs=m)
            fast = outcome(history.analyse(records, scenario, opts))
            with monkeypatch.context() as patch:
                patch.setattr(history, "_best_split", refit_every_split)
                assert fast == outcome(history.analyse(records, scenario, opts)), (name, m)
            seen += sum(len(s[3]) for s in fast)
    assert seen  # some change points among them (min_runs 1 on bursts of load)


@pytest.mark.parametrize("noise", [None, 0.02])
def test_history_with_steps_and_gaps_is_what_refitting_every_split_gives(tmpl, monkeypatch, noise):
    """40 runs, two steps, a case missing from some runs (its series and the fits of the others
    differ), the noise floor on and off: the same change points, bit for bit."""
    rng = np.random.default_rng(35)
    planted = calibrate.planted_cases(tmpl)
    df = pd.concat([calibrate.synthetic_history(tmpl, calibrate.HISTORY_BY_NAME["run shifts 3%"], 20, rng,
                                                {c: 1.25 for c in planted}, 8),
                    calibrate.synthetic_history(tmpl, calibrate.HISTORY_BY_NAME["bursts 10%"], 20, rng,
                                                {c: 0.8 for c in planted[:2]}, 12).assign(
                        run_id=lambda d: d["run_id"].str.replace("20000101", "20000102"))])
    runs = sorted(df["run_id"].unique())
    df = df[~((df["case_id"] == planted[1]) & df["run_id"].isin(runs[5:9]))]
    opts = history.Options(noise=noise)
    fast = history.analyse(df, "cpu", opts)
    with monkeypatch.context() as patch:
        patch.setattr(history, "_best_split", refit_every_split)
        assert outcome(fast) == outcome(history.analyse(df, "cpu", opts))
    assert len(fast.change_points()) >= 4


def test_split_statistics_from_prefix_sums_equal_the_ones_refitted_from_scratch():
    """stats.prefix_sides / split_pvalues against _fit_side / Fit.test of each split, to 1e-12
    (p to 1e-9 relative: it is a tail probability of those), with missing values and one case
    holding a single run on some sides."""
    rng = np.random.default_rng(7)
    y = rng.normal(0, 0.05, (30, 6)) + rng.normal(0, 0.03, (30, 1)) + np.linspace(-1, 2, 6)
    y[3:9, 2] = np.nan
    y[:, 5] = np.nan
    y[[4, 20], 5] = [0.3, 0.35]
    as_values = lambda rows: {f"c{c}": {f"r{r}": y[r, c] for r in rows if np.isfinite(y[r, c])} for c in range(6)}
    for noise in (None, 0.05):
        d, p = stats.split_pvalues(y, 3, noise)
        sides = stats.prefix_sides(y, range(1, 31))
        for j in range(1, 31):
            side = stats._fit_side(as_values(range(j)))
            for c, mean in side.means.items():
                i = int(c[1:])
                assert sides.means[j - 1, i] == pytest.approx(mean, abs=1e-12)
                assert sides.runs[j - 1, i] == side.runs[c]
                assert (math.isnan(side.own_var[c]) and math.isnan(sides.own_var[j - 1, i])
                        or sides.own_var[j - 1, i] == pytest.approx(side.own_var[c], abs=1e-12))
            assert np.nan_to_num(sides.run_var[j - 1], nan=-1) == pytest.approx(np.nan_to_num(side.run_var, nan=-1), abs=1e-12)
            assert sides.run_df[j - 1] == side.run_df
        for k in range(3, 28):
            fit = stats.fit(as_values(range(k)), as_values(range(k, 30)), noise)
            for c in sorted(fit.cases):
                estimate, _, _, exact = fit.test(c)
                i = int(c[1:])
                assert d[k - 3, i] == pytest.approx(estimate, abs=1e-12)
                assert p[k - 3, i] == pytest.approx(exact, rel=1e-9, abs=1e-300)


def test_the_exact_fits_do_not_grow_with_the_runs(tmpl, monkeypatch):
    """Splits are scored by one scan per segment; compare's fit is refitted only for the split a
    series picks (and the change points' causes): on histories without a step the number of fits
    and of scans stays the same from 20 to 80 runs (it grew with the runs, one fit per split)."""
    counts = []
    for runs in (20, 40, 80):
        df = calibrate.synthetic_history(tmpl, calibrate.HISTORY_BY_NAME["iid 1%"], runs, np.random.default_rng(runs))
        fits, scans = [], []
        with monkeypatch.context() as patch:
            patch.setattr(stats, "fit", lambda *a, real=stats.fit, **k: fits.append(1) or real(*a, **k))
            patch.setattr(stats, "split_pvalues", lambda *a, real=stats.split_pvalues, **k: scans.append(1) or real(*a, **k))
            h = history.analyse(df, "cpu")
        if h.change_points():
            continue
        counts.append((len(fits), len(scans)))
    assert len(counts) >= 2
    series = len(h.series)
    assert all(scans == 2 and fits <= series + 3 for fits, scans in counts), counts  # 2 testers: speedup, time


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
    pd.testing.assert_frame_equal(read, alone[read.columns])
    h = history.build("cpu", tmp_path / "results")
    assert len(h.runs) == 23 and paths[9].stem not in {r.run_id for r in h.runs}


def test_the_plot_labels_about_forty_runs_the_newest_always():
    for runs in (2, 40, 41, 100, 1000, 1001):
        shown = history_page.labelled_runs(runs)
        assert shown[0] == 0 and shown[-1] == runs - 1 and shown == sorted(set(shown))
        assert len(shown) == runs if runs <= history_page.MAX_RUN_LABELS else len(shown) <= history_page.MAX_RUN_LABELS + 1
