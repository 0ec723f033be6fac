"""Reports render from records alone, escape what they show, and never show emulation as speed."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from suite import analysis, report


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
    df = analysis.with_speedups(records)
    bf16 = df[df["precision"] == "bf16"].set_index("m")["speedup"]
    assert bf16[64] == pytest.approx(4.0) and bf16[128] == pytest.approx(4.0)
    assert math.isnan(df[df["precision"] == "tf32"]["speedup"].iloc[0])


def test_render_writes_html_markdown_and_plots(records, tmp_path):
    written = report.render(records, tmp_path)
    names = {p.name for p in written}
    assert {"index.html", "report.md", "throughput_gemm.png", "speedup_gemm.png", "accuracy_gemm.png"} <= names
    for p in written:
        assert p.stat().st_size > 0
    md = (tmp_path / "report.md").read_text()
    assert "| gemm | bf16 |" in md and "4x" in md
    assert "TF32 is a CUDA tensor-core mode" in md


def test_emulated_timings_are_not_shown_as_speed(records, tmp_path):
    report.render(records, tmp_path)
    md = (tmp_path / "report.md").read_text()
    row = next(line for line in md.splitlines() if "| fp8_tensorwise |" in line and "64x64x64" in line)
    assert "emulated" in row
    assert "8x" not in row  # 4.0 ms / 0.5 ms would be an 8x "speedup": never shown
    summary = analysis.summary(records)
    assert math.isnan(summary.set_index("precision").loc["fp8_tensorwise", "best_tflops"])


def test_html_escapes_record_strings(records, tmp_path):
    records.loc[5, "reason"] = "<script>alert(1)</script>"
    records["scenario"] = "<b>s</b>"
    report.render(records, tmp_path)
    html = (tmp_path / "index.html").read_text()
    assert "<script>alert(1)</script>" not in html and "&lt;script&gt;" in html
    assert "<b>s</b>" not in html


def test_markdown_escapes_table_pipes(records, tmp_path):
    records.loc[5, "reason"] = "a | b"
    report.render(records, tmp_path)
    assert "a \\| b" in (tmp_path / "report.md").read_text()


def test_report_of_only_skipped_cases_still_renders(records, tmp_path):
    skipped = records[records["status"] == "skipped"]
    written = report.render(skipped, tmp_path)
    assert {p.name for p in written} == {"index.html", "report.md"}
    assert "TF32" in (tmp_path / "report.md").read_text()
