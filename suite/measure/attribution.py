"""The one untimed look at a case's calls once its samples are taken: which GEMM kernels ran
(`suite.measure.kernels`: the record's `kernels`, `kernel`, `kernel_note`) and, for a layer step,
where its time goes: its GEMMs, and everything else (FP8 scaling and casting, layout copies, norms,
activations).

One call of the case (a layer step: `STEPS`), after timing and outside the samples, so neither the
profiler's first-use cost (about a second for kineto, more for CUPTI) nor verbose output lands in a
timed sample; and on a GPU only where torch detaches CUPTI after the profile, so no later case in
the process runs slower for it (`kernels.profiler_lingers`). On a GPU it runs under torch.profiler, which names the CUDA kernels and times them; on
a CPU under oneDNN's and MKL's verbose mode, which names the library's implementation (the CPU
profiler names only aten::mm), and a layer step under the profiler too, for its split. A look that
fails leaves the columns null with a note; it never fails the case.

The split: on a GPU, CUDA kernel time is attributed by kernel name (`kernels.GPU_GEMM`; everything
else, triton and elementwise kernels included, is other); on a CPU, each op's self time
(`kernels.GEMM_OPS` are GEMMs). torchao's float8_roofline.py measures a float8 Linear's kernels the
same way (GPU kernel time from a profiler trace). The split is per step, averaged over the profiled
steps; the timing loop's median stays the case's time.
"""

from __future__ import annotations

from typing import Callable

import torch

from suite.measure import kernels
from suite.measure.record import error_text

STEPS = 3
# A look costs one more call of the case: where one call takes more than this share of the case cap
# (bf16 2048^3 takes 45 s on a CPU without native bf16, against a 5 s cap in scenarios/cpu.toml),
# it is left out and the note says so, rather than doubling the case.
LOOK_CAP_SHARE = 0.25


def untimed(prepared, sync: Callable[[], None], device: torch.device, result) -> dict:
    """The columns of the look at `prepared.fn` after its measurement `result` (`timing.Measurement`):
    kernels, kernel, kernel_note, and measured_gemm_ms / measured_other_ms for a layer step."""
    split_time = prepared.split_kernels
    cost_s = result.median_ms / 1e3
    if not split_time and result.case_cap_s and cost_s > LOOK_CAP_SHARE * result.case_cap_s:
        return kernels.Found(note=f"not looked at: one call takes {cost_s:.3g} s, more than "
                                  f"{LOOK_CAP_SHARE:g} of the {result.case_cap_s:g} s case cap").columns()
    steps = STEPS if split_time else 1
    try:
        if device.type == "cuda":
            return _on_gpu(prepared.fn, sync, steps, split_time)
        return _on_cpu(prepared.fn, sync, steps, split_time)
    except Exception as err:  # the look is no reason to lose a measured case
        return kernels.Found(note=f"kernel look failed: {error_text(err)}").columns()


def _profiled(fn: Callable[[], object], sync: Callable[[], None], steps: int, on_gpu: bool):
    """`steps` calls of fn under torch.profiler (CUDA kernels too on a GPU): the profile, or the
    error that kept the profiler from running (CUPTI missing, another profiler active)."""
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if on_gpu else [])
    sync()
    try:
        with profile(activities=activities) as prof:
            for _ in range(steps):
                fn()
            sync()
    except RuntimeError as err:
        return err
    return prof


def _lingers() -> str | None:
    """`kernels.profiler_lingers` for this process."""
    import os
    import sys

    inductor = sys.modules.get("torch._inductor.config")
    graphs = bool(inductor is not None and getattr(getattr(inductor, "triton", None), "cudagraphs", False))
    return kernels.profiler_lingers(torch.__version__, torch.version.cuda, dict(os.environ), graphs)


def _on_gpu(fn, sync, steps: int, split_time: bool) -> dict:
    lingers = _lingers()
    if lingers:  # the look must not slow the cases after it
        return kernels.Found(note=f"not looked at: {lingers}, which would slow every later case").columns()
    prof = _profiled(fn, sync, steps, on_gpu=True)
    if isinstance(prof, RuntimeError):
        return kernels.Found(note=f"torch.profiler cannot run here: {error_text(prof)}").columns()
    events = prof.events()
    names = kernels.gpu_names(events)
    note = None
    if not names:
        seen = sum(1 for e in events if kernels.is_gpu_kernel(e))
        note = (f"no GEMM among the {seen} CUDA kernels the profiler saw" if seen else
                "the profiler saw no CUDA kernel (CUPTI missing or blocked: kineto says so on stderr)")
    out = kernels.Found(names or None, note).columns()
    if split_time:
        out.update(split(prof.key_averages(), True, steps))
    return out


def _on_cpu(fn, sync, steps: int, split_time: bool) -> dict:
    prof = None
    with kernels.cpu_verbose() as found:
        if split_time:
            prof = _profiled(fn, sync, steps, on_gpu=False)
        else:
            for _ in range(steps):
                fn()
            sync()
    out = found.columns()
    if prof is not None and not isinstance(prof, RuntimeError):
        out.update(split(prof.key_averages(), False, steps))
    return out


def _self_time_us(event, on_gpu: bool) -> float:
    if on_gpu:
        return float(getattr(event, "self_device_time_total", None) or getattr(event, "self_cuda_time_total", 0.0))
    return float(event.self_cpu_time_total)


def split(events, on_gpu: bool, steps: int) -> dict:
    """{"measured_gemm_ms", "measured_other_ms"} per step from profiler events (key_averages);
    {} where no GEMM time was attributed. On a GPU only CUDA kernels count (the host ops that
    launched them would count them twice)."""
    gemm = other = 0.0
    for event in events:
        if on_gpu and not kernels.is_gpu_kernel(event):
            continue
        time_us = _self_time_us(event, on_gpu)
        if kernels.GPU_GEMM.search(event.key) if on_gpu else event.key in kernels.GEMM_OPS:
            gemm += time_us
        else:
            other += time_us
    if gemm <= 0:
        return {}
    return {"measured_gemm_ms": gemm / 1e3 / steps, "measured_other_ms": other / 1e3 / steps}
