"""The one timing loop of the suite.

`measure(fn, clock, rule)` calibrates on one call, warms `fn` up until its speed has settled, then
times it in batches until the median is known well enough, the time budget is spent or enough
samples are taken (`StopRule`), all inside a whole-case cap: a call 300 times slower than the
budget assumed (bf16 on a CPU without native bf16) costs fewer samples, never an unbounded case.
Every repetition's time is kept, with the wall-clock window of the batch it belongs to, so samples
can be matched with telemetry readings (`suite.measure.telemetry`: clocks, throttling).

Two clocks share the loop:
- `CpuClock`: `time.perf_counter` around each call. Warm cache by default; `cache = "cold"` reads
  (and rewrites) a buffer twice the last-level cache before every repetition, outside the timing.
- `CudaClock`: CUDA events around each call, one synchronize per batch (never a host clock alone).
  `cache = "cold"` (the default on CUDA) zeroes a buffer twice the L2's size before every repetition,
  outside the events, so each repetition starts cold the way one step of a real model does (triton's
  do_bench and nvbench flush too; see flush_bytes). `mode = "cuda_graph"` captures the callable in a
  CUDA graph once and times its replays: the host's launch overhead is out of the numbers. A replay
  holds `graph_calls` calls (`Clock.calls_per_rep`): the loop sizes batches, warm-up and the case cap
  in repetitions (what time actually passes) and divides only the recorded samples by it.
  The device parts (events, synchronize, graph capture, buffers) sit behind `TorchCudaApi`, so the
  loop's logic is tested on a CPU with a fake.

The rule itself (`StopRule`) is scenario data and lives in `suite.scenario.stop_rule`; torch is
imported lazily here.
"""

from __future__ import annotations

import math
import random
import statistics
import time
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, ContextManager, NamedTuple, Protocol

from suite.core.errors import TimingUnsupported
from suite.core.quantiles import (
    MIN_BATCHES, batch_medians, median_level, quantile, rel_ci_level, rel_ci_of_batches, rel_ci_of_median, rel_spread,
)
from suite.scenario.stop_rule import StopRule


# ---------------------------------------------------------------------------------------------
# The rules


# The level the stopping rule's target is a half-width at: "converged" needs the samples' interval of
# the median (`quantiles.median_interval`) to reach it, so at least 6 samples (5 give their range, 94%).
TARGET_LEVEL = 0.95


def stop_reason(samples: list[float], spent_s: float, rule: StopRule, medians: list[float] | None = None) -> str | None:
    """Why to stop measuring now, or None to keep going. Checked after each batch. "converged": the
    median's 95% interval from the samples within `target_rel_ci`. `medians`: the batches' medians so
    far; given, "converged" also needs them to agree (MIN_BATCHES of them, their interval, at the
    level their count allows, within the target too), so that a level drifting between batches is
    not called known."""
    n = len(samples)
    if n >= rule.max_samples:
        return "max_samples"
    if (n >= rule.min_samples and median_level(n) >= TARGET_LEVEL
            and rel_ci_of_median(samples) <= rule.target_rel_ci):
        between = rel_ci_of_batches(medians) if medians is not None else 0.0
        if between is not None and between <= rule.target_rel_ci:
            return "converged"
    if spent_s >= rule.budget_s and n >= rule.min_samples:
        return "budget"
    return None


