"""`--isolate`: each case runs in a fresh subprocess with a time limit, so a hard crash (segfault,
abort, a CUDA error that poisons the context) or a hang costs that one case, not the run.

The parent sends the case to the child (`suite.measure.executors.child`) as JSON on stdin; the child
runs it as this process would have and writes the record as one JSON line to its stdout. Before
importing anything heavy, the child points its own fd 1 at stderr, so whatever a library prints
lands in the log and the record channel carries only the record. When no record comes back the
parent writes the case as `failed` itself: "crashed: signal 11 (SIGSEGV)", "crashed: exit status
1: <last log line>" or "timed out after 600 s"; the child's log (its start and end) goes in `isolate_log`.

The child leads its own process group; on a timeout (or Ctrl-C in the parent) the whole group is
killed, including any compile workers it started. Each case pays for a fresh interpreter, torch
import and CUDA context (seconds), and runs without the warm state earlier cases leave behind.
"""

from __future__ import annotations

import os
import signal
import subprocess

from suite.core import jsonl
from suite.measure import record as records
from suite.measure.executors.base import OneByOne
from suite.measure.executors.protocol import DRAIN_S, case_to_json, child_command, child_env, clip, exit_status, last_line
from suite.measure.progress import Progress
from suite.scenario.plan import Case

# The default per-case limit: generous, because it also covers the child's start-up (interpreter,
# torch import, CUDA context) and a first torch.compile of a large model; it exists to turn a
# deadlock into one failed case, not to police slow cases.
DEFAULT_TIMEOUT_S = 900.0


class Process(OneByOne):
    """Runs each case in a subprocess of its own, within `timeout_s`."""

    def __init__(self, device, timeout_s: float | None = None, command: list[str] | None = None):
        self.device = str(device)
        self.timeout_s = DEFAULT_TIMEOUT_S if timeout_s is None else float(timeout_s)
        # The child's command line; a wrapper (a debugger, a sanitizer, a test double) may replace it.
        self.command = command or child_command()
        self.env = child_env()

    def run_case(self, case: Case, run_meta: dict, progress: Progress | None = None) -> dict:
        started_at = records.now()
        request = jsonl.encode({"case": case_to_json(case), "device": self.device, "run_meta": run_meta})
        proc = subprocess.Popen(
            self.command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            env=self.env, start_new_session=True,
        )
        try:
            out, err = proc.communicate(request, timeout=self.timeout_s)
        except subprocess.TimeoutExpired:
            out, err = kill(proc)
            return _failed(case, run_meta, f"timed out after {self.timeout_s:g} s", err, started_at)
        except BaseException:  # Ctrl-C in the parent: the child (and its group) must not outlive it
            kill(proc)
            raise
        try:
            record = jsonl.decode(out)
        except ValueError:
            record = None
        log = err.decode(errors="replace")
        if record is not None and record.get("case_id") == case.case_id:
            record["isolated"] = True
            if proc.returncode != 0:  # e.g. a library's teardown crashing at exit: the case itself was done
                record["isolate_log"] = clip(f"exited with {exit_status(proc.returncode)} after sending its record\n{log}")
            return record
        if proc.returncode < 0:
            return _failed(case, run_meta, f"crashed: {exit_status(proc.returncode)}", err, started_at)
        detail = last_line(log) or "no record and no error message"
        return _failed(case, run_meta, f"crashed: {exit_status(proc.returncode)}: {detail}", err, started_at)


def _failed(case: Case, run_meta: dict, reason: str, log: bytes, started_at: str) -> dict:
    """The record of a case whose process sent none back: failed, with the log's start and end."""
    return records.failed(case, run_meta, reason, started_at, isolated=True,
                          isolate_log=clip(log.decode(errors="replace")) or None)


def kill(proc: subprocess.Popen) -> tuple[bytes, bytes]:
    """Kill a child's whole process group; what it wrote to its pipes, where they close in time."""
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
