"""`suite.analysis.load`, the records as a notebook wants them: one row per case of the newest run,
the speedup over the in-run baseline and the baseline's time, a short unique label, only the columns
the cases fill; and the examples in README.md and docs/results.md, run as written."""

from __future__ import annotations

import re
from pathlib import Path

import pandas as pd
import pytest

from suite.analysis import load
from suite.results import store

ROOT = Path(__file__).resolve().parent.parent
REFERENCE = ROOT / "results" / "reference"


def test_one_row_per_case_with_its_speedup_and_baseline_time():
    df = load(REFERENCE / "cpu_models")
    raw = store.read([REFERENCE / "cpu_models"])
    assert len(df) == len(raw) and df["case_id"].is_unique and df["run_id"].nunique() == 1
    assert list(df.columns[:3]) == ["label", "workload", "precision"] and df["label"].is_unique
    times = raw.set_index("case_id")["time_ms_median"]
    for row in df.to_dict("records"):  # the speedup is the baseline case's median time over this one's
        base = times[row["baseline_case_id"]]
        assert row["speedup"] == pytest.approx(base / row["time_ms_median"])
        assert row["baseline_time_ms"] == pytest.approx(base)


def test_only_the_columns_a_workloads_cases_fill():
    raw = store.read([REFERENCE / "cpu_models"])
    gemm = load(REFERENCE / "cpu_models", workload="gemm")
    assert set(gemm["workload"]) == {"gemm"} and gemm.notna().any().all()
    steps = raw[raw["workload"] == "gemm"]
    assert set(gemm.columns) - {"label", "shape", "variant", "speedup", "speedup_medians", "baseline_time_ms", "pct_of_peak"} == {
        c for c in steps.columns if steps[c].notna().any() and c != "samples_ms"}
    assert len(gemm.columns) < len(raw.columns) / 2  # what the issue found: most columns null
    assert "final_loss" in load(REFERENCE / "cpu_models", workload="train_step")
    with pytest.raises(ValueError, match="no 'conv' cases"):
        load(REFERENCE / "cpu_models", workload="conv")


def test_an_emulated_time_is_no_speedup_and_labels_tell_parameters_apart():
    df = load(REFERENCE / "cpu_fp8", workload="gemm")
    emulated = df[df["emulated"].fillna(False).astype(bool) & (df["status"] == "ok")]
    assert len(emulated) and emulated["speedup"].isna().all() and emulated["baseline_time_ms"].notna().all()
    assert "256x512x384 fp8_tensorwise (quantize=inline)" in set(df["label"])
    assert df.groupby("run_id")["label"].apply(lambda s: s.is_unique).all()


def _examples(path: Path) -> list[str]:
    blocks = re.findall(r"```python\n(.*?)```", path.read_text(encoding="utf-8"), re.S)
    return [b for b in blocks if "suite.analysis import load" in b]


@pytest.mark.parametrize("page", ["README.md", "docs/results.md"])
def test_the_documented_three_line_example_runs(page, monkeypatch, capsys):
    (example,) = _examples(ROOT / page)
    assert len(example.strip().splitlines()) == 3
    monkeypatch.chdir(ROOT)
    exec(compile(example, page, "exec"), {})
    printed = capsys.readouterr().out.splitlines()
    assert printed[0].split() == ["label", "speedup", "baseline_time_ms", "rel_err"]
    assert len(printed) == 1 + len(load(REFERENCE / "cpu_models", workload="gemm"))
    assert pd.notna(load(REFERENCE / "cpu_models", workload="gemm")["rel_err"]).all()
