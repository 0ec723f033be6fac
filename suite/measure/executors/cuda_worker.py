"""A CUDA run's units (a setting's cases, timed together) in one worker process (one interpreter,
one CUDA context: cheaper than a process per case), replaced after a unit that left it unusable or
ran past its time limit.

A sticky CUDA error (an illegal access in a TE or cuBLAS kernel) in one process fails every later
CUDA call there; here it costs the case that hit it, recorded with its error, and the next unit
starts in a fresh worker. A worker that dies (a segfault) while timing a setting together costs no
case: each case of that unit runs again alone in a fresh worker (its `pairing_note` says so), so
only the case that crashes is lost. One that hangs costs its unit: a unit that runs past its time
limit (`timeout_s`, else `case_timeout(case)`, for each case it times) is recorded failed, "timed
out after N s", its worker's process group killed and the next unit started in a fresh one. The
worker's stderr is read as it comes: a unit's warning lines go in its records' `worker_warnings`, a
failed case's last lines in `isolate_log`. The worker is `suite.measure.executors.child --serve`:
the protocol of `process`, one JSON line per unit and per record.
"""

from __future__ import annotations

import os
import queue
import re
import signal
import subprocess
import threading
import time
from collections import deque

from suite.measure import record as records
from suite.measure.executors.base import OneByOne, Unit
from suite.measure.executors.protocol import (DRAIN_S, child_command, child_env, clip, exit_status, last_line, records_in,
                                              request)
from suite.measure.progress import Progress
from suite.scenario.plan import Case


# What a CUDA error that leaves the context unusable looks like in a case's reason: after one of
# these, every later CUDA call in the process fails too (an illegal access, a device-side assert).
STICKY_ERRORS = (
    "CUDA error", "illegal memory access", "device-side assert", "unspecified launch failure",
    "CUBLAS_STATUS_EXECUTION_FAILED", "cudaErrorIllegalAddress", "CUDA driver error",
)


def poisoned(record: dict, device) -> bool:
    """Did this case leave the worker's CUDA context unusable? Its error says so, or (on a GPU) a
    synchronize now fails."""
    if record.get("status") == "failed" and any(s in str(record.get("reason")) for s in STICKY_ERRORS):
        return True
    if getattr(device, "type", None) == "cuda":
        import torch

        try:
            torch.cuda.synchronize(device)
        except Exception:
            return True
    return False


# A case in the CUDA worker counts as hung after this many times its case cap (which bounds the
# warm-up and the samples, not the compiling first call, the accuracy check or the worker's start),
# and never before MIN_CASE_TIMEOUT_S: a first torch.compile of a model takes minutes on a busy host.
CASE_TIMEOUT_CAPS = 10
MIN_CASE_TIMEOUT_S = 300.0
# The worker writes this line to its stderr after each case, so the parent knows which lines
# (warnings, the tail of a failed case) belong to which case.
CASE_END = "mpsuite-worker: case done "
# What of the worker's stderr is kept: per case its last lines and up to this many distinct
# warnings; for a crash or a hang, the stream's last lines.
TAIL_LINES = 200
MAX_WARNINGS = 20
# Lines that say a library fell back or failed quietly: Python warnings, torch's glog-style
# warnings ("W0115 10:51:19.1 ... ] ..."), logging's WARNING, torchao's "Failed to load <.so>",
# inductor's fallbacks.
WARNING_LINE = re.compile(r"\w*Warning: |^W\d{4} |^WARNING\b|\bFailed to load\b|\bfall(?:ing |s )?back\b",
                          re.IGNORECASE)


def case_timeout(case, device_type: str = "cuda") -> float:
    """The default time limit of one case in the worker (`CASE_TIMEOUT_CAPS`, `MIN_CASE_TIMEOUT_S`)."""
    return max(CASE_TIMEOUT_CAPS * case.timing.case_cap(device_type), MIN_CASE_TIMEOUT_S)


def warning_lines(lines) -> list[str]:
    """The distinct warning lines among `lines`, in order, at most MAX_WARNINGS of 300 characters."""
    found = dict.fromkeys(line.strip()[:300] for line in lines if WARNING_LINE.search(line))
    return list(found)[:MAX_WARNINGS]


class StderrReader:
    """A worker's stderr, read on a thread of its own as it comes (so the worker never blocks on a
    full pipe and nothing it says is lost): each case's lines up to its CASE_END line, and the
    stream's last lines for a worker that dies or hangs."""

    def __init__(self, pipe):
        self.lock = threading.Lock()
        self.case_lines: deque[str] = deque(maxlen=TAIL_LINES)
        self.case_warnings: list[str] = []
        self.tail: deque[str] = deque(maxlen=TAIL_LINES)
        self.ended: queue.Queue = queue.Queue()  # (case id, its lines, its warnings) per CASE_END; None at EOF
        self.thread = threading.Thread(target=self._read, args=(pipe,), name="mpsuite-worker-stderr", daemon=True)
        self.thread.start()

    def _read(self, pipe) -> None:
        for raw in iter(pipe.readline, b""):
            line = raw.decode(errors="replace").rstrip("\n")
            with self.lock:
                if line.startswith(CASE_END):
                    self.ended.put((line[len(CASE_END):].strip(), list(self.case_lines), self.case_warnings))
                    self.case_lines, self.case_warnings = deque(maxlen=TAIL_LINES), []
                    continue
                self.tail.append(line)
                self.case_lines.append(line)
                if len(self.case_warnings) < MAX_WARNINGS:
                    self.case_warnings += [w for w in warning_lines([line]) if w not in self.case_warnings]
        self.ended.put(None)

    def of_case(self, case_id: str, wait_s: float = DRAIN_S) -> tuple[list[str], list[str]]:
        """(the lines, the warnings) the worker wrote during case `case_id`: up to its CASE_END line,
        else (the worker gone or silent) what came since the last one."""
        deadline = time.monotonic() + wait_s
        while True:
            try:
                item = self.ended.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                item = None
            if item is None:
                with self.lock:
                    return list(self.case_lines), list(self.case_warnings)
            if item[0] == case_id:
                return item[1], item[2]

    def text(self, wait_s: float = 0.0) -> str:
        """The stream's last lines (after waiting up to `wait_s` for it to end)."""
        self.thread.join(wait_s)
        with self.lock:
            return "\n".join(self.tail)


