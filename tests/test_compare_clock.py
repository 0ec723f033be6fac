"""compare on a GPU whose SM clock differs between the sides: the time change in clock-normalised
time (cycles = time x clock), its verdict beside the time's, and nothing new where clocks are equal
or missing (issue #38)."""

from __future__ import annotations

import math
import re

import numpy as np
import pandas as pd
import pytest

from suite.analysis.regression import compare, envdiff, stats
from suite.core.errors import UserError
from suite.report import compare_page
from suite.results import store
from tests.json_docs import cli_json, schema
from tests.test_compare import CPU_RUN, write

CLOCK = 1980.0  # MHz: an H100's boost clock
SLOWER = 1.08


def gpu_runs(first: int, slow: float, clock: float | None, seed: int) -> pd.DataFrame:
    """Three runs built from a real `cpu` run as if on one H100: every measured case's samples x
    `slow`, 1% noise on each sample, a 0.5% level shared by each run; its SM clock `clock` (MHz, 0.2%
    from run to run; None: not recorded, as on a CPU or in an older record)."""
    real = store.read_file(CPU_RUN)
    rng = np.random.default_rng(seed)
    ok = (real["status"] == "ok").to_numpy()
    runs = []
    for i in range(3):
        df = real.assign(run_id=f"2026010{first + i}T000000Z-{seed:03d}{i:03d}", device="cuda",
                         device_name="NVIDIA H100 80GB HBM3")
        level, jitter = slow * math.exp(0.005 * rng.standard_normal()), 1 + 0.002 * rng.standard_normal()
        df["samples_ms"] = [m * level * np.exp(0.01 * rng.standard_normal(len(s))) if o else None
                            for s, m, o in zip(df["samples_ms"], df["time_ms_median"], ok)]
        df["time_ms_median"] = [float(np.median(s)) if s is not None else math.nan for s in df["samples_ms"]]
        df["sm_clock_mhz_mean"] = np.where(ok, clock * jitter, np.nan) if clock else np.nan
        runs.append(df)
    return pd.concat(runs, ignore_index=True)


def compared(cand_clock: float | None, base_clock: float | None = CLOCK) -> compare.Comparison:
    """The baseline at `base_clock`, the candidate 8% slower in time at `cand_clock`."""
    base, cand = gpu_runs(1, 1.0, base_clock, 1), gpu_runs(4, SLOWER, cand_clock, 2)
    return compare.compare(compare.Side("baseline", "b", base), compare.Side("candidate", "c", cand))


def timed(result: compare.Comparison) -> pd.DataFrame:
    cases = result.cases[result.cases["time_verdict"] != ""]
    assert len(cases) == 18  # every measured case of the run: 6 fp32, 6 bf16, 6 fp16
    return cases


def pages(result: compare.Comparison) -> tuple[str, str, str]:
    view = compare_page.build_view(result)
    return compare_page.markdown(view), compare_page.html(view), compare_page.text_summary(result, result.failing())


def test_a_slowdown_the_clock_explains_is_unchanged_in_cycles_and_said_so():
    """(a) 8% slower in time at an 8% lower clock: time regressed, cycles unchanged, and the sentence
    names the clock; the gate still fails on time:regressed (the cycles verdict informs)."""
    result = compared(CLOCK / SLOWER)
    cases = timed(result)
    assert (cases["time_verdict"] == stats.REGRESSED).all() and (cases["cycles_verdict"] == stats.UNCHANGED).all()
    assert cases["cycles_ratio"].to_numpy(float) == pytest.approx(1.0, abs=0.02)
    assert (cases["cycles_ratio_low"] < 1).all() and (cases["cycles_ratio_high"] > 1).all()
    assert cases["cand_sm_clock_mhz"].to_numpy(float) == pytest.approx(CLOCK / SLOWER, rel=0.01)
    for detail in cases["detail"]:
        assert re.search(r"slower by \d\.\d% in time but unchanged in clock-normalised time "
                         r"\(SM clock 19\d\d -> 18\d\d MHz\): the change is the clock$", detail), detail
    assert set(result.failing()["case_id"]) == set(cases["case_id"])  # time:regressed fails the gate, as before
    md, html, text = pages(result)
    assert "| cycles verdict |" in md and "SM clock MHz base / cand" in md and "clock-normalised time (cycles" in md
    assert "<th>cycles verdict</th>" in html and "the change is the clock" in html
    assert re.search(r"^  n/a, time regressed, cycles unchanged +gemm fp32", text, re.M)
    assert "cycles: run-to-run sd" in md  # the cycles test's own spread, beside the others'
    assert "18 case(s) ran at SM clocks more than 1% apart; in clock-normalised time (cycles): 18 unchanged." in md


