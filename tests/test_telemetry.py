"""NVML telemetry: reason decoding (new and old pynvml names), throttle flagging of timing samples,
per-case summaries, and graceful absence. NVML itself is replaced by a fake `pynvml` module."""

from __future__ import annotations

import re

import sys
import time
import math
import types

import pytest
import torch

from suite.measure import telemetry
from suite.measure.telemetry import Reading, Sampler, flag_samples, reason_bits, summarize, throttling
from suite.measure.timing import Batch, Measurement
from tests.virtual_clock import fixed

# Bit values as in nvml.h / pynvml (nvmlClocksEventReason*, formerly nvmlClocksThrottleReason*).
BITS = {"GpuIdle": 0x1, "ApplicationsClocksSetting": 0x2, "SwPowerCap": 0x4, "HwSlowdown": 0x8, "SyncBoost": 0x10,
        "SwThermalSlowdown": 0x20, "HwThermalSlowdown": 0x40, "HwPowerBrakeSlowdown": 0x80,
        "DisplayClockSetting": 0x100}
IDLE, APP = BITS["GpuIdle"], BITS["ApplicationsClocksSetting"]
POWER, THERMAL = BITS["SwPowerCap"], BITS["SwThermalSlowdown"]


def fake_nvml(readings, old_names=False, power_fails=False):
    """A pynvml stand-in whose queries return the next of `readings` (sm, mem, power mW, temp, reasons)."""
    prefix = "nvmlClocksThrottleReason" if old_names else "nvmlClocksEventReason"
    mod = types.SimpleNamespace(**{prefix + k: v for k, v in BITS.items()})
    mod.NVML_CLOCK_SM, mod.NVML_CLOCK_MEM, mod.NVML_TEMPERATURE_GPU = 1, 2, 0
    state = {"i": 0, "init": 0}
    current = lambda: readings[min(state["i"], len(readings) - 1)]

    def clock(h, kind):
        return current()[0] if kind == 1 else current()[1]

    def power(h):
        if power_fails:
            raise RuntimeError("NVML_ERROR_NOT_SUPPORTED")
        return current()[2]

    def reasons(h):
        value = current()[4]
        state["i"] += 1  # the last query of a reading advances the script
        return value

    mod.nvmlInit = lambda: state.__setitem__("init", state["init"] + 1)
    mod.nvmlDeviceGetHandleByIndex = lambda i: f"handle{i}"
    mod.nvmlDeviceGetHandleByUUID = lambda u: "handle-uuid" if u == "GPU-1234" else (_ for _ in ()).throw(KeyError(u))
    mod.nvmlDeviceGetClockInfo = clock
    mod.nvmlDeviceGetMaxClockInfo = lambda h, kind: 1980
    mod.nvmlDeviceGetEnforcedPowerLimit = lambda h: 700_000
    mod.nvmlDeviceGetPowerUsage = power
    mod.nvmlDeviceGetTemperature = lambda h, sensor: current()[3]
    setattr(mod, "nvmlDeviceGetCurrentClocksThrottleReasons" if old_names else "nvmlDeviceGetCurrentClocksEventReasons",
            reasons)
    mod.state = state
    return mod


# --- reasons ----------------------------------------------------------------------------------


@pytest.mark.parametrize("old_names", [False, True])
def test_reason_bits_from_new_and_old_names(old_names):
    assert reason_bits(fake_nvml([], old_names=old_names)) == BITS


def test_what_counts_as_throttling():
    assert throttling(IDLE, BITS) is False  # idle between launches: ignored while measuring
    assert throttling(APP | BITS["SyncBoost"] | BITS["DisplayClockSetting"], BITS) is False  # configured limits
    assert throttling(POWER, BITS) and throttling(THERMAL | IDLE, BITS) and throttling(BITS["HwSlowdown"], BITS)
    assert throttling(0x800, BITS)  # a bit this code does not know is not assumed harmless
    assert telemetry.reason_names(0x800 | POWER, BITS) == ["SwPowerCap", "0x800"]
    assert throttling(None, BITS) is None


# --- flags and summaries ----------------------------------------------------------------------


READINGS = [
    Reading(0.5, 345, 3201, 90.0, 30, IDLE),  # before the measurement window
    Reading(1.1, 1500, 2619, 690.0, 71, POWER),
    Reading(1.5, 1980, 2619, 650.0, 72, 0),
    Reading(1.9, 1980, 2619, 640.0, 74, IDLE),
]


def test_samples_are_flagged_by_the_batch_they_ran_in():
    batches = [Batch(1.0, 1.2, 3), Batch(1.2, 1.6, 2), Batch(1.6, 1.65, 4)]
    # batch 3 has no reading inside: the latest before its end (1.5, not throttled) is in force
    assert flag_samples(READINGS, batches, BITS) == [True] * 3 + [False] * 2 + [False] * 4
    hot_then_quiet = [Reading(1.1, reasons=POWER), Reading(2.0, reasons=0)]
    assert flag_samples(hot_then_quiet, [Batch(1.2, 1.3, 2)], BITS) == [True, True]