class CudaWorker(OneByOne):
    """Runs the cases in one worker process at a time, each within its time limit."""

    def __init__(self, device, timeout_s: float | None = None, command: list[str] | None = None):
        self.device = str(device)
        self.command = command or child_command("--serve")
        self.timeout_s = timeout_s
        self.env = child_env()
        self.proc: subprocess.Popen | None = None
        self.stderr: StderrReader | None = None
        self.lines: queue.Queue = queue.Queue()
        self.started = 0  # workers started so far

    def _start(self) -> None:
        self.proc = subprocess.Popen(self.command, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, env=self.env, start_new_session=True)
        self.stderr = StderrReader(self.proc.stderr)
        self.lines = queue.Queue()  # this worker's record lines; b"" at EOF
        threading.Thread(target=lines_into, args=(self.proc.stdout, self.lines), name="mpsuite-worker-stdout",
                         daemon=True).start()
        self.started += 1

    def _stop(self) -> None:
        """Kill the worker's process group (compile workers included) and forget it."""
        if self.proc is not None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.proc.wait()
            self.proc = None

    def limit(self, unit: Unit) -> float:
        """The unit's time limit: `timeout_s` (else `case_timeout`) for each case it times."""
        return sum(self.timeout_s if self.timeout_s is not None else case_timeout(case) for case in unit.cases)

    def _send(self, unit: Unit, run_meta: dict) -> list[bytes] | None:
        """The worker's answer to `unit` (a line per case it records; fewer when it died), or None
        when it ran past the limit."""
        deadline = time.monotonic() + self.limit(unit)
        try:
            self.proc.stdin.write(request(unit, self.device, run_meta))
            self.proc.stdin.flush()
        except BrokenPipeError:
            pass  # it died: its stdout ends too
        lines = []
        while len(lines) < len(unit.todo):
            try:
                line = self.lines.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                return None
            if not line:
                break
            lines.append(line)
        return lines

    def run_unit(self, unit: Unit, run_meta: dict, progress: Progress | None = None) -> list[records.Record]:
        started_at = records.now()
        if self.proc is None or self.proc.poll() is not None:
            self._start()
        try:
            lines = self._send(unit, run_meta)
        except BaseException:  # Ctrl-C: the worker (and its group) must not outlive the run
            self._stop()
            raise
        if lines is None:
            stderr = self.stderr
            self._stop()
            log = stderr.text(DRAIN_S)
            return [_failed(c, run_meta, f"timed out after {self.limit(unit):g} s", log, started_at) for c in unit.todo]
        found, poisoned_now = records_in(b"".join(lines), unit)
        if len(found) == len(unit.todo):
            return self._with_log([found[c.case_id] for c in unit.todo], poisoned_now)
        code = self.proc.wait()
        log = self.stderr.text(DRAIN_S)
        self.proc = None
        if len(unit.cases) > 1:  # it died timing the setting together: each case again, alone
            return [self._alone(case, run_meta, code) for case in unit.todo]
        detail = last_line(log) or "no record and no error message"
        why = f"crashed: {exit_status(code)}: {detail}" if code >= 0 else f"crashed: {exit_status(code)}"
        return [_failed(case, run_meta, why, log, started_at) for case in unit.todo]

    def _alone(self, case: Case, run_meta: dict, code: int) -> records.Record:
        return self.run_unit(Unit((case,)), run_meta)[0].replace(
            pairing_note=f"the worker timing its setting together crashed ({exit_status(code)}): run again alone")

    def _with_log(self, out: list[records.Record], poisoned_now: bool) -> list[records.Record]:
        """The worker's records of a unit, with the warnings it wrote during the unit (and, for a
        failed case, its last lines); a worker the unit left unusable (`poisoned_now`) is let go,
        and its records say so."""
        lines, warnings = self.stderr.of_case(out[0]["case_id"])
        if poisoned_now:
            self._stop()
        return [record.replace(
            worker_warnings="\n".join(warnings) or None,
            **({"isolate_log": clip("\n".join(lines))} if record.get("status") == "failed" and lines else {}),
            **({"worker_replaced": True} if poisoned_now else {}),  # the next unit runs in a fresh worker
        ) for record in out]

    def close(self) -> None:
        if self.proc is not None:
            try:
                self.proc.stdin.close()
                self.proc.wait(timeout=DRAIN_S)
            except (OSError, subprocess.TimeoutExpired):
                pass
            self._stop()


def lines_into(pipe, lines: queue.Queue) -> None:
    """Each line of `pipe` into `lines`, then b"" at its end (a reader thread's loop)."""
    for line in iter(pipe.readline, b""):
        lines.put(line)
    lines.put(b"")


def _failed(case: Case, run_meta: dict, reason: str, log: str, started_at: str) -> records.Record:
    """The record of a case the worker sent none back for: failed, with its log's start and end."""
    return records.failed(case, run_meta, reason, started_at, isolated=True, isolate_log=clip(log) or None)
