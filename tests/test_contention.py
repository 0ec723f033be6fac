"""Other work on the machine while a case is timed: read from the kernel's counters, judged against
the CPUs the case's threads need, and said in the headline (suite/measure/contention.py)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

from suite.analysis.frame import derived
from suite.analysis.outcome import summary
from suite.measure import contention
from suite.results import store

LINUX = Path(contention.PROC_STAT).is_file()
TICK = os.sysconf("SC_CLK_TCK")


def stat_file(tmp_path: Path, user: int, cpus: int = 2, steal: int = 0) -> str:
    """A /proc/stat: the total line (user nice system idle iowait irq softirq steal guest guest_nice,
    in ticks), one line per CPU, and the lines that follow in the real file."""
    path = tmp_path / f"stat{user}"
    lines = [f"cpu  {user} 5 20 9000 3 1 2 {steal} 0 0"]
    lines += [f"cpu{i} 1 1 1 1 1 1 1 0 0 0" for i in range(cpus)]
    path.write_text("\n".join(lines + ["intr 12345 0 0", "ctxt 999", "procs_running 3", ""]))
    return str(path)


def test_the_total_line_counts_busy_and_steal_time_and_the_cpu_lines_count_cpus(tmp_path):
    reading = contention.read(stat_file(tmp_path, user=100, cpus=4, steal=30))
    # busy = user + nice + system + irq + softirq + steal; idle and iowait are not busy
    assert reading.machine_busy_s == pytest.approx((100 + 5 + 20 + 1 + 2 + 30) / TICK)
    assert reading.machine_cpus == 4
    own = os.times()
    assert 0 < reading.own_s <= own.user + own.system


def test_others_are_the_machines_busy_time_less_our_own_over_the_wall_time():
    before = contention.Reading(wall_s=10.0, machine_busy_s=100.0, own_s=3.0, machine_cpus=2)
    after = contention.Reading(wall_s=12.0, machine_busy_s=104.0, own_s=5.0, machine_cpus=2)
    assert contention.others_cpus(before, after) == pytest.approx(1.0)  # (4 - 2) s busy over 2 s
    # counters that tick apart can put our own time a hair above the machine's: never below 0
    after_quiet = contention.Reading(wall_s=12.0, machine_busy_s=101.9, own_s=5.0, machine_cpus=2)
    assert contention.others_cpus(before, after_quiet) == 0.0
    assert contention.others_cpus(before, before) is None  # no time passed: nothing to say


def test_without_proc_stat_the_columns_are_null(tmp_path):
    (tmp_path / "garbage").write_text("not a stat file\n")
    (tmp_path / "torn").write_text("cpu  12 x 3 4 5 6 7 8 0 0\n")
    for path in (str(tmp_path / "absent"), str(tmp_path / "garbage"), str(tmp_path / "torn")):
        with contention.Watch(path) as watch:
            pass
        assert watch.columns() == {"others_cpus": None, "machine_cpus": None}


@pytest.mark.skipif(not LINUX, reason="reads /proc/stat (Linux)")
def test_a_process_spinning_on_every_cpu_is_seen_as_others():
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    spin = "import sys; print('go', flush=True)\nwhile True: pass"
    hogs = [subprocess.Popen([sys.executable, "-c", spin], stdout=subprocess.PIPE, text=True) for _ in range(cpus)]
    try:
        for hog in hogs:
            assert hog.stdout.readline().strip() == "go"
        with contention.Watch() as watch:
            time.sleep(1.0)  # we sleep: whatever is busy is the others
        columns = watch.columns()
    finally:
        for hog in hogs:
            hog.kill()
            hog.wait()
    # every CPU we may use was spinning; other load on a busy machine only adds to it
    assert columns["machine_cpus"] >= cpus
    assert columns["others_cpus"] >= 0.5 * cpus


def frame(**cols) -> pd.DataFrame:
    return pd.DataFrame(cols)


def test_contended_means_the_others_left_the_cases_threads_fewer_cpus_than_they_use():
    df = frame(others_cpus=[0.3, 0.1, 0.9, 1.3, 1.3, 0.9, None],
               machine_cpus=[2, 2, 2, 2, 2, 2, 2],
               cpu_threads=[2, 2, 1, 1, 2, 2, 2],
               device=["cpu", "cpu", "cpu", "cpu", "cuda", "cuda", "cpu"])
    # 2 threads of 2 CPUs: any other work beyond the slack takes a core they use; 1 thread: one CPU
    # is free for the others; a GPU's cases need one host thread; no reading: not contended
    assert derived.contended(df).tolist() == [True, False, False, True, True, False, False]
    assert derived.contended(frame(others_cpus=[5.0], device=["cpu"])).tolist() == [False]  # older records


@pytest.fixture(scope="module")
def committed_cpu_run() -> pd.DataFrame:
    files = sorted(Path("results/reference/cpu_amx").rglob("*.parquet"))
    return store.read_file(files[0])


def test_the_headline_says_which_cases_ran_on_a_busy_machine_and_what_that_means(committed_cpu_run):
    df = committed_cpu_run.copy()
    assert not any("other processes kept" in line for line in summary.headline(df))  # recorded before the column
    ok = df["status"] == "ok"
    threads = pd.to_numeric(df["cpu_threads"]).max()
    df["machine_cpus"] = int(threads)
    df["others_cpus"] = 0.0
    df.loc[ok.to_numpy().nonzero()[0][:3], "others_cpus"] = [0.9, 1.0, 1.1]
    lines = [line for line in summary.headline(df) if "other processes kept" in line]
    assert lines == [f"3 case(s) were timed while other processes kept 0.90 to 1.10 of this machine's {int(threads)} "
                     "CPUs busy, fewer than their threads needed: their speedups are the busy machine's (a lost "
                     "core can change the kernels' relative speed, and pairing does not undo that); a quiet "
                     "machine, or `--threads` within the free CPUs, gives the quiet machine's."]


def test_what_differs_between_a_quiet_run_and_one_beside_a_hog_is_the_busy_machine():
    from suite.analysis.regression import envdiff

    quiet, busy, _ = (store.read_file(f) for f in sorted(Path("results/reference/paired_stability/hog_others_cpus/cpu")
                                                         .glob("*.parquet")))
    found = envdiff.diff(quiet, busy)
    changed = [d.text for c in found.cases for d in c.differences if d.column == "busy_machine"]
    assert len(changed) == 18 and set(changed) == {"machine busy with other work changed: no -> yes"}
    assert "machine busy with other work changed in 18 case(s)" in found.summary()
    # runs recorded before others_cpus (or off Linux) do not know: never "changed"
    older = quiet.drop(columns=["others_cpus"])
    assert not any(d.column == "busy_machine" for c in envdiff.diff(older, busy).cases for d in c.differences)
