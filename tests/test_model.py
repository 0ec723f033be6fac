"""The roofline model (suite/analysis/roofline/model.py): published measurements it must come close to,
CPU peaks from what records hold, and timings it must flag (planted) or must not (real runs)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from suite.analysis.roofline import model, published
from suite.precisions.fp8.anchors import TORCHAO_README
from suite.precisions.mx.anchors import MOE_MXFP8, TORCHAO_MOE
from suite.measure import env

ROOT = Path(__file__).resolve().parent.parent
H100 = "NVIDIA H100 80GB HBM3"


# --- against published measurements (the bar; docs/model.md has the table) -------------


def test_torchao_readme_fp8_tensorwise_speedups_within_25_percent():
    rows = {pub.measured: predicted for pub, predicted in published.comparisons()
            if pub.source == TORCHAO_README}
    assert set(rows) == {0.80, 1.39}
    for measured, predicted in rows.items():
        assert abs(predicted / measured - 1) < 0.25, (measured, predicted)
    assert rows[0.80] < 1 < rows[1.39]  # it says which side of 1 each shape is on


def test_bf16_8192_cubed_on_h100_sxm_within_10_percent_of_mamf_finder():
    pred = model.predict([model.gemm("GEMM", 8192, 8192, 8192, "bf16")], model.gpu_device(H100))
    tflops = 2 * 8192**3 / pred.seconds / 1e12
    assert abs(tflops / 794.5 - 1) < 0.10 and pred.bound == "compute"


def test_every_mamf_finder_best_shape_within_15_percent():
    for pub, predicted in published.comparisons():
        if pub.source == published.MAMF:
            assert abs(predicted / pub.measured - 1) < 0.15, pub


def test_torchao_mxfp8_grouped_gemm_speedups_on_llama4_shapes_within_10_percent():
    rows = [(pub, predicted) for pub, predicted in published.comparisons() if pub.source == TORCHAO_MOE]
    assert len(rows) == len(MOE_MXFP8)
    for pub, predicted in rows:
        if "8192,5120" in pub.what:
            assert abs(predicted / pub.measured - 1) < 0.10, pub
        assert predicted > 1  # the model knows no kernel that reaches less of the fp8 peak (docs/model.md)


# --- kernels and bounds ------------------------------------------------------------------------


def test_a_grouped_gemm_reads_only_the_weights_of_experts_with_rows():
    b200 = model.gpu_device("b200")
    params = {"experts": 8, "load": "half_empty"}
    (kernel,) = model.case_kernels("grouped_gemm", "bf16", 4096, 1024, 2048, params)
    assert kernel.flops == 2.0 * 4096 * 1024 * 2048
    assert kernel.bytes == 2 * (4096 * 1024 + 4 * 1024 * 2048) + 2 * 4096 * 2048  # 4 of 8 experts busy
    loop = model.case_kernels("grouped_gemm", "bf16", 4096, 1024, 2048, {**params, "impl": "loop"})
    assert len(loop) == 4 and sum(k.flops for k in loop) == kernel.flops
    one = model.predict([kernel], b200).seconds
    assert model.predict(loop, b200).seconds >= one  # each GEMM of the loop pays its own floor
    # inline MXFP8: the GEMM at twice bf16's rate, and every expert's weight cast in each call
    mx = model.predict_case("grouped_gemm", "mxfp8", 16384, 5120, 8192, {"experts": 16, "quantize": "inline"}, b200)
    bf16 = model.predict_case("grouped_gemm", "bf16", 16384, 5120, 8192, {"experts": 16}, b200)
    assert mx.gemm_s == pytest.approx(bf16.gemm_s / 2, rel=0.05) and mx.cast_s > 0.5 * mx.gemm_s


def test_torchaos_block_formats_are_modelled_on_blackwell_only():
    b200, h100 = model.gpu_device("b200"), model.gpu_device("h100")
    assert "compute capability >= 10" in model.predict_case("gemm", "mxfp8", 4096, 4096, 4096, {}, h100)
    assert "no fp4 peak" in model.predict_case("gemm", "nvfp4", 4096, 4096, 4096, {}, h100)
    inline = {"quantize": "inline"}
    fp8, fp4 = (model.predict_case("gemm", name, 8192, 8192, 8192, inline, b200) for name in ("mxfp8", "mxfp4"))
    assert fp4.gemm_s == pytest.approx(fp8.gemm_s / 2, rel=0.05) and fp4.cast_s > fp8.cast_s  # e2m1 packs
    step = model.predict_case("linear", "mxfp8", 8192, 4096, 4096, {}, b200)
    assert step.cast_s > 0 and step.gemm_s > 0



def test_gemm_flops_bytes_and_bounds():
    kernel = model.gemm("GEMM", 2, 3, 4, "bf16")
    assert kernel.flops == 2 * 2 * 3 * 4 and kernel.bytes == 2 * (2 * 3 + 3 * 4) + 2 * 2 * 4
    h100 = model.gpu_device("h100")
    assert model.kernel_time(kernel, h100) == (model.GPU_KERNEL_FLOOR_S, "overhead")
    # a skinny GEMM (one token) reads the whole weight: memory-bound
    assert model.kernel_time(model.gemm("GEMM", 1, 8192, 8192, "bf16"), h100)[1] == "memory"


def test_fp8_casts_cost_more_eager_than_compiled_and_ln_fusion_saves_reads():
    h100 = model.gpu_device("h100")
    cast = {}
    for workload, compiled in (("linear", False), ("linear", True), ("ln_linear", True)):
        kernels = model.case_kernels(workload, "fp8_tensorwise", 4096, 4096, 4096, {"compile": compiled})
        cast[(workload, compiled)] = model.predict(kernels, h100).cast_s
    assert cast[("linear", False)] > 3 * cast[("linear", True)] > 3 * 0.9 * cast[("ln_linear", True)]
    assert cast[("ln_linear", True)] < cast[("linear", True)]


def test_recipes_a_device_cannot_run_are_not_predicted():
    h100, a100 = model.gpu_device("h100"), model.gpu_device("a100")
    assert "compute capability >= 10" in model.predict_case("gemm", "te_mxfp8", 1024, 1024, 1024, {}, h100)
    assert "no fp8 peak" in model.predict_case("gemm", "fp8_rowwise", 1024, 1024, 1024, {}, a100)
    assert "float32 on every device" in model.predict_case("gemm", "fp8_block", 64, 64, 64, {}, h100)
    assert "not train_step" in model.case_kernels("train_step", "bf16", None, None, None, {})
    b200 = model.gpu_device("b200")
    fp4 = model.predict_case("gemm", "te_nvfp4", 8192, 8192, 8192, {"quantize": "inline"}, b200)
    fp8 = model.predict_case("gemm", "te_mxfp8", 8192, 8192, 8192, {"quantize": "inline"}, b200)
    assert fp4.gemm_s == pytest.approx(fp8.gemm_s / 2, rel=0.05)


def test_every_fp8_recipe_in_the_registry_has_a_scaling_model():
    from suite.scenario import registry

    for name, record in registry.PRECISIONS.items():
        low = record.peak in ("fp8", "fp4")
        assert low == (record.scaling is not None or record.no_roofline is not None), name
        if record.scaling is not None:  # every scaling has its cast kernels
            assert record.scaling in registry.scalings(), name
            for workload in ("linear", "gemm"):
                assert model.case_kernels(workload, name, 64, 64, 64, {}), (workload, name)


# --- CPUs: an FMA peak per format from the records' facts ---------------------------------------


def cpu(flags, isa="AVX512", isa_env=None, threads=2, mhz=2600.0):
    return model.cpu_device(threads, mhz, flags, isa, isa_env)


def test_cpu_peaks_per_format():
    fp32 = 2 * 2600e6 * 64 / 1e12
    amx = cpu("avx2 avx512f avx512_bf16 amx_tile amx_bf16")
    assert amx.peaks["fp32"] == pytest.approx(fp32) and amx.peaks["bf16"] == pytest.approx(16 * fp32)
    assert cpu("avx2 avx512f avx512_bf16").peaks["bf16"] == pytest.approx(2 * fp32)
    epyc = cpu("avx2", isa="AVX2")  # AVX2-only: bf16 has the fp32 rate, which is half of AVX-512's
    assert epyc.peaks["bf16"] == epyc.peaks["fp32"] == pytest.approx(fp32 / 2)
    lowered = cpu("avx2 avx512f amx_bf16", isa="AVX2", isa_env="ONEDNN_MAX_CPU_ISA=AVX2")
    assert lowered.peaks["bf16"] == lowered.peaks["fp32"] == pytest.approx(fp32)  # MKL's fp32 is not lowered
    assert model.cpu_device(2, None, "avx2", "AVX2") is None  # no clock recorded: no CPU model


def test_cpu_clock_from_cpufreq_else_cpuinfo(tmp_path):
    sysfs, cpuinfo = tmp_path / "cpu", tmp_path / "cpuinfo"
    cpuinfo.write_text("processor : 0\ncpu MHz\t\t: 2600.000\nprocessor : 1\ncpu MHz\t\t: 2900.5\n")
    assert env.cpu_clock_mhz(sysfs, cpuinfo) == 2900.5
    for i, khz in enumerate((3_800_000, 3_500_000)):
        (sysfs / f"cpu{i}" / "cpufreq").mkdir(parents=True)
        (sysfs / f"cpu{i}" / "cpufreq" / "cpuinfo_max_freq").write_text(f"{khz}\n")
    assert env.cpu_clock_mhz(sysfs, cpuinfo) == 3800.0
    assert env.cpu_clock_mhz(tmp_path / "none", tmp_path / "none") is None


# --- beside a record: planted timings are flagged, real ones are not ----------------------------


def gpu_record(precision="bf16", size=8192, time_ms=None, **extra):
    roofline_ms = 2 * size**3 / 989.5e12 * 1e3
    return {"status": "ok", "device": "cuda", "device_name": H100, "workload": "gemm", "precision": precision,
            "baseline": "bf16", "m": size, "k": size, "n": size, "params": "{}",
            "time_ms_median": roofline_ms if time_ms is None else time_ms, "cache": "cold", **extra}


def test_a_record_3x_faster_than_its_roofline_is_flagged():
    record = gpu_record()
    roofline_ms = model.record_columns(record)["roofline_ms"]
    planted = model.record_columns({**record, "time_ms_median": roofline_ms / 3})
    assert planted["implausible"].startswith("faster than physically possible: 3x its roofline on H100 SXM")
    assert "missing synchronisation?" in planted["implausible"] and planted["roofline_fraction"] == pytest.approx(3)
    honest = model.record_columns({**record, "time_ms_median": roofline_ms / 0.7})
    assert honest["implausible"] is None and honest["bound"] == "compute"
    assert honest["roofline_fraction"] == pytest.approx(0.7) and honest["predicted_speedup"] == 1.0


def test_a_planted_cpu_record_3x_faster_than_its_roofline_is_flagged():
    facts = {"status": "ok", "device": "cpu", "device_name": "a CPU", "cpu_threads": 2, "cpu_clock_mhz": 2600.0,
             "cpu_flags": "avx2 avx512f", "cpu_isa": "AVX512", "workload": "gemm", "precision": "fp32",
             "baseline": "fp32", "m": 1024, "k": 1024, "n": 1024, "params": "{}"}
    roofline_ms = model.record_columns({**facts, "time_ms_median": 1.0})["roofline_ms"]
    assert roofline_ms == pytest.approx(2 * 1024**3 / (2 * 2.6e9 * 64) * 1e3)
    assert "faster than physically possible" in model.record_columns({**facts, "time_ms_median": roofline_ms / 3})["implausible"]
    # within the turbo margin (a recorded nominal clock): not flagged
    assert model.record_columns({**facts, "time_ms_median": roofline_ms / 1.5})["implausible"] is None


def test_a_large_compute_bound_gpu_gemm_far_below_its_roofline_is_flagged():
    roofline_ms = model.record_columns(gpu_record())["roofline_ms"]
    slow = model.record_columns(gpu_record(time_ms=roofline_ms / 0.1))
    assert "at 10.0% of its roofline on H100 SXM, below 25%" in slow["implausible"]
    small = model.record_columns(gpu_record(size=1024, time_ms=1.0))  # small: the 25% rule does not apply
    assert small["implausible"] is None


def test_warm_cache_cases_are_not_held_to_the_memory_roof():
    skinny = gpu_record(size=8192, m=1, time_ms=0.01)  # 134 MB of weight in 10 us: only from cache
    assert "faster than physically possible" in model.record_columns(skinny)["implausible"]
    assert model.record_columns({**skinny, "cache": "warm"})["implausible"] is None


def test_records_the_model_does_not_cover_get_no_columns():
    assert model.record_columns(gpu_record(status="skipped")) == {}
    assert model.record_columns(gpu_record(precision="fp8_tensorwise", emulated=True)) == {}
    assert model.record_columns(gpu_record(device_name="NVIDIA GeForce RTX 4090")) == {}
    assert model.record_columns({**gpu_record(), "workload": "train_step", "m": None}) == {}
    fp8 = model.record_columns(gpu_record(precision="fp8_rowwise", params='{"quantize": "inline"}'))
    assert fp8["predicted_cast_ms"] > 0 and fp8["predicted_speedup"] < 1  # eager casts at 8192^3


REFERENCE = ROOT / "results" / "reference" / "cpu_roofline"


@pytest.mark.parametrize("run", ["amx", "avx2"])
def test_no_real_cpu_record_is_flagged_and_every_one_carries_the_model(run):
    """Runs of the `cpu` scenario on this project's AMX CPU, natively and under the forced AVX2 path
    (docs/reference-runs.md): every measured record has its prediction, fraction and bound."""
    [path] = (REFERENCE / run).glob("*.parquet")
    df = pd.read_parquet(path)
    ok = df[df["status"] == "ok"]
    assert len(ok) == 18 and ok[["predicted_ms", "roofline_fraction", "bound"]].notna().all().all()
    assert ok["implausible"].isna().all()
    assert (ok["roofline_fraction"] < model.IMPLAUSIBLE_ABOVE["cpu"]).all()
    # recomputed from the records' own facts, the columns are the same
    for record in ok.to_dict("records"):
        assert model.record_columns(record)["roofline_fraction"] == pytest.approx(record["roofline_fraction"])
    bf16 = ok[ok["precision"] == "bf16"]["roofline_fraction"]
    if run == "avx2":  # the slow path: a small fraction of the fp32 FMA peak it is held to
        assert (bf16 < 0.02).all()
    else:  # AMX: bf16 well above the slow path's fraction
        assert (bf16 > 0.1).all()


def test_a_run_stores_the_model_beside_each_measured_record(tiny_scenario, tmp_path):
    from suite import pipeline

    if env.cpu_clock_mhz() is None:
        pytest.skip("this platform reports no CPU clock (no cpufreq, no `cpu MHz` in /proc/cpuinfo)")
    run = pipeline.run(pipeline.RunRequest(tiny_scenario, tmp_path / "results", None, "cpu", progress=False))
    df = pd.read_parquet(run.path)
    ok = df[df["status"] == "ok"]
    assert ok["cpu_clock_mhz"].notna().all() and ok["bound"].eq("compute").all()
    assert ok[["predicted_ms", "roofline_ms", "roofline_fraction", "roofline_tflops"]].notna().all().all()
    assert df.loc[df["status"] != "ok", "predicted_ms"].isna().all()  # skipped tf32: nothing to set against
