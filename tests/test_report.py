"""Reports render from records alone, escape what they show, and never show emulation as speed."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from suite.analysis.frame import derived
from suite.analysis.outcome import energy, summary
from suite import report


def record(precision, m, time_ms, **extra):
    base = {
        "run_id": "20260101T000000Z-aaaaaa", "scenario": "s", "workload": "gemm", "precision": precision,
        "baseline": "fp32", "status": "ok", "reason": None, "m": m, "k": m, "n": m, "params": "{}",
        "case_id": f"{precision}-{m}", "baseline_case_id": f"fp32-{m}", "time_ms_median": time_ms,
        "tflops": 2 * m**3 / (time_ms * 1e-3) / 1e12 if time_ms else None, "peak_tflops": None, "rel_err": 1e-3,
        "sqnr_db": 60.0, "rel_ci": 0.01, "device_name": "test", "torch_version": "2.13.0",
    }
    return {**base, **extra}


@pytest.fixture
def records():
    return pd.DataFrame([
        record("fp32", 64, 4.0), record("bf16", 64, 1.0), record("fp32", 128, 8.0), record("bf16", 128, 2.0),
        record("fp8_tensorwise", 64, 0.5, emulated=True),
        record("tf32", 64, None, status="skipped", reason="TF32 is a CUDA tensor-core mode; device is cpu",
               tflops=None, rel_err=None),
    ])


def test_speedups_come_from_the_baseline_case(records):
    df = derived.with_speedups(records)
    bf16 = df[df["precision"] == "bf16"].set_index("m")["speedup"]
    assert bf16[64] == pytest.approx(4.0) and bf16[128] == pytest.approx(4.0)
    assert math.isnan(df[df["precision"] == "tf32"]["speedup"].iloc[0])


def test_in_a_run_over_two_kinds_of_card_a_speedup_is_over_the_baseline_on_the_same_card():
    # one run on a mixed fleet: each case once per card, the H200 twice as fast at fp32
    df = pd.DataFrame([record("fp32", 64, 4.0, device_name="H100"), record("bf16", 64, 1.0, device_name="H100"),
                       record("fp32", 64, 2.0, device_name="H200"), record("bf16", 64, 1.0, device_name="H200"),
                       record("bf16", 128, 1.0, device_name="H200")])
    speedup = derived.with_speedups(df).set_index(["device_name", "m", "precision"])["speedup"]
    assert speedup["H100", 64, "bf16"] == pytest.approx(4.0) and speedup["H200", 64, "bf16"] == pytest.approx(2.0)
    assert math.isnan(speedup["H200", 128, "bf16"])  # its baseline ran on no H200: no speedup, not another card's


def test_render_writes_html_markdown_and_plots(records, tmp_path):
    written = report.render(records, tmp_path)
    names = {p.name for p in written}
    # fp8_tensorwise is emulated: its accuracy has a chart of its own beside the speed plots
    assert {"index.html", "report.md", "throughput_gemm.svg", "speedup_gemm.svg", "tradeoff_gemm.svg",
            "accuracy_gemm.svg"} <= names
    for p in written:
        assert p.stat().st_size > 0
    md = (tmp_path / "report.md").read_text()
    assert "| gemm | bf16 |" in md and "4x" in md
    assert "TF32 is a CUDA tensor-core mode" in md


def test_emulated_timings_are_not_shown_as_speed(records, tmp_path, quick_png):
    report.render(records, tmp_path)
    md = (tmp_path / "report.md").read_text()
    row = next(line for line in md.splitlines() if "| 64x64x64 | fp8_tensorwise |" in line)
    assert "emulated" in row
    assert "8x" not in row  # 4.0 ms / 0.5 ms would be an 8x "speedup": never shown
    summary = derived.summary(records)
    assert math.isnan(summary.set_index("precision").loc["fp8_tensorwise", "best_tflops"])


def test_a_paired_speedup_is_the_speedup_with_its_interval_and_the_ratio_of_medians_beside_it(records, tmp_path,
                                                                                             quick_png):
    view = report.build_view(records)
    assert "medians" not in dict(view["case_columns"])  # no case was timed in paired rounds: no column
    assert dict(view["case_columns"])["speedup"] == "speedup"
    records["speedup_paired"] = [None, 3.9, None, 4.2, None, None]
    records["speedup_paired_low"] = [None, 3.7, None, None, None, None]
    records["speedup_paired_high"] = [None, 4.1, None, None, None, None]
    view = report.build_view(records)
    keys = [key for key, _ in view["case_columns"]]
    assert keys[keys.index("speedup") + 1] == "medians"
    assert dict(view["case_columns"])["speedup"] == "speedup, paired rounds (95%)"
    # paired cases read their paired speedup (with the rounds' interval where known), the others
    # the ratio of medians; the ratio of medians stands beside each
    assert [row["speedup"] for row in view["cases"][:4]] == ["1x", "3.9x (3.7-4.1)", "1x", "4.2x"]
    assert [row["medians"] for row in view["cases"][:4]] == ["1x", "4x", "1x", "4x"]
    report.render(records, tmp_path)
    row = next(line for line in (tmp_path / "report.md").read_text().splitlines() if "| 64x64x64 | bf16 |" in line)
    assert "| 3.9x (3.7-4.1) | 4x |" in row
    # the headline answers at the largest shape, 128^3: its paired speedup
    assert any(line.startswith("gemm at 128") and "bf16 is 4.2x faster" in line for line in summary.headline(records))


def test_an_interval_below_its_columns_95_percent_shows_its_level(records):
    """Issue #38: a paired interval from 5 rounds or fewer is their range, and a rel_ci from 3 to 5
    batches is at their range's level: the cell says the level; a run from before the fix, whose
    rel_ci was McGill's notch (no rel_ci_level), says what that covers at most."""
    records["speedup_paired"] = [None, 3.9, None, 4.2, None, None]
    records["speedup_paired_low"] = [None, 3.7, None, 4.0, None, None]
    records["speedup_paired_high"] = [None, 4.1, None, 4.4, None, None]
    records["speedup_paired_level"] = [None, 0.75, None, 0.96, None, None]
    records["rel_ci_level"] = [0.75, 0.9572, 0.9375, None, 0.96, None]
    rows = report.build_view(records)["cases"][:5]
    assert [row["speedup"] for row in rows[:4]] == ["1x", "3.9x (3.7-4.1, 75%)", "1x", "4.2x (4-4.4)"]
    assert [row["spread"] for row in rows] == ["1.0% (75%)", "1.0%", "1.0% (93.8%)", "1.0% (≤91%)", "1.0%"]
    assert dict(report.build_view(records)["case_columns"])["spread"] == "±95% CI"
    old = report.build_view(records.drop(columns="rel_ci_level"))  # runs before issue #38 only: the title says it
    assert dict(old["case_columns"])["spread"] == report.OLD_SPREAD and old["cases"][3]["spread"] == "1.0%"


