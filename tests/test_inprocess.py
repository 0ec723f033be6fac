"""A case measured in this process (`suite.measure.inprocess`): one record per case with the contract
columns; failures and skips never stop a run."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from suite.measure import inprocess
from suite.measure.timing import CpuClock
from suite.precisions import flags
from suite.results import store
from suite.scenario import plan
from tests.conftest import run_cases
from tests.virtual_clock import by_dtype, fixed

CPU = torch.device("cpu")
META = {"run_id": "r1", "device": "cpu", "device_name": "test cpu", "torch_version": torch.__version__}


def run_all(scenario, progress=None):
    return run_cases(plan.expand(scenario), META, progress)


def test_records_follow_the_contract(tiny_scenario):
    records = run_all(tiny_scenario)
    assert len(records) == 8
    for r in records:
        assert r["status"] in ("ok", "skipped")
        if r["status"] == "ok":
            assert r["n_samples"] == len(r["samples_ms"]) >= 3
            assert r["time_ms_p10"] <= r["time_ms_median"] <= r["time_ms_p90"]
            assert r["tflops"] == pytest.approx(2 * r["m"] * r["n"] * r["k"] / (r["time_ms_median"] * 1e-3) / 1e12)
            assert r["rel_err"] is not None and r["reason"] is None
    table = store._table(records)
    assert set(store.CONTRACT) <= set(table.column_names)


def test_tf32_skipped_on_cpu_with_reason(tiny_scenario):
    skipped = [r for r in run_all(tiny_scenario) if r["status"] == "skipped"]
    assert {r["precision"] for r in skipped} == {"tf32"}
    assert all("CUDA" in r["reason"] for r in skipped)


def test_flags_are_the_same_after_a_run(tiny_scenario):
    before = flags.snapshot()
    run_all(tiny_scenario)
    assert flags.snapshot() == before


def test_a_failing_case_is_recorded_and_the_run_goes_on(tiny_scenario, monkeypatch):
    from suite.precisions.floating.recipes import Half

    original = Half.gemm

    def broken(self, a, b, params):
        if self.name == "fp16":
            raise RuntimeError("simulated kernel failure\nsecond line")
        return original(self, a, b, params)

    monkeypatch.setattr(Half, "gemm", broken)
    records = run_all(tiny_scenario)
    failed = [r for r in records if r["status"] == "failed"]
    assert {r["precision"] for r in failed} == {"fp16"}
    assert all(r["reason"] == "RuntimeError: simulated kernel failure" for r in failed)
    assert sum(r["status"] == "ok" for r in records) == 4  # fp32 and bf16 at two sizes


def test_non_finite_output_fails_the_case(tiny_scenario, monkeypatch):
    from suite.precisions.floating.recipes import Half

    monkeypatch.setattr(Half, "gemm", lambda self, a, b, params: (lambda: torch.full((a.shape[0], b.shape[1]), float("inf"))))
    records = run_all(tiny_scenario)
    bad = [r for r in records if r["precision"] in ("bf16", "fp16")]
    assert all(r["status"] == "failed" and "non-finite" in r["reason"] for r in bad)


def test_cpu_clock_times_each_call():
    calls = []
    samples = CpuClock().time_batch(lambda: calls.append(1), 4)
    assert len(samples) == 4 == len(calls) and all(s >= 0 for s in samples)


# --- the cost bound through a case run here: a faked 30 s call on a virtual clock -------------------


def test_a_30_s_call_with_a_1_s_budget_is_one_checked_call_and_a_record_that_says_so():
    from suite.measure.timing import StopRule

    rule = StopRule(budget_s=1.0)
    case = plan.Case("cost", "gemm", "bf16", "fp32", 64, 64, 64, params={}, seed=0, timing=rule, device="cpu")
    clock = fixed(30_000.0)
    record = inprocess.run_case(case, CPU, clock, META)
    assert record["status"] == "ok" and record["rel_err"] < 1e-2  # the checked output is the timed one's
    assert clock.calls == 1  # one call: calibration, accuracy check and sample at once
    assert record["n_samples"] == rule.floor_samples == 1 and record["samples_ms"] == [30_000.0]
    assert record["stop_reason"] == "cap" and record["warmup_reason"] == "slow" and record["first_call_kept"]
    assert record["rel_ci"] == float("inf") and record["case_cap_s"] == 10.0
    assert clock.now <= record["case_cap_s"] + 30.0  # the cap plus at most the one call


# --- a setting's cases timed together (paired rounds) -------------------------------------------------


def setting(precisions=("fp32", "bf16", "fp16"), **timing):
    from suite.measure.timing import StopRule

    rule = StopRule(**{"budget_s": 0.1, "warmup_s": 0.0, "target_rel_ci": 1e-9, **timing})
    return [plan.Case("paired", "gemm", p, "fp32", 64, 64, 64, params={}, seed=0, timing=rule, device="cpu")
            for p in precisions]


def test_a_setting_is_timed_in_paired_rounds_and_each_case_keeps_its_record():
    clock = by_dtype({torch.float32: 2.0, torch.bfloat16: 1.0, torch.float16: 0.5})
    fp32, bf16, fp16 = inprocess.run_setting(setting(), CPU, clock, META)
    assert [r["status"] for r in (fp32, bf16, fp16)] == ["ok"] * 3
    assert {r["pairing"] for r in (fp32, bf16, fp16)} == {"paired"}
    assert fp32["pairing_group"] == bf16["pairing_group"] == min(r["case_id"] for r in (fp32, bf16, fp16))
    assert fp32["pairing_seed"] == bf16["pairing_seed"] == inprocess.pairing_seed(setting())
    assert bf16["speedup_paired"] == pytest.approx(2.0) and fp16["speedup_paired"] == pytest.approx(4.0)
    assert bf16["speedup_paired_low"] <= 2.0 <= bf16["speedup_paired_high"]
    assert bf16["paired_rounds"] == len(bf16["paired_ratios"]) >= 5
    assert fp32.get("speedup_paired") is None and fp32["pairing_note"] is None  # the baseline itself
    assert (fp32["time_ms_median"], bf16["time_ms_median"], fp16["time_ms_median"]) == (2.0, 1.0, 0.5)
    assert fp32["rel_err"] is not None and bf16["rel_err"] > fp32["rel_err"]  # each case's own check


def test_flags_never_leak_between_interleaved_cases(monkeypatch):
    """bf16's recipe here also turns TF32 on (as a recipe may set any global flag): each case's calls
    run under its own recipe's flags, round after round, and every flag is restored after the setting."""
    from contextlib import contextmanager

    from suite.precisions.floating.recipes import Float32, Half

    seen: dict[str, set] = {"fp32": set(), "bf16": set()}
    original_active, original_gemm = Half.active, Float32.gemm

    @contextmanager
    def active(self):
        with original_active(self), flags.float32_matmul(tf32=True):
            yield

    def watched(name, gemm):
        def make(self, a, b, params):
            fn = gemm(self, a, b, params)

            def call():
                seen[self.name].add(flags.snapshot()["float32_matmul_precision"])
                return fn()
            return call
        return make

    monkeypatch.setattr(Half, "active", active)
    monkeypatch.setattr(Float32, "gemm", watched("fp32", original_gemm))
    monkeypatch.setattr(Half, "gemm", watched("bf16", Half.gemm))
    before = flags.snapshot()
    records = inprocess.run_setting(setting(("fp32", "bf16")), CPU, by_dtype({torch.float32: 1.0}), META)
    assert [r["pairing"] for r in records] == ["paired", "paired"] and records[1]["paired_rounds"] >= 5
    assert seen == {"fp32": {"highest"}, "bf16": {"high"}}
    assert flags.snapshot() == before


