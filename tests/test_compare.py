"""suite.analysis.regression.compare and `python -m suite compare` on real runs recorded on this machine."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest

from suite import cli
from suite.analysis.regression import compare, stats
from suite.report import compare_page
from suite.results import select, store
from suite.core.errors import UserError
from benchmarks import calibrate
from tests.recorded_runs import SPEEDUP_CASES, shared
from tests.json_docs import cli_json


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Two real runs of the same scenario, same versions, back to back: (results dir, [df, df])."""
    results, paths = shared(tmp_path_factory, runs=2)
    return results, [store.read_file(p) for p in paths]


def side(role, df, text=None):
    return compare.Side(role, text or role, df)


def variant(df: pd.DataFrame, **changes) -> pd.DataFrame:
    """A copy of a run under a new run id; `scale={case_id: factor}` multiplies that case's samples
    and median (a known slowdown applied to real samples), and its paired speedup, and those of the
    cases measured against it, as the same slowdown would move their rounds' ratios."""
    out = df.copy()
    out["run_id"] = store.new_run_id()
    for case_id, factor in changes.pop("scale", {}).items():
        i = out.index[out["case_id"] == case_id][0]
        out.at[i, "samples_ms"] = np.asarray(out.at[i, "samples_ms"]) * factor
        for col in ("time_ms_median", "time_ms_p10", "time_ms_p90"):
            out.at[i, col] = out.at[i, col] * factor
        if "speedup_paired" in out:
            out.loc[out["case_id"] == case_id, "speedup_paired"] /= factor
            against = (out["baseline_case_id"] == case_id) & (out["case_id"] != case_id)
            out.loc[against, "speedup_paired"] *= factor
    for column, value in changes.items():
        out[column] = value
    return out


def steadiest(df: pd.DataFrame, precision: str = "bf16") -> str:
    """The case of this precision whose median is known best (smallest relative CI)."""
    ok = df[(df["precision"] == precision) & (df["status"] == "ok")]
    return ok.sort_values("rel_ci").iloc[0]["case_id"]


def write(df: pd.DataFrame, results) -> str:
    records = [{k: None if isinstance(v, float) and math.isnan(v) else v for k, v in r.items()}
               for r in df.to_dict("records")]
    for r in records:
        if r.get("samples_ms") is not None:
            r["samples_ms"] = [float(x) for x in r["samples_ms"]]
    path = store.run_path(results, df["scenario"].iloc[0], df["run_id"].iloc[0])
    return str(store.write_run(records, path))


@pytest.fixture(scope="module")
def alternating(tmp_path_factory):
    """Four real runs, same versions, back to back, pooled alternately into two sides (runs 1 and 3
    against 2 and 4), as a cross-version comparison is run: drift in the machine's speed over the
    recording then lands on both sides instead of looking like a change."""
    _, paths = shared(tmp_path_factory, runs=4)
    dfs = [store.read_file(p) for p in paths]
    return pd.concat(dfs[0::2], ignore_index=True), pd.concat(dfs[1::2], ignore_index=True)


@pytest.fixture(scope="module")
def four(tmp_path_factory):
    """The session's four real runs: (their results folder, [df] * 4)."""
    results, paths = shared(tmp_path_factory, runs=4)
    return results, [store.read_file(p) for p in paths]


def copies(dfs: list[pd.DataFrame], **changes) -> pd.DataFrame:
    """Each run copied under a new run id with `variant`'s changes: a candidate side whose runs
    differ from the baseline's by exactly the change, while their run-to-run spread is real."""
    return pd.concat([variant(df, **changes) for df in dfs], ignore_index=True)


def steadiest_across(dfs: list[pd.DataFrame]) -> str:
    """The speedup case whose in-run speedup varies least across these runs."""
    spread = {}
    for case_id, rows in pd.concat(dfs).groupby("case_id"):
        first = rows.iloc[0]
        if (rows["status"] != "ok").any() or not isinstance(first["baseline_case_id"], str) \
                or first["baseline_case_id"] == case_id:
            continue
        logs = []
        for df in dfs:
            t = dict(zip(df["case_id"], df["time_ms_median"]))
            logs.append(math.log(t[first["baseline_case_id"]] / t[case_id]))
        spread[case_id] = float(np.std(logs))
    return min(spread, key=spread.get)


def scale_precisions(df: pd.DataFrame, factor: float, precisions=None) -> dict[str, float]:
    """`variant`'s scale for every measured case of these precisions (all when None)."""
    ok = df[df["status"] == "ok"]
    if precisions:
        ok = ok[ok["precision"].isin(precisions)]
    return {case_id: factor for case_id in ok["case_id"]}


