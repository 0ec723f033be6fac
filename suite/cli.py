"""`mpsuite` / `python -m suite`: thin adapters from the command line to plain functions."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from suite.errors import UserError


def cmd_run(args) -> int:
    import pandas as pd

    from suite import analysis, pipeline, spec

    scenario = spec.resolve(args.scenario, args.scenarios)
    try:
        result = pipeline.run_scenario(
            scenario, args.results, None if args.no_report else args.reports, args.device, not args.quiet,
            resume=args.resume, isolate=args.isolate, case_timeout=args.case_timeout,
        )
    except pipeline.RunInterrupted as stop:
        print(f"mpsuite: interrupted after {stop.done} of {stop.total} cases; they are kept in {stop.journal}",
              file=sys.stderr)
        print(f"mpsuite: to finish run {stop.run_id}: {resume_command(args, stop.run_id)}", file=sys.stderr)
        return 130
    df = analysis.summary(pd.DataFrame(result.records))
    print(df.to_string(index=False, float_format=lambda x: f"{x:.4g}"))
    if result.failed:
        print(f"mpsuite: {result.failed} case(s) failed; see the 'reason' column", file=sys.stderr)
    return 1 if result.failed else 0


def resume_command(args, run_id: str) -> str:
    """The command line that continues this run: the same options, plus --resume."""
    import shlex

    parts = ["python", "-m", "suite", "run", args.scenario, "--resume", run_id]
    for flag, value, default in (("--scenarios", args.scenarios, "scenarios"), ("--results", args.results, "results"),
                                 ("--reports", args.reports, "reports"), ("--device", args.device, None),
                                 ("--case-timeout", args.case_timeout, None)):
        if value != default:
            parts += [flag, str(value)]
    parts += [flag for flag, on in (("--isolate", args.isolate), ("--no-report", args.no_report),
                                    ("--quiet", args.quiet)) if on]
    return shlex.join(parts)


def _run_id(text: str) -> str:
    from suite import store

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


def cmd_report(args) -> int:
    from suite import analysis, report, store

    df = store.read(args.results)
    if not args.all_runs:
        df = analysis.latest_runs(df)
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
    from suite import plan, spec

    for name, (path, scenario) in spec.load_dir(args.scenarios).items():
        print(f"{name:<16} {len(plan.expand(scenario)):>5} cases  {path}  {scenario.description}")
    return 0


def cmd_plan(args) -> int:
    from suite import plan, spec

    scenario = spec.resolve(args.scenario, args.scenarios)
    for case in plan.expand(scenario):
        print(f"{case.case_id}  {case.label}")
    return 0


def cmd_env(args) -> int:
    import torch

    from suite import env

    info = env.capture(env.resolve_device("auto"))
    keys = ["python_version", "torch_version", "cuda_version", "torchao_version", "te_version",
            "triton_version", "device_name", "compute_capability", "driver_version", "git_sha"]
    print(" | ".join(f"{k.removesuffix('_version')} {info[k]}" for k in keys if info.get(k) is not None)
          + f" | cuda available {torch.cuda.is_available()}")
    return 0


def parser() -> argparse.ArgumentParser:
    from suite.isolate import DEFAULT_TIMEOUT_S

    p = argparse.ArgumentParser(prog="mpsuite", description="Mixed-precision benchmarks: speed and accuracy side by side.")
    sub = p.add_subparsers(dest="command", required=True)
    scen = argparse.ArgumentParser(add_help=False)
    scen.add_argument("scenario", help="scenario name (from --scenarios) or path to a .toml file")
    scen.add_argument("--scenarios", default="scenarios", help="folder of scenario files (default: scenarios)")

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
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        return args.func(args)
    except UserError as err:
        print(f"mpsuite: error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("mpsuite: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # output piped into `head` and closed early: not an error
        sys.stderr.close()
        return 0