def test_a_failed_baseline_costs_no_record_and_its_speedups_say_why(monkeypatch):
    from suite.precisions.floating.recipes import Float32

    def broken(self, a, b, params):
        raise RuntimeError("simulated fp32 failure")

    monkeypatch.setattr(Float32, "gemm", broken)
    fp32, bf16, fp16 = inprocess.run_setting(setting(), CPU, by_dtype({torch.bfloat16: 1.0}), META)
    assert fp32["status"] == "failed" and fp32["reason"] == "RuntimeError: simulated fp32 failure"
    assert bf16["status"] == fp16["status"] == "ok" and bf16["pairing"] == "paired"
    assert bf16.get("speedup_paired") is None
    assert bf16["pairing_note"] == "its baseline fp32 failed: RuntimeError: simulated fp32 failure"


def test_a_case_whose_calls_fail_mid_rounds_is_failed_and_the_others_are_kept(monkeypatch):
    from suite.precisions.floating.recipes import Half

    original = Half.gemm
    calls = {"n": 0}

    def flaky(self, a, b, params):
        fn = original(self, a, b, params)
        if self.name != "fp16":
            return fn

        def call():
            calls["n"] += 1
            if calls["n"] > 20:  # after its check and warm-up, in the rounds
                raise RuntimeError("illegal memory access")
            return fn()
        return call

    monkeypatch.setattr(Half, "gemm", flaky)
    fp32, bf16, fp16 = inprocess.run_setting(setting(), CPU, by_dtype({torch.float32: 2.0}), META)
    assert fp16["status"] == "failed" and "illegal memory access" in fp16["reason"]
    assert fp32["status"] == bf16["status"] == "ok" and bf16["speedup_paired"] == pytest.approx(2.0)


