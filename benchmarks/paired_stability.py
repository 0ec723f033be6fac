"""How steady speedups are across runs of one commit on one machine: paired rounds against the
ratio of medians (issue #26's measurement), and how close the suite's timer is to its peer's.

    python -m benchmarks.paired_stability                         # 3 runs of `cpu`, the 2nd beside a CPU hog
    python -m benchmarks.paired_stability --runs 3 --hog 0        # no hog
    python -m benchmarks.paired_stability --fidelity              # and 3 runs of `fidelity`, the 2nd with a hog
    python -m benchmarks.paired_stability --bursts 2              # every run beside a hog on 2 s, off 2 s

Each run is `python -m suite run SCENARIO` in a fresh process, into a temporary results folder (kept
with --keep DIR). A hog is one process spinning on one core beside the run (a CPU-bound job on a
shared machine). For every speedup case measured in every run it prints the speedup per run, paired
(`speedup_paired`) and as the ratio of medians (the baseline's median time / the case's), and each
one's coefficient of variation across the runs (sample sd / mean); then the median CV of each and
their ratio (issue #26's target: paired at most a third of the ratio of medians'). With
--fidelity, the same runs of `fidelity` give each fp32 case above 1 ms its suite/peer ratio per run
(`fidelity_ratio`, interleaved, and `fidelity_ratio_medians`), against the targets 0.95-1.05 on a
quiet machine and 0.90-1.10 beside the hog. The machine's load (1-minute load average) is printed
before and after every run, and per run the CPUs other processes kept busy while its cases were
timed (the records' `others_cpus`): read every number next to them.
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from contextlib import contextmanager
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parent.parent
FIDELITY_MIN_MS = 1.0  # fidelity's targets are for cases above 1 ms (issue #26)
QUIET_BAND, HOG_BAND = (0.95, 1.05), (0.90, 1.10)


def load() -> str:
    one, five, fifteen = os.getloadavg()
    return f"load {one:.2f}, {five:.2f}, {fifteen:.2f} on {os.cpu_count()} CPUs"


@contextmanager
def hog(on: bool, burst_s: float = 0.0):
    """One CPU-bound process beside the block (none when `on` is False); with `burst_s`, it runs
    `burst_s` seconds and pauses as long, over and over (another job that comes and goes: the drift
    within a run that timing one case after another puts into a speedup)."""
    proc = subprocess.Popen([sys.executable, "-c", "while True: pass"]) if on else None
    stop = threading.Event()
    toggler = threading.Thread(target=_bursts, args=(proc, burst_s, stop), daemon=True) if on and burst_s else None
    if toggler:
        toggler.start()
    try:
        yield
    finally:
        stop.set()
        if toggler:
            toggler.join()
        if proc is not None:
            proc.kill()
            proc.wait()


def _bursts(proc: subprocess.Popen, burst_s: float, stop: threading.Event) -> None:
    running = True
    while not stop.wait(burst_s):
        proc.send_signal(signal.SIGSTOP if running else signal.SIGCONT)
        running = not running
    proc.send_signal(signal.SIGCONT)


def run_scenario(scenario: str, results: Path, hogged: bool, extra: list[str], burst_s: float = 0.0) -> float:
    """One run of the scenario in a process of its own; its wall seconds."""
    beside = f" beside a CPU hog{f' in {burst_s:g} s bursts' if burst_s else ''}" if hogged else ""
    print(f"  {scenario}{beside}: {load()} before", file=sys.stderr)
    started = time.monotonic()
    with hog(hogged, burst_s):
        subprocess.run([sys.executable, "-m", "suite", "run", scenario, "--results", str(results), "--no-report",
                        "--quiet", *extra], cwd=ROOT, check=True)
    seconds = time.monotonic() - started
    print(f"  ... {seconds:.0f} s, {load()} after", file=sys.stderr)
    return seconds


def runs_of(results: Path, scenario: str) -> list[pd.DataFrame]:
    """The scenario's runs in the folder, oldest first."""
    from suite.results import store

    df = store.read([store.scenario_dir(results, scenario)])
    return [g for _, g in sorted(df.groupby("run_id"), key=lambda kv: kv[0])]


def cv(values: list[float]) -> float:
    return statistics.stdev(values) / statistics.mean(values) if len(values) >= 2 else float("nan")


def speedups(run: pd.DataFrame) -> dict[str, tuple[str, float, float | None]]:
    """case_id -> (label, ratio of medians, paired speedup or None) of a run's measured speedup cases."""
    ok = run[run["status"] == "ok"].set_index("case_id")
    out = {}
    for case_id, row in ok.iterrows():
        base = row["baseline_case_id"]
        if not isinstance(base, str) or base == case_id or base not in ok.index or bool(row.get("emulated")):
            continue
        paired = row.get("speedup_paired")
        label = f"{row['precision']} {int(row['m'])}x{int(row['k'])}x{int(row['n'])}"
        out[case_id] = (label, ok.at[base, "time_ms_median"] / row["time_ms_median"],
                        None if pd.isna(paired) else float(paired))
    return out


