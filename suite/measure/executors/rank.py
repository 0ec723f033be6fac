"""One rank of a launched case: `python -m suite.measure.executors.rank DIR`, started by torchrun
(`suite.measure.executors.torchrun`), which sets RANK, LOCAL_RANK, WORLD_SIZE and the rendezvous.

DIR holds `case.json` (the case, as `protocol.case_to_json` writes one). The rank writes its pid (`rank<R>.pid`:
the launcher kills what a timed-out launch leaves), points its stdout and stderr at `rank<R>.log`,
and ends by writing `rank<R>.json` (its result) or `rank<R>.error.json` (its error, with the time
it happened: the first rank to fail is the cause, the others usually fail because it did).

Measuring in a rank: the workload's first call and check as in `suite.measure.inprocess`, then the one
timing loop (`timing.measure`) on a `RankClock`: each rank times its own steps, and every rank's
loop sees the same numbers (each sample and wall reading is the maximum over the ranks), so all
ranks make the same warm-up and stopping decisions and run the same number of steps, which
collectives require. Then `profile_steps` more steps under torch.profiler for the collectives
(`suite.measure.collectives`). Rank 0 gathers every rank's samples, peak memory and collectives
and writes the case's record columns: the slowest rank's median is the step time.
"""

from __future__ import annotations

import dataclasses
import json
import os
import resource
import statistics
import sys
import time
import traceback
from datetime import timedelta
from pathlib import Path

# the process-group and launcher settings recorded with a launched case (names or prefixes)
DIST_ENV_PREFIXES = ("NCCL_", "GLOO_", "TORCH_NCCL_", "TORCH_DISTRIBUTED_", "OMP_NUM_THREADS", "MASTER_ADDR",
                     "CUDA_VISIBLE_DEVICES")


class RankClock:
    """A clock for `timing.measure` in one rank of a group: the rank's own clock times its calls,
    and what the loop sees is the slowest rank's (an all-reduce of the maximum), so every rank's
    loop takes the same decisions. `own_ms` keeps this rank's own samples."""

    def __init__(self, inner, device, own_ms: list[float] | None = None, origin: float | None = None):
        import torch.distributed as dist

        self.inner, self.device = inner, device
        self.own_ms = [] if own_ms is None else own_ms
        if origin is None:
            dist.barrier()
            origin = time.perf_counter()
        self.origin = origin
        self.name, self.timing_mode, self.cache = inner.name, inner.timing_mode, inner.cache
        self.device_type = inner.device_type

    def _max(self, values: list[float]) -> list[float]:
        import torch
        import torch.distributed as dist

        t = torch.tensor(values, dtype=torch.float64, device=self.device)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        return t.tolist()

    def wall(self) -> float:
        return self._max([time.perf_counter() - self.origin])[0]

    def for_rule(self, rule) -> "RankClock":
        return RankClock(self.inner.for_rule(rule), self.device, self.own_ms, self.origin)

    def prepare(self, fn):
        return self.inner.prepare(fn)

    def time_batch(self, fn, reps):
        own = self.inner.time_batch(fn, reps)
        self.own_ms += own
        return self._max(own)

    def sync(self):
        self.inner.sync()


def dist_env() -> dict:
    return {k: v for k, v in sorted(os.environ.items()) if k.startswith(DIST_ENV_PREFIXES)}


