"""`run SCENARIO --dry-run GPU`: every case on fake CUDA tensors, as on that GPU (suite/measure/dryrun).

A line per case as it finishes (progress on stderr), then the cases that failed or were beyond a
fake run, the skipped ones by reason, and the counts; `--json` prints one document instead (docs/schemas/dry-run.schema.json). Exit
status 1 when a case failed. Nothing is timed or written to results/."""

from __future__ import annotations

import sys
import time
from collections import Counter

from suite.cli.output import info, note, print_json, table

COLUMNS = [("status", "status"), ("workload", "workload"), ("precision", "precision"), ("shape", "shape"),
           ("params", "params"), ("reason", "reason")]


def main(args) -> int:
    from suite.core.errors import UserError
    from suite.measure import dryrun
    from suite.measure.dryrun import launch
    from suite.scenario import plan, spec

    gpu = dryrun.resolve_gpu(args.dry_run)
    if gpu is None:
        raise UserError(f"--dry-run {args.dry_run!r}: not a GPU of the peak table; valid: {dryrun.gpu_names()}")
    scenario = spec.resolve(args.scenario, args.scenarios)  # a bad name is one line before anything starts
    total = len(plan.only(plan.expand(scenario), args.only))
    version, cuda = launch.torch_build()
    launch.check_torch(version, cuda)  # one line, before anything starts
    info(args, f"dry run of {scenario.name} ({total} cases) on a fake {gpu.label} (compute capability "
               f"{gpu.capability[0]}.{gpu.capability[1]}), torch {version}: nothing is timed or stored")
    began, found = time.monotonic(), []
    for outcome in launch.outcomes(args.scenario, args.scenarios, gpu, args.only, int(args.case_timeout or 300)):
        found.append(outcome)
        info(args, f"[{len(found)}/{total}] {outcome.status:7} {outcome.seconds:6.1f}s {_name(outcome)}: "
                   f"{_short(outcome.reason)}")
    seconds = time.monotonic() - began
    if args.json:
        print_json(dryrun.document(scenario.name, gpu, version, found, seconds))
    else:
        _table(found)
        counts = dryrun.counts(found)
        print(f"{scenario.name} on a fake {gpu.label}: " + ", ".join(f"{n} {s}" for s, n in counts.items())
              + f" of {len(found)} cases in {seconds:.0f} s")
    if any(o.status == "failed" for o in found):
        note("a case failed on fake CUDA tensors: it would fail on the GPU too (the reason says why)")
        return 1
    return 0


def _name(outcome) -> str:
    params = ",".join(f"{k}={v}" for k, v in sorted(outcome.params.items()))
    return " ".join(p for p in (outcome.workload, outcome.precision, outcome.shape, params) if p)


def _short(text: str, limit: int = 160) -> str:
    line = " ".join(text.split())
    return line if len(line) <= limit else line[: limit - 3] + "..."


def _table(found) -> None:
    """The cases that failed or were beyond a fake run, one row each (failed first), then the
    skipped ones, one row per reason with their count; ok ones are only counted."""
    rows = [{**o.row(), "params": ",".join(f"{k}={v}" for k, v in sorted(o.params.items())), "shape": o.shape or "",
             "reason": o.reason if o.status == "failed" else _short(o.reason, 260)}
            for o in sorted(found, key=lambda o: o.status != "failed") if o.status in ("failed", "beyond")]
    if rows:
        table(rows, COLUMNS, "Cases that failed or were beyond a fake run")
    skipped = Counter((o.precision, o.reason) for o in found if o.status == "skipped")
    if skipped:
        table([{"cases": n, "precision": p, "reason": r} for (p, r), n in skipped.most_common()],
              [("cases", "cases"), ("precision", "precision"), ("reason", "reason")], "Skipped, by reason")
    sys.stdout.flush()
