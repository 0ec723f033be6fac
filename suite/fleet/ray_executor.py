"""The Ray executor: a run's cases on the workers of a Ray cluster, their records back to the
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

A worker is sent a *setting* at a time (a case and the cases sharing its baseline,
`suite.fleet.shard.settings`), so a speedup is the ratio of two timings on one device; each case is
its own Ray call, so each record comes back as soon as its case ends. Each worker captures its own
node's facts (`run_meta`): on a mixed cluster every record names the device and versions it ran on.

A worker that dies (killed, out of memory, its node lost) costs the cases it held: each is sent
again to another worker, up to `RETRIES` more times (`worker_retries` counts them), then recorded as
failed. A case is journaled once, when its record arrives, so nothing is lost or counted twice. A
worker left with an unusable CUDA context (`suite.measure.isolate.poisoned`) is replaced.

Ray is the optional extra `fleet`; nothing here imports it until a run asks for it.
"""

from __future__ import annotations

import os
import sys
from collections import deque
from typing import Iterator

from suite.core.errors import UserError
from suite.fleet.shard import estimated_s, settings

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
    """One worker process (a Ray actor): the run's facts of its own node, then one case per call."""

    def __init__(self, device_choice: str, run_level: dict, threads: int | None):
        import ray
        import torch

        from suite.measure import env, runner

        if threads:
            torch.set_num_threads(threads)  # the worker process is the run's: it ends with the run
        self.device = env.resolve_device(device_choice)
        self.meta = {**runner.run_meta(self.device), **run_level, "ray_node": ray.get_runtime_context().get_node_id()}

    def ready(self) -> None:
        """Answered once the worker is up (torch imported, its node's facts captured)."""

    def run(self, case, retries: int) -> dict:
        from suite.measure import isolate, runner

        record = next(runner.run([case], self.device, self.meta))
        record["worker_retries"] = retries
        if isolate.poisoned(record, self.device):
            record["worker_replaced"] = True
        return record


# What the driver knows of a run and every worker's records carry; each worker adds its own machine's facts.
RUN_LEVEL = ("run_id", "scenario_description", "threads_setting", "run_group", "shard_index", "shard_count",
             "shard_run_id", "executor")


