"""benchmarks/paired_stability.py: the table of speedups across runs and the CVs it reports
(issue #26's measurement), on hand-made records (nothing is timed here)."""

from __future__ import annotations

import math
import re
from pathlib import Path

import pandas as pd
import pytest

from benchmarks import paired_stability as ps


def _run(fp32_ms: float, bf16_ms: float, paired: float | None, fp16_paired: float | None = 2.0) -> pd.DataFrame:
    rows = [("a", "fp32", fp32_ms, None), ("b", "bf16", bf16_ms, paired), ("c", "fp16", fp32_ms / 2, fp16_paired)]
    return pd.DataFrame([dict(case_id=c, baseline_case_id="a", precision=p, m=64, k=64, n=64, status="ok",
                              time_ms_median=t, speedup_paired=s, emulated=False) for c, p, t, s in rows])


def test_the_table_gives_each_kinds_median_cv_over_the_cases_every_run_paired():
    runs = [_run(10.0, 5.0, 2.0), _run(12.0, 4.0, 2.1), _run(8.0, 5.0, 1.9)]
    lines, paired, medians = ps.speedup_table(runs)
    bf16 = ps.cv([2.0, 2.1, 1.9])
    assert ps.cv([10 / 5, 12 / 4, 8 / 5]) > bf16
    # fp16: paired 2.0 every run (CV 0), its ratio of medians 2.0 every run (CV 0)
    assert paired == pytest.approx(bf16 / 2) and medians == pytest.approx(ps.cv([2.0, 3.0, 1.6]) / 2)
    assert any(ln.startswith("bf16 64x64x64") for ln in lines) and len(lines) == 3


def test_a_case_timed_sequentially_in_any_run_is_shown_but_left_out_of_the_cvs():
    runs = [_run(10.0, 5.0, 2.0, None), _run(12.0, 4.0, 2.1), _run(8.0, 5.0, 1.9)]
    lines, paired, medians = ps.speedup_table(runs)
    assert paired == pytest.approx(ps.cv([2.0, 2.1, 1.9])) and medians == pytest.approx(ps.cv([2.0, 3.0, 1.6]))
    fp16 = next(ln for ln in lines if ln.startswith("fp16"))
    assert "seq" in fp16 and "n/a" in fp16


def test_emulated_cases_and_baselines_are_no_speedups():
    run = _run(10.0, 5.0, 2.0)
    run.loc[run["precision"] == "fp16", "emulated"] = True
    assert set(ps.speedups(run)) == {"b"}
    assert math.isnan(ps.cv([1.0]))


def test_a_bursting_hog_pauses_and_resumes_and_ends_running():
    """The hog of `--bursts`: stopped and continued in turn, each burst_s, and continued at the end
    (so that killing it is not blocked by a stopped process)."""
    import signal

    class Proc:
        sent: list = []

        def send_signal(self, sig):
            self.sent.append(sig)

    class FourBursts:  # the stop event, set after four bursts
        waits = 0

        def wait(self, seconds):
            assert seconds == 0.5
            self.waits += 1
            return self.waits > 4

    proc = Proc()
    ps._bursts(proc, 0.5, FourBursts())
    assert proc.sent == [signal.SIGSTOP, signal.SIGCONT, signal.SIGSTOP, signal.SIGCONT, signal.SIGCONT]


def test_each_run_says_how_busy_the_other_processes_kept_the_machine():
    quiet, busy, old = _run(10.0, 5.0, 2.0), _run(10.0, 5.0, 2.0), _run(10.0, 5.0, 2.0)
    for run, others in ((quiet, 0.0), (busy, 1.0)):
        run["others_cpus"], run["machine_cpus"], run["cpu_threads"], run["device"] = others, 2, 2, "cpu"
    assert ps.machine_lines([quiet, busy, old]) == [
        "run 1: other processes kept 0.00 CPUs busy (median over its cases; at most 0.00); 0 of 3 cases short of CPUs",
        "run 2: other processes kept 1.00 CPUs busy (median over its cases; at most 1.00); 3 of 3 cases short of CPUs",
        "run 3: other processes not recorded",
    ]


REFERENCE = Path("results/reference/paired_stability")
TIMING_DOC = Path("docs/timing.md").read_text(encoding="utf-8")


@pytest.mark.parametrize("folder", ["quiet", "hog", "hog_others_cpus", "hog_threads1", "bursts"])
def test_the_docs_table_of_cvs_is_the_committed_runs(folder):
    """docs/timing.md's table of median CVs, recomputed from the committed runs it names."""
    row = re.search(rf"`{folder}/cpu`\) \| ([\d.]+)% \| ([\d.]+)% \|", TIMING_DOC)
    assert row, f"no row for {folder}/cpu in docs/timing.md"
    _, paired, medians = ps.speedup_table(ps.runs_of(REFERENCE / folder, "cpu"))
    assert (f"{paired:.1%}", f"{medians:.1%}") == (f"{row[1]}%", f"{row[2]}%")


@pytest.mark.parametrize("folder", ["quiet", "hog", "hog_others_cpus"])
def test_the_docs_fidelity_ratios_are_the_committed_runs(folder):
    row = re.search(rf"\(`{folder}/fidelity`\) \| ([\d. ]+) \| ([\d. ]+) \| ([\d. ]+) \|", TIMING_DOC)
    assert row, f"no row for {folder}/fidelity in docs/timing.md"
    lines = ps.fidelity_table(ps.runs_of(REFERENCE / folder, "fidelity"), None if folder == "quiet" else 1)
    measured = {line.split()[0]: " ".join(line.split()[1:4]) for line in lines[1:]}
    assert [measured["1024x1024x1024"], measured["2048x2048x2048"], measured["2048x768x3072"]] == list(row.groups())


def test_the_committed_hog_run_is_the_one_flagged_busy():
    lines = ps.machine_lines(ps.runs_of(REFERENCE / "hog_others_cpus", "cpu"))
    assert [line.endswith("0 of 18 cases short of CPUs") for line in lines] == [True, False, True]
    assert lines[1].startswith("run 2: other processes kept 0.79 CPUs busy") and "18 of 18 cases" in lines[1]