def test_summary_over_the_measurement_window():
    s = summarize(READINGS, (1.0, 2.0), [Batch(1.0, 2.0, 10)], BITS)
    assert s["telemetry_readings"] == 3
    assert s["sm_clock_mhz_mean"] == pytest.approx((1500 + 1980 + 1980) / 3) and s["sm_clock_mhz_min"] == 1500
    assert s["power_w_max"] == 690.0 and s["temp_c_max"] == 74
    assert s["throttled_fraction"] == pytest.approx(1 / 3) and s["throttled"] is True
    assert s["throttle_reasons"] == "SwPowerCap"  # GpuIdle is not listed
    assert s["samples_throttled"] == [True] * 10 and s["n_samples_throttled"] == 10


def test_a_cool_run_is_not_throttled():
    quiet = [Reading(t, 1980, 2619, 500.0, 60, IDLE if t > 1.5 else 0) for t in (1.0, 1.5, 2.0)]
    s = summarize(quiet, (1.0, 2.0), [Batch(1.0, 2.0, 4)], BITS)
    assert s["throttled"] is False and s["throttled_fraction"] == 0 and s["throttle_reasons"] == ""
    assert s["n_samples_throttled"] == 0


def test_sampler_columns_from_a_measurement():
    device = telemetry.NvmlDevice(fake_nvml([(1980, 2619, 500_000, 60, 0)]), "h")
    sampler = Sampler(device)
    sampler.readings = list(READINGS)
    m = Measurement([1.0] * 5, "budget", 3, 0.1, "cuda_event", batches=[Batch(1.0, 1.2, 2), Batch(1.4, 1.6, 3)])
    cols = sampler.columns(m)
    assert set(cols) == set(telemetry.COLUMNS)
    assert cols["telemetry"] == "nvml" and cols["sm_clock_max_mhz"] == 1980 and cols["power_limit_w"] == 700.0
    assert cols["samples_throttled"] == [True, True, False, False, False]


# --- the NVML device and the sampling thread --------------------------------------------------


@pytest.mark.parametrize("old_names", [False, True])
def test_device_reads_units_and_reasons(old_names):
    nvml = fake_nvml([(1755, 2619, 612_345, 66, POWER | IDLE)], old_names=old_names)
    r = telemetry.NvmlDevice(nvml, "h").read(lambda: 42.0)
    assert r == Reading(42.0, 1755, 2619, 612.345, 66, POWER | IDLE)


def test_an_unsupported_query_is_null_not_an_error():
    nvml = fake_nvml([(1755, 2619, 0, 66, 0)], power_fails=True)
    r = telemetry.NvmlDevice(nvml, "h").read()
    assert r.power_w is None and r.sm_mhz == 1755


def test_sampler_thread_reads_until_the_block_ends():
    nvml = fake_nvml([(1000 + 10 * i, 2619, 500_000, 60, 0) for i in range(1000)])
    sampler = Sampler(telemetry.NvmlDevice(nvml, "h"), interval_s=0.001)
    with sampler:
        time.sleep(0.05)
        assert sampler.sm_clock_mhz() is not None
    n = len(sampler.readings)
    assert n >= 3 and sampler._thread is None
    time.sleep(0.01)
    assert len(sampler.readings) == n  # stopped for good
    assert [r.t for r in sampler.readings] == sorted(r.t for r in sampler.readings)


def test_a_broken_sensor_stops_sampling_without_breaking_the_case():
    class Broken:
        bits, sm_clock_max_mhz, power_limit_w, power_reading = BITS, None, None, None

        def read(self, now):
            raise OSError("GPU is lost")

    sampler = Sampler(Broken(), interval_s=0.001)
    with sampler:
        time.sleep(0.01)
    cols = sampler.columns(None)
    assert "GPU is lost" in cols["telemetry_note"] and cols["telemetry_readings"] == 0


def test_no_telemetry_means_null_columns():
    with Sampler.for_device(torch.device("cpu")) as sampler:
        assert sampler.sm_clock_mhz() is None
    cols = sampler.columns(None)
    assert cols == telemetry.NULL_COLUMNS


