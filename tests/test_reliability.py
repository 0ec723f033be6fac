"""One bad case never costs the others: an impossible allocation, an out-of-memory error, a shape
error, NaN output or a missing optional backend becomes that case's row and the run goes on with its
memory back. Two runs into one results folder at once both end whole. Reports escape what scenarios
and records put in them. A scenario asking for CUDA without it is recorded, not lost."""

from __future__ import annotations

import os
import subprocess
import sys
import weakref
from pathlib import Path

import pytest
import torch

from suite import cli, pipeline
from suite.scenario import plan, registry, spec
from suite.measure import inprocess
from suite.results import store
from suite.core.accuracy import error_metrics
from suite.measure.timing import CpuClock, StopRule
from suite.workloads.base import Prepared
from tests.conftest import TINY_SCENARIO, quick_toml, run_cases

ROOT = Path(__file__).resolve().parent.parent
CPU = torch.device("cpu")
META = {"run_id": "20260101T120000Z-abcdef", "device": "cpu", "device_name": "test cpu",
        "torch_version": torch.__version__}
FAST = StopRule(warmup_s=0.0, min_samples=3, budget_s=0.02)


class Trouble:
    """A workload that fails the way real ones do, chosen by `params.mode`; keeps a weak reference
    to the tensor it allocated so a test can see whether the runner let go of it."""

    name = "trouble"
    allocated: weakref.ref | None = None

    def prepare(self, case, precision, device):
        mode = case.params["mode"]
        if mode == "missing_backend":
            import transformer_engine_that_is_not_installed  # noqa: F401
        if mode == "broken_suite_import":
            raise ImportError("cannot import name 'x' from 'suite.nowhere'", name="suite.nowhere")
        big = torch.ones(64, 64, device=device)
        Trouble.allocated = weakref.ref(big)
        if mode == "oom":
            # What the CUDA caching allocator raises; constructed here so the path runs on a CPU.
            raise torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 80.00 GiB")
        if mode == "shape":
            return Prepared(lambda: big @ torch.ones(3, 3), 1.0, 1.0, lambda: {})
        if mode == "nan":
            def check():
                return error_metrics(big * float("nan"), big.double())
            return Prepared(lambda: big, 1.0, 1.0, check)
        return Prepared(lambda: big @ big, 2.0 * 64**3, 3 * 4 * 64**2, lambda: error_metrics(big @ big, big.double() @ big.double()))


TROUBLE = Trouble()


def trouble_case(mode: str) -> plan.Case:
    return plan.Case("rel", "trouble", "fp32", None, None, None, None, params={"mode": mode}, seed=0,
                     timing=FAST, device="cpu")


@pytest.fixture
def trouble(monkeypatch):
    monkeypatch.setitem(registry.WORKLOADS, "trouble", registry.WorkloadRecord(f"{__name__}:TROUBLE"))
    Trouble.allocated = None


@pytest.mark.parametrize("mode, status, reason", [
    ("oom", "failed", "out of memory: OutOfMemoryError: CUDA out of memory. Tried to allocate 80.00 GiB"),
    ("shape", "failed", "RuntimeError: mat1 and mat2 shapes cannot be multiplied (64x64 and 3x3)"),
    ("nan", "failed", "output has 4096 non-finite values out of 4096"),
    ("missing_backend", "skipped", "optional dependency not importable: ModuleNotFoundError: "
                                   "No module named 'transformer_engine_that_is_not_installed'"),
    ("broken_suite_import", "failed", "ImportError: cannot import name 'x' from 'suite.nowhere'"),
])
def test_each_kind_of_failure_is_one_row_and_the_memory_is_released(trouble, mode, status, reason):
    cases = [trouble_case(mode), trouble_case("ok")]
    first, second = run_cases(cases, META)
    assert (first["status"], first["reason"]) == (status, reason)
    assert second["status"] == "ok" and second["rel_err"] < 1e-6
    # Nothing of the failed case is still referenced once the run has moved on.
    record = inprocess.run_case(trouble_case(mode), CPU, CpuClock(), META)
    assert record["status"] == status
    if mode not in ("missing_backend", "broken_suite_import"):
        assert Trouble.allocated is not None and Trouble.allocated() is None


IMPOSSIBLE = quick_toml("impossible", """
[[sweep]]
workload = "gemm"
precisions = ["fp32", "bf16"]
# The middle shape needs 4e14 bytes per operand: more than any address space, so the allocation
# fails at once whatever the machine's overcommit policy.
mkn = [[32, 32, 32], [10000000, 10000000, 10000000], [64, 64, 64]]
""", baseline="fp32")