def _peak_mb(device) -> dict:
    """This rank's high-water mark: the CUDA allocator's, or on a CPU the process's peak RSS (the
    rank's process runs this case alone, so its peak is the case's, interpreter and torch included)."""
    import torch

    if device.type == "cuda":
        return {"peak_mem_mb": torch.cuda.max_memory_allocated(device) / 2**20}
    return {"peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}


def run_rank(case, device_type: str, out: Path, rank: int, world: int) -> dict | None:
    """Measure this rank's part of the case; rank 0 returns the record columns, the others None."""
    import torch
    import torch.distributed as dist

    from suite.measure import collectives, inprocess, record as records
    from suite.measure.timing import clock_for, measure
    from suite.scenario import registry

    local = int(os.environ.get("LOCAL_RANK", rank))
    device = torch.device("cuda", local) if device_type == "cuda" else torch.device("cpu")
    if device.type == "cuda":
        torch.cuda.set_device(device)
    opts = registry.WORKLOADS[case.workload].params.of(case.params)  # its timeout_s, profile_steps
    dist.init_process_group("nccl" if device.type == "cuda" else "gloo", timeout=timedelta(seconds=opts.timeout_s))
    try:
        precision = registry.precision(case.precision).configured(case.params)
        workload = registry.workload(case.workload)
        base = clock_for(device)
        with precision.active():
            prepared = workload.prepare(case, precision, device)
            columns = inprocess.timed_first_call(prepared, base.sync)
            began = time.perf_counter()
            columns.update(prepared.check())
            columns["check_s"] = time.perf_counter() - began
            clock = RankClock(base, device).for_rule(case.timing)
            group = measure(prepared.fn, clock, case.timing)
            coll = collectives.profile(prepared.fn, opts.profile_steps, device, out / f"rank{rank}.trace.json")
        mine = {"rank": rank, "samples_ms": clock.own_ms[-len(group.samples_ms):], **_peak_mb(device), **coll,
                "cpu_threads": torch.get_num_threads()}
        everyone: list = [None] * world
        dist.all_gather_object(everyone, mine)
        if rank != 0:
            return None
        medians = [statistics.median(r["samples_ms"]) for r in everyone]
        slowest = max(range(world), key=medians.__getitem__)
        # the slowest rank's own samples; the loop's decisions (stop reason, warm-up) were shared
        result = dataclasses.replace(group, samples_ms=everyone[slowest]["samples_ms"])
        columns.update(records.measured(result, prepared))
        if prepared.derive is not None:
            columns.update(prepared.derive(result.median_ms / 1e3))
        peak_key = "peak_mem_mb" if device.type == "cuda" else "peak_rss_mb"
        columns.update(
            slowest_rank=slowest,
            rank_time_ms_median=medians,
            **{f"rank_{peak_key}": [r[peak_key] for r in everyone]},
            **({"peak_mem_mb": max(r["peak_mem_mb"] for r in everyone)} if device.type == "cuda" else {}),
            # collectives: bytes are the same on every rank; time is the slowest rank's
            **{k: (max(r[k] for r in everyone) if k.endswith("_ms_per_step") else everyone[0][k]) for k in coll},
            dist_backend=dist.get_backend(),
            dist_env=json.dumps(dist_env()),
            cpu_threads=mine["cpu_threads"],
        )
        return columns
    finally:
        dist.destroy_process_group()


def _write(path: Path, data: dict) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, default=str))
    os.replace(tmp, path)


def _error(err: BaseException) -> dict:
    """What a rank writes of its error: the one triage's (`suite.measure.record.triage`; a case
    found unable to run here, in every rank, is a skip), on one line."""
    from suite.measure import record as records

    outcome = records.triage(err) if isinstance(err, Exception) else {"status": "failed",
                                                                       "reason": records.error_text(err)}
    text = outcome["reason"].strip()
    return {"skip": outcome["status"] == "skipped",
            "error": text.splitlines()[0][:records.REASON_CHARS] if text else type(err).__name__}


def main(argv: list[str]) -> int:
    out = Path(argv[0])
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    (out / f"rank{rank}.pid").write_text(str(os.getpid()))
    log = os.open(out / f"rank{rank}.log", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(log, 1)
    os.dup2(log, 2)
    try:
        from suite.measure.executors.protocol import case_from_json

        request = json.loads((out / "case.json").read_text())
        columns = run_rank(case_from_json(request["case"]), request["device"], out, rank, world)
        _write(out / f"rank{rank}.json", {"rank": rank, "columns": columns})
        return 0
    except BaseException as err:
        traceback.print_exc()
        _write(out / f"rank{rank}.error.json", {"rank": rank, "time": time.time(), **_error(err)})
        return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
