"""A launched case: its ranks run under torchrun, one launch per case, with a time limit.

A case of a `launched` workload (registry) runs here (`suite.measure.executors.run_here`). The parent checks what it
can before starting anything (the recipe on this device, enough GPUs for `world_size`: a skip with
the reason), writes the case to a temporary folder and starts
    python -m torch.distributed.run --standalone --nproc-per-node W -m suite.measure.executors.rank DIR
in a session of its own (PyTorch's launcher: a free rendezvous port, one process per rank, and when
one rank fails it stops the others). Rank 0 writes the record's columns (`suite.measure.executors.rank`); the
parent adds them to the case's record. Nothing else comes back through stdout, so a library's
prints cannot corrupt a result.

When no result comes back the case fails with the cause: the error of the rank torchrun saw fail
first ("rank 1: RuntimeError: ..."), or how it died ("rank 1 crashed: signal 9 (SIGKILL)"), with
that rank's log in `launch_log`; a launch past `timeout_s` is killed (torchrun, then every rank's
session) and fails as "timed out after N s". Either way the next case runs.
"""

from __future__ import annotations

import atexit
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from suite.core import jsonl
from suite.core.errors import Unsupported
from suite.measure import record as records
from suite.measure.executors.protocol import case_to_json, child_env, clip, exit_status, last_line
from suite.scenario import registry

# How long torchrun gets to stop its ranks after SIGTERM before everything is killed.
TERM_GRACE_S = 10.0
# torchrun's failure summary: a block per failed rank, the first observed under "Root Cause"
FAILED_RANK = re.compile(r"^\s*rank\s*:\s*(\d+)\b.*?\n\s*exitcode\s*:\s*(-?\d+)", re.MULTILINE)
ROOT_CAUSE = re.compile(r"Root Cause.*?^\s*rank\s*:\s*(\d+)", re.DOTALL | re.MULTILINE)
ENTRY = ["-m", "suite.measure.executors.rank"]


def torchrun_command(world_size: int, entry: list[str], folder: Path) -> list[str]:
    return [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={world_size}",
            "--max-restarts=0", *entry, str(folder)]


