"""The cases of one setting measured in this process: each case's recipe set up, its workload
prepared, its first call checked for accuracy, then the one timing loop (`suite.measure.timing`)
for all of them together: their batches interleaved in paired rounds (`timing.measure_paired`), a
case whose call does not fit a round timed alone after them, or one case after another where they
cannot be paired. Returns each case's record
(`suite.measure.record`); a failing case never raises, and never costs the others their records.

A setting is a case and the cases measured against the same baseline (`suite.fleet.shard.settings`:
fp32, and bf16 and fp16 against it, at one shape). Caches, the first (compiling) call, the accuracy
check and the warm-up stay each case's own; each case's batches run inside its own precision's
`active()`, entered and restored around every batch, so no flag one case sets is in force while
another's calls run.
"""

from __future__ import annotations

import gc
import time
import zlib
from dataclasses import dataclass
from typing import Callable

import torch

from suite.core.errors import Unsupported
from suite.core.quantiles import quantile
from suite.measure import attribution, contention, record as records, telemetry
from suite.measure.record import Record
from suite.measure.timing import Paired, Party, measure_paired, time_once
from suite.precisions import compiler, flags
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


def run_case(case: Case, device: torch.device, clock, run_meta: dict) -> Record:
    """The record of `case`, measured here with `clock` (`timing.clock_for(device)`)."""
    return run_setting([case], device, clock, run_meta)[0]


def run_setting(cases: list[Case], device: torch.device, clock, run_meta: dict,
                partners: frozenset[str] = frozenset()) -> list[Record]:
    """The records of one setting's `cases`, in their order, measured here together. The cases in
    `partners` (case ids) are timed with the others but give no record: their records are in the
    journal already (a resumed run), and the others' paired speedups need them in the rounds."""
    began = time.perf_counter()
    compiler.cold_start()  # once for the setting: its members' compiled code lives until the next one's
    threads = torch.get_num_threads()  # of the process that runs it (a child too)
    members = [_Member(case, records.started(case, run_meta).replace(cpu_threads=threads)) for case in cases]
    try:
        ready = [m for m in members if _set_up(m, device, clock)]
        if ready:
            _time_together(ready, members, device)
    finally:
        for member in members:
            member.prepared = None  # its tensors go now, before the next setting's
        release(device, failed=any(m.record["status"] == "failed" for m in members))
    case_s = time.perf_counter() - began
    return [m.record.replace(case_s=case_s) for m in members if m.case.case_id not in partners]


@dataclass
class _Member:
    """One case of the setting on its way: its latest record (each step derives the next: a
    `records.Draft` of its own), then its recipe, prepared workload and clock once set up, and its
    checked first call (ms) and the seconds spent before timing."""

    case: Case
    record: Record
    precision: object = None
    prepared: object = None
    clock: object = None
    first_ms: float | None = None
    spent_s: float = 0.0

    def party(self) -> Party:
        return Party(self.case.precision, self.prepared.fn, self.clock, self.case.timing, self.precision.active,
                     self.first_ms, self.spent_s)


def _set_up(member: _Member, device: torch.device, clock) -> bool:
    """The case's recipe, workload and clock, its first call and accuracy check; False where it
    cannot be timed (its record then says skipped or failed, and why)."""
    case = member.case
    with records.outcome(member):
        # the recipe with this case's parameters applied (TE scaling knobs, FP8 padding)
        precision = registry.precision(case.precision).configured(case.params)
        workload = registry.workload(case.workload)
        member.record = member.record.replace(emulated=precision.emulated(device))
        reason = precision.unsupported(device)
        if reason:
            raise Unsupported(reason)
        member.clock = clock.for_rule(case.timing)  # the case's timing mode and cache; may not apply here
        with precision.active():
            member.record = member.record.replace(
                matmul_flags=", ".join(f"{k}={v}" for k, v in flags.snapshot().items()))
            member.prepared = workload.prepare(case, precision, device)
            member.record = member.record.with_columns(timed_first_call(member.prepared, member.clock.sync))
            member.first_ms, member.spent_s = _check(member)
        member.precision = precision
        return True
    return False


def pairing_seed(cases: list[Case]) -> int:
    """The seed of a setting's rounds' order: from its cases' ids and the scenario's seed, so a
    rerun of the same setting draws the same order."""
    return zlib.crc32(f"{min(c.case_id for c in cases)}:{cases[0].seed}".encode())


