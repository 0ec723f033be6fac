"""`run`: run a scenario, store its records, render its report; the summary of what it came to."""

from __future__ import annotations

import sys

from suite.cli import arguments
from suite.cli.arguments import Command, arg
from suite.cli.output import note, print_json, table
from suite.measure.executors.process import DEFAULT_TIMEOUT_S

# run's arguments, each declared once: its parser, and every printed command that resumes the run
# repeats each one `resumed` as it was given (`resumed_words`, kept in the run's journal). A resumed
# shard takes its shard and run group from its journal; a dry run stores nothing to resume.
ARGUMENTS = [
    *arguments.SCENARIO, *arguments.QUIET, *arguments.JSON, arguments.RESULTS, arguments.REPORTS,
    arg("--device", choices=["auto", "cpu", "cuda"], help="override the scenario's device"),
    arg("--no-report", action="store_true", help="store records only"),
    arg("--require-measured", action="store_true",
        help="exit 1 when no case was measured (every one skipped or failed), e.g. a GPU runner "
        "whose CUDA is broken; the records are stored either way"),
    arg("--resume", metavar="RUN_ID", type=arguments.run_id, resumed=False,  # a resume names the run anew
        help="finish an interrupted run: run only the cases missing from its journal"),
    arg("--isolate", action="store_true", help="run each setting (a baseline and the precisions against it, timed "
        "together) in its own subprocess, so a crash costs one case and a hang one setting"),
    arg("--case-timeout", metavar="SECONDS", type=arguments.seconds,
        help=f"fail a case that runs longer (a setting: this times its cases), with --isolate (default: "
        f"{DEFAULT_TIMEOUT_S:g}) or in a CUDA run's worker (default: 10 case caps, at least 300)"),
    arg("--threads", metavar="N", type=arguments.threads,
        help="torch's intra-op CPU threads for the run (default: the scenario's `threads`, else "
        "torch's default of one per core); recorded as cpu_threads"),
    arg("--group", metavar="NAME", resumed=False,
        help="with --shard: the run group every shard of the fleet run shares (default: "
        "$MPSUITE_RUN_GROUP, else slurm-$SLURM_ARRAY_JOB_ID or gha-$GITHUB_RUN_ID-$GITHUB_RUN_ATTEMPT); "
        "a shard started again under it resumes its own run"),
    arg("--executor", choices=["local", "ray"], default="local",
        help="ray: run the cases on a Ray cluster, one worker per GPU (else per node), records "
        "journaled here (needs the fleet extra)"),
    arg("--address", metavar="ADDR", help="with --executor ray: the cluster (default: $RAY_ADDRESS, else a local one)"),
    arg("--dry-run", metavar="GPU", resumed=False,
        help="run no case: each case's support check, prepare and one call on fake CUDA "
        "tensors as on GPU (h100, h200, a100, b200, ... of the peak table), on any machine with torch's CUDA build "
        "(docs/gpu-check.md); nothing is timed or stored, exit 1 when a case fails"),
]

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
                               only=args.only, shard=part, group=group, executor=options,
                               options=tuple(resumed_words(args)))


def _summary(args, result) -> None:
    """What the run came to (`suite.analysis.outcome.summary`): a table and headline lines, or one JSON document."""
    from suite.analysis.outcome import summary

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


def resumed_words(args) -> list[str]:
    """The words of every option of run declared `resumed`, as given: what a resume repeats."""
    return [word for argument in ARGUMENTS if argument.resumed and not argument.positional
            for word in argument.words(args)]


def resume_command(args, run_id: str) -> str:
    """The command line that continues this run: its scenario as given, --resume RUN_ID, the same options."""
    from suite.results import resume

    return resume.command(args.scenario, run_id, resumed_words(args))


COMMAND = Command("run", main, "run a scenario, store its records, render its report", ARGUMENTS)
