"""The one timing loop of the suite.

`measure(fn, clock, rule)` warms `fn` up, then times it in batches until the median is known well
enough (the stopping rule below) or the time budget is spent. Every repetition's time is kept.

Two clocks share the loop:
- `CpuClock`: `time.perf_counter` around each call.
- `CudaClock`: CUDA events around each call, one synchronize per batch (never a host clock alone),
  and the L2 cache flushed before every repetition by writing a buffer twice the L2's size, so each
  repetition starts cold the way one step of a real model does (triton's do_bench and nvbench flush
  too; see flush_bytes).

torch is imported lazily so that `suite.spec` can reuse `StopRule` without importing torch.
"""

from __future__ import annotations

import math
import statistics
import time
from dataclasses import dataclass, field
from typing import Callable, Protocol

from pydantic import BaseModel, ConfigDict, Field


class StopRule(BaseModel):
    """When to stop repeating. Scenario files set it under `[defaults.timing]` or `[sweep.timing]`."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    warmup_s: float = Field(0.05, ge=0, description="time spent calling fn before measuring")
    min_warmup: int = Field(2, ge=1, description="warm-up calls at least (first call compiles, allocates)")
    min_samples: int = Field(5, ge=1)
    max_samples: int = Field(1000, ge=1)
    # Stop once the 95% confidence interval of the median is this narrow, relative to the median.
    target_rel_ci: float = Field(0.01, gt=0)
    budget_s: float = Field(1.0, gt=0, description="time for the measured repetitions of one case")


def quantile(sorted_xs: list[float], q: float) -> float:
    """Linear-interpolated quantile of an already sorted list (numpy's default method)."""
    pos = (len(sorted_xs) - 1) * q
    lo = math.floor(pos)
    hi = min(lo + 1, len(sorted_xs) - 1)
    return sorted_xs[lo] + (sorted_xs[hi] - sorted_xs[lo]) * (pos - lo)


def rel_ci_of_median(samples: list[float]) -> float:
    """Half-width of the 95% CI of the median over the median: 1.57 * IQR / sqrt(n) (McGill, Tukey
    and Larsen 1978, the notch of a box plot). Shrinks with more samples, unlike the spread itself."""
    if len(samples) < 2:
        return math.inf
    xs = sorted(samples)
    median = quantile(xs, 0.5)
    if median <= 0:
        return math.inf
    iqr = quantile(xs, 0.75) - quantile(xs, 0.25)
    return 1.57 * iqr / math.sqrt(len(xs)) / median


def stop_reason(samples: list[float], spent_s: float, rule: StopRule) -> str | None:
    """Why to stop now, or None to keep going. Checked after each batch."""
    n = len(samples)
    if n >= rule.max_samples:
        return "max_samples"
    if n >= rule.min_samples and rel_ci_of_median(samples) <= rule.target_rel_ci:
        return "converged"
    if spent_s >= rule.budget_s and n >= rule.min_samples:
        return "budget"
    return None


def next_batch(samples: list[float], spent_s: float, rule: StopRule) -> int:
    """How many repetitions to run before checking again: about a tenth of the budget's worth,
    at least one, never past max_samples, and enough to reach min_samples."""
    n = len(samples)
    per_call = statistics.median(samples) / 1e3 if samples else None
    if per_call is None or per_call <= 0:
        want = 1
    else:
        want = max(1, int(0.1 * rule.budget_s / per_call))
    want = max(want, rule.min_samples - n)
    return max(1, min(want, rule.max_samples - n))


class Clock(Protocol):
    name: str

    def time_batch(self, fn: Callable[[], object], reps: int) -> list[float]:
        """Run fn `reps` times; return each call's time in milliseconds."""

    def sync(self) -> None: ...


class CpuClock:
    name = "perf_counter"

    def time_batch(self, fn, reps):
        out = []
        for _ in range(reps):
            start = time.perf_counter()
            fn()
            out.append((time.perf_counter() - start) * 1e3)
        return out

    def sync(self):
        pass


def flush_bytes(l2_bytes: int | None) -> int:
    """Size of the buffer written between repetitions to evict the L2: twice its size, since
    replacement is not strictly LRU (nvbench and triton flush at least the whole L2; triton uses
    256 MiB whatever the card). Unknown L2: 256 MiB, more than any current GPU's (H100: 50 MiB)."""
    if not l2_bytes or l2_bytes <= 0:
        return 256 * 2**20
    return 2 * l2_bytes


class CudaClock:
    name = "cuda_event"

    def __init__(self, device=None, flush: bool = True):
        import torch

        self.torch = torch
        self.device = torch.device(device or "cuda")
        props = torch.cuda.get_device_properties(self.device)
        l2 = getattr(props, "L2_cache_size", None)
        self.flush_buffer = (
            torch.empty(flush_bytes(l2), dtype=torch.uint8, device=self.device) if flush else None
        )

    def time_batch(self, fn, reps):
        torch = self.torch
        starts = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
        ends = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
        for start, end in zip(starts, ends):
            if self.flush_buffer is not None:
                self.flush_buffer.zero_()  # outside the events: the flush is not timed
            start.record()
            fn()
            end.record()
        torch.cuda.synchronize(self.device)
        return [s.elapsed_time(e) for s, e in zip(starts, ends)]

    def sync(self):
        self.torch.cuda.synchronize(self.device)


def clock_for(device) -> Clock:
    import torch

    device = torch.device(device)
    return CudaClock(device) if device.type == "cuda" else CpuClock()


@dataclass
class Measurement:
    samples_ms: list[float]
    stop_reason: str
    warmup_calls: int
    warmup_s: float
    clock: str
    median_ms: float = field(init=False)
    p10_ms: float = field(init=False)
    p90_ms: float = field(init=False)
    rel_ci: float = field(init=False)

    def __post_init__(self):
        xs = sorted(self.samples_ms)
        self.median_ms = quantile(xs, 0.5)
        self.p10_ms = quantile(xs, 0.1)
        self.p90_ms = quantile(xs, 0.9)
        self.rel_ci = rel_ci_of_median(xs)


def measure(fn: Callable[[], object], clock: Clock, rule: StopRule = StopRule()) -> Measurement:
    warm_calls, warm_start = 0, time.perf_counter()
    while warm_calls < rule.min_warmup or time.perf_counter() - warm_start < rule.warmup_s:
        fn()
        warm_calls += 1
        if warm_calls % 8 == 0 or warm_calls >= rule.min_warmup:
            clock.sync()  # so queued GPU work counts towards the warm-up time
    clock.sync()
    warm_s = time.perf_counter() - warm_start

    samples: list[float] = []
    start = time.perf_counter()
    while True:
        reason = stop_reason(samples, time.perf_counter() - start, rule) if samples else None
        if reason:
            break
        samples += clock.time_batch(fn, next_batch(samples, time.perf_counter() - start, rule))
    return Measurement(samples, reason, warm_calls, warm_s, clock.name)
