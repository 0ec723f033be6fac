"""`mpsuite` / `python -m suite`: thin adapters from the command line to plain functions."""

from __future__ import annotations

import argparse
import os
import re
import sys
from pathlib import Path

from suite.errors import UserError


def cmd_run(args) -> int:
    import pandas as pd

    from suite.analysis import derived
    from suite import pipeline
    from suite.scenario import spec

    scenario = spec.resolve(args.scenario, args.scenarios)
    try:
        result = pipeline.run_scenario(
            scenario, args.results, None if args.no_report else args.reports, args.device, not args.quiet,
            resume=args.resume, isolate=args.isolate, case_timeout=args.case_timeout, threads=args.threads,
            max_cases=args.max_cases,
        )
    except pipeline.ReportInterrupted as stop:
        print(f"mpsuite: interrupted while rendering the report; the run is stored in {stop.path} "
              f"(`python -m suite report {stop.path}` renders it)", file=sys.stderr)
        return 128 + stop.signal
    except pipeline.RunInterrupted as stop:
        print(f"mpsuite: interrupted after {stop.done} of {stop.total} cases; they are kept in {stop.journal}",
              file=sys.stderr)
        print(f"mpsuite: to finish run {stop.run_id}: {resume_command(args, stop.run_id)}", file=sys.stderr)
        if stop.done:
            print(f"mpsuite: a partial report of the finished cases: python -m suite report "
                  f"{stop.journal.parent.parent}", file=sys.stderr)
        global _ABANDONED
        _ABANDONED = _ABANDONED or stop.abandoned
        return 128 + stop.signal  # the shell's convention: 130 for Ctrl-C, 143 for SIGTERM
    records = pd.DataFrame(result.records)
    df = derived.summary(records)
    print(df.to_string(index=False, float_format=lambda x: f"{x:.4g}"))
    from suite import report

    for line in report.headline(records):
        print(f"mpsuite: {line}", file=sys.stderr)
    if result.failed:
        print(f"mpsuite: {result.failed} case(s) failed; see the 'reason' column", file=sys.stderr)
    return 1 if result.failed else 0


# Set when a run was interrupted while a case was still inside a call Python cannot stop (a
# minute-long GEMM on the worker thread): `entry` then exits without waiting for it.
_ABANDONED = False


def resume_command(args, run_id: str) -> str:
    """The command line that continues this run: the same options, plus --resume."""
    import shlex

    parts = ["python", "-m", "suite", "run", args.scenario, "--resume", run_id]
    for flag, value, default in (("--scenarios", args.scenarios, "scenarios"), ("--results", args.results, "results"),
                                 ("--reports", args.reports, "reports"), ("--device", args.device, None),
                                 ("--case-timeout", args.case_timeout, None), ("--threads", args.threads, None),
                                 ("--max-cases", args.max_cases, None)):
        if value != default:
            parts += [flag, str(value)]
    parts += [flag for flag, on in (("--isolate", args.isolate), ("--no-report", args.no_report),
                                    ("--quiet", args.quiet)) if on]
    return shlex.join(parts)


def _run_id(text: str) -> str:
    from suite.results import store

    try:
        return store.check_run_id(text)
    except UserError as err:
        raise argparse.ArgumentTypeError(str(err)) from None


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not 0 < value < float("inf"):
        raise argparse.ArgumentTypeError(f"expected a positive number of seconds, got {text!r}")
    return value


def _threads(text: str) -> int:
    if not text.isdigit() or not 1 <= int(text) <= 4096:
        raise argparse.ArgumentTypeError(f"expected a whole number of threads from 1 to 4096, got {text!r}")
    return int(text)


def cmd_report(args) -> int:
    from suite.analysis import derived
    from suite import report
    from suite.results import store

    df = store.read(args.results, unfinished=True)  # an interrupted run renders as a partial report
    if not args.all_runs:
        df = derived.latest_runs(df)
    scenarios = sorted(df["scenario"].unique())
    for name in scenarios:
        if args.out is None:
            out = Path("reports") / name
        else:
            out = Path(args.out) / name if len(scenarios) > 1 else Path(args.out)
        written = report.render(df[df["scenario"] == name], out)
        print(f"mpsuite: report in {out}/ ({', '.join(p.name for p in written)})", file=sys.stderr)
    return 0