class Executor:
    """Connects to the cluster (or starts a local one); `run(cases, meta, progress)` yields one record
    per case, in the order they finish; `close` ends the workers (and a local cluster)."""

    def __init__(self, device_choice: str, address: str | None, threads: int | None):
        self.ray = _ray()
        self.device_choice, self.threads = device_choice, threads
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

    def _start(self, slot: int):
        options = self.slots[slot]
        # A worker computes with the cores it holds (the run's --threads, else all of them).
        threads = self.threads or options["num_cpus"]
        actor = self.actor_class.options(**options).remote(self.device_choice, self.run_level, threads)
        self.workers[slot] = actor
        return actor

    def _stop(self, slot: int) -> None:
        actor = self.workers.pop(slot, None)
        if actor is not None:
            self.ray.kill(actor, no_restart=True)

    def _node_alive(self, slot: int) -> bool:
        strategy = self.slots[slot].get("scheduling_strategy")
        if strategy is None:
            return True
        return any(n["NodeID"] == strategy.node_id and n.get("Alive") for n in self.ray.nodes())

    def run(self, cases, meta: dict, progress=None) -> Iterator[dict]:
        ray = self.ray
        cases = list(cases)
        self.run_level = {key: meta[key] for key in RUN_LEVEL if key in meta}
        # Settings, longest first (a long one started last would set the finish time alone).
        units = sorted(settings(list(cases)).values(), key=lambda u: (-sum(map(estimated_s, u)), u[0].case_id))
        queue = deque((case, 0, i) for i, unit in enumerate(units) for case in unit)  # (case, retries, setting)
        mine: dict[int, deque] = {}  # slot -> its cases, in order
        pending: dict = {}  # object ref -> (slot, case, attempt)
        print(f"mpsuite: ray: {len(self.slots)} worker(s), "
              f"{'one per GPU' if 'num_gpus' in self.slots[0] else 'one per node, all its CPUs'}", file=sys.stderr)
        for slot in range(len(self.slots)):
            self._start(slot)
            mine[slot] = deque()

        def feed(slot: int) -> None:
            """Give an idle worker the next setting (cases queued for a retry count as one each)."""
            if mine[slot] or not queue:
                return
            batch = [queue.popleft()]
            while queue and batch[0][2] is not None and queue[0][2] == batch[0][2]:
                batch.append(queue.popleft())
            for case, tries, _ in batch:
                ref = self.workers[slot].run.remote(case, tries)
                pending[ref] = (slot, case, tries)
                mine[slot].append(ref)

        def lost(slot: int, err: BaseException | None) -> Iterator[dict]:
            """A worker died (`err`) or was let go (None): the cases it held go back to the front of the
            queue, counted as a retry where it died (or are failed after RETRIES), and a new worker
            takes its place."""
            held = list(mine[slot])
            mine[slot].clear()
            self._stop(slot)
            for ref in reversed(held):
                _, case, tries = pending.pop(ref)
                if case is None:  # a replacement that died starting
                    continue
                if err is None:
                    queue.appendleft((case, tries, None))
                elif tries < RETRIES:
                    queue.appendleft((case, tries + 1, None))
                else:
                    yield self._failed(case, tries, err)
            if self.replacements < REPLACEMENTS_PER_WORKER * len(self.slots) and self._node_alive(slot):
                self.replacements += 1
                # Busy until it is up: the cases waiting go to the workers already running meanwhile.
                ref = self._start(slot).ready.remote()
                pending[ref] = (slot, None, 0)
                mine[slot].append(ref)
            else:
                self.slots[slot] = None

        by_id = {case.case_id: case for case in cases}

        def failed_case(record: dict):
            return by_id[record["case_id"]]

        for slot in mine:
            feed(slot)
        try:
            while pending or queue:
                if not pending:
                    raise UserError(f"every Ray worker is gone with {len(queue)} case(s) left to run")
                [ref], _ = ray.wait(list(pending), num_returns=1)
                slot, case, tries = pending[ref]
                try:
                    record = ray.get(ref)
                except (ray.exceptions.RayActorError, ray.exceptions.WorkerCrashedError,
                        ray.exceptions.ObjectLostError) as err:
                    for failed in lost(slot, err):
                        yield self._report(progress, failed, failed_case(failed))
                else:
                    del pending[ref]
                    mine[slot].remove(ref)
                    if case is None:  # a replacement worker is up
                        feed(slot)
                        continue
                    yield self._report(progress, record, case)
                    if record.get("worker_replaced"):  # its CUDA context is unusable: a new worker
                        list(lost(slot, None))
                for idle in [s for s in mine if self.slots[s] is not None]:
                    feed(idle)
        finally:
            self.close()

    def _failed(self, case, tries: int, err: BaseException) -> dict:
        """A case whose workers all died: the run's columns only (the nodes' facts died with them)."""
        from suite.measure import runner

        first = (str(err).strip().splitlines() or [type(err).__name__])[0][:300]
        return runner.skipped_record(case, self.run_level, "") | {
            "status": "failed", "worker_retries": tries,
            "reason": f"its Ray worker died {tries + 1} time(s) running it: {type(err).__name__}: {first}"}

    @staticmethod
    def _report(progress, record: dict, case) -> dict:
        if progress:
            progress.finished(case, record)
        return record

    def close(self) -> None:
        for slot in list(self.workers):
            try:
                self._stop(slot)
            except Exception:  # the cluster may be gone already; nothing of the run is left on it
                pass
        if self.started_ray and self.ray.is_initialized():
            self.ray.shutdown()
            self.started_ray = False
