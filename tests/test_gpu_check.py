"""scripts/gpu_check.sh on a machine without a GPU: it must degrade to skipped cases, still write
results and reports, and end with the summary (it is the prepared check a GPU session runs). Run
with every import traced, it must import nothing that neither the GPU image (scripts/wheelhouse.py
IMAGE) nor the wheelhouse provides: the check has one chance on a machine without network."""

from __future__ import annotations

import importlib.metadata as md
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pandas as pd
import pytest

from suite.measure.executors import protocol
from suite.measure.executors.base import Unit
from suite.core import jsonl
from suite.scenario import plan, spec
from suite.scenario.stop_rule import StopRule

REPO = Path(__file__).resolve().parent.parent
SCRIPT = REPO / "scripts" / "gpu_check.sh"
GPU_CHECK_SCENARIOS = sorted((REPO / "scenarios").glob("gpu_check_*.toml"))


def script_module(name: str):
    spec_ = importlib.util.spec_from_file_location(name, REPO / "scripts" / f"{name}.py")
    module = importlib.util.module_from_spec(spec_)
    spec_.loader.exec_module(module)
    return module


GPU_CHECK = script_module("gpu_check")
WHEELHOUSE = script_module("wheelhouse")

TINY_CPU = """
name = "gpu_check_tiny"
[defaults]
device = "cpu"
[defaults.timing]
warmup_s = 0.0
warmup_max_s = 0.1
min_samples = 3
budget_s = 0.02
[[sweep]]
workload = "gemm"
precisions = ["fp32"]
mkn = [[32, 32, 32]]
"""


@pytest.mark.parametrize("path", GPU_CHECK_SCENARIOS, ids=lambda p: p.stem)
def test_gpu_check_scenarios_are_valid_and_ask_for_cuda(path):
    scenario = spec.load(path)
    assert scenario.defaults.device == "cuda"  # without CUDA: every case skipped, nothing slow on a CPU


@pytest.mark.parametrize("subset, full", [("gpu_check_h100", "h100"), ("gpu_check_h100_fp8", "h100_fp8"),
                                          ("gpu_check_compiled", "h100_fp8")])
def test_gpu_check_subsets_are_cases_of_the_full_scenarios(subset, full):
    # same case ids: the check's records join with full runs of h100 / h100_fp8 (compare, regress)
    ids = {name: {c.case_id for c in plan.expand(spec.load(REPO / "scenarios" / f"{name}.toml"))}
           for name in (subset, full)}
    assert ids[subset] and ids[subset] <= ids[full]




def test_the_check_runs_every_gpu_check_scenario_within_its_budget(capsys):
    assert {f"scenarios/{name}.toml" for name in GPU_CHECK.DEFAULT_SCENARIOS} == {
        p.relative_to(REPO).as_posix() for p in GPU_CHECK_SCENARIOS}
    rows = GPU_CHECK.estimate(GPU_CHECK.DEFAULT_SCENARIOS)
    assert sum(r["estimated_s"] for r in rows) <= GPU_CHECK.BUDGET_S  # 6 minutes of an H100, by the prior
    assert GPU_CHECK.main(["plan"]) == 0
    first = capsys.readouterr().out.splitlines()[0]
    assert re.match(r"gpu_check: plan: \d+ cases in 6 scenarios, estimated \d+\.\d min of GPU time", first)


def test_the_wheelhouse_is_binary_wheels_for_the_target_python_without_a_torch():
    resolved, alone = WHEELHOUSE.commands(Path("/tmp/w"), python="3.12", torchao="0.18.0")
    for cmd in (resolved, alone):
        assert cmd[1:4] == ["-m", "pip", "download"] and "--only-binary=:all:" in cmd
        assert cmd[cmd.index("--python-version") + 1] == "3.12"
        assert not any(arg.startswith("torch") and arg.split("=")[0].rstrip("<>") in ("torch",) for arg in cmd)
    assert "--no-deps" not in resolved and {"pydantic>=2.5", "jinja2>=3.1", "rich>=13", "torchao==0.18.0"} <= set(resolved)
    assert "--no-deps" in alone and "torch-optimi>=0.2" in alone  # its one requirement, torch, is the image's
    assert "torchao==" not in " ".join(WHEELHOUSE.commands(Path("/tmp/w"), torchao="")[0])