def cmd_list(args) -> int:
    from suite.scenario import plan, spec

    problems: list[str] = []
    found = spec.load_dir(args.scenarios, problems)
    for name, (path, scenario) in found.items():
        bound = plan.count(scenario)
        cases = f"{len(plan.expand(scenario)):>5}" if bound <= plan.MAX_CASES else f"<= {bound:,}"
        print(f"{name:<16} {cases} cases  {path}  {scenario.description}")
    for problem in problems:
        print(f"mpsuite: warning: left out {problem}", file=sys.stderr)
    if problems:
        raise UserError(f"{len(problems)} scenario file(s) in {args.scenarios} do not load (listed above); "
                        "the others are listed")
    if not found:
        raise UserError(f"no scenario files (*.toml) in {Path(args.scenarios).resolve()}")
    return 0


def cmd_plan(args) -> int:
    from suite.scenario import plan, spec

    scenario = spec.resolve(args.scenario, args.scenarios)
    plan.check_size(scenario, args.max_cases)
    # one write: a million print calls (each filtered for control characters) cost seconds
    sys.stdout.write("".join([f"{case.case_id}  {case.label}\n" for case in plan.expand(scenario)]))
    return 0


def cmd_env(args) -> int:
    import torch

    from suite.measure import env

    info = env.capture(env.resolve_device("auto"))
    keys = ["python_version", "torch_version", "cuda_version", "torchao_version", "te_version",
            "triton_version", "device_name", "compute_capability", "driver_version", "git_sha"]
    print(" | ".join(f"{k.removesuffix('_version')} {info[k]}" for k in keys if info.get(k) is not None)
          + f" | cuda available {torch.cuda.is_available()}")
    return 0


def cmd_compare(args) -> int:
    from suite.analysis import compare
    from suite.report import compare_page

    fail_on = compare.parse_fail_on(args.fail_on)
    options = compare.Options(min_effect=args.min_effect, confidence=args.confidence, resamples=args.resamples,
                              noise=args.noise, seed=args.seed, any_scenario=args.any_scenario)
    baseline, candidate = compare.load_sides(args.baseline, args.candidate, args.results)
    result = compare.compare(baseline, candidate, options)
    out = Path(args.out) if args.out else compare_page.default_dir(result, args.reports)
    written = compare_page.render(result, out)
    failing = result.failing(fail_on)
    print(compare_page.text_summary(result, failing))
    for warning in result.warnings:
        print(f"mpsuite: note: {warning}", file=sys.stderr)
    print(f"mpsuite: comparison report in {out}/ ({', '.join(p.name for p in written)})", file=sys.stderr)
    if len(failing):
        print(f"mpsuite: {len(failing)} case(s) match --fail-on {','.join(fail_on)}", file=sys.stderr)
    return 1 if len(failing) else 0


def cmd_history(args) -> int:
    from suite.analysis import history
    from suite.report import history_page

    series = history.build(args.scenario, args.results, last=args.last, min_effect=args.min_effect,
                           confidence=args.confidence)
    out = Path(args.out) if args.out else Path(args.reports) / "history" / args.scenario
    written = history_page.render(series, out)
    print(history_page.text_summary(series))
    print(f"mpsuite: history report in {out}/ ({', '.join(p.name for p in written)})", file=sys.stderr)
    return 0


def cmd_export(args) -> int:
    from suite.analysis import bench_json
    from suite.results import select

    df = select.select(args.selector, args.results, role="export")
    for path in bench_json.export(df, args.out):
        print(f"mpsuite: wrote {path}", file=sys.stderr)
    return 0


