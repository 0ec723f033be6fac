"""The suite's timer checked against a peer's: the same GEMM timed twice.

A `fidelity` case is a `gemm` case whose `check()` (called once, untimed by the suite, before the
suite's own measurement) also times the GEMM's callable with an independent harness, the peers'
own timing loops, not a second copy of ours:
- `timer`: `torch.utils.benchmark.Timer.blocked_autorange` (any device; host clock, with a
  synchronize on CUDA; back-to-back calls, so the cache stays warm),
- `do_bench`: `triton.testing.do_bench` (CUDA and triton; CUDA events, L2 flushed before each call),
- `do_bench_cudagraph`: `triton.testing.do_bench_cudagraph` (CUDA graph replays, warm cache).
The case's record then carries both medians and `fidelity_ratio` (suite median over the harness'
median, from `derive` once the suite has measured), so the suite's agreement with its peers is a
tracked result like any other.

Like is compared with like: the case's timing settings (`mode`, `cache`) must match what the harness
does, or the case fails with a message saying which setting to change.
"""

from __future__ import annotations

import dataclasses
import inspect
from dataclasses import dataclass
from typing import Callable

import torch

from suite.scenario.stop_rule import StopRule
from suite.core.errors import Unsupported
from suite.workloads.base import Prepared, Workload
from suite.workloads.fidelity import FidelityParams
from suite.workloads.gemm.workload import GEMM


@dataclass(frozen=True)
class Harness:
    name: str
    label: str  # the function that timed it, for the record
    cache: str  # what it does between repetitions
    mode: str  # "eager" or "cuda_graph"
    needs_triton: bool
    needs_cuda: bool
    run: Callable[[Callable[[], object], StopRule], dict[str, float]]

    def unsupported(self, device: torch.device) -> str | None:
        if self.needs_cuda and device.type != "cuda":
            return f"harness {self.name} ({self.label}) needs a CUDA device; device is {device.type}"
        if self.needs_triton:
            try:
                import triton.testing  # noqa: F401
            except ImportError as err:
                return f"harness {self.name} needs triton: {err}"
        return None


def _timer(fn, rule: StopRule) -> dict[str, float]:
    from torch.utils.benchmark import Timer

    # Timer runs with 1 thread unless told otherwise; the suite times with torch's default.
    timer = Timer(stmt="fn()", globals={"fn": fn}, num_threads=torch.get_num_threads())
    m = timer.blocked_autorange(min_run_time=rule.budget_s)
    return {"ref_time_ms_median": m.median * 1e3, "ref_n_samples": len(m.times),
            "ref_calls_per_sample": m.number_per_run}


def _median_kwargs(bench) -> dict:
    """Ask a triton bench function for the median across its API versions: `return_mode` (current),
    `quantiles` (before return_mode existed), `percentiles` (the first releases: None = median only)."""
    params = inspect.signature(bench).parameters
    if "return_mode" in params:
        return {"return_mode": "median"}
    if "quantiles" in params:
        return {"quantiles": [0.5]}
    if "percentiles" in params:
        return {"percentiles": None}
    return {}


def _first(value) -> float:
    return float(value[0] if isinstance(value, (list, tuple)) else value)


def _do_bench(fn, rule: StopRule) -> dict[str, float]:
    from triton.testing import do_bench

    # warmup and rep are milliseconds; at least triton's defaults (25, 100), else the suite's own.
    ms = do_bench(fn, warmup=max(25, int(rule.warmup_s * 1e3)), rep=max(100, int(rule.budget_s * 1e3)),
                  **_median_kwargs(do_bench))
    return {"ref_time_ms_median": _first(ms)}


def _do_bench_cudagraph(fn, rule: StopRule) -> dict[str, float]:
    from triton.testing import do_bench_cudagraph

    # capture must not run on the default stream (older triton raises there)
    with torch.cuda.stream(torch.cuda.Stream()):
        ms = do_bench_cudagraph(fn, rep=max(100, int(rule.budget_s * 1e3)), **_median_kwargs(do_bench_cudagraph))
    return {"ref_time_ms_median": _first(ms)}


HARNESSES: dict[str, Harness] = {
    h.name: h
    for h in (
        Harness("timer", "torch.utils.benchmark.Timer.blocked_autorange", "warm", "eager", False, False, _timer),
        Harness("do_bench", "triton.testing.do_bench", "cold", "eager", True, True, _do_bench),
        Harness("do_bench_cudagraph", "triton.testing.do_bench_cudagraph", "warm", "cuda_graph", True, True,
                _do_bench_cudagraph),
    )
}


def harness_for(case, device: torch.device) -> Harness:
    """The case's harness, checked against the device and the case's timing settings."""
    name = FidelityParams.of(case.params).harness
    harness = HARNESSES[name]
    # a mismatch is a scenario error on any machine, so it is reported before any skip
    rule = case.timing
    cache = rule.resolved_cache(device.type)
    if (harness.mode, harness.cache) != (rule.mode, cache):
        raise ValueError(
            f"harness {name} times mode={harness.mode} with a {harness.cache} cache, but this case's timing is "
            f"mode={rule.mode}, cache={cache}; "
            f"set [sweep.timing] mode = \"{harness.mode}\", cache = \"{harness.cache}\""
        )
    reason = harness.unsupported(device)
    if reason:
        raise Unsupported(reason)
    return harness


class Fidelity(Workload):
    name = "fidelity"

    def prepare(self, case, precision, device):
        harness = harness_for(case, device)
        gemm_case = dataclasses.replace(case, params={k: v for k, v in case.params.items() if k != "harness"})
        gemm = GEMM.prepare(gemm_case, precision, device)

        reference: dict[str, float] = {}

        def check():
            metrics = gemm.check()  # first: the GEMM's first call compiles/allocates outside both timers
            reference.update(harness.run(gemm.fn, case.timing))
            return {**metrics, **reference}

        def derive(median_s: float) -> dict[str, object]:
            ref_ms = reference.get("ref_time_ms_median")
            out = dict(gemm.derive(median_s)) if gemm.derive else {}
            out["fidelity_ratio"] = median_s * 1e3 / ref_ms if ref_ms else None
            return out

        return Prepared(
            fn=gemm.fn,
            flops=gemm.flops,
            bytes_moved=gemm.bytes_moved,
            check=check,
            extra={**gemm.extra, "ref_harness": harness.label, "ref_cache": harness.cache, "ref_mode": harness.mode},
            derive=derive,
        )


FIDELITY = Fidelity()
