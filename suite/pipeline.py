"""A whole run, top to bottom: a run request in (`RunRequest`, checked once), its cases planned,
run by the executor the request's options choose, each record journaled as it comes, the run stored
whole, its records handed on as the store typed them (never read back from the file just written),
its report rendered; records out (`RunResult`).

The only module that ties measure, results and report together; the CLI (`suite.cli.run`) and the
nox sessions call `run`.

How a run survives trouble:
- every finished case is appended to the run's journal (`store.start_run`) before the next starts,
  so a crash or kill loses at most the case that was running;
- Ctrl-C, SIGTERM or SIGHUP abandons the case that is running and raises `RunInterrupted`; every case
  finished before it is already in the journal (no results file yet: a parquet is only written
  for a complete run);
- `resume=RUN_ID` reopens that run's journal and runs only the cases missing from it, on the same
  kind of machine and software (`IDENTITY`), then writes the one complete parquet (which journal a
  run writes, and whether it may go on, is the store's: `suite.results.resume`);
- how each case runs is `suite.measure.executors.choose`'s: `isolate` a subprocess per case with a
  time limit; on a GPU one worker process, replaced after a case that leaves CUDA unusable or runs
  past its time limit (`case_timeout`, else ten case caps and at least five minutes), so one sticky
  CUDA error or one hang costs one case;
- a scenario asking for CUDA on a machine without it records every case as skipped, with the reason.

Fleet runs (`suite.fleet`): `shard` runs one cost-balanced slice of the cases as a run of its own,
tagged with its run group, and a shard started again under the same group and shard finds its
journal and resumes it (or, complete, does nothing); the executor option `kind="ray"` sends the
cases to Ray workers and journals their records here, on the driver.
"""

from __future__ import annotations

import hashlib
import json
import signal
import sys
import threading
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from suite.analysis.roofline import model
from suite.core.errors import UserError
from suite.fleet import shard as sharding
from suite.measure import env, executors
from suite.measure.executors.base import units
from suite.measure.progress import progress_for
from suite.results import columns, lease, location, resume, store
from suite.results.atomic import remove_stale
from suite.scenario import plan
from suite.scenario.plan import Case
from suite.scenario.spec import Scenario

# What must be the same for the records of one run to be compared with each other (speedups are
# computed within a run): a resumed run refuses to continue on anything else.
IDENTITY = tuple(columns.with_libraries((
    "device", "device_name", "compute_capability", "torch_version", "cuda_version",
    columns.LIBRARIES, "cpu_isa", "cpu_threads",
)))


@dataclass(frozen=True)
class RunRequest:
    """Everything one run is asked to do. The flags that do not depend on the machine are checked
    when the request is made, once; the rest when the device is known (`check_device`).

    `device` overrides the scenario's; `threads` (else the scenario's `threads`, else torch's
    default) sets torch's intra-op threads for the run and is restored after it. A scenario of more
    than `max_cases` cases (default `plan.MAX_CASES`) is refused before anything is expanded; `only`
    (filters, `plan.only`) runs the matching cases alone. `shard` runs that slice of them
    (`suite.fleet.shard`) as one shard of the run group `group`; `executor` says how the cases run
    (`suite.measure.executors.Options`: a Ray cluster at `address`, default $RAY_ADDRESS, else a
    local one). `options` are the caller's words for them (the CLI's), kept in the run's journal:
    every command printed to resume the run repeats them (`suite.results.resume.command`)."""

    scenario: Scenario
    results: str | Path = "results"
    reports: str | Path | None = "reports"
    device: str | None = None
    progress: bool = True
    resume: str | None = None
    threads: int | None = None
    max_cases: int | None = None
    only: list[str] | None = None
    shard: sharding.Shard | None = None
    group: str | None = None
    executor: executors.Options = field(default_factory=executors.Options)
    options: tuple[str, ...] = ()

    def __post_init__(self):
        plan.check_size(self.scenario, self.max_cases)
        kind = self.executor.kind
        if kind not in ("local", "ray"):
            raise UserError(f"executor {kind!r}: expected local or ray")
        if kind == "ray" and self.executor.isolate:
            raise UserError("--isolate and --executor ray: a Ray worker is already a process of its own per node or GPU")
        if self.executor.address is not None and kind != "ray":
            raise UserError("--address needs --executor ray")
        if self.group is not None and self.shard is None and self.resume is None:
            raise UserError("--group names the run group of shards: give --shard K/N too")

    @property
    def device_choice(self) -> str:
        return self.device or self.scenario.defaults.device

    @property
    def run_threads(self) -> int | None:
        return self.threads or self.scenario.defaults.threads

    def check_device(self, device) -> None:
        """The flags whose sense depends on the device the run resolved to."""
        ray = self.executor.kind == "ray"
        if self.executor.case_timeout is not None and not self.executor.isolate and (ray or device.type != "cuda"):
            raise UserError("--case-timeout needs --isolate here: only a case in a process of its own can be "
                            "stopped (a CUDA run's cases run in a worker process, which it stops)")


