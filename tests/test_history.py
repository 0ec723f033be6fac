"""suite.analysis.history and `python -m suite history`: speedups over runs, change points."""

from __future__ import annotations

import math
from datetime import datetime, timedelta, timezone

import numpy as np
import pytest

from suite import cli
from suite.analysis import history
from suite.results import store
from suite.core.errors import UserError
from tests.recorded_runs import shared


def test_segment_finds_a_step_where_it_is():
    y = np.log([2.0] * 5 + [1.6] * 5)  # the speedup fell by 20% from the sixth run on
    found = history.segment(y, np.full(10, 0.02**2), min_effect=0.05, confidence=0.99)
    assert [k for k, _ in found] == [5]


def test_segment_finds_two_steps_and_ignores_noise():
    r = np.random.default_rng(0)
    y = np.log([2.0] * 6 + [1.5] * 6 + [2.2] * 6) + r.normal(0, 0.02, 18)
    assert [k for k, _ in history.segment(y, np.full(18, 0.02**2), 0.05, 0.99)] == [6, 12]
    flat = r.normal(0, 0.02, 18)  # noise exactly as large as the variance says: no change point
    assert history.segment(flat, np.full(18, 0.02**2), 0.05, 0.99) == []


def test_segment_respects_the_minimum_effect():
    y = np.log([2.0] * 8 + [1.96] * 8)  # a real but 2% change, measured very precisely
    assert history.segment(y, np.full(16, 1e-6), min_effect=0.05, confidence=0.99) == []
    assert [k for k, _ in history.segment(y, np.full(16, 1e-6), min_effect=0.01, confidence=0.99)] == [8]


def test_threshold_grows_with_the_splits_tried():
    assert history.split_threshold(1, 0.99) == pytest.approx(2.5758, abs=1e-3)  # two-sided 99%
    assert history.split_threshold(20, 0.99) > history.split_threshold(5, 0.99)


@pytest.fixture(scope="module")
def store_with_a_step(tmp_path_factory):
    """Six runs built from one real run: the last three have one case slowed by 1.3x."""
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
            if rec.get("samples_ms") is not None:
                factor = 1.3 if (i >= 3 and rec["case_id"] == target) else 1.0
                rec["samples_ms"] = [float(x) * factor for x in rec["samples_ms"]]
                rec["time_ms_median"] = float(rec["time_ms_median"]) * factor
            records.append(rec)
        store.write_run(records, store.run_path(results, "cmp", run_id))
    return results, target


def test_history_marks_the_change_point_of_the_slowed_case_only(store_with_a_step):
    results, target = store_with_a_step
    h = history.build("cmp", results)
    assert len(h.runs) == 6 and len(h.series) == 10
    points = h.change_points()
    assert [(s.case_id, cp.index) for s, cp in points] == [(target, 3)]
    cp = points[0][1]
    assert cp.ratio == pytest.approx(1 / 1.3, rel=1e-9)
    series = next(s for s in h.series if s.case_id == target)
    assert series.run_index == list(range(6))
    assert all(lo <= v <= hi for v, lo, hi in zip(series.speedup, series.low, series.high))
    # only the newest three runs: the level is flat there
    assert history.build("cmp", results, last=3).change_points() == []


def test_history_command_writes_a_report(store_with_a_step, tmp_path, capsys):
    results, _ = store_with_a_step
    out = tmp_path / "h"
    assert cli.main(["history", "cmp", "--results", str(results), "--out", str(out)]) == 0
    assert "1 change point(s)" in capsys.readouterr().out
    assert {"history_gemm_bf16.png", "history_gemm_fp16.png", "report.md", "index.html"} <= {p.name for p in out.iterdir()}
    md = (out / "report.md").read_text()
    assert "## Change points" in md and "-23.1%" in md  # 1/1.3 - 1


def test_history_needs_runs(tmp_path, store_with_a_step):
    with pytest.raises(UserError, match="does not exist"):
        history.build("nope", tmp_path)
    results, _ = store_with_a_step
    with pytest.raises(UserError, match="at least 2 runs"):
        history.build("cmp", results, last=1)
