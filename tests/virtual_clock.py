"""A clock for the timing loop's tests: `suite.measure.timing`'s clock interface on virtual time.

Call i of fn, begun `now` seconds into the clock's timeline, takes `cost(fn, i, now)` milliseconds;
the clock's wall time is their sum. A cost may run fn (so an accuracy check sees real outputs, or
fn returns what its call costs) or not (fn stands for nothing). Real timing runs are what the other
tests use: these tests pin the loop's rules (stopping, caps, batches, pairing) to exact numbers.
"""

from __future__ import annotations

import math

from typing import Callable


class VirtualClock:
    name, timing_mode, cache, device_type, calls_per_rep = "virtual", "eager", "warm", "cpu", 1

    def __init__(self, cost: Callable[[Callable[[], object], int, float], float]):
        self.cost, self.now, self.calls = cost, 0.0, 0
        self.batches: list[tuple[Callable, int]] = []  # (fn, reps) of every batch timed

    def for_rule(self, rule):
        return self

    def prepare(self, fn):
        return fn

    def time_batch(self, fn, reps):
        self.batches.append((fn, reps))
        out = []
        for _ in range(reps):
            out.append(self.cost(fn, self.calls, self.now))
            self.calls += 1
            self.now += out[-1] / 1e3
        return out

    def sync(self):
        pass

    def wall(self):
        return self.now


def per_call(ms: Callable[[int, float], float]) -> VirtualClock:
    """Call i, begun at `now` s, takes ms(i, now) milliseconds (fn is not run)."""
    return VirtualClock(lambda fn, i, now: ms(i, now))


def fixed(call_ms: float, run: bool = True) -> VirtualClock:
    """Every call takes call_ms; fn runs (run=True) so checks see its real output."""
    return VirtualClock(lambda fn, i, now: (fn() if run else None, call_ms)[1])


def shared(level: Callable[[float], float] = lambda now: 1.0, jitter: float = 0.002) -> VirtualClock:
    """One timeline for several parties: fn returns its call's milliseconds, times the machine's
    `level(now)` (a drift every party sees alike), times a jitter of a few per mille, different for
    every call (a Weyl sequence: no two calls take the same time, so the median's interval from
    the order statistics is never zero, and paired rounds run their budget)."""
    return VirtualClock(lambda fn, i, now: fn() * level(now) * (1 + jitter * (2 * ((i + 1) * GOLDEN % 1) - 1)))


GOLDEN = (math.sqrt(5) - 1) / 2  # the fractions of its multiples never repeat and fill [0, 1) evenly


def by_dtype(ms_by_dtype: dict, default_ms: float = 1.0) -> VirtualClock:
    """Each call's time by what it returns: a GEMM's output dtype has its own call time (fn runs, so
    checks see real outputs); a call returning something else (the accuracy check's) takes default_ms."""
    return VirtualClock(lambda fn, i, now: ms_by_dtype.get(getattr(fn(), "dtype", None), default_ms))
