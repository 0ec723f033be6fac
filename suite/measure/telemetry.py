"""GPU telemetry during a case: SM and memory clocks, power, temperature, clock-event reasons.

NVML (`import pynvml`, package nvidia-ml-py) is read in a background thread while a case is measured.
Each reading is stamped with `time.perf_counter`, the clock `suite.measure.timing` stamps its batches with,
so every timing sample can be matched with the GPU's state while it ran: a sample whose batch saw a
throttle reason is flagged (nvbench discards such samples; the suite keeps and flags them), and the
case gets summary columns (mean/min SM clock, throttled fraction, the reasons seen).

Clock-event reasons ("throttle reasons" until NVML renamed them; pynvml keeps both spellings) are
bit masks. GpuIdle is ignored while measuring (a GPU waiting on the host between launches sets it,
and it does not slow a kernel down). ApplicationsClocksSetting, SyncBoost and DisplayClockSetting
are reported but do not count as throttling: they are configured limits, not the card protecting
itself. Every other bit (power cap, thermal and hardware slowdowns, power brake, and any bit this
code does not know) does.

Energy: where NVML has the board's total energy counter (`nvmlDeviceGetTotalEnergyConsumption`, mJ
since the driver loaded; Volta and newer), the timing loop reads it around an energy window after
the samples (`timing.measure`'s `energy_mj`, `timing._Loop.energy_window`): the case's calls back to
back, warm, at least `timing.ENERGY_WINDOW_S`. Its joules over its calls are the energy of one call
(`joules_per_call`), and per TFLOP of the call's work (`joules_per_tflop`). The timed samples' own
window is not used: it holds the L2 flush before every cold sample (some 31 us on an H100 against a
1 us GEMM) and the host's gaps, so its mean power x the median call time was mostly the flush's
energy, and every recipe's ratio to bf16 drifted towards 1 at small and medium sizes (issue #36). A
counter that does not advance over the window (its update rate is coarser) gives no number, never a
zero.

Without NVML (not installed, no driver, a CPU run) every column is null and nothing fails. The NVML
calls sit behind `NvmlDevice` so the logic is tested on a CPU with a fake `pynvml` module.
"""

from __future__ import annotations

import functools
import os
import threading
import time
from dataclasses import dataclass
from typing import Callable, Iterable, Sequence

# Names of the reason bits, without the `nvmlClocksEventReason` / `nvmlClocksThrottleReason` prefix.
# Their values are read from the pynvml module (both spellings), never assumed.
REASON_NAMES = (
    "GpuIdle", "ApplicationsClocksSetting", "SwPowerCap", "HwSlowdown", "SyncBoost",
    "SwThermalSlowdown", "HwThermalSlowdown", "HwPowerBrakeSlowdown", "DisplayClockSetting",
    "BoardLimit", "Reliability",
)
IGNORED = frozenset({"GpuIdle"})
NOT_THROTTLING = frozenset({"GpuIdle", "ApplicationsClocksSetting", "SyncBoost", "DisplayClockSetting"})

DEFAULT_INTERVAL_S = 0.02

# Every column this module adds to a record; all null where there is no telemetry.
COLUMNS = (
    "telemetry", "telemetry_note", "telemetry_readings", "sm_clock_mhz_mean", "sm_clock_mhz_min",
    "sm_clock_max_mhz", "mem_clock_mhz_mean", "power_w_mean", "power_w_max", "power_limit_w",
    "temp_c_max", "throttled", "throttled_fraction", "throttle_reasons", "samples_throttled",
    "n_samples_throttled", "power_reading",
)
NULL_COLUMNS: dict[str, object] = dict.fromkeys(COLUMNS)
# The energy columns (`energy_columns`), null where the counter is not read.
ENERGY_COLUMNS = ("energy_j", "energy_window_s", "energy_calls", "energy_power_w", "joules_per_call",
                  "joules_per_tflop")


@dataclass(frozen=True)
class Reading:
    t: float  # time.perf_counter() seconds
    sm_mhz: float | None = None
    mem_mhz: float | None = None
    power_w: float | None = None
    temp_c: float | None = None
    reasons: int | None = None  # clock-event reason bit mask