def speedup_table(runs: list[pd.DataFrame]) -> tuple[list[str], float, float]:
    """Lines of the per-case table, and the median CV of the paired and of the ratio-of-medians
    speedups over the cases every run paired."""
    per_run = [speedups(run) for run in runs]
    common = sorted(set.intersection(*(set(r) for r in per_run)), key=lambda c: per_run[0][c][0])
    lines = [f"{'case':<22} {'paired per run':<30} {'CV':>6}   {'ratio of medians per run':<30} {'CV':>6}"]
    cvs_paired, cvs_medians = [], []
    for case_id in common:
        label = per_run[0][case_id][0]
        medians = [r[case_id][1] for r in per_run]
        paired = [r[case_id][2] for r in per_run]
        shown = " ".join(f"{p:.3g}" if p is not None else "seq" for p in paired)
        if all(p is not None for p in paired):
            cvs_paired.append(cv(paired))
            cvs_medians.append(cv(medians))
            mark = f"{cv(paired):6.1%}"
        else:
            mark = "   n/a"  # timed alone or sequentially in some run: no paired speedup to compare
        lines.append(f"{label:<22} {shown:<30} {mark}   {' '.join(f'{m:.3g}' for m in medians):<30} "
                     f"{cv(medians):6.1%}")
    median = (lambda xs: statistics.median(xs) if xs else float("nan"))
    return lines, median(cvs_paired), median(cvs_medians)


def machine_lines(runs: list[pd.DataFrame]) -> list[str]:
    """Per run: the CPUs other processes kept busy while its cases were timed (median and most over
    its cases, `others_cpus`) and how many cases that left short of CPUs (`derived.contended`)."""
    from suite.analysis.frame import derived

    lines = []
    for i, run in enumerate(runs, 1):
        ok = run[run["status"] == "ok"]
        others = pd.to_numeric(ok.get("others_cpus"), errors="coerce").dropna() if "others_cpus" in ok else []
        if len(others) == 0:
            lines.append(f"run {i}: other processes not recorded")
            continue
        lines.append(f"run {i}: other processes kept {others.median():.2f} CPUs busy (median over its cases; "
                     f"at most {others.max():.2f}); {int(derived.contended(ok).sum())} of {len(ok)} cases short of CPUs")
    return lines


def fidelity_table(runs: list[pd.DataFrame], hog_index: int | None) -> list[str]:
    """Per fp32 case above FIDELITY_MIN_MS: its suite/peer ratio per run (interleaved, and of the
    medians), and whether each is within the band of its run (quiet or beside the hog)."""
    lines = [f"{'case':<22} {'fidelity_ratio per run':<34} {'ratio of medians per run':<34} within band"]
    ok = [run[(run["status"] == "ok") & (run["precision"] == "fp32")].set_index("case_id") for run in runs]
    cases = sorted(set.intersection(*(set(r.index) for r in ok)), key=lambda c: ok[0].at[c, "m"])
    for case_id in cases:
        if min(r.at[case_id, "time_ms_median"] for r in ok) <= FIDELITY_MIN_MS:
            continue
        row = ok[0].loc[case_id]
        paired = [float(r.at[case_id, "fidelity_ratio"]) for r in ok]
        medians = [float(r.at[case_id, "fidelity_ratio_medians"]) for r in ok]
        bands = [HOG_BAND if i == hog_index else QUIET_BAND for i in range(len(ok))]
        within = ["yes" if lo <= p <= hi else "NO" for p, (lo, hi) in zip(paired, bands)]
        lines.append(f"{int(row['m'])}x{int(row['k'])}x{int(row['n']):<14} {' '.join(f'{p:.3f}' for p in paired):<34} "
                     f"{' '.join(f'{m:.3f}' for m in medians):<34} {' '.join(within)}")
    return lines


def measure(scenario: str, runs: int, hog_run: int, results: Path, extra: list[str],
            burst_s: float = 0.0) -> list[pd.DataFrame]:
    print(f"{scenario}: {runs} runs into {results}" + (f", every run beside a CPU hog in {burst_s:g} s bursts"
                                                       if burst_s else f", run {hog_run} beside a CPU hog"
                                                       if hog_run else ""), file=sys.stderr)
    for i in range(1, runs + 1):
        run_scenario(scenario, results, bool(burst_s) or i == hog_run, extra, burst_s)
    return runs_of(results, scenario)[-runs:]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.paired_stability", description=__doc__.split("\n\n")[0])
    p.add_argument("--runs", type=int, default=3, help="runs of each scenario (default 3)")
    p.add_argument("--hog", type=int, default=2, help="which run (from 1) has a CPU hog beside it; 0: none (default 2)")
    p.add_argument("--scenario", default="cpu", help="the speedup scenario (default cpu)")
    p.add_argument("--fidelity", action="store_true", help="also run `fidelity` as often, and report its ratios")
    p.add_argument("--keep", help="results folder to write into and keep (default: a temporary one)")
    p.add_argument("--bursts", type=float, default=0.0, metavar="S",
                   help="every run beside a hog that runs S seconds and pauses S seconds (drift within a run)")
    p.add_argument("--extra", default="", help="more `suite run` arguments, e.g. \"--threads 1\"")
    args = p.parse_args(argv)
    extra = args.extra.split()
    with tempfile.TemporaryDirectory() as tmp:
        results = Path(args.keep) if args.keep else Path(tmp) / "results"
        runs = measure(args.scenario, args.runs, args.hog, results, extra, args.bursts)
        lines, paired, medians = speedup_table(runs)
        print("\n".join(machine_lines(runs) + [""] + lines))
        print(f"\nmedian CV across {args.runs} runs: paired {paired:.1%}, ratio of medians {medians:.1%} "
              f"(paired / medians = {paired / medians:.2f}; target <= 0.33)")
        if args.fidelity:
            runs = measure("fidelity", args.runs, args.hog, results, extra, args.bursts)
            print("\n" + "\n".join(machine_lines(runs) + [""] + fidelity_table(runs, args.hog - 1 if args.hog else None)))
    print(f"\n{load()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
