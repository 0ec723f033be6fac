"""Run cases one by one and turn each into a record. A failing case never stops the run.

The runner writes no files: it yields records, and the caller stores them (`suite.store`).
"""

from __future__ import annotations

import gc
import sys
import time
from datetime import datetime, timezone
from typing import Callable, Iterable, Iterator, TextIO

import torch

from suite import peaks, registry, telemetry
from suite.accuracy import NonFiniteOutput
from suite.plan import Case
from suite.precisions import flags
from suite.store import SCHEMA_VERSION
from suite.timing import TimingUnsupported, clock_for, measure
from suite.workloads.base import Unsupported


def base_record(case: Case, run_meta: dict) -> dict:
    return {
        **run_meta,
        "schema_version": SCHEMA_VERSION,
        "scenario": case.scenario,
        "case_id": case.case_id,
        "baseline_case_id": case.baseline_case_id,
        "workload": case.workload,
        "precision": case.precision,
        "baseline": case.baseline,
        "m": case.m,
        "k": case.k,
        "n": case.n,
        "params": case.params_json(),
        "seed": case.seed,
        # vendor GPU peaks only: a CPU model name is never looked up in the GPU table
        "peak_tflops": peaks.peak_tflops(run_meta.get("device_name"), case.precision)
        if run_meta.get("device") == "cuda" else None,
        "status": "failed",
        "reason": None,
    }


def _error(err: BaseException) -> str:
    text = f"{type(err).__name__}: {err}".strip()
    return text.splitlines()[0][:500] if text else type(err).__name__


def _release(device: torch.device, failed: bool) -> None:
    """Free what a case left behind and hand cached CUDA blocks back, so an out-of-memory case
    does not starve the next one. Reference counting frees a finished case's tensors; a full
    collection (about 0.2 s with torch and pandas loaded) is only paid where garbage cycles can
    hold memory that matters: after a failure (tracebacks reference frames) and on a GPU."""
    if failed or device.type == "cuda":
        gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()


def _missing_dependency(err: ImportError) -> bool:
    """An optional backend that is not installed (or not loadable) here: a skip, not a failure.
    A broken import inside the suite itself is a bug and stays a failure."""
    top = (err.name or "").partition(".")[0]
    return top != "suite"


def device_unavailable(device: torch.device) -> str | None:
    """Why no case can run on `device` at all (every case is then recorded as skipped), or None."""
    if device.type == "cuda" and not torch.cuda.is_available():
        return "no CUDA device: torch.cuda.is_available() is False"
    return None


def skipped_record(case: Case, run_meta: dict, reason: str) -> dict:
    record = base_record(case, run_meta)
    record.update(status="skipped", reason=reason,
                  started_at=datetime.now(timezone.utc).isoformat(timespec="seconds"))
    return record


def run_case(case: Case, device: torch.device, clock, run_meta: dict) -> dict:
    record = base_record(case, run_meta)
    record["started_at"] = datetime.now(timezone.utc).isoformat(timespec="seconds")
    prepared = None
    try:
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
            record.update(prepared.check())  # first call doubles as the compile/allocate call
            with telemetry.Sampler.for_device(device) as sampler:
                result = measure(prepared.fn, case_clock, case.timing, sm_clock_mhz=sampler.sm_clock_mhz)
        median_s = result.median_ms / 1e3
        record.update(
            status="ok",
            time_ms_median=result.median_ms,
            time_ms_p10=result.p10_ms,
            time_ms_p90=result.p90_ms,
            n_samples=len(result.samples_ms),
            samples_ms=result.samples_ms,
            rel_ci=result.rel_ci,
            rel_spread=result.rel_spread,
            stop_reason=result.stop_reason,
            warmup_calls=result.warmup_calls,
            warmup_s=result.warmup_s,
            warmup_reason=result.warmup_reason,
            timer=result.clock,
            timing_mode=result.timing_mode,
            cache=result.cache,
            **sampler.columns(result),
            flops=prepared.flops,
            bytes_moved=prepared.bytes_moved,
            tflops=prepared.flops / median_s / 1e12 if prepared.flops else None,
            gbps=prepared.bytes_moved / median_s / 1e9 if prepared.bytes_moved else None,
            **prepared.extra,
        )
        if prepared.derive is not None:
            record.update(prepared.derive(median_s))
    except (Unsupported, TimingUnsupported) as err:
        record.update(status="skipped", reason=str(err))
    except NonFiniteOutput as err:
        record.update(status="failed", reason=str(err))
    except torch.cuda.OutOfMemoryError as err:
        # The case's tensors are freed below (finally), so the next case starts with the memory back.
        record.update(status="failed", reason=f"out of memory: {_error(err)}")
    except ImportError as err:
        if not _missing_dependency(err):
            record.update(status="failed", reason=_error(err))
        else:
            record.update(status="skipped", reason=f"optional dependency not importable: {_error(err)}")
    except KeyboardInterrupt:
        raise
    except Exception as err:  # one broken case must not cost the others: record it and go on
        record.update(status="failed", reason=_error(err))
    finally:
        del prepared
        _release(device, failed=record["status"] == "failed")
    return record


def _fmt_duration(seconds: float) -> str:
    seconds = int(round(seconds))
    return f"{seconds // 60}:{seconds % 60:02d}"


class Progress:
    """One line per case: position, case, outcome, elapsed time and an estimate of what is left."""

    def __init__(self, total: int, stream: TextIO | None = None, already_done: int = 0):
        self.total, self.stream, self.start, self.done = total, stream or sys.stderr, time.perf_counter(), already_done
        self.width = len(str(total))
        self.already_done = already_done  # finished by an earlier process of a resumed run

    def begin(self, case: Case) -> None:
        self.stream.write(f"[{self.done + 1:>{self.width}}/{self.total}] {case.label} ... ")
        self.stream.flush()

    def end(self, record: dict) -> None:
        self.done += 1
        elapsed = time.perf_counter() - self.start
        left = elapsed / (self.done - self.already_done) * (self.total - self.done)
        if record["status"] == "ok":
            rate = f" {record['tflops']:.3g} TFLOP/s" if record.get("tflops") else ""
            if record.get("emulated"):
                rate = " (emulated: not device speed)"
            err = f" rel_err {record['rel_err']:.2e}" if record.get("rel_err") is not None else ""
            what = f"ok {record['time_ms_median']:.4g} ms{rate}{err}"
        else:
            what = f"{record['status']}: {record['reason']}"
        self.stream.write(f"{what}  [{_fmt_duration(elapsed)} elapsed, ~{_fmt_duration(left)} left]\n")
        self.stream.flush()


def run(
    cases: Iterable[Case],
    device: torch.device,
    run_meta: dict,
    progress: Progress | None = None,
    run_one: Callable[[Case], dict] | None = None,
) -> Iterator[dict]:
    """Yield one record per case, in order. Records are yielded as soon as each case ends.

    `run_one(case) -> record` runs a case somewhere else (e.g. `suite.isolate.CaseProcess`, a
    subprocess per case); by default cases run here, in this process, through `run_case`.
    """
    unavailable = device_unavailable(device)
    if run_one is None and unavailable is None:
        clock = clock_for(device)

        def run_one(case):
            return run_case(case, device, clock, run_meta)

    for case in cases:
        if progress:
            progress.begin(case)
        record = skipped_record(case, run_meta, unavailable) if unavailable else run_one(case)
        if progress:
            progress.end(record)
        yield record