def with_status(df: pd.DataFrame, precision: str, status: str, reason: str) -> pd.DataFrame:
    """The run with its first measured case of `precision` given this status."""
    out = df.copy()
    first = out.index[(out["precision"] == precision) & (out["status"] == "ok")][0]
    out.loc[first, ["status", "reason"]] = [status, reason]
    return out


def test_real_runs_under_the_same_versions_raise_no_false_alarm(alternating):
    a, b = alternating
    result = compare.compare(side("baseline", a), side("candidate", b))
    cases = result.cases
    speedup = cases[cases["metric"] == "speedup"]
    assert len(speedup) == SPEEDUP_CASES
    flagged = speedup[speedup["verdict"].isin([compare.stats.REGRESSED, compare.stats.IMPROVED])]
    # Nearly all unchanged or noisy. This 2-core VM is shared, and its GEMM speed can jump between
    # two levels from one second to the next (bf16 2048^3 measured 9.4 ms and 23.5 ms a few seconds
    # apart): a run caught on the wrong level is a burst no statistic on two runs per side can tell
    # from a real change. One burst moves one case, or one baseline-precision case and with it every
    # speedup measured against it (bf16 and fp16 of one shape). At most two such events, among the
    # ten speedups, are tolerated; a statistic that reacted to the noise itself would flag far more.
    shown = ["precision", "shape", "speedup_ratio", "speedup_ratio_low", "speedup_ratio_high"]
    assert flagged["baseline_case_id"].nunique() <= 2, (flagged[shown], result.noise)
    assert (cases[cases["precision"] == "tf32"]["verdict"] == "skipped").all()
    assert (cases[cases["precision"] == "fp32"]["verdict"] == "n/a").all()
    assert result.time_compared  # same machine: absolute times are compared too


@pytest.mark.parametrize("factor, expected", [(1.5, "regressed"), (1 / 1.5, "improved")])
def test_known_change_applied_to_real_runs_is_found_with_its_magnitude(four, factor, expected):
    _, dfs = four
    target = steadiest_across(dfs)
    base = pd.concat(dfs, ignore_index=True)
    result = compare.compare(side("baseline", base), side("candidate", copies(dfs, scale={target: factor})))
    cases = result.cases.set_index("case_id")
    hit = cases.loc[target]
    # Never the wrong direction. Whether 1.5x stands out depends on how noisy this machine was between
    # the four runs (the gate's own tests use synthetic runs of known noise): when the typical case's
    # interval is narrower than the change, it must. A busy machine's wide interval may reach inside
    # the minimum effect: ambiguous, never a pass nor the other direction.
    assert hit["metric"] == "speedup" and hit["verdict"] in (expected, "ambiguous", "noisy")
    if result.reach["speedup"].detectable < abs(factor - 1) / 2:
        assert hit["verdict"] == expected, result.reach["speedup"]
    assert hit["base_runs"] == hit["cand_runs"] == 4
    # Each run slowed by `factor` divides its speedup by exactly `factor` (same baseline samples).
    assert hit["speedup_ratio"] == pytest.approx(1 / factor, rel=1e-9)
    assert hit["speedup_ratio_low"] <= 1 / factor <= hit["speedup_ratio_high"]
    assert hit["time_ratio"] == pytest.approx(factor, rel=1e-9) and hit["time_verdict"] in (expected, "ambiguous", "noisy")
    others = cases.drop(index=target)
    assert set(others["verdict"]) <= {"unchanged", "noisy", "skipped", "n/a"}  # exactly unchanged: never flagged
    assert others.loc[others["metric"] == "speedup", "speedup_ratio"].to_numpy() == pytest.approx(1.0, rel=1e-12)
    # every speedup case on both sides has 4 runs: all of them enter a pooled spread, that of the kind
    # they are compared on (paired; ratio of medians where a busy machine made a setting fall back to
    # one case after another in some run: suite.analysis.regression.compare.speedup_kind)
    speedups = [s for key, s in result.spread.items() if key.startswith("speedup")]
    assert sum(s.case_sides for s in speedups) == 2 * SPEEDUP_CASES and all(s.run_df == 6 for s in speedups)