def cmd_import(args) -> int:
    from suite.analysis import bench_json

    for file in args.files:
        path = bench_json.import_file(file, args.results, scenario=args.scenario, label=args.label)
        print(f"mpsuite: imported {file} as {path}", file=sys.stderr)
    return 0


def _fraction(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not 0 <= value < 1:
        raise argparse.ArgumentTypeError(f"expected a fraction in [0, 1) (0.05 = 5%), got {text!r}")
    return value


def _count(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number of cases, at least 1, got {text!r}")
    return int(text)


def parser() -> argparse.ArgumentParser:
    from suite.measure.isolate import DEFAULT_TIMEOUT_S
    from suite.scenario.plan import MAX_CASES

    p = argparse.ArgumentParser(prog="mpsuite", description="Mixed-precision benchmarks: speed and accuracy side by side.")
    sub = p.add_subparsers(dest="command", required=True)
    scen = argparse.ArgumentParser(add_help=False)
    scen.add_argument("scenario", help="scenario name (from --scenarios) or path to a .toml file")
    scen.add_argument("--scenarios", default="scenarios", help="folder of scenario files (default: scenarios)")
    scen.add_argument("--max-cases", metavar="N", type=_count,
                      help=f"refuse a scenario of more cases than this (default: {MAX_CASES:,})")

    r = sub.add_parser("run", parents=[scen], help="run a scenario, store its records, render its report")
    r.add_argument("--results", default="results", help="results folder (default: results)")
    r.add_argument("--reports", default="reports", help="reports folder (default: reports)")
    r.add_argument("--device", choices=["auto", "cpu", "cuda"], help="override the scenario's device")
    r.add_argument("--no-report", action="store_true", help="store records only")
    r.add_argument("--quiet", action="store_true", help="no per-case progress lines")
    r.add_argument("--resume", metavar="RUN_ID", type=_run_id,
                   help="finish an interrupted run: run only the cases missing from its journal")
    r.add_argument("--isolate", action="store_true",
                   help="run each case in its own subprocess, so a crash or hang costs one case")
    r.add_argument("--case-timeout", metavar="SECONDS", type=_seconds,
                   help=f"with --isolate: fail a case that runs longer (default: {DEFAULT_TIMEOUT_S:g})")
    r.add_argument("--threads", metavar="N", type=_threads,
                   help="torch's intra-op CPU threads for the run (default: the scenario's `threads`, else "
                   "torch's default of one per core); recorded as cpu_threads")
    r.set_defaults(func=cmd_run)

    rep = sub.add_parser("report", help="render a report from stored results")
    rep.add_argument("results", nargs="+", help="results files or folders (e.g. results/cpu)")
    rep.add_argument("--out", help="output folder (default: reports/<scenario>)")
    rep.add_argument("--all-runs", action="store_true", help="every run found, not only the newest per scenario")
    rep.set_defaults(func=cmd_report)

    ls = sub.add_parser("list", help="list the scenarios and their case counts")
    ls.add_argument("--scenarios", default="scenarios")
    ls.set_defaults(func=cmd_list)

    en = sub.add_parser("env", help="print the versions and device a run would record")
    en.set_defaults(func=cmd_env)

    pl = sub.add_parser("plan", parents=[scen], help="print a scenario's cases without running them")
    pl.set_defaults(func=cmd_plan)

    stat = argparse.ArgumentParser(add_help=False)
    stat.add_argument("--results", default="results", help="results folder selectors look in (default: results)")
    stat.add_argument("--reports", default="reports", help="reports folder (default: reports)")
    stat.add_argument("--min-effect", type=_fraction, default=0.05,
                      help="smallest change worth a verdict, as a fraction (default: 0.05 = 5%%)")
    stat.add_argument("--confidence", type=_fraction, default=0.99, help="interval confidence (default: 0.99)")

    co = sub.add_parser("compare", parents=[stat], help="compare two sets of runs case by case (exit 1 on --fail-on)",
                        description="Selectors: a results file or folder, a run id (prefix), or comma-joined "
                        "terms such as torch=2.13.0,scenario=cpu,runs=3 (see suite/results/select.py).")
    co.add_argument("baseline", help="selector of the baseline runs (e.g. torch=2.13.0 or results/cpu,skip=1)")
    co.add_argument("candidate", help="selector of the candidate runs (e.g. torch=2.14.1 or results/cpu)")
    co.add_argument("--fail-on", default="regressed",
                    help="verdicts that make the exit status 1, comma-separated (default: regressed; e.g. "
                    "regressed,new-failure,time:regressed; none to never fail)")
    co.add_argument("--noise", type=_fraction, default=None,
                    help="run-to-run noise as a relative sd (0.03 = 3%%); default: estimated from the cases")
    co.add_argument("--resamples", type=int, default=2000, help="bootstrap resamples (default: 2000)")
    co.add_argument("--seed", type=int, default=0, help="bootstrap seed, for reproducible reports (default: 0)")
    co.add_argument("--any-scenario", action="store_true", help="join on case_id even across different scenarios")
    co.add_argument("--out", help="report folder (default: reports/compare/<scenario>/<baseline>_vs_<candidate>)")
    co.set_defaults(func=cmd_compare)

    hi = sub.add_parser("history", parents=[stat], help="each case's speedup over the stored runs, change points marked")
    hi.add_argument("scenario", help="scenario name (its runs are in <results>/<scenario>/)")
    hi.add_argument("--last", type=int, help="only the newest N runs")
    hi.add_argument("--out", help="report folder (default: reports/history/<scenario>)")
    hi.set_defaults(func=cmd_history)

    ex = sub.add_parser("export", help="write runs as pytest-benchmark JSON (for `pytest-benchmark compare`)")
    ex.add_argument("selector", help="which runs (selector, as for compare; runs=all for several)")
    ex.add_argument("-o", "--out", required=True, help="a .json file (one run) or a folder (one file per run)")
    ex.add_argument("--results", default="results", help="results folder (default: results)")
    ex.set_defaults(func=cmd_export)

    im = sub.add_parser("import", help="store a pytest-benchmark JSON file as a run in the results folder")
    im.add_argument("files", nargs="+", help="pytest-benchmark JSON files (--benchmark-json or --benchmark-save)")
    im.add_argument("--results", default="results", help="results folder (default: results)")
    im.add_argument("--scenario", help="scenario name to file it under (default: from the file, else pytest-benchmark)")
    im.add_argument("--label", help="a label for the run, selectable with label=TEXT")
    im.set_defaults(func=cmd_import)
    return p


class Printable:
    """A text stream that drops control characters (ESC, BEL, CR, ...; not newline or tab) from what
    is written: scenario descriptions, failure reasons and record values reach the terminal, and
    none of them may move its cursor, retitle it or ring it."""

    _CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")

    def __init__(self, stream):
        self._stream = stream

    def write(self, text: str) -> int:
        self._stream.write(self._CONTROL.sub("", text))
        return len(text)

    def __getattr__(self, name):
        return getattr(self._stream, name)


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    streams = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = Printable(sys.stdout), Printable(sys.stderr)
    try:
        return _dispatch(args)
    finally:
        sys.stdout, sys.stderr = streams


def _dispatch(args) -> int:
    try:
        return args.func(args)
    except UserError as err:
        print(f"mpsuite: error: {err}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # output piped into `head` and closed early: not an error
        sys.stderr.close()
        return 0
    except OSError as err:  # an output folder that is not writable, a full disk: the user's to fix
        where = f"{err.filename}: " if err.filename else ""
        print(f"mpsuite: error: {where}{err.strerror or err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("mpsuite: interrupted", file=sys.stderr)
        return 130


def entry() -> int:
    """The process entry point (`mpsuite`, `python -m suite`): `main`, then an immediate exit where
    an interrupted run left a case running. Everything finished is already durable in the journal,
    and the abandoned call may take minutes more; interpreter shutdown would wait on it."""
    code = main()
    if _ABANDONED:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    return code
