"""Deterministic, cost-balanced shards of a scenario, and the run group that ties them together.

A shard is a pure function of the planned cases and (K, N): no clock, no machine fact, no random
state, so SLURM array tasks, Kubernetes Indexed Job pods and CI matrix legs each compute their own
slice and together run every case exactly once.

- The unit of assignment is a *setting*: a case together with the cases that share its baseline
  (`baseline_case_id`), so a speedup is always the ratio of two timings taken on the same node.
- Each setting's cost is estimated from what the plan knows (`estimated_s`); settings are dealt out
  longest first to the least-loaded shard (LPT, Graham 1969: within 4/3 of the best makespan), ties
  broken by case id and shard index so every machine gets the same answer.
- Within a shard the cases keep plan order.
"""

from __future__ import annotations

import heapq
import os
import re
from dataclasses import dataclass
from typing import Mapping

from suite.core import names
from suite.core.errors import UserError
from suite.scenario.plan import Case

# Nominal throughputs for the cost prior (FLOP/s). Only the ratio between cases matters; the prior
# needs to be the same on every machine, not right on any: the case cap bounds each case anyway.
# Rough dense fp32 GEMM rates: a few server cores ~1e11, a data-centre GPU ~1e14.
NOMINAL_FLOPS = {"cuda": 1e14, "cpu": 1e11}
# A case whose shape lives in its params (a model's training step) counts as this many FLOPs.
UNSHAPED_WORK = 1e12
# A torch.compile'd case (a parameter its folder marks `suite.scenario.params.COMPILES`: a layer's or a
# model's `compile`, a torchao optimizer's `compile_step`) also pays its compiling first call, outside
# the case cap: a prior of tens of seconds for one layer's or a small model's step under inductor, to
# be read against the records' compile_s once a GPU has run them.
COMPILE_S = 30.0


# The most shards a run group may have: as many pods as a Kubernetes Indexed Job runs at once (its
# parallelism is capped at 10^5, batch/v1 JobSpec); a SLURM array holds MaxArraySize - 1 tasks (1000
# by default). A bound, so `--shard 0/99999999999999999999` is one line, not an overflow or a
# hundred-million-entry table.
MAX_SHARDS = 100_000


def check_count(count: int) -> int:
    if not 1 <= count <= MAX_SHARDS:
        raise UserError(f"shard count {count}: expected 1 to {MAX_SHARDS:,} shards")
    return count


@dataclass(frozen=True)
class Shard:
    index: int  # K, 0 <= K < count (SLURM_ARRAY_TASK_ID - MIN, JOB_COMPLETION_INDEX)
    count: int  # N

    def __post_init__(self):
        check_count(self.count)
        if not 0 <= self.index < self.count:
            raise UserError(f"shard {self.index}/{self.count}: the index must be from 0 to {self.count - 1}")

    def __str__(self) -> str:
        return f"{self.index}/{self.count}"


def _int(text: str, what: str) -> int:
    if not re.fullmatch(r"\d+", text.strip()):
        raise UserError(f"{what} {text!r} is not a whole number")
    return int(text)