@dataclass
class RunResult:
    run_id: str
    path: Path
    records: pd.DataFrame  # the run's records, typed as the store wrote them
    report_files: list[Path]
    group_records: pd.DataFrame | None = None  # a shard's: its whole run group as stored so far

    @property
    def failed(self) -> int:
        return int((self.records["status"] == "failed").sum())


@dataclass
class Planned:
    """The cases one run is to have (filtered, sharded), what it was asked (`scenario_spec`), and
    the shard, run group and run to resume it belongs to."""

    cases: list[Case]
    spec: dict
    shard: sharding.Shard | None
    run_group: str | None
    resume: str | None

    @property
    def order(self) -> list[str]:
        return [case.case_id for case in self.cases]


class RunInterrupted(KeyboardInterrupt):
    """Ctrl-C (or SIGTERM) during a run: the finished cases are safe in the journal, and
    `--resume run_id` goes on. `signal` is the signal's number (exit status 128 + signal)."""

    def __init__(self, scenario: str, run_id: str, done: int, total: int, journal: Path, signal: int,
                 abandoned: bool = False):
        super().__init__(f"run {run_id} interrupted after {done} of {total} cases")
        self.scenario, self.run_id, self.done, self.total, self.journal = scenario, run_id, done, total, journal
        self.signal = signal
        # A case was still running (inside a call that cannot be stopped from Python) when the signal
        # came: the process should exit at once rather than wait for it.
        self.abandoned = abandoned


class ReportInterrupted(KeyboardInterrupt):
    """Ctrl-C (or SIGTERM) while the report of a stored run was being rendered: the run is whole in
    `path`; the report folder still holds the previous report (it is replaced whole, or not at all)."""

    def __init__(self, path: Path, signal: int):
        super().__init__(f"interrupted while rendering the report of {path}")
        self.path, self.signal = path, signal


class _Stop:
    """SIGINT, SIGTERM and SIGHUP (`STOP_SIGNALS`) stop a run as Ctrl-C does,
    except inside `atomic()`: there the signal is held until the block ends, so a journal append
    is whole in the file and in memory alike (the count printed is the count kept)."""

    def __init__(self):
        self.signal = signal.SIGINT
        self._depth = 0
        self._held = False

    def handler(self, signum, _frame):
        self.signal = signum
        if self._depth:
            self._held = True
            return
        raise KeyboardInterrupt

    @contextmanager
    def atomic(self):
        self._depth += 1
        try:
            yield
        finally:
            self._depth -= 1
            if not self._depth and self._held:
                self._held = False
                raise KeyboardInterrupt


# Ctrl-C; a scheduler's or `timeout`'s polite kill; the terminal or ssh session closing (SIGHUP,
# where the platform has it): each stops a run the same way, with the command that resumes it.
STOP_SIGNALS = tuple(getattr(signal, name) for name in ("SIGINT", "SIGTERM", "SIGHUP") if hasattr(signal, name))


