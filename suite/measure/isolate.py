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
    out = {f.name: getattr(case, f.name) for f in dataclasses.fields(case)}
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


class CaseProcess:
    """`runner.run`'s `run_one`: run one case in a subprocess and return its record."""

    def __init__(self, device, run_meta: dict, timeout_s: float | None = None, command: list[str] | None = None):
        self.device = str(device)
        self.run_meta = run_meta
        self.timeout_s = DEFAULT_TIMEOUT_S if timeout_s is None else float(timeout_s)
        # The child's command line; a wrapper (a debugger, a sanitizer, a test double) may replace it.
        self.command = command or child_command()
        # The child must import this very `suite`, wherever the parent found it.
        package_root = str(Path(__file__).resolve().parent.parent)
        path = os.environ.get("PYTHONPATH")
        self.env = {**os.environ, "PYTHONPATH": package_root + (os.pathsep + path if path else "")}

    def _failed(self, case, reason: str, log: str, started_at: str) -> dict:
        from suite.measure import runner

        record = runner.base_record(case, self.run_meta)
        record.update(status="failed", reason=reason, started_at=started_at, isolated=True,
                      isolate_log=_clip(log) or None)
        return record

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
            return self._failed(case, f"timed out after {self.timeout_s:g} s", log, started_at)
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
            return self._failed(case, f"crashed: {_status(proc.returncode)}", log, started_at)
        detail = _last_line(log) or "no record and no error message"
        return self._failed(case, f"crashed: {_status(proc.returncode)}: {detail}", log, started_at)

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


def main() -> int:
    """The child: one case from stdin, its record to the original stdout."""
    faulthandler.enable()  # a segfault prints the Python stack into the log before the process dies
    record_fd = os.dup(1)
    os.dup2(2, 1)  # from here on, anything written to stdout goes to the log
    request = journal.decode(sys.stdin.buffer.read())

    import torch

    from suite.measure import runner
    from suite.measure.timing import clock_for

    case = case_from_json(request["case"])
    device = torch.device(request["device"])
    record = runner.run_case(case, device, clock_for(device), request["run_meta"])
    with os.fdopen(record_fd, "wb") as channel:
        channel.write(journal.encode(record))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
