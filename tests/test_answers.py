"""Reports answer first, `recommend` picks within a budget, and the CLI speaks the conventions its
users know (--version, --json, --only, --quiet, scenarios found outside the repository). On real
runs of a tiny scenario."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

from suite import cli, pipeline, report
from suite.analysis.outcome import answers, summary
from suite.measure import env
from suite.report import plots
from suite.results import store
from suite.scenario import plan, spec
from suite.workloads.train_step import LOSS_MARGIN_NATS  # its loss gap's margin (the folder's `LOSS_GAP` metric)
from tests.conftest import TINY_SCENARIO
from tests.json_docs import cli_json

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Path:
    """A real run of the tiny scenario (fp32, tf32 (skipped off CUDA), bf16, fp16 at 32 and 64)."""
    folder = tmp_path_factory.mktemp("answers")
    (folder / "tiny.toml").write_text(TINY_SCENARIO, encoding="utf-8")
    return pipeline.run(pipeline.RunRequest(spec.load(folder / "tiny.toml"), folder / "results", None, progress=False)).path


def json_of(capsys, argv) -> dict:
    return cli_json(capsys, argv)  # validated against docs/schemas/<command>.schema.json


# --- the answer ------------------------------------------------------------------------------------


def test_the_headline_answers_at_the_largest_shape_with_speedups_and_errors(tiny):
    df = store.read_file(tiny)
    first = summary.headline(df)[0]
    assert first.startswith("gemm at 64x64x64: ")
    ok = df[(df["status"] == "ok") & (df["m"] == 64)].set_index("precision")
    for precision in ("bf16", "fp16"):
        assert f"rel. error {ok.loc[precision, 'rel_err']:.1e}" in first
    assert "tf32 skipped (TF32 is a CUDA tensor-core mode" in first
    assert any(line.startswith("Not measured: 2 of 8 cases: 2 tf32 skipped") for line in summary.headline(df))


def test_pareto_front_keeps_only_the_undominated_cases():
    errors = np.array([1e-7, 3e-3, 4e-4, 3e-3, 1e-2])
    speedups = np.array([1.0, 3.0, 1.2, 2.0, 2.5])
    assert plots.pareto_front(errors, speedups).tolist() == [0, 2, 1]  # 3 (2.0x) and 4 (2.5x) are beaten


# --- recommend -------------------------------------------------------------------------------------


def test_recommend_picks_the_fastest_precision_within_the_budget(tiny, capsys):
    df = store.read_file(tiny)
    budget = 1e-2
    doc = json_of(capsys, ["recommend", str(tiny), "--max-rel-err", str(budget), "--json"])
    assert doc["budget"] == {"max_rel_err": budget} and len(doc["picks"]) == 2  # one per shape
    speed = report.derived.with_speedups(df)
    for pick in doc["picks"]:
        size = int(pick["setting"].split("x")[0])
        rows = speed[(speed["m"] == size) & (speed["status"] == "ok")]
        within = rows[rows["rel_err"] <= budget]
        best = within.loc[within["speedup"].idxmax()]
        assert pick["pick"] == best["precision"] and pick["speedup"] == pytest.approx(best["speedup"])
        assert pick["rel_err"] <= budget
        for entry in pick["rejected"]:  # faster ones are over budget
            assert rows.set_index("precision").loc[entry["precision"], "rel_err"] > budget


def test_recommend_with_an_impossible_budget_picks_nothing_and_says_why(tiny, capsys):
    doc = json_of(capsys, ["recommend", str(tiny), "--max-rel-err", "1e-12", "--json"])
    assert all(p["pick"] is None and p["within_budget"] == 0 for p in doc["picks"])
    assert all(r["reason"].startswith("rel. error") for p in doc["picks"] for r in p["rejected"])
    assert all(p["rejected"] for p in doc["picks"])
    assert cli.main(["recommend", str(tiny), "--max-rel-err", "-1"]) == 2
    picks = json_of(capsys, ["recommend", str(tiny), "--max-rel-err", "1e-2", "--json"])["picks"]
    assert cli.main(["recommend", str(tiny), "--max-rel-err", "1e-2"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "Which precision, with rel. error <= 0.01"
    for pick in picks:  # the table says what the JSON says, whichever precision this CPU favours
        assert any(line.split()[:4] == ["gemm", pick["setting"], "fp32", pick["pick"]] for line in out), out


def test_recommend_needs_the_metric_its_budget_names(tiny):
    """A bound judges the settings that record its metric: a loss budget says nothing of GEMMs, so
    they get no pick and a note naming the bound that would judge them."""
    df = store.read_file(tiny)
    picks = answers.recommend(df, answers.Budget(max_loss_delta=0.1))  # GEMMs have no loss
    assert picks["pick"].isna().all()
    assert (picks["note"] == "no loss recorded for gemm: bound it with --max-rel-err, --min-sqnr-db").all()


# The cpu_update run where pure bf16 is the fastest recipe and ends 0.022 nats off its reference,
# outside the 0.01-nat margin (docs/update-precision.md); fp8 AdamW state diverged (+8.2 nats).
UPDATE_RUN = ROOT / "results" / "reference" / "cpu_update" / "20261201T141210Z-7220ed.parquet"


def test_training_steps_are_judged_on_their_loss_and_the_fastest_named_is_within_the_margin():
    df = store.read_file(UPDATE_RUN)
    (row,) = report._pick_rows(df)
    gaps = answers.with_settings(df).set_index("variant")["loss_gap_nats"]
    outside = set(gaps[gaps.abs() > LOSS_MARGIN_NATS].index)
    assert {"bf16_pure", "bf16_adamw_fp8"} <= outside  # what the update answer lists as not within
    for column in ("tight", "loose", "fastest"):  # a budget on the loss: never "none" for want of rel. error
        pick = row[column].split(" ")[0]
        assert pick in gaps.index and pick not in outside, row
    assert abs(gaps[row["tight"].split(" ")[0]]) <= LOSS_MARGIN_NATS / 10
    first = summary.headline(df)[0]  # the answer line names first a recipe that trained
    assert first.split(": ")[1].split(" is ")[0] not in outside
    assert "bf16_pure 5.42x (loss delta +0.0221 nats, outside the 0.01-nat margin)" in first
    picks = answers.recommend(df, answers.Budget(max_loss_delta=0.01))
    assert picks["pick"].iloc[0] == row["loose"].split(" ")[0] and picks["loss_reference"].iloc[0] == "bf16"


def test_a_reason_in_the_headline_keeps_its_fix_whole():
    reason = "FP8 GEMMs need K and N to be multiples of 16 (cuBLASLt); got K=520; set pad = true to pad with zeros"
    assert answers.short(reason) == reason
    long = "; ".join([reason, "a second clause " * 3, "set x = 1 to try again"])
    cut = answers.short(long, width=len(reason) + 20)
    assert cut == reason + " ..."  # the clause that does not fit is left out whole, never cut


@pytest.mark.parametrize("threads, advice", [(2, "`--threads 1` steadies them"), (1, "a quieter machine steadies them")])
def test_stall_advice_fits_the_threads_the_run_used(tiny, threads, advice):
    df = store.read_file(tiny)
    df = df.assign(stall_share=np.where(df["status"] == "ok", 0.3, np.nan), cpu_threads=threads)
    (line,) = [line for line in summary.headline(df) if "show stalls" in line]
    assert advice in line and (threads > 1 or "--threads 1" not in line)


# --- the CLI ---------------------------------------------------------------------------------------


def test_version_names_mpsuite_and_torch(capsys):
    with pytest.raises(SystemExit) as stop:
        cli.main(["--version"])
    assert stop.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith("mpsuite ") and "torch 2." in out


def test_json_of_list_plan_and_run(write_scenario, tmp_path, capsys):
    path = write_scenario(TINY_SCENARIO, "tiny.toml")
    listed = json_of(capsys, ["list", "--scenarios", str(path.parent), "--json"])
    assert listed["scenarios"] == [{"name": "tiny", "cases": 8, "max_cases": 8, "path": str(path),
                                    "description": "unit-test scenario"}]
    planned = json_of(capsys, ["plan", str(path), "--json"])
    assert [c["case_id"] for c in planned["cases"]] == [c.case_id for c in plan.expand(spec.load(path))]
    ran = json_of(capsys, ["run", str(path), "--results", str(tmp_path / "r"), "--no-report", "--quiet", "--json"])
    assert ran["cases"] == 8 and ran["failed"] == 0 and Path(ran["results"]).exists()
    assert ran["headline"][0].startswith("gemm at 64x64x64") and {r["precision"] for r in ran["summary"]} >= {"bf16"}


def test_only_runs_the_matching_cases_and_resume_keeps_the_filter(write_scenario, tmp_path, capsys, quick_png):
    path = write_scenario(TINY_SCENARIO, "tiny.toml")
    doc = json_of(capsys, ["plan", str(path), "--json", "--only", "precision=bf16", "--only", "precision=fp*,shape=32x*"])
    assert sorted((c["precision"], c["m"]) for c in doc["cases"]) == [
        ("bf16", 32), ("bf16", 64), ("fp16", 32), ("fp32", 32)]
    assert cli.main(["plan", str(path), "--only", "quantise=pre"]) == 2
    assert "unknown key 'quantise'" in capsys.readouterr().err
    assert cli.main(["plan", str(path), "--only", "precision=fp64"]) == 2
    assert "selects none of the 8 cases" in capsys.readouterr().err
    results = tmp_path / "results"
    scenario = spec.load(path)
    run = store.start_run(results, "tiny", store.new_run_id(), {
        "plan": [c.case_id for c in plan.only(plan.expand(scenario), ["precision=bf16"])],
        **pipeline.scenario_spec(scenario, "cpu", ["precision=bf16"]),
        "identity": {k: env.run_meta(env.resolve_device("cpu")).get(k) for k in pipeline.IDENTITY}})
    run.close()
    argv = ["run", str(path), "--resume", run.header["run_id"], "--results", str(results), "--no-report", "--quiet"]
    assert cli.main(argv + ["--only", "precision=fp16"]) == 2
    assert 'only[0]: "precision=bf16" -> "precision=fp16"' in capsys.readouterr().err
    assert cli.main(argv + ["--only", "precision=bf16"]) == 0
    done = store.read_file(next(results.glob("tiny/*.parquet")))
    assert set(done["precision"]) == {"bf16"} and set(done["run_only"]) == {"precision=bf16"}
    # a report of the folder says its newest run was a subset, first
    assert cli.main(["report", str(results / "tiny"), "--out", str(tmp_path / "r"), "--quiet"]) == 0
    said = f"Subset: run {run.header['run_id']} measured only the cases matching --only precision=bf16 (2 cases)"
    assert said in (tmp_path / "r" / "report.md").read_text() and said in summary.headline(done)[0]


def test_quiet_silences_the_written_lines(tiny, tmp_path, capsys, quick_png):
    assert cli.main(["report", str(tiny), "--out", str(tmp_path / "a")]) == 0
    assert "report in" in capsys.readouterr().err
    assert cli.main(["report", str(tiny), "--out", str(tmp_path / "b"), "--quiet"]) == 0
    assert capsys.readouterr().err == ""


def test_scenarios_are_found_outside_the_repository(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)  # no ./scenarios here: the shipped ones are used
    monkeypatch.delenv(spec.ENV_FOLDER, raising=False)
    doc = json_of(capsys, ["list", "--json"])
    assert Path(doc["folder"]).resolve() == (ROOT / "scenarios").resolve() and "cpu" in {s["name"] for s in doc["scenarios"]}
    monkeypatch.setenv(spec.ENV_FOLDER, str(tmp_path / "nowhere"))
    assert cli.main(["list"]) == 2
    assert f"looked in {tmp_path / 'nowhere'}" in capsys.readouterr().err


# --- the report in a real browser --------------------------------------------------------------------


@pytest.mark.skipif(shutil.which("chromium") is None, reason="Debian's chromium is not installed (apt install chromium)")
def test_the_report_opens_with_its_answer_in_a_browser_and_every_plot_shows(tiny, tmp_path):
    sync_api = pytest.importorskip("playwright.sync_api")
    out = tmp_path / "report"
    report.render(store.read_file(tiny), out)
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=shutil.which("chromium"), args=["--no-sandbox"])
        try:
            page = browser.new_page()
            page.goto((out / "index.html").as_uri())
            first = page.locator("ul.headline li").first.inner_text()
            plots = page.evaluate("Array.from(document.querySelectorAll('svg.plot')).map(s => "
                                  "s.getBoundingClientRect().width > 100 && s.querySelectorAll('path').length > 0)")
            overflow = page.evaluate("document.documentElement.scrollWidth > window.innerWidth")
        finally:
            browser.close()
    assert first == summary.headline(store.read_file(tiny))[0]
    assert plots and all(plots), plots  # every plot inlined and drawn
    assert not overflow  # wide tables scroll inside their box; the page itself never does


def test_a_terminal_gets_a_progress_bar_under_the_finished_cases(tiny_scenario):
    import io

    from suite.measure import progress

    screen = io.StringIO()
    bar = progress.TerminalProgress(2, screen, force_terminal=True)
    cases = plan.expand(tiny_scenario)[:2]
    bar.plan(cases)
    for case in cases:
        bar.begin(case)
        bar.heartbeat(7.0)
        bar.end({"status": "skipped", "reason": "not here"})
    bar.close()
    text = screen.getvalue()
    assert f"[1/2] {cases[0].label}: skipped: not here" in text and f"[2/2] {cases[1].label}" in text
    assert "\x1b[" in text  # drawn with the terminal's codes, which piped output never gets
    plain = progress.progress_for(2, 0, "cpu", io.StringIO())
    assert type(plain) is progress.Progress
    # a setting's cases, timed together: the bar names them all, each line names its case
    screen = io.StringIO()
    bar = progress.TerminalProgress(2, screen, force_terminal=True)
    bar.plan(cases)
    bar.begin_unit(cases)
    assert bar.running_label == progress.unit_label(cases) == "gemm 32x32x32: fp32, tf32"
    for case in reversed(cases):
        bar.end({"status": "skipped", "reason": "not here", "case_id": case.case_id})
    bar.close()
    text = screen.getvalue()
    assert f"[1/2] {cases[1].label}: skipped" in text and f"[2/2] {cases[0].label}: skipped" in text


def test_compare_json_has_the_documented_shape(tiny, tmp_path, capsys, quick_png):
    records = store.records_of(store.read_file(tiny))
    other = store.write_run([{**r, "run_id": "20270101T000000Z-000002"} for r in records],
                            tmp_path / "tiny" / "20270101T000000Z-000002.parquet")
    doc = json_of(capsys, ["compare", str(tiny), str(other), "--reports", str(tmp_path / "reports"), "--json"])
    assert set(doc) >= {"baseline", "candidate", "gate", "headline", "counts", "failing", "report", "cases"}
    assert doc["baseline"]["runs"] == [tiny.stem] and doc["candidate"]["runs"] == [other.stem]
    assert len(doc["cases"]) == 8 and sum(doc["counts"].values()) == 8 and doc["failing"] == []
    assert {c["case_id"] for c in doc["cases"]} == {r["case_id"] for r in records}


def test_require_measured_fails_a_run_where_nothing_was_measured(write_scenario, tmp_path, capsys):
    path = write_scenario(TINY_SCENARIO.replace('device = "cpu"', 'device = "cuda"'), "gpu.toml")
    argv = ["run", str(path), "--results", str(tmp_path / "r"), "--no-report", "--quiet"]
    if __import__("torch").cuda.is_available():
        pytest.skip("a CUDA device is here: the cases would run")
    assert cli.main(argv) == 0  # every case skipped (no CUDA), recorded, not an error by itself
    assert cli.main(argv + ["--require-measured"]) == 1
    assert "no case was measured (all 8 skipped or failed)" in capsys.readouterr().err


def test_decided_on_accuracy_the_baseline_is_the_pick_where_no_emulated_recipe_meets_the_budget(capsys):
    """cpu_fp8 (every FP8 recipe emulated): at rel. error <= 0.01 no FP8 recipe qualifies (3.8e-02)
    but bf16 itself does (2.9e-03): the answer is to stay on bf16, not "none"; at <= 0.001 nothing
    does, bf16 included."""
    fp8 = str(ROOT / "results" / "reference" / "cpu_fp8")
    picks = json_of(capsys, ["recommend", fp8, "--max-rel-err", "0.01", "--json"])["picks"]
    gemm = {(p["workload"], p["setting"]): p for p in picks}["gemm", "256x512x384"]
    assert gemm["decided_on"] == "accuracy" and gemm["pick"] == "bf16" == gemm["baseline"]
    assert gemm["rel_err"] < 0.01 and gemm["within_budget"] == 1
    assert {r["precision"] for r in gemm["rejected"]} >= {"fp8_tensorwise", "fp8_rowwise", "fp8_block"}
    tight = json_of(capsys, ["recommend", fp8, "--max-rel-err", "0.001", "--json"])["picks"]
    assert all(p["pick"] is None for p in tight)
    assert cli.main(["recommend", fp8, "--max-rel-err", "0.01"]) == 0
    assert "bf16 (the baseline: no other recipe within budget)" in capsys.readouterr().out