@contextmanager
def _stop_signals():
    """Yields a `_Stop`: which signal stopped the run, and `atomic()` for what must not be cut."""
    stop = _Stop()
    if threading.current_thread() is not threading.main_thread():  # handlers live in the main thread
        yield stop
        return
    previous = {sig: signal.signal(sig, stop.handler) for sig in STOP_SIGNALS}
    try:
        yield stop
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def scenario_spec(scenario: Scenario, device_choice: str, only: list[str] | None = None) -> dict:
    """Everything a run was asked to do (the validated scenario: its cases, baselines, seed, timing
    rules; the device asked for; the case filter) as plain data, and its hash, kept in the journal
    header: a resumed run must be asked the same, or its rows would mix baselines, seeds or rules."""
    spec = {"scenario": scenario.model_dump(mode="json"), "device": device_choice, **({"only": only} if only else {})}
    text = json.dumps(spec, sort_keys=True, separators=(",", ":"))
    return {"spec": spec, "spec_hash": hashlib.sha256(text.encode()).hexdigest()[:16]}


def run(request: RunRequest) -> RunResult:
    """Run what `request` asks: plan, measure, store, report."""
    threads = request.run_threads
    if threads is None:
        return _run(request, None)
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        return _run(request, threads)
    finally:
        torch.set_num_threads(before)


def _run(request: RunRequest, threads: int | None) -> RunResult:
    planned = _plan(request)
    device = env.resolve_device(request.device_choice)
    request.check_device(device)
    meta = _run_meta(request, planned, device, threads)
    report_dir = _report_dir(request)
    name = request.scenario.name
    remove_stale(store.scenario_dir(request.results, name))  # temporaries of writes killed midway
    if planned.resume is not None and store.run_path(request.results, name, planned.resume).exists():
        return _already_complete(store.run_path(request.results, name, planned.resume), report_dir)
    if planned.resume is None:
        resume.note_unfinished(request.results, name)
    # a Ray cluster is reached (or found unreachable) before a journal is made
    executor = executors.choose(request.executor, device, request.device_choice, threads)
    try:
        asked = resume.Asked(planned.order, planned.spec, planned.shard, planned.run_group,
                             ray=request.executor.kind == "ray", options=request.options)
        journal = resume.open_journal(request.results, name, planned.resume, asked, meta, IDENTITY)
        run_id = journal.header["run_id"]
        meta = {"run_id": run_id, **meta, **({"shard_run_id": run_id} if planned.shard is not None else {})}
        _announce(request, planned, journal, meta, device)
        stored = _measure(request, planned, journal, executor, meta, device)
    finally:
        executor.close()
    print(f"mpsuite: wrote {stored.path}", file=sys.stderr)
    shown = stored.records
    if planned.shard is not None:
        shown = _group_records(stored.path.parent, planned.run_group, stored.records)
    return RunResult(run_id, stored.path, stored.records, _render(shown, stored.path, report_dir),
                     None if planned.shard is None else shown)


def _plan(request: RunRequest) -> Planned:
    scenario = request.scenario
    cases = plan.only(plan.expand(scenario), request.only)
    if not cases:
        raise UserError(f"scenario {scenario.name!r} has no cases: its include/exclude rules leave none")
    spec = scenario_spec(scenario, request.device_choice, request.only)
    shard, run_group, to_resume = resume.which_run(request.results, scenario.name, spec["spec_hash"], request.shard,
                                                   request.group, request.resume)
    if shard is not None:
        cases = sharding.select(cases, shard)
        if not cases:
            raise UserError(f"shard {shard} of scenario {scenario.name!r} has no cases: there are fewer "
                            "settings (a case and its baseline) than shards")
    return Planned(cases, spec, shard, run_group, to_resume)


def _run_meta(request: RunRequest, planned: Planned, device, threads: int | None) -> dict:
    """What every record of the run carries about the run and this machine."""
    meta = {**env.run_meta(device), "scenario_description": request.scenario.description, "threads_setting": threads}
    if request.only:  # a subset of the scenario: its report says so (`suite.analysis.outcome.summary`)
        meta["run_only"] = " or ".join(request.only)
    if planned.shard is not None:
        meta.update(run_group=planned.run_group, shard_index=planned.shard.index, shard_count=planned.shard.count)
    if request.executor.kind == "ray":
        meta["executor"] = "ray"
    return meta


def _report_dir(request: RunRequest) -> Path | None:
    """The run's report folder, found writable now rather than after the run (None: no report)."""
    if request.reports is None:
        return None
    out = location.where(request.reports) / request.scenario.name
    from suite.report import pages  # jinja2 and matplotlib: only paid for when a report is wanted

    pages.output_dir(out)
    return out


