"""The command line as data: each command's arguments (argparse's `add_argument` words), its help,
and the plain function it runs (`main` of its module in `suite.cli`); `parser()` builds argparse's
parser from the table. Building it imports no pandas and no torch: `--help` answers at once."""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from typing import Callable

from suite.cli import arguments
from suite.cli import compare, env, env_diff, export, history, import_, list as list_, plan, predict, recommend
from suite.cli import report, repro, run
from suite.measure.executors.process import DEFAULT_TIMEOUT_S
from suite.scenario import registry
from suite.scenario.plan import MAX_CASES

URL_HELP = "; or a URL fsspec reaches, e.g. s3://bucket/prefix (pip install -e .[remote]; docs/results.md)"

SELECTOR_HELP = """selectors: comma-joined terms, all of which must hold
  results/cpu, path/run.parquet     runs in that folder or file (default folder: --results)
  s3://bucket/prefix/cpu            the same at a URL
  20261129T143751Z-04f860           a run id, or a unique prefix of one (also run=PREFIX)
  scenario=cpu                      runs of that scenario
  torch=2.13.0 torchao=0.18 te=2.9 cuda=12.8 python=3.11
                                    a version, or a prefix ending at . or + (2.13 matches 2.13.0+cpu)
  device=cuda gpu=H100 host=NAME label=TEXT
                                    device type; text in the device name; host; an import's label
  git=abc123 code=9c93              prefix of the git commit / of the suite's code hash
  runs=N, runs=all                  pool the N newest matching runs (default 1: the newest)
  skip=N                            leave out the N newest matching runs first

examples:
  python -m suite compare torch=2.13.0,runs=3 torch=2.14.1,runs=3
  python -m suite compare results/cpu,skip=1 results/cpu --fail-on none
"""

# compare's defaults, spelled out so that building the parser imports no pandas (tests/test_compare.py
# checks they are suite.analysis.compare.DEFAULT_FAIL_ON and suite.analysis.stats.DEFAULT_MIN_RUNS; tests/test_history.py
# that the history default is suite.analysis.history.Options().min_runs and the nightly's gate
# suite.analysis.history_gate.NIGHTLY).
DEFAULT_FAIL_ON = ("regressed", "time:regressed", "new-failure", "new-skip")
DEFAULT_MIN_RUNS = 2
DEFAULT_HISTORY_MIN_RUNS = 3
DEFAULT_NIGHTLY_FAIL_ON = ("regressed", "baseline-changed", "time:regressed", "new-failure")


def arg(*flags: str, **options) -> tuple[tuple[str, ...], dict]:
    """One argument: its flags (or name) and argparse's keywords for it."""
    return flags, options


# Arguments several commands share, in the order their help lists them.
QUIET = [arg("--quiet", action="store_true", help="no progress or 'written to' lines on stderr "
             "(errors and warnings still)")]
JSON = [arg("--json", action="store_true", help="print one JSON document on stdout (shape: docs/cli.md)")]
SCENARIOS = [arg("--scenarios", metavar="DIR", help="folder of scenario files (default: $MPSUITE_SCENARIOS, "
                 "else ./scenarios, else the scenarios shipped with mpsuite)")]
SCENARIO_NAME = arg("scenario", help="scenario name (from --scenarios) or path to a .toml file")
SCENARIO = [
    *SCENARIOS,
    SCENARIO_NAME,
    arg("--max-cases", metavar="N", type=arguments.count,
        help=f"refuse a scenario of more cases than this (default: {MAX_CASES:,})"),
    arg("--only", metavar="TERMS", action="append",
        help="only the cases matching TERMS: comma-joined key=pattern (workload, precision, m, k, n, "
        "shape such as 2048x*, or a parameter; shell wildcards) or words of the case's label; "
        "repeat for 'or' (e.g. --only precision=bf16,shape=2048x* --only workload=linear)"),
    arg("--shard", metavar="K/N",
        help="only shard K (from 0) of N: a deterministic, cost-balanced slice, the same on every "
        "machine; auto: a SLURM job array's task; auto/N: a Kubernetes Indexed Job's "
        "JOB_COMPLETION_INDEX (docs/fleet.md)"),
]
RESULTS = arg("--results", default="results", help=f"results folder (default: results){URL_HELP}")
REPORTS = arg("--reports", default="reports", help=f"reports folder (default: reports){URL_HELP}")
STATISTICS = [
    *QUIET,
    arg("--results", default="results", help=f"results folder selectors look in (default: results){URL_HELP}"),
    REPORTS,
    arg("--min-effect", type=arguments.fraction, default=0.05,
        help="smallest change worth a verdict, as a fraction (default: 0.05 = 5%%)"),
    arg("--confidence", type=arguments.fraction, default=0.99,
        help="interval confidence per case; compare's gate holds it family-wise (default: 0.99)"),
]

