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


def test_the_code_hash_covers_the_stages_that_measure_and_no_other(tmp_path):
    """What decides a measurement lives in every stage up to `measure` (a precision's recipe, a
    workload's inputs, the scenario's timing rules), not in storing, analysing or reporting it."""
    import shutil

    from tests.test_layout import STAGES

    assert env.MEASURING == STAGES[:STAGES.index("results")]
    package = tmp_path / "suite"
    shutil.copytree(env.SUITE_DIR.parent, package, ignore=shutil.ignore_patterns("__pycache__"))
    assert env.code_hash(package) == env.code_hash()
    before = env.code_hash(package)
    for later in ("report/__init__.py", "analysis/regression/compare.py", "cli/run.py", "results/store.py", "pipeline.py"):
        with open(package / later, "a") as f:
            f.write("\n# a change that measures nothing\n")
    assert env.code_hash(package) == before
    for stage in env.MEASURING:
        source = sorted((package / stage).rglob("*.py"))[0]
        with open(source, "a") as f:
            f.write("\n# a change to what is measured\n")
        assert env.code_hash(package) != before, stage
        before = env.code_hash(package)