def _announce(request: RunRequest, planned: Planned, journal, meta: dict, device) -> None:
    ray = request.executor.kind == "ray"
    todo = len(planned.cases) - len(journal)
    where = "a Ray cluster" if ray else meta["device_name"] or f"{device.type} (not available)"
    done = f", resuming with {len(journal)} done and {todo} to run" if planned.resume else ""
    part = f", shard {planned.shard} of run group {planned.run_group}" if planned.shard is not None else ""
    print(f"mpsuite: {request.scenario.name}: {len(planned.cases)} cases on {where} (torch {meta['torch_version']}), "
          f"run {meta['run_id']}{part}{done}", file=sys.stderr)
    unavailable = None if ray else env.device_unavailable(device)  # a Ray worker decides on its node
    if unavailable:
        print(f"mpsuite: {unavailable}: every case is recorded as skipped", file=sys.stderr)


def _measure(request: RunRequest, planned: Planned, journal, executor, meta: dict, device) -> store.Stored:
    """Run the cases the journal lacks, journal each record as it comes (with the roofline model's
    columns beside it), and store the run whole."""
    todo = units(planned.cases, journal.case_ids)  # settings, with their cases already journaled as partners
    bar = progress_for(len(planned.cases), len(journal), device.type) if request.progress else None
    if bar is not None:
        bar.plan([case for unit in todo for case in unit.todo])
    try:
        with _stop_signals() as stop:
            for measured in executor.run(todo, meta, bar):
                record = measured.with_columns(model.record_columns(measured))  # the roofline beside it
                with stop.atomic():
                    journal.append(record)
            with stop.atomic():
                return store.finish_run(journal, request.results, planned.order)
    except KeyboardInterrupt:
        journal.close()
        if bar is not None:
            bar.interrupted()
        if store.run_path(request.results, request.scenario.name, meta["run_id"]).exists():
            raise  # the run was complete and stored before the signal came
        raise RunInterrupted(request.scenario.name, meta["run_id"], len(journal), len(planned.cases), journal.path,
                             int(stop.signal), abandoned=executor.busy) from None
    except lease.Held:
        journal.close()
        raise  # another process writes the run now: resuming it here would take it back mid-run
    except UserError as err:
        journal.close()
        finish = resume.command(request.scenario.name, meta["run_id"], request.options)
        raise UserError(f"{err} (finished cases are kept: `{finish}` continues the run)") from None
    except BaseException:
        journal.close()
        raise
    finally:
        if bar is not None:
            bar.close()


def _group_records(folder: Path, run_group: str, own):
    """A shard's report shows its whole run group as far as it is done (naming the shards still
    missing), so the last shard to finish leaves the report of the fleet run."""
    whole = store.read([folder], unfinished=True)
    whole = whole[whole["run_group"] == run_group] if "run_group" in whole else whole.iloc[:0]
    return whole.reset_index(drop=True) if len(whole) else own


def _render(records, path: Path, out: Path | None) -> list[Path]:
    """The stored run's report in `out` (None: no report). The run is whole whatever happens here."""
    if out is None:
        return []
    from suite import report

    try:
        with _stop_signals() as stop:
            try:
                written = report.render(records, out)
            except KeyboardInterrupt:
                raise ReportInterrupted(path, int(stop.signal)) from None
    except (OSError, UserError) as err:
        raise UserError(f"the run is stored in {path}, but its report cannot be written to {out}: {err} "
                        f"(`python -m suite report {path}` renders it later)") from None
    print(f"mpsuite: report in {out}/", file=sys.stderr)
    return written


def _already_complete(path: Path, report_dir: Path | None) -> RunResult:
    """`--resume` of a run that is stored whole (it finished, or was killed between writing its
    parquet and its report): nothing to run; its report is rendered, so a missing one is repaired."""
    print(f"mpsuite: run {path.stem} is already complete ({path}); rendering its report", file=sys.stderr)
    store.forget_journal(path.parent.parent, path.parent.name, path.stem)  # inert now
    records = store.read_file(path)  # stored by an earlier process
    return RunResult(path.stem, path, records, _render(records, path, report_dir))