def next_batch(samples: list[float], spent_s: float, rule: StopRule, calibrated_s: float | None = None) -> int:
    """How many repetitions to run before checking again: about a tenth of the budget's worth and
    at most a MIN_BATCHES-th of max_samples (so that even a fast call's samples come in batches
    whose medians show drift), at least one, never past max_samples, and enough to reach
    min_samples. Before any sample, the per-call time is the calibration's (`calibrated_s`), if any."""
    n = len(samples)
    per_call = statistics.median(samples) / 1e3 if samples else calibrated_s
    if per_call is None or per_call <= 0:
        want = 1
    else:
        want = max(1, min(int(0.1 * rule.budget_s / per_call), rule.max_samples // MIN_BATCHES))
    want = max(want, rule.min_samples - n)
    return max(1, min(want, rule.max_samples - n))


# Each warm-up batch after the first lasts about this fraction of warmup_s and has at least this many
# calls, so its median is not one noisy call, unless that would overrun the warm-up's time limit.
WARMUP_BATCH_FRACTION = 0.25
WARMUP_BATCH_MIN_CALLS = 5


def warmup_batch(last_median_ms: float, spent_s: float, rule: StopRule) -> int:
    """Calls in the next warm-up batch."""
    if last_median_ms <= 0:
        return WARMUP_BATCH_MIN_CALLS
    want = max(WARMUP_BATCH_MIN_CALLS, int(WARMUP_BATCH_FRACTION * rule.warmup_s * 1e3 / last_median_ms))
    fits = int((rule.warmup_cap_s - spent_s) * 1e3 / last_median_ms)
    return max(1, min(want, fits))


def _agree(a: float, b: float, tol: float) -> bool:
    return b > 0 and abs(a - b) <= tol * b


def warmup_done(
    medians_ms: list[float], sm_clocks_mhz: list[float | None], spent_s: float, calls: int, rule: StopRule
) -> str | None:
    """Why the warm-up ends now, or None to keep warming. `medians_ms[i]` is batch i's median and
    `sm_clocks_mhz[i]` the SM clock read after it (None where there is no sensor, e.g. on a CPU).

    Batch 0 (compile, allocate) never counts. Settled means: the last `warmup_agree` pairs of
    consecutive batch medians agree within `warmup_tol`, and the SM clock did not rise by more than
    `warmup_tol` across them (a ramping clock speeds the kernel up later)."""
    if spent_s >= rule.warmup_cap_s:
        return "cap"
    if spent_s < rule.warmup_s or calls < rule.min_warmup:
        return None
    need = rule.warmup_agree + 1
    recent = medians_ms[1:][-need:]
    if len(recent) < need:
        return None
    if not all(_agree(b, a, rule.warmup_tol) for a, b in zip(recent, recent[1:])):
        return None
    clocks = [c for c in sm_clocks_mhz[1:][-need:] if c is not None]
    if any(b > a * (1 + rule.warmup_tol) for a, b in zip(clocks, clocks[1:])):
        return None
    return "settled"


# ---------------------------------------------------------------------------------------------
# Clocks


class Clock(Protocol):
    name: str
    timing_mode: str  # "eager" or "cuda_graph"
    cache: str  # "cold" or "warm": what was actually done
    device_type: str  # "cpu" or "cuda": which default case cap applies
    calls_per_rep: int  # calls one repetition makes (a CUDA graph's replay: graph_calls)

    def wall(self) -> float:
        """Host seconds (time.perf_counter): what budgets, caps and batch windows are counted on."""

    def for_rule(self, rule: StopRule) -> "Clock":
        """A clock set up for this rule's mode and cache (sharing buffers); raises
        TimingUnsupported when the device cannot do what the rule asks."""

    def prepare(self, fn: Callable[[], object]) -> Callable[[], object]:
        """What one repetition runs (fn itself, or a captured graph's replay)."""

    def time_batch(self, fn: Callable[[], object], reps: int) -> list[float]:
        """Run fn `reps` times; return each repetition's time in milliseconds (a graph replay's whole
        time: `measure` divides the samples by `calls_per_rep`)."""

    def sync(self) -> None: ...


def flush_bytes(cache_bytes: int | None) -> int:
    """Size of the buffer written between repetitions to evict a cache (the GPU's L2 or the CPU's
    last level): twice its size, since replacement is not strictly LRU (nvbench and triton flush at
    least the whole L2; triton uses 256 MiB whatever the card). Unknown size: 256 MiB, more than any
    current GPU's L2 (H100: 50 MiB)."""
    if not cache_bytes or cache_bytes <= 0:
        return 256 * 2**20
    return 2 * cache_bytes


def _parse_cache_size(text: str) -> int | None:
    """'307200K' / '32M' / '1024' (sysfs cache size) -> bytes."""
    text = text.strip().upper()
    units = {"K": 2**10, "M": 2**20, "G": 2**30}
    try:
        if text and text[-1] in units:
            return int(text[:-1]) * units[text[-1]]
        return int(text)
    except ValueError:
        return None


def cpu_llc_bytes(sysfs: Path = Path("/sys/devices/system/cpu/cpu0/cache")) -> int | None:
    """Size of the CPU's last-level cache from sysfs (Linux), or None."""
    best: tuple[int, int] | None = None
    for index in sysfs.glob("index*"):
        try:
            level = int((index / "level").read_text())
            kind = (index / "type").read_text().strip()
            size = _parse_cache_size((index / "size").read_text())
        except (OSError, ValueError):
            continue
        if kind in ("Unified", "Data") and size and (best is None or level > best[0]):
            best = (level, size)
    return best[1] if best else None


class _Flush:
    """A lazily allocated flush buffer shared by the clocks derived from one clock."""

    def __init__(self, make: Callable[[], object]):
        self.make, self.buffer = make, None

    def get(self):
        if self.buffer is None:
            self.buffer = self.make()
        return self.buffer


def _cpu_flush_buffer(nbytes: int):
    import torch

    return torch.ones(nbytes, dtype=torch.uint8)


class CpuClock:
    name = "perf_counter"
    timing_mode = "eager"
    device_type = "cpu"
    calls_per_rep = 1
    wall = staticmethod(time.perf_counter)  # the host clock budgets and caps are counted on

    def __init__(self, cache: str = "warm", flush: _Flush | None = None):
        if cache not in ("cold", "warm"):
            raise ValueError(f"cache must be 'cold' or 'warm', got {cache!r}")
        self.cache = cache
        self._flush = flush or _Flush(lambda: _cpu_flush_buffer(flush_bytes(cpu_llc_bytes())))

    def for_rule(self, rule: StopRule) -> "CpuClock":
        if rule.mode == "cuda_graph":
            raise TimingUnsupported("timing mode cuda_graph needs a CUDA device")
        return CpuClock(rule.resolved_cache("cpu"), self._flush)

    def prepare(self, fn):
        return fn

    def time_batch(self, fn, reps):
        out = []
        buffer = self._flush.get() if self.cache == "cold" else None
        for _ in range(reps):
            if buffer is not None:
                # read and write every line: plain stores (memset) may bypass the cache
                buffer.add_(1)
            start = time.perf_counter()
            fn()
            out.append((time.perf_counter() - start) * 1e3)
        return out

    def sync(self):
        pass


class TorchCudaApi:
    """The device side of CudaClock, the only part that needs a GPU."""

    # Calls on a side stream before capture, as the CUDA-graph docs ask (lazy init, workspaces).
    CAPTURE_WARMUP_CALLS = 3

    def __init__(self, device=None):
        import torch

        self.torch = torch
        self.device = torch.device(device or "cuda")

    def event(self):
        return self.torch.cuda.Event(enable_timing=True)

    def synchronize(self) -> None:
        self.torch.cuda.synchronize(self.device)

    def l2_bytes(self) -> int | None:
        props = self.torch.cuda.get_device_properties(self.device)
        return getattr(props, "L2_cache_size", None)

    def buffer(self, nbytes: int):
        return self.torch.empty(nbytes, dtype=self.torch.uint8, device=self.device)

    def capture(self, fn: Callable[[], object], calls: int) -> Callable[[], object]:
        torch = self.torch
        side = torch.cuda.Stream(self.device)
        side.wait_stream(torch.cuda.current_stream(self.device))
        with torch.cuda.stream(side):
            for _ in range(self.CAPTURE_WARMUP_CALLS):
                fn()
        torch.cuda.current_stream(self.device).wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        try:
            with torch.cuda.graph(graph):
                for _ in range(calls):
                    fn()
        except Exception as err:
            raise RuntimeError(f"CUDA graph capture failed ({type(err).__name__}: {err}); "
                               "time this case with mode = \"eager\"") from err
        torch.cuda.synchronize(self.device)
        return graph.replay  # the bound method keeps the graph alive


class CudaClock:
    name = "cuda_event"
    device_type = "cuda"
    wall = staticmethod(time.perf_counter)

    def __init__(
        self,
        device=None,
        cache: str = "cold",
        mode: str = "eager",
        graph_calls: int = 1,
        api=None,
        flush: _Flush | None = None,
    ):
        if cache not in ("cold", "warm"):
            raise ValueError(f"cache must be 'cold' or 'warm', got {cache!r}")
        self.api = api or TorchCudaApi(device)
        self.cache, self.timing_mode, self.graph_calls = cache, mode, graph_calls
        self._flush = flush or _Flush(lambda: self.api.buffer(flush_bytes(self.api.l2_bytes())))

    @property
    def calls_per_rep(self) -> int:
        return self.graph_calls if self.timing_mode == "cuda_graph" else 1

    def for_rule(self, rule: StopRule) -> "CudaClock":
        cache = rule.resolved_cache("cuda")
        return CudaClock(cache=cache, mode=rule.mode, graph_calls=rule.graph_calls, api=self.api, flush=self._flush)

    def prepare(self, fn):
        if self.timing_mode == "cuda_graph":
            return self.api.capture(fn, self.graph_calls)
        return fn

    def time_batch(self, fn, reps):
        starts = [self.api.event() for _ in range(reps)]
        ends = [self.api.event() for _ in range(reps)]
        buffer = self._flush.get() if self.cache == "cold" else None
        for start, end in zip(starts, ends):
            if buffer is not None:
                buffer.zero_()  # before the start event: the flush is not timed
            start.record()
            fn()
            end.record()
        self.api.synchronize()
        return [s.elapsed_time(e) for s, e in zip(starts, ends)]

    def sync(self):
        self.api.synchronize()


def clock_for(device, rule: StopRule | None = None) -> Clock:
    import torch

    device = torch.device(device)
    clock: Clock = CudaClock(device) if device.type == "cuda" else CpuClock()
    return clock.for_rule(rule) if rule is not None else clock


# ---------------------------------------------------------------------------------------------
# The loop


class Batch(NamedTuple):
    """A batch of repetitions: wall-clock window (time.perf_counter seconds) and size."""

    start_s: float
    end_s: float
    reps: int


@dataclass
class Measurement:
    samples_ms: list[float]
    stop_reason: str
    warmup_calls: int
    warmup_s: float
    clock: str
    warmup_reason: str = ""
    timing_mode: str = "eager"
    cache: str = "warm"
    batches: list[Batch] = field(default_factory=list)
    warmup_medians_ms: list[float] = field(default_factory=list)
    first_call_ms: float | None = None  # the calibration call (the case's first call)
    first_call_kept: bool = False  # a slow case keeps its first call as a sample
    case_cap_s: float | None = None
    # GPU energy (NVML's counter) over the warm back-to-back window after the samples
    # (`_Loop.energy_window`): joules, the seconds it was read over, the calls it ran
    energy_j: float | None = None
    energy_s: float | None = None
    energy_calls: int | None = None
    median_ms: float = field(init=False)
    p10_ms: float = field(init=False)
    p90_ms: float = field(init=False)
    rel_ci: float = field(init=False)
    rel_ci_window: float = field(init=False)
    rel_ci_batches: float | None = field(init=False)
    rel_ci_level: float | None = field(init=False)
    rel_spread: float = field(init=False)

    def __post_init__(self):
        xs = sorted(self.samples_ms)
        self.median_ms = quantile(xs, 0.5)
        self.p10_ms = quantile(xs, 0.1)
        self.p90_ms = quantile(xs, 0.9)
        self.rel_ci_window = rel_ci_of_median(xs)
        medians = self.batch_medians_ms
        self.rel_ci_batches = rel_ci_of_batches(medians)
        self.rel_ci = max(self.rel_ci_window, self.rel_ci_batches or 0.0)
        self.rel_ci_level = rel_ci_level(len(xs), len(medians))
        self.rel_spread = rel_spread(xs)

    @property
    def window(self) -> tuple[float, float] | None:
        """Wall-clock span of the measured repetitions (warm-up excluded)."""
        return (self.batches[0].start_s, self.batches[-1].end_s) if self.batches else None

    @property
    def batch_medians_ms(self) -> list[float]:
        """Each batch's median per call (in paired rounds, batch i is the case's batch of round i)."""
        return batch_medians(self.samples_ms, [b.reps for b in self.batches])


def measure(
    fn: Callable[[], object],
    clock: Clock,
    rule: StopRule = StopRule(),
    *,
    first_call_ms: float | None = None,
    spent_s: float = 0.0,
    sm_clock_mhz: Callable[[], float | None] | None = None,
    energy_mj: Callable[[], float | None] | None = None,
    wall: Callable[[], float] | None = None,
) -> Measurement:
    """Calibrate on one call, warm fn up until settled, then time it until `rule` says stop, all
    within the rule's whole-case cap.

    Calibration (as pyperf and torch.utils.benchmark's blocked_autorange do): the first call's time
    sizes everything after it. A case whose minimum warm-up and samples would not fit in the cap is
    *slow*: it skips the warm-up (the first call already paid the one-time costs), keeps its first
    call as a sample, and adds samples one call at a time while the next one fits, down to
    `floor_samples`; its `stop_reason` is "cap" and its `rel_ci` says how little it knows (inf for
    one sample). No case overruns the cap by more than one repetition.

    Everything is sized in repetitions, the unit time passes in: a CUDA graph's replay is
    `clock.calls_per_rep` calls. Only the recorded samples (and warm-up medians) are per call.

    first_call_ms: a first call the caller already timed with this clock (the runner's accuracy
    check runs on its output), so a minute-long call is not paid twice; spent_s: seconds the case
    spent before this function (that call and the check), counted against the cap.
    sm_clock_mhz: the GPU's current SM clock (telemetry), read after each warm-up batch.
    energy_mj: the GPU's energy counter (telemetry, mJ), read around the energy window after the
    samples (`_Loop.energy_window`: `Measurement.energy_j` over `energy_s` and `energy_calls`).
    wall: the host clock for budgets and batch windows (default: the clock's own `wall`, else
    time.perf_counter; a fake clock brings virtual time)."""
    wall = wall or getattr(clock, "wall", time.perf_counter)
    loop = _Loop(clock, rule, wall, spent_s, energy_mj)
    loop.start(fn, first_call_ms)
    return loop.alone(sm_clock_mhz)


# The energy window after a case's samples (`_Loop.energy_window`): its repetitions back to back
# for at least this long, and at most this many of them (a 1 us GEMM would need 500000).
ENERGY_WINDOW_S = 0.5
MAX_ENERGY_REPS = 20_000


class _Loop:
    """`measure`'s state for one case: the clock, the rule, the cap's deadline, the batches timed and
    the energy read after them (`energy_window`). Times here are per repetition. In paired rounds
    (`measure_paired`) each case has its own."""

    def __init__(self, clock, rule: StopRule, wall, spent_s: float, energy_mj):
        self.clock, self.rule, self.wall = clock, rule, wall
        self.cap_s = rule.case_cap(getattr(clock, "device_type", "cpu"))
        self.begin = wall() - spent_s
        # The cap counts this case's own time only: in paired rounds the others' warm-ups do not
        # use it up (`running`).
        self.used, self.since = spent_s, self.begin + spent_s
        self.per_rep = getattr(clock, "calls_per_rep", 1)
        self.energy_mj = energy_mj
        self.batches: list[Batch] = []
        self.reps: list[float] = []  # the timed samples, per repetition
        self.energy_read: tuple[float, float, int] | None = None  # joules, seconds, calls (`energy_window`)
        self.run, self.first_rep_ms, self.first_calls, self.warm_start = None, 0.0, 0, 0.0
        self.warm: tuple[list[float], int, str, float] | None = None  # medians, calls, reason, seconds

    def left(self) -> float:
        return self.cap_s - self.used - (self.wall() - self.since if self.since is not None else 0.0)

    @contextmanager
    def running(self):
        """A stretch of this case's own time (its cap counts only these when others share the window)."""
        self.since = self.wall()
        try:
            yield
        finally:
            self.used += self.wall() - self.since
            self.since = None

    def pause(self) -> None:
        """Stop counting time against this case's cap until the next `running` block."""
        if self.since is not None:
            self.used += self.wall() - self.since
            self.since = None

    def start(self, fn, first_call_ms: float | None) -> None:
        """What a repetition runs (a graph captured), and the calibration: the first call's time,
        timed here unless the caller did (one eager call: a replay costs per_rep of them)."""
        self.run = self.clock.prepare(fn)
        self.warm_start = self.wall()
        if first_call_ms is None:
            self.first_rep_ms, self.first_calls = self.clock.time_batch(self.run, 1)[0], self.per_rep
        else:
            self.first_rep_ms, self.first_calls = first_call_ms * self.per_rep, 1

    @property
    def slow(self) -> bool:
        """The minimum warm-up and samples do not fit in what is left of the cap."""
        return self.first_rep_ms / 1e3 * (self.rule.min_warmup - 1 + self.rule.min_samples) > self.left()

    def alone(self, sm_clock_mhz) -> Measurement:
        """The rest of the case timed on its own: slow (`slow_samples`), or warm-up then samples."""
        if self.slow:
            return self.slow_samples()
        self.warm_up(sm_clock_mhz)
        reason = self.sample()
        self.energy_window()
        return self.result(reason)

    def timed(self, reps: int) -> list[float]:
        """One batch of timed samples (repetition times), its window kept."""
        start = self.wall()
        times = self.clock.time_batch(self.run, reps)
        self.batches.append(Batch(start, self.wall(), len(times)))
        self.reps += times
        return times

    def slow_samples(self) -> Measurement:
        """A case whose minimum warm-up and samples do not fit in the cap: no warm-up, samples one
        repetition at a time while the next fits."""
        call_s = self.first_rep_ms / 1e3
        # The first call is a sample only where it ran what the samples run (not a graph's replay).
        keep = self.clock.timing_mode == "eager"
        if keep:
            self.reps.append(self.first_rep_ms)
            self.batches.append(Batch(self.begin, self.begin + call_s, 1))
        while len(self.reps) < self.rule.min_samples:
            next_s = statistics.median(self.reps) / 1e3 if self.reps else call_s
            if len(self.reps) >= self.rule.floor_samples and next_s > self.left():
                break
            self.timed(1)
        self.warm = ([self.first_rep_ms], self.first_calls, "slow", 0.0)
        self.energy_window()
        return self.result("cap" if len(self.reps) < self.rule.min_samples else "budget", first_call_kept=keep)

    def warm_up(self, sm_clock_mhz) -> None:
        """Warm up (since the first call's start) until settled (`warmup_done`) or the cap leaves
        only room for the samples; `warm` keeps the batch medians per repetition, the calls made,
        why it ended and how long it took."""
        rule, wall, run = self.rule, self.wall, self.run
        # Batch 0 is the first call plus the rest of `min_warmup` (compile, allocate: it never counts).
        first = [self.first_rep_ms] + (self.clock.time_batch(run, rule.min_warmup - 1) if rule.min_warmup > 1 else [])
        medians: list[float] = [statistics.median(first)]
        clocks: list[float | None] = [sm_clock_mhz() if sm_clock_mhz else None]
        calls = self.first_calls + (len(first) - 1) * self.per_rep
        while True:
            reason = warmup_done(medians, clocks, wall() - self.warm_start, calls, rule)
            if not reason and medians[-1] / 1e3 * rule.min_samples >= self.left():
                reason = "cap"  # what is left of the case cap is for the samples
            if reason:
                self.warm = (medians, calls, reason, wall() - self.warm_start)
                return
            reps = warmup_batch(medians[-1], wall() - self.warm_start, rule)
            medians.append(statistics.median(self.clock.time_batch(run, reps)))
            calls += reps * self.per_rep
            clocks.append(sm_clock_mhz() if sm_clock_mhz else None)

    def rep_s(self) -> float:
        """A repetition's time so far: the samples' median, else the warm-up's last."""
        return (statistics.median(self.reps) if self.reps else self.warm[0][-1]) / 1e3

    def steady_s(self) -> float:
        """A warm repetition's time: the fastest warm-up batch median after the first (one batch
        caught by a descheduled thread is no slow path), else the first's."""
        medians = self.warm[0]
        return min(medians[1:] or medians) / 1e3

    def sample(self) -> str:
        """Timed repetitions until the rule says stop or the cap leaves no room for one more."""
        rule = self.rule
        start = self.wall()
        while True:
            if self.reps:
                reason = stop_reason(self.reps, self.wall() - start, rule, self.medians())
                if reason:
                    return reason
            rep_s = self.rep_s()
            fits = int(self.left() / rep_s) if rep_s > 0 else rule.max_samples
            if fits < 1 and len(self.reps) >= rule.floor_samples:
                return "cap"
            self.timed(min(next_batch(self.reps, self.wall() - start, rule, rep_s), max(1, fits)))

    def medians(self) -> list[float]:
        return batch_medians(self.reps, [b.reps for b in self.batches])

    def result(self, reason: str, **fields) -> Measurement:
        energy_j, energy_s, energy_calls = self.energy()
        medians, calls, warm_reason, warm_s = self.warm
        return Measurement(
            [t / self.per_rep for t in self.reps], reason, calls, warm_s, self.clock.name,
            warmup_reason=warm_reason, warmup_medians_ms=[m / self.per_rep for m in medians],
            first_call_ms=self.first_rep_ms / self.per_rep, timing_mode=self.clock.timing_mode,
            cache=self.clock.cache, batches=self.batches, case_cap_s=self.cap_s, energy_j=energy_j,
            energy_s=energy_s, energy_calls=energy_calls, **fields,
        )

    def energy_window(self) -> None:
        """The energy counter read around the case's repetitions run back to back after its samples,
        on a warm clock (no cache flush between them: a cold sample's window holds the L2 flush, some
        31 us on an H100 against a 1 us GEMM, and the host's gaps, so its power x the median time was
        the flush's power: each recipe's energy ratio to bf16 read as its time ratio). At least ENERGY_WINDOW_S of
        repetitions (at most MAX_ENERGY_REPS), so a counter updated every few milliseconds advances
        many times; `energy_read` is the joules, seconds and calls. A counter that did not advance
        says nothing."""
        if self.energy_mj is None or self.run is None:
            return
        rep_s = self.rep_s()
        reps = min(MAX_ENERGY_REPS, max(1, math.ceil(ENERGY_WINDOW_S / rep_s))) if rep_s > 0 else 1
        warm = self.clock if self.clock.cache == "warm" else \
            self.clock.for_rule(self.rule.model_copy(update={"cache": "warm"}))
        self.clock.sync()
        t0, e0 = self.wall(), self.energy_mj()
        warm.time_batch(self.run, reps)  # synchronised at its end
        t1, e1 = self.wall(), self.energy_mj()
        if e0 is not None and e1 is not None and e1 > e0 and t1 > t0:
            self.energy_read = ((e1 - e0) / 1e3, t1 - t0, reps * self.per_rep)

    def energy(self) -> tuple[float | None, float | None, int | None]:
        """(joules, seconds, calls) of the energy window, or nulls where it was not read."""
        return self.energy_read or (None, None, None)


# ---------------------------------------------------------------------------------------------
# Paired rounds: the cases of one setting timed together

# A paired round gives each case one batch of about this fraction of the budget: some 20 rounds per
# budget, so a level that drifts over seconds (another job, a clock change) is the same for every
# case of a round (Google Benchmark's random interleaving of repetitions, google/benchmark#1051).
ROUND_FRACTION = 0.05
# One call of a case more than this many times the fastest's, and too long for a round's slice of
# the budget: that case is timed alone, the others stay paired. Precisions a device runs natively
# differ by less: dense fp8 against fp32 on an H100 SXM is 1979 / 67 = 30x (suite/core/peaks.py); a
# CPU without native bf16 runs bf16 100-400x slower than fp32 (docs/timing.md), where the few samples
# of the slow case would set the pace of every round.
MAX_CALL_RATIO = 100.0


@dataclass
class Party:
    """A callable timed in paired rounds: its clock (set up for its rule), the global state it runs
    under (`context`, a precision's `active()`: entered around each of its batches, its warm-up and
    its first call, and restored after each), and what the caller already paid: the first call,
    timed (`first_call_ms`), and seconds against its cap (`spent_s`)."""

    name: str
    fn: Callable[[], object]
    clock: Clock
    rule: StopRule
    context: Callable[[], ContextManager] = nullcontext
    first_call_ms: float | None = None
    spent_s: float = 0.0


class Peer(Protocol):
    """Another harness timing a party's callable (the fidelity workload's), one block of its own
    loop at a time, interleaved with the party's batches."""

    def block(self, seconds: float) -> list[float]:
        """Run the peer's loop for about `seconds`: the per-call milliseconds of each of its samples."""


@dataclass
class Paired:
    """What `measure_paired` gives, per party in order: its Measurement, or the error that ended it
    (an exception its calls raised). `paired`: the batches were interleaved, round i holding batch i
    of every party in the rounds (and block i of the peer, `peer_ms`); else `note` says why each was
    timed alone. `alone`: the parties whose calls did not fit a round (index: why), each timed on its
    own after the others' rounds. `seed` seeded the order of each round (`order`: party indices, the
    peer as len(parties))."""

    measurements: list[Measurement | None]
    errors: list[Exception | None]
    paired: bool
    note: str | None
    seed: int
    order: list[list[int]] = field(default_factory=list)
    peer_ms: list[list[float]] = field(default_factory=list)
    alone: dict[int, str] = field(default_factory=dict)


def measure_paired(parties: list[Party], *, seed: int, peer: Peer | None = None,
                   sm_clock_mhz: Callable[[], float | None] | None = None,
                   energy_mj: Callable[[], float | None] | None = None,
                   wall: Callable[[], float] | None = None) -> Paired:
    """Time `parties` (and `peer`) together: each calibrated on its first call and warmed up on its
    own, then their batches interleaved, each round in a random order drawn from `seed`, round after
    round under their one rule: every case's samples known well enough, the parties' budgets together
    spent, or their case caps together reached (each case's cap counts its own time only). A party
    whose calls raise is dropped (its error kept) and the others go on. A party whose call does not
    fit a round (`too_slow_for_rounds`: slow against its cap, or, once warm, more than MAX_CALL_RATIO
    times another's and longer than a round's slice) is timed alone after the others' rounds, as
    `measure` times a case (warmed up again, just before its samples); the rest stay paired. Where
    fewer than two are left to pair, or their rules differ (`unpaired_reason`), each party is timed
    alone, one after another."""
    wall = wall or getattr(parties[0].clock, "wall", time.perf_counter)
    loops: list[_Loop | None] = []
    out = Paired([None] * len(parties), [None] * len(parties), False, None, seed)
    for i, party in enumerate(parties):
        loop = _Loop(party.clock, party.rule, wall, party.spent_s, energy_mj)
        loop.pause()
        out.errors[i] = _step(party, loop, lambda: loop.start(party.fn, party.first_call_ms))
        loops.append(None if out.errors[i] else loop)
    out.note = unpaired_reason(parties, loops, peer) or _set_aside(parties, loops, peer, out, warm=False)
    if out.note is None:
        for i, loop in enumerate(loops):
            if loop is not None and i not in out.alone:
                out.errors[i] = _step(parties[i], loop, lambda: loop.warm_up(sm_clock_mhz))
        out.note = _set_aside(parties, loops, peer, out, warm=True)
    if out.note is not None:
        out.alone = {}
        return _one_by_one(parties, loops, peer, sm_clock_mhz, out)
    live = {i: loop for i, loop in enumerate(loops) if _in_rounds(i, loops, out)}
    out.paired = True
    reason = _Rounds(parties, live, parties[0].rule, random.Random(seed), peer, out).run()
    for i, loop in live.items():
        if out.errors[i] is None:  # each case's energy window under its own state, after the rounds
            out.errors[i] = _step(parties[i], loop, loop.energy_window)
        if out.errors[i] is None:
            out.measurements[i] = loop.result(reason)
    for i in out.alone:  # after the rounds, so the paired cases' warm-ups are not minutes old
        loops[i].warm_start = wall()  # its warm-up cap counts from here, not from before the rounds
        _alone(parties, loops, i, sm_clock_mhz, out)
    return out


def _in_rounds(i: int, loops: list, out: Paired) -> bool:
    """Party i goes on in the rounds: started, not failed, not set aside to be timed alone."""
    return loops[i] is not None and out.errors[i] is None and i not in out.alone


def _set_aside(parties: list[Party], loops: list, peer: Peer | None, out: Paired, warm: bool) -> str | None:
    """Set aside (into `out.alone`) the parties whose calls do not fit a round; why none can be
    paired where fewer than two are left to (the set-aside parties' reasons), else None."""
    kept = [loop if _in_rounds(i, loops, out) else None for i, loop in enumerate(loops)]
    out.alone.update(too_slow_for_rounds(parties, kept, warm))
    kept = [loop if _in_rounds(i, loops, out) else None for i, loop in enumerate(loops)]
    note = unpaired_reason(parties, kept, peer)
    return "; ".join(out.alone.values()) if note and out.alone else note


def _alone(parties: list[Party], loops: list, i: int, sm_clock_mhz, out: Paired) -> None:
    """Party i timed alone (`_Loop.alone`): its measurement, or the error its calls raised."""
    loop = loops[i]
    out.errors[i] = _step(parties[i], loop, lambda: out.measurements.__setitem__(i, loop.alone(sm_clock_mhz)))


def _one_by_one(parties: list[Party], loops: list, peer: Peer | None, sm_clock_mhz, out: Paired) -> Paired:
    """Each party that got this far timed alone (`_Loop.alone`), one after another, then one block
    of the peer's."""
    for i, loop in enumerate(loops):
        if loop is not None and out.errors[i] is None:
            _alone(parties, loops, i, sm_clock_mhz, out)
    if peer is not None and any(m is not None for m in out.measurements):
        out.peer_ms.append(peer.block(parties[0].rule.budget_s))
    return out


def _step(party: Party, loop: _Loop, step: Callable[[], object]) -> Exception | None:
    """Run one step of a party under its global state, on its own time (`_Loop.running`); the
    exception it raised, if any (Ctrl-C is not one: it stops the run)."""
    try:
        with party.context(), loop.running():
            step()
    except Exception as err:
        return err
    return None


def unpaired_reason(parties: list[Party], loops: list, peer: Peer | None) -> str | None:
    """Why none of these parties (those with a loop) can be timed in paired rounds, or None when
    they can: fewer than two of them (the peer counts), or their rules differ."""
    live = [(p, loop) for p, loop in zip(parties, loops) if loop is not None]
    if len(live) + (peer is not None and bool(live)) < 2:
        return "nothing to pair with: the other cases of its setting did not get this far"
    if any(p.rule != live[0][0].rule for p, _ in live):
        return "the cases' timing rules differ (their sweeps' [timing] tables)"
    return None


def too_slow_for_rounds(parties: list[Party], loops: list, warm: bool = False) -> dict[int, str]:
    """The parties (those with a loop) whose calls do not fit a round, and why: before the warm-up
    (their first call timed), one too slow for its cap to hold a warm-up and the minimum samples;
    once warm (`warm`: the warm-up's batches, the first call being no guide to a steady one), one
    more than MAX_CALL_RATIO times the fastest's and longer than a round's slice of the budget."""
    live = [(i, parties[i], loop) for i, loop in enumerate(loops) if loop is not None]
    if not warm:
        return {i: (f"one {party.name} call takes {loop.first_rep_ms / loop.per_rep:.4g} ms: too slow for the case "
                    f"cap ({loop.cap_s:g} s) to hold a warm-up and {loop.rule.min_samples} samples")
                for i, party, loop in live if loop.slow}
    if len(live) < 2:
        return {}
    fast, f = min(((p, loop) for _, p, loop in live), key=lambda pl: pl[1].steady_s())
    out = {}
    for i, slow, s in live:
        ratio = s.steady_s() / f.steady_s() if f.steady_s() > 0 else math.inf
        # A slow call that still fits a round's slice paces nothing: the rounds hold one call of it
        # each, and pairing is what cancels the load that may have made it look slow.
        if ratio > MAX_CALL_RATIO and s.steady_s() > ROUND_FRACTION * s.rule.budget_s:
            out[i] = (f"one {slow.name} call takes {ratio:.0f}x one {fast.name} call (more than {MAX_CALL_RATIO:g}x: "
                      "a slow path, such as bf16 on a CPU without native bf16, or a busy machine stalling the slower "
                      "one)")
    return out


class _Rounds:
    """The paired rounds of `measure_paired`: every live party one batch per round, in an order
    drawn afresh each round; the peer's block among them."""

    def __init__(self, parties: list[Party], live: dict[int, _Loop], rule: StopRule, rng: random.Random,
                 peer: Peer | None, out: Paired):
        self.parties, self.live, self.rule, self.rng, self.peer, self.out = parties, live, rule, rng, peer, out
        self.wall = next(iter(live.values())).wall
        self.budget_s = rule.budget_s * len(live)  # the parties' budgets, spent together
        self.deadline = self.wall() + sum(loop.left() for loop in live.values())  # their caps, together
        self.slice_s = ROUND_FRACTION * rule.budget_s
        # At most this many samples of a party per batch, so that max_samples takes the rounds a
        # budget holds rather than one round of a fast call.
        self.most = max(1, int(rule.max_samples * ROUND_FRACTION))

    def running(self) -> list[int]:
        return [i for i in self.live if self.out.errors[i] is None]

    def stop(self, spent_s: float) -> str | None:
        """The group's stop reason after a round, or None to go on."""
        loops, rule = [self.live[i] for i in self.running()], self.rule
        if not loops:
            return "failed"
        if any(len(loop.reps) >= rule.max_samples for loop in loops):
            return "max_samples"
        if len(self.out.order) < rule.min_samples or any(len(loop.reps) < rule.min_samples for loop in loops):
            return None
        if all(stop_reason(loop.reps, 0.0, rule, loop.medians()) == "converged" for loop in loops):
            return "converged"
        return "budget" if spent_s >= self.budget_s else None

    def run(self) -> str:
        """Rounds until `stop` says so or the next would not fit the caps: the reason."""
        start = self.wall()
        while True:
            reason = self.stop(self.wall() - start)
            if reason:
                return reason
            need = sum(self.batch(i) * self.live[i].rep_s() for i in self.running())
            if need > self.deadline - self.wall() and len(self.out.order) >= self.rule.floor_samples:
                return "cap"
            self.round()

    def batch(self, i: int) -> int:
        """Repetitions in party i's next batch: about a round's slice, at least one."""
        loop, rep_s = self.live[i], self.live[i].rep_s()
        reps = int(self.slice_s / rep_s) if rep_s > 0 else self.most
        return max(1, min(reps, self.most, self.rule.max_samples - len(loop.reps)))

    def round(self) -> None:
        """One batch of each running party (and one block of the peer), in a random order."""
        order = self.running() + ([len(self.parties)] if self.peer is not None else [])
        self.rng.shuffle(order)
        for i in order:
            if i == len(self.parties):
                self.out.peer_ms.append(self.peer.block(self.slice_s))
                continue
            loop, reps = self.live[i], self.batch(i)
            self.out.errors[i] = _step(self.parties[i], loop, lambda: loop.timed(reps))
        self.out.order.append(order)


def time_once(fn: Callable[[], object], sync: Callable[[], None] = lambda: None) -> float:
    """Wall-clock seconds of a single call, synchronised before and after: for a cost paid once
    (torch.compile's first call, which compiles) and recorded apart from `measure`'s samples."""
    sync()
    start = time.perf_counter()
    fn()
    sync()
    return time.perf_counter() - start
