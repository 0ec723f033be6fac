"""`--isolate`: each unit (a setting's cases, timed together) runs in a fresh subprocess with a time
limit, so a hard crash (segfault, abort, a CUDA error that poisons the context) or a hang costs that
unit, not the run; after a crash, each case of the unit without a record runs again in a process of
its own (its `pairing_note` says so), so only the case that crashes is lost.

The parent sends the unit to the child (`suite.measure.executors.child`) as JSON on stdin; the child
runs it as this process would have and writes each record as one JSON line to its stdout. Before
importing anything heavy, the child points its own fd 1 at stderr, so whatever a library prints
lands in the log and the record channel carries only the record. When no record comes back the
parent writes the case as `failed` itself: "crashed: signal 11 (SIGSEGV)", "crashed: exit status
1: <last log line>" or "timed out after 600 s" (the limit is per case: a unit of three cases gets three
times it); the child's log (its start and end) goes in `isolate_log`.

The child leads its own process group; on a timeout (or Ctrl-C in the parent) the whole group is
killed, including any compile workers it started. Each case pays for a fresh interpreter, torch
import and CUDA context (seconds), and runs without the warm state earlier cases leave behind.
"""

from __future__ import annotations

import os
import signal
import subprocess

from suite.measure import record as records
from suite.measure.executors.base import OneByOne, Unit
from suite.measure.executors.protocol import (DRAIN_S, child_command, child_env, clip, exit_status, last_line, records_in,
                                              request)
from suite.measure.progress import Progress
from suite.scenario.plan import Case

# The default per-case limit: generous, because it also covers the child's start-up (interpreter,
# torch import, CUDA context) and a first torch.compile of a large model; it exists to turn a
# deadlock into one failed case, not to police slow cases.
DEFAULT_TIMEOUT_S = 900.0


class Process(OneByOne):
    """Runs each unit in a subprocess of its own, within `timeout_s` per case it times."""

    def __init__(self, device, timeout_s: float | None = None, command: list[str] | None = None):
        self.device = str(device)
        self.timeout_s = DEFAULT_TIMEOUT_S if timeout_s is None else float(timeout_s)
        # The child's command line; a wrapper (a debugger, a sanitizer, a test double) may replace it.
        self.command = command or child_command()
        self.env = child_env()

    def run_unit(self, unit: Unit, run_meta: dict, progress: Progress | None = None) -> list[records.Record]:
        started_at = records.now()
        limit = self.timeout_s * len(unit.cases)
        proc = subprocess.Popen(
            self.command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            env=self.env, start_new_session=True,
        )
        try:
            out, err = proc.communicate(request(unit, self.device, run_meta), timeout=limit)
            why = None
        except subprocess.TimeoutExpired:
            out, err = kill(proc)
            why = f"timed out after {limit:g} s"
        except BaseException:  # Ctrl-C in the parent: the child (and its group) must not outlive it
            kill(proc)
            raise
        found, _ = records_in(out, unit)
        teardown = None
        if proc.returncode != 0 and why is None:  # e.g. a library's teardown crashing at exit: the cases were done
            teardown = clip(f"exited with {exit_status(proc.returncode)} after sending its record\n"
                            f"{err.decode(errors='replace')}")
        found = {case_id: record.replace(isolated=True, **({"isolate_log": teardown} if teardown else {}))
                 for case_id, record in found.items()}
        missing = [case for case in unit.todo if case.case_id not in found]
        if missing and why is None and len(unit.cases) > 1:
            # a crash while the setting was timed together: each case it cost is run again alone, so
            # only the case that crashes is lost
            found.update({case.case_id: self._alone(case, run_meta, proc.returncode) for case in missing})
        elif missing:
            why = why or _crash(proc.returncode, err)
            found.update({case.case_id: _failed(case, run_meta, why, err, started_at) for case in missing})
        return [found[case.case_id] for case in unit.todo]

    def _alone(self, case: Case, run_meta: dict, returncode: int) -> records.Record:
        crashed = exit_status(returncode)
        return self.run_unit(Unit((case,)), run_meta)[0].replace(
            pairing_note=f"the process timing its setting together crashed ({crashed}): run again alone")


def _crash(returncode: int, log: bytes) -> str:
    """Why a child sent no record: the signal that killed it, or its exit status and last log line."""
    if returncode < 0:
        return f"crashed: {exit_status(returncode)}"
    return f"crashed: {exit_status(returncode)}: {last_line(log.decode(errors='replace')) or 'no record and no error message'}"


def _failed(case: Case, run_meta: dict, reason: str, log: bytes, started_at: str) -> records.Record:
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