def reason_bits(nvml) -> dict[str, int]:
    """name -> bit, from a pynvml module with the new (ClocksEvent) or old (ClocksThrottle) names."""
    bits = {}
    for name in REASON_NAMES:
        for prefix in ("nvmlClocksEventReason", "nvmlClocksThrottleReason"):
            value = getattr(nvml, prefix + name, None)
            if isinstance(value, int) and value:
                bits[name] = value
                break
    return bits


def reason_names(mask: int, bits: dict[str, int]) -> list[str]:
    """The names set in `mask`; bits not in the table are named by their hex value."""
    names = [name for name, bit in bits.items() if mask & bit]
    known = functools.reduce(lambda a, b: a | b, bits.values(), 0)
    rest = mask & ~known
    bit = 1
    while rest:
        if rest & bit:
            names.append(hex(bit))
            rest &= ~bit
        bit <<= 1
    return names


def throttling(mask: int | None, bits: dict[str, int]) -> bool | None:
    """Does this reason mask slow the clocks down (GpuIdle and configured limits excepted)?"""
    if mask is None:
        return None
    return any(name not in NOT_THROTTLING for name in reason_names(mask, bits))


class NvmlDevice:
    """One GPU through pynvml: the only code here that talks to NVML."""

    def __init__(self, nvml, handle):
        self.nvml, self.handle = nvml, handle
        self.bits = reason_bits(nvml)
        # ClocksEvent is the current name; older bindings only have ClocksThrottle.
        self._reasons = getattr(nvml, "nvmlDeviceGetCurrentClocksEventReasons", None) or getattr(
            nvml, "nvmlDeviceGetCurrentClocksThrottleReasons", None
        )
        self.sm_clock_max_mhz = self._query(nvml.nvmlDeviceGetMaxClockInfo, handle, nvml.NVML_CLOCK_SM)
        limit_mw = self._query(getattr(nvml, "nvmlDeviceGetEnforcedPowerLimit", None), handle)
        self.power_limit_w = limit_mw / 1e3 if limit_mw is not None else None
        # nvmlDeviceGetPowerUsage is a one-second average on Ampere and newer (NVML's docs), longer
        # than many cases' samples, so it mixes in the warm-up or the previous case; the
        # instantaneous field (NVML_FI_DEV_POWER_INSTANT) is read instead wherever it answers.
        self.power_reading = "instant" if self._instant_power_mw() is not None else "average (1 s)"

    def _instant_power_mw(self) -> float | None:
        nvml = self.nvml
        field = getattr(nvml, "NVML_FI_DEV_POWER_INSTANT", None)
        get = getattr(nvml, "nvmlDeviceGetFieldValues", None)
        if field is None or get is None:
            return None
        values = self._query(get, self.handle, [field])
        if not values or getattr(values[0], "nvmlReturn", 1) != getattr(nvml, "NVML_SUCCESS", 0):
            return None
        return float(values[0].value.uiVal)

    @staticmethod
    def _query(fn, *args):
        """One NVML query, None where unsupported or failing (some boards lack power readings)."""
        if fn is None:
            return None
        try:
            return fn(*args)
        except Exception:
            return None

    def energy_mj(self) -> float | None:
        """The board's energy counter (mJ since the driver loaded), or None where NVML has none."""
        value = self._query(getattr(self.nvml, "nvmlDeviceGetTotalEnergyConsumption", None), self.handle)
        return float(value) if value is not None else None

    def read(self, now: Callable[[], float] = time.perf_counter) -> Reading:
        nvml, h, q = self.nvml, self.handle, self._query
        power_mw = self._instant_power_mw() if self.power_reading == "instant" else q(nvml.nvmlDeviceGetPowerUsage, h)
        return Reading(
            t=now(),
            sm_mhz=q(nvml.nvmlDeviceGetClockInfo, h, nvml.NVML_CLOCK_SM),
            mem_mhz=q(nvml.nvmlDeviceGetClockInfo, h, nvml.NVML_CLOCK_MEM),
            power_w=power_mw / 1e3 if power_mw is not None else None,
            temp_c=q(nvml.nvmlDeviceGetTemperature, h, nvml.NVML_TEMPERATURE_GPU),
            reasons=q(self._reasons, h),
        )