def test_html_escapes_record_strings(records, tmp_path):
    records.loc[5, "reason"] = "<script>alert(1)</script>"
    records["scenario"] = "<b>s</b>"
    report.render(records, tmp_path)
    html = (tmp_path / "index.html").read_text()
    assert "<script>alert(1)</script>" not in html and "&lt;script&gt;" in html
    assert "<b>s</b>" not in html


def test_record_text_is_drawn_literally_never_as_mathtext_or_tex(records, tmp_path, monkeypatch):
    import matplotlib

    # a notebook's style may ask for TeX and mathtext: record text still never reaches either
    monkeypatch.setitem(matplotlib.rcParams, "text.usetex", True)
    monkeypatch.setitem(matplotlib.rcParams, "text.parse_math", True)
    records["precision"] = records["precision"].replace({"bf16": r"$\nosuch$", "fp8_tensorwise": r"$\frac{a$"})
    written = {p.name: p for p in report.render(records, tmp_path)}
    # every plot's legend holds the names as written
    for name in ("speedup_gemm.svg", "throughput_gemm.svg", "tradeoff_gemm.svg", "accuracy_gemm.svg"):
        assert ">$\\nosuch$</text>" in written[name].read_text(), name
    assert ">$\\frac{a$ (numerics only)</text>" in written["accuracy_gemm.svg"].read_text()


def test_markdown_escapes_table_pipes(records, tmp_path, quick_png):
    records.loc[5, "reason"] = "a | b"
    report.render(records, tmp_path)
    assert "a \\| b" in (tmp_path / "report.md").read_text()


def test_report_of_only_skipped_cases_still_renders(records, tmp_path):
    skipped = records[records["status"] == "skipped"]
    written = report.render(skipped, tmp_path)
    assert {p.name for p in written} == {"index.html", "report.md"}
    assert "TF32" in (tmp_path / "report.md").read_text()


# --- the first lines say what is unusual: slow paths and their cause, partial runs, caps, stalls