RUN = [
    *SCENARIO, *QUIET, *JSON, RESULTS, REPORTS,
    arg("--device", choices=["auto", "cpu", "cuda"], help="override the scenario's device"),
    arg("--no-report", action="store_true", help="store records only"),
    arg("--require-measured", action="store_true",
        help="exit 1 when no case was measured (every one skipped or failed), e.g. a GPU runner "
        "whose CUDA is broken; the records are stored either way"),
    arg("--resume", metavar="RUN_ID", type=arguments.run_id,
        help="finish an interrupted run: run only the cases missing from its journal"),
    arg("--isolate", action="store_true", help="run each setting (a baseline and the precisions against it, timed "
        "together) in its own subprocess, so a crash costs one case and a hang one setting"),
    arg("--case-timeout", metavar="SECONDS", type=arguments.seconds,
        help=f"fail a case that runs longer (a setting: this times its cases), with --isolate (default: "
        f"{DEFAULT_TIMEOUT_S:g}) or in a CUDA run's worker (default: 10 case caps, at least 300)"),
    arg("--threads", metavar="N", type=arguments.threads,
        help="torch's intra-op CPU threads for the run (default: the scenario's `threads`, else "
        "torch's default of one per core); recorded as cpu_threads"),
    arg("--group", metavar="NAME",
        help="with --shard: the run group every shard of the fleet run shares (default: "
        "$MPSUITE_RUN_GROUP, else slurm-$SLURM_ARRAY_JOB_ID or gha-$GITHUB_RUN_ID-$GITHUB_RUN_ATTEMPT); "
        "a shard started again under it resumes its own run"),
    arg("--executor", choices=["local", "ray"], default="local",
        help="ray: run the cases on a Ray cluster, one worker per GPU (else per node), records "
        "journaled here (needs the fleet extra)"),
    arg("--address", metavar="ADDR", help="with --executor ray: the cluster (default: $RAY_ADDRESS, else a local one)"),
    arg("--dry-run", metavar="GPU", help="run no case: each case's support check, prepare and one call on fake CUDA "
        "tensors as on GPU (h100, h200, a100, b200, ... of the peak table), on any machine with torch's CUDA build "
        "(docs/gpu-check.md); nothing is timed or stored, exit 1 when a case fails"),
]
REPORT = [
    *QUIET,
    arg("results", nargs="+", help=f"results files or folders (e.g. results/cpu){URL_HELP}"),
    arg("--out", help="output folder (default: reports/<scenario>)"),
    arg("--all-runs", action="store_true",
        help="every run found, not only the newest per scenario and device (records of several "
        "devices make a fleet report: each device's, and their speedups side by side)"),
]
PREDICT = [
    *SCENARIOS, *QUIET, *JSON,
    SCENARIO_NAME,
    arg("--device", required=True, help="a GPU of the peak table: a100, a100-pcie, h100, h100-pcie, "
        "h100-nvl, h200, gh200, b200, gb200, l4, l40s (or a driver name such as 'NVIDIA H100 80GB HBM3')"),
    arg("--only", metavar="TERMS", action="append", help="only the cases matching TERMS (as for run)"),
]
PLAN = [
    *SCENARIO, *QUIET, *JSON,
    arg("--shards", metavar="N", type=arguments.count,
        help="print how the cases split over N shards (cases and estimated seconds per shard)"),
]
RECOMMEND = [
    *QUIET, *JSON,
    arg("results", nargs="+", help="results files or folders (e.g. results/h100_fp8)"),
    arg("--max-rel-err", type=float, metavar="X", help="relative error against the reference at most X"),
    arg("--min-sqnr-db", type=float, metavar="DB", help="SQNR at least DB decibels"),
    arg("--max-loss-delta", type=float, metavar="NATS", help="training steps: |final loss - the fp32 twin's| at most NATS"),
    arg("--all-runs", action="store_true", help="every run found, not only the newest per scenario"),
]
COMPARE = [
    *STATISTICS, *JSON,
    arg("baseline", help="selector of the baseline runs (e.g. torch=2.13.0 or results/cpu,skip=1)"),
    arg("candidate", help="selector of the candidate runs (e.g. torch=2.14.1 or results/cpu)"),
    arg("--fail-on", default=",".join(DEFAULT_FAIL_ON),
        help="verdicts that make the exit status 1, comma-separated; the time: prefix gates on "
        f"absolute times (default: {','.join(DEFAULT_FAIL_ON)}; none to never fail). regressed and "
        "improved must also hold at the family-wise --confidence (Holm over the cases)"),
    arg("--min-runs", type=arguments.min_runs, default=DEFAULT_MIN_RUNS,
        help=f"runs per side a case needs for a regressed/improved verdict (default: {DEFAULT_MIN_RUNS}; "
        "record 3 per side); with fewer it is insufficient-runs"),
    arg("--noise", type=arguments.fraction, default=None,
        help="a known run-to-run sd of one run's value, relative (0.03 = 3%%), used as a floor under "
        "the estimate; with --min-runs 1 it lets single runs be compared (default: estimated only)"),
    arg("--any-scenario", action="store_true", help="join on case_id even across different scenarios"),
    arg("--out", help="report folder (default: reports/compare/<scenario>/<baseline>_vs_<candidate>)"),
]
HISTORY = [
    *STATISTICS, *JSON,
    arg("scenario", help="scenario name (its runs are in <results>/<scenario>/)"),
    arg("--last", type=int, help="only the newest N runs"),
    arg("--min-runs", type=arguments.min_runs, default=DEFAULT_HISTORY_MIN_RUNS,
        help=f"runs a change point needs on each side (default: {DEFAULT_HISTORY_MIN_RUNS})"),
    arg("--noise", type=arguments.fraction, default=None,
        help="a known run-to-run sd of one run's value, relative (0.03 = 3%%), a floor under the estimate"),
    arg("--out", help="report folder (default: reports/history/<scenario>)"),
    arg("--fail-on", default="none",
        help="exit 1 when the newest run(s) bring a new finding of these verdicts, comma-separated: regressed, "
        "improved, baseline-changed, time:regressed, time:improved (change points), new-failure, new-skip "
        f"(a nightly: {','.join(DEFAULT_NIGHTLY_FAIL_ON)}); a change point an earlier night already "
        "reported never fails again (docs/comparing.md) (default: none)"),
    arg("--new-runs", type=arguments.min_runs, default=1,
        help="with --fail-on: how many of the newest runs are new (default: 1, a nightly's one run)"),
]
ENV_DIFF = [
    *QUIET, *JSON,
    arg("a", help="selector of the first runs (e.g. torch=2.13.0,runs=3)"),
    arg("b", help="selector of the second runs (e.g. torch=2.14.1,runs=3)"),
    arg("--results", default="results", help=f"results folder selectors look in (default: results){URL_HELP}"),
]
REPRO = [
    *QUIET, *JSON,
    arg("run_selector", metavar="RUN", help="the run: a run id, or a selector picking one (e.g. results/reference/cpu_amx)"),
    arg("--results", default=None, help="results folder the selector looks in and the re-run is stored in "
        f"(default: the folder the run lies in, else results){URL_HELP}"),
    REPORTS,
    arg("--run", action="store_true",
        help="re-run it here into a new run id, from the scenario the run stored, and compare the two "
        "(the comparison report in reports/compare/)"),
    arg("--noise", type=arguments.fraction, default=None,
        help="with --run: a known run-to-run sd of one run's value (0.03 = 3%%), so one run against one gets "
        "verdicts (default: none; the comparison shows each change and what differs)"),
]
EXPORT = [
    *QUIET,
    arg("selector", help="which runs (selector, as for compare; runs=all for several)"),
    arg("-o", "--out", required=True, help="a .json file (one run) or a folder (one file per run)"),
    RESULTS,
]
IMPORT = [
    *QUIET,
    arg("files", nargs="+", help="pytest-benchmark JSON files (--benchmark-json or --benchmark-save)"),
    RESULTS,
    arg("--scenario", help="scenario name to file it under (default: from the file, else pytest-benchmark)"),
    arg("--label", help="a label for the run, selectable with label=TEXT"),
]


