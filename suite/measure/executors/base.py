"""What every executor is: `run(units, run_meta, progress)` yields one record per case, `close()`
ends whatever it started. A `Unit` is what an executor runs in one go on one device.

Today a unit is one case (`units`). Issue #26 times the cases of a setting (a baseline and each
precision against it, `suite.fleet.shard.settings`) together, their batches interleaved in one
window: a unit then holds that setting's cases, and the interface stays as it is.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Iterator, Protocol

from suite.measure import record as records
from suite.measure.progress import Progress
from suite.scenario.plan import Case


@dataclass(frozen=True)
class Unit:
    """Cases an executor runs together, in one place, in this order."""

    cases: tuple[Case, ...]


def units(cases: Iterable[Case]) -> list[Unit]:
    """The units of a run's cases, in plan order: one case each."""
    return [Unit((case,)) for case in cases]


class Executor(Protocol):
    # A case is still running on a thread the run abandoned (Ctrl-C came during a call Python cannot
    # stop): the process should exit without waiting for it.
    busy: bool

    def run(self, units: Iterable[Unit], run_meta: dict, progress: Progress | None = None) -> Iterator[dict]:
        """One record per case of `units`, each as soon as its case ends; a failing case is a record."""

    def close(self) -> None:
        """End what the executor started (threads, processes, a cluster's workers)."""


class OneByOne:
    """An executor that runs each unit's cases one after another, each through `run_case`, and
    shows each on `progress` as it begins and ends."""

    busy = False

    def run(self, units: Iterable[Unit], run_meta: dict, progress: Progress | None = None) -> Iterator[dict]:
        for unit in units:
            for case in unit.cases:
                if progress:
                    progress.begin(case)
                record = self.run_case(case, run_meta, progress)
                if progress:
                    progress.end(record)
                yield record

    def run_case(self, case: Case, run_meta: dict, progress: Progress | None) -> dict:
        raise NotImplementedError

    def close(self) -> None:
        pass


class Unavailable(OneByOne):
    """The run's device is missing (CUDA asked for, none here): every case is recorded as skipped,
    with `reason`, and nothing is started."""

    def __init__(self, reason: str):
        self.reason = reason

    def run_case(self, case: Case, run_meta: dict, progress: Progress | None) -> dict:
        return records.skipped(case, run_meta, self.reason)
