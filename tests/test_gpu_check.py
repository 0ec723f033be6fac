"""scripts/gpu_check.sh on a machine without a GPU: it must degrade to skipped cases, still write
results and reports, and end with the summary table (it is the prepared check a GPU session runs)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pandas as pd
import pytest

from suite.scenario import plan, spec

REPO = Path(__file__).resolve().parent.parent
SCRIPT = REPO / "scripts" / "gpu_check.sh"
GPU_CHECK_SCENARIOS = sorted((REPO / "scenarios").glob("gpu_check_*.toml"))

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


@pytest.mark.parametrize("subset, full", [("gpu_check_h100", "h100"), ("gpu_check_h100_fp8", "h100_fp8")])
def test_gpu_check_subsets_are_cases_of_the_full_scenarios(subset, full):
    # same case ids: the check's records join with full runs of h100 / h100_fp8 (compare, regress)
    ids = {name: {c.case_id for c in plan.expand(spec.load(REPO / "scenarios" / f"{name}.toml"))}
           for name in (subset, full)}
    assert ids[subset] and ids[subset] <= ids[full]


@pytest.mark.skipif(shutil.which("bash") is None or shutil.which("tar") is None, reason="needs bash and tar")
def test_without_a_gpu_the_check_records_skips_and_ends_with_the_summary(tmp_path):
    if __import__("torch").cuda.is_available():
        pytest.skip("this test is about the no-GPU path")
    tiny = tmp_path / "tiny.toml"
    tiny.write_text(TINY_CPU)
    out = tmp_path / "out"
    env = {**os.environ, "PYTHON": sys.executable, "GPU_CHECK_SCENARIOS": f"gpu_check_fidelity {tiny}"}
    proc = subprocess.run(["bash", str(SCRIPT), "--pack", str(out)], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = proc.stdout.strip().splitlines()
    assert lines[0].startswith("gpu_check: python ") and "torch" in lines[0]  # versions first

    # the summary is last: its header, the skipped group, then the measured table's last row
    head = next(i for i, line in enumerate(lines) if line.startswith("== gpu_check summary:"))
    assert "1 ok" in lines[head] and "9 skipped" in lines[head]
    tail = "\n".join(lines[head:])
    assert "gpu_check_fidelity skipped no CUDA device" in " ".join(tail.split())
    assert lines[-1].split()[:3] == ["gpu_check_tiny", "32x32x32", "fp32"]

    with tarfile.open(out / "gpu_check.tar.gz") as tar:
        names = tar.getnames()
        tar.extractall(tmp_path / "unpacked", filter="data")
    assert any(n.startswith("results/gpu_check_fidelity/") and n.endswith(".parquet") for n in names)
    assert "reports/gpu_check_fidelity/index.html" in names and "reports/gpu_check_tiny/report.md" in names
    assert not (out / "results").exists()  # packed: only the archive is left in OUT_DIR
    skipped = pd.read_parquet(next((tmp_path / "unpacked/results/gpu_check_fidelity").glob("*.parquet")))
    assert len(skipped) == 9 and set(skipped["status"]) == {"skipped"}


def test_the_wheelhouse_is_resolved_binary_wheels_for_the_target_python():
    import importlib.util

    spec = importlib.util.spec_from_file_location("wheelhouse", REPO / "scripts" / "wheelhouse.py")
    wheelhouse = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(wheelhouse)
    cmd = wheelhouse.command(Path("/tmp/w"), python="3.12", torchao="0.18.0")
    assert cmd[1:4] == ["-m", "pip", "download"] and "--only-binary=:all:" in cmd
    assert cmd[cmd.index("--python-version") + 1] == "3.12" and "--no-deps" not in cmd  # pip resolves
    assert {"pydantic>=2.5", "jinja2>=3.1", "torchao==0.18.0"} <= set(cmd)
    assert not any(arg.startswith("torch") and not arg.startswith("torchao") for arg in cmd)  # the image has torch
    assert "torchao==" not in " ".join(wheelhouse.command(Path("/tmp/w"), torchao=""))
