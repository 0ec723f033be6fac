"""The Ray executor on a real local Ray cluster of two nodes (one CPU each, so one worker each):
a worker killed midway costs nothing, the run is one complete run with every case exactly once."""

from __future__ import annotations

import os
import signal
import threading
import time

import pytest

from suite import cli
from suite.errors import UserError
from suite.fleet import ray_executor
from suite.results import journal, store
from suite.scenario import plan, spec

cluster_utils = pytest.importorskip("ray.cluster_utils", reason="Ray is the optional extra `fleet`")
psutil = pytest.importorskip("psutil")  # a dependency of Ray

# Four settings of two cases, each case at least 0.3 s (its warm-up): the killer has time to act
# while both workers still hold cases.
SCENARIO = """
name = "rayfleet"

[defaults]
device = "cpu"
baseline = "fp32"

[defaults.timing]
warmup_s = 0.3
min_samples = 2
budget_s = 0.01

[[sweep]]
workload = "gemm"
precisions = ["fp32", "bf16"]
shapes = "square"
sizes = [16, 24, 32, 40]
"""


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


def kill_a_worker_after_the_first_record(folder, killed: list) -> None:
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not killed:
        for path in (folder / store.JOURNAL_DIR).glob(f"*{store.JOURNAL_SUFFIX}"):
            if journal.read(path).records and len(workers()) == 2:
                victim = workers()[0]
                os.kill(victim.pid, signal.SIGKILL)
                killed.append(victim.pid)
                return
        time.sleep(0.01)


def test_a_worker_killed_midway_still_gives_one_complete_run(cluster, write_scenario, tmp_path):
    scenario = write_scenario(SCENARIO, "rayfleet.toml")
    results = tmp_path / "results"
    killed: list = []
    killer = threading.Thread(target=kill_a_worker_after_the_first_record, args=(results / "rayfleet", killed))
    killer.start()
    try:
        code = cli.main(["run", str(scenario), "--executor", "ray", "--address", cluster.address,
                         "--results", str(results), "--no-report", "--quiet"])
    finally:
        killer.join()
    assert code == 0 and killed
    [path] = (results / "rayfleet").glob("*.parquet")  # one run, written once
    assert not list((results / "rayfleet").glob(f"{store.JOURNAL_DIR}/*"))
    df = store.read_file(path)
    planned = [c.case_id for c in plan.expand(spec.load(scenario))]
    assert sorted(df["case_id"]) == sorted(planned)  # nothing lost, nothing twice
    assert (df["status"] == "ok").all() and (df["executor"] == "ray").all()
    assert df["worker_retries"].sum() >= 1  # the killed worker's case ran again elsewhere
    assert df["ray_node"].notna().all() and df["host"].notna().all()  # each worker's own facts
    _, alive = psutil.wait_procs(workers(), timeout=30)  # the run's workers end with it (ray.kill is asynchronous)
    assert not alive


def test_without_ray_the_executor_says_how_to_get_it(monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "ray", None)
    with pytest.raises(UserError, match=r"pip install -e \.\[fleet\]"):
        ray_executor._ray()


def test_a_driver_stopped_midway_resumes_from_its_journal(cluster, write_scenario, tmp_path):
    """SIGTERM (a scheduler's kill) reaches the driver while workers hold cases: the records that
    arrived are in its journal, and `--resume` on the same cluster runs only the rest."""
    scenario = write_scenario(SCENARIO, "rayfleet.toml")
    results = tmp_path / "results"
    folder = results / "rayfleet"
    command = ["run", str(scenario), "--executor", "ray", "--address", cluster.address, "--results", str(results),
               "--no-report", "--quiet"]

    def stop_after_two_records():
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            for path in (folder / store.JOURNAL_DIR).glob(f"*{store.JOURNAL_SUFFIX}"):
                if len(journal.read(path).records) >= 2:
                    os.kill(os.getpid(), signal.SIGTERM)
                    return
            time.sleep(0.01)

    stopper = threading.Thread(target=stop_after_two_records)
    stopper.start()
    try:
        assert cli.main(command) == 128 + signal.SIGTERM
    finally:
        stopper.join()
    [path] = (folder / store.JOURNAL_DIR).glob(f"*{store.JOURNAL_SUFFIX}")
    done = {r["case_id"] for r in journal.read(path).records}
    run_id = path.name[: -len(store.JOURNAL_SUFFIX)]
    assert 2 <= len(done) < 8

    assert cli.main([*command, "--resume", run_id]) == 0
    df = store.read_file(folder / f"{run_id}.parquet")
    assert sorted(df["case_id"]) == sorted(c.case_id for c in plan.expand(spec.load(scenario)))
    assert done <= set(df["case_id"]) and (df["status"] == "ok").all()
