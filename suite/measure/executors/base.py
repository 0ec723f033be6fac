"""What every executor is: `run(units, run_meta, progress)` yields one record per case, `close()`
ends whatever it started. A `Unit` is what an executor runs in one go on one device: the cases of a
setting (a baseline and each precision against it, `suite.fleet.shard.settings`), timed together,
their batches interleaved in paired rounds (`suite.measure.inprocess.run_setting`).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Iterable, Iterator, Protocol

from suite.fleet.shard import settings
from suite.measure import record as records
from suite.measure.progress import Progress
from suite.scenario.plan import Case


@dataclass(frozen=True)
class Unit:
    """Cases an executor runs together, in one place, in this order. `partners`: case ids among them
    whose records the run has already (a resumed run): timed again beside the others, so that their
    paired speedups have the baseline in the same rounds, but given no record."""

    cases: tuple[Case, ...]
    partners: frozenset[str] = frozenset()

    @property
    def todo(self) -> tuple[Case, ...]:
        """The cases that get a record."""
        return tuple(c for c in self.cases if c.case_id not in self.partners)


def units(cases: Iterable[Case], done: Iterable[str] = ()) -> list[Unit]:
    """The units of a run's cases: one per setting, in the plan order of their first cases; a
    setting whose cases are all `done` (case ids with a record) has none."""
    done = frozenset(done)
    out = []
    for group in settings(list(cases)).values():
        partners = frozenset(c.case_id for c in group) & done
        if len(partners) < len(group):
            out.append(Unit(tuple(group), partners))
    return out


class Executor(Protocol):
    # A case is still running on a thread the run abandoned (Ctrl-C came during a call Python cannot
    # stop): the process should exit without waiting for it.
    busy: bool

    def run(self, units: Iterable[Unit], run_meta: dict, progress: Progress | None = None) -> Iterator[dict]:
        """One record per case of `units`, each as soon as its case ends; a failing case is a record."""

    def close(self) -> None:
        """End what the executor started (threads, processes, a cluster's workers)."""


class OneByOne(ABC):
    """An executor that runs one unit after another (`run_unit`, which each executor defines), and
    shows each on `progress` as it begins and each of its cases as it ends."""

    busy = False

    def run(self, units: Iterable[Unit], run_meta: dict, progress: Progress | None = None) -> Iterator[dict]:
        for unit in units:
            if progress:
                progress.begin_unit(unit.todo)
            for record in self.run_unit(unit, run_meta, progress):
                if progress:
                    progress.end(record)
                yield record

    @abstractmethod
    def run_unit(self, unit: Unit, run_meta: dict, progress: Progress | None) -> list[dict]:
        """The records of the unit's cases (not its partners'), in its order."""

    def run_case(self, case: Case, run_meta: dict, progress: Progress | None = None) -> dict:
        """The record of one case, run as a unit of its own."""
        return self.run_unit(Unit((case,)), run_meta, progress)[0]

    def close(self) -> None:
        pass


class Unavailable(OneByOne):
    """The run's device is missing (CUDA asked for, none here): every case is recorded as skipped,
    with `reason`, and nothing is started."""

    def __init__(self, reason: str):
        self.reason = reason

    def run_unit(self, unit: Unit, run_meta: dict, progress: Progress | None) -> list[dict]:
        return [records.skipped(case, run_meta, self.reason) for case in unit.todo]
