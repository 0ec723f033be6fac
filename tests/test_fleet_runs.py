"""A scenario as shards in separate processes, as a scheduler runs it: a shard killed midway and
started again resumes its own run (until then the report names it), and merged, the shards are one
run with exactly the cases of an unsharded run."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path


from suite import cli
from suite.analysis.frame import derived
from suite.results import groups, journal, store
from tests.conftest import quick_toml

ROOT = Path(__file__).resolve().parent.parent

# Six settings (fp32 and bf16 at one size each): two per shard of three. A setting's cases are timed
# together and journaled together, so a shard is caught midway between its settings.
FAST = quick_toml("fleet", """
[[sweep]]
workload = "gemm"
precisions = ["fp32", "bf16"]
shapes = "square"
sizes = [16, 24, 32, 40, 48, 56]
""", baseline="fp32", min_samples=2, budget_s=0.01)
# The same cases with a 0.15 s warm-up each, so a shard can be caught between its two settings: a
# setting (two cases) then lasts 0.3 s or more, against the test's 10 ms polling of the journal.
SLOW = FAST.replace("warmup_s = 0.0", "warmup_s = 0.15")


def shard_command(scenario: Path, results: Path, k: int, *extra: str) -> list[str]:
    return [sys.executable, "-m", "suite", "run", str(scenario), "--shard", f"{k}/3", "--group", "nightly",
            "--results", str(results), "--no-report", "--quiet", *extra]


def start(command: list[str]) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_three_shards_in_three_processes_one_killed_and_resumed_are_one_unsharded_run(write_scenario, tmp_path):
    scenario = write_scenario(SLOW, "fleet.toml")
    results = tmp_path / "results"
    folder = results / "fleet"
    procs = [start(shard_command(scenario, results, k)) for k in range(3)]
    path = None
    while procs[1].poll() is None and path is None:  # shard 1 between its two settings
        for candidate in (folder / store.JOURNAL_DIR).glob(f"*{store.JOURNAL_SUFFIX}"):
            contents = journal.read(candidate)
            head = contents.header or {}
            if head.get("shard") == [1, 3] and 0 < len(contents.records) < len(head.get("plan") or []):
                path = candidate
        time.sleep(0.01)
    assert path is not None, procs[1].communicate()
    procs[1].send_signal(signal.SIGKILL)
    for k in (0, 2):
        assert procs[k].wait(timeout=120) == 0, procs[k].communicate()
    procs[1].communicate()
    run_id = path.name[: -len(store.JOURNAL_SUFFIX)]
    assert len(list(folder.glob("*.parquet"))) == 2  # each finished shard its own file

    partial = store.read([folder], unfinished=True)
    [line] = groups.shard_lines(partial)
    assert "of 3 shards" in line and "shard 1 stopped midway" in line and f"--resume {run_id}" in line
    assert partial["run_id"].nunique() == 1

    # Started again as its scheduler would, with the same command: it finds its journal.
    assert cli.main(shard_command(scenario, results, 1)[3:]) == 0
    assert (folder / f"{run_id}.parquet").exists()
    merged = store.read([folder])
    # One unsharded run of the same cases (case ids do not depend on the timing rule).
    whole = tmp_path / "whole"
    assert cli.main(["run", str(write_scenario(FAST, "whole.toml")), "--results", str(whole), "--no-report",
                     "--quiet"]) == 0
    assert sorted(merged["case_id"]) == sorted(store.read([whole / "fleet"])["case_id"])  # each exactly once
    assert merged["run_id"].nunique() == 1 and groups.shard_lines(merged) == []  # one run, no shard missing
    assert sorted(merged["shard_index"].unique()) == [0, 1, 2]
    assert merged["run_group"].str.startswith("nightly.").all() and (merged["status"] == "ok").all()
    assert derived.with_speedups(merged)["speedup"].notna().all()  # each recipe met its baseline
    # Once more: complete, so nothing runs again and no file is added.
    assert cli.main(shard_command(scenario, results, 1)[3:]) == 0
    assert len(list(folder.glob("*.parquet"))) == 3


def test_a_shard_needs_a_group_and_resumes_as_what_it_was(write_scenario, tmp_path, monkeypatch, capsys):
    for name in ("MPSUITE_RUN_GROUP", "SLURM_ARRAY_JOB_ID", "GITHUB_RUN_ID"):
        monkeypatch.delenv(name, raising=False)
    scenario = write_scenario(FAST, "fleet.toml")
    assert cli.main(["run", str(scenario), "--shard", "0/3", "--results", str(tmp_path), "--no-report"]) == 2
    assert "--group NAME" in capsys.readouterr().err
    assert cli.main(["run", str(scenario), "--group", "x", "--results", str(tmp_path), "--no-report"]) == 2
    assert "give --shard K/N too" in capsys.readouterr().err
    assert cli.main(["run", str(scenario), "--shard", "5/3", "--group", "x", "--results", str(tmp_path)]) == 2
    assert "from 0 to 2" in capsys.readouterr().err
