"""The vendor peak table: device-name matching and dense (never 2:4-sparse) numbers."""

from __future__ import annotations

import pytest

from suite.core import peaks
from suite.scenario import registry
from suite.measure import record
from suite.scenario.plan import Case
from suite.measure.timing import StopRule


@pytest.mark.parametrize("name, label", [
    ("NVIDIA H100 80GB HBM3", "H100 SXM"),
    ("NVIDIA H100 PCIe", "H100 PCIe"),
    ("NVIDIA H100 NVL", "H100 NVL"),
    ("NVIDIA H200", "H200"),
    ("NVIDIA H200 NVL", "H200 NVL"),
    ("NVIDIA GH200 480GB", "GH200"),
    ("NVIDIA A100-SXM4-80GB", "A100 SXM"),
    ("NVIDIA A100-SXM4-40GB", "A100 SXM"),
    ("NVIDIA A100 80GB PCIe", "A100 PCIe"),
    ("NVIDIA A100-PCIE-40GB", "A100 PCIe"),
    ("NVIDIA L4", "L4"),
    ("NVIDIA L40S", "L40S"),
    ("NVIDIA B200", "B200"),
    ("NVIDIA GB200", "GB200"),
    ("NVIDIA B300 SXM6 AC", "B300"),
])
def test_device_names_match_their_part(name, label):
    assert peaks.match_device(name)[0] == label


@pytest.mark.parametrize("name", [
    None, "", "NVIDIA L40", "NVIDIA GeForce RTX 4090", "Tesla V100-SXM2-16GB",
    "Intel(R) Xeon(R) Processor", "AMD EPYC 9654 96-Core Processor",
])
def test_unknown_devices_have_no_peak(name):
    assert peaks.match_device(name) is None
    assert peaks.peak_tflops(name, "bf16") is None


# Sparse figures printed in the datasheets (see suite/core/peaks.py): the table must hold half of each.
SPARSE_BF16 = {"H100 SXM": 1979, "H100 PCIe": 1513, "H100 NVL": 1671, "H200": 1979, "H200 NVL": 1671,
               "GH200": 1979, "A100 SXM": 624, "A100 PCIe": 624, "L4": 242, "L40S": 733,
               "B200": 4500, "GB200": 5000, "B300": 4500}
SPARSE_FP8 = {"H100 SXM": 3958, "H100 PCIe": 3026, "H100 NVL": 3341, "H200": 3958, "H200 NVL": 3341,
              "GH200": 3958, "L4": 485, "L40S": 1466, "B200": 9000, "GB200": 10000, "B300": 9000}


@pytest.mark.parametrize("label, table", [(gpu.label, gpu.peaks) for gpu in peaks.PEAKS])
def test_numbers_are_dense(label, table):
    # the L40S datasheet prints 362.05 dense beside 733 sparse (not exactly 2x: 1.2% apart); every
    # other pair is exactly 2x up to rounding to the unit
    assert table["bf16"] * 2 == pytest.approx(SPARSE_BF16[label], rel=0.015)
    assert table["fp16"] == table["bf16"]
    if label in SPARSE_FP8:
        assert table["fp8"] * 2 == pytest.approx(SPARSE_FP8[label], rel=0.015)
        assert table["fp8"] == pytest.approx(2 * table["bf16"], rel=0.015)  # FP8 rate = 2x BF16 on Hopper, Ada, Blackwell
    else:
        assert "fp8" not in table  # Ampere has no FP8 tensor cores
    assert table["tf32"] == pytest.approx(table["bf16"] / 2, rel=0.02)  # TF32 rate = half the BF16 rate
    assert table["fp32"] < table["tf32"]


def test_peak_per_precision():
    h100 = "NVIDIA H100 80GB HBM3"

    def peak(device, precision):
        return peaks.peak_tflops(device, registry.peak_column(precision))

    assert peak(h100, "bf16") == 989.5
    assert peak(h100, "fp32") == 67.0
    assert peak(h100, "tf32") == 494.5
    assert peak(h100, "fp8_tensorwise") == peak(h100, "te_delayed") == 1979.0
    assert peak("NVIDIA H100 PCIe", "bf16") == 756.5
    assert peak("NVIDIA A100-SXM4-80GB", "fp8_rowwise") is None
    assert peak(h100, "int8") is None and peaks.peak_tflops(h100, None) is None
    assert peak("NVIDIA H200", "bf16") == peak(h100, "bf16")


def test_cpu_records_get_no_gpu_peak():
    case = Case("s", "gemm", "bf16", None, 8, 8, 8, {}, seed=0, timing=StopRule())
    cpu = record.base(case, {"device": "cpu", "device_name": "NVIDIA A100 lookalike CPU"})
    gpu = record.base(case, {"device": "cuda", "device_name": "NVIDIA A100-SXM4-80GB"})
    assert cpu["peak_tflops"] is None and gpu["peak_tflops"] == 312.0


def test_every_gpu_has_bandwidth_and_capability():
    for gpu in peaks.PEAKS:
        # HBM/GDDR parts of 2020-2024: between an L4's 0.3 and a B200's 8 TB/s
        assert 0.3 <= gpu.mem_tbs <= 8.0 and gpu.cc >= 8.0
        assert ("fp8" in gpu.peaks) == (gpu.cc >= 8.9) and ("fp4" in gpu.peaks) == (gpu.cc >= 10.0)


@pytest.mark.parametrize("short, label", [("h100", "H100 SXM"), ("h100-pcie", "H100 PCIe"), ("a100", "A100 SXM"),
                                          ("h200", "H200"), ("b200", "B200"), ("gb200", "GB200")])
def test_short_names_match(short, label):
    assert peaks.match_gpu(short).label == label
