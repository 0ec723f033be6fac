"""Vendor dense peak throughput (TFLOP/s) and memory bandwidth (TB/s) per GPU: the one table.

Dense numbers only. Datasheets print the 2:4-structured-sparse tensor-core figure, marked with an
asterisk, beside (or instead of) the dense one; the dense figure is half of it. `fp32` is the
non-tensor-core FP32 rate; fp16 and bf16 tensor-core rates are equal on every part listed.
Sources (NVIDIA product datasheets; "x*" is the sparse figure printed there, halved here):
- A100 (2021, "NVIDIA A100 Tensor Core GPU", 40 GB and 80 GB, PCIe and SXM columns identical):
  FP32 19.5, TF32 156 | 312*, BF16 312 | 624*, FP16 312 | 624*; no FP8. Memory: 80 GB SXM
  2,039 GB/s, 80 GB PCIe 1,935 GB/s (the 40 GB parts: 1,555 GB/s; the table holds the 80 GB figure,
  an upper bound, for both).
- H100 (2022 edition, SXM5 and PCIe columns): SXM FP32 67, TF32 989*, BF16 1979*, FP16 1979*,
  FP8 3958*, 3.35 TB/s; PCIe FP32 51, TF32 756*, BF16 1513*, FP16 1513*, FP8 3026*, 2 TB/s.
  The 2023+ edition lists H100 NVL instead of PCIe: FP32 60, TF32 835*, BF16 1671*, FP8 3341*, 3.9 TB/s.
- H200 (2024, "NVIDIA H200 Tensor Core GPU"): SXM has the H100 SXM's figures (FP32 67, TF32 989*,
  BF16 1979*, FP8 3958*); NVL has the H100 NVL's (FP32 60, TF32 835*, BF16 1671*, FP8 3341*); both 4.8 TB/s.
- GH200 Grace Hopper Superchip (2023): its Hopper GPU has the H100 SXM's figures; 4 TB/s (96 GB
  HBM3) or 4.9 TB/s (144 GB HBM3e): the table holds 4.9, an upper bound, for both.
- L4 (2023): FP32 30.3, TF32 120*, BF16 242*, FP16 242*, FP8 485*, 300 GB/s.
- L40S (2023): FP32 91.6, TF32 183 | 366*, BF16 362.05 | 733*, FP16 362.05 | 733*, FP8 733 | 1466*, 864 GB/s.
- B200 and GB200 (dense per-GPU figures as collected, with sources, in stas00/ml-engineering
  compute/accelerator/README.md from the DGX B200 datasheet and the GB200 NVL72 specifications):
  B200 FP32 80, TF32 1125, BF16 2250, FP8 4500, FP4 9000; GB200 (per GPU) FP32 80, TF32 1250,
  BF16 2500, FP8 5000, FP4 10000; both 8 TB/s (HBM3e; GB200 NVL72's 576 TB/s over 72 GPUs).
- B300 (Blackwell Ultra, "NVIDIA HGX B300" datasheet, 2025, eight GPUs; "*" sparse): FP4 144 | 108
  PFLOPS, FP8 72*, BF16 36*, TF32 18* PFLOPS, FP32 600 TFLOPS; per GPU dense: FP4 13500, FP8 4500,
  BF16 2250, TF32 1125, FP32 75; 8 TB/s HBM3e per GPU (GB300 NVL72's 576 TB/s over 72 GPUs); sm_103.
`cc` is the compute capability (what FP8 and MX formats need: suite/analysis/roofline/model.py).
Measured ceilings are lower (mamf-finder's best bf16 GEMMs: A100 SXM 271, H100 SXM 794 TFLOP/s).
"""

from __future__ import annotations

import re
from typing import NamedTuple


class Gpu(NamedTuple):
    label: str
    pattern: str  # regex on torch.cuda.get_device_name
    peaks: dict[str, float]  # dense TFLOP/s per format column
    mem_tbs: float  # memory bandwidth, TB/s
    cc: float  # compute capability