def _visible_index(index: int) -> int:
    """NVML counts every GPU; CUDA counts those in CUDA_VISIBLE_DEVICES. Map when it lists indices."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES", "").strip()
    parts = [p.strip() for p in visible.split(",") if p.strip()]
    if parts and all(p.isdigit() for p in parts) and index < len(parts):
        return int(parts[index])
    return index


def open_nvml(index: int, uuid: str | None = None, nvml=None) -> tuple[NvmlDevice | None, str | None]:
    """(device, None), or (None, why not). `uuid` is torch's device UUID (more reliable than the
    index when CUDA_VISIBLE_DEVICES reorders GPUs)."""
    if nvml is None:
        try:
            import pynvml as nvml
        except ImportError:
            return None, "pynvml not importable (pip install nvidia-ml-py)"
    try:
        nvml.nvmlInit()
    except Exception as err:
        return None, f"NVML init failed: {type(err).__name__}: {err}"
    handle = None
    if uuid:
        text = uuid if uuid.startswith(("GPU-", "MIG-")) else f"GPU-{uuid}"
        for arg in (text, text.encode()):
            try:
                handle = nvml.nvmlDeviceGetHandleByUUID(arg)
                break
            except Exception:
                continue
    if handle is None:
        try:
            handle = nvml.nvmlDeviceGetHandleByIndex(_visible_index(index))
        except Exception as err:
            return None, f"NVML has no handle for GPU {index}: {type(err).__name__}: {err}"
    return NvmlDevice(nvml, handle), None


@functools.lru_cache(maxsize=None)
def _cuda_nvml(index: int) -> tuple[NvmlDevice | None, str | None]:
    """NVML for a torch CUDA device, opened once per process (nvmlInit is not free)."""
    import torch

    uuid = getattr(torch.cuda.get_device_properties(index), "uuid", None)
    return open_nvml(index, str(uuid) if uuid else None)


# ---------------------------------------------------------------------------------------------
# Summaries: pure functions of readings


def in_window(readings: Sequence[Reading], start: float, end: float) -> list[Reading]:
    """Readings taken in [start, end]; if none, the last one before `end` (the state in force)."""
    inside = [r for r in readings if start <= r.t <= end]
    if inside:
        return inside
    before = [r for r in readings if r.t <= end]
    return before[-1:]


def flag_samples(readings: Sequence[Reading], batches: Iterable, bits: dict[str, int]) -> list[bool]:
    """One flag per timing sample: True when a reading during its batch shows throttling.
    `batches` are (start_s, end_s, reps) windows from `suite.measure.timing.Measurement.batches`."""
    flags: list[bool] = []
    for start, end, reps in batches:
        hot = any(throttling(r.reasons, bits) for r in in_window(readings, start, end))
        flags += [bool(hot)] * reps
    return flags


def _mean(xs: list[float]) -> float | None:
    return sum(xs) / len(xs) if xs else None


def summarize(
    readings: Sequence[Reading], window: tuple[float, float] | None, batches: Iterable, bits: dict[str, int]
) -> dict[str, object]:
    """Per-case columns from the readings taken while the case was measured."""
    chosen = in_window(readings, *window) if window else list(readings)
    sm = [r.sm_mhz for r in chosen if r.sm_mhz is not None]
    mem = [r.mem_mhz for r in chosen if r.mem_mhz is not None]
    power = [r.power_w for r in chosen if r.power_w is not None]
    temp = [r.temp_c for r in chosen if r.temp_c is not None]
    masks = [r.reasons for r in chosen if r.reasons is not None]
    seen = sorted({n for m in masks for n in reason_names(m, bits)} - IGNORED)
    hot = [throttling(m, bits) for m in masks]
    flags = flag_samples(readings, batches, bits) if masks else None
    return {
        "telemetry_readings": len(chosen),
        "sm_clock_mhz_mean": _mean(sm),
        "sm_clock_mhz_min": min(sm) if sm else None,
        "mem_clock_mhz_mean": _mean(mem),
        "power_w_mean": _mean(power),
        "power_w_max": max(power) if power else None,
        "temp_c_max": max(temp) if temp else None,
        "throttled_fraction": sum(hot) / len(hot) if hot else None,
        "throttled": any(hot) if hot else None,
        "throttle_reasons": ", ".join(seen) if masks else None,
        "samples_throttled": flags,
        "n_samples_throttled": sum(flags) if flags is not None else None,
    }


# ---------------------------------------------------------------------------------------------
# Sampling


class Sampler:
    """Context manager: reads `device` every `interval_s` in a thread while the block runs.

    `Sampler(None, note)` is the no-telemetry sampler: no thread, null columns (with `note` saying
    why, where telemetry was wanted)."""

    def __init__(self, device: NvmlDevice | None, note: str | None = None, interval_s: float = DEFAULT_INTERVAL_S,
                 now: Callable[[], float] = time.perf_counter):
        self.device, self.note, self.interval_s, self.now = device, note, interval_s, now
        self.readings: list[Reading] = []
        self.error: str | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @classmethod
    def for_device(cls, device) -> "Sampler":
        """The sampler for a torch device: NVML on CUDA when available, none otherwise."""
        if getattr(device, "type", device) != "cuda":
            return cls(None)
        index = device.index if getattr(device, "index", None) is not None else _current_cuda_index()
        nvml_device, note = _cuda_nvml(index)
        return cls(nvml_device, note)

    def _read(self) -> None:
        try:
            self.readings.append(self.device.read(self.now))
        except Exception as err:  # a broken sensor must not break the measurement
            self.error = f"{type(err).__name__}: {err}"
            self._stop.set()

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            self._read()

    def __enter__(self) -> "Sampler":
        if self.device is not None:
            self._read()
            self._thread = threading.Thread(target=self._loop, name="mpsuite-telemetry", daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        if self._thread is not None:
            self._stop.set()
            self._thread.join()
            self._thread = None
            if self.error is None:
                self._read()

    @property
    def energy_mj(self) -> Callable[[], float | None] | None:
        """The energy counter's reader for `timing.measure`, or None without NVML."""
        return self.device.energy_mj if self.device is not None else None

    def sm_clock_mhz(self) -> float | None:
        """The latest SM clock reading (for the warm-up rule), or None."""
        for r in reversed(self.readings):
            if r.sm_mhz is not None:
                return r.sm_mhz
        return None

    def columns(self, measurement=None) -> dict[str, object]:
        """Record columns for a finished measurement (`suite.measure.timing.Measurement`)."""
        if self.device is None:
            return {**NULL_COLUMNS, "telemetry_note": self.note}
        window = measurement.window if measurement is not None else None
        batches = measurement.batches if measurement is not None else []
        return {
            **NULL_COLUMNS,
            "telemetry": "nvml",
            "telemetry_note": self.error,
            "sm_clock_max_mhz": self.device.sm_clock_max_mhz,
            "power_limit_w": self.device.power_limit_w,
            "power_reading": self.device.power_reading,
            **summarize(self.readings, window, batches, self.device.bits),
        }


def energy_columns(measurement, flops: float | None) -> dict[str, float | None]:
    """The energy columns of a measurement (`timing.Measurement`) whose energy window had a reading:
    joules over the window, its length and calls, mean power, joules per call (the window's joules
    over its calls: no flush, no sample's median involved) and per TFLOP (all null without)."""
    joules, window_s = getattr(measurement, "energy_j", None), getattr(measurement, "energy_s", None)
    calls = getattr(measurement, "energy_calls", None)
    if joules is None or not window_s or not calls:
        return dict.fromkeys(ENERGY_COLUMNS)
    per_call = joules / calls
    return {
        "energy_j": joules, "energy_window_s": window_s, "energy_calls": calls, "energy_power_w": joules / window_s,
        "joules_per_call": per_call, "joules_per_tflop": per_call / (flops / 1e12) if flops else None,
    }


def _current_cuda_index() -> int:
    import torch

    return torch.cuda.current_device()