def test_one_run_per_side_never_calls_a_regression_and_says_what_to_record(runs):
    _, (a, _) = runs
    target = steadiest(a)
    result = compare.compare(side("baseline", a), side("candidate", variant(a, scale={target: 1.5})))
    hit = result.cases.set_index("case_id").loc[target]
    assert hit["speedup_ratio"] == pytest.approx(1 / 1.5, rel=1e-9)  # the change is measured ...
    assert hit["verdict"] == hit["time_verdict"] == "insufficient-runs"  # ... but cannot be told from noise
    assert "record 3 runs per side" in hit["detail"]
    assert not result.spread["speedup"].observable
    speedup = result.cases[result.cases["metric"] == "speedup"]
    assert (speedup["verdict"] == "insufficient-runs").all() and result.failing().empty
    md = compare_page.markdown(compare_page.build_view(result))
    assert "1 run per side, too few to measure run-to-run noise" in md and "record 3 runs per side" in md
    assert "Gate (--fail-on regressed,time:regressed,new-failure,new-skip): passes" in md
    # --min-runs 1 with a known noise floor (a quiet, dedicated machine) compares single runs
    floored = compare.compare(side("baseline", a), side("candidate", variant(a, scale={target: 1.5})),
                              compare.Options(min_runs=1, noise=0.02))
    assert floored.cases.set_index("case_id").loc[target, "verdict"] == "regressed"


def test_family_wise_gate_is_stricter_than_a_per_case_verdict(runs):
    """With a known noise floor (sd 5% per run, 1 run per side) a change's z statistic is set by its
    size alone: at z = 3.4 the case is regressed at 99% (its interval clears the 5% minimum effect;
    p = 0.0007), but over the 25 tests of the default gate (10 speedups, 15 times) Holm needs
    p < 0.01 / 25, so the gate passes; at z = 6 it fails. At z = 3 the interval excludes no change
    but reaches inside 5%: ambiguous, which the default gate never fails, and which fails a gate that
    names it only at the family-wise level too."""
    _, (a, _) = runs
    target = steadiest(a)
    se = math.log1p(0.05) * math.sqrt(2)
    opts = compare.Options(min_runs=1, noise=0.05)
    for z, fails in ((3.4, False), (6.0, True)):
        cand = variant(a, scale={target: math.exp(z * se)})
        result = compare.compare(side("baseline", a), side("candidate", cand), opts)
        hit = result.cases.set_index("case_id").loc[target]
        assert hit["speedup_p"] == pytest.approx(math.erfc(z / math.sqrt(2)), rel=1e-6)
        assert hit["verdict"] == "regressed" and hit["time_verdict"] == "regressed"
        assert compare.family_size(result.cases, opts.fail_on) == 25
        assert bool(hit["gate"]) is fails and (target in set(result.failing()["case_id"])) is fails
    result = compare.compare(side("baseline", a), side("candidate", variant(a, scale={target: math.exp(3 * se)})), opts)
    hit = result.cases.set_index("case_id").loc[target]
    assert hit["verdict"] == hit["time_verdict"] == "ambiguous" and not hit["gate"]
    assert math.log(hit["speedup_ratio_low"]) < -math.log1p(0.05) < math.log(hit["speedup_ratio_high"]) < 0
    assert result.failing(compare.parse_fail_on("ambiguous,time:ambiguous")).empty  # p 0.0027: not family-wise
    strict = compare.Options(min_runs=1, noise=0.05, fail_on=("ambiguous",))
    cand = variant(a, scale={target: math.exp(3 * se)})
    lone = compare.compare(side("baseline", a), side("candidate", cand), strict)
    assert compare.family_size(lone.cases, strict.fail_on) == 10  # the speedup tests alone
    assert lone.failing().empty


@pytest.fixture(scope="module")
def synthetic(runs):
    """Three runs per side drawn around one real run (benchmarks/calibrate.py: its cases, its medians,
    controlled noise of 3% run shifts, a fixed seed): the gate's rows need a known noise level, which
    this shared machine's own runs do not have. (baseline df, [candidate run df] * 3)."""
    _, (a, _) = runs
    tmpl = calibrate.template_of(a, groups=5)
    base, cand = calibrate.sides(tmpl, calibrate.BY_NAME["run shifts 3%"], 3, np.random.default_rng(15))
    return base, [g for _, g in cand.groupby("run_id")]


# The rows of the default gate, each the candidate runs transformed: what a user means by a
# regression exits 1, and nothing else does.
EXIT_ROWS = {
    "baseline precision 1.5x slower": lambda df: variant(df, scale=scale_precisions(df, 1.5, ["fp32"])),
    "every precision 2x slower": lambda df: variant(df, scale=scale_precisions(df, 2.0)),
    "a new failure": lambda df: with_status(variant(df), "bf16", "failed", "RuntimeError: boom"),
    "a new skip": lambda df: with_status(variant(df), "fp16", "skipped", "not on this build"),
    "nothing changed": lambda df: variant(df),
}