@dataclass(frozen=True)
class Command:
    name: str
    main: Callable[[argparse.Namespace], int]
    help: str
    arguments: list
    description: str | None = None
    epilog: str | None = None  # shown as written (a table of selectors)


# The commands, in the order `--help` lists them.
COMMANDS = [
    Command("run", run.main, "run a scenario, store its records, render its report", RUN),
    Command("report", report.main, "render a report from stored results", REPORT),
    Command("list", list_.main, "list the scenarios and their case counts", [*SCENARIOS, *QUIET, *JSON]),
    Command("predict", predict.main, "the roofline model's table for a scenario on a GPU, without running it",
            PREDICT, description="Each case's predicted time, TFLOP/s, speedup over its baseline and bound "
            "(compute, memory, overhead) on a GPU of the peak table, and where each recipe starts to "
            "pay (docs/model.md). Runs on any machine in seconds: plan a GPU lease with it."),
    Command("env", env.main, "print the versions and device a run would record", [*QUIET, *JSON]),
    Command("plan", plan.main, "print a scenario's cases without running them", PLAN),
    Command("recommend", recommend.main,
            "the fastest precision per case within an accuracy budget, from stored results", RECOMMEND,
            description="Per case (workload x shape x parameters), the fastest measured precision whose "
            "accuracy meets every bound given, with its speedup over the in-run baseline. Emulated "
            "precisions (FP8 on a CPU) have no speed to rank and are listed apart. Example: "
            "python -m suite recommend results/h100_fp8 --max-rel-err 1e-2"),
    Command("compare", compare.main, "compare two sets of runs case by case (exit 1 on --fail-on)", COMPARE,
            description="Compare two sets of runs case by case; each side is a selector.", epilog=SELECTOR_HELP),
    Command("history", history.main, "each case's speedup and time over the stored runs, change points marked",
            HISTORY),
    Command("env-diff", env_diff.main, "what differs between two sets of runs: versions, device, clocks, code, kernels",
            ENV_DIFF, description="What differs between the records of two run selectors: every environment "
            "column (torch, torchao, Transformer Engine, CUDA, driver, Python, device, clocks and power "
            "limit, code hash, threads, ...) over the runs, and per case the kernel that ran, where "
            "recorded.", epilog=SELECTOR_HELP),
    Command("repro", repro.main, "how to reproduce a stored run: pinned installs and its command (--run: re-run "
            "and compare)", REPRO,
            description="From a run's own records: the install lines (every recorded version pinned; torch's "
            "build from its version's local label, e.g. +cpu, +cu130), the suite's commit, the command that "
            "re-runs it, and what the records do not hold. --run re-runs it here into a new run id and "
            "compares the two.", epilog=SELECTOR_HELP),
    Command("export", export.main, "write runs as pytest-benchmark JSON (for `pytest-benchmark compare`)", EXPORT),
    Command("import", import_.main, "store a pytest-benchmark JSON file as a run in the results folder", IMPORT),
]

