"""One case measured in this process: its recipe set up, its workload prepared, its first call
checked for accuracy, then the one timing loop (`suite.measure.timing`). Returns the case's record
(`suite.measure.record`); a failing case never raises.
"""

from __future__ import annotations

import gc
import time
from typing import Callable

import torch

from suite.core.errors import Unsupported
from suite.measure import attribution, record as records, telemetry
from suite.measure.timing import measure, time_once
from suite.precisions import flags
from suite.scenario import registry
from suite.scenario.plan import Case


def release(device: torch.device, failed: bool) -> None:
    """Free what a case left behind and hand cached CUDA blocks back, so an out-of-memory case
    does not starve the next one. Reference counting frees a finished case's tensors; a full
    collection (about 0.2 s with torch and pandas loaded) is only paid where garbage cycles can
    hold memory that matters: after a failure (tracebacks reference frames) and on a GPU."""
    if failed or device.type == "cuda":
        gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()


def timed_first_call(prepared, sync: Callable[[], None]) -> dict:
    """Make the workload's one-time first call (a compiled case's compiling call), timed and
    synchronised; returns its record column ({"compile_s": seconds}), or {} where it has none."""
    if prepared.first_call is None:
        return {}
    seconds = time_once(prepared.first_call, sync)
    return {prepared.first_call_column: seconds} if prepared.first_call_column else {}


def run_case(case: Case, device: torch.device, clock, run_meta: dict) -> dict:
    """The record of `case`, measured here with `clock` (`timing.clock_for(device)`)."""
    began = time.perf_counter()
    record = records.started(case, run_meta)
    record["cpu_threads"] = torch.get_num_threads()  # of the process that runs the case (a child too)
    try:
        with records.outcome(record):
            _measure(case, device, clock, record)  # its prepared case is gone when it returns or raises
    finally:
        release(device, failed=record["status"] == "failed")
    record["case_s"] = time.perf_counter() - began
    return record


def _measure(case: Case, device: torch.device, clock, record: dict) -> None:
    # the recipe with this case's parameters applied (TE scaling knobs, FP8 padding)
    precision = registry.precision(case.precision).configured(case.params)
    workload = registry.workload(case.workload)
    record["emulated"] = precision.emulated(device)
    reason = precision.unsupported(device)
    if reason:
        raise Unsupported(reason)
    case_clock = clock.for_rule(case.timing)  # the case's timing mode and cache; may not apply here
    with precision.active():
        record["matmul_flags"] = ", ".join(f"{k}={v}" for k, v in flags.snapshot().items())
        prepared = workload.prepare(case, precision, device)
        record.update(timed_first_call(prepared, case_clock.sync))
        first_ms, spent_s = _check(prepared, case_clock, record)
        with telemetry.Sampler.for_device(device) as sampler:
            result = measure(prepared.fn, case_clock, case.timing, first_call_ms=first_ms, spent_s=spent_s,
                             sm_clock_mhz=sampler.sm_clock_mhz, energy_mj=sampler.energy_mj)
        record.update(attribution.untimed(prepared, case_clock.sync, device, result))  # which kernels ran
    record.update(status="ok", **sampler.columns(result), **records.measured(result, prepared))
    if prepared.derive is not None:
        record.update(prepared.derive(result.median_ms / 1e3))


def _check(prepared, clock, record: dict) -> tuple[float | None, float]:
    """The accuracy check, its columns into `record`: (the first call's time where the check timed
    it, seconds that count against the case cap)."""
    wall = getattr(clock, "wall", time.perf_counter)
    checked_at = wall()
    first_ms, spent_s = None, 0.0
    if prepared.check_output is not None:
        # The first call is timed (calibration) and its output checked: one call, not two.
        out: list = []
        first_ms = clock.time_batch(lambda: out.append(prepared.fn()), 1)[0]
        record.update(prepared.check_output(out.pop()))
        spent_s = wall() - checked_at  # counts against the case cap
    else:
        record.update(prepared.check())  # first call doubles as the compile/allocate call
        # a workload's own check (reference training steps) is not timing: spent_s stays 0
    record["check_s"] = wall() - checked_at
    return first_ms, spent_s
