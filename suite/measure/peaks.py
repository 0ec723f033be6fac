"""Vendor dense peak throughput (TFLOP/s) per GPU and precision.

Dense numbers only. Datasheets print the 2:4-structured-sparse tensor-core figure, marked with an
asterisk, beside (or instead of) the dense one; the dense figure is half of it. `fp32` is the
non-tensor-core FP32 rate; fp16 and bf16 tensor-core rates are equal on every part listed.
Sources (NVIDIA product datasheets; "x*" is the sparse figure printed there, halved here):
- A100 (2021, "NVIDIA A100 Tensor Core GPU", 40 GB and 80 GB, PCIe and SXM columns identical):
  FP32 19.5, TF32 156 | 312*, BF16 312 | 624*, FP16 312 | 624*; no FP8.
- H100 (2022 edition, SXM5 and PCIe columns): SXM FP32 67, TF32 989*, BF16 1979*, FP16 1979*,
  FP8 3958*; PCIe FP32 51, TF32 756*, BF16 1513*, FP16 1513*, FP8 3026*.
  The 2023+ edition lists H100 NVL instead of PCIe: FP32 60, TF32 835*, BF16 1671*, FP8 3341*.
- H200 (2024, "NVIDIA H200 Tensor Core GPU"): SXM has the H100 SXM's figures (FP32 67, TF32 989*,
  BF16 1979*, FP8 3958*); NVL has the H100 NVL's (FP32 60, TF32 835*, BF16 1671*, FP8 3341*).
- GH200 Grace Hopper Superchip (2023): its Hopper GPU has the H100 SXM's figures.
- L4 (2023): FP32 30.3, TF32 120*, BF16 242*, FP16 242*, FP8 485*.
- L40S (2023): FP32 91.6, TF32 183 | 366*, BF16 362.05 | 733*, FP16 362.05 | 733*, FP8 733 | 1466*.
Measured ceilings are lower (mamf-finder's best bf16 GEMMs: A100 SXM 271, H100 SXM 794 TFLOP/s).
"""

from __future__ import annotations

import re

from suite.scenario import registry

H100_SXM = {"fp32": 67.0, "tf32": 494.5, "bf16": 989.5, "fp16": 989.5, "fp8": 1979.0}
H100_NVL = {"fp32": 60.0, "tf32": 417.5, "bf16": 835.5, "fp16": 835.5, "fp8": 1670.5}
A100 = {"fp32": 19.5, "tf32": 156.0, "bf16": 312.0, "fp16": 312.0}

PEAKS: list[tuple[str, str, dict[str, float]]] = [
    # (label, regex on torch.cuda.get_device_name, peaks); first match wins: specific ones first.
    # Names as the driver reports them, e.g. 'NVIDIA H100 80GB HBM3' (SXM), 'NVIDIA H100 PCIe',
    # 'NVIDIA H100 NVL', 'NVIDIA H200', 'NVIDIA GH200 480GB', 'NVIDIA A100-SXM4-80GB',
    # 'NVIDIA A100 80GB PCIe', 'NVIDIA A100-PCIE-40GB', 'NVIDIA L4', 'NVIDIA L40S'.
    ("GH200", r"\bGH200\b", H100_SXM),
    ("H200 NVL", r"\bH200\b.*\bNVL\b", H100_NVL),
    ("H200", r"\bH200\b", H100_SXM),
    ("H100 NVL", r"\bH100\b.*\bNVL\b", H100_NVL),
    ("H100 PCIe", r"\bH100\b.*\bPCIe\b", {"fp32": 51.0, "tf32": 378.0, "bf16": 756.5, "fp16": 756.5, "fp8": 1513.0}),
    ("H100 SXM", r"\bH100\b", H100_SXM),
    ("A100 PCIe", r"\bA100\b.*\bPCIe\b", A100),
    ("A100 SXM", r"\bA100\b", A100),
    ("L40S", r"\bL40S\b", {"fp32": 91.6, "tf32": 183.0, "bf16": 362.05, "fp16": 362.05, "fp8": 733.0}),
    ("L4", r"\bL4\b", {"fp32": 30.3, "tf32": 60.0, "bf16": 121.0, "fp16": 121.0, "fp8": 242.5}),
]

# Which peak column a precision is measured against (FP8 recipes share the fp8 column).
def peak_column(precision: str) -> str | None:
    """The column of the table a precision's throughput is set against: its registry record's."""
    record = registry.PRECISIONS.get(precision)
    return record.peak if record else None


def match_device(device_name: str | None) -> tuple[str, dict[str, float]] | None:
    """(label, peaks) for a GPU name, or None for CPUs and GPUs not in the table."""
    if not device_name:
        return None
    for label, pattern, peaks in PEAKS:
        if re.search(pattern, device_name, re.IGNORECASE):
            return label, peaks
    return None


def peak_tflops(device_name: str | None, precision: str) -> float | None:
    """Dense vendor peak for this precision on this device, or None where unknown (CPUs, other GPUs)."""
    found = match_device(device_name)
    column = peak_column(precision)
    if found is None or column is None:
        return None
    return found[1].get(column)