def test_a_slow_path_setting_is_timed_one_case_after_another_and_the_record_says_so():
    # bf16 300x slower than fp32, as on a CPU without native bf16 (ATEN_CPU_CAPABILITY=avx2)
    clock = by_dtype({torch.float32: 0.05, torch.bfloat16: 15.0})
    fp32, bf16 = inprocess.run_setting(setting(("fp32", "bf16")), CPU, clock, META)
    assert fp32["status"] == bf16["status"] == "ok"
    assert fp32["pairing"] == bf16["pairing"] == "sequential" and bf16.get("speedup_paired") is None
    assert "one bf16 call takes 300x one fp32 call" in bf16["pairing_note"]


def test_one_slow_precision_is_timed_alone_and_the_others_keep_their_paired_speedups():
    """fp16 300x slower than fp32, bf16 native (an EPYC without AVX512-FP16): fp16 is timed alone and
    says why, bf16 stays paired with fp32; the CPU this runs on does not matter (virtual time)."""
    clock = by_dtype({torch.float32: 0.05, torch.bfloat16: 0.025, torch.float16: 15.0})
    fp32, bf16, fp16 = inprocess.run_setting(setting(), CPU, clock, META)
    assert [r["status"] for r in (fp32, bf16, fp16)] == ["ok"] * 3
    assert (fp32["pairing"], bf16["pairing"], fp16["pairing"]) == ("paired", "paired", "alone")
    assert fp32["pairing_note"] is None and bf16["pairing_note"] is None
    assert "one fp16 call takes 600x one bf16 call" in fp16["pairing_note"]
    assert bf16["speedup_paired"] == pytest.approx(2.0) and bf16["paired_rounds"] >= 5
    assert fp16.get("speedup_paired") is None and fp16.get("paired_rounds") is None  # a ratio of medians only
    assert fp16["time_ms_median"] == 15.0 and fp32["time_ms_median"] == 0.05  # the baseline's rounds' median
    assert len({r["pairing_group"] for r in (fp32, bf16, fp16)}) == 1


def test_a_baseline_timed_alone_leaves_the_paired_ones_without_a_paired_speedup_and_says_why():
    clock = by_dtype({torch.float32: 15.0, torch.bfloat16: 0.05, torch.float16: 0.05})
    fp32, bf16, fp16 = inprocess.run_setting(setting(), CPU, clock, META)
    assert (fp32["pairing"], bf16["pairing"], fp16["pairing"]) == ("alone", "paired", "paired")
    assert bf16.get("speedup_paired") is None and bf16["pairing_note"].startswith("its baseline was timed alone: ")


def test_partners_are_timed_but_give_no_record():
    """A resumed run whose journal has the baseline already: it is timed again beside the others (so
    their paired speedups have it in the same rounds), and only the others get records."""
    cases = setting()
    clock = by_dtype({torch.float32: 2.0, torch.bfloat16: 1.0})
    bf16, fp16 = inprocess.run_setting(cases, CPU, clock, META, partners=frozenset({cases[0].case_id}))
    assert (bf16["precision"], fp16["precision"]) == ("bf16", "fp16")
    assert bf16["speedup_paired"] == pytest.approx(2.0)


def test_a_case_whose_baseline_is_not_in_the_run_says_why_it_has_no_paired_speedup():
    (bf16,) = inprocess.run_setting(setting(("bf16",)), CPU, by_dtype({}), META)  # e.g. `run --only precision=bf16`
    assert bf16["status"] == "ok" and bf16.get("pairing") is None and bf16.get("speedup_paired") is None
    assert bf16["pairing_note"] == "its baseline fp32 was not timed with it"