def test_equal_clocks_change_nothing():
    """(b) 8% slower at equal clocks: no cycles column filled, and every page reads exactly as where
    no clock was recorded."""
    result = compared(CLOCK)
    cases = timed(result)
    assert (cases["cycles_verdict"] == "").all() and cases["cycles_ratio"].isna().all()
    assert cases["base_sm_clock_mhz"].notna().all() and cases["cand_sm_clock_mhz"].notna().all()  # the facts stay
    assert not cases["detail"].str.contains("clock").any()
    assert pages(result) == pages(compared(None, None))


def test_a_slowdown_at_a_higher_clock_is_larger_in_cycles():
    """(c) 8% slower in time at an 8% higher clock: the cycles verdict is regressed too, by about
    8% more; the two agree, so no sentence."""
    cases = timed(compared(CLOCK * SLOWER))
    assert (cases["time_verdict"] == stats.REGRESSED).all() and (cases["cycles_verdict"] == stats.REGRESSED).all()
    ratio = cases["cycles_ratio"] / cases["time_ratio"]
    assert ratio.to_numpy(float) == pytest.approx(SLOWER, rel=0.01)
    assert (cases["cycles_ratio_low"] > cases["time_ratio_high"]).all()
    assert not cases["detail"].str.contains("clock-normalised").any()


def test_a_side_without_clocks_gets_no_cycles():
    """(d) the candidate recorded no clock: no cycles, and the pages are those without clocks."""
    result = compared(None)
    cases = timed(result)
    assert (cases["cycles_verdict"] == "").all() and cases["cycles_ratio"].isna().all()
    assert cases["cand_sm_clock_mhz"].isna().all() and cases["base_sm_clock_mhz"].notna().all()
    assert pages(result) == pages(compared(None, None))


def test_a_clock_in_some_runs_only_is_no_clock():
    """A side whose runs did not all record a clock has none: its cycles would mix scaled and unscaled times."""
    base, cand = gpu_runs(1, 1.0, CLOCK, 1), gpu_runs(4, SLOWER, CLOCK / SLOWER, 2)
    cand.loc[cand["run_id"] == cand["run_id"].iloc[0], "sm_clock_mhz_mean"] = np.nan
    cases = timed(compare.compare(compare.Side("baseline", "b", base), compare.Side("candidate", "c", cand)))
    assert cases["cand_sm_clock_mhz"].isna().all() and (cases["cycles_verdict"] == "").all()


def test_a_mean_sm_clock_that_differs_is_what_differs_between_the_sides():
    """The measured clock is a fact that explains a moved time: each case whose sides' mean SM clocks
    differ beyond the tolerance names it in its explanation, and the pages' "what differs" counts
    them; within the tolerance, or where one side has none, nothing is said (the tests above)."""
    result = compared(CLOCK / SLOWER)
    assert result.environment.summary() == ["mean SM clock (MHz) changed in 18 case(s)"]
    explained = timed(result).query("verdict == 'n/a'")["explanation"]  # fp32's: its time regressed
    assert len(explained) == 6
    for explanation in explained:
        assert len(explanation) == 1 and re.fullmatch(r"mean SM clock \(MHz\) changed: 19\d\d -> 18\d\d",
                                                      explanation[0]), explanation
    md, html, text = pages(result)
    assert "What differs between the sides' runs: mean SM clock (MHz) changed in 18 case(s)." in md
    assert "what differs: mean SM clock (MHz) changed in 18 case(s)" in text
    assert compared(CLOCK * 1.005).environment.summary() == []