def cpu_run(flags, isa="AVX2", isa_env=None):
    """fp32 against bf16 on a CPU, bf16 60x slower, with the CPU facts a run records."""
    cpu = {"device": "cpu", "cpu_flags": flags, "cpu_isa": isa, "cpu_isa_env": isa_env}
    return pd.DataFrame([
        record("fp32", 256, 0.2, **cpu), record("bf16", 256, 12.0, **cpu),
        record("fp32", 512, 1.6, **cpu), record("bf16", 512, 96.0, **cpu),
    ])


def test_the_answer_comes_first_then_the_crossover_then_the_slow_path_and_its_cause(tmp_path, quick_png):
    df = cpu_run("avx2 avx512f")
    answer, crossing, slow = summary.headline(df)[:3]
    assert answer == "gemm at 512x512x512: fp32 (the baseline) is fastest; bf16 is 60x slower than fp32 (rel. error 1.0e-03)."
    # no clock recorded: no CPU peak, so no prediction beside the measured crossover
    assert crossing == "bf16 (gemm) does not pay up to M=K=N = 512 on this test (no model for this device)."
    assert slow.startswith("bf16 is 60x slower than fp32 here (geomean of 2 cases)")
    assert "no native bf16 matmul (no AVX512-BF16/AMX; torch dispatches to AVX2)" in slow
    report.render(df, tmp_path)
    md = (tmp_path / "report.md").read_text().splitlines()
    assert md[0] == "# mpsuite report: s" and "fp32 (the baseline) is fastest" in md[2]
    assert "bf16 is 60x slower than fp32 here" in md[4]
    html = (tmp_path / "index.html").read_text()
    assert html.index("bf16 is 60x slower") < html.index("<h2>Summary</h2>")


def test_a_cpu_with_amx_but_a_lowered_isa_names_the_variables():
    first = summary.headline(cpu_run("avx2 avx512f amx_tile amx_bf16", "AVX2", "ONEDNN_MAX_CPU_ISA=AVX2"))[2]
    assert "the CPU has amx_bf16 but torch dispatches to AVX2 (ONEDNN_MAX_CPU_ISA=AVX2)" in first


def test_a_recipe_slower_than_a_baseline_of_its_own_format_is_not_blamed_on_the_cpu():
    # an update-side recipe against bf16 on a CPU with AMX: the same GEMMs, a costlier optimizer step
    cpu = {"device": "cpu", "cpu_flags": "avx2 amx_bf16 avx512_bf16", "cpu_isa": "AVX512_BF16", "baseline": "bf16"}
    df = pd.DataFrame([record("bf16", 256, 1.0, case_id="b", baseline_case_id="b", **cpu),
                       record("bf16_adamw8bit", 256, 5.0, baseline_case_id="b", **cpu)])
    slow = next(line for line in summary.headline(df) if "slower than bf16 here" in line)
    assert "its GEMMs run in bf16 as bf16's do" in slow and "native" not in slow


def test_recipes_slow_for_one_reason_share_one_line():
    cpu = {"device": "cpu", "cpu_flags": "avx2 amx_bf16 avx512_bf16", "cpu_isa": "AVX512_BF16", "baseline": "bf16"}
    df = pd.DataFrame([record("bf16", 256, 1.0, case_id="b", baseline_case_id="b", **cpu),
                       record("bf16_adamw8bit", 256, 5.0, baseline_case_id="b", **cpu),
                       record("bf16_pure_sr", 256, 2.0, baseline_case_id="b", **cpu)])
    slow = [line for line in summary.headline(df) if "slower than bf16 here" in line]
    assert slow == ["2 recipes are slower than bf16 here: bf16_adamw8bit 5x (one case); bf16_pure_sr 2x (one case). "
                    "For each, its GEMMs run in bf16 as bf16's do, so the CPU's bf16 support does not explain it: "
                    "the rest of its step (its optimizer, say) costs more."]


def test_no_slow_path_no_line(records):
    assert not any("slower" in line for line in summary.headline(records))  # bf16 4x faster there


def test_capped_cases_and_stalls_are_counted():
    df = cpu_run("avx2")
    df["stop_reason"] = ["budget", "cap", "budget", "cap"]
    df["n_samples"] = [50, 1, 50, 2]
    steady, stalled = [1.0] * 20, [1.0] * 18 + [5.0, 6.0]
    df["samples_ms"] = [steady, [12.0], stalled, [96.0, 96.0]]
    df["time_ms_median"] = [1.0, 12.0, 1.0, 96.0]
    lines = summary.headline(df)
    assert any(line.startswith("2 case(s) stopped at the whole-case cap") and "as few as 1" in line for line in lines)
    assert any(line.startswith("1 case(s) show stalls") for line in lines)
    rows = report.build_view(df)["cases"]
    assert rows[1]["stop"] == "cap (1 sample)" and rows[3]["stop"] == "cap (2 samples)"
    assert "stalls: 10% of samples over 2x the median" in rows[2]["status"]


