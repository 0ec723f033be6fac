"""Run cases one by one and turn each into a record. A failing case never stops the run.

The runner writes no files: it yields records, and the caller stores them (`suite.store`).
"""

from __future__ import annotations

import gc
import sys
import time
from datetime import datetime, timezone
from typing import Iterable, Iterator, TextIO

import torch

from suite import peaks, registry
from suite.accuracy import NonFiniteOutput
from suite.plan import Case
from suite.precisions import flags
from suite.store import SCHEMA_VERSION
from suite.timing import clock_for, measure
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
        "peak_tflops": peaks.peak_tflops(run_meta.get("device_name"), case.precision),
        "status": "failed",
        "reason": None,
    }


def _error(err: BaseException) -> str:
    text = f"{type(err).__name__}: {err}".strip()
    return text.splitlines()[0][:500] if text else type(err).__name__


def _release(device: torch.device) -> None:
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()


def run_case(case: Case, device: torch.device, clock, run_meta: dict) -> dict:
    record = base_record(case, run_meta)
    record["started_at"] = datetime.now(timezone.utc).isoformat(timespec="seconds")
    prepared = None
    try:
        precision = registry.precision(case.precision)
        workload = registry.workload(case.workload)
        record["emulated"] = precision.emulated(device)
        reason = precision.unsupported(device)
        if reason:
            raise Unsupported(reason)
        with precision.active():
            record["matmul_flags"] = ", ".join(f"{k}={v}" for k, v in flags.snapshot().items())
            prepared = workload.prepare(case, precision, device)
            record.update(prepared.check())  # first call doubles as the compile/allocate call
            result = measure(prepared.fn, clock, case.timing)
        median_s = result.median_ms / 1e3
        record.update(
            status="ok",
            time_ms_median=result.median_ms,
            time_ms_p10=result.p10_ms,
            time_ms_p90=result.p90_ms,
            n_samples=len(result.samples_ms),
            samples_ms=result.samples_ms,
            rel_ci=result.rel_ci,
            stop_reason=result.stop_reason,
            warmup_calls=result.warmup_calls,
            timer=result.clock,
            flops=prepared.flops,
            bytes_moved=prepared.bytes_moved,
            tflops=prepared.flops / median_s / 1e12 if prepared.flops else None,
            gbps=prepared.bytes_moved / median_s / 1e9 if prepared.bytes_moved else None,
            **prepared.extra,
        )
    except Unsupported as err:
        record.update(status="skipped", reason=str(err))
    except NonFiniteOutput as err:
        record.update(status="failed", reason=str(err))
    except KeyboardInterrupt:
        raise
    except Exception as err:  # one broken case must not cost the others: record it and go on
        record.update(status="failed", reason=_error(err))
    finally:
        del prepared
        _release(device)
    return record


def _fmt_duration(seconds: float) -> str:
    seconds = int(round(seconds))
    return f"{seconds // 60}:{seconds % 60:02d}"


class Progress:
    """One line per case: position, case, outcome, elapsed time and an estimate of what is left."""

    def __init__(self, total: int, stream: TextIO | None = None):
        self.total, self.stream, self.start, self.done = total, stream or sys.stderr, time.perf_counter(), 0
        self.width = len(str(total))

    def begin(self, case: Case) -> None:
        self.stream.write(f"[{self.done + 1:>{self.width}}/{self.total}] {case.label} ... ")
        self.stream.flush()

    def end(self, record: dict) -> None:
        self.done += 1
        elapsed = time.perf_counter() - self.start
        left = elapsed / self.done * (self.total - self.done)
        if record["status"] == "ok":
            rate = f" {record['tflops']:.3g} TFLOP/s" if record.get("tflops") else ""
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
) -> Iterator[dict]:
    """Yield one record per case, in order. Records are yielded as soon as each case ends."""
    clock = clock_for(device)
    for case in cases:
        if progress:
            progress.begin(case)
        record = run_case(case, device, clock, run_meta)
        if progress:
            progress.end(record)
        yield record