def test_the_terminal_keeps_its_columns_whatever_the_tags_and_says_a_clock_once():
    """A cycles verdict makes tags longer than the verdict column's 28 characters ("unchanged, time
    regressed, cycles unchanged"): the column widens for every line, and so do the case's name and change."""
    text = pages(compared(CLOCK / SLOWER))[2]
    listed = [line for line in text.splitlines() if line.startswith("  ")]
    assert len(listed) == 18 and any(line.startswith("  unchanged, time regressed, cycles unchanged ") for line in listed)
    assert len({line.index(" gemm ") for line in listed}) == 1  # the names start in one column
    assert len({line.index("%]  ") for line in listed}) == 1  # the changes end in one
    assert all(line.count("SM clock") == 1 for line in listed)  # the detail's clocks, not the difference's again
    higher = [line for line in pages(compared(CLOCK * SLOWER))[2].splitlines() if line.startswith("  ")]
    assert all(re.search(r"; mean SM clock \(MHz\) changed: 19\d\d -> 2\d\d\d$", line) for line in higher)  # no sentence


def test_clocks_differ_beyond_the_tolerance_only():
    assert not envdiff.clocks_differ(CLOCK, CLOCK * 1.009) and envdiff.clocks_differ(CLOCK, CLOCK * 1.011)
    assert envdiff.clocks_differ(CLOCK, CLOCK / 1.011)
    for other in (math.nan, 0.0, -CLOCK, math.inf):
        assert not envdiff.clocks_differ(CLOCK, other) and not envdiff.clocks_differ(other, CLOCK)
    assert envdiff.clocks_differ(1e308, 5e-324)  # a ratio that underflows is still a difference, not an error


def test_cycles_out_of_floats_range_are_left_out():
    """A clock that is a positive number yet puts time x clock beyond float's range (a record
    written by hand: 5e-324 MHz, the least float, times a case's 0.2 ms is 0) gives that case no
    cycles, never an error."""
    base, cand = gpu_runs(1, 1.0, CLOCK, 1), gpu_runs(4, SLOWER, 5e-324, 2)
    cases = timed(compare.compare(compare.Side("baseline", "b", base), compare.Side("candidate", "c", cand)))
    assert (cases["time_verdict"] == stats.REGRESSED).all()
    underflows = cases["cand_time_ms"] < 0.5
    assert underflows.any() and (cases.loc[underflows, "cycles_verdict"] == "").all()


def test_a_change_the_clock_hides_is_named():
    row = {"time_verdict": stats.UNCHANGED, "time_ratio": 1.01, "cycles_verdict": stats.REGRESSED,
           "cycles_ratio": 1.0908, "base_sm_clock_mhz": 1830.2, "cand_sm_clock_mhz": 1980.0}
    assert compare.clock_sentence(row) == ("unchanged in time but slower by 9.1% in clock-normalised time "
                                           "(SM clock 1830 -> 1980 MHz): the clock change hides it")
    row.update(time_verdict=stats.IMPROVED, time_ratio=0.9, cycles_verdict=stats.NOISY)
    assert compare.clock_sentence(row) == ("faster by 10.0% in time but noisy in clock-normalised time "
                                           "(SM clock 1830 -> 1980 MHz)")


def test_the_json_carries_the_clocks_and_the_cycles_verdict(tmp_path, capsys, quick_png):
    base, cand = gpu_runs(1, 1.0, CLOCK, 1), gpu_runs(4, SLOWER, CLOCK / SLOWER, 2)
    for df, folder in ((base, "b"), (cand, "c")):
        for _, run in df.groupby("run_id"):
            write(run, tmp_path / folder)
    selectors = [f"{tmp_path / folder}/cpu,runs=all" for folder in ("b", "c")]
    doc = cli_json(capsys, ["compare", *selectors, "--out", str(tmp_path / "out"), "--json"], status=1)
    measured = [c for c in doc["cases"] if c["time_verdict"]]
    assert len(measured) == 18 and {c["cycles_verdict"] for c in measured} == {stats.UNCHANGED}
    assert all(c["base_sm_clock_mhz"] == pytest.approx(CLOCK, rel=0.01)
               and c["cycles_ratio_low"] < 1 < c["cycles_ratio_high"] for c in measured)
    assert all(c["cycles_verdict"] == "" and c["cycles_ratio"] is None for c in doc["cases"] if not c["time_verdict"])
    columns = schema("compare")["properties"]["cases"]["items"]["properties"]
    assert set(columns["cycles_verdict"]["enum"]) == {*compare.DECIDED, compare.INSUFFICIENT_RUNS, "", None}
    assert (tmp_path / "out" / "cycles_change.svg").is_file()


def test_the_gate_has_no_cycles_prefix():
    with pytest.raises(UserError, match="informs and never gates.*time:regressed instead"):
        compare.parse_fail_on("regressed,cycles:regressed")