def parse(text: str, environ: Mapping[str, str] | None = None) -> Shard:
    """`K/N` (K from 0), `auto` (a SLURM job array: SLURM_ARRAY_TASK_ID - SLURM_ARRAY_TASK_MIN of
    SLURM_ARRAY_TASK_COUNT), or `auto/N` (a Kubernetes Indexed Job's JOB_COMPLETION_INDEX, else the
    SLURM index, out of N)."""
    environ = os.environ if environ is None else environ
    head, sep, tail = text.strip().partition("/")
    if head != "auto":
        if not sep:
            raise UserError(f"--shard {text!r}: expected K/N (e.g. 0/8), auto (SLURM job array) or auto/N")
        return Shard(_int(head, "--shard index"), _positive(tail))
    count = _positive(tail) if sep else None
    if "JOB_COMPLETION_INDEX" in environ:
        if count is None:
            raise UserError("--shard auto: Kubernetes gives JOB_COMPLETION_INDEX but not the count; "
                            "pass --shard auto/N with N = the Job's completions")
        return Shard(_int(environ["JOB_COMPLETION_INDEX"], "JOB_COMPLETION_INDEX"), count)
    if "SLURM_ARRAY_TASK_ID" in environ:
        task = _int(environ["SLURM_ARRAY_TASK_ID"], "SLURM_ARRAY_TASK_ID")
        low = _int(environ.get("SLURM_ARRAY_TASK_MIN", "0"), "SLURM_ARRAY_TASK_MIN")
        step = _int(environ.get("SLURM_ARRAY_TASK_STEP", "1"), "SLURM_ARRAY_TASK_STEP")
        if count is None:
            count = _int(environ.get("SLURM_ARRAY_TASK_COUNT", ""), "SLURM_ARRAY_TASK_COUNT")
        if step < 1 or (task - low) % step:
            raise UserError(f"SLURM array task {task} is not on the array's grid (min {low}, step {step}); "
                            "give --shard K/N")
        return Shard((task - low) // step, count)
    raise UserError(f"--shard {text}: neither SLURM_ARRAY_TASK_ID nor JOB_COMPLETION_INDEX is set; "
                    "give --shard K/N")


def _positive(text: str) -> int:
    n = _int(text, "--shard count")
    if n < 1:
        raise UserError("--shard count must be at least 1")
    return n


def group_name(given: str | None, environ: Mapping[str, str] | None = None) -> str | None:
    """The run group's name: `given` (--group), else $MPSUITE_RUN_GROUP, else the scheduler's id of
    the whole array (SLURM_ARRAY_JOB_ID, GITHUB_RUN_ID with its attempt), else None."""
    environ = os.environ if environ is None else environ
    name = given or environ.get("MPSUITE_RUN_GROUP")
    if not name and environ.get("SLURM_ARRAY_JOB_ID"):
        name = f"slurm-{environ['SLURM_ARRAY_JOB_ID']}"
    if not name and environ.get("GITHUB_RUN_ID"):
        name = f"gha-{environ['GITHUB_RUN_ID']}-{environ.get('GITHUB_RUN_ATTEMPT', '1')}"
    return None if not name else names.check_name("run group", name)


def group_id(name: str, spec_hash: str) -> str:
    """What every record of the group carries: its name and the hash of the scenario as asked for
    (`pipeline.scenario_spec`), so shards run from a changed scenario never join the group."""
    return f"{name}.{spec_hash[:8]}"


def estimated_s(case: Case) -> float:
    """A prior of the case's wall time: its warm-up and budget, plus its work at a nominal rate,
    at most its case cap, plus a compile where the case compiles. The same number on every machine
    (the case's own device setting picks the nominal rate and cap; 'auto' counts as a CPU)."""
    device = "cuda" if case.device == "cuda" else "cpu"
    rule = case.timing
    work = UNSHAPED_WORK if case.m is None else 2.0 * case.m * case.k * case.n
    measured = min(rule.case_cap(device), rule.warmup_s + rule.budget_s + work / NOMINAL_FLOPS[device])
    return measured + (COMPILE_S if compiles(case) else 0.0)


def compiles(case: Case) -> bool:
    """Does the case torch.compile something (its model, or a torchao optimizer's step): a parameter
    its folder marks `COMPILES` set?"""
    from suite.scenario import params, registry

    return params.compiles(registry.params_model(case.workload, case.precision).of(case.params))


def _setting_keys(cases: list[Case]) -> list[str]:
    """Each case's setting: the smallest case id among the cases it is tied to by baseline links
    (a chain too: bf16 against fp32 in one sweep, an FP8 recipe against bf16 in another)."""
    parent: dict[str, str] = {}

    def root(key: str) -> str:
        while parent.setdefault(key, key) != key:
            parent[key] = parent[parent[key]]
            key = parent[key]
        return key

    for case in cases:
        if case.baseline_case_id:
            a, b = root(case.case_id), root(case.baseline_case_id)
            if a != b:
                parent[max(a, b)] = min(a, b)
    return [root(case.case_id) for case in cases]


def settings(cases: list[Case]) -> dict[str, list[Case]]:
    """Cases grouped with the baseline cases they are measured against (plan order kept)."""
    out: dict[str, list[Case]] = {}
    for case, key in zip(cases, _setting_keys(cases)):
        out.setdefault(key, []).append(case)
    return out


def assign(cases: list[Case], count: int) -> list[int]:
    """The shard (0..count-1) of each case, in the order given."""
    keys = _setting_keys(cases)
    cost: dict[str, float] = {}
    for case, key in zip(cases, keys):
        cost[key] = cost.get(key, 0.0) + estimated_s(case)
    check_count(count)
    shards = [(0.0, k) for k in range(count)]  # (load, index): a heap, least-loaded (then lowest index) first
    where: dict[str, int] = {}
    for key in sorted(cost, key=lambda k: (-cost[k], k)):
        load, k = heapq.heappop(shards)
        where[key] = k
        heapq.heappush(shards, (load + cost[key], k))
    return [where[key] for key in keys]


def select(cases: list[Case], shard: Shard) -> list[Case]:
    """The cases of one shard, in plan order."""
    return [case for case, k in zip(cases, assign(cases, shard.count)) if k == shard.index]


def loads(cases: list[Case], count: int) -> list[float]:
    """Estimated seconds per shard (for `plan --shards N`)."""
    total = [0.0] * count
    for case, k in zip(cases, assign(cases, count)):
        total[k] += estimated_s(case)
    return total
