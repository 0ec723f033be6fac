"""What a run shows while it goes (`suite.measure.progress`): a line per case, heartbeats during a
long case, and an estimate of the time left weighted by each case's predicted cost."""

from __future__ import annotations

import io

import pytest

from suite.measure import progress as shown
from suite.scenario import plan
from tests.conftest import run_cases

META = {"run_id": "r1", "device": "cpu", "device_name": "test cpu"}


def test_progress_lines(tiny_scenario):
    out = io.StringIO()
    run_cases(plan.expand(tiny_scenario), META, shown.Progress(8, out))
    lines = out.getvalue().splitlines()
    assert len(lines) == 8
    assert lines[0].startswith("[1/8] gemm fp32 32x32x32 ... ok")
    assert "elapsed" in lines[-1] and "left" in lines[-1]
    assert "skipped: TF32" in lines[1]


def test_the_estimate_weighs_cases_by_their_work(tiny_scenario):
    cases = plan.expand(tiny_scenario)
    model = shown.CostModel("cpu")
    small, big = (c for c in cases if c.precision == "bf16")
    model.learn(small, {"status": "ok", "time_ms_median": 10.0}, 0.5)
    # bf16 64^3 is 8x the work of 32^3: its call is predicted 8x as long
    assert model.call_s(big) == pytest.approx(8 * 0.010)
    fp16 = next(c for c in cases if c.precision == "fp16")
    assert model.call_s(fp16) == pytest.approx(0.010)  # an unseen precision: the slowest speed seen
    slow = shown.CostModel("cpu")
    slow.learn(small, {"status": "ok", "time_ms_median": 30_000.0}, 30.0)
    # never more than the cap plus one call, however slow
    assert slow.wall_s(big) == pytest.approx(big.timing.case_cap("cpu") + 8 * 30.0)


def test_a_long_case_gets_heartbeat_lines(tiny_scenario):
    out = io.StringIO()
    progress = shown.Progress(8, out)
    case = plan.expand(tiny_scenario)[0]
    progress.plan([case])
    progress.begin(case)
    for t in (1.0, 4.9, 5.0, 6.0, 15.1):
        progress.heartbeat(t)
    lines = out.getvalue().splitlines()
    assert sum("still running after 0:05" in line for line in lines) == 1
    assert sum("still running after 0:15" in line for line in lines) == 1
    assert len([line for line in lines if "still running" in line]) == 2