# --- the check itself, run once with every import traced ----------------------------------------



@pytest.fixture(scope="module")
def check_run(tmp_path_factory):
    """scripts/gpu_check.sh --pack on the fidelity scenario (skipped: no CUDA) and a tiny CPU one
    (measured), with PYTHONPROFILEIMPORTTIME on in every Python it starts."""
    if shutil.which("bash") is None or shutil.which("tar") is None:
        pytest.skip("needs bash and tar")
    if __import__("torch").cuda.is_available():
        pytest.skip("this is about the no-GPU path")
    tmp = tmp_path_factory.mktemp("gpu_check")
    tiny = tmp / "tiny.toml"
    tiny.write_text(TINY_CPU)
    env = {**os.environ, "PYTHON": sys.executable, "GPU_CHECK_SCENARIOS": f"gpu_check_fidelity {tiny}",
           "PYTHONPROFILEIMPORTTIME": "1"}
    proc = subprocess.run(["bash", str(SCRIPT), "--pack", str(tmp / "out")], cwd=tmp, env=env,
                          capture_output=True, text=True, timeout=300)
    return proc, tmp


def test_without_a_gpu_the_check_records_skips_and_ends_with_the_summary(check_run):
    proc, tmp = check_run
    out = tmp / "out"
    assert proc.returncode == 0, proc.stdout + proc.stderr[-3000:]
    lines = proc.stdout.strip().splitlines()
    assert lines[0].startswith("gpu_check: plan: 10 cases in 2 scenarios, estimated ")  # the estimate first
    probe = [line for line in lines if line.startswith("gpu_check: probe: ")]
    assert probe[0].startswith("gpu_check: probe: python ") and "torch" in probe[0] and "cuBLAS" in probe[0]
    assert any("TF32 flags as tf32 sets them" in line and "float32_matmul_precision=high" in line for line in probe)
    assert any("torchao" in line and ("imported" in line or "not importable" in line) for line in probe)

    # the summary is last: its header, the skipped group, then the measured table
    head = next(i for i, line in enumerate(lines) if line.startswith("== gpu_check summary:"))
    assert "1 ok" in lines[head] and "9 skipped" in lines[head]
    tail = "\n".join(lines[head:])
    assert "gpu_check_fidelity skipped no CUDA device" in " ".join(tail.split())
    assert lines[-1].split()[:3] == ["gpu_check_tiny", "32x32x32", "fp32"]
    assert (out / "gpu_check_summary.txt").read_text().strip() == tail.strip()

    # one archive per scenario, written as each ended
    assert sorted(p.name for p in out.iterdir()) == ["gpu_check_fidelity.tar.gz", "gpu_check_summary.txt",
                                                     "gpu_check_tiny.tar.gz"]
    with tarfile.open(out / "gpu_check_fidelity.tar.gz") as tar:
        names = tar.getnames()
        tar.extractall(tmp / "unpacked", filter="data")
    assert any(n.startswith("results/gpu_check_fidelity/") and n.endswith(".parquet") for n in names)
    assert "reports/gpu_check_fidelity/index.html" in names and not any("tiny" in n for n in names)
    skipped = pd.read_parquet(next((tmp / "unpacked/results/gpu_check_fidelity").glob("*.parquet")))
    assert len(skipped) == 9 and set(skipped["status"]) == {"skipped"}


