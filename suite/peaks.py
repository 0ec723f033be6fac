"""Vendor dense peak throughput (TFLOP/s) per GPU and precision.

Dense numbers only: datasheets print the 2:4-sparse figure (2x) beside the dense one for tensor
cores. Sources: NVIDIA A100 datasheet (2021, table "Peak ... Tensor Core", dense column) and
NVIDIA H100 datasheet (2023, SXM5 and PCIe columns, dense = half the starred sparse number). The
H200 has the H100 SXM's compute (NVIDIA H200 datasheet, 2024) with more and faster memory.
fp32 means the non-tensor-core FP32 rate; fp16 and bf16 tensor-core rates are equal on these parts.
"""

from __future__ import annotations

import re

PEAKS: list[tuple[str, str, dict[str, float]]] = [
    # (label, regex on torch.cuda.get_device_name, peaks); first match wins: specific ones first.
    ("H100 PCIe", r"H100.*PCIe", {"fp32": 51.2, "tf32": 378.0, "bf16": 756.0, "fp16": 756.0, "fp8": 1513.0}),
    ("H200", r"H200", {"fp32": 67.0, "tf32": 494.5, "bf16": 989.5, "fp16": 989.5, "fp8": 1979.0}),
    ("H100 SXM", r"H100", {"fp32": 67.0, "tf32": 494.5, "bf16": 989.5, "fp16": 989.5, "fp8": 1979.0}),
    ("A100", r"A100", {"fp32": 19.5, "tf32": 156.0, "bf16": 312.0, "fp16": 312.0}),
]

# Which peak column a precision is measured against (FP8 recipes share the fp8 column).
PEAK_COLUMN = {"fp32": "fp32", "tf32": "tf32", "bf16": "bf16", "fp16": "fp16"}


def peak_column(precision: str) -> str | None:
    if precision in PEAK_COLUMN:
        return PEAK_COLUMN[precision]
    if precision.startswith(("fp8", "te_")):
        return "fp8"
    return None


def match_device(device_name: str | None) -> tuple[str, dict[str, float]] | None:
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
