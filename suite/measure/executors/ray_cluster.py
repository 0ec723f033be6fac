"""`--executor ray`: a run's cases on the workers of a Ray cluster, their records back to the
driver, which journals each one (`suite.pipeline`), so `--resume` works across a driver restart.

Placement, so that timings never share a device:
- with GPUs in the cluster and a CUDA scenario, one worker per GPU, each holding it whole
  (`num_gpus=1`; Ray sets CUDA_VISIBLE_DEVICES, so the worker sees it as cuda:0) and its node's
  share of CPUs (CPUs / GPUs there), pinned to that node;
- otherwise one worker per node, holding all of its CPUs (so no other Ray task shares its cores)
  and pinned to it (NodeAffinitySchedulingStrategy); a node with no CPUs to give is left out.
Ray sets a worker's OMP_NUM_THREADS to the CPUs it holds, unless already set (Ray 2.x,
`ray._private.utils.set_omp_num_threads_if_unset`), and torch takes its intra-op thread count from
it: a GPU worker holding one CPU ran torch single-threaded (operand generation, reference checks on
the host). Each worker sets torch's threads to the run's `--threads`, else the CPUs it holds, so
`cpu_threads` in its records is what ran.

A worker is sent a *unit* at a time, as one Ray call: the cases of a setting (a case and the cases
sharing its baseline, `suite.fleet.shard.settings`), which it times together in paired rounds the
way `suite.measure.executors.run_here` says, on its node, so a speedup is the ratio of two timings
on one device in one window; the unit's records come back together when it ends. Each worker
captures its own node's facts (`suite.measure.env.run_meta`): on a mixed cluster every record names
the device and versions it ran on.

A worker that dies (killed, out of memory, its node lost) costs the unit it held: it is sent again
to another worker, up to `RETRIES` more times (`worker_retries` counts them), then its cases are
recorded as failed. A case is journaled once, when its record arrives, so nothing is lost or counted
twice. A worker left with an unusable CUDA context (`suite.measure.executors.cuda_worker.poisoned`)
is replaced.

Ray is the optional extra `fleet`; nothing here imports it until a run asks for it.
"""

from __future__ import annotations

import os
import sys
from collections import deque
from typing import Iterable, Iterator

from suite.core.errors import UserError
from suite.fleet.shard import estimated_s
from suite.measure import record as records
from suite.measure.executors.base import Unit

# More attempts of a case after the first whose worker died (a case that kills every worker it
# touches is recorded failed after RETRIES + 1 of them).
RETRIES = 1
# New workers started, in all, in place of dead ones before the run gives up on a node.
REPLACEMENTS_PER_WORKER = 3


def _ray():
    try:
        import ray
    except ImportError as err:
        raise UserError(f"--executor ray needs Ray: pip install -e .[fleet] ({err})") from None
    return ray


class _Worker:
    """One worker process (a Ray actor): the run's facts of its own node, then one unit per call,
    run by `run_here` (`suite.measure.executors.run_here`, handed over by the driver)."""

    def __init__(self, device_choice: str, run_level: dict, threads: int | None, run_here):
        import ray
        import torch

        from suite.measure import env

        if threads:
            torch.set_num_threads(threads)  # the worker process is the run's: it ends with the run
        self.device, self.run_here = env.resolve_device(device_choice), run_here
        self.meta = {**env.run_meta(self.device), **run_level, "ray_node": ray.get_runtime_context().get_node_id()}

    def ready(self) -> None:
        """Answered once the worker is up (torch imported, its node's facts captured)."""

    def run(self, unit: Unit, retries: int) -> list[records.Record]:
        from suite.measure.executors.cuda_worker import poisoned
        from suite.measure.timing import clock_for

        out = self.run_here(unit, self.device, clock_for(self.device), self.meta)
        bad = any(poisoned(record, self.device) for record in out)
        return [record.replace(worker_retries=retries, **({"worker_replaced": True} if bad else {})) for record in out]