DESCRIPTION = ("Mixed-precision benchmarks: speed and accuracy side by side. Exit status: 0 ok, 1 a case failed "
               "(run) or matched --fail-on (compare), 2 bad input (one line says what). docs/cli.md has every command.")


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="mpsuite", description=DESCRIPTION)
    p.add_argument("--version", action="version", version=version())
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for command in COMMANDS:
        extra = {"formatter_class": argparse.RawDescriptionHelpFormatter} if command.epilog else {}
        one = sub.add_parser(command.name, help=command.help, description=command.description,
                             epilog=command.epilog, **extra)
        for flags, options in command.arguments:
            one.add_argument(*flags, **options)
        one.set_defaults(func=command.main)
    return p


def version() -> str:
    """`mpsuite X (torch Y, <each declared library> Z, python W)`, from installed metadata (nothing
    imported)."""
    from importlib import metadata

    def have(name):
        try:
            return metadata.version(name)
        except metadata.PackageNotFoundError:
            return None

    extras = [f"torch {v}"] if (v := have("torch")) else []
    extras += [f"{library.distributions[0]} {v}" for library in registry.libraries() if (v := library.version())]
    return f"mpsuite {have('mpsuite') or 'unknown'} ({', '.join(extras + [f'python {sys.version.split()[0]}'])})"
