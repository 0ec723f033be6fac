"""Cases in processes of their own (`suite.measure.executors.process`, `--isolate`, and
`cuda_worker`): a case that segfaults, exits or hangs in its own process costs that case only; the
parent records why, kills a hung case's whole process group, and the run goes on."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import pytest
import torch

from suite import cli
from suite.measure.executors import cuda_worker, protocol
from suite.measure.executors.process import Process
from suite.scenario import plan
from suite.results import store
from tests.conftest import quick_toml
from tests.sticky_workload import STICKY_ERROR
from suite.measure.timing import StopRule

ROOT = Path(__file__).resolve().parent.parent
META = {"run_id": "20260101T120000Z-abcdef", "device": "cpu", "device_name": "test cpu",
        "torch_version": torch.__version__}
FAST = StopRule(warmup_s=0.0, min_samples=3, budget_s=0.02)

# A child that behaves like `python -m suite.measure.executors.child`, except for the modes a test asks for.
CHILD = """
import os, signal, subprocess, sys, time
sys.path.insert(0, ROOT)
mode = sys.argv[1]
if mode == "hang":  # a deadlock, with a helper process of its own (like a compile worker)
    helper = subprocess.Popen(["sleep", "300"])
    open(sys.argv[2], "w").write(str(helper.pid))
    time.sleep(300)
if mode == "exit":
    print("boom: the backend refused to start", file=sys.stderr)
    sys.exit(3)
if mode == "segv":  # a segfault inside the workload, after the case has started
    from suite.scenario import registry

    class Segfault:
        def prepare(self, case, precision, device):
            os.kill(os.getpid(), signal.SIGSEGV)

    real = registry.workload
    registry.workload = lambda name: Segfault() if name == "segfault" else real(name)
from suite.measure.executors import child, protocol
from suite.core import jsonl
if mode == "abort_at_exit":  # the case is done and its record sent, then a library's teardown crashes
    from suite.measure import record as records
    case = protocol.unit_of(jsonl.decode(sys.stdin.buffer.read())).cases[0]
    record = records.started(case, {}).replace(status="ok", n_samples=3, time_ms_median=1.0)
    sys.stdout.buffer.write(jsonl.encode(record))
    sys.stdout.flush()
    os.abort()
