"""The fleet report: records of several devices, each device's speedups over its own baseline, the
devices side by side per case, and `report` rendering them. The records are real runs recorded on
this machine (`tests.recorded_runs`), relabelled as runs of other devices."""

from __future__ import annotations

import pandas as pd
import pytest

from suite import cli
from suite.analysis.frame import derived
from suite.analysis.outcome import fleet
from suite.report import plots
from suite.results import store
from tests.recorded_runs import SIZES, shared

H100, H200, A100 = "NVIDIA H100 80GB HBM3", "NVIDIA H200", "NVIDIA A100-SXM4-80GB"
LARGEST = SIZES[-1]  # the recorded runs' largest GEMM
NEEDS = "needs compute capability 8.9 (this device has 8.0)"


def _as_device(df: pd.DataFrame, device: str, run_id: str) -> pd.DataFrame:
    out = df.copy()
    out["device_name"], out["device"], out["host"], out["run_id"] = device, "cuda", f"node-{device[7:11]}", run_id
    return out


@pytest.fixture(scope="module")
def recorded(tmp_path_factory) -> list[pd.DataFrame]:
    _, files = shared(tmp_path_factory, runs=3)
    return [store.read_file(f) for f in files]


@pytest.fixture(scope="module")
def fleet_records(recorded) -> pd.DataFrame:
    """Three devices: H200 runs bf16 twice as fast as H100 (same run, its times halved), A100
    skips bf16 as a card without the feature would, and its fp32 baseline of the largest size failed."""
    h100 = _as_device(recorded[0], H100, "20261201T100000Z-aaaaa1")
    h200 = _as_device(recorded[0], H200, "20261201T100000Z-aaaaa2")
    bf16 = h200["precision"] == "bf16"
    h200.loc[bf16, "time_ms_median"] = h200.loc[bf16, "time_ms_median"] / 2
    paired = ["speedup_paired", "speedup_paired_low", "speedup_paired_high"]  # its rounds were twice as fast too
    h200.loc[bf16, paired] = h200.loc[bf16, paired] * 2
    a100 = _as_device(recorded[1], A100, "20261201T100000Z-aaaaa3")
    a100.loc[a100["precision"] == "bf16", ["status", "reason"]] = ["skipped", NEEDS]
    big = (a100["precision"] == "fp32") & (a100["m"] == LARGEST)
    a100.loc[big, ["status", "reason"]] = ["failed", "RuntimeError: CUDA error"]
    return pd.concat([h100, h200, a100], ignore_index=True)


def test_speedups_stay_within_a_device_and_join_by_case(fleet_records):
    cells = fleet.cells(fleet_records)
    assert fleet.devices(fleet_records) == [A100, H100, H200]
    one = derived.with_speedups(fleet_records[fleet_records["device_name"] == H100])
    expected = one[(one["precision"] == "bf16") & one["speedup"].notna()].set_index("case_id")["speedup"]
    bf16 = cells[cells["precision"] == "bf16"].pivot(index="case_id", columns="device", values="speedup")
    assert len(expected) == 5
    assert bf16[H100].to_dict() == pytest.approx(expected.to_dict(), rel=1e-12)
    assert bf16[H200].to_dict() == pytest.approx((2 * expected).to_dict(), rel=1e-12)  # its own times, its own answer
    a100 = cells[cells["device"] == A100].set_index(["precision", "case_id"])
    assert a100.loc["bf16", "speedup"].isna().all() and (a100.loc["bf16", "note"] == f"skipped: {NEEDS}").all()
    # fp16 at the largest size: its baseline failed on the A100, and the H100's baseline is not borrowed
    largest = f"{LARGEST}x{LARGEST}x{LARGEST}"
    fp16 = cells[(cells["precision"] == "fp16") & (cells["setting"] == largest)].set_index("device")
    assert pd.isna(fp16.loc[A100, "speedup"]) and fp16.loc[A100, "note"] == "baseline not measured"
    assert pd.notna(fp16.loc[H100, "speedup"])

    table = fleet.side_by_side(cells)
    assert len(table) == 15 and table["case_id"].is_unique  # bf16, fp16, tf32 at five sizes; fp32 is the baseline
    assert {H100, H200, A100, f"{A100} note"} <= set(table.columns)


