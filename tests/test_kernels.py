"""Which GEMM implementation a case ran (`suite.measure.kernels`, looked at once after timing by
`suite.measure.attribution.untimed`): oneDNN's and MKL's verbose lines on a CPU, the profiler's CUDA
kernel names on a GPU, the short summary, and a look that never costs a case."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from suite import cli
from suite.measure import attribution, inprocess, kernels
from suite.measure.executors.cuda_worker import CudaWorker
from suite.measure.executors.process import Process
from suite.measure.executors.thread import CaseThread
from suite.measure.timing import StopRule, clock_for
from suite.scenario.plan import Case
from tests.json_docs import validated

ROOT = Path(__file__).resolve().parent.parent
CPU = torch.device("cpu")
META = {"run_id": "20260101T120000Z-abcdef", "device": "cpu", "device_name": "test cpu",
        "torch_version": torch.__version__}
FAST = StopRule(warmup_s=0.0, min_samples=3, budget_s=0.02)
AVX2 = {"ATEN_CPU_CAPABILITY": "avx2", "ONEDNN_MAX_CPU_ISA": "AVX2"}  # a CPU without native bf16, emulated


def native_bf16() -> bool:
    """Whether oneDNN runs bf16 GEMMs on this CPU (AVX512-BF16 or AMX, and no ISA cap set)."""
    return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())


def native_onednn_dtypes() -> list[str]:
    """The reduced precisions whose GEMMs oneDNN runs on this CPU, so that the AVX2 override moves
    them to aten: bf16 with AVX512-BF16 or AMX, fp16 with AVX512-FP16 or AMX-FP16."""
    return [name for name, native in (("bf16", native_bf16()), ("fp16", torch.ops.mkldnn._is_mkldnn_fp16_supported()))
            if native]


# --- reading what the libraries print ------------------------------------------------------------

VERBOSE = """\
onednn_verbose,v1,info,oneDNN v3.12.0 (commit 80afa71049cd69a3df32adcccb623b12cd7baa22)
onednn_verbose,v1,info,cpu,isa:Intel AVX10.1 and Intel AMX with bfloat16 and 8-bit integer support
onednn_verbose,v1,primitive,info,template:operation,engine,primitive,implementation,prop_kind,...
onednn_verbose,v1,primitive,exec,cpu,reorder,jit:uni,undef,src:f32::blocked:ab::f0 dst:bf16::blocked:ab::f0,,,64x64,0.01
onednn_verbose,v1,primitive,exec,cpu,matmul,brg_matmul:avx10_1_512_amx,undef,src:bf16::blocked:ab::f0,,,64x64:64x64,19.6
onednn_verbose,v1,primitive,exec,cpu,matmul,brg_matmul:avx10_1_512_amx,undef,src:bf16::blocked:ab::f0,,,64x64:64x64,0.1
onednn_verbose,exec,cpu,inner_product,brgemm:avx512_core_bf16,forward_training,src_bf16::blocked:ab:f0,,,mb64ic256oc256,0.2
dnnl_verbose,exec,cpu,matmul,gemm:jit,undef,src_f32::blocked:ab:f0,,,64x64:64x64,0.1
MKL_VERBOSE oneMKL 2024.0 Update 2 Product build 20240605 for Intel(R) 64 architecture
MKL_VERBOSE SGEMM(N,N,64,64,64,0x7ffc741b1cc0,0x5572bbe34100,64,0x5572bbe34100,64,0x7ffc741b1ce0,0x5572bbe3d640,64) 15.99ms CNR:OFF Dyn:1 FastMM:1 TID:0  NThr:2
MKL_VERBOSE vsExp(100) 1.0us
something else a library printed
"""


def test_the_gemm_implementations_are_read_from_every_verbose_layout():
    assert kernels.cpu_names(VERBOSE) == [
        "onednn:brg_matmul:avx10_1_512_amx",  # 3.4+: "v1,primitive,exec"; once though it ran twice
        "onednn:brgemm:avx512_core_bf16",  # 3.0-3.3: no "v1,primitive"
        "onednn:gemm:jit",  # 2.x: dnnl_verbose
        "mkl:sgemm",  # a BLAS call; the header and a vector-math call are not GEMMs
    ]
    assert kernels.cpu_names("onednn_verbose,v1,primitive,exec,cpu,reorder,jit:uni,undef") == []


def test_no_library_line_is_aten_only_where_both_libraries_could_have_said_so():
    assert kernels._cpu_verdict([], onednn=True, mkl=True) == (["aten"], None)
    names, note = kernels._cpu_verdict([], onednn=True, mkl=False)  # OpenBLAS builds (aarch64): no MKL
    assert names is None and "no MKL verbose output" in note
    assert kernels._cpu_verdict([], onednn=False, mkl=False)[0] is None
    assert kernels._cpu_verdict(["mkl:sgemm"], onednn=True, mkl=False) == (["mkl:sgemm"], None)


CUDA_NAMES = {
    "nvjet_tst_64x8_64x16_4x1_v_bz_TNT": "cuda:nvjet_tst_64x8_64x16_4x1_v_bz_TNT",
    "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_execute_segment_k_off_kernel__5x_cublas":
        "cuda:sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_execute_segment_k_off_kernel__5x_cublas",
    "void cutlass::Kernel2<cutlass_80_tensorop_bf16_s16816gemm_relu_bf16_64x64_32x6_nn_align8>(cutlass_80_tensorop_bf16_s16816gemm_relu_bf16_64x64_32x6_nn_align8::Params)":
        "cuda:cutlass::Kernel2<cutlass_80_tensorop_bf16_s16816gemm_relu_bf16_64x64_32x6_nn_align8>",
    "triton_tem_fused_mm_0": "cuda:triton_tem_fused_mm_0",
}


def test_cuda_names_are_kept_whole_or_shortened_to_a_head_and_a_hash():
    for name, short in CUDA_NAMES.items():
        assert kernels.short(name) == short
    a = "void cutlass::device_kernel<cutlass::gemm::kernel::GemmUniversal<cute::tuple<int, int>, float>>(Params)"
    b = a.replace("float", "double")
    assert kernels.short(a).startswith("cuda:cutlass::device_kernel<...>#") and kernels.short(a) != kernels.short(b)
    split_k = ["nvjet_tst_128x64_64x8_1x2_h_bz_splitK_TNT", "void cublasLt::splitKreduce_kernel<32, 16, int, float>(x)"]
    assert kernels.summary(split_k).startswith("cuda:nvjet_tst_128x64_64x8_1x2_h_bz_splitK_TNT+cuda:cublasLt::splitKreduce_kernel<...>#")
    assert kernels.summary(["onednn:brg_matmul:avx10_1_512_amx"] * 1 + ["aten"]) == "onednn:brg_matmul:avx10_1_512_amx+aten"
    assert kernels.summary(None) is None and kernels.summary([]) is None


def test_gemm_kernels_are_found_by_name_and_by_the_op_that_launched_them():
    """Events as torch.profiler's `events()` gives them: CUDA kernels, and host events whose kernels
    list holds what they launched (the runtime call under aten::mm)."""
    def kernel(name):
        return SimpleNamespace(name=name, device_type="DeviceType.CUDA", kernels=[], cpu_parent=None)

    mm = SimpleNamespace(name="aten::mm", device_type="DeviceType.CPU", kernels=[], cpu_parent=None)
    launch = SimpleNamespace(name="cudaLaunchKernel", device_type="DeviceType.CPU", cpu_parent=mm,
                             kernels=[SimpleNamespace(name="some_new_gemm_family_kernel")])
    events = [mm, launch, kernel("some_new_gemm_family_kernel"), kernel("nvjet_tst_64x8_64x16_4x1_v_bz_TNT"),
              kernel("triton_poi_fused_addmm_gelu_0"),  # a fused epilogue, not a GEMM
              kernel("void at::native::vectorized_elementwise_kernel<4, at::native::AbsFunctor<float>>(int)"),
              kernel("nvjet_tst_64x8_64x16_4x1_v_bz_TNT")]
    assert kernels.gpu_names(events) == ["some_new_gemm_family_kernel", "nvjet_tst_64x8_64x16_4x1_v_bz_TNT"]


# --- capturing them ------------------------------------------------------------------------------


def look(dtype, size=64) -> kernels.Found:
    a = torch.randn(size, size).to(dtype)
    a @ a  # the libraries' first call (JIT, headers) outside the look
    with kernels.cpu_verbose() as found:
        a @ a
    return found


def test_the_cpu_look_names_the_library_this_cpu_uses():
    if torch.backends.mkl.is_available():
        assert look(torch.float32).names == ["mkl:sgemm"]
    bf16 = look(torch.bfloat16).names
    if native_bf16():
        assert len(bf16) == 1 and bf16[0].startswith("onednn:brg")  # a oneDNN bf16 kernel for this ISA
    else:
        assert bf16 == ["aten"]  # torch's own kernel: oneDNN has no bf16 kernel here


def test_the_look_keeps_stdout_clean_and_loses_nothing_printed_meanwhile(capfd):
    a = torch.randn(64, 64, dtype=torch.bfloat16)
    with kernels.cpu_verbose() as found:
        a @ a
        print("printed meanwhile", flush=True)
        os.write(1, b"written to fd 1\n")
    out = capfd.readouterr().out
    assert "printed meanwhile\n" in out and "written to fd 1\n" in out
    assert "onednn_verbose" not in out and "MKL_VERBOSE" not in out and found.names
    print("after", flush=True)
    assert capfd.readouterr().out == "after\n"  # fd 1 is back where it was


def test_the_look_works_from_the_case_thread():
    thread = CaseThread()
    try:
        found = thread.call(lambda: look(torch.bfloat16))
    finally:
        thread.close()
    assert found.names == look(torch.bfloat16).names


def test_a_cpu_without_native_bf16_runs_bf16_in_aten():
    """The emulated AVX2-only CPU (`ATEN_CPU_CAPABILITY=avx2 ONEDNN_MAX_CPU_ISA=AVX2`; only the
    second takes bf16 off oneDNN): bf16 is torch's own kernel, fp32 stays on MKL where torch has it."""
    code = ("import torch; from suite.measure import kernels; from tests.test_kernels import look; "
            "print(look(torch.bfloat16).names, look(torch.float32).names)")
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env={**os.environ, **AVX2}, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    fp32 = "['mkl:sgemm']" if torch.backends.mkl.is_available() else ""
    assert done.stdout.strip().startswith("['aten'] " + fp32)


