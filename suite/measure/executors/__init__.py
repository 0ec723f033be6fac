"""How a run's cases run: one executor per way, behind one small interface (`base.Executor`:
`run(units, run_meta, progress)` yields one record per case), and the one place that decides.

`choose` picks the run's executor from the run's options and device:
- `ray_cluster.RayCluster` (`--executor ray`): the cases on the workers of a Ray cluster;
- `base.Unavailable`: the device asked for is missing, so every case is recorded as skipped;
- `process.Process` (`--isolate`): a fresh subprocess per unit, with a time limit;
- `cuda_worker.CudaWorker` (a CUDA run): one worker process, replaced after a unit that poisons it;
- `thread.InThread` (otherwise): here, on one worker thread, so Ctrl-C is heard at once.
Wherever a unit lands (this process, a child, a Ray worker), `run_here` runs it: the cases of a
`launched` workload as one torchrun launch of its ranks each (`torchrun`, `rank`), any other
measured in that process, the cases of a setting together (`suite.measure.inprocess`).
"""

from __future__ import annotations

from dataclasses import dataclass

from suite.scenario import registry


@dataclass(frozen=True)
class Options:
    """How a run asked its cases to run: `kind` "local" or "ray" (`address`: the Ray cluster's),
    `isolate` (a process per case), `case_timeout` (seconds; None: each executor's default)."""

    kind: str = "local"
    isolate: bool = False
    case_timeout: float | None = None
    address: str | None = None


# Why a launched workload's setting is timed one case after another: its ranks are processes of
# their own, started per case; two launches cannot share rounds.
LAUNCHED_NOTE = "a launched workload (torchrun): each case is a launch of its own, timed one after another"


def run_here(unit, device, clock, run_meta: dict) -> list:
    """The records of a unit's cases (`base.Unit`: one setting, not its partners), run by this
    process: skipped where its device is missing; one torchrun launch per case, one after another,
    where its workload is `launched`; else measured here with `clock`, together
    (`suite.measure.inprocess.run_setting`: paired rounds where they can be)."""
    from suite.measure import env, record as records

    unavailable = env.device_unavailable(device)
    if unavailable:
        return [records.skipped(case, run_meta, unavailable) for case in unit.todo]
    known = registry.WORKLOADS.get(unit.cases[0].workload)
    if known is not None and known.launched:  # its ranks run under torchrun, one launch per case
        from suite.measure.executors import torchrun

        out = [torchrun.run_case(case, device, run_meta) for case in unit.todo]
        if len(unit.cases) > 1:
            group = min(case.case_id for case in unit.cases)
            out = [record.replace(pairing="sequential", pairing_note=LAUNCHED_NOTE, pairing_group=group)
                   for record in out]
        return out
    from suite.measure import inprocess

    return inprocess.run_setting(list(unit.cases), device, clock, run_meta, unit.partners)


def choose(options: Options, device, device_choice: str, threads: int | None = None):
    """The run's executor (`device`: the resolved device; `device_choice`: as asked, which a Ray
    worker resolves on its own node; `threads`: the run's torch threads, None for torch's default,
    which a Ray worker sets for itself). A Ray cluster is reached (or found unreachable) here."""
    from suite.measure import env

    if options.kind == "ray":
        from suite.measure.executors.ray_cluster import RayCluster

        return RayCluster(device_choice, options.address, threads, run_here)
    unavailable = env.device_unavailable(device)
    if unavailable:
        from suite.measure.executors.base import Unavailable

        return Unavailable(unavailable)
    if options.isolate:
        from suite.measure.executors.process import Process

        return Process(device, options.case_timeout)
    if device.type == "cuda":
        from suite.measure.executors.cuda_worker import CudaWorker

        return CudaWorker(device, timeout_s=options.case_timeout)
    from suite.measure.executors.thread import InThread

    return InThread(device, run_here)
