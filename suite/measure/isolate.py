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
"""

from __future__ import annotations

import dataclasses
import faulthandler
import os
import signal
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path

from suite.results import journal

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
        request = journal.encode({"case": case_to_json(case), "device": self.device, "run_meta": self.run_meta})
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
            record = journal.decode(out)
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


class CaseWorker:
    """`runner.run`'s `run_one` for GPU runs: the cases run one after another in one worker process
    (one interpreter, one CUDA context: cheaper than a process per case), and a worker that a case
    left unusable is replaced. A sticky CUDA error (an illegal access in a TE or cuBLAS kernel) in
    one process fails every later CUDA call there; here it costs the case that hit it, recorded
    with its error, and the next case starts in a fresh worker. A worker that dies (a segfault)
    likewise costs only its case. Same protocol as `CaseProcess`, one JSON line per case."""

    def __init__(self, device, run_meta: dict, command: list[str] | None = None):
        self.device = str(device)
        self.run_meta = run_meta
        self.command = command or [*child_command(), "--serve"]
        self.env = _child_env()
        self.proc: subprocess.Popen | None = None
        self.log = None
        self.started = 0  # workers started so far

    def _start(self) -> None:
        import tempfile

        self.log = tempfile.TemporaryFile()
        self.proc = subprocess.Popen(self.command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.log,
                                     env=self.env, start_new_session=True)
        self.started += 1

    def _log_text(self) -> str:
        self.log.seek(0)
        return self.log.read().decode(errors="replace")

    def _stop(self) -> None:
        if self.proc is not None:
            CaseProcess._kill(self.proc)
            self.proc = None

    def __call__(self, case) -> dict:
        started_at = datetime.now(timezone.utc).isoformat(timespec="seconds")
        if self.proc is None or self.proc.poll() is not None:
            self._start()
        request = journal.encode({"case": case_to_json(case), "device": self.device, "run_meta": self.run_meta})
        try:
            self.proc.stdin.write(request)
            self.proc.stdin.flush()
            line = self.proc.stdout.readline()
        except BrokenPipeError:
            line = b""
        except BaseException:  # Ctrl-C: the worker (and its group) must not outlive the run
            self._stop()
            raise
        record = None
        if line:
            try:
                record = journal.decode(line)
            except ValueError:
                record = None
        if record is not None and record.get("case_id") == case.case_id:
            if record.pop("worker_poisoned", False):
                record["worker_replaced"] = True  # the next case runs in a fresh worker
                self._stop()
            return record
        code = self.proc.wait()
        log = self._log_text()
        self.proc = None
        detail = _last_line(log) or "no record and no error message"
        return _failed(case, self.run_meta, f"crashed: {_status(code)}: {detail}" if code >= 0 else f"crashed: {_status(code)}",
                      log, started_at)

    def close(self) -> None:
        if self.proc is not None:
            try:
                self.proc.stdin.close()
                self.proc.wait(timeout=DRAIN_S)
            except (OSError, subprocess.TimeoutExpired):
                pass
            self._stop()


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
        request = journal.decode(line)
        _child_threads(request["run_meta"])
        case = case_from_json(request["case"])
        device = torch.device(request["device"])
        record = runner.run_case(case, device, clock_for(device), request["run_meta"])
        bad = poisoned(record, device)
        channel.write(journal.encode({**record, "worker_poisoned": bad}))
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
    request = journal.decode(sys.stdin.buffer.read())

    import torch

    from suite.measure import runner
    from suite.measure.timing import clock_for

    _child_threads(request["run_meta"])
    case = case_from_json(request["case"])
    device = torch.device(request["device"])
    record = runner.run_case(case, device, clock_for(device), request["run_meta"])
    with os.fdopen(record_fd, "wb") as channel:
        channel.write(journal.encode(record))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