@pytest.mark.parametrize("row", list(EXIT_ROWS))
def test_default_gate_exit_status(synthetic, tmp_path, monkeypatch, capsys, row):
    base_df, cand_runs = synthetic
    for run_id, df in base_df.groupby("run_id"):
        write(df, tmp_path / "base")
    for df in cand_runs:
        write(EXIT_ROWS[row](df), tmp_path / "cand")
    base, cand = f"{tmp_path / 'base'}/cmp,runs=all", f"{tmp_path / 'cand'}/cmp,runs=all"
    monkeypatch.setattr(compare_page, "render", lambda result, out: [])  # the report has its own test
    rc = cli.main(["compare", base, cand, "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err
    result = compare.compare(*compare.load_sides(base, cand, tmp_path))
    cases, failing = result.cases, result.failing()
    speedup = cases[cases["metric"] == "speedup"]
    assert (cases["base_runs"].max(), cases["cand_runs"].max()) == (3, 3)
    if row == "nothing changed":
        assert rc == 0 and failing.empty
        assert set(speedup["verdict"]) <= {"unchanged", "noisy"}
        return
    assert rc == 1 and "fail the gate" in err
    fp32 = cases[cases["precision"] == "fp32"]
    if row == "baseline precision 1.5x slower":
        # Every speedup is 1.5x better because fp32 got slower: baseline-changed where the case's own
        # time did not move (one noisy case may have moved too: improved), which never fails the gate;
        # the baseline's own time does.
        assert set(speedup["verdict"]) <= {"baseline-changed", "improved"}
        assert (speedup["verdict"] == "baseline-changed").mean() > 0.5
        assert [d.sentence for d in result.drift] == ["speedups over fp32 rose because fp32 got 1.5x slower"]
        assert set(failing["precision"]) == {"fp32"} and (failing["time_verdict"] == "regressed").all()
        assert (fp32["verdict"] == "n/a").all() and (fp32["time_verdict"] == "regressed").all()
        assert result.failing(("regressed", "new-failure")).empty
        assert set(result.failing(("baseline-changed",))["verdict"]) == {"baseline-changed"}  # only when asked for
    elif row == "every precision 2x slower":
        assert set(speedup["verdict"]) <= {"unchanged", "noisy"}  # speedups cannot see it ...
        assert set(failing["time_verdict"]) == {"regressed"} and len(failing) == len(cases[cases["time_verdict"] != ""])
    else:
        verdict = "new-failure" if row == "a new failure" else "new-skip"
        assert list(failing["verdict"]) == [verdict]


def test_cli_writes_the_report_and_gates(synthetic, tmp_path, capsys, quick_png):  # plots: test_browser's site
    base_df, cand_runs = synthetic
    target = base_df[base_df["precision"] == "bf16"]["case_id"].iloc[0]
    for _, df in base_df.groupby("run_id"):
        write(df, tmp_path / "b")
    for df in cand_runs:
        write(with_status(variant(df, scale={target: 1.5}), "fp16", "skipped", "<script>alert(1)</script>"),
              tmp_path / "r")
    base, cand = f"{tmp_path / 'b'}/cmp,runs=all", f"{tmp_path / 'r'}/cmp,runs=all"
    out = tmp_path / "report"
    assert cli.main(["compare", base, cand, "--out", str(out)]) == 1
    printed = capsys.readouterr()
    assert "Gate (--fail-on regressed,time:regressed,new-failure,new-skip): fails" in printed.out
    assert "1 regressed" in printed.out and "fail the gate" in printed.err
    for name in ("report.md", "index.html", "speedups.svg", "speedup_change.svg", "time_change.svg"):
        assert (out / name).stat().st_size > 0
    md = (out / "report.md").read_text()
    assert md.startswith("# mpsuite comparison: cmp") and "## Needs attention" in md
    assert "With 3 runs per side, a typical case is found regressed with 80% power when it changes by" in md
    assert "| fails |" in md
    html = (out / "index.html").read_text()
    assert "<script>alert" not in html and "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert cli.main(["compare", base, cand, "--out", str(tmp_path / "again"), "--fail-on", "none"]) == 0
    result = compare.compare(*compare.load_sides(base, cand, tmp_path))
    assert len(result.failing(compare.parse_fail_on("improved"))) == 0
    assert set(result.failing(compare.parse_fail_on("time:regressed"))["case_id"]) == {target}
    assert list(result.failing(compare.parse_fail_on("new-skip"))["verdict"]) == ["new-skip"]
    hit = result.cases.set_index("case_id").loc[target]
    assert hit["verdict"] == "regressed" and hit["speedup_ratio_low"] < 1 / 1.5 * 1.2


def test_cli_defaults_are_the_library_defaults():
    parsed = cli.parser().parse_args(["compare", "a", "b"])
    assert compare.parse_fail_on(parsed.fail_on) == compare.DEFAULT_FAIL_ON == compare.Options().fail_on
    assert parsed.min_runs == stats.DEFAULT_MIN_RUNS == compare.Options().min_runs
    assert parsed.confidence == stats.DEFAULT_CONFIDENCE and parsed.min_effect == stats.DEFAULT_MIN_EFFECT
    assert parsed.noise is None


def test_default_report_folder_is_under_reports_compare(runs, tmp_path, monkeypatch, quick_png):  # where, not pixels
    results, _ = runs
    monkeypatch.chdir(tmp_path)
    rc = cli.main(["compare", f"{results}/cmp,skip=1", f"{results}/cmp", "--fail-on", "none"])
    assert rc == 0
    folders = list((tmp_path / "reports" / "compare" / "cmp").iterdir())
    assert len(folders) == 1 and "_vs_" in folders[0].name and (folders[0] / "report.md").is_file()


def test_statuses_become_verdicts_with_reasons(runs):
    _, (a, _) = runs
    bf16 = a[(a["precision"] == "bf16")]["case_id"].tolist()
    fp16 = a[(a["precision"] == "fp16")]["case_id"].tolist()
    cand = variant(a)
    cand = cand[cand["case_id"] != bf16[0]]  # missing on the candidate side
    cand.loc[cand["case_id"] == bf16[1], ["status", "reason"]] = ["skipped", "not on this build"]
    cand.loc[cand["case_id"] == fp16[0], ["status", "reason"]] = ["failed", "RuntimeError: <boom> & co"]
    result = compare.compare(side("baseline", a), side("candidate", cand))
    by_id = result.cases.set_index("case_id")
    assert by_id.loc[bf16[0], "verdict"] == "missing" and by_id.loc[bf16[0], "detail"] == "baseline only"
    assert by_id.loc[bf16[1], "verdict"] == "new-skip" and by_id.loc[bf16[1], "detail"] == "not on this build"
    assert by_id.loc[fp16[0], "verdict"] == "new-failure"
    assert any("1 case(s) failed on the candidate side (1 new)" in w and "<boom>" in w for w in result.warnings)
    assert set(result.failing(compare.parse_fail_on("new-failure,missing"))["case_id"]) == {bf16[0], fp16[0]}
    # The other way round, the same cases were fixed.
    back = compare.compare(side("baseline", cand), side("candidate", variant(a))).cases.set_index("case_id")
    assert back.loc[fp16[0], "verdict"] == "recovered" and back.loc[bf16[1], "verdict"] == "recovered"
    assert back.loc[bf16[0], "detail"] == "candidate only"


def test_no_overlapping_cases_is_a_clear_error(runs):
    _, (a, b) = runs
    other = b.assign(case_id=b["case_id"].map(lambda c: "x" + c[1:]))
    with pytest.raises(UserError, match="no case is on both sides"):
        compare.compare(side("baseline", a), side("candidate", other))


def test_mismatched_scenarios_need_any_scenario(runs):
    _, (a, b) = runs
    other = b.assign(scenario="other")
    with pytest.raises(UserError, match="--any-scenario"):
        compare.compare(side("baseline", a), side("candidate", other))
    result = compare.compare(side("baseline", a), side("candidate", other), compare.Options(any_scenario=True))
    assert len(result.cases) == len(a)


def test_the_same_run_on_both_sides_is_refused(runs):
    _, (a, _) = runs
    with pytest.raises(UserError, match="both select run"):
        compare.compare(side("baseline", a), side("candidate", a))


def test_a_side_with_zero_runs_is_a_clear_error(runs, tmp_path, capsys):
    results, _ = runs
    with pytest.raises(UserError, match=r"no run under .* has torch=0\.1 .*torch_version seen: 2\."):
        select.select("torch=0.1", results, role="candidate")
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(UserError, match="no results"):
        select.select(str(empty), results)
    assert cli.main(["compare", str(empty), f"{results}/cmp"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("mpsuite: error:") and len(err.strip().splitlines()) == 1


def _with_schema_version(path: str, version: int, dest) -> str:
    table = pq.read_table(path)
    meta = dict(table.schema.metadata)
    meta[store.META_KEY] = str(version).encode()
    pq.write_table(table.replace_schema_metadata(meta), dest)
    return str(dest)


def test_older_schema_versions_are_migrated_or_named(runs, tmp_path, monkeypatch):
    results, (a, b) = runs
    src = str(store.run_path(results, "cmp", b["run_id"].iloc[0]))
    old = _with_schema_version(src, 0, tmp_path / f"{b['run_id'].iloc[0]}.parquet")
    with pytest.raises(UserError, match="schema version 0 has no migration"):
        select.select(old, results)
    # With a migration registered, the old file reads (and is marked) as the current version.
    monkeypatch.setitem(store.MIGRATIONS, 0, lambda df: df.assign(migrated=True))
    migrated = select.select(old, results)
    assert (migrated["schema_version"] == store.SCHEMA_VERSION).all() and migrated["migrated"].all()
    result = compare.compare(side("baseline", a), side("candidate", migrated))
    assert len(result.cases) == len(a)
    newer = _with_schema_version(src, store.SCHEMA_VERSION + 1, tmp_path / "newer.parquet")
    with pytest.raises(UserError, match="newer than this mpsuite"):
        select.select(newer, results)


def test_selector_syntax(runs):
    results, (a, b) = runs
    newest, older = sorted([a["run_id"].iloc[0], b["run_id"].iloc[0]], reverse=True)
    torch_version = a["torch_version"].iloc[0]  # e.g. 2.13.0+cpu
    short = torch_version.split("+")[0].rsplit(".", 1)[0]  # e.g. 2.13
    assert set(select.select(f"scenario=cmp,torch={short}", results)["run_id"]) == {newest}
    assert set(select.select(f"torch={torch_version},skip=1", results)["run_id"]) == {older}
    assert set(select.select("runs=all,device=cpu", results)["run_id"]) == {newest, older}
    assert set(select.select(older[:19], results)["run_id"]) == {older}  # a unique run id prefix
    assert set(select.select(f"run={newest}", results)["run_id"]) == {newest}
    with pytest.raises(UserError, match=f"torch={short}0"):
        select.select(f"torch={short}0", results)  # 2.130 is not 2.13
    for bad, message in [("", "empty run selector"), ("tourch=2", "unknown key 'tourch'"),
                         ("runs=0", "positive number"), ("skip=-1", "number >= 0"),
                         ("torch=", "no value"), ("nope/x.parquet", "no such results file")]:
        with pytest.raises(UserError, match=message):
            select.select(bad, results)
    with pytest.raises(UserError, match="skip=5 leaves none"):
        select.select("skip=5", results)


def test_options_and_fail_on_are_validated(capsys):
    with pytest.raises(UserError, match="unknown verdict"):
        compare.parse_fail_on("regressed,slower")
    assert compare.parse_fail_on("none") == ()
    assert compare.parse_fail_on("Regressed, time:regressed") == ("regressed", "time:regressed")
    assert compare.parse_fail_on("time:insufficient-runs") == ("time:insufficient-runs",)
    for bad in (dict(min_effect=0), dict(confidence=0.3), dict(min_runs=0), dict(min_runs=1.5), dict(noise=-1),
                dict(noise=1.5), dict(fail_on=("slower",))):
        with pytest.raises(UserError):
            compare.Options(**bad)
    for bad in (["--min-runs", "0"], ["--resamples", "1000000000"], ["--seed", "1"]):  # no resampling is left
        with pytest.raises(SystemExit):
            cli.parser().parse_args(["compare", "a", "b", *bad])
        assert bad[0] in capsys.readouterr().err


def test_noise_is_a_floor_under_the_estimate(four):
    _, dfs = four
    base = pd.concat(dfs[:2], ignore_index=True)
    estimated = compare.compare(side("baseline", base), side("candidate", copies(dfs[:2])))
    floored = compare.compare(side("baseline", base), side("candidate", copies(dfs[:2])),
                              compare.Options(noise=0.5, min_runs=2))
    assert floored.spread["speedup"].floor == pytest.approx(math.log1p(0.5) ** 2)
    assert floored.spread["speedup"].sd == pytest.approx(max(math.log1p(0.5), estimated.spread["speedup"].sd))
    speedup = floored.cases[floored.cases["metric"] == "speedup"]
    assert (speedup["verdict"] == "noisy").all()  # +-50% per run: nothing can be told at 2 runs
    assert (speedup["speedup_ratio_high"] > 1.5).all() and np.isfinite(speedup["speedup_ratio_high"]).all()


# --- a slower baseline precision (issue: "speedups rose because fp32 got 1.5x slower") -------------------

REFERENCE = Path(__file__).resolve().parent.parent / "results" / "reference"
CPU_RUN = REFERENCE / "cpu_amx" / "cpu" / "20261201T091332Z-cb2509.parquet"


def drifted(seed: int) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Three runs per side built from a real `cpu` run: each run's times shifted by a lognormal level
    of 10% sd shared by the whole run, 5% noise on every sample; the candidate's fp32 samples x1.5."""
    real = store.read_file(CPU_RUN)
    rng = np.random.default_rng(seed)
    ok, fp32 = (real["status"] == "ok").to_numpy(), (real["precision"] == "fp32").to_numpy()

    def run(i: int, slow: bool) -> pd.DataFrame:
        df = real.copy()
        df["run_id"] = f"2026010{i + 1}T000000Z-{seed:03d}{i:03d}"
        factor = math.exp(math.log1p(0.10) * rng.standard_normal()) * np.where(fp32 & slow, 1.5, 1.0)
        df["samples_ms"] = [m * f * np.exp(math.log1p(0.05) * rng.standard_normal(len(s))) if o else None
                            for s, m, f, o in zip(df["samples_ms"], df["time_ms_median"], factor, ok)]
        df["time_ms_median"] = [float(np.median(s)) if s is not None else math.nan for s in df["samples_ms"]]
        return df

    return (pd.concat([run(i, False) for i in range(3)], ignore_index=True),
            pd.concat([run(i, True) for i in range(3, 6)], ignore_index=True))


def test_a_slower_baseline_is_baseline_changed_named_in_the_headline_and_fails_the_gate(tmp_path, capsys, quick_png):
    """The issue's case: every fp32 time regressed, yet the gate passed and the headline read
    "12 improved". Now: 12 baseline-changed, the headline names fp32, exit 1 on fp32's time."""
    base, cand = drifted(0)
    direct = compare.compare(side("baseline", base), side("candidate", cand))
    fp32 = direct.cases[direct.cases["precision"] == "fp32"]
    assert len(fp32) == 6 and (fp32["time_verdict"] == "regressed").all()  # the condition
    for df, folder in ((base, "b"), (cand, "c")):
        for _, run in df.groupby("run_id"):
            write(run, tmp_path / folder)
    selectors = [f"{tmp_path / folder}/cpu,runs=all" for folder in ("b", "c")]
    assert cli.main(["compare", *selectors, "--out", str(tmp_path / "out")]) == 1
    printed = capsys.readouterr()
    assert "speedups over fp32 rose because fp32 got 1.5x slower; 12 baseline-changed, 6 skipped, 6 n/a" in printed.out
    assert "Gate (--fail-on regressed,time:regressed,new-failure,new-skip): fails, 6 case(s)" in printed.out
    doc = cli_json(capsys, ["compare", *selectors, "--out", str(tmp_path / "out"), "--json"], status=1)
    assert doc["counts"]["baseline-changed"] == 12 and doc["headline"][0].startswith("speedups over fp32 rose because")
    assert doc["headline"][1] == "12 baseline-changed, 6 skipped, 6 n/a"
    assert sorted(doc["failing"]) == sorted(fp32["case_id"])
    (speedups, times) = doc["reach"]  # what each test can show, named as the 80%-power change it finds
    assert (speedups["test"], times["test"]) == ("speedup", "time") and speedups["runs"] == [3, 3]
    reach = direct.reach["speedup"]
    assert speedups["found_with_80_power"] == pytest.approx(reach.detectable) and reach.detectable > 0.05
    assert speedups["gate_found_with_80_power"] > speedups["found_with_80_power"]
    assert "found regressed with 80% power" in speedups["sentence"]
    (drift,) = doc["drift"]
    assert drift["baseline"] == "fp32" and drift["attributed"] and drift["speedup_ratio"] == pytest.approx(1.5, rel=0.03)
    report = (tmp_path / "out" / "report.md").read_text()
    assert "speedups over fp32 rose because fp32 got 1.5x slower" in report and "| baseline-changed |" in report


def test_when_absolute_times_cannot_tell_which_moved_the_headline_says_so():
    """Under 10% whole-run shifts and 3 runs per side, fp32's own time is not always significant; the
    speedups against it still moved 1.5x together. Then no case is blamed and the gate passes (too
    few runs to say which precision moved), but the headline names fp32 and says the times cannot tell."""
    seen = set()
    for seed in range(6):
        result = compare.compare(*(side(r, df) for r, df in zip(("baseline", "candidate"), drifted(seed))))
        fp32 = result.cases[result.cases["precision"] == "fp32"]
        (drift,) = result.drift
        if (fp32["time_verdict"] == "regressed").all():
            assert drift.attributed and drift.sentence.startswith("speedups over fp32 rose because fp32 got 1.")
            assert not result.failing().empty
        elif not (fp32["time_verdict"] == "regressed").any():
            assert not drift.attributed and result.failing().empty
            assert "fp32 got slower or the others faster, absolute times cannot tell" in drift.sentence
        seen.add(drift.attributed)
    assert seen == {True, False}


def test_every_verdict_that_is_not_the_same_lists_what_differs():
    base, cand = (select.select(s, REFERENCE / "cpu-torch-2.13.0-vs-2.14.1") for s in
                  ("torch=2.13.0,runs=all", "torch=2.14.1,runs=all"))
    cand = cand.copy()
    bf16 = cand["precision"] == "bf16"
    base = base.assign(kernel="onednn:brgemm:avx512_core_amx")
    cand["kernel"] = np.where(bf16, "onednn:ref:any", "onednn:brgemm:avx512_core_amx")
    result = compare.compare(side("baseline", base), side("candidate", cand))
    cases = result.cases
    same = cases["verdict"].isin(["unchanged", "skipped", "failed"]) | (
        (cases["verdict"] == "n/a") & cases["time_verdict"].isin(["", "unchanged"]))
    assert same.any() and (~same).any()
    assert (cases.loc[same, "explanation"].map(len) == 0).all()
    for _, row in cases[~same].iterrows():
        assert "torch 2.13.0+cpu -> 2.14.1+cu130" in row["explanation"] and "CUDA none -> 13.0" in row["explanation"]
        kernel = "kernel changed: onednn:brgemm:avx512_core_amx -> onednn:ref:any"
        assert (kernel in row["explanation"]) == (row["precision"] == "bf16")
    assert "torch 2.13.0+cpu -> 2.14.1+cu130" in result.environment.lines()


def test_the_json_schema_names_every_verdict():
    """compare --json's schema lists the verdicts, ambiguous among them, exactly as compare gives them."""
    import json

    schema = json.loads((Path(__file__).resolve().parent.parent / "docs/schemas/compare.schema.json").read_text())
    case = schema["properties"]["cases"]["items"]["properties"]
    assert case["verdict"]["enum"] == list(compare.VERDICTS) and stats.AMBIGUOUS in compare.VERDICTS
    for column in ("speedup_verdict", "time_verdict"):
        assert set(case[column]["enum"]) == {*compare.DECIDED, compare.INSUFFICIENT_RUNS, "", None}
    assert compare.parse_fail_on("ambiguous,time:ambiguous") == ("ambiguous", "time:ambiguous")


def test_an_ambiguous_case_reads_as_ambiguous_in_every_view_never_as_a_pass_or_a_regression(capsys, tmp_path):
    """issue #38: the committed paired_stability runs at 1 thread against the burst runs at 2: bf16
    256x768x3072 and fp16 256^3 moved, by an amount whose interval straddles the 5% minimum effect.
    The terminal, report.md, index.html and the JSON (checked against its schema) each call them
    ambiguous and the default gate passes over them; a gate that names ambiguous fails on them alone."""
    folder = REFERENCE / "paired_stability"
    selectors = [f"{folder / part}/cpu,runs=all" for part in ("hog_threads1", "bursts")]
    doc = cli_json(capsys, ["compare", *selectors, "--out", str(tmp_path / "out"), "--json", "--quiet"])
    ambiguous = {c["case_id"]: c for c in doc["cases"] if c["verdict"] == "ambiguous"}
    assert doc["counts"]["ambiguous"] == len(ambiguous) == 2 and not set(ambiguous) & set(doc["failing"])
    assert "regressed" not in doc["counts"] and "2 ambiguous" in doc["headline"][1]
    labels = []
    for case in ambiguous.values():
        low, high = case["speedup_ratio_low"], case["speedup_ratio_high"]
        assert case["speedup_verdict"] == "ambiguous" and not case["gate"]
        assert (high < 1 or low > 1) and (low < 1.05 < high or low < 1 / 1.05 < high)  # a change, straddling 5%
        labels.append(f"{case['workload']} {case['precision']} {case['shape']}")
    assert cli.main(["compare", *selectors, "--out", str(tmp_path / "out"), "--quiet"]) == 0
    terminal = capsys.readouterr().out
    for label in labels:
        (line,) = [ln for ln in terminal.splitlines() if ln.rstrip().endswith(label) or f" {label} " in ln]
        assert line.lstrip().startswith("ambiguous") and "(not gated)" in line and "regressed" not in line
    report = (tmp_path / "out" / "report.md").read_text()
    html = (tmp_path / "out" / "index.html").read_text()
    for case in ambiguous.values():
        assert f"| ambiguous | {case['workload']} | {case['shape']} | {case['precision']} |" in report
        assert (f'<tr class="ambiguous"><td>ambiguous</td><td>{case["time_verdict"]}</td><td>{case["workload"]}</td>'
                f'<td>{case["shape"]}</td><td>{case["precision"]}</td>') in html
    assert "2 ambiguous (a change whose interval straddles ±5%: neither a pass nor a regression)" in report
    strict = cli_json(capsys, ["compare", *selectors, "--out", str(tmp_path / "strict"), "--json", "--quiet",
                               "--fail-on", "ambiguous"], status=1)
    assert strict["failing"] and set(strict["failing"]) <= set(ambiguous)  # named, it gates (family-wise)