sys.exit(child.main())
"""


def case(workload="gemm", precision="fp32", size=32) -> plan.Case:
    shape = (size, size, size) if workload == "gemm" else (None, None, None)
    return plan.Case("iso", workload, precision, "fp32", *shape, params={}, seed=0, timing=FAST, device="cpu")


@pytest.fixture
def child(tmp_path):
    script = tmp_path / "child.py"
    script.write_text(CHILD.replace("ROOT", repr(str(ROOT)), 1))
    return lambda *args: [sys.executable, str(script), *map(str, args)]


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A killed child of an exited parent is reaped by init; until then it is a zombie.
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


def test_a_segfault_is_one_failed_case_and_its_setting_runs_each_case_again_alone(child):
    """A unit (a setting's cases, timed together in one process) that segfaults costs only the case
    that crashes: each case without a record runs again in a process of its own (`run_case`: a unit
    of one), and says so; the segfault alone is one failed case. One test: each process imports torch."""
    from suite.measure.executors.base import Unit

    ok, bad = case(), case("segfault", "bf16")
    records = Process("cpu", timeout_s=120, command=child("segv")).run_unit(Unit((ok, bad)), META)
    assert [r["case_id"] for r in records] == [ok.case_id, bad.case_id]
    assert records[0]["status"] == "ok" and records[0]["isolated"]
    assert records[0]["pairing_note"].startswith("the process timing its setting together crashed (signal 11")
    crashed = records[1]  # what the segfaulting case's own process left
    assert crashed["status"] == "failed" and crashed["reason"] == "crashed: signal 11 (SIGSEGV)"
    assert "Segmentation fault" in crashed["isolate_log"]  # faulthandler's dump from the child


def test_an_exit_without_a_record_names_the_status_and_last_log_line(child):
    record = Process("cpu", timeout_s=120, command=child("exit")).run_case(case(), META)
    assert record["status"] == "failed"
    assert record["reason"] == "crashed: exit status 3: boom: the backend refused to start"


def test_a_crash_after_the_record_was_sent_keeps_the_record(child):
    record = Process("cpu", timeout_s=120, command=child("abort_at_exit")).run_case(case(), META)
    assert record["status"] == "ok" and record["n_samples"] >= 3
    assert record["isolate_log"].startswith("exited with signal 6 (SIGABRT) after sending its record")


def test_a_hang_times_out_and_its_whole_process_group_is_killed(child, tmp_path):
    pid_file = tmp_path / "helper.pid"
    start = time.monotonic()
    record = Process("cpu", timeout_s=2, command=child("hang", pid_file)).run_case(case(), META)
    assert time.monotonic() - start < 60
    assert record["status"] == "failed" and record["reason"] == "timed out after 2 s"
    helper = int(pid_file.read_text())
    deadline = time.monotonic() + 10
    while alive(helper) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not alive(helper)


def test_isolate_from_the_command_line_with_the_runs_threads_setting(write_scenario, tmp_path):
    scenario = write_scenario(quick_toml("iso", """
        [[sweep]]
        workload = "gemm"
        precisions = ["bf16"]
        mkn = [[32, 64, 16]]
    """))
    results = tmp_path / "results"
    rc = cli.main(["run", str(scenario), "--results", str(results), "--no-report", "--quiet",
                   "--isolate", "--case-timeout", "300", "--threads", "1"])
    assert rc == 0
    (path,) = (results / "iso").glob("*.parquet")
    df = store.read_file(path)
    assert list(df["status"]) == ["ok"] and df["isolated"].all()
    assert (df["n_samples"] >= 3).all() and set(df["run_id"]) == {path.stem}
    # The child's numbers arrive intact: bf16 operands carry 8 significant bits (unit roundoff
    # 2^-9 ~ 2e-3), so the GEMM's relative error against float64 is a few 1e-3 (it was 2.9e-3).
    assert 1e-4 < df["rel_err"].iloc[0] < 2e-2
    # the isolated case ran with the run's threads setting (the child sets it, and records it)
    assert list(df["cpu_threads"]) == [1] and list(df["threads_setting"]) == [1]


def test_case_timeout_without_isolate_is_a_usage_error(write_scenario, capsys, tmp_path):
    from tests.conftest import TINY_SCENARIO

    scenario = write_scenario(TINY_SCENARIO)
    assert cli.main(["run", str(scenario), "--case-timeout", "5", "--no-report"]) == 2
    assert "--case-timeout needs --isolate" in capsys.readouterr().err
    # a CUDA run's cases run in a worker process: the limit applies there, without --isolate (here,
    # without CUDA, every case is skipped)
    cuda = write_scenario(TINY_SCENARIO.replace('device = "cpu"', 'device = "cuda"'), "cuda.toml")
    assert 'device = "cuda"' in cuda.read_text()
    assert cli.main(["run", str(cuda), "--case-timeout", "5", "--no-report", "--quiet",
                     "--results", str(tmp_path / "results")]) == 0
    for bad in ("0", "-1", "nan", "inf", "soon"):
        with pytest.raises(SystemExit) as stop:
            cli.main(["run", str(scenario), "--isolate", "--case-timeout", bad])
        assert stop.value.code == 2


# --- a persistent worker process for GPU runs, replaced after a sticky CUDA error ---------------

WORKER_CHILD = """
import sys
sys.path.insert(0, ROOT)
from suite.scenario import registry
registry.WORKLOADS["sticky"] = registry.WorkloadRecord("tests.sticky_workload:STICKY")
from suite.measure.executors import child
raise SystemExit(child.main(["--serve"]))
"""


def sticky_cases(*modes):
    return [plan.Case("w", "sticky", "fp32", None, None, None, None, params={"mode": mode, "i": i}, seed=0,
                      timing=FAST, device="cpu") for i, mode in enumerate(modes)]


def sticky_worker(**kw):
    return cuda_worker.CudaWorker("cpu", command=[sys.executable, "-c", WORKER_CHILD.replace("ROOT", repr(str(ROOT)))], **kw)


@pytest.fixture(scope="module")
def worker():
    """One worker for the module's worker tests (each worker started imports torch: 2.4 s of CPU),
    warm when a test begins (`warm`): each test counts the workers started during it."""
    made = sticky_worker()
    try:
        yield made
    finally:
        made.close()


def warm(worker) -> int:
    """Start the worker if none is up (an ok case on a fresh worker), then leave it as it was
    created (no limit but the cases' own); how many workers it has started."""
    worker.timeout_s = None
    (ok,) = sticky_cases("ok")
    assert worker.run_case(ok, META)["status"] == "ok"
    return worker.started


def test_a_sticky_cuda_error_costs_one_case_and_the_worker_is_replaced(worker):
    # first the cases that keep the worker, a warning and a failure, then the ones that cost it, a
    # sticky error and a crash
    before = warm(worker)
    kept = [worker.run_case(case, META) for case in sticky_cases("warn", "ok", "fail", "ok")]
    started_before_the_sticky_error = worker.started - before
    records = [worker.run_case(case, META) for case in sticky_cases("ok", "poison", "ok", "segv", "ok")]
    # warnings of a case reach its record, and a failed case keeps its last lines
    assert [r["status"] for r in kept] == ["ok", "ok", "failed", "ok"]
    warned = kept[0]["worker_warnings"].splitlines()
    assert any("UserWarning: cuBLAS fell back to a slower kernel" in w for w in warned)
    assert "Failed to load /site-packages/torchao/_C.so: undefined symbol" in warned
    assert kept[1]["worker_warnings"] is None and kept[3]["worker_warnings"] is None  # each case its own
    assert "the kernel said: no" in kept[2]["isolate_log"] and "ValueError" in kept[2]["reason"]
    assert started_before_the_sticky_error == 0  # a failed case is no reason to replace the worker

    assert [r["status"] for r in records] == ["ok", "failed", "ok", "failed", "ok"]
    assert STICKY_ERROR in records[1]["reason"] and records[1]["worker_replaced"]
    assert records[3]["reason"].startswith("crashed: signal 11 (SIGSEGV)")
    assert worker.started - before == 2  # one after the sticky error, one after the crash
    assert "Fatal Python error" in records[3]["isolate_log"]  # the crash's dump, read as it came
    assert cuda_worker.poisoned({"status": "failed", "reason": f"RuntimeError: {STICKY_ERROR}"}, torch.device("cpu"))
    assert not cuda_worker.poisoned({"status": "failed", "reason": "RuntimeError: shapes cannot be multiplied"},
                                torch.device("cpu"))


def test_a_worker_that_dies_timing_a_setting_runs_each_case_again_alone(worker):
    from suite.measure.executors.base import Unit

    before = warm(worker)
    records = worker.run_unit(Unit(tuple(sticky_cases("ok", "segv", "ok"))), META)
    assert [r["status"] for r in records] == ["ok", "failed", "ok"]
    assert records[1]["reason"].startswith("crashed: signal 11 (SIGSEGV)")
    assert all("crashed (signal 11 (SIGSEGV)): run again alone" in r["pairing_note"] for r in records[::2])
    # the unit ran in the warm worker; after it died, one for the cases alone up to the segfault, one after
    assert worker.started - before == 2


def test_a_hung_case_times_out_its_worker_is_replaced_and_the_run_goes_on(worker):
    # the limit covers a worker's start too: the hang gets a short one once the worker is up, the
    # cases around it a long one (a busy machine may take seconds to import torch)
    ok, hang, after = sticky_cases("ok", "hang", "ok")
    before = warm(worker)
    worker.timeout_s = 120
    records = [worker.run_case(ok, META)]
    worker.timeout_s = 3
    start = time.monotonic()
    records.append(worker.run_case(hang, META))
    waited = time.monotonic() - start
    worker.timeout_s = 120
    records.append(worker.run_case(after, META))
    assert 3 <= waited < 3 + protocol.DRAIN_S + 5  # the limit, then the kill and the drain of its pipes
    assert [r["status"] for r in records] == ["ok", "failed", "ok"]
    assert records[1]["reason"] == "timed out after 3 s"
    assert "compiling the step" in records[1]["isolate_log"]  # what the worker said before it hung
    assert worker.started - before == 1  # the one after the hang


def test_the_default_limit_is_ten_case_caps_and_at_least_a_compiles_worth():
    (short,) = sticky_cases("ok")
    assert cuda_worker.case_timeout(short) == cuda_worker.MIN_CASE_TIMEOUT_S == 300.0  # 10 x 30 s (CUDA's default cap)
    long = plan.Case("w", "sticky", "fp32", None, None, None, None, params={"mode": "ok"}, seed=0,
                     timing=StopRule(case_cap_s=120.0), device="cpu")
    assert cuda_worker.case_timeout(long) == 1200.0


@pytest.mark.parametrize("line, warning", [
    ("/x/torch/cuda/__init__.py:1: UserWarning: TF32 is off", True),
    ("W0115 10:51:19.123000 1234 torch/_inductor/utils.py:1] Not enough SMs to use max_autotune_gemm", True),
    ("WARNING:torchao:Failed to load /x/_C.so", True),
    ("Falling back to the ATen kernel", True),
    ("[ok] 1/3 gemm bf16 1024x1024x1024", False),
])
def test_warning_lines_are_told_from_the_rest(line, warning):
    assert bool(cuda_worker.warning_lines([line])) is warning
