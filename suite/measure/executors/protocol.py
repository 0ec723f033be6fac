"""How a case or a unit travels to a process of its own and its records come back (`process`,
`cuda_worker`, `torchrun`, `child`): a unit's cases as one JSON line, a record per line back, the
child's environment, and the words for a process that ended without a record (its exit status, its
log's start and end)."""

from __future__ import annotations

import dataclasses
import os
import signal
import sys
from pathlib import Path

from suite.core import jsonl
from suite.measure.executors.base import Unit
from suite.measure.record import Record
from suite.scenario.plan import Case
from suite.scenario.stop_rule import StopRule

# How much of a failed child's log a record keeps: its start (a crash dump begins with the innermost
# frames) and its end (a Python traceback ends with the error).
LOG_HEAD_CHARS = LOG_TAIL_CHARS = 1500
# After killing a child, how long to wait for its pipes to close (or its last lines) before giving up.
DRAIN_S = 10.0


def case_to_json(case: Case) -> dict:
    # the constructor's fields: case_id is computed from them again on the other side
    out = {f.name: getattr(case, f.name) for f in dataclasses.fields(case) if f.init}
    out["timing"] = case.timing.model_dump()
    return out


def case_from_json(data: dict) -> Case:
    return Case(**{**data, "timing": StopRule(**data["timing"])})


def request(unit: Unit, device: str, run_meta: dict) -> bytes:
    """What a process is sent to run a unit: one JSON line."""
    return jsonl.encode({"cases": [case_to_json(c) for c in unit.cases], "partners": sorted(unit.partners),
                         "device": device, "run_meta": run_meta})


def unit_of(request: dict) -> Unit:
    """The unit a request (`request`, decoded) asks for."""
    return Unit(tuple(case_from_json(c) for c in request["cases"]), frozenset(request.get("partners", ())))


# What a CUDA run's worker sends beside each record's columns (`child.serve`): whether the unit left
# it unusable. It travels on the record's line, never into the record.
POISONED = "worker_poisoned"


def records_in(out: bytes, unit: Unit) -> tuple[dict[str, Record], bool]:
    """The records of the unit's cases among a process's output lines, by case id, each checked
    again as it arrives (`Record`: the process made it so, so a line that breaks the contract is no
    record of ours, like any line that is not a record of one of them, and is left out), and whether
    a line says the process that sent it is unusable now (`POISONED`)."""
    wanted = {c.case_id for c in unit.todo}
    found, poisoned = {}, False
    for line in out.splitlines():
        try:
            columns = jsonl.decode(line)
            if columns.get("case_id") not in wanted:
                continue
            found[columns["case_id"]] = Record({k: v for k, v in columns.items() if k != POISONED})
        except ValueError:  # not JSON, or not a record (`record.RecordInvalid`)
            continue
        poisoned = bool(columns.get(POISONED)) or poisoned
    return found, poisoned


def exit_status(returncode: int) -> str:
    """'signal 11 (SIGSEGV)' for a process killed by a signal, else 'exit status N'."""
    if returncode >= 0:
        return f"exit status {returncode}"
    try:
        name = signal.Signals(-returncode).name
    except ValueError:
        name = "unknown signal"
    return f"signal {-returncode} ({name})"


def clip(log: str) -> str:
    """A log's start and end, the middle left out."""
    if len(log) > LOG_HEAD_CHARS + LOG_TAIL_CHARS:
        return f"{log[:LOG_HEAD_CHARS]}\n[...]\n{log[-LOG_TAIL_CHARS:]}"
    return log


def last_line(log: str) -> str:
    lines = [line.strip() for line in log.splitlines() if line.strip()]
    return lines[-1][:300] if lines else ""


def child_command(*args: str) -> list[str]:
    """The command line of a child that runs cases (`suite.measure.executors.child`)."""
    return [sys.executable, "-m", "suite.measure.executors.child", *args]


def child_env() -> dict:
    """The child must import this very `suite`, wherever the parent found it."""
    package_root = str(Path(__file__).resolve().parents[3])
    path = os.environ.get("PYTHONPATH")
    return {**os.environ, "PYTHONPATH": package_root + (os.pathsep + path if path else "")}