# What the driver knows of a run and every worker's records carry; each worker adds its own machine's facts.
RUN_LEVEL = ("run_id", "scenario_description", "threads_setting", "run_group", "shard_index", "shard_count",
             "shard_run_id", "executor")


class RayCluster:
    """Connects to the cluster (or starts a local one); `run(units, meta, progress)` yields one record
    per case, in the order they finish; `close` ends the workers (and a local cluster)."""

    busy = False  # the driver only waits on the cluster: nothing of a case runs in this process

    def __init__(self, device_choice: str, address: str | None, threads: int | None, run_here):
        self.ray = _ray()
        self.device_choice, self.threads, self.run_here = device_choice, threads, run_here
        self.run_level: dict = {}
        self.workers: dict = {}  # slot -> actor handle
        self.replacements = 0
        self.started_ray = not self.ray.is_initialized()
        if self.started_ray:
            address = address or os.environ.get("RAY_ADDRESS")
            try:
                self.ray.init(address=address, include_dashboard=False, log_to_driver=False,
                              configure_logging=False)
            except (ConnectionError, RuntimeError, ValueError) as err:
                raise UserError(f"cannot reach the Ray cluster at {address or 'a new local one'}: "
                                f"{str(err).splitlines()[0] if str(err) else type(err).__name__}") from None
        self.actor_class = self.ray.remote(max_restarts=0, max_task_retries=0)(_Worker)
        self.slots = self._placements()
        if not self.slots:
            self.close()
            raise UserError("the Ray cluster has no node with CPUs or GPUs to give a worker")

    def _placements(self) -> list[dict]:
        """Options of each worker to start (one per GPU, else one per node)."""
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        nodes = [n for n in sorted(self.ray.nodes(), key=lambda n: n["NodeID"]) if n.get("Alive")]
        per_gpu = self.device_choice in ("cuda", "auto") and int(self.ray.cluster_resources().get("GPU", 0))
        slots = []
        for node in nodes:
            have = node.get("Resources", {})
            cpus, gpus = int(have.get("CPU", 0)), int(have.get("GPU", 0))
            pin = NodeAffinitySchedulingStrategy(node["NodeID"], soft=False)
            if per_gpu:  # one worker per GPU, with the node's CPUs shared out among its GPUs
                slots += [{"num_gpus": 1, "num_cpus": max(1, cpus // gpus), "scheduling_strategy": pin}
                          for _ in range(gpus)]
            elif cpus:
                slots.append({"num_cpus": cpus, "scheduling_strategy": pin})
        return slots

    def start(self, slot: int):
        options = self.slots[slot]
        # A worker computes with the cores it holds (the run's --threads, else all of them).
        threads = self.threads or options["num_cpus"]
        actor = self.actor_class.options(**options).remote(self.device_choice, self.run_level, threads, self.run_here)
        self.workers[slot] = actor
        return actor

    def stop(self, slot: int) -> None:
        actor = self.workers.pop(slot, None)
        if actor is not None:
            self.ray.kill(actor, no_restart=True)

    def node_alive(self, slot: int) -> bool:
        strategy = self.slots[slot].get("scheduling_strategy")
        if strategy is None:
            return True
        return any(n["NodeID"] == strategy.node_id and n.get("Alive") for n in self.ray.nodes())

    def run(self, units: Iterable[Unit], meta: dict, progress=None) -> Iterator[dict]:
        ray = self.ray
        self.run_level = {key: meta[key] for key in RUN_LEVEL if key in meta}
        print(f"mpsuite: ray: {len(self.slots)} worker(s), "
              f"{'one per GPU' if 'num_gpus' in self.slots[0] else 'one per node, all its CPUs'}", file=sys.stderr)
        plan = _Schedule(self, list(units))
        try:
            while plan.pending or plan.queue:
                if not plan.pending:
                    raise UserError(f"every Ray worker is gone with {len(plan.queue)} unit(s) left to run")
                [ref], _ = ray.wait(list(plan.pending), num_returns=1)
                slot, unit, _ = plan.pending[ref]
                try:
                    out = ray.get(ref)
                except (ray.exceptions.RayActorError, ray.exceptions.WorkerCrashedError,
                        ray.exceptions.ObjectLostError) as err:
                    for lost_case, failed in plan.lost(slot, err):
                        yield self._report(progress, failed, lost_case)
                else:
                    plan.done(slot, ref)
                    if unit is None:  # a replacement worker is up
                        plan.feed(slot)
                        continue
                    for case, record in zip(unit.todo, out):
                        yield self._report(progress, record, case)
                    if any(record.get("worker_replaced") for record in out):  # its CUDA context is unusable
                        list(plan.lost(slot, None))
                plan.feed_idle()
        finally:
            self.close()

    def failed(self, case, tries: int, err: BaseException) -> dict:
        """A case whose workers all died: the run's columns only (the nodes' facts died with them)."""
        first = (str(err).strip().splitlines() or [type(err).__name__])[0][:300]
        return records.failed(case, self.run_level, f"its Ray worker died {tries + 1} time(s) running it: "
                              f"{type(err).__name__}: {first}", worker_retries=tries)

    @staticmethod
    def _report(progress, record: dict, case) -> dict:
        if progress:
            progress.finished(case, record)
        return record

    def close(self) -> None:
        for slot in list(self.workers):
            try:
                self.stop(slot)
            except Exception:  # the cluster may be gone already; nothing of the run is left on it
                pass
        if self.started_ray and self.ray.is_initialized():
            self.ray.shutdown()
            self.started_ray = False


class _Schedule:
    """Which worker holds which unit: units (settings) go out longest first (a long one started last
    would set the finish time alone), one at a time to an idle worker, and the unit of a worker that
    died goes back to the front of the queue."""

    def __init__(self, cluster: RayCluster, units: list[Unit]):
        self.cluster = cluster
        ordered = sorted(units, key=lambda u: (-sum(map(estimated_s, u.cases)), u.cases[0].case_id))
        self.queue = deque((unit, 0) for unit in ordered)  # (unit, retries)
        self.mine: dict[int, deque] = {}  # slot -> the refs it holds
        self.pending: dict = {}  # object ref -> (slot, unit, attempt)
        for slot in range(len(cluster.slots)):
            cluster.start(slot)
            self.mine[slot] = deque()
        self.feed_idle()

    def feed(self, slot: int) -> None:
        """Give an idle worker the next unit."""
        if self.mine[slot] or not self.queue:
            return
        unit, tries = self.queue.popleft()
        ref = self.cluster.workers[slot].run.remote(unit, tries)
        self.pending[ref] = (slot, unit, tries)
        self.mine[slot].append(ref)

    def feed_idle(self) -> None:
        for slot in [s for s in self.mine if self.cluster.slots[s] is not None]:
            self.feed(slot)

    def done(self, slot: int, ref) -> None:
        del self.pending[ref]
        self.mine[slot].remove(ref)

    def lost(self, slot: int, err: BaseException | None) -> Iterator[tuple]:
        """A worker died (`err`) or was let go (None): the unit it held goes back to the front of the
        queue, counted as a retry where it died (or its cases are failed after RETRIES: yielded as
        (case, record)), and a new worker takes its place."""
        held = list(self.mine[slot])
        self.mine[slot].clear()
        self.cluster.stop(slot)
        for ref in reversed(held):
            _, unit, tries = self.pending.pop(ref)
            if unit is None:  # a replacement that died starting
                continue
            if err is None:
                self.queue.appendleft((unit, tries))
            elif tries < RETRIES:
                self.queue.appendleft((unit, tries + 1))
            else:
                yield from ((case, self.cluster.failed(case, tries, err)) for case in unit.todo)
        cluster = self.cluster
        if cluster.replacements < REPLACEMENTS_PER_WORKER * len(cluster.slots) and cluster.node_alive(slot):
            cluster.replacements += 1
            # Busy until it is up: the units waiting go to the workers already running meanwhile.
            ref = cluster.start(slot).ready.remote()
            self.pending[ref] = (slot, None, 0)
            self.mine[slot].append(ref)
        else:
            cluster.slots[slot] = None
