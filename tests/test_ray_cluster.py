"""The Ray executor (`suite.measure.executors.ray_cluster`) on a real local Ray cluster of two nodes (one CPU each, so one worker each):
a worker killed midway costs nothing (its case runs again elsewhere), a driver stopped midway
resumes from its journal, and the result is one complete run with every case exactly once."""

from __future__ import annotations

import os
import signal
import threading
import time
import types

import pytest

from suite import cli
from suite.core.errors import UserError
from suite.measure.executors import ray_cluster
from suite.results import journal, store
from tests.conftest import quick_toml
from suite.scenario import plan, spec

cluster_utils = pytest.importorskip("ray.cluster_utils", reason="Ray is the optional extra `fleet`")
psutil = pytest.importorskip("psutil")  # a dependency of Ray

# Six settings of two cases, each case at least 0.15 s (its warm-up): the killed worker's case runs
# again within the first five records, so seven or more cases are left when the driver is stopped.
SCENARIO = quick_toml("rayfleet", """
[[sweep]]
workload = "gemm"
precisions = ["fp32", "bf16"]
shapes = "square"
sizes = [16, 24, 32, 40, 48, 56]
""", baseline="fp32", warmup_s=0.15, min_samples=2, budget_s=0.01)


@pytest.fixture(scope="module")
def cluster():
    """Two Ray nodes on this machine, started once for the module (the cost is Ray's start-up)."""
    made = cluster_utils.Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False})
    try:
        made.add_node(num_cpus=1)
        made.wait_for_nodes()
        yield made
    finally:
        made.shutdown()


def workers() -> list:
    """This test's Ray worker processes that run cases (Ray names them ray::_Worker...)."""
    found = []
    for proc in psutil.Process().children(recursive=True):
        try:
            if any("_Worker" in part for part in proc.cmdline()):
                found.append(proc)
        except psutil.Error:
            continue
    return found


def records_of(folder) -> list[dict]:
    return [r for path in (folder / store.JOURNAL_DIR).glob(f"*{store.JOURNAL_SUFFIX}") for r in journal.read(path).records]


def kill_a_worker_then_stop_the_driver(folder, killed: list) -> None:
    """After the first record, SIGKILL one of the two workers; once the case it held has run again
    elsewhere and is journaled, SIGTERM the driver (this process), as a scheduler would."""
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not killed:
        if records_of(folder) and len(workers()) == 2:
            victim = workers()[0]
            os.kill(victim.pid, signal.SIGKILL)
            killed.append(victim.pid)
        time.sleep(0.01)
    while time.monotonic() < deadline:
        if any(r.get("worker_retries") for r in records_of(folder)):
            os.kill(os.getpid(), signal.SIGTERM)
            return
        time.sleep(0.01)


def test_a_worker_killed_then_the_driver_stopped_still_give_one_complete_run(cluster, write_scenario, tmp_path):
    scenario = write_scenario(SCENARIO, "rayfleet.toml")
    results = tmp_path / "results"
    folder = results / "rayfleet"
    command = ["run", str(scenario), "--executor", "ray", "--address", cluster.address, "--results", str(results),
               "--no-report", "--quiet"]
    killed: list = []
    killer = threading.Thread(target=kill_a_worker_then_stop_the_driver, args=(folder, killed))
    # The run's own SIGTERM handler is in place while it runs; this one only keeps a signal that came
    # too late (the run already over) from ending pytest.
    previous = signal.signal(signal.SIGTERM, lambda *_: None)
    killer.start()
    try:
        code = cli.main(command)
    finally:
        killer.join()
        signal.signal(signal.SIGTERM, previous)
    assert killed and code == 128 + signal.SIGTERM
    done = records_of(folder)
    assert any(r["worker_retries"] == 1 for r in done)  # the killed worker's case ran again, on a live worker
    assert 2 <= len(done) < 12 and len({r["case_id"] for r in done}) == len(done)
    [path] = (folder / store.JOURNAL_DIR).glob(f"*{store.JOURNAL_SUFFIX}")
    run_id = path.name[: -len(store.JOURNAL_SUFFIX)]

    # The driver restarted: only what its journal lacks runs, on the same cluster.
    assert cli.main([*command, "--resume", run_id]) == 0
    [stored] = folder.glob("*.parquet")  # one run, written once
    df = store.read_file(stored)
    assert stored.stem == run_id and not list(folder.glob(f"{store.JOURNAL_DIR}/*"))
    assert sorted(df["case_id"]) == sorted(c.case_id for c in plan.expand(spec.load(scenario)))  # none lost or twice
    assert {r["case_id"] for r in done} <= set(df["case_id"])
    assert (df["status"] == "ok").all() and (df["executor"] == "ray").all()
    assert df["ray_node"].notna().all() and df["host"].notna().all()  # each worker's own facts
    _, alive = psutil.wait_procs(workers(), timeout=30)  # the run's workers end with it (ray.kill is asynchronous)
    assert not alive


