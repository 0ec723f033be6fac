"""`mpsuite` / `python -m suite`: thin adapters from the command line to plain functions."""

from __future__ import annotations

import argparse
import dataclasses
import io
import json
import os
import shutil
import sys
from pathlib import Path

from suite.errors import UserError
from suite.results import location
from suite.text import Printable


def cmd_run(args) -> int:
    import pandas as pd

    from suite import pipeline
    from suite.scenario import spec

    from suite.fleet import shard

    scenario = spec.resolve(args.scenario, args.scenarios)
    part = shard.parse(args.shard) if args.shard else None
    group = shard.group_name(args.group) if part is not None else args.group
    try:
        result = pipeline.run_scenario(
            scenario, args.results, None if args.no_report else args.reports, args.device, not args.quiet,
            resume=args.resume, isolate=args.isolate, case_timeout=args.case_timeout, threads=args.threads,
            max_cases=args.max_cases, only=args.only, shard=part, group=group, executor=args.executor,
            address=args.address,
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
            from suite.results import store

            print(f"mpsuite: a partial report of the finished cases: python -m suite report "
                  f"{store.scenario_dir(args.results, stop.scenario)}", file=sys.stderr)
        global _ABANDONED
        _ABANDONED = _ABANDONED or stop.abandoned
        return 128 + stop.signal  # the shell's convention: 130 for Ctrl-C, 143 for SIGTERM
    from suite import report

    records = pd.DataFrame(result.records)
    lines = report.headline(records if result.group_records is None else pd.DataFrame(result.group_records))
    if args.json:
        _json({"run_id": result.run_id, "results": str(result.path),
               "report": str(result.report_files[0].parent) if result.report_files else None,
               "cases": len(records), "failed": result.failed, "headline": lines,
               "summary": report.summary_rows(records)})
    else:
        _table(report.summary_rows(records), report.SUMMARY_COLUMNS, "Summary (geomean speedup over the in-run baseline)")
        for line in lines:
            print(f"mpsuite: {line}", file=sys.stderr)
    if result.failed:
        print(f"mpsuite: {result.failed} case(s) failed; see the 'reason' column", file=sys.stderr)
    measured = int((records["status"] == "ok").sum())
    if args.require_measured and not measured:
        print(f"mpsuite: no case was measured (all {len(records)} skipped or failed) and --require-measured "
              "is set: on a GPU runner, a broken CUDA install looks like this", file=sys.stderr)
        return 1
    return 1 if result.failed else 0


def _json(doc) -> None:
    """One JSON document on stdout (the `--json` output of every command; docs/cli.md)."""
    print(json.dumps(doc, indent=2, default=str, allow_nan=False))


def _table(rows: list[dict], columns: list[tuple[str, str]], title: str | None = None) -> None:
    """A table on stdout: rich's box drawing on a terminal, plain columns when piped."""
    from rich.console import Console
    from rich.table import Table

    from rich import box

    table = Table(title=title, title_justify="left", box=box.SIMPLE_HEAD if sys.stdout.isatty() else None,
                  show_edge=False, pad_edge=False)
    for _, heading in columns:
        table.add_column(heading, overflow="fold")
    for row in rows:
        table.add_row(*(str(row.get(key, "")) for key, _ in columns))
    tty = sys.stdout.isatty()
    buffer = io.StringIO()
    Console(file=buffer, width=shutil.get_terminal_size().columns if tty else 240, force_terminal=tty,
            highlight=False, emoji=False, markup=False).print(table)
    print("\n".join(line.rstrip() for line in buffer.getvalue().splitlines()))


def _info(args, message: str) -> None:
    """A progress note on stderr, unless --quiet."""
    if not getattr(args, "quiet", False):
        print(f"mpsuite: {message}", file=sys.stderr)


# Set when a run was interrupted while a case was still inside a call Python cannot stop (a
# minute-long GEMM on the worker thread): `entry` then exits without waiting for it.
_ABANDONED = False


def resume_command(args, run_id: str) -> str:
    """The command line that continues this run: the same options, plus --resume."""
    import shlex

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
    from suite.analysis import derived, fleet
    from suite import report
    from suite.results import store

    # an interrupted run renders as a partial report; a lean read (store.read_file) for a big one
    df = store.read(args.results, unfinished=True, lean=True)
    if not args.all_runs:
        df = fleet.latest_runs(df)  # per device: the fleet's newest run of each card
    scenarios = sorted(df["scenario"].unique())
    for name in scenarios:
        if args.out is None:
            out = Path("reports") / name
        else:
            out = location.where(args.out) / name if len(scenarios) > 1 else location.where(args.out)
        written = report.render(derived.rows(df, df["scenario"] == name), out)
        _info(args, f"report in {out}/ ({', '.join(p.name for p in written)})")
    return 0


def cmd_list(args) -> int:
    from suite.scenario import plan, spec

    problems: list[str] = []
    folder = spec.find_folder(args.scenarios)
    found = spec.load_dir(folder, problems)
    listed = []
    for name, (path, scenario) in found.items():
        bound = plan.count(scenario)
        listed.append({"name": name, "cases": len(plan.expand(scenario)) if bound <= plan.MAX_CASES else None,
                       "max_cases": bound, "path": str(path), "description": scenario.description})
    if args.json:
        _json({"folder": str(folder), "scenarios": listed, "problems": problems})
    for row in [] if args.json else listed:
        cases = f"{row['cases']:>5}" if row["cases"] is not None else f"<= {row['max_cases']:,}"
        print(f"{row['name']:<16} {cases} cases  {row['path']}  {row['description']}")
    for problem in problems:
        print(f"mpsuite: warning: left out {problem}", file=sys.stderr)
    if problems:
        raise UserError(f"{len(problems)} scenario file(s) in {folder} do not load (listed above); "
                        "the others are listed")
    if not found:
        raise UserError(f"no scenario files (*.toml) in {folder.resolve()}")
    return 0


def cmd_plan(args) -> int:
    from suite.scenario import plan, spec

    scenario = spec.resolve(args.scenario, args.scenarios)
    plan.check_size(scenario, args.max_cases)
    cases = plan.only(plan.expand(scenario), args.only)
    if args.shards:
        return _print_shards(cases, args.shards, args.json)
    if args.shard:
        from suite.fleet import shard

        cases = shard.select(cases, shard.parse(args.shard))
    if args.json:
        _json({"scenario": scenario.name, "cases": [
            {"case_id": c.case_id, "workload": c.workload, "precision": c.precision, "baseline": c.baseline,
             "m": c.m, "k": c.k, "n": c.n, "params": c.params, "label": c.label} for c in cases]})
        return 0
    # one write: a million print calls (each filtered for control characters) cost seconds
    sys.stdout.write("".join([f"{case.case_id}  {case.label}\n" for case in cases]))
    return 0


def _print_shards(cases, count: int, as_json: bool) -> int:
    """`plan --shards N`: how the cases split over N shards, with each shard's estimated cost."""
    from suite.fleet import shard

    from collections import Counter

    per_shard, loads = Counter(shard.assign(cases, count)), shard.loads(cases, count)
    rows = [{"shard": k, "cases": per_shard[k], "estimated_s": round(loads[k], 1)} for k in range(count)]
    if as_json:
        _json({"shards": rows})
    else:
        for row in rows:
            print(f"shard {row['shard']}/{count}: {row['cases']:>5} cases, ~{row['estimated_s']:g} s (prior)")
    return 0


def cmd_predict(args) -> int:
    from suite.analysis import predict
    from suite.scenario import spec

    result = predict.predict_scenario(spec.resolve(args.scenario, args.scenarios), args.device, args.only)
    if args.json:
        _json(result)
        return 0
    dev = result["device"]
    rows = [{**r, "shape": f"{r['m']}x{r['k']}x{r['n']}" if r["m"] is not None else "",
             "params": " ".join(f"{k}={v}" for k, v in sorted(r["params"].items())),
             **{key: _fmt(r.get(key), spec_) for key, spec_ in PREDICT_FORMATS}} for r in result["cases"]]
    _table(rows, PREDICT_COLUMNS, f"{result['scenario']} on {dev['label']}, predicted by the roofline model "
                                  "(docs/model.md)")
    for row in result["crossovers"]:
        print(f"mpsuite: {row['text']}", file=sys.stderr)
    return 0


PREDICT_COLUMNS = [("workload", "workload"), ("shape", "MxKxN"), ("params", "params"), ("precision", "precision"),
                   ("predicted_ms", "predicted ms"), ("tflops", "TFLOP/s"), ("speedup", "speedup"),
                   ("bound", "bound"), ("gemm_ms", "GEMM ms"), ("cast_ms", "cast ms"), ("note", "not modelled")]
PREDICT_FORMATS = [("predicted_ms", ".4g"), ("tflops", ".4g"), ("speedup", ".3g"), ("gemm_ms", ".4g"),
                   ("cast_ms", ".4g")]


def _fmt(value, spec_: str) -> str:
    return "" if value is None else format(value, spec_)


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

    options = compare.Options(min_effect=args.min_effect, confidence=args.confidence, min_runs=args.min_runs,
                              noise=args.noise, fail_on=compare.parse_fail_on(args.fail_on),
                              any_scenario=args.any_scenario)
    baseline, candidate = compare.load_sides(args.baseline, args.candidate, args.results)
    result = compare.compare(baseline, candidate, options)
    out = location.where(args.out) if args.out else compare_page.default_dir(result, args.reports)
    written = compare_page.render(result, out)
    failing = result.failing()
    if args.json:
        view = compare_page.build_view(result)
        _json({**{role: {k: side[k] for k in ("selector", "runs", "summary")}
                  for role, side in zip(("baseline", "candidate"), view["sides"])},
               "gate": view["gate"], "headline": view["headline"], "counts": result.counts(),
               "failing": list(failing["case_id"]), "report": str(out),
               "drift": [{**dataclasses.asdict(d), "sentence": d.sentence} for d in result.drift],
               "differences": result.environment.as_json()["differences"],
               "cases": json.loads(result.cases.drop(columns=["effect"], errors="ignore").to_json(orient="records"))})
    else:
        print(compare_page.text_summary(result, failing))
    for warning in result.warnings:
        print(f"mpsuite: note: {warning}", file=sys.stderr)
    _info(args, f"comparison report in {out}/ ({', '.join(p.name for p in written)})")
    if len(failing):
        print(f"mpsuite: {len(failing)} case(s) fail the gate --fail-on {','.join(options.fail_on)}", file=sys.stderr)
    return 1 if len(failing) else 0


def cmd_recommend(args) -> int:
    from suite.analysis import answers, derived
    from suite.results import store

    budget = answers.Budget(max_rel_err=args.max_rel_err, min_sqnr_db=args.min_sqnr_db,
                            max_loss_delta=args.max_loss_delta)
    df = store.read(args.results)
    if not args.all_runs:
        df = derived.latest_runs(df)
    picks = answers.recommend(df, budget)
    if args.json:
        _json({"budget": {k: v for k, v in vars(budget).items() if v is not None},
               "picks": json.loads(picks.to_json(orient="records"))})
        return 0
    rows = [{**r, "pick": r["pick"] or "none within budget",
             "speedup": "" if pd_isna(r["speedup"]) else f"{r['speedup']:.3g}x",
             "error": _error_text(r)} for r in picks.to_dict("records")]
    _table(rows, [("workload", "workload"), ("setting", "case"), ("baseline", "baseline"), ("pick", "pick"),
                  ("speedup", "speedup"), ("error", "its error"), ("rejected", "faster, but over budget"),
                  ("not_timed", "within budget, not timed here")], f"Fastest precision with {budget.describe()}")
    return 0


def pd_isna(value) -> bool:
    return value is None or (isinstance(value, float) and value != value)


def _error_text(row: dict) -> str:
    parts = [f"rel. error {row['rel_err']:.2e}" if not pd_isna(row.get("rel_err")) else "",
             f"SQNR {row['sqnr_db']:.1f} dB" if not pd_isna(row.get("sqnr_db")) else "",
             f"loss delta {row['loss_delta_vs_fp32']:+.3g}" if not pd_isna(row.get("loss_delta_vs_fp32")) else ""]
    return ", ".join(p for p in parts if p)


def cmd_history(args) -> int:
    from suite.analysis import history
    from suite.report import history_page

    options = history.Options(min_effect=args.min_effect, confidence=args.confidence, min_runs=args.min_runs,
                              noise=args.noise)
    result = history.build(args.scenario, args.results, last=args.last, options=options)
    out = location.where(args.out or location.where(args.reports) / "history" / args.scenario)
    written = history_page.render(result, out)
    if args.json:
        _json({**history_page.json_view(result), "report": str(out)})
    else:
        print(history_page.text_summary(result))
    _info(args, f"history report in {out}/ ({', '.join(p.name for p in written)})")
    return 0


def cmd_env_diff(args) -> int:
    from suite.analysis import derived, envdiff
    from suite.results import select

    sides = [select.select(text, args.results, role=role) for text, role in ((args.a, "A"), (args.b, "B"))]
    shared = set(sides[0]["run_id"]) & set(sides[1]["run_id"])
    if shared:
        raise UserError(f"A and B both select run(s) {', '.join(sorted(shared))}; a run has no difference with itself")
    both = sides[0].drop_duplicates("case_id")
    labels = dict(zip(both["case_id"], both["workload"] + " " + both["precision"] + " " + derived.shape_labels(both)))
    result = envdiff.diff(*sides, labels)
    runs = [sorted(side["run_id"].unique()) for side in sides]
    if args.json:
        _json({"a": {"selector": args.a, "runs": runs[0]}, "b": {"selector": args.b, "runs": runs[1]},
               **result.as_json(), "lines": result.lines()})
        return 0
    print(f"A {args.a}: {', '.join(runs[0])}")
    print(f"B {args.b}: {', '.join(runs[1])}")
    for line in result.lines() or ["nothing recorded differs"]:
        print(f"  {line}")
    return 0


def cmd_export(args) -> int:
    from suite.analysis import bench_json
    from suite.results import select

    df = select.select(args.selector, args.results, role="export")
    for path in bench_json.export(df, args.out):
        _info(args, f"wrote {path}")
    return 0


def cmd_import(args) -> int:
    from suite.analysis import bench_json

    for file in args.files:
        path = bench_json.import_file(file, args.results, scenario=args.scenario, label=args.label)
        _info(args, f"imported {file} as {path}")
    return 0


def _min_runs(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number of runs >= 1, got {text!r}")
    return value


def _fraction(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not 0 <= value < 1:
        raise argparse.ArgumentTypeError(f"expected a fraction in [0, 1) (0.05 = 5%), got {text!r}")
    return value


def _version() -> str:
    """`mpsuite X (torch Y, torchao Z, python W)`, from installed metadata (nothing imported)."""
    from importlib import metadata

    def have(name):
        try:
            return metadata.version(name)
        except metadata.PackageNotFoundError:
            return None

    extras = [f"{n} {v}" for n in ("torch", "torchao", "transformer_engine") if (v := have(n))]
    return f"mpsuite {have('mpsuite') or 'unknown'} ({', '.join(extras + [f'python {sys.version.split()[0]}'])})"


def _count(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number of cases, at least 1, got {text!r}")
    return int(text)


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
# that the history default is suite.analysis.history.Options().min_runs).
DEFAULT_FAIL_ON = ("regressed", "time:regressed", "new-failure", "new-skip")
DEFAULT_MIN_RUNS = 2
DEFAULT_HISTORY_MIN_RUNS = 3


def parser() -> argparse.ArgumentParser:
    from suite.measure.isolate import DEFAULT_TIMEOUT_S
    from suite.scenario.plan import MAX_CASES

    p = argparse.ArgumentParser(prog="mpsuite", description="Mixed-precision benchmarks: speed and accuracy side by "
                                "side. Exit status: 0 ok, 1 a case failed (run) or matched --fail-on (compare), "
                                "2 bad input (one line says what). docs/cli.md has every command.")
    p.add_argument("--version", action="version", version=_version())
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--quiet", action="store_true", help="no progress or 'written to' lines on stderr "
                        "(errors and warnings still)")
    as_json = argparse.ArgumentParser(add_help=False)
    as_json.add_argument("--json", action="store_true", help="print one JSON document on stdout (shape: docs/cli.md)")
    scenarios = argparse.ArgumentParser(add_help=False)
    scenarios.add_argument("--scenarios", metavar="DIR", help="folder of scenario files (default: $MPSUITE_SCENARIOS, "
                           "else ./scenarios, else the scenarios shipped with mpsuite)")
    scen = argparse.ArgumentParser(add_help=False, parents=[scenarios])
    scen.add_argument("scenario", help="scenario name (from --scenarios) or path to a .toml file")
    scen.add_argument("--max-cases", metavar="N", type=_count,
                      help=f"refuse a scenario of more cases than this (default: {MAX_CASES:,})")
    scen.add_argument("--only", metavar="TERMS", action="append",
                      help="only the cases matching TERMS: comma-joined key=pattern (workload, precision, m, k, n, "
                      "shape such as 2048x*, or a parameter; shell wildcards) or words of the case's label; "
                      "repeat for 'or' (e.g. --only precision=bf16,shape=2048x* --only workload=linear)")
    scen.add_argument("--shard", metavar="K/N",
                      help="only shard K (from 0) of N: a deterministic, cost-balanced slice, the same on every "
                      "machine; auto: a SLURM job array's task; auto/N: a Kubernetes Indexed Job's "
                      "JOB_COMPLETION_INDEX (docs/fleet.md)")

    r = sub.add_parser("run", parents=[scen, common, as_json], help="run a scenario, store its records, render its report")
    r.add_argument("--results", default="results", help=f"results folder (default: results){URL_HELP}")
    r.add_argument("--reports", default="reports", help=f"reports folder (default: reports){URL_HELP}")
    r.add_argument("--device", choices=["auto", "cpu", "cuda"], help="override the scenario's device")
    r.add_argument("--no-report", action="store_true", help="store records only")
    r.add_argument("--require-measured", action="store_true",
                   help="exit 1 when no case was measured (every one skipped or failed), e.g. a GPU runner "
                   "whose CUDA is broken; the records are stored either way")
    r.add_argument("--resume", metavar="RUN_ID", type=_run_id,
                   help="finish an interrupted run: run only the cases missing from its journal")
    r.add_argument("--isolate", action="store_true",
                   help="run each case in its own subprocess, so a crash or hang costs one case")
    r.add_argument("--case-timeout", metavar="SECONDS", type=_seconds,
                   help=f"fail a case that runs longer, with --isolate (default: {DEFAULT_TIMEOUT_S:g}) or in a "
                        "CUDA run's worker (default: 10 case caps, at least 300)")
    r.add_argument("--threads", metavar="N", type=_threads,
                   help="torch's intra-op CPU threads for the run (default: the scenario's `threads`, else "
                   "torch's default of one per core); recorded as cpu_threads")
    r.add_argument("--group", metavar="NAME",
                   help="with --shard: the run group every shard of the fleet run shares (default: "
                   "$MPSUITE_RUN_GROUP, else slurm-$SLURM_ARRAY_JOB_ID or gha-$GITHUB_RUN_ID-$GITHUB_RUN_ATTEMPT); "
                   "a shard started again under it resumes its own run")
    r.add_argument("--executor", choices=["local", "ray"], default="local",
                   help="ray: run the cases on a Ray cluster, one worker per GPU (else per node), records "
                   "journaled here (needs the fleet extra)")
    r.add_argument("--address", metavar="ADDR", help="with --executor ray: the cluster (default: $RAY_ADDRESS, "
                   "else a local one)")
    r.set_defaults(func=cmd_run)

    rep = sub.add_parser("report", parents=[common], help="render a report from stored results")
    rep.add_argument("results", nargs="+", help=f"results files or folders (e.g. results/cpu){URL_HELP}")
    rep.add_argument("--out", help="output folder (default: reports/<scenario>)")
    rep.add_argument("--all-runs", action="store_true",
                     help="every run found, not only the newest per scenario and device (records of several "
                     "devices make a fleet report: each device's, and their speedups side by side)")
    rep.set_defaults(func=cmd_report)

    ls = sub.add_parser("list", parents=[scenarios, common, as_json], help="list the scenarios and their case counts")
    ls.set_defaults(func=cmd_list)

    pr = sub.add_parser("predict", parents=[scenarios, common, as_json],
                        help="the roofline model's table for a scenario on a GPU, without running it",
                        description="Each case's predicted time, TFLOP/s, speedup over its baseline and bound "
                        "(compute, memory, overhead) on a GPU of the peak table, and where each recipe starts to "
                        "pay (docs/model.md). Runs on any machine in seconds: plan a GPU lease with it.")
    pr.add_argument("scenario", help="scenario name (from --scenarios) or path to a .toml file")
    pr.add_argument("--device", required=True, help="a GPU of the peak table: a100, a100-pcie, h100, h100-pcie, "
                    "h100-nvl, h200, gh200, b200, gb200, l4, l40s (or a driver name such as 'NVIDIA H100 80GB HBM3')")
    pr.add_argument("--only", metavar="TERMS", action="append", help="only the cases matching TERMS (as for run)")
    pr.set_defaults(func=cmd_predict)

    en = sub.add_parser("env", parents=[common], help="print the versions and device a run would record")
    en.set_defaults(func=cmd_env)

    pl = sub.add_parser("plan", parents=[scen, common, as_json], help="print a scenario's cases without running them")

    rc = sub.add_parser("recommend", parents=[common, as_json],
                        help="the fastest precision per case within an accuracy budget, from stored results",
                        description="Per case (workload x shape x parameters), the fastest measured precision whose "
                        "accuracy meets every bound given, with its speedup over the in-run baseline. Emulated "
                        "precisions (FP8 on a CPU) have no speed to rank and are listed apart. Example: "
                        "python -m suite recommend results/h100_fp8 --max-rel-err 1e-2")
    rc.add_argument("results", nargs="+", help="results files or folders (e.g. results/h100_fp8)")
    rc.add_argument("--max-rel-err", type=float, metavar="X", help="relative error against the reference at most X")
    rc.add_argument("--min-sqnr-db", type=float, metavar="DB", help="SQNR at least DB decibels")
    rc.add_argument("--max-loss-delta", type=float, metavar="NATS",
                    help="training steps: |final loss - the fp32 twin's| at most NATS")
    rc.add_argument("--all-runs", action="store_true", help="every run found, not only the newest per scenario")
    rc.set_defaults(func=cmd_recommend)
    pl.add_argument("--shards", metavar="N", type=_count,
                    help="print how the cases split over N shards (cases and estimated seconds per shard)")
    pl.set_defaults(func=cmd_plan)

    stat = argparse.ArgumentParser(add_help=False, parents=[common])
    stat.add_argument("--results", default="results", help=f"results folder selectors look in (default: results){URL_HELP}")
    stat.add_argument("--reports", default="reports", help=f"reports folder (default: reports){URL_HELP}")
    stat.add_argument("--min-effect", type=_fraction, default=0.05,
                      help="smallest change worth a verdict, as a fraction (default: 0.05 = 5%%)")
    stat.add_argument("--confidence", type=_fraction, default=0.99,
                      help="interval confidence per case; compare's gate holds it family-wise (default: 0.99)")

    co = sub.add_parser("compare", parents=[stat, as_json],
                        help="compare two sets of runs case by case (exit 1 on --fail-on)",
                        formatter_class=argparse.RawDescriptionHelpFormatter,
                        description="Compare two sets of runs case by case; each side is a selector.",
                        epilog=SELECTOR_HELP)
    co.add_argument("baseline", help="selector of the baseline runs (e.g. torch=2.13.0 or results/cpu,skip=1)")
    co.add_argument("candidate", help="selector of the candidate runs (e.g. torch=2.14.1 or results/cpu)")
    co.add_argument("--fail-on", default=",".join(DEFAULT_FAIL_ON),
                    help="verdicts that make the exit status 1, comma-separated; the time: prefix gates on "
                    f"absolute times (default: {','.join(DEFAULT_FAIL_ON)}; none to never fail). regressed and "
                    "improved must also hold at the family-wise --confidence (Holm over the cases)")
    co.add_argument("--min-runs", type=_min_runs, default=DEFAULT_MIN_RUNS,
                    help=f"runs per side a case needs for a regressed/improved verdict (default: {DEFAULT_MIN_RUNS}; "
                    "record 3 per side); with fewer it is insufficient-runs")
    co.add_argument("--noise", type=_fraction, default=None,
                    help="a known run-to-run sd of one run's value, relative (0.03 = 3%%), used as a floor under "
                    "the estimate; with --min-runs 1 it lets single runs be compared (default: estimated only)")
    co.add_argument("--any-scenario", action="store_true", help="join on case_id even across different scenarios")
    co.add_argument("--out", help="report folder (default: reports/compare/<scenario>/<baseline>_vs_<candidate>)")
    co.set_defaults(func=cmd_compare)

    hi = sub.add_parser("history", parents=[stat, as_json],
                        help="each case's speedup and time over the stored runs, change points marked")
    hi.add_argument("scenario", help="scenario name (its runs are in <results>/<scenario>/)")
    hi.add_argument("--last", type=int, help="only the newest N runs")
    hi.add_argument("--min-runs", type=_min_runs, default=DEFAULT_HISTORY_MIN_RUNS,
                    help=f"runs a change point needs on each side (default: {DEFAULT_HISTORY_MIN_RUNS})")
    hi.add_argument("--noise", type=_fraction, default=None,
                    help="a known run-to-run sd of one run's value, relative (0.03 = 3%%), a floor under the estimate")
    hi.add_argument("--out", help="report folder (default: reports/history/<scenario>)")
    hi.set_defaults(func=cmd_history)

    ed = sub.add_parser("env-diff", parents=[common, as_json],
                        help="what differs between two sets of runs: versions, device, clocks, code, kernels",
                        formatter_class=argparse.RawDescriptionHelpFormatter,
                        description="What differs between the records of two run selectors: every environment "
                        "column (torch, torchao, Transformer Engine, CUDA, driver, Python, device, clocks and power "
                        "limit, code hash, threads, ...) over the runs, and per case the kernel that ran, where "
                        "recorded.", epilog=SELECTOR_HELP)
    ed.add_argument("a", help="selector of the first runs (e.g. torch=2.13.0,runs=3)")
    ed.add_argument("b", help="selector of the second runs (e.g. torch=2.14.1,runs=3)")
    ed.add_argument("--results", default="results", help=f"results folder selectors look in (default: results){URL_HELP}")
    ed.set_defaults(func=cmd_env_diff)

    ex = sub.add_parser("export", parents=[common], help="write runs as pytest-benchmark JSON (for `pytest-benchmark compare`)")
    ex.add_argument("selector", help="which runs (selector, as for compare; runs=all for several)")
    ex.add_argument("-o", "--out", required=True, help="a .json file (one run) or a folder (one file per run)")
    ex.add_argument("--results", default="results", help=f"results folder (default: results){URL_HELP}")
    ex.set_defaults(func=cmd_export)

    im = sub.add_parser("import", parents=[common], help="store a pytest-benchmark JSON file as a run in the results folder")
    im.add_argument("files", nargs="+", help="pytest-benchmark JSON files (--benchmark-json or --benchmark-save)")
    im.add_argument("--results", default="results", help=f"results folder (default: results){URL_HELP}")
    im.add_argument("--scenario", help="scenario name to file it under (default: from the file, else pytest-benchmark)")
    im.add_argument("--label", help="a label for the run, selectable with label=TEXT")
    im.set_defaults(func=cmd_import)
    return p


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
    except Exception as err:
        if not location.is_storage_error(err):
            raise
        # results at a URL whose service cannot be used (no endpoint, no credentials): the user's to fix
        print(f"mpsuite: error: results storage: {type(err).__name__}: {err}", file=sys.stderr)
        return 2


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