def cpu_stand_ins() -> list[plan.Case]:
    """One CPU case per (workload, precision, parameters) of the check, shrunk to run in a second:
    the code each CUDA case runs in the check's worker, run on the CPU. Compilation is left out
    (inductor on a CPU takes minutes; it is torch's, which the image has)."""
    quick = {"warmup_s": 0.0, "warmup_max_s": 0.1, "min_samples": 2, "budget_s": 0.01}
    small_model = {"size": "tiny", "n_layer": 1, "d_model": 32, "vocab": 128, "seq_len": 16, "batch": 2,
                   "steps": 2, "warmup_steps": 0}
    found = {}
    for name in GPU_CHECK.DEFAULT_SCENARIOS:
        for case in plan.expand(spec.load(REPO / "scenarios" / f"{name}.toml")):
            raw = {**case.params, **({"compile": False, "compile_step": False})}
            if case.workload == "train_step":
                raw.update(small_model)
            shape = (32, 32, 32) if case.m is not None else (None, None, None)
            if case.workload == "grouped_gemm":  # rows in whole blocks of 32 (MXFP8), one an expert
                raw["align"] = 32
                shape = (32 * raw.get("experts", 8), 32, 32)
            params = plan.identity_params(case.workload, case.precision, raw)
            key = (case.workload, case.precision, json.dumps(params, sort_keys=True))
            found.setdefault(key, plan.Case("stand_in", case.workload, case.precision, case.precision, *shape,
                                            params=params, seed=0, device="cpu",
                                            timing=StopRule(**{**case.timing.model_dump(), **quick})))
    return list(found.values())


@pytest.fixture(scope="module")
def worker_run(tmp_path_factory):
    """The check's cases, shrunk, through the CUDA worker's own loop (`child --serve`) on the CPU,
    with every import traced: (records, the worker's stderr)."""
    meta = {"run_id": "20261201T000000Z-abcdef", "device": "cpu", "device_name": "cpu", "torch_version": "x"}
    requests = b"".join(protocol.request(Unit((case,)), "cpu", meta) for case in cpu_stand_ins())
    env = {**os.environ, "PYTHONPROFILEIMPORTTIME": "1", "PYTHONPATH": str(REPO)}
    proc = subprocess.run([sys.executable, "-m", "suite.measure.executors.child", "--serve"], input=requests, env=env,
                          cwd=tmp_path_factory.mktemp("worker"), capture_output=True, timeout=600)
    assert proc.returncode == 0, proc.stderr.decode(errors="replace")[-3000:]
    return [jsonl.decode(line) for line in proc.stdout.splitlines()], proc.stderr.decode(errors="replace")


