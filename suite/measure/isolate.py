"""`--isolate`: each case runs in a fresh subprocess with a time limit, so a hard crash (segfault,
abort, a CUDA error that poisons the context) or a hang costs that one case, not the run.

The parent sends the case to the child as JSON on stdin; the child runs it with the same
`runner.run_case` as an in-process run and writes the record as one JSON line to its stdout. Before
importing anything heavy, the child points its own fd 1 at stderr, so whatever a library prints
lands in the log and the record channel carries only the record. When no record comes back the
parent writes the case as `failed` itself: "crashed: signal 11 (SIGSEGV)", "crashed: exit status
1: <last log line>" or "timed out after 600 s"; the child's log (its start and end) goes in `isolate_log`.

The child leads its own process group; on a timeout (or Ctrl-C in the parent) the whole group is
killed, including any compile workers it started. Each case pays for a fresh interpreter, torch
import and CUDA context (seconds), and runs without the warm state earlier cases leave behind.

`CaseWorker` (a CUDA run's cases, one worker process for many) speaks the same protocol with a
time limit per case, and reads the worker's stderr as it comes (warnings and failed cases' tails
go in the records).
"""

from __future__ import annotations

import dataclasses
import faulthandler
import os
import queue
import re
import signal
import subprocess
import sys
import threading
import time
from collections import deque
from datetime import datetime, timezone
from pathlib import Path

from suite.core import jsonl

# The default per-case limit: generous, because it also covers the child's start-up (interpreter,
# torch import, CUDA context) and a first torch.compile of a large model; it exists to turn a
# deadlock into one failed case, not to police slow cases.
DEFAULT_TIMEOUT_S = 900.0
# How much of a failed child's log goes in `isolate_log`: its start (a crash dump begins with the
# innermost frames) and its end (a Python traceback ends with the error).
LOG_HEAD_CHARS = LOG_TAIL_CHARS = 1500
# After killing a timed-out child, how long to wait for its pipes to close before giving up on them.
DRAIN_S = 10.0


def case_to_json(case) -> dict:
    # the constructor's fields: case_id is computed from them again on the other side
    out = {f.name: getattr(case, f.name) for f in dataclasses.fields(case) if f.init}
    out["timing"] = case.timing.model_dump()
    return out


def case_from_json(data: dict):
    from suite.scenario.plan import Case
    from suite.scenario.stop_rule import StopRule

    return Case(**{**data, "timing": StopRule(**data["timing"])})


def _status(returncode: int) -> str:
    """'signal 11 (SIGSEGV)' for a process killed by a signal, else 'exit status N'."""
    if returncode >= 0:
        return f"exit status {returncode}"
    try:
        name = signal.Signals(-returncode).name
    except ValueError:
        name = "unknown signal"
    return f"signal {-returncode} ({name})"


def _clip(log: str) -> str:
    if len(log) > LOG_HEAD_CHARS + LOG_TAIL_CHARS:
        return f"{log[:LOG_HEAD_CHARS]}\n[...]\n{log[-LOG_TAIL_CHARS:]}"
    return log


def _last_line(log: str) -> str:
    lines = [line.strip() for line in log.splitlines() if line.strip()]
    return lines[-1][:300] if lines else ""


def child_command() -> list[str]:
    return [sys.executable, "-m", "suite.measure.isolate"]


def _failed(case, run_meta: dict, reason: str, log: str, started_at: str) -> dict:
    """The record of a case whose process sent none back: failed, with the log's start and end."""
    from suite.measure import runner

    record = runner.base_record(case, run_meta)
    record.update(status="failed", reason=reason, started_at=started_at, isolated=True,
                  isolate_log=_clip(log) or None)
    return record


def _child_env() -> dict:
    """The child must import this very `suite`, wherever the parent found it."""
    package_root = str(Path(__file__).resolve().parent.parent.parent)
    path = os.environ.get("PYTHONPATH")
    return {**os.environ, "PYTHONPATH": package_root + (os.pathsep + path if path else "")}


