"""Run cases one by one and turn each into a record. A failing case never stops the run.

The runner writes no files: it yields records, and the caller stores them (`suite.results.store`).
"""

from __future__ import annotations

import gc
import queue
import sys
import threading
import time
from datetime import datetime, timezone
from typing import Callable, Iterable, Iterator, TextIO

import torch

from suite.measure import attribution, env, peaks, telemetry
from suite.scenario import registry
from suite.errors import NonFiniteOutput, TimingUnsupported, Unsupported
from suite.scenario.plan import Case
from suite.precisions import flags
from suite.measure.timing import clock_for, measure, time_once
from suite.text import printable


def base_record(case: Case, run_meta: dict) -> dict:
    return {
        **run_meta,
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


def run_meta(device: torch.device) -> dict:
    """Run-level metadata of this machine. Without the requested GPU the device columns say so (no
    name, no capability) while versions, host and code are still recorded."""
    if device_unavailable(device) is None:
        return env.capture(device)
    cpu = torch.device("cpu")
    meta = env.capture(cpu)
    meta.update({key: None for key in env.device_info(cpu)}, device=device.type)
    return meta


def skipped_record(case: Case, run_meta: dict, reason: str) -> dict:
    record = base_record(case, run_meta)
    record.update(status="skipped", reason=reason,
                  started_at=datetime.now(timezone.utc).isoformat(timespec="seconds"))
    return record


def timed_first_call(prepared, sync: Callable[[], None]) -> dict:
    """Make the workload's one-time first call (a compiled case's compiling call), timed and
    synchronised; returns its record column ({"compile_s": seconds}), or {} where it has none."""
    if prepared.first_call is None:
        return {}
    seconds = time_once(prepared.first_call, sync)
    return {prepared.first_call_column: seconds} if prepared.first_call_column else {}


def measured_columns(result, prepared) -> dict:
    """The record columns of a measurement (`timing.Measurement`) of a prepared case."""
    median_s = result.median_ms / 1e3
    return dict(
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
        first_call_ms=result.first_call_ms,
        first_call_kept=result.first_call_kept,
        case_cap_s=result.case_cap_s,
        timer=result.clock,
        timing_mode=result.timing_mode,
        cache=result.cache,
        flops=prepared.flops,
        bytes_moved=prepared.bytes_moved,
        tflops=prepared.flops / median_s / 1e12 if prepared.flops else None,
        gbps=prepared.bytes_moved / median_s / 1e9 if prepared.bytes_moved else None,
        **telemetry.energy_columns(result, prepared.flops),  # null where the GPU's energy was not read
        **prepared.extra,
    )


def run_case(case: Case, device: torch.device, clock, run_meta: dict) -> dict:
    known = registry.WORKLOADS.get(case.workload)
    if known is not None and known.launched:  # its ranks run under torchrun, one launch per case
        from suite.measure import launch

        return launch.run_case(case, device, run_meta)
    began = time.perf_counter()
    record = base_record(case, run_meta)
    record["started_at"] = datetime.now(timezone.utc).isoformat(timespec="seconds")
    record["cpu_threads"] = torch.get_num_threads()  # of the process that runs the case (a child too)
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
            record.update(timed_first_call(prepared, case_clock.sync))
            wall = getattr(case_clock, "wall", time.perf_counter)
            checked_at = wall()
            first_ms = None
            if prepared.check_output is not None:
                # The first call is timed (calibration) and its output checked: one call, not two.
                out: list = []
                first_ms = case_clock.time_batch(lambda: out.append(prepared.fn()), 1)[0]
                record.update(prepared.check_output(out.pop()))
                spent_s = wall() - checked_at  # counts against the case cap
            else:
                record.update(prepared.check())  # first call doubles as the compile/allocate call
                spent_s = 0.0  # a workload's own check (reference training steps) is not timing
            record["check_s"] = wall() - checked_at
            with telemetry.Sampler.for_device(device) as sampler:
                result = measure(prepared.fn, case_clock, case.timing, first_call_ms=first_ms, spent_s=spent_s,
                                 sm_clock_mhz=sampler.sm_clock_mhz, energy_mj=sampler.energy_mj)
            if prepared.split_kernels:  # untimed: the profiler's view of the same calls
                record.update(attribution.kernel_split(prepared.fn, case_clock.sync, device))
        record.update(status="ok", **sampler.columns(result), **measured_columns(result, prepared))
        if prepared.derive is not None:
            record.update(prepared.derive(result.median_ms / 1e3))
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
    record["case_s"] = time.perf_counter() - began
    return record


def _fmt_duration(seconds: float) -> str:
    seconds = int(round(seconds))
    return f"{seconds // 60}:{seconds % 60:02d}"


def case_work(case: Case) -> float | None:
    """What a case computes, known before it runs: 2*M*N*K for a shaped case (a layer's training
    step is three such GEMMs), None where the shape lives in params (a model's step)."""
    if case.m is None or case.k is None or case.n is None:
        return None
    return 2.0 * case.m * case.n * case.k * registry.gemms_per_call(case.workload)


class CostModel:
    """Predicts a case's wall time from what finished cases showed: each precision's speed (work
    per second of one call) times the case's work, bounded the way the timing rule bounds a case
    (at most the cap plus one call). Case counts are no ETA when one case is 1000 times another."""

    def __init__(self, device_type: str):
        self.device_type = device_type
        self.speed: dict[str, float] = {}  # precision -> work per second of one call
        self.walls: list[float] = []  # wall seconds of finished cases

    def learn(self, case: Case, record: dict, wall_s: float) -> None:
        self.walls.append(wall_s)
        work, call_ms = case_work(case), record.get("time_ms_median")
        if record.get("status") == "ok" and work and call_ms:
            self.speed[case.precision] = work / (call_ms / 1e3)

    def call_s(self, case: Case) -> float | None:
        work = case_work(case)
        speed = self.speed.get(case.precision) or (min(self.speed.values()) if self.speed else None)
        return work / speed if work and speed else None

    def wall_s(self, case: Case) -> float:
        rule = case.timing
        typical = sorted(self.walls)[len(self.walls) // 2] if self.walls else rule.warmup_s + rule.budget_s
        call = self.call_s(case)
        if call is None:
            return typical
        cap = rule.case_cap(self.device_type)
        return min(cap + call, max(typical, call * (rule.min_warmup + rule.min_samples)))


# A case running longer than this gets a heartbeat line, and another every HEARTBEAT_EVERY_S.
HEARTBEAT_AFTER_S = 5.0
HEARTBEAT_EVERY_S = 10.0


class Progress:
    """One line per case: position, case, outcome, elapsed time and an estimate of what is left,
    weighted by each case's predicted cost (`CostModel`); a heartbeat line during a long case."""

    def __init__(self, total: int, stream: TextIO | None = None, already_done: int = 0, device_type: str = "cpu"):
        self.total, self.stream, self.start, self.done = total, stream or sys.stderr, time.perf_counter(), already_done
        self.width = len(str(self.total))
        self.already_done = already_done  # finished by an earlier process of a resumed run
        self.cost = CostModel(device_type)
        self._todo: list[Case] = []
        self._case: Case | None = None
        self._case_start = 0.0
        self._next_beat = HEARTBEAT_AFTER_S
        self.out_of_order = False  # cases finish elsewhere, several at once (`finished`)

    def plan(self, todo: list[Case]) -> None:
        """The cases this process will run, in order (for the work-weighted estimate)."""
        self._todo = list(todo)

    def begin(self, case: Case) -> None:
        self._case, self._case_start, self._next_beat = case, time.perf_counter(), HEARTBEAT_AFTER_S
        self.stream.write(f"[{self.done + 1:>{self.width}}/{self.total}] {case.label} ... ")
        self.stream.flush()

    def finished(self, case: Case, record: dict) -> None:
        """A case that ran elsewhere (a Ray worker) has ended: its line at once. Such cases finish out
        of order and several at a time, so the estimate left is the average rate so far."""
        self.out_of_order = True
        self.begin(case)
        self.end(record)

    def heartbeat(self, running_s: float) -> None:
        """Called while a case runs; writes a line once it has run HEARTBEAT_AFTER_S, then every
        HEARTBEAT_EVERY_S, so a minute-long case is visibly alive."""
        if running_s < self._next_beat or self._case is None:
            return
        self._next_beat = running_s + HEARTBEAT_EVERY_S
        guess = self.cost.wall_s(self._case) if self.cost.speed else None
        expected = f", expected ~{_fmt_duration(guess)}" if guess and guess > running_s else ""
        self.stream.write(f"\n    ... {self._case.label}: still running after {_fmt_duration(running_s)}{expected} ")
        self.stream.flush()

    def interrupted(self) -> None:
        """End the half-written line of the case that was running when the run was stopped."""
        if self._case is not None:
            self.stream.write("interrupted\n")
            self.stream.flush()

    def left_s(self) -> float:
        return sum(self.cost.wall_s(c) for c in self._todo)

    def end(self, record: dict) -> None:
        self.done += 1
        now = time.perf_counter()
        elapsed = now - self.start
        if self._case is not None:
            self.cost.learn(self._case, record, now - self._case_start)
            if self._todo and self._todo[0] is self._case:
                self._todo.pop(0)
        if (self._todo or self._case is not None) and not self.out_of_order:
            left = self.left_s()
        else:  # no plan given: the average case so far
            left = elapsed / max(1, self.done - self.already_done) * (self.total - self.done)
        if record["status"] == "ok":
            rate = f" {record['tflops']:.3g} TFLOP/s" if record.get("tflops") else ""
            if record.get("emulated"):
                rate = " (emulated: not device speed)"
            err = f" rel_err {record['rel_err']:.2e}" if record.get("rel_err") is not None else ""
            few = ""
            if record.get("stop_reason") == "cap":
                few = f" ({record['n_samples']} sample{'s' * (record['n_samples'] != 1)}: case cap {record['case_cap_s']:g} s)"
            what = f"ok {record['time_ms_median']:.4g} ms{rate}{err}{few}"
        else:
            what = f"{record['status']}: {record['reason']}"
        self._write_end(what, elapsed, left, long=now - self._case_start >= HEARTBEAT_AFTER_S)
        self._case = None

    def _write_end(self, what: str, elapsed: float, left: float, long: bool) -> None:
        if self._case is not None and long:  # heartbeat lines came between: name the case again
            what = f"\n[{self.done:>{self.width}}/{self.total}] {self._case.label}: {what}"
        self.stream.write(f"{what}  [{_fmt_duration(elapsed)} elapsed, ~{_fmt_duration(left)} left]\n")
        self.stream.flush()

    def close(self) -> None:
        """The run is over (finished or stopped)."""


class TerminalProgress(Progress):
    """On a terminal: the finished cases' lines scroll above a rich progress bar (the case running
    and for how long, cases done, elapsed, the work-weighted estimate of what is left). Piped
    output gets `Progress`'s plain lines instead, which logs and CI read better."""

    def __init__(self, total: int, stream: TextIO | None = None, already_done: int = 0, device_type: str = "cpu",
                 force_terminal: bool | None = None):
        super().__init__(total, stream, already_done, device_type)
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, Progress as Bar, TextColumn, TimeElapsedColumn

        raw = getattr(self.stream, "raw", self.stream)  # past the CLI's control-character filter: the bar's codes
        console = Console(file=raw, force_terminal=force_terminal, highlight=False, markup=False, emoji=False)
        self._bar = Bar(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                        TextColumn("{task.fields[left]}"), console=console, transient=True)
        self._task = self._bar.add_task("starting", total=total, completed=already_done, left="")
        self._bar.start()

    def begin(self, case: Case) -> None:
        self._case, self._case_start, self._next_beat = case, time.perf_counter(), HEARTBEAT_AFTER_S
        self._bar.update(self._task, description=printable(case.label))

    def heartbeat(self, running_s: float) -> None:
        if self._case is not None:
            self._bar.update(self._task, description=printable(f"{self._case.label} (running {_fmt_duration(running_s)})"))

    def interrupted(self) -> None:
        if self._case is not None:
            self._bar.console.print(printable(f"[{self.done + 1:>{self.width}}/{self.total}] {self._case.label}: interrupted"))
        self.close()

    def _write_end(self, what: str, elapsed: float, left: float, long: bool) -> None:
        label = self._case.label if self._case is not None else ""
        self._bar.console.print(printable(f"[{self.done:>{self.width}}/{self.total}] {label}: {what}"))
        self._bar.update(self._task, completed=self.done, left=f"~{_fmt_duration(left)} left")

    def close(self) -> None:
        self._bar.stop()


def progress_for(total: int, already_done: int, device_type: str, stream: TextIO | None = None) -> Progress:
    """A progress display: the rich bar on a terminal, plain lines otherwise."""
    stream = stream or sys.stderr
    kind = TerminalProgress if stream.isatty() else Progress
    return kind(total, stream, already_done=already_done, device_type=device_type)


class CaseThread:
    """Runs each case on one worker thread while the calling (main) thread waits in short polls.

    Python runs a signal handler only in the main thread and only between bytecodes, so a main
    thread inside a minute-long GEMM hears Ctrl-C when the GEMM returns (80 and 122 s, measured with
    bf16 2048^3 on an AVX2-only CPU). Waiting here instead, it acts within one poll; the abandoned
    call is left to finish or to die with the process (`busy` tells the caller to exit without
    waiting for it). One thread for the whole run, so thread-local state (autocast, cuBLAS handles)
    is set up once."""

    POLL_S = 0.1

    def __init__(self):
        self.busy = False
        self._requests: queue.Queue = queue.Queue()
        self._results: queue.Queue = queue.Queue()
        self._thread = threading.Thread(target=self._serve, name="mpsuite-case", daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while (job := self._requests.get()) is not None:
            try:
                self._results.put((job(), None))
            except BaseException as err:  # handed to the main thread, which raises it
                self._results.put((None, err))

    def call(self, job: Callable[[], dict], on_wait: Callable[[float], None] | None = None) -> dict:
        """job() on the worker thread; on_wait(seconds so far) after each poll while it runs."""
        started = time.perf_counter()
        self.busy = True  # until the result is back: an interrupt leaves it set
        self._requests.put(job)
        while True:
            try:
                result, err = self._results.get(timeout=self.POLL_S)
            except queue.Empty:
                if on_wait is not None:
                    on_wait(time.perf_counter() - started)
                continue
            self.busy = False
            if err is not None:
                raise err
            return result

    def close(self) -> None:
        """End the worker thread: now, or, when it is inside an abandoned job, once that returns
        (without waiting for it here)."""
        self._requests.put(None)
        if not self.busy:
            self._thread.join()


def run(
    cases: Iterable[Case],
    device: torch.device,
    run_meta: dict,
    progress: Progress | None = None,
    run_one: Callable[[Case], dict] | None = None,
    worker: CaseThread | None = None,
) -> Iterator[dict]:
    """Yield one record per case, in order. Records are yielded as soon as each case ends.

    `run_one(case) -> record` runs a case somewhere else (e.g. `suite.measure.isolate.CaseProcess`, a
    subprocess per case); by default cases run here, in this process, through `run_case`, on
    `worker` when given (a `CaseThread`, so that Ctrl-C is heard at once).
    """
    cases = list(cases)
    unavailable = device_unavailable(device)
    if run_one is None and unavailable is None:
        clock = clock_for(device)

        def run_one(case):
            return run_case(case, device, clock, run_meta)

    if progress:
        progress.plan(cases)
    for case in cases:
        if progress:
            progress.begin(case)
        if unavailable:
            record = skipped_record(case, run_meta, unavailable)
        elif worker is not None:
            record = worker.call(lambda: run_one(case), progress.heartbeat if progress else None)
        else:
            record = run_one(case)
        if progress:
            progress.end(record)
        yield record