def test_the_answer_says_per_recipe_where_it_pays(fleet_records):
    lines = fleet.answer_lines(fleet_records)
    assert lines[0].startswith(f"3 devices: {A100}, {H100}, {H200}")
    (bf16,) = [line for line in lines if line.startswith("gemm bf16 over fp32")]
    summary = fleet.recipes(fleet.cells(fleet_records)).set_index(["precision", "device"])
    h100, h200 = summary.loc[("bf16", H100), "geomean_speedup"], summary.loc[("bf16", H200), "geomean_speedup"]
    assert h200 == pytest.approx(2 * h100, rel=1e-12)
    assert f"{H200} ({h200:.3g}x, 5 cases)" in bf16 and f"{H100} ({h100:.3g}x, 5 cases)" in bf16
    assert bf16.endswith(f"not measured on {A100} (skipped: {NEEDS}).")
    assert ("pays on" in bf16) == (h200 > 1)


def test_report_renders_a_fleet_and_keeps_each_devices_newest_run(recorded, tmp_path, monkeypatch):
    # one plot kind per device page is enough here: which plots a device's report has is test_report's
    monkeypatch.setattr(plots, "PLOTS", {"speedup": plots.PLOTS["speedup"]})
    results = tmp_path / "results" / "cmp"
    weird = "report.md <b>|*x*|</b>"  # device names come from records: escaped, and slugged into folder names
    runs = [_as_device(recorded[0], H100, "20261201T100000Z-aaaaa0"),  # older: left out
            _as_device(recorded[1], H100, "20261201T110000Z-aaaaa1"),
            _as_device(recorded[2], weird, "20261201T090000Z-aaaaa2")]
    for df in runs:
        store.write_run(store.records_of(df), store.run_path(tmp_path / "results", "cmp", df["run_id"].iloc[0]))
    out = tmp_path / "report"
    assert cli.main(["report", str(results), "--out", str(out), "--quiet"]) == 0
    page = (out / "report.md").read_text()
    assert "20261201T110000Z-aaaaa1" in page and "20261201T090000Z-aaaaa2" in page
    assert "20261201T100000Z-aaaaa0" not in page
    kept = pd.concat(runs[1:], ignore_index=True)
    summary = fleet.recipes(fleet.cells(kept)).set_index(["precision", "device"])
    fp16 = summary.loc[("fp16", H100)]
    assert f"| gemm | fp16 | fp32 | {fp16['geomean_speedup']:.3g}x (5 cases) |" in page  # the per-device table
    assert "report.md \\<b\\>\\|\\*x\\*\\|\\</b\\>" in page and "<b>" not in page
    assert "&lt;b&gt;" in (out / "index.html").read_text() and "<b>|" not in (out / "index.html").read_text()
    assert (out / "fleet_speedup_gemm.svg").stat().st_size > 0
    folders = sorted(p.name for p in out.iterdir() if p.is_dir())
    assert len(folders) == 2 and all(f.startswith("device-") and "<" not in f for f in folders)
    for folder in folders:  # each device's own report, as a single device gets it
        device_page = (out / folder / "report.md").read_text()
        assert device_page.startswith("# mpsuite report: cmp") and (out / folder / "speedup_gemm.svg").exists()
        assert f"]({folder}/report.md)" in page


def test_device_labels_of_a_categorical_device_name_name_a_device_without_one():
    """A lean read's device names are categorical (`store.as_categories`): a record without one is
    still labelled by its device type, not refused as a value outside the categories."""
    df = store.as_categories(pd.DataFrame({"device": ["cuda", "cpu"], "device_name": ["NVIDIA H100", None]}),
                             store.RUN_CONSTANT)
    assert fleet.device_labels(df).tolist() == ["NVIDIA H100", "cpu" + fleet.NOT_AVAILABLE]