def test_open_nvml_reasons_for_absence(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", None)  # import fails as if not installed
    device, note = telemetry.open_nvml(0)
    assert device is None and "nvidia-ml-py" in note

    broken = fake_nvml([])
    broken.nvmlInit = lambda: (_ for _ in ()).throw(RuntimeError("Driver Not Loaded"))
    device, note = telemetry.open_nvml(0, nvml=broken)
    assert device is None and "Driver Not Loaded" in note


def test_open_nvml_prefers_the_uuid_and_maps_visible_devices(monkeypatch):
    nvml = fake_nvml([(1980, 2619, 1, 1, 0)])
    device, note = telemetry.open_nvml(0, uuid="1234", nvml=nvml)
    assert note is None and device.handle == "handle-uuid"
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3,1")
    device, _ = telemetry.open_nvml(1, uuid="not-a-gpu", nvml=nvml)
    assert device.handle == "handle1"  # torch's cuda:1 is NVML's GPU 1 of "3,1"
    device, _ = telemetry.open_nvml(0, nvml=nvml)
    assert device.handle == "handle3"


def test_reports_mark_throttled_cases(tmp_path):
    import pandas as pd

    from suite import report
    from suite.measure import inprocess
    from suite.scenario.plan import Case
    from suite.measure.timing import CpuClock, StopRule

    rule = StopRule(warmup_s=0.0, warmup_max_s=0.1, min_samples=3, budget_s=0.01)
    meta = {"run_id": "r", "scenario": "t", "device": "cpu", "device_name": "cpu"}
    records = [inprocess.run_case(Case("t", "gemm", p, None, 16, 16, 16, {}, seed=0, timing=rule), torch.device("cpu"),
                               CpuClock(), meta) for p in ("fp32", "bf16")]
    # steady samples: on a busy machine a 16^3 GEMM shows stalls, which mark a row too
    records = [r.replace(samples_ms=[r["time_ms_median"]] * len(r["samples_ms"])) for r in records]
    records[1] = records[1].replace(throttled_fraction=0.35, throttled=True, throttle_reasons="SwPowerCap, HwSlowdown")
    written = report.render(pd.DataFrame(records), tmp_path)
    md = (tmp_path / "report.md").read_text()
    html = (tmp_path / "index.html").read_text()
    assert "ok (throttled 35%: SwPowerCap, HwSlowdown)" in md and md.count("throttled") == 1
    # the throttled case's row is marked (a case that stalled on a busy machine is marked too: not counted)
    assert re.search(r'<tr class="ok throttled">(?:(?!</tr>).)*throttled 35%', html)
    assert "stopped by" in md and tmp_path / "index.html" in written


def test_power_is_read_instantaneously_where_nvml_has_the_field():
    # nvmlDeviceGetPowerUsage averages over one second on Ampere and newer; a 0.2 s case would mix
    # in the warm-up. The instantaneous field is preferred; without it, the average is labelled.
    nvml = fake_nvml([(1980, 2619, 650_000, 60, 0)])
    plain = telemetry.NvmlDevice(nvml, "h")
    assert plain.power_reading == "average (1 s)" and plain.read().power_w == 650.0

    nvml.NVML_FI_DEV_POWER_INSTANT, nvml.NVML_SUCCESS = 186, 0
    field = types.SimpleNamespace(nvmlReturn=0, value=types.SimpleNamespace(uiVal=412_000))
    nvml.nvmlDeviceGetFieldValues = lambda h, ids: [field] if ids == [186] else []
    instant = telemetry.NvmlDevice(nvml, "h")
    assert instant.power_reading == "instant" and instant.read().power_w == 412.0

    field.nvmlReturn = 3  # NVML_ERROR_NOT_SUPPORTED on this board
    assert telemetry.NvmlDevice(nvml, "h").power_reading == "average (1 s)"


# --- energy: NVML's total energy counter around a warm window after the samples ------------------


def test_energy_is_read_around_a_warm_window_after_the_samples():
    from suite.measure import timing
    from suite.measure.timing import StopRule, measure

    clock, reads = fixed(2.0, run=False), []

    def counter_mj():  # a 300 W board: mJ = 300 W x seconds x 1000
        reads.append(clock.now)
        return 300.0 * clock.now * 1e3

    m = measure(lambda: None, clock, StopRule(warmup_s=0.05, budget_s=0.1), energy_mj=counter_mj)
    assert len(reads) == 2 and reads[0] == m.window[1] and m.warmup_calls > 1  # not during warm-up or samples
    calls = math.ceil(timing.ENERGY_WINDOW_S / 0.002)  # 2 ms calls for at least the window
    assert m.energy_calls == calls and clock.batches[-1][1] == calls
    assert m.energy_s == pytest.approx(calls * 0.002) and m.energy_j == pytest.approx(300.0 * m.energy_s)
    cols = telemetry.energy_columns(m, flops=4e9)
    assert cols["energy_power_w"] == pytest.approx(300.0) and cols["energy_calls"] == calls
    assert cols["joules_per_call"] == pytest.approx(300.0 * 0.002)  # the window's joules over its calls
    assert cols["joules_per_tflop"] == pytest.approx(0.6 / 4e-3)  # 4 GFLOP per call


@pytest.mark.parametrize("counter", [lambda: 5000.0, lambda: None])
def test_a_counter_that_does_not_advance_or_is_missing_gives_no_number(counter):
    from suite.measure.timing import StopRule, measure

    m = measure(lambda: None, fixed(2.0, run=False), StopRule(warmup_s=0.0, budget_s=0.02), energy_mj=counter)
    assert m.energy_j is None and set(telemetry.energy_columns(m, 1e9).values()) == {None}


class _Gpu:
    """A simulated GPU for CudaClock: work advances the device's time and its energy counter (an L2
    flush of 31 us at 400 W before each cold sample); events stamp the device time."""

    def __init__(self):
        self.t, self.mj = 0.0, 0.0

    def work(self, seconds: float, watts: float) -> None:
        self.t += seconds
        self.mj += watts * seconds * 1e3

    def event(self):
        gpu = self

        class Event:
            def record(self):
                self.at = gpu.t

            def elapsed_time(self, end):
                return (end.at - self.at) * 1e3

        return Event()

    def synchronize(self):
        pass

    def l2_bytes(self):
        return 50 * 2**20

    def buffer(self, nbytes):
        return type("Flush", (), {"zero_": lambda _: self.work(31e-6, 400.0)})()


@pytest.mark.parametrize("seconds, watts", [(1e-6, 700.0), (0.5e-6, 650.0)])  # a bf16 and an FP8 GEMM
def test_joules_per_call_is_the_calls_own_not_the_flush_before_each_sample(monkeypatch, seconds, watts):
    # issue #36: the cold samples' window is 31 us of flush per 1 us GEMM, so its mean power x the
    # median was the flush's power x the time (0.41 mJ for the bf16 GEMM's 0.70, 0.20 for the FP8's
    # 0.325): every recipe's energy ratio to bf16 read as its time ratio, its power ratio as 1
    from suite.measure import timing
    from suite.measure.timing import CudaClock, StopRule, measure

    monkeypatch.setattr(timing, "ENERGY_WINDOW_S", 0.001, raising=False)
    gpu = _Gpu()
    m = measure(lambda: gpu.work(seconds, watts), CudaClock(api=gpu, cache="cold"),
                StopRule(warmup_s=0.0, budget_s=0.001, min_samples=5), energy_mj=lambda: gpu.mj, wall=lambda: gpu.t)
    assert m.cache == "cold" and m.median_ms == pytest.approx(seconds * 1e3)  # the samples stay cold
    cols = telemetry.energy_columns(m, flops=2e9)
    assert cols["joules_per_call"] == pytest.approx(watts * seconds)  # no flush in the window
    assert cols["energy_power_w"] == pytest.approx(watts, rel=1e-6) and abs(cols["energy_calls"] - 0.001 / seconds) <= 1


def test_a_case_records_joules_per_call_and_per_tflop_where_nvml_counts_energy(monkeypatch):
    from suite.measure import inprocess
    from suite.measure.timing import CpuClock, StopRule
    from suite.results import store
    from suite.scenario.plan import Case

    nvml = fake_nvml([(1980, 2619, 650_000, 60, 0)])
    energy = iter(range(10_000, 10**9, 1_500))  # mJ: each read 1.5 J on from the last
    nvml.nvmlDeviceGetTotalEnergyConsumption = lambda h: next(energy)
    monkeypatch.setattr(Sampler, "for_device", classmethod(
        lambda cls, device: cls(telemetry.NvmlDevice(nvml, "h"), interval_s=0.001)))
    rule = StopRule(warmup_s=0.0, warmup_max_s=0.1, min_samples=3, budget_s=0.01)
    meta = {"run_id": "20261201T000000Z-abcdef", "scenario": "t", "device": "cpu", "device_name": "cpu"}
    r = inprocess.run_case(Case("t", "gemm", "fp32", None, 16, 16, 16, {}, seed=0, timing=rule), torch.device("cpu"),
                        CpuClock(), meta)
    assert r["status"] == "ok" and r["energy_j"] == 1.5  # two reads: around the energy window
    assert r["energy_power_w"] == pytest.approx(1.5 / r["energy_window_s"])
    assert r["energy_calls"] >= 1 and r["joules_per_call"] == pytest.approx(1.5 / r["energy_calls"])
    assert r["joules_per_tflop"] == pytest.approx(r["joules_per_call"] / (2 * 16**3 / 1e12))
    store.check_records([r], "the record")

    del nvml.nvmlDeviceGetTotalEnergyConsumption  # an older board or binding: no counter, no columns
    r = inprocess.run_case(Case("t", "gemm", "fp32", None, 16, 16, 16, {}, seed=0, timing=rule), torch.device("cpu"),
                        CpuClock(), meta)
    assert r["status"] == "ok" and r["joules_per_tflop"] is None and r["energy_j"] is None
