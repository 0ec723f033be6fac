"""Where a layer step's time goes: its GEMMs, and everything else (FP8 scaling and casting, layout
copies, norms, activations), measured with torch.profiler after the case is timed.

On a GPU, CUDA kernel time is attributed by kernel name (cuBLAS/cuBLASLt/CUTLASS GEMM kernels:
gemm, nvjet, cutlass, xmma; everything else, triton and elementwise kernels included, is other);
on a CPU, each op's self time (aten::mm and its kin are GEMMs). torchao's float8_roofline.py
measures a float8 Linear's kernels the same way (GPU kernel time from a profiler trace). The split
is per step, averaged over `STEPS` profiled steps; the timing loop's median stays the case's time.
"""

from __future__ import annotations

import re
from typing import Callable

import torch

STEPS = 3
# CUDA kernels of a GEMM library, by name: cuBLAS (sm90_xmma_gemm_*, nvjet_*), CUTLASS (cutlass::*
# with gemm/tensorop), torch's own _scaled_mm rowwise kernel (f8f8bf16_rowwise, a CUTLASS GEMM).
GPU_GEMM = re.compile(r"gemm|nvjet|cutlass|xmma|f8f8bf16", re.IGNORECASE)
# CPU ops that are a GEMM (their self time is the library call's).
CPU_GEMM = {"aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm", "aten::_scaled_mm", "aten::mkldnn_matmul",
            "aten::_addmm_activation"}


def _self_time_us(event, on_gpu: bool) -> float:
    if on_gpu:
        return float(getattr(event, "self_device_time_total", None) or getattr(event, "self_cuda_time_total", 0.0))
    return float(event.self_cpu_time_total)


def _is_gpu_kernel(event) -> bool:
    kind = getattr(event, "device_type", None)
    return kind is not None and str(kind).endswith("CUDA")


def kernel_split(fn: Callable[[], object], sync: Callable[[], None], device: torch.device) -> dict:
    """{"measured_gemm_ms", "measured_other_ms"} per call of `fn`, from the profiler; {} where the
    profiler attributed nothing (a profiler that cannot run here is no reason to fail a case)."""
    from torch.profiler import ProfilerActivity, profile

    on_gpu = device.type == "cuda"
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if on_gpu else [])
    sync()
    try:
        with profile(activities=activities) as prof:
            for _ in range(STEPS):
                fn()
            sync()
    except RuntimeError:  # no profiler here (CUPTI missing, another profiler active): no split
        return {}
    return split(prof.key_averages(), on_gpu, STEPS)


def split(events, on_gpu: bool, steps: int) -> dict:
    """{"measured_gemm_ms", "measured_other_ms"} per step from profiler events (key_averages);
    {} where no GEMM time was attributed. On a GPU only CUDA kernels count (the host ops that
    launched them would count them twice)."""
    gemm = other = 0.0
    for event in events:
        if on_gpu and not _is_gpu_kernel(event):
            continue
        time_us = _self_time_us(event, on_gpu)
        if GPU_GEMM.search(event.key) if on_gpu else event.key in CPU_GEMM:
            gemm += time_us
        else:
            other += time_us
    if gemm <= 0:
        return {}
    return {"measured_gemm_ms": gemm / 1e3 / steps, "measured_other_ms": other / 1e3 / steps}
