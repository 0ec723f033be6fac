"""Collective bytes and time per step, measured with torch.profiler on a few extra steps.

The profiler records every c10d call with its tensors' sizes and dtypes (`record_shapes`), and the
work the backend did: gloo's worker-thread ops on a CPU (`gloo:all_gather`, ...), NCCL's kernels on
a GPU (`ncclDevKernel_AllGather_...`). From the exported trace (its JSON is the profiler's public
output format):
- bytes: the tensors FSDP2 handed to `c10d::_allgather_base_` (the gathered output, what each rank
  ends up holding: nccl-tests' "size") and `c10d::_reduce_scatter_base_` (the unreduced input),
  at their real dtypes, so float8 all-gather shows as half the bytes of bf16 because it *was* half;
- time: the backend's execution of those collectives (NCCL kernel time on a GPU, which may overlap
  compute; gloo's op time on a CPU). gloo runs a reduce-scatter as an all-reduce of the whole
  input, so on a CPU its all-reduces of exactly a reduce-scatter's input size count as that.

The steps profiled are not the timed ones: profiling slows them.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path
from typing import Callable

# element sizes of the C++ type names the profiler writes under "Input type"
TYPE_BYTES = {
    "float": 4, "double": 8, "c10::BFloat16": 2, "c10::Half": 2, "unsigned char": 1, "signed char": 1,
    "bool": 1, "short int": 2, "int": 4, "long int": 8, "c10::Float8_e4m3fn": 1, "c10::Float8_e5m2": 1,
    "c10::Float8_e4m3fnuz": 1, "c10::Float8_e5m2fnuz": 1, "c10::Float8_e8m0fnu": 1,
}
# c10d op -> (kind, which tensor argument is counted: 0 = output, 1 = input)
CALLS = {"c10d::_allgather_base_": ("allgather", 0), "c10d::_reduce_scatter_base_": ("reduce_scatter", 1)}
NCCL_KERNEL = re.compile(r"nccl.*(AllGather|ReduceScatter)", re.IGNORECASE)


def _nbytes(dims, type_name: str) -> int:
    if type_name not in TYPE_BYTES:
        raise ValueError(f"collective tensor of unknown element type {type_name!r} in the profiler trace")
    n = 1
    for d in dims:
        n *= int(d)
    return n * TYPE_BYTES[type_name]


def summarise(trace: dict, steps: int) -> dict:
    """Per-step bytes and milliseconds of all-gathers and reduce-scatters in a chrome trace."""
    out = {"allgather_bytes_per_step": 0, "reduce_scatter_bytes_per_step": 0,
           "allgather_ms_per_step": 0.0, "reduce_scatter_ms_per_step": 0.0,
           "allgather_calls_per_step": 0, "reduce_scatter_calls_per_step": 0}
    events = [e for e in trace.get("traceEvents", []) if e.get("ph") == "X"]
    scatter_inputs: Counter = Counter()  # element counts of reduce-scatter inputs (gloo's all-reduces)
    kernels_seen = False
    for e in events:
        call = CALLS.get(e.get("name"))
        if call is None:
            continue
        kind, arg = call
        args = e.get("args", {})
        dims, types = args["Input Dims"][arg], args["Input type"][arg]
        out[f"{kind}_bytes_per_step"] += _nbytes(dims, types)
        out[f"{kind}_calls_per_step"] += 1
        if kind == "reduce_scatter":
            scatter_inputs[tuple(dims)] += 1
    for e in events:
        name, dur_ms = e.get("name", ""), float(e.get("dur", 0.0)) / 1e3
        match = NCCL_KERNEL.search(name) if e.get("cat") == "kernel" else None
        if match:
            kernels_seen = True
            kind = "allgather" if match.group(1).lower() == "allgather" else "reduce_scatter"
            out[f"{kind}_ms_per_step"] += dur_ms
        elif name == "gloo:all_gather":
            out["allgather_ms_per_step"] += dur_ms
        elif name in ("gloo:reduce_scatter", "gloo:all_reduce"):
            dims = tuple(e.get("args", {}).get("Input Dims", [[]])[0])
            if name == "gloo:reduce_scatter" or scatter_inputs[dims] > 0:
                if name == "gloo:all_reduce":
                    scatter_inputs[dims] -= 1
                out["reduce_scatter_ms_per_step"] += dur_ms
    out["collective_timer"] = "nccl kernels" if kernels_seen else "gloo ops"
    for key in list(out):
        if key.endswith("_per_step"):
            value = out[key] / steps
            out[key] = value if key.endswith("ms_per_step") else int(round(value))
    return out


def profile(fn: Callable[[], object], steps: int, device, trace_path: Path) -> dict:
    """Run `fn` `steps` times under torch.profiler, keep the trace at `trace_path`, and return the
    collectives' bytes and times per step (`summarise`)."""
    import torch
    from torch.profiler import ProfilerActivity

    activities = [ProfilerActivity.CPU]
    if torch.device(device).type == "cuda":
        activities.append(ProfilerActivity.CUDA)
    with torch.profiler.profile(activities=activities, record_shapes=True) as prof:
        for _ in range(steps):
            fn()
        if torch.device(device).type == "cuda":
            torch.cuda.synchronize(device)
    prof.export_chrome_trace(str(trace_path))
    return summarise(json.loads(Path(trace_path).read_text()), steps)
