"""`run`: run a scenario, store its records, render its report; the summary of what it came to."""

from __future__ import annotations

import shlex
import sys

from suite.cli.output import note, print_json, table

# Set when a run was interrupted while a case was still inside a call Python cannot stop (a
# minute-long GEMM on the worker thread): the process entry (`suite.cli.entry`) then exits without
# waiting for it.
abandoned = False


def main(args) -> int:
    if args.dry_run:
        from suite.cli import dry_run

        return dry_run.main(args)
    from suite import pipeline

    request = _request(args)
    try:
        result = pipeline.run(request)
    except pipeline.ReportInterrupted as stop:
        print(f"mpsuite: interrupted while rendering the report; the run is stored in {stop.path} "
              f"(`python -m suite report {stop.path}` renders it)", file=sys.stderr)
        return 128 + stop.signal
    except pipeline.RunInterrupted as stop:
        return _interrupted(args, stop)
    _summary(args, result)
    if result.failed:
        print(f"mpsuite: {result.failed} case(s) failed; see the 'reason' column", file=sys.stderr)
    records = result.records
    if args.require_measured and not (records["status"] == "ok").any():
        print(f"mpsuite: no case was measured (all {len(records)} skipped or failed) and --require-measured "
              "is set: on a GPU runner, a broken CUDA install looks like this", file=sys.stderr)
        return 1
    return 1 if result.failed else 0


def _request(args):
    """The run request of a command line (the request checks its flags itself)."""
    from suite import pipeline
    from suite.fleet import shard
    from suite.measure import executors
    from suite.scenario import spec

    scenario = spec.resolve(args.scenario, args.scenarios)
    part = shard.parse(args.shard) if args.shard else None
    group = shard.group_name(args.group) if part is not None else args.group
    options = executors.Options(kind=args.executor, isolate=args.isolate, case_timeout=args.case_timeout,
                                address=args.address)
    return pipeline.RunRequest(scenario, args.results, None if args.no_report else args.reports, args.device,
                               not args.quiet, resume=args.resume, threads=args.threads, max_cases=args.max_cases,
                               only=args.only, shard=part, group=group, executor=options)


def _summary(args, result) -> None:
    """What the run came to (`suite.analysis.summary`): a table and headline lines, or one JSON document."""
    from suite.analysis import summary

    records = result.records
    lines = summary.headline(records if result.group_records is None else result.group_records)
    if args.json:
        print_json({"run_id": result.run_id, "results": str(result.path),
                    "report": str(result.report_files[0].parent) if result.report_files else None,
                    "cases": len(records), "failed": result.failed, "headline": lines,
                    "summary": summary.summary_records(records)})
        return
    table(summary.summary_rows(records), summary.SUMMARY_COLUMNS, "Summary (geomean speedup over the in-run baseline)")
    for line in lines:  # shown with --quiet too: they are the run's answer
        note(line)


def _interrupted(args, stop) -> int:
    global abandoned
    print(f"mpsuite: interrupted after {stop.done} of {stop.total} cases; they are kept in {stop.journal}",
          file=sys.stderr)
    print(f"mpsuite: to finish run {stop.run_id}: {resume_command(args, stop.run_id)}", file=sys.stderr)
    if stop.done:
        from suite.results import store

        print(f"mpsuite: a partial report of the finished cases: python -m suite report "
              f"{store.scenario_dir(args.results, stop.scenario)}", file=sys.stderr)
    abandoned = abandoned or stop.abandoned
    return 128 + stop.signal  # the shell's convention: 130 for Ctrl-C, 143 for SIGTERM


def resume_command(args, run_id: str) -> str:
    """The command line that continues this run: the same options, plus --resume."""
    parts = ["python", "-m", "suite", "run", args.scenario, "--resume", run_id]
    for flag, value, default in (("--scenarios", args.scenarios, None), ("--results", args.results, "results"),
                                 ("--reports", args.reports, "reports"), ("--device", args.device, None),
                                 ("--case-timeout", args.case_timeout, None), ("--threads", args.threads, None),
                                 ("--max-cases", args.max_cases, None), ("--executor", args.executor, "local"),
                                 ("--address", args.address, None)):
        if value != default:
            parts += [flag, str(value)]
    for terms in args.only or []:
        parts += ["--only", terms]
    parts += [flag for flag, on in (("--isolate", args.isolate), ("--no-report", args.no_report),
                                    ("--require-measured", args.require_measured),
                                    ("--quiet", args.quiet)) if on]
    return shlex.join(parts)
