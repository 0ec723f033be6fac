"""How a run's cases run: one executor per way, behind one small interface (`base.Executor`:
`run(units, run_meta, progress)` yields one record per case), and the one place that decides.

`choose` picks the run's executor from the run's options and device:
- `ray_cluster.RayCluster` (`--executor ray`): the cases on the workers of a Ray cluster;
- `base.Unavailable`: the device asked for is missing, so every case is recorded as skipped;
- `process.Process` (`--isolate`): a fresh subprocess per case, with a time limit;
- `cuda_worker.CudaWorker` (a CUDA run): one worker process, replaced after a case that poisons it;
- `thread.InThread` (otherwise): here, on one worker thread, so Ctrl-C is heard at once.
Wherever a case lands (this process, a child, a Ray worker), `run_here` runs it: a case of a
`launched` workload as one torchrun launch of its ranks (`torchrun`, `rank`), any other measured in
that process (`suite.measure.inprocess`).
"""

from __future__ import annotations

from dataclasses import dataclass

from suite.scenario import registry
from suite.scenario.plan import Case


@dataclass(frozen=True)
class Options:
    """How a run asked its cases to run: `kind` "local" or "ray" (`address`: the Ray cluster's),
    `isolate` (a process per case), `case_timeout` (seconds; None: each executor's default)."""

    kind: str = "local"
    isolate: bool = False
    case_timeout: float | None = None
    address: str | None = None


def run_here(case: Case, device, clock, run_meta: dict) -> dict:
    """The record of `case`, run by this process: skipped where its device is missing, one torchrun
    launch where its workload is `launched`, else measured here with `clock`."""
    from suite.measure import env, record as records

    unavailable = env.device_unavailable(device)
    if unavailable:
        return records.skipped(case, run_meta, unavailable)
    known = registry.WORKLOADS.get(case.workload)
    if known is not None and known.launched:  # its ranks run under torchrun, one launch per case
        from suite.measure.executors import torchrun

        return torchrun.run_case(case, device, run_meta)
    from suite.measure import inprocess

    return inprocess.run_case(case, device, clock, run_meta)


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