def test_stall_shares_count_each_records_own_samples_beside_empty_and_missing_lists():
    # the samples of every record lie in one array: a record with none (an empty list, a null)
    # between two others, or last, takes none of theirs
    lists = [[1.0, 3.0, 1.0, 1.0, 1.0], None, [], [5.0, 1.0, 1.0, 1.0, 1.0, 9.0], [1.0, 1.0, 1.0, 1.0, 2.5], []]
    df = pd.DataFrame({"status": ["ok"] * 6, "time_ms_median": [1.0, 1.0, 1.0, 2.0, 1.0, 1.0], "samples_ms": lists})
    shares = derived.stalls(df).tolist()
    assert shares[0] == pytest.approx(0.2) and shares[3] == pytest.approx(2 / 6) and shares[4] == pytest.approx(0.2)
    assert all(math.isnan(shares[i]) for i in (1, 2, 5))
    assert derived.stalls(df.iloc[[1, 2, 5]]).isna().all()


def test_settings_timed_one_case_after_another_are_counted_with_why():
    df = cpu_run("avx2")
    note = "one bf16 call takes 60x one fp32 call (more than 100x: a slow path)"
    df["pairing"], df["pairing_group"] = "sequential", ["a", "a", "b", "b"]
    df["pairing_note"] = note
    line = next(line for line in summary.headline(df) if "one case after another" in line)
    assert line == (f"2 setting(s) were timed one case after another, not in paired rounds, so their speedups are "
                    f"ratios of medians only; e.g. {note}.")
    df["pairing"] = "paired"
    assert not any("one case after another" in line for line in summary.headline(df))


def test_cases_timed_alone_beside_their_settings_rounds_are_counted_with_why():
    df = cpu_run("avx2")
    note = "one fp16 call takes 600x one fp32 call (more than 100x: a slow path)"
    df["pairing"], df["pairing_group"], df["pairing_note"] = "paired", ["a", "a", "b", "b"], None
    df.loc[[1, 3], ["pairing", "pairing_note"]] = ["alone", note]
    lines = summary.headline(df)
    assert not any("one case after another" in line for line in lines)  # the settings stayed paired
    line = next(line for line in lines if "timed alone" in line)
    assert line == ("2 case(s) were timed alone, their calls too slow for a round, while the rest of their settings "
                    f"stayed paired: their speedups are ratios of medians only; e.g. {note}.")


def test_a_partial_run_says_so_first(tmp_path):
    from suite.results import store

    df = cpu_run("avx2")
    records = [{k: v for k, v in r.items()} for r in df.to_dict("records")]
    run_id = store.new_run_id()
    for r in records:
        r["run_id"] = run_id
    journal = store.start_run(tmp_path, "s", run_id, {"plan": [r["case_id"] for r in records] + ["x", "y"]})
    for r in records:
        journal.append(r)
    journal.close()
    partial = store.read([tmp_path], unfinished=True)
    assert len(partial) == 4 and partial["run_partial"].all()
    first = summary.headline(partial)[0]
    assert first == (f"Partial report: run {run_id} stopped after 4 of 6 cases; "
                     f"`python -m suite run s --resume {run_id}` finishes it.")


def test_energy_per_tflop_of_each_fp8_recipe_is_set_against_its_bf16_baseline_where_measured(tmp_path, quick_png):
    bf16 = dict(baseline="bf16", baseline_case_id="bf16-8192")
    df = pd.DataFrame([
        record("bf16", 8192, 1.4, **{**bf16, "case_id": "bf16-8192"}, joules_per_tflop=0.90),
        record("fp8_rowwise", 8192, 0.75, **bf16, joules_per_tflop=0.54),
        record("fp8_tensorwise", 8192, 0.7, **bf16, joules_per_tflop=None),  # no counter reading
        record("bf16", 4096, 0.2, baseline="bf16", case_id="bf16-4096", baseline_case_id="bf16-4096"),
        record("fp8_rowwise", 4096, 0.1, baseline="bf16", baseline_case_id="bf16-4096", joules_per_tflop=0.6),
    ])
    table = energy.vs_bf16(df)
    assert list(table["precision"]) == ["fp8_rowwise", "fp8_rowwise"]  # tensorwise was not measured
    assert table["vs_bf16"].iloc[0] == pytest.approx(0.6) and math.isnan(table["bf16_j_per_tflop"].iloc[1])
    report.render(df, tmp_path)
    md = (tmp_path / "report.md").read_text()
    assert "## Energy" in md and "| 8192x8192x8192 | fp8_rowwise | 0.54 | 0.9 | 0.6x |" in md
    assert "| 4096x4096x4096 | fp8_rowwise | 0.6 |  |  |" in md  # its baseline had no reading: blank, not a number
    assert "<h2>Energy</h2>" in (tmp_path / "index.html").read_text()