class CaseProcess:
    """`runner.run`'s `run_one`: run one case in a subprocess and return its record."""

    def __init__(self, device, run_meta: dict, timeout_s: float | None = None, command: list[str] | None = None):
        self.device = str(device)
        self.run_meta = run_meta
        self.timeout_s = DEFAULT_TIMEOUT_S if timeout_s is None else float(timeout_s)
        # The child's command line; a wrapper (a debugger, a sanitizer, a test double) may replace it.
        self.command = command or child_command()
        self.env = _child_env()

    def __call__(self, case) -> dict:
        started_at = datetime.now(timezone.utc).isoformat(timespec="seconds")
        request = jsonl.encode({"case": case_to_json(case), "device": self.device, "run_meta": self.run_meta})
        proc = subprocess.Popen(
            self.command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            env=self.env, start_new_session=True,
        )
        try:
            out, err = proc.communicate(request, timeout=self.timeout_s)
        except subprocess.TimeoutExpired:
            out, err = self._kill(proc)
            log = err.decode(errors="replace")
            return _failed(case, self.run_meta, f"timed out after {self.timeout_s:g} s", log, started_at)
        except BaseException:  # Ctrl-C in the parent: the child (and its group) must not outlive it
            self._kill(proc)
            raise
        log = err.decode(errors="replace")
        try:
            record = jsonl.decode(out)
        except ValueError:
            record = None
        if record is not None and record.get("case_id") == case.case_id:
            record["isolated"] = True
            if proc.returncode != 0:  # e.g. a library's teardown crashing at exit: the case itself was done
                record["isolate_log"] = _clip(f"exited with {_status(proc.returncode)} after sending its record\n{log}")
            return record
        if proc.returncode < 0:
            return _failed(case, self.run_meta, f"crashed: {_status(proc.returncode)}", log, started_at)
        detail = _last_line(log) or "no record and no error message"
        return _failed(case, self.run_meta, f"crashed: {_status(proc.returncode)}: {detail}", log, started_at)

    @staticmethod
    def _kill(proc: subprocess.Popen) -> tuple[bytes, bytes]:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        try:
            return proc.communicate(timeout=DRAIN_S)
        except subprocess.TimeoutExpired:  # a grandchild left the group and holds the pipes open
            for pipe in (proc.stdin, proc.stdout, proc.stderr):
                if pipe:
                    pipe.close()
            proc.wait()
            return b"", b""
        except ValueError:  # communicate() after the pipes were already closed
            proc.wait()
            return b"", b""


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


class _Stderr:
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


