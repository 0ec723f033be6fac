"""Where a recipe starts to pay: measured crossovers interpolated on log axes, predicted ones from
the roofline model, the report's answer line and `python -m suite predict`."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from suite import cli
from suite.analysis.roofline import crossover, model
from suite.analysis.roofline.crossover import Crossing, Family
from tests.json_docs import cli_json


def test_measured_crossing_is_interpolated_on_log_axes():
    crossing = crossover.measured_crossing([4096, 1024, 2048], [1.2, 0.8, 0.9])
    # between 2048 (0.9x) and 4096 (1.2x): log-linear, 2048 * 2**(ln(1/0.9) / ln(1.2/0.9))
    expected = 2048 * 2 ** (math.log(1 / 0.9) / math.log(1.2 / 0.9))
    assert crossing == Crossing("crosses", pytest.approx(expected)) and 2600 < expected < 2700
    assert crossover.measured_crossing([256, 512], [1.5, 3.0]) == Crossing("always", 256)
    assert crossover.measured_crossing([256, 512], [0.01, 0.02]) == Crossing("never", 512)
    assert crossover.measured_crossing([256], [2.0]) is None  # one size is no line
    assert crossover.measured_crossing([256, 512], [1.0, 1.0]) == Crossing("never", 512)  # as fast is not faster
    # noise: it beat the baseline at 512 only; from 2048 on it stays ahead, which is where it pays
    assert crossover.measured_crossing([256, 512, 1024, 2048, 4096], [0.9, 1.1, 0.9, 1.2, 1.3]).size == \
        pytest.approx(1024 * 2 ** (math.log(1 / 0.9) / math.log(1.2 / 0.9)))
    assert crossover.measured_crossing([256, 512, 1024], [0.9, 1.1, 0.9]) == Crossing("not_largest", 1024)


def test_predicted_crossings():
    h100 = model.gpu_device("h100")
    square = Family("square")
    compiled = crossover.predicted_crossing("ln_linear", "fp8_tensorwise", "bf16", square, {"compile": True}, h100)
    eager = crossover.predicted_crossing("ln_linear", "fp8_tensorwise", "bf16", square, {}, h100)
    assert compiled.kind == eager.kind == "crosses" and 1024 < compiled.size < 4096 < 8192 < eager.size
    for size, beats in ((compiled.size, True), (compiled.size - 1, False)):  # the smallest size that pays
        ours = model.predict_case("ln_linear", "fp8_tensorwise", size, size, size, {"compile": True}, h100)
        base = model.predict_case("ln_linear", "bf16", size, size, size, {"compile": True}, h100)
        assert (base.seconds > ours.seconds) == beats
    avx2 = model.cpu_device(2, 2600.0, "avx2", "AVX2")
    assert crossover.predicted_crossing("gemm", "bf16", "fp32", square, {}, avx2) == Crossing("never", 65536)
    amx = model.cpu_device(2, 2600.0, "avx2 avx512f amx_bf16", "AVX512")
    assert crossover.predicted_crossing("gemm", "bf16", "fp32", square, {}, amx).kind == "always"


def sweep(speedups: dict[int, float], device_name="NVIDIA H100 80GB HBM3", precision="fp8_rowwise") -> pd.DataFrame:
    rows = []
    for size, speedup in speedups.items():
        common = {"run_id": "r", "scenario": "s", "workload": "gemm", "baseline": "bf16", "status": "ok",
                  "m": size, "k": size, "n": size, "params": '{"quantize": "inline", "use_fast_accum": true}',
                  "device": "cuda", "device_name": device_name, "peak_tflops": None, "tflops": None}
        base = {**common, "precision": "bf16", "case_id": f"b{size}", "baseline_case_id": f"b{size}",
                "time_ms_median": 1.0, "params": "{}"}
        rows += [base, {**common, "precision": precision, "case_id": f"c{size}", "baseline_case_id": f"b{size}",
                        "time_ms_median": 1.0 / speedup}]
    return pd.DataFrame(rows)


def test_the_answer_line_says_measured_and_predicted():
    [line] = crossover.answer_lines(sweep({8192: 0.8, 16384: 0.95, 24576: 1.1}))
    assert line.startswith("fp8_rowwise (gemm, quantize=inline, use_fast_accum=True) pays from M=K=N of about ")
    measured = float(line.split("of about ")[1].split(" ")[0])
    predicted = float(line.split("(predicted ")[1].rstrip(").").replace(" ", ""))
    assert 16384 < measured < 24576 and " on this NVIDIA H100 80GB HBM3 (predicted " in line
    assert predicted == float(crossover.round_2(crossover.predicted_crossing(
        "gemm", "fp8_rowwise", "bf16", Family("square"), {"quantize": "inline", "use_fast_accum": True},
        model.gpu_device("h100")).size))
    [never] = crossover.answer_lines(sweep({1024: 0.5, 2048: 0.6}, device_name="NVIDIA GeForce RTX 4090"))
    assert never == ("fp8_rowwise (gemm, quantize=inline, use_fast_accum=True) does not pay up to M=K=N = 2048 on "
                     "this NVIDIA GeForce RTX 4090 (no model for this device).")


def test_predict_names_each_recipes_crossover(capsys):
    doc = cli_json(capsys, ["predict", "h100_fp8", "--device", "h100", "--json"])
    assert doc["device"]["label"] == "H100 SXM" and doc["device"]["peaks_tflops"]["fp8"] == 1979.0
    recipes = {row["precision"] for row in doc["crossovers"]}
    assert {"fp8_tensorwise", "fp8_rowwise", "fp8_rowwise_gw_hp", "te_delayed", "te_current"} <= recipes
    for row in doc["crossovers"]:
        assert row["text"].startswith(row["precision"]) and row["kind"] in ("crosses", "always", "never")
    by_id = {row["case_id"]: row for row in doc["cases"]}
    notes = [row["note"] for row in by_id.values() if row.get("note")]
    assert any("compute capability >= 10" in note for note in notes)  # te_mxfp8, te_nvfp4 on Hopper
    timed = [row for row in by_id.values() if not row.get("note")]
    assert timed and all(row["predicted_ms"] > 0 and row["bound"] in ("compute", "memory", "overhead") for row in timed)


def test_predict_as_a_table_and_a_bad_device(capsys):
    assert cli.main(["predict", "cpu", "--device", "a100"]) == 0
    out, err = capsys.readouterr()
    assert "cpu on A100 SXM, predicted by the roofline model" in out
    assert "bf16 (gemm) pays from M=K=N of about" in err  # bf16 tensor cores against fp32 CUDA cores
    assert cli.main(["predict", "cpu", "--device", "tpu-v5"]) == 2
    assert "--device 'tpu-v5': not in the peak table" in capsys.readouterr().err


def test_the_report_lists_every_crossover_and_the_headline_only_the_first():
    from suite.report import pages

    runs = [sweep({1024: 0.5, 2048: 1.5}).assign(params=f'{{"variant": {i}}}') for i in range(crossover.MAX_LINES + 2)]
    df = pd.concat([r.assign(case_id=r["case_id"] + f"-{i}", baseline_case_id=r["baseline_case_id"] + f"-{i}")
                    for i, r in enumerate(runs)], ignore_index=True)
    lines = crossover.answer_lines(df)
    assert len(lines) == crossover.MAX_LINES + 1 and lines[-1].startswith("2 more recipe and shape families")
    rows = crossover.table_rows(crossover.measured_families(df))
    assert len(rows) == crossover.MAX_LINES + 2 and {r["case"] for r in rows} == {f"gemm, variant={i}" for i in range(8)}
    table = pages.md_table(rows, crossover.TABLE_COLUMNS)
    assert table.count("pays from M=K=N of about") == crossover.MAX_LINES + 2
