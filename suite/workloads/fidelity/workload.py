"""The suite's timer checked against a peer's: the same GEMM timed by both, interleaved.

A `fidelity` case is a `gemm` case with a *peer* (`Prepared.peer`): an independent harness, the
peers' own timing loops, not a second copy of ours, that the runner interleaves with the suite's
own batches in paired rounds (`suite.measure.timing.measure_paired`): each round one batch of the
suite's loop and one block of the peer's, in a seeded random order, so both see the machine in the
same state. Peers:
- `timer`: `torch.utils.benchmark.Timer.blocked_autorange` (any device; host clock, with a
  synchronize on CUDA; back-to-back calls, so the cache stays warm), one `blocked_autorange` of
  about a round's slice per block (its own block size estimate and warm-up each time),
- `do_bench`: `triton.testing.do_bench` (CUDA and triton; CUDA events, L2 flushed before each call),
- `do_bench_cudagraph`: `triton.testing.do_bench_cudagraph` (CUDA graph replays, warm cache).
The case's record then carries both medians, `fidelity_ratio` (the median over the rounds of the
suite's batch median over the peer's block median in the same round, with its interval) and
`fidelity_ratio_medians` (suite median over peer median, the two windows' ratio), so the suite's
agreement with its peers is a tracked result like any other. Where the suite's loop cannot pair
(a call too slow for the case cap), the peer times one block after it and only the ratio of medians
is known.

Like is compared with like: the case's timing settings (`mode`, `cache`) must match what the harness
does, or the case fails with a message saying which setting to change.
"""

from __future__ import annotations

import dataclasses
import inspect
from dataclasses import dataclass
from typing import Callable

import torch

from suite.core.errors import Unsupported
from suite.core.quantiles import median_interval, quantile
from suite.scenario.stop_rule import StopRule
from suite.workloads.base import Workload
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
    # One block of the peer's loop on fn for about `seconds` (`first`: the case's first block, which
    # warms up as the peer does by default): (per-call ms of each of its samples, calls per sample).
    block: Callable[[Callable[[], object], StopRule, float, bool], tuple[list[float], int]]

    def unsupported(self, device: torch.device) -> str | None:
        if self.needs_cuda and device.type != "cuda":
            return f"harness {self.name} ({self.label}) needs a CUDA device; device is {device.type}"
        if self.needs_triton:
            try:
                import triton.testing  # noqa: F401
            except ImportError as err:
                return f"harness {self.name} needs triton: {err}"
        return None


def _timer(fn, rule: StopRule, seconds: float, first: bool) -> tuple[list[float], int]:
    from torch.utils.benchmark import Timer

    # Timer runs with 1 thread unless told otherwise; the suite times with torch's default.
    timer = Timer(stmt="fn()", globals={"fn": fn}, num_threads=torch.get_num_threads())
    m = timer.blocked_autorange(min_run_time=seconds)
    return [t * 1e3 for t in m.times], m.number_per_run


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


def _do_bench(fn, rule: StopRule, seconds: float, first: bool) -> tuple[list[float], int]:
    from triton.testing import do_bench

    # warmup and rep are milliseconds: triton's default warm-up (25 ms), or the suite's own, before
    # the first block; later blocks follow the suite's batches, already warm.
    warmup = max(25, int(rule.warmup_s * 1e3)) if first else 1
    ms = do_bench(fn, warmup=warmup, rep=max(1, int(seconds * 1e3)), **_median_kwargs(do_bench))
    return [_first(ms)], 1


def _do_bench_cudagraph(fn, rule: StopRule, seconds: float, first: bool) -> tuple[list[float], int]:
    from triton.testing import do_bench_cudagraph

    # capture must not run on the default stream (older triton raises there)
    with torch.cuda.stream(torch.cuda.Stream()):
        ms = do_bench_cudagraph(fn, rep=max(1, int(seconds * 1e3)), **_median_kwargs(do_bench_cudagraph))
    return [_first(ms)], 1


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


class PeerTiming:
    """The case's peer (`suite.workloads.base.Peer`): blocks of the harness' loop on the GEMM, and
    the record columns from what the rounds gave."""

    def __init__(self, harness: Harness, fn: Callable[[], object], rule: StopRule):
        self.harness, self.fn, self.rule = harness, fn, rule
        self.calls_per_sample = 0

    def block(self, seconds: float) -> list[float]:
        times, self.calls_per_sample = self.harness.block(self.fn, self.rule, seconds, not self.calls_per_sample)
        return times

    def columns(self, samples_ms: list[float], ratios: list[float], own_median_ms: float) -> dict[str, object]:
        ref = quantile(sorted(samples_ms), 0.5) if samples_ms else None
        medians = own_median_ms / ref if ref else None
        low, high, level = median_interval(ratios) if ratios else (None, None, None)
        return {"ref_time_ms_median": ref, "ref_n_samples": len(samples_ms),
                "ref_calls_per_sample": self.calls_per_sample or None,
                "fidelity_ratio": quantile(sorted(ratios), 0.5) if ratios else medians,
                "fidelity_ratio_low": low, "fidelity_ratio_high": high, "fidelity_ratio_level": level,
                "fidelity_ratio_medians": medians,
                "fidelity_rounds": len(ratios)}


class Fidelity(Workload):
    name = "fidelity"

    def prepare(self, case, precision, device):
        harness = harness_for(case, device)
        gemm_case = dataclasses.replace(case, params={k: v for k, v in case.params.items() if k != "harness"})
        gemm = GEMM.prepare(gemm_case, precision, device)
        return dataclasses.replace(
            gemm, extra={**gemm.extra, "ref_harness": harness.label, "ref_cache": harness.cache, "ref_mode": harness.mode},
            peer=PeerTiming(harness, gemm.fn, case.timing))


FIDELITY = Fidelity()
