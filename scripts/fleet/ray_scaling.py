"""Wall time of a scenario under `--executor ray` on a local cluster of 1 CPU per node, one worker
per node, for each worker count given, trials alternating (so a change in the machine's load hits
every count alike). How docs/fleet.md's table was measured:

    python scripts/fleet/ray_scaling.py cpu --workers 1 2 --trials 3 --results /tmp/ray_scaling

Prints one JSON line per run: workers, wall seconds, cases per worker, the machine's load average.
Needs the `fleet` extra (Ray)."""

from __future__ import annotations

import argparse
import json
import os
import time

from ray.cluster_utils import Cluster

from suite import cli
from suite.results import store


def one(scenario: str, workers: int, results: str) -> dict:
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False})
    try:
        for _ in range(workers - 1):
            cluster.add_node(num_cpus=1)
        cluster.wait_for_nodes()
        load = os.getloadavg()[0]
        began = time.perf_counter()
        code = cli.main(["run", scenario, "--executor", "ray", "--address", cluster.address, "--results", results,
                         "--no-report", "--quiet"])
        wall = time.perf_counter() - began
    finally:
        cluster.shutdown()
    newest = max(store.run_files([results]), key=lambda p: p.stem)
    df = store.read_file(newest)
    per_worker = df.groupby("ray_node")["case_s"].agg(["count", "sum"])
    return {"workers": workers, "exit": code, "wall_s": round(wall, 1), "run": newest.stem,
            "cases_per_worker": per_worker["count"].tolist(), "case_s_per_worker": per_worker["sum"].round(1).tolist(),
            "load_before": round(load, 1), "load_after": round(os.getloadavg()[0], 1)}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("scenario")
    p.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    p.add_argument("--trials", type=int, default=1)
    p.add_argument("--results", required=True, help="a results folder of its own (not the repository's results/)")
    args = p.parse_args()
    for _ in range(args.trials):
        for workers in args.workers:
            print(json.dumps(one(args.scenario, workers, args.results)), flush=True)


if __name__ == "__main__":
    main()