def test_without_ray_the_executor_says_how_to_get_it(monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "ray", None)
    with pytest.raises(UserError, match=r"pip install -e \.\[fleet\]"):
        ray_cluster._ray()


def test_a_case_whose_workers_all_died_is_a_failed_record_that_keeps_the_contract():
    from suite.results import store as results

    case = plan.expand(spec.resolve("cpu"))[0]
    executor = object.__new__(ray_cluster.RayCluster)  # no cluster: only the record is made here
    executor.run_level = {"run_id": "20261201T000000Z-abcdef", "executor": "ray"}
    record = executor.failed(case, ray_cluster.RETRIES, RuntimeError("worker exited\ndetail"))
    assert record["status"] == "failed" and record["worker_retries"] == ray_cluster.RETRIES
    assert record["reason"] == f"its Ray worker died {ray_cluster.RETRIES + 1} time(s) running it: RuntimeError: worker exited"
    results.check_records([record], "the failed record")  # raises where the record contract is broken


GPU_NODE, CPU_NODE = "a1" * 28, "b2" * 28  # Ray's node ids are hex strings


class FakeRay:
    """What `RayCluster` asks of Ray to place workers: a GPU node of 16 CPUs and 2 GPUs, a CPU node."""

    def __init__(self):
        self.started = []

    def cluster_resources(self):
        return {"CPU": 20.0, "GPU": 2.0}

    def nodes(self):
        return [{"NodeID": GPU_NODE, "Alive": True, "Resources": {"CPU": 16.0, "GPU": 2.0}},
                {"NodeID": CPU_NODE, "Alive": True, "Resources": {"CPU": 4.0}}]


def test_a_gpu_worker_holds_its_share_of_the_node_cpus_and_computes_with_them():
    # Ray sets a worker's OMP_NUM_THREADS to the CPUs it holds (torch follows it): a GPU worker with
    # num_cpus=1 ran torch on one thread. Each GPU's worker gets CPUs / GPUs of its node, and threads.
    executor = object.__new__(ray_cluster.RayCluster)
    executor.ray, executor.device_choice, executor.threads, executor.run_level = FakeRay(), "cuda", None, {}
    executor.run_here = None
    executor.workers = {}
    slots = executor._placements()
    assert [(s["num_gpus"], s["num_cpus"], s["scheduling_strategy"].node_id) for s in slots] == [
        (1, 8, GPU_NODE), (1, 8, GPU_NODE)]
    started = []

    class Actor:
        @staticmethod
        def options(**options):
            return types.SimpleNamespace(remote=lambda device, run_level, threads, run_here: started.append((options, threads)))

    executor.actor_class, executor.slots = Actor, slots
    executor.start(0)
    assert started[0][1] == 8  # torch.set_num_threads(8) in the worker: its records say cpu_threads 8
    executor.threads = 3
    executor.start(1)
    assert started[1][1] == 3  # the run's --threads wins