H100_SXM = {"fp32": 67.0, "tf32": 494.5, "bf16": 989.5, "fp16": 989.5, "fp8": 1979.0}
H100_NVL = {"fp32": 60.0, "tf32": 417.5, "bf16": 835.5, "fp16": 835.5, "fp8": 1670.5}
A100 = {"fp32": 19.5, "tf32": 156.0, "bf16": 312.0, "fp16": 312.0}

PEAKS: list[Gpu] = [
    # First match wins: specific ones first. Names as the driver reports them, e.g. 'NVIDIA H100
    # 80GB HBM3' (SXM), 'NVIDIA H100 PCIe', 'NVIDIA H100 NVL', 'NVIDIA H200', 'NVIDIA GH200 480GB',
    # 'NVIDIA A100-SXM4-80GB', 'NVIDIA A100 80GB PCIe', 'NVIDIA A100-PCIE-40GB', 'NVIDIA L4',
    # 'NVIDIA L40S', 'NVIDIA B200', 'NVIDIA GB200', 'NVIDIA B300 SXM6 AC'.
    Gpu("GB200", r"\bGB200\b", {"fp32": 80.0, "tf32": 1250.0, "bf16": 2500.0, "fp16": 2500.0, "fp8": 5000.0,
                                "fp4": 10000.0}, 8.0, 10.0),
    Gpu("B200", r"\bB200\b", {"fp32": 80.0, "tf32": 1125.0, "bf16": 2250.0, "fp16": 2250.0, "fp8": 4500.0,
                              "fp4": 9000.0}, 8.0, 10.0),
    Gpu("B300", r"\bB300\b", {"fp32": 75.0, "tf32": 1125.0, "bf16": 2250.0, "fp16": 2250.0, "fp8": 4500.0,
                              "fp4": 13500.0}, 8.0, 10.3),
    Gpu("GH200", r"\bGH200\b", H100_SXM, 4.9, 9.0),
    Gpu("H200 NVL", r"\bH200\b.*\bNVL\b", H100_NVL, 4.8, 9.0),
    Gpu("H200", r"\bH200\b", H100_SXM, 4.8, 9.0),
    Gpu("H100 NVL", r"\bH100\b.*\bNVL\b", H100_NVL, 3.9, 9.0),
    Gpu("H100 PCIe", r"\bH100\b.*\bPCIe\b", {"fp32": 51.0, "tf32": 378.0, "bf16": 756.5, "fp16": 756.5,
                                             "fp8": 1513.0}, 2.0, 9.0),
    Gpu("H100 SXM", r"\bH100\b", H100_SXM, 3.35, 9.0),
    Gpu("A100 PCIe", r"\bA100\b.*\bPCIe\b", A100, 1.935, 8.0),
    Gpu("A100 SXM", r"\bA100\b", A100, 2.039, 8.0),
    Gpu("L40S", r"\bL40S\b", {"fp32": 91.6, "tf32": 183.0, "bf16": 362.05, "fp16": 362.05, "fp8": 733.0}, 0.864, 8.9),
    Gpu("L4", r"\bL4\b", {"fp32": 30.3, "tf32": 60.0, "bf16": 121.0, "fp16": 121.0, "fp8": 242.5}, 0.3, 8.9),
]


def match_gpu(device_name: str | None) -> Gpu | None:
    """The table's row for a GPU name (or a short name such as 'h100', 'a100-pcie', 'gb200'), or
    None for CPUs and GPUs not in the table."""
    if not device_name:
        return None
    for gpu in PEAKS:
        if re.search(gpu.pattern, device_name, re.IGNORECASE):
            return gpu
    return None


def match_device(device_name: str | None) -> tuple[str, dict[str, float]] | None:
    """(label, peaks) for a GPU name, or None for CPUs and GPUs not in the table."""
    gpu = match_gpu(device_name)
    return (gpu.label, gpu.peaks) if gpu else None


def peak_tflops(device_name: str | None, column: str | None) -> float | None:
    """Dense vendor peak of a format column (a precision's: `suite.scenario.registry.peak_column`)
    on this device, or None where unknown (CPUs, other GPUs, no column)."""
    found = match_device(device_name)
    if found is None or column is None:
        return None
    return found[1].get(column)