# --- the look after timing -----------------------------------------------------------------------


def gemm_case(precision="bf16", n=64) -> Case:
    return Case("k", "gemm", precision, "fp32", n, n, n, {}, 0, FAST)


def test_every_measured_case_names_its_kernels_and_a_slow_one_says_why_not():
    record = inprocess.run_case(gemm_case(), CPU, clock_for(CPU), META)
    assert record["status"] == "ok" and record["kernels"] and record["kernel"] == kernels.summary(record["kernels"])
    assert record["kernel_note"] is None
    prepared = SimpleNamespace(split_kernels=False, fn=lambda: pytest.fail("a slow case is not called again"))
    slow = attribution.untimed(prepared, lambda: None, CPU, SimpleNamespace(median_ms=2000.0, case_cap_s=5.0))
    assert slow == {"kernels": None, "kernel": None,
                    "kernel_note": "not looked at: one call takes 2 s, more than 0.25 of the 5 s case cap"}


def test_a_look_that_breaks_costs_its_columns_never_the_case(monkeypatch):
    def broken():
        raise RuntimeError("verbose mode refused")

    monkeypatch.setattr(kernels, "_set_verbose", lambda level: broken())
    record = inprocess.run_case(gemm_case(), CPU, clock_for(CPU), META)
    assert record["status"] == "ok" and record["kernels"] is None
    assert record["kernel_note"] == "kernel look failed: RuntimeError: verbose mode refused"