def _kill_session(pid: int, sig: int) -> None:
    try:
        os.killpg(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _read(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def _log(folder: Path, rank: int) -> str:
    try:
        return (folder / f"rank{rank}.log").read_text(errors="replace")
    except OSError:
        return ""


def exit_codes(launcher_log: str) -> tuple[dict[int, int], int | None]:
    """Each failed rank's exit code from torchrun's failure summary, and the rank it names as the
    root cause (the first failure it observed), or None."""
    codes = {int(rank): int(code) for rank, code in FAILED_RANK.findall(launcher_log)}
    root = ROOT_CAUSE.search(launcher_log)
    return codes, int(root.group(1)) if root else None


def failure(folder: Path, world_size: int, launcher_log: str, returncode: int | None) -> tuple[str, str]:
    """(reason, log) of a launch that produced no result: the rank that failed first and why.

    A rank that raised wrote its error with the time; the others failed *because* of the first (a
    peer's death is "Connection reset by peer" to them), so the earliest error is the cause. A rank
    that died without writing one (a signal, a segfault, an out-of-memory kill) is the cause before
    any written error, except one stopped by torchrun's SIGTERM after another rank had failed."""
    errors = {r: e for r in range(world_size) if (e := _read(folder / f"rank{r}.error.json"))}
    codes, root = exit_codes(launcher_log)
    crashed = sorted((r for r, code in codes.items() if r not in errors and code != -signal.SIGTERM),
                     key=lambda r: (r != root, r))
    if not crashed and not errors and root is not None:
        crashed = [root]  # only SIGTERMs: whatever torchrun saw first
    if crashed:
        rank = crashed[0]
        log = _log(folder, rank)
        detail = last_line(log)
        return f"rank {rank} crashed: {exit_status(codes[rank])}" + (f": {detail}" if detail else ""), log
    if errors:
        rank = min(errors, key=lambda r: errors[r]["time"])
        return f"rank {rank}: {errors[rank]['error']}", _log(folder, rank)
    status = exit_status(returncode) if returncode is not None else "no exit status"
    detail = last_line(launcher_log) or "no result and no error message"
    return f"torchrun failed: {status}: {detail}", launcher_log


# Launches in progress: a run stopped while a case's worker thread waits on one (Ctrl-C abandons
# that thread) kills them at exit, so no torchrun or rank outlives the suite's process.
_RUNNING: set = set()


@atexit.register
def _kill_running() -> None:
    for launch in list(_RUNNING):
        _kill_session(launch._proc.pid, signal.SIGKILL)
        launch._kill_ranks()


class Launch:
    """One torchrun launch of a case in `folder`; `entry` is what each rank runs (a test's double may
    replace `suite.measure.executors.rank`)."""

    def __init__(self, case, device, folder: Path, world_size: int, timeout_s: float, entry: list[str] | None = None,
                 threads: int | None = None):
        self.case, self.device, self.folder = case, device, folder
        self.world_size, self.timeout_s = world_size, timeout_s
        self.entry = entry or ENTRY
        self.threads = threads

    def _env(self) -> dict:
        env = child_env()
        if self.device.type == "cpu" and self.threads and "OMP_NUM_THREADS" not in os.environ:
            # the run's threads shared by the ranks (torchrun would set 1 per rank)
            env["OMP_NUM_THREADS"] = str(max(1, self.threads // self.world_size))
        return env

    def run(self) -> tuple[dict | None, str, str, str]:
        """(rank 0's record columns or None, status, reason, log): ok, skipped (every rank found the
        case cannot run here: an Unsupported raised in `prepare`) or failed."""
        (self.folder / "case.json").write_bytes(
            jsonl.encode({"case": case_to_json(self.case), "device": self.device.type}))
        proc = subprocess.Popen(
            torchrun_command(self.world_size, self.entry, self.folder), stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=self._env(), start_new_session=True,
        )
        self._proc = proc
        _RUNNING.add(self)
        timed_out = False
        try:
            out, _ = proc.communicate(timeout=self.timeout_s)
        except subprocess.TimeoutExpired:
            timed_out = True
            out = self._stop(proc)
        except BaseException:  # Ctrl-C in the parent: no rank outlives it
            self._stop(proc)
            raise
        finally:
            self._kill_ranks()
            _RUNNING.discard(self)
        log = out.decode(errors="replace") if out else ""
        done = [_read(self.folder / f"rank{r}.json") for r in range(self.world_size)]
        if not timed_out and all(done) and done[0].get("columns") is not None:
            return done[0]["columns"], "ok", "", ""
        skips = [e for r in range(self.world_size) if (e := _read(self.folder / f"rank{r}.error.json")) and e.get("skip")]
        if not timed_out and len(skips) == self.world_size:
            return None, "skipped", skips[0]["error"], ""
        reason, rank_log = failure(self.folder, self.world_size, log, proc.returncode)
        if timed_out:
            waiting = [r for r in range(self.world_size) if not done[r]]
            reason = (f"timed out after {self.timeout_s:g} s (ranks without a result: "
                      f"{', '.join(map(str, waiting))})" + (f"; {reason}" if "torchrun failed" not in reason else ""))
        return None, "failed", reason, rank_log or log

    def _stop(self, proc: subprocess.Popen) -> bytes:
        """SIGTERM to torchrun (it stops its ranks), then SIGKILL to everything left."""
        _kill_session(proc.pid, signal.SIGTERM)
        try:
            out, _ = proc.communicate(timeout=TERM_GRACE_S)
        except subprocess.TimeoutExpired:
            _kill_session(proc.pid, signal.SIGKILL)
            out, _ = proc.communicate()
        return out or b""

    def _kill_ranks(self) -> None:
        """Every rank leads a session of its own (torchrun starts them so): kill what is left of each,
        where the process with that pid is still this launch's rank (its command line names the folder)."""
        for path in self.folder.glob("rank*.pid"):
            try:
                pid = int(path.read_text())
                cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
            except (ValueError, OSError):
                continue
            if str(self.folder).encode() in cmdline:
                _kill_session(pid, signal.SIGKILL)


def run_case(case, device, run_meta: dict, entry: list[str] | None = None) -> records.Record:
    """The record of one launched case (never raises for the case: `suite.measure.record.outcome`)."""
    began = time.perf_counter()
    draft = records.Draft(records.started(case, run_meta))
    with records.outcome(draft):
        _launch(case, device, draft, entry)
    return draft.record.replace(case_s=time.perf_counter() - began)


def _launch(case, device, draft: records.Draft, entry: list[str] | None) -> None:
    """What the parent checks (the recipe here, enough devices), then the launch; its columns,
    status and reason added to `draft`'s record."""
    import torch

    precision = registry.precision(case.precision).configured(case.params)
    workload = registry.workload(case.workload)
    draft.record = draft.record.replace(emulated=precision.emulated(device))
    reason = precision.unsupported(device) or workload.launch_unsupported(case, precision, device)
    if reason:
        raise Unsupported(reason)
    world_size, timeout_s = workload.launch_size(case)
    with tempfile.TemporaryDirectory(prefix="mpsuite-launch-") as tmp:
        columns, status, reason, log = Launch(case, device, Path(tmp), world_size, timeout_s, entry,
                                              threads=torch.get_num_threads()).run()
    if columns is None:
        draft.record = draft.record.replace(status=status, reason=reason, launch_log=clip(log) or None)
    else:
        draft.record = draft.record.replace(status="ok", **columns)