def _time_together(ready: list[_Member], members: list[_Member], device: torch.device) -> None:
    """Time the set-up members (with a workload's peer harness, for a case alone) and fill in every
    member's record: timing, telemetry, other work on the machine meanwhile, derived and pairing
    columns."""
    peer = ready[0].prepared.peer if len(ready) == 1 else None
    with telemetry.Sampler.for_device(device) as sampler, contention.Watch() as machine:
        result = measure_paired([m.party() for m in ready], seed=pairing_seed([m.case for m in members]),
                                peer=peer, sm_clock_mhz=sampler.sm_clock_mhz, energy_mj=sampler.energy_mj)
    for i, member in enumerate(ready):
        with records.outcome(member):
            _finish(member, result, i, sampler, device)
            member.record = member.record.with_columns(machine.columns())
    if len(members) > 1 or peer is not None:
        pairings = [_pairing(members, ready, result, i) for i in range(len(ready))]  # from the records as timed
        for member, columns in zip(ready, pairings):
            member.record = member.record.with_columns(columns)
    elif ready[0].case.baseline_case_id not in (None, ready[0].case.case_id):  # its baseline is not in the run
        first = ready[0]
        first.record = first.record.replace(pairing_note=f"its baseline {first.case.baseline} was not timed with it")


def _finish(member: _Member, result: Paired, i: int, sampler, device: torch.device) -> None:
    """A timed member's record: its measurement's columns, the profiler's split, derived columns
    and its peer's, each step a record of its own (an error in one keeps the steps before it); the
    error its calls raised, if they did."""
    if result.errors[i] is not None:
        raise result.errors[i]
    measurement, prepared = result.measurements[i], member.prepared
    with member.precision.active():  # untimed: which kernels ran, a layer step's GEMM/other split
        member.record = member.record.with_columns(attribution.untimed(prepared, member.clock.sync, device,
                                                                       measurement))
    member.record = member.record.replace(status="ok", **sampler.columns(measurement),
                                          **records.measured(measurement, prepared))
    if prepared.derive is not None:
        member.record = member.record.with_columns(prepared.derive(measurement.median_ms / 1e3))
    if prepared.peer is not None and result.peer_ms:
        blocks = [quantile(sorted(block), 0.5) for block in result.peer_ms]
        ratios = records.round_ratios(measurement.batch_medians_ms, blocks) if result.paired else []
        member.record = member.record.with_columns(prepared.peer.columns(
            [t for block in result.peer_ms for t in block], ratios, measurement.median_ms))


def _pairing(members: list[_Member], ready: list[_Member], result: Paired, i: int) -> dict:
    """The pairing columns of ready member i: its speedup from the rounds over its baseline's
    batches, or why there is none (its baseline not in this setting's run, skipped or failed)."""
    case = ready[i].case
    where = {m.case.case_id: j for j, m in enumerate(ready)}
    base_index = where.get(case.baseline_case_id)
    why = None
    if base_index is None or result.measurements[base_index] is None:
        base = next((m for m in members if m.case.case_id == case.baseline_case_id), None)
        why = (f"its baseline {case.baseline} was not timed with it" if base is None
               else f"its baseline {case.baseline} {base.record['status']}: {base.record['reason']}")
        base_index = None
    if case.baseline_case_id is None:
        base_index = i  # no baseline precision: nothing to take a speedup over
    return records.pairing(result, i, min(m.case.case_id for m in members), base_index, why)


def _check(member: _Member) -> tuple[float | None, float]:
    """The accuracy check of a prepared member, its columns added to its record: (the first call's
    time where the check timed it, seconds that count against the case cap)."""
    prepared, clock = member.prepared, member.clock
    wall = getattr(clock, "wall", time.perf_counter)
    checked_at = wall()
    first_ms, spent_s = None, 0.0
    if prepared.check_output is not None:
        # The first call is timed (calibration) and its output checked: one call, not two.
        out: list = []

        def first_call():
            out.append(prepared.fn())
            return out[-1]  # as every timed call returns it: a clock that reads it (tests' virtual one) sees this call

        first_ms = clock.time_batch(first_call, 1)[0]
        checked = prepared.check_output(out.pop())
        spent_s = wall() - checked_at  # counts against the case cap
    else:
        checked = prepared.check()  # first call doubles as the compile/allocate call
        # a workload's own check (reference training steps) is not timing: spent_s stays 0
    member.record = member.record.with_columns({**checked, "check_s": wall() - checked_at})
    return first_ms, spent_s