def test_a_gpu_without_a_profiler_leaves_a_note(monkeypatch):
    monkeypatch.setattr(attribution, "_lingers", lambda: None)
    monkeypatch.setattr(attribution, "_profiled", lambda *a, **k: RuntimeError("CUPTI initialization failed"))
    prepared = SimpleNamespace(split_kernels=True, fn=lambda: None)
    out = attribution.untimed(prepared, lambda: None, torch.device("cuda"), SimpleNamespace(median_ms=1.0, case_cap_s=30.0))
    assert out == {"kernels": None, "kernel": None,
                   "kernel_note": "torch.profiler cannot run here: RuntimeError: CUPTI initialization failed"}


def test_a_case_in_a_subprocess_and_in_the_worker_process_names_the_same_kernels():
    """fd 1 of a child process points at its log (the record travels on a channel of its own): the
    look reads the libraries' lines there too, and the record channel stays clean."""
    here = inprocess.run_case(gemm_case(), CPU, clock_for(CPU), META)["kernels"]
    isolated = Process("cpu", timeout_s=300).run_case(gemm_case(), META)
    worker = CudaWorker("cpu", timeout_s=300)
    try:
        served = worker.run_case(gemm_case(), META)
    finally:
        worker.close()
    assert isolated["status"] == served["status"] == "ok"
    assert isolated["kernels"] == served["kernels"] == here


# --- what a kernel change explains ----------------------------------------------------------------