def test_an_impossible_allocation_fails_one_case_and_the_others_are_ok(write_scenario, tmp_path, capsys):
    scenario = write_scenario(IMPOSSIBLE)
    rc = cli.main(["run", str(scenario), "--results", str(tmp_path / "results"), "--no-report", "--quiet"])
    assert rc == 1  # some case failed
    assert "2 case(s) failed" in capsys.readouterr().err
    (path,) = (tmp_path / "results" / "impossible").glob("*.parquet")
    df = store.read_file(path)
    assert len(df) == 6
    huge = df[df["m"] == 10_000_000]
    assert list(huge["status"]) == ["failed", "failed"]
    assert huge["reason"].str.contains("allocate").all()
    assert list(df[df["m"] != 10_000_000]["status"]) == ["ok"] * 4


def test_two_runs_into_one_results_folder_at_once_both_end_whole(write_scenario, tmp_path):
    scenario = write_scenario(TINY_SCENARIO.replace('["fp32", "tf32", "bf16", "fp16"]', '["fp32", "bf16"]'), "tiny.toml")
    results = tmp_path / "results"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    command = [sys.executable, "-m", "suite", "run", str(scenario), "--results", str(results), "--no-report", "--quiet"]
    runs = [subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
            for _ in range(2)]
    for proc in runs:
        _, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, err
    files = sorted((results / "tiny").iterdir())
    assert len(files) == 2 and all(f.suffix == ".parquet" for f in files)  # no journal or temp left
    expected = [c.case_id for c in plan.expand(spec.load(scenario))]
    frames = [store.read_file(f) for f in files]
    assert frames[0]["run_id"].iloc[0] != frames[1]["run_id"].iloc[0]
    for f, df in zip(files, frames):
        assert list(df["case_id"]) == expected and set(df["run_id"]) == {f.stem}
    both = store.read([results])
    assert len(both) == 2 * len(expected)


def test_interleaved_runs_in_one_folder_keep_their_own_records(tmp_path):
    """The same as above, step by step: two journals side by side, appended and finished in turn."""
    ids = [store.new_run_id() for _ in range(2)]
    journals = [store.start_run(tmp_path, "s", run_id, {"plan": ["a", "b"]}) for run_id in ids]
    for case_id in ("a", "b"):
        for run_id, run in zip(ids, journals):
            run.append({"case_id": case_id, "run_id": run_id, "scenario": "s", "workload": "gemm",
                            "precision": "fp32", "status": "ok", "time_ms_median": 1.0})
    paths = [store.finish_run(run, tmp_path, ["a", "b"]).path for run in reversed(journals)]
    for run_id, path in zip(reversed(ids), paths):
        df = store.read_file(path)
        assert list(df["case_id"]) == ["a", "b"] and set(df["run_id"]) == {run_id}


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without CUDA")
def test_cuda_scenario_without_cuda_records_every_case_as_skipped(tiny_scenario, tmp_path):
    result = pipeline.run(pipeline.RunRequest(tiny_scenario, tmp_path / "results", tmp_path / "reports", device="cuda",
                                   progress=False))
    df = store.read_file(result.path)
    assert len(df) == len(plan.expand(tiny_scenario))
    assert set(df["status"]) == {"skipped"}
    assert set(df["reason"]) == {"no CUDA device: torch.cuda.is_available() is False"}
    assert set(df["device"]) == {"cuda"} and df["device_name"].isna().all()
    html = (tmp_path / "reports" / "tiny" / "index.html").read_text()
    assert "no CUDA device" in html


def test_strings_from_the_scenario_and_the_records_are_escaped_in_the_report(write_scenario, tmp_path):
    scenario = spec.load(write_scenario(quick_toml("xss", """
        [[sweep]]
        workload = "linear"
        precisions = ["fp32", "tf32"]
        mkn = [[32, 32, 32]]
        params = { compile_backend = ["<script>alert('param')</script>", "inductor"] }
    """, description="<script>alert('description')</script>")))
    result = pipeline.run(pipeline.RunRequest(scenario, tmp_path / "results", None, progress=False))
    df = store.read_file(result.path)
    df.loc[df["status"] == "skipped", "reason"] = "<img src=x onerror=alert('reason')>"
    from suite import report

    report.render(df, tmp_path / "report")
    html = (tmp_path / "report" / "index.html").read_text()
    ours = "<script>\n// A click on a heading sorts the table"  # the page's own table sorter, once
    assert html.count("<script") == html.count(ours) == 1 and "<img src=x" not in html
    assert "&lt;script&gt;alert(&#39;param&#39;)&lt;/script&gt;" in html
    assert "&lt;img src=x onerror=alert(&#39;reason&#39;)&gt;" in html
