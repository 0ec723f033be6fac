"""What a record says about the machine: the CPU's ISA and the flags that decide bf16/fp16 speed."""

from __future__ import annotations

from suite.measure import env


def test_cpu_flags_come_from_cpuinfo(tmp_path):
    info = tmp_path / "cpuinfo"
    info.write_text("processor\t: 0\nflags\t\t: fpu sse2 avx2 avx512f avx512_bf16 amx_tile amx_bf16\n\n"
                    "processor\t: 1\nflags\t\t: fpu sse2 avx2 avx512f avx512_bf16 amx_tile amx_bf16\n")
    assert env.cpu_flags(info) == ["avx2", "avx512f", "avx512_bf16", "amx_tile", "amx_bf16"]
    epyc = tmp_path / "epyc"
    epyc.write_text("flags\t\t: fpu sse2 avx avx2 fma\n")
    assert env.cpu_flags(epyc) == ["avx2"]
    assert env.cpu_flags(tmp_path / "missing") is None


def test_every_record_carries_the_cpu_facts(monkeypatch):
    import torch

    for name in env.ISA_ENV:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", "AVX2")
    meta = env.capture(torch.device("cpu"))
    assert meta["cpu_isa"] == torch.backends.cpu.get_cpu_capability()
    assert meta["cpu_isa_env"] == "ONEDNN_MAX_CPU_ISA=AVX2"
    assert meta["cpu_flags"] is None or set(meta["cpu_flags"].split()) <= set(env.CPU_FLAGS)
    assert meta["cpu_threads"] == torch.get_num_threads()