@pytest.mark.skipif(not native_bf16(), reason="needs a CPU whose oneDNN runs bf16 (AVX512-BF16 or AMX)")
def test_a_run_under_the_avx2_emulation_shows_the_kernel_that_changed(write_scenario, tmp_path, capsys):
    """The same tiny scenario natively and with `ATEN_CPU_CAPABILITY=avx2 ONEDNN_MAX_CPU_ISA=AVX2`:
    compare, history and env-diff each name the bf16 kernel that changed, per case, in the terminal,
    in JSON and in the HTML page."""
    from tests.conftest import TINY_SCENARIO

    # 256^3: bf16 in aten is some 300x slower than on AMX, so its speedup falls whatever the load
    # does to fp32's time (shared machines move it 2-50x), and the verdict is always regressed.
    scenario = write_scenario(TINY_SCENARIO.replace("sizes = [32, 64]", "sizes = [256]"), "tiny.toml")
    results, out = tmp_path / "results", tmp_path / "reports"
    assert cli.main(["run", str(scenario), "--results", str(results), "--no-report", "--quiet"]) == 0
    done = subprocess.run([sys.executable, "-m", "suite", "run", str(scenario), "--results", str(results),
                           "--no-report", "--quiet"], cwd=ROOT, env={**os.environ, **AVX2}, capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    capsys.readouterr()
    changed = "kernel changed: onednn:brg_matmul:"
    single = ["--min-runs", "1", "--noise", "0.05", "--results", str(results), "--quiet"]
    assert cli.main(["compare", "scenario=tiny,skip=1", "scenario=tiny", *single, "--out", str(out / "c")]) == 1
    text = capsys.readouterr().out
    assert "what differs: " in text and "ISA override none -> ATEN_CPU_CAPABILITY=avx2 ONEDNN_MAX_CPU_ISA=AVX2" in text
    assert any(line.lstrip().startswith("regressed") and "gemm bf16" in line and changed in line and "-> aten" in line
               for line in text.splitlines())
    assert changed in (out / "c" / "index.html").read_text()
    assert cli.main(["compare", "scenario=tiny,skip=1", "scenario=tiny", *single, "--out", str(out / "c"),
                     "--json"]) == 1
    cases = validated(json.loads(capsys.readouterr().out), "compare")["cases"]
    bf16 = [c for c in cases if c["precision"] == "bf16"]
    assert bf16 and all(any(e.startswith(changed) and e.endswith(" -> aten") for e in c["explanation"]) for c in bf16)
    fp32 = [c for c in cases if c["precision"] == "fp32"]
    assert not any(e.startswith("kernel changed") for c in fp32 for e in c["explanation"])  # MKL both times
    assert cli.main(["env-diff", "scenario=tiny,skip=1", "scenario=tiny", "--results", str(results)]) == 0
    # one line per precision whose GEMM left oneDNN under the override: bf16 here (the skip above),
    # fp16 only where oneDNN runs it natively (AVX512-FP16 or AMX-FP16; not on an AMD Zen 4)
    assert sum(changed in line for line in capsys.readouterr().out.splitlines()) == len(native_onednn_dtypes())
    assert cli.main(["history", "tiny", *single, "--out", str(out / "h")]) == 0
    assert changed in capsys.readouterr().out and changed in (out / "h" / "index.html").read_text()
    assert cli.main(["history", "tiny", *single, "--out", str(out / "h"), "--json"]) == 0
    points = [cp for s in validated(json.loads(capsys.readouterr().out), "history")["series"] for cp in s["change_points"]]
    assert any(e.startswith(changed) for cp in points for e in cp["explanation"])


def test_a_gpu_is_looked_at_only_where_cupti_lets_go_after_the_profile(monkeypatch):
    """A profiler that leaves CUPTI attached slows every later case of the process by 10-20%
    (pytorch/pytorch#144455): no look there, and the note says why."""
    lingers = kernels.profiler_lingers
    assert lingers("2.13.0+cu130", "13.0", {}, False) is None
    assert "torch 2.6.0+cu124 leaves CUPTI attached" in lingers("2.6.0+cu124", "12.4", {}, False)
    assert "CUDA 12.4" in lingers("2.8.0+cu124", "12.4", {}, False)
    assert lingers("2.13.0+cu130", "13.0", {"TEARDOWN_CUPTI": "0"}, False)
    assert lingers("2.13.0+cu130", "13.0", {}, True)
    monkeypatch.setattr(torch.version, "cuda", "12.4")
    monkeypatch.setattr(attribution, "_profiled", lambda *a, **k: pytest.fail("no profile where CUPTI lingers"))
    out = attribution.untimed(SimpleNamespace(split_kernels=True, fn=lambda: None), lambda: None, torch.device("cuda"),
                              SimpleNamespace(median_ms=1.0, case_cap_s=30.0))
    assert out["kernels"] is None and out["kernel_note"].startswith("not looked at: CUDA 12.4")