def imported(stderr: str) -> set[str]:
    """Top-level names of the modules the suite's own code imported, as `-X importtime` traced them:
    those nested under a `suite` module's import, and those imported at run time (no enclosing
    import: a function's lazy import, e.g. the table's `rich`). What a library imports inside its own
    import is the library's business: a requirement of it (provided with it) or optional (guarded).
    importtime prints a line for a failed attempt too: a module not importable here did not load."""
    rows = []
    for line in stderr.splitlines():
        if line.startswith("import time:") and "|" in line:
            field = line.rsplit("|", 1)[1]
            name = field.strip()
            if name and name != "imported package":
                rows.append(((len(field) - len(field.lstrip()) - 1) // 2, name))
    names = set()
    for i, (level, name) in enumerate(rows):
        # children are printed before their parent: the parent is the next line one level up
        parent = next((n for lv, n in rows[i + 1:] if lv < level), None) if level else None
        if parent is None or parent.split(".")[0] == "suite":
            names.add(name.split(".")[0])
    return {n for n in names if n in sys.modules or importlib.util.find_spec(n) is not None}


def _canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def closure(names, leave_out=()) -> set[str]:
    """The distributions `names` are with everything they require (as installed here), but those
    left out (what the image is said to lack) and their requirements reached only through them."""
    from packaging.requirements import Requirement

    left_out = {_canonical(n) for n in leave_out}
    seen: set[str] = set()
    todo = [_canonical(n) for n in names]
    while todo:
        name = todo.pop()
        if name in seen or name in left_out:
            continue
        seen.add(name)
        try:
            needs = md.requires(name) or []
        except md.PackageNotFoundError:
            continue
        for text in needs:
            need = Requirement(text)
            if need.marker is None or need.marker.evaluate({"extra": ""}):
                todo.append(_canonical(need.name))
    return seen


def unprovided(modules: set[str]) -> dict[str, list[str]]:
    """module -> its distributions, for each module neither the image nor the wheelhouse provides."""
    image = closure(WHEELHOUSE.IMAGE, WHEELHOUSE.NOT_ON_IMAGE)
    carried = closure([re.split(r"[<>=!~ ]", r)[0] for r in WHEELHOUSE.requirements()])
    carried |= {_canonical(re.split(r"[<>=!~ ]", r)[0]) for r in WHEELHOUSE.WITHOUT_DEPS}
    owners = md.packages_distributions()
    missing = {}
    for module in sorted(modules - set(sys.stdlib_module_names) - {"suite", "__main__"}):
        dists = {_canonical(d) for d in owners.get(module, [])}
        if not dists & (image | carried):
            missing[module] = sorted(dists) or ["(no installed distribution)"]
    return missing


def test_the_check_runs_its_cases_code_on_the_cpu_stand_ins(worker_run):
    records, _ = worker_run
    assert len(records) == len(cpu_stand_ins()) >= 15
    for r in records:  # ran, or skipped for want of CUDA or Transformer Engine (which no GPU image has here)
        assert r["status"] == "ok" or ("CUDA" in r["reason"] or "transformer_engine" in r["reason"]), r


def test_the_offline_check_imports_only_what_the_image_or_the_wheelhouse_provides(check_run, worker_run):
    proc, _ = check_run
    modules = imported(proc.stderr) | imported(worker_run[1])
    assert {"torch", "pandas", "pydantic", "jinja2", "torchao", "optimi"} <= modules  # the trace saw them
    assert unprovided(modules) == {}


def test_the_summary_shows_the_anchors_the_warnings_and_energy_where_measured():
    def row(precision, **kw):
        return {"scenario": "s", "workload": "gemm", "precision": precision, "status": "ok", "m": 8192, "k": 8192,
                "n": 8192, "params": "{}", "tflops": None, "peak_tflops": 989.5, "speedup": None, "baseline": "bf16",
                "case_id": precision, "baseline_case_id": "bf16", "joules_per_tflop": None, "worker_warnings": None,
                **kw}

    fallback = "W1201 torch/_inductor/utils.py:1] Not enough SMs to use max_autotune_gemm mode"
    df = pd.DataFrame([
        row("bf16", tflops=790.0, speedup=1.0, joules_per_tflop=0.9, worker_warnings=fallback),
        row("fp8_rowwise", tflops=1500.0, speedup=1.9, joules_per_tflop=0.5,
            params='{"quantize": "pre", "use_fast_accum": true}', worker_warnings=fallback),
        row("fp8_tensorwise", tflops=1600.0, speedup=2.0),  # no energy reading: no energy line
        row("bf16", workload="fidelity", m=1024, k=1024, n=1024, case_id="f", ref_harness="triton.testing.do_bench",
            fidelity_ratio=1.01),
    ])
    anchors = GPU_CHECK.anchor_lines(df)
    assert anchors[0] == "bf16 GEMM 8192^3: 790 TFLOP/s = 80% of the vendor peak 989.5 (anchor: near 80%)"
    assert any(line.startswith("fp8_rowwise GEMM 8192^3") and "1.9x bf16" in line for line in anchors)
    assert anchors[-1] == "suite / do_bench time: median 1.010 over 1 GEMMs (anchor: within 2%)"
    assert GPU_CHECK.warning_lines(df) == [f"[2 cases] {fallback}"]
    assert GPU_CHECK.energy_lines(df) == [
        "8192x8192x8192 fp8_rowwise: 0.5 J/TFLOP (bf16 0.9 J/TFLOP: 0.556x of it)"]
    assert GPU_CHECK.energy_lines(df.drop(columns=["joules_per_tflop"])) == []  # absent: nothing shown