class CaseWorker:
    """`runner.run`'s `run_one` for GPU runs: the cases run one after another in one worker process
    (one interpreter, one CUDA context: cheaper than a process per case), and a worker that a case
    left unusable is replaced. A sticky CUDA error (an illegal access in a TE or cuBLAS kernel) in
    one process fails every later CUDA call there; here it costs the case that hit it, recorded
    with its error, and the next case starts in a fresh worker. A worker that dies (a segfault)
    likewise costs only its case, and so does one that hangs: a case that runs past its time limit
    (`timeout_s`, else `case_timeout(case)`) is recorded failed, "timed out after N s", its worker's
    process group killed and the next case started in a fresh one. The worker's stderr is read as
    it comes: a case's warning lines go in `worker_warnings`, a failed case's last lines in
    `isolate_log`. Same protocol as `CaseProcess`, one JSON line per case."""

    def __init__(self, device, run_meta: dict, command: list[str] | None = None, timeout_s: float | None = None):
        self.device = str(device)
        self.run_meta = run_meta
        self.command = command or [*child_command(), "--serve"]
        self.timeout_s = timeout_s
        self.env = _child_env()
        self.proc: subprocess.Popen | None = None
        self.stderr: _Stderr | None = None
        self.records: queue.Queue = queue.Queue()
        self.started = 0  # workers started so far

    def _start(self) -> None:
        self.proc = subprocess.Popen(self.command, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, env=self.env, start_new_session=True)
        self.stderr = _Stderr(self.proc.stderr)
        self.records = queue.Queue()  # this worker's record lines; b"" at EOF
        threading.Thread(target=_lines_into, args=(self.proc.stdout, self.records), name="mpsuite-worker-stdout",
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

    def _send(self, case) -> bytes | None:
        """The worker's answer to `case` (one line; b"" when it died), or None when it ran past the limit."""
        limit = self.timeout_s if self.timeout_s is not None else case_timeout(case)
        request = jsonl.encode({"case": case_to_json(case), "device": self.device, "run_meta": self.run_meta})
        try:
            self.proc.stdin.write(request)
            self.proc.stdin.flush()
        except BrokenPipeError:
            pass  # it died: its stdout ends too
        try:
            return self.records.get(timeout=limit)
        except queue.Empty:
            return None

    def __call__(self, case) -> dict:
        started_at = datetime.now(timezone.utc).isoformat(timespec="seconds")
        if self.proc is None or self.proc.poll() is not None:
            self._start()
        try:
            line = self._send(case)
        except BaseException:  # Ctrl-C: the worker (and its group) must not outlive the run
            self._stop()
            raise
        if line is None:
            limit = self.timeout_s if self.timeout_s is not None else case_timeout(case)
            stderr = self.stderr
            self._stop()
            return _failed(case, self.run_meta, f"timed out after {limit:g} s", stderr.text(DRAIN_S), started_at)
        record = _decoded(line)
        if record is not None and record.get("case_id") == case.case_id:
            return self._with_log(record, case)
        code = self.proc.wait()
        log = self.stderr.text(DRAIN_S)
        self.proc = None
        detail = _last_line(log) or "no record and no error message"
        return _failed(case, self.run_meta, f"crashed: {_status(code)}: {detail}" if code >= 0 else f"crashed: {_status(code)}",
                       log, started_at)

    def _with_log(self, record: dict, case) -> dict:
        """The worker's record, with the warnings it wrote during the case (and, for a failed case,
        its last lines); a worker the case left unusable is let go."""
        lines, warnings = self.stderr.of_case(case.case_id)
        record["worker_warnings"] = "\n".join(warnings) or None
        if record.get("status") == "failed" and lines:
            record["isolate_log"] = _clip("\n".join(lines))
        if record.pop("worker_poisoned", False):
            record["worker_replaced"] = True  # the next case runs in a fresh worker
            self._stop()
        return record

    def close(self) -> None:
        if self.proc is not None:
            try:
                self.proc.stdin.close()
                self.proc.wait(timeout=DRAIN_S)
            except (OSError, subprocess.TimeoutExpired):
                pass
            self._stop()


def _lines_into(pipe, lines: queue.Queue) -> None:
    """Each line of `pipe` into `lines`, then b"" at its end (a reader thread's loop)."""
    for line in iter(pipe.readline, b""):
        lines.put(line)
    lines.put(b"")


def _decoded(line: bytes) -> dict | None:
    if not line:
        return None
    try:
        return jsonl.decode(line)
    except ValueError:
        return None


def _child_threads(run_meta: dict) -> None:
    """The run's `threads` setting in this process too: a child does not inherit the parent's
    torch.set_num_threads (records say cpu_threads; it must be true here as well)."""
    threads = run_meta.get("threads_setting")
    if threads:
        import torch

        torch.set_num_threads(int(threads))


def serve() -> int:
    """A worker: cases from stdin, one JSON line each, records to the original stdout, until stdin
    closes or a case leaves the process unusable (then it says so in the record and exits)."""
    faulthandler.enable()
    channel = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)

    import torch

    from suite.measure import runner
    from suite.measure.timing import clock_for

    for line in sys.stdin.buffer:
        request = jsonl.decode(line)
        _child_threads(request["run_meta"])
        case = case_from_json(request["case"])
        device = torch.device(request["device"])
        record = runner.run_case(case, device, clock_for(device), request["run_meta"])
        bad = poisoned(record, device)
        sys.stderr.write(f"\n{CASE_END}{case.case_id}\n")  # what it wrote so far was this case's
        sys.stderr.flush()
        channel.write(jsonl.encode({**record, "worker_poisoned": bad}))
        channel.flush()
        if bad:
            return 3
    return 0


def main(argv: list[str] | None = None) -> int:
    """The child: one case from stdin, its record to the original stdout (`--serve`: many)."""
    if (argv if argv is not None else sys.argv[1:]) == ["--serve"]:
        return serve()
    faulthandler.enable()  # a segfault prints the Python stack into the log before the process dies
    record_fd = os.dup(1)
    os.dup2(2, 1)  # from here on, anything written to stdout goes to the log
    request = jsonl.decode(sys.stdin.buffer.read())

    import torch

    from suite.measure import runner
    from suite.measure.timing import clock_for

    _child_threads(request["run_meta"])
    case = case_from_json(request["case"])
    device = torch.device(request["device"])
    record = runner.run_case(case, device, clock_for(device), request["run_meta"])
    with os.fdopen(record_fd, "wb") as channel:
        channel.write(jsonl.encode(record))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
