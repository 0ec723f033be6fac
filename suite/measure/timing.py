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

import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, NamedTuple, Protocol

from suite.core.errors import TimingUnsupported
from suite.core.quantiles import quantile, rel_ci_of_median, rel_spread
from suite.scenario.stop_rule import StopRule


# ---------------------------------------------------------------------------------------------
# The rules


def stop_reason(samples: list[float], spent_s: float, rule: StopRule) -> str | None:
    """Why to stop measuring now, or None to keep going. Checked after each batch."""
    n = len(samples)
    if n >= rule.max_samples:
        return "max_samples"
    if n >= rule.min_samples and rel_ci_of_median(samples) <= rule.target_rel_ci:
        return "converged"
    if spent_s >= rule.budget_s and n >= rule.min_samples:
        return "budget"
    return None


def next_batch(samples: list[float], spent_s: float, rule: StopRule, calibrated_s: float | None = None) -> int:
    """How many repetitions to run before checking again: about a tenth of the budget's worth,
    at least one, never past max_samples, and enough to reach min_samples. Before any sample, the
    per-call time is the calibration's (`calibrated_s`), if any."""
    n = len(samples)
    per_call = statistics.median(samples) / 1e3 if samples else calibrated_s
    if per_call is None or per_call <= 0:
        want = 1
    else:
        want = max(1, int(0.1 * rule.budget_s / per_call))
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
    # GPU energy over the timed samples' window (NVML's counter), and that window in seconds
    energy_j: float | None = None
    energy_s: float | None = None
    median_ms: float = field(init=False)
    p10_ms: float = field(init=False)
    p90_ms: float = field(init=False)
    rel_ci: float = field(init=False)
    rel_spread: float = field(init=False)

    def __post_init__(self):
        xs = sorted(self.samples_ms)
        self.median_ms = quantile(xs, 0.5)
        self.p10_ms = quantile(xs, 0.1)
        self.p90_ms = quantile(xs, 0.9)
        self.rel_ci = rel_ci_of_median(xs)
        self.rel_spread = rel_spread(xs)

    @property
    def window(self) -> tuple[float, float] | None:
        """Wall-clock span of the measured repetitions (warm-up excluded)."""
        return (self.batches[0].start_s, self.batches[-1].end_s) if self.batches else None


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
    energy_mj: the GPU's energy counter (telemetry, mJ), read just before the first timed sample and
    after the last (`Measurement.energy_j` over `energy_s`).
    wall: the host clock for budgets and batch windows (default: the clock's own `wall`, else
    time.perf_counter; a fake clock brings virtual time)."""
    wall = wall or getattr(clock, "wall", time.perf_counter)
    per_rep = getattr(clock, "calls_per_rep", 1)
    loop = _Loop(clock, rule, wall, rule.case_cap(getattr(clock, "device_type", "cpu")), wall() - spent_s, energy_mj)
    run = clock.prepare(fn)
    warm_start = wall()
    if first_call_ms is None:
        first_rep_ms = clock.time_batch(run, 1)[0]
        first_calls = per_rep
    else:  # one eager call the caller made: a replay costs per_rep of them
        first_rep_ms = first_call_ms * per_rep
        first_calls = 1
    if first_rep_ms / 1e3 * (rule.min_warmup - 1 + rule.min_samples) > loop.left():
        return loop.slow(run, first_rep_ms, first_calls)
    medians, calls, warm_reason = loop.warm_up(run, first_rep_ms, first_calls, sm_clock_mhz, warm_start)
    warm_s = wall() - warm_start
    reps, reason = loop.sample(run, medians[-1])
    return loop.result(
        reps, reason, calls, warm_s, warmup_reason=warm_reason, warmup_medians_ms=[m / per_rep for m in medians],
        first_call_ms=first_rep_ms / per_rep,
    )


class _Loop:
    """`measure`'s state for one case: the clock, the rule, the cap's deadline, the batches timed and
    the energy counter around them. Times here are per repetition."""

    def __init__(self, clock, rule: StopRule, wall, cap_s: float, begin: float, energy_mj):
        self.clock, self.rule, self.wall, self.cap_s, self.begin = clock, rule, wall, cap_s, begin
        self.per_rep = getattr(clock, "calls_per_rep", 1)
        self.energy_mj = energy_mj
        self.batches: list[Batch] = []
        self.energy: list[tuple[float, float | None]] = []  # (wall, counter mJ) before and after the samples

    def left(self) -> float:
        return self.cap_s - (self.wall() - self.begin)

    def timed(self, run, reps: int) -> list[float]:
        """One batch of timed samples (repetition times), its window kept, the energy read around."""
        if not self.energy and self.energy_mj is not None:
            self.energy.append((self.wall(), self.energy_mj()))
        start = self.wall()
        times = self.clock.time_batch(run, reps)
        self.batches.append(Batch(start, self.wall(), len(times)))
        return times

    def slow(self, run, first_rep_ms: float, first_calls: int) -> Measurement:
        """A case whose minimum warm-up and samples do not fit in the cap: no warm-up, samples one
        repetition at a time while the next fits."""
        call_s = first_rep_ms / 1e3
        # The first call is a sample only where it ran what the samples run (not a graph's replay).
        keep = self.clock.timing_mode == "eager"
        reps = [first_rep_ms] if keep else []
        if keep:
            self.batches.append(Batch(self.begin, self.begin + call_s, 1))
        while len(reps) < self.rule.min_samples:
            next_s = statistics.median(reps) / 1e3 if reps else call_s
            if len(reps) >= self.rule.floor_samples and next_s > self.left():
                break
            reps += self.timed(run, 1)
        reason = "cap" if len(reps) < self.rule.min_samples else "budget"
        return self.result(
            reps, reason, first_calls, 0.0, warmup_reason="slow", warmup_medians_ms=[first_rep_ms / self.per_rep],
            first_call_ms=first_rep_ms / self.per_rep, first_call_kept=keep,
        )

    def warm_up(self, run, first_rep_ms: float, first_calls: int, sm_clock_mhz,
                warm_start: float) -> tuple[list[float], int, str]:
        """Warm up (since `warm_start`, the first call's start) until settled (`warmup_done`) or the
        cap leaves only room for the samples: (batch medians per repetition, calls made, why it ended)."""
        rule, wall = self.rule, self.wall
        # Batch 0 is the first call plus the rest of `min_warmup` (compile, allocate: it never counts).
        first = [first_rep_ms] + (self.clock.time_batch(run, rule.min_warmup - 1) if rule.min_warmup > 1 else [])
        medians: list[float] = [statistics.median(first)]
        clocks: list[float | None] = [sm_clock_mhz() if sm_clock_mhz else None]
        calls = first_calls + (len(first) - 1) * self.per_rep
        while True:
            warm_reason = warmup_done(medians, clocks, wall() - warm_start, calls, rule)
            if not warm_reason and medians[-1] / 1e3 * rule.min_samples >= self.left():
                warm_reason = "cap"  # what is left of the case cap is for the samples
            if warm_reason:
                return medians, calls, warm_reason
            reps = warmup_batch(medians[-1], wall() - warm_start, rule)
            medians.append(statistics.median(self.clock.time_batch(run, reps)))
            calls += reps * self.per_rep
            clocks.append(sm_clock_mhz() if sm_clock_mhz else None)

    def sample(self, run, warm_rep_ms: float) -> tuple[list[float], str]:
        """Timed repetitions until the rule says stop or the cap leaves no room for one more."""
        rule, reps = self.rule, []
        start = self.wall()
        while True:
            reason = stop_reason(reps, self.wall() - start, rule) if reps else None
            if reason:
                return reps, reason
            rep_s = (statistics.median(reps) if reps else warm_rep_ms) / 1e3
            fits = int(self.left() / rep_s) if rep_s > 0 else rule.max_samples
            if fits < 1 and len(reps) >= rule.floor_samples:
                return reps, "cap"
            reps += self.timed(run, min(next_batch(reps, self.wall() - start, rule, rep_s), max(1, fits)))

    def result(self, reps: list[float], reason: str, calls: int, warm_s: float, **fields) -> Measurement:
        energy_j = energy_s = None
        if self.energy:
            self.energy.append((self.wall(), self.energy_mj()))
            (t0, e0), (t1, e1) = self.energy
            # A counter that did not advance (too short a window for its update rate) says nothing.
            if e0 is not None and e1 is not None and e1 > e0 and t1 > t0:
                energy_j, energy_s = (e1 - e0) / 1e3, t1 - t0
        return Measurement(
            [t / self.per_rep for t in reps], reason, calls, warm_s, self.clock.name,
            timing_mode=self.clock.timing_mode, cache=self.clock.cache, batches=self.batches,
            case_cap_s=self.cap_s, energy_j=energy_j, energy_s=energy_s, **fields,
        )


def time_once(fn: Callable[[], object], sync: Callable[[], None] = lambda: None) -> float:
    """Wall-clock seconds of a single call, synchronised before and after: for a cost paid once
    (torch.compile's first call, which compiles) and recorded apart from `measure`'s samples."""
    sync()
    start = time.perf_counter()
    fn()
    sync()
    return time.perf_counter() - start