def test_without_energy_readings_there_is_no_energy_section(records, tmp_path, quick_png):
    report.render(records, tmp_path)
    assert "Energy" not in (tmp_path / "report.md").read_text()
    assert energy.vs_bf16(records).empty


def test_a_geomean_speedup_says_which_estimators_it_averages(records):
    """Issue #38: a precision's geomean over paired and ratio-of-medians speedups says how many of
    each (the summary's note and run --json), never averaging the two silently; one kind names itself."""
    def row():
        return {r["precision"]: r for r in summary.summary_rows(records)}["bf16"]

    assert (row()["geomean_speedup"], row()["note"]) == ("4x", "speedups: ratio of medians")
    records["speedup_paired"] = [None, 3.9, None, 4.2, None, None]
    assert (row()["geomean_speedup"], row()["note"]) == (f"{math.sqrt(3.9 * 4.2):.3g}x", "speedups paired")
    records["speedup_paired"] = [None, 3.9, None, None, None, None]
    assert (row()["geomean_speedup"], row()["note"]) == (f"{math.sqrt(3.9 * 4.0):.3g}x",
                                                         "speedups: 1 paired, 1 ratio of medians")
    json_rows = {r["precision"]: r for r in summary.summary_records(records)}
    assert json_rows["bf16"]["geomean_speedup_of"] == {"paired": 1, "ratio_of_medians": 1}
    emulated = {r["precision"]: r for r in summary.summary_rows(records)}["fp8_tensorwise"]
    assert emulated["note"] == "emulated: accuracy only"  # no speed: no estimator named


def test_speedup_plot_bars_are_the_stored_paired_interval_where_one_exists(records):
    """Issue #38: a paired speedup's bar is its stored interval at its level; a ratio of medians keeps
    its case's p10-p90; the plot's title says which."""
    from suite.report import plots
    records["time_ms_p10"], records["time_ms_p90"] = records["time_ms_median"] * 0.9, records["time_ms_median"] * 1.2
    records["speedup_paired"] = [None, 3.9, None, None, None, None]
    records["speedup_paired_low"] = [None, 3.7, None, None, None, None]
    records["speedup_paired_high"] = [None, 4.3, None, None, None, None]
    records["speedup_paired_level"] = [None, 0.95, None, None, None, None]
    rows = derived.with_speedups(records)
    rows = rows[rows["precision"] == "bf16"]
    bars = plots.error_bars(rows, "speedup")
    assert bars[:, 0] == pytest.approx([3.9 - 3.7, 4.3 - 3.9])  # the stored interval
    assert bars[:, 1] == pytest.approx([4.0 - 4.0 / 1.2, 4.0 / 0.9 - 4.0])  # its own p10-p90
    assert plots.speedup_bars_title(rows) == "bars: paired speedups' stored 95% interval, others each case's p10-p90"
    assert plots.speedup_bars_title(rows.iloc[1:]) == "bars: each case's p10-p90"


def test_a_slow_path_geomean_over_both_estimators_says_how_many_of_each():
    """Issue #38: the headline's slow-path geomean names its mix of paired and ratio-of-medians
    speedups when it has both, so it never averages the two silently."""
    df = cpu_run("avx2 avx512f")
    df["speedup_paired"] = [None, 0.2 / 12.5, None, None]  # one bf16 case timed in paired rounds
    slow = next(line for line in summary.headline(df) if "slower than fp32 here" in line)
    assert "(geomean of 2 cases, 1 paired and 1 ratio of medians" in slow
    gm = math.sqrt(12.5 / 0.2 * 96.0 / 1.6)
    assert slow.startswith(f"bf16 is {gm:.3g}x slower than fp32 here")
