"""`history --fail-on` (`suite.analysis.regression.history_gate`): a nightly's gate fails on what the newest run
brought, once, never again on a change point an earlier night reported; and a history keeps each
device model's runs apart, so a CI runner that changed CPU between nights is no change point."""

from __future__ import annotations

import json
import shutil
from datetime import timedelta

import pytest

from suite import cli
from suite.analysis.regression import history, history_gate
from suite.core.errors import UserError
from suite.results import store
from tests.test_history import store_with_a_step  # noqa: F401  (a fixture: six runs, a step at the fourth)
from tests.json_docs import validated

GATE = ",".join(history_gate.NIGHTLY)
# What these tests assert is decided and written in this process; the plots' pixels are not
# among it (tests/conftest.py quick_png).
pytestmark = pytest.mark.usefixtures("quick_png")


def copy_runs(results, tmp_path, keep: int):
    """The oldest `keep` runs of `results` in a folder of their own."""
    out = tmp_path / "results"
    (out / "cmp").mkdir(parents=True)
    for path in sorted((results / "cmp").glob("*.parquet"))[:keep]:
        shutil.copy2(path, out / "cmp" / path.name)
    return out


def add_night(results, change=lambda record: record):
    """A new run: a copy of the newest, a day later, each record passed through `change`."""
    newest = sorted((results / "cmp").glob("*.parquet"))[-1]
    df = store.read_file(newest)
    when = df["started_at"].iloc[0].to_pydatetime() + timedelta(days=1)
    run_id = store.new_run_id(when)
    records = [change({**r, "run_id": run_id, "started_at": when}) for r in store.records_of(df)]
    store.write_run(records, store.run_path(results, "cmp", run_id))
    return run_id


def run_gate(results, capsys, *extra) -> tuple[int, dict]:
    code = cli.main(["history", "cmp", "--results", str(results), "--out", str(results.parent / "page"), "--json",
                     "--quiet", "--fail-on", GATE, *extra])
    return code, validated(json.loads(capsys.readouterr().out), "history")["gate"]


def test_a_step_fails_the_night_it_is_found_and_never_again(store_with_a_step, tmp_path, capsys):  # noqa: F811
    results, target = store_with_a_step
    five = copy_runs(results, tmp_path, 5)  # the step at the fourth run: two runs after it, not yet found
    code, doc = run_gate(five, capsys)
    assert code == 0 and doc["failing"] == [] and doc["passes"]
    add_night(five)  # the sixth run: three after the step, so history finds it tonight
    code, doc = run_gate(five, capsys)
    assert code == 1 and {(f["case_id"], f["verdict"]) for f in doc["failing"]} == {
        (target, "regressed"), (target, "time:regressed")}
    assert "against the history of the 5 runs before them" in doc["earlier"]
    add_night(five)  # the seventh run, the same level: the step is old news
    code, doc = run_gate(five, capsys)
    assert code == 0 and doc["failing"] == []
    assert cli.main(["history", "cmp", "--results", str(five), "--out", str(tmp_path / "p"), "--quiet"]) == 0  # no gate


def test_a_case_that_stops_working_fails_once(store_with_a_step, tmp_path, capsys):  # noqa: F811
    results, _ = store_with_a_step
    copy = copy_runs(results, tmp_path, 6)
    broken = next(r for r in store.records_of(store.read_file(sorted((copy / "cmp").glob("*.parquet"))[-1]))
                  if r["precision"] == "fp16" and r["status"] == "ok")["case_id"]

    def fail(record):
        if record["case_id"] == broken:
            record.update(status="failed", reason="RuntimeError: the nightly broke fp16")
        return record

    add_night(copy, fail)
    code, doc = run_gate(copy, capsys)
    assert code == 1
    (found,) = [f for f in doc["failing"] if f["verdict"] == "new-failure"]
    assert found["case_id"] == broken and "the nightly broke fp16" in found["text"]
    add_night(copy, fail)  # failing again the next night: not new
    assert run_gate(copy, capsys)[1]["failing"] == []


def test_the_terminal_says_what_fails_and_bad_options_are_one_line_errors(store_with_a_step, tmp_path, capsys):  # noqa: F811
    results, _ = store_with_a_step
    six = copy_runs(results, tmp_path, 6)
    assert cli.main(["history", "cmp", "--results", str(six), "--out", str(tmp_path / "p"), "--fail-on", GATE]) == 1
    captured = capsys.readouterr()
    assert f"gate --fail-on {GATE}: 2 new finding(s) in the newest 1 run(s)" in captured.out
    assert "  regressed: gemm bf16 " in captured.out and "2 new finding(s) fail the gate" in captured.err
    assert cli.main(["history", "cmp", "--results", str(six), "--fail-on", "slower"]) == 2
    assert "history's gate knows regressed" in capsys.readouterr().err
    with pytest.raises(UserError, match="--new-runs 6"):
        history_gate.check(history.load("cmp", six), history.build("cmp", six), "cmp", ("regressed",), new_runs=6)


def test_a_new_device_model_starts_series_of_its_own(store_with_a_step, tmp_path):  # noqa: F811
    """Three nights on one CPU, three on another (a hosted runner's CPU changes): the speedup and time
    series are split by device model, and no change point is drawn across the change."""
    results, _ = store_with_a_step
    df = history.load("cmp", results)
    late = df["run_id"].isin(sorted(df["run_id"].unique())[3:])
    df["device_name"] = df["device_name"].astype(str)  # (a lean read's categorical takes no new name)
    df.loc[late, "device_name"] = "AMD EPYC 7763 64-Core Processor"
    h = history.analyse(df, "cmp")
    assert h.change_points() == []
    devices = {s.device for s in h.series}
    assert len(devices) == 2 and all(len(s.values) == 3 for s in h.series)