# --- torch.compile: one cold start per setting (issue #36) -------------------------------------------


def test_a_compiled_setting_resets_dynamo_once_and_compiles_each_member_once(monkeypatch):
    """Preparing a member must not wipe the compiled code of those prepared before it: one
    dynamo reset per setting, before its cases are prepared; each member compiles once (its
    first call, compile_s), never again in its timed samples."""
    import torch._dynamo
    from suite.scenario.stop_rule import StopRule

    compiles, resets = [], []
    name = "mpsuite_counting_backend"
    if name not in torch._dynamo.list_backends(exclude_tags=()):
        @torch._dynamo.register_backend(name=name)
        def counting(gm, example_inputs):
            compiles.append(gm)
            return gm.forward
    else:
        monkeypatch.setitem(torch._dynamo.backends.registry._COMPILER_FNS, name,
                            lambda gm, inputs: compiles.append(gm) or gm.forward)
    real_reset = torch._dynamo.reset
    monkeypatch.setattr(torch._dynamo, "reset", lambda: resets.append(1) or real_reset())
    rule = StopRule(warmup_s=0.0, warmup_max_s=0.05, min_samples=3, budget_s=0.02)
    params = {"compile": True, "compile_backend": name}
    cases = [plan.Case("t", "linear", p, None, 16, 16, 16, params, seed=0, timing=rule) for p in ("fp32", "fp16")]
    records = inprocess.run_setting(cases, CPU, CpuClock(), META)
    assert [r["status"] for r in records] == ["ok", "ok"] and all(r["compile_s"] > 0 for r in records)
    assert len(resets) == 1  # before the setting's cases are prepared; none per case, none on release
    assert len(compiles) == 2  # one forward graph per member: none recompiled after the other's preparation
    real_reset()


# FLOP/s of an EPYC's two cores in fp32 and (AVX512-BF16, native) bf16; fp16 has no native kernel
# there (no AVX512-FP16): one call takes seconds, whatever the shape (issue #38: 2 s).
EPYC_FP32_FLOPS, EPYC_BF16_FLOPS, EPYC_FP16_CALL_MS = 1e11, 2e11, 2_000.0


def test_the_cpu_scenarios_own_settings_pair_bf16_with_fp32_where_fp16_is_the_slow_path():
    """issue #38: scenarios/cpu.toml as planned (its stop rule: 0.5 s budget, 5 s case cap; tf32
    skipped on a CPU), each setting run through the executors' units and `run_setting` with an EPYC's
    call times (bf16 native, fp16 2 s a call: 4 of 6 settings had gone sequential for every
    precision). Each setting's GEMM is computed at 64^3 (the virtual clock gives the real shape's
    time): fp16 is timed alone in every setting, bf16 stays paired with fp32 and keeps its speedup."""
    import dataclasses

    from suite.measure.executors import base
    from suite.scenario import spec

    scenario = spec.load(Path(__file__).resolve().parent.parent / "scenarios" / "cpu.toml")
    units = base.units(plan.expand(scenario))
    assert len(units) == 6 and all(u.cases[0].timing.case_cap_s == 5.0 for u in units)
    for unit in units:
        flop = 2 * unit.cases[0].m * unit.cases[0].k * unit.cases[0].n
        clock = by_dtype({torch.float32: flop / EPYC_FP32_FLOPS * 1e3, torch.bfloat16: flop / EPYC_BF16_FLOPS * 1e3,
                          torch.float16: EPYC_FP16_CALL_MS})
        small = [dataclasses.replace(c, m=64, k=64, n=64) for c in unit.cases]
        out = {r["precision"]: r for r in inprocess.run_setting(small, CPU, clock, META)}
        shape = f"{unit.cases[0].m}x{unit.cases[0].k}x{unit.cases[0].n}"
        assert out["tf32"]["status"] == "skipped", shape
        assert [out[p]["pairing"] for p in ("fp32", "bf16", "fp16")] == ["paired", "paired", "alone"], shape
        assert out["bf16"]["speedup_paired"] == pytest.approx(2.0) and out["bf16"]["paired_rounds"] >= 5, shape
        # set aside on its first call, which the check times: 2 s calls cannot fit a warm-up and 5 samples in 5 s
        assert "too slow for the case cap (5 s)" in out["fp16"]["pairing_note"], shape
        assert out["fp16"].get("speedup_paired") is None and out["fp16"]["stop_reason"] == "cap", shape
