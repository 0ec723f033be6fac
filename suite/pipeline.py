"""A whole run: plan a scenario, run its cases, store the records, render the report.

The only module that ties runner (measure), store (results/) and report (reports/) together; the
CLI and the nox sessions call `run_scenario`.

How a run survives trouble:
- every finished case is appended to the run's journal (`store.start_run`) before the next starts,
  so a crash or kill loses at most the case that was running;
- Ctrl-C, SIGTERM or SIGHUP abandons the case that is running and raises `RunInterrupted`; every case
  finished before it is already in the journal (no results file yet: a parquet is only written
  for a complete run);
- `resume=RUN_ID` reopens that run's journal and runs only the cases missing from it, on the same
  kind of machine and software (`IDENTITY`), then writes the one complete parquet;
- `isolate=True` runs each case in its own subprocess with a time limit (`suite.measure.isolate`);
- on a GPU the cases run in one worker process, replaced after a case that leaves CUDA unusable
  or runs past its time limit (`isolate.CaseWorker`; `case_timeout`, else ten case caps and at
  least five minutes), so one sticky CUDA error or one hang costs one case;
- a scenario asking for CUDA on a machine without it records every case as skipped, with the reason.

Fleet runs (`suite.fleet`): `shard` runs one cost-balanced slice of the cases as a run of its own,
tagged with its run group, and a shard started again under the same group and shard finds its
journal and resumes it (or, complete, does nothing); `executor="ray"` sends the cases to Ray
workers and journals their records here, on the driver.
"""

from __future__ import annotations

import hashlib
import json
import signal
import sys
import threading
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from suite.analysis import model
from suite.measure import env, runner
from suite.scenario import plan
from suite.results import location, store
from suite.results.atomic import remove_stale
from suite.core.errors import UserError
from suite.fleet import shard as sharding
from suite.scenario.spec import Scenario

# What must be the same for the records of one run to be compared with each other (speedups are
# computed within a run): a resumed run refuses to continue on anything else.
IDENTITY = (
    "device", "device_name", "compute_capability", "torch_version", "cuda_version",
    "torchao_version", "te_version", "cpu_isa", "cpu_threads",
)


@dataclass
class RunResult:
    run_id: str
    path: Path
    records: list[dict]
    report_files: list[Path]
    group_records: list[dict] | None = None  # a shard's: its whole run group as stored so far

    @property
    def failed(self) -> int:
        return sum(r["status"] == "failed" for r in self.records)


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


run_meta = runner.run_meta  # the machine's facts for a run's records (also captured by each Ray worker)


def scenario_spec(scenario: Scenario, device_choice: str, only: list[str] | None = None) -> dict:
    """Everything a run was asked to do (the validated scenario: its cases, baselines, seed, timing
    rules; the device asked for; the case filter) as plain data, and its hash, kept in the journal
    header: a resumed run must be asked the same, or its rows would mix baselines, seeds or rules."""
    spec = {"scenario": scenario.model_dump(mode="json"), "device": device_choice, **({"only": only} if only else {})}
    text = json.dumps(spec, sort_keys=True, separators=(",", ":"))
    return {"spec": spec, "spec_hash": hashlib.sha256(text.encode()).hexdigest()[:16]}


def _differences(then, now, where: str = "") -> list[str]:
    """`path: old -> new` for every leaf where two plain-data trees differ."""
    if isinstance(then, dict) and isinstance(now, dict):
        return [d for key in sorted(set(then) | set(now), key=str)
                for d in _differences(then.get(key), now.get(key), f"{where}.{key}" if where else str(key))]
    if isinstance(then, list) and isinstance(now, list) and len(then) == len(now):
        return [d for i, (a, b) in enumerate(zip(then, now)) for d in _differences(a, b, f"{where}[{i}]")]
    return [] if then == now else [f"{where}: {json.dumps(then)} -> {json.dumps(now)}"]


def _check_resumable(journal, order: list[str], meta: dict, spec: dict) -> None:
    """A run under the Ray executor spans the cluster's nodes, each record with its node's facts:
    the driver's own machine is not the run's, so only the scenario and the plan are checked."""
    head = journal.header
    if head.get("spec_hash") not in (None, spec["spec_hash"]):
        changed = _differences(head.get("spec"), spec["spec"])
        shown = "; ".join(changed[:3]) + (f"; and {len(changed) - 3} more" if len(changed) > 3 else "")
        raise UserError(
            f"scenario {head['scenario']!r} changed since run {head['run_id']} started ({shown or 'its hash differs'}); "
            "one run must be measured under one scenario: restore the scenario file to resume, or start a new run"
        )
    planned, now = set(head.get("plan") or []), set(order)
    if planned != now:
        raise UserError(
            f"scenario {head['scenario']!r} changed since run {head['run_id']} started "
            f"({len(now - planned)} case(s) added, {len(planned - now)} removed); restore the scenario "
            "file to resume, or start a new run"
        )
    then = head.get("identity") or {}
    for key in IDENTITY if head.get("executor") != "ray" else ():
        if then.get(key) != meta.get(key):
            raise UserError(
                f"run {head['run_id']} was measured with {key} = {then.get(key)!r} and this machine has "
                f"{meta.get(key)!r}; resume it where it started, or start a new run"
            )
    if head.get("code_hash") != meta.get("code_hash"):
        print(f"mpsuite: note: the suite's code changed since run {head['run_id']} started "
              f"(code_hash {head.get('code_hash')} -> {meta.get('code_hash')}); each record keeps its own",
              file=sys.stderr)


def run_scenario(
    scenario: Scenario,
    results_dir: str | Path = "results",
    reports_dir: str | Path | None = "reports",
    device: str | None = None,
    progress: bool = True,
    *,
    resume: str | None = None,
    isolate: bool = False,
    case_timeout: float | None = None,
    threads: int | None = None,
    max_cases: int | None = None,
    only: list[str] | None = None,
    shard: sharding.Shard | None = None,
    group: str | None = None,
    executor: str = "local",
    address: str | None = None,
) -> RunResult:
    """Run a scenario; `threads` (else the scenario's `threads`, else torch's default) sets torch's
    intra-op threads for the run and is restored after it. A scenario of more than `max_cases`
    cases (default `plan.MAX_CASES`) is refused before anything is expanded; `only` (filters,
    `plan.only`) runs the matching cases alone. `shard` runs that slice of them (`suite.fleet.shard`)
    as one shard of the run group `group`; `executor="ray"` runs the cases on the Ray cluster at
    `address` (default: $RAY_ADDRESS, else a local one)."""
    plan.check_size(scenario, max_cases)
    if executor not in ("local", "ray"):
        raise UserError(f"executor {executor!r}: expected local or ray")
    if executor == "ray" and isolate:
        raise UserError("--isolate and --executor ray: a Ray worker is already a process of its own per node or GPU")
    if address is not None and executor != "ray":
        raise UserError("--address needs --executor ray")
    if group is not None and shard is None and resume is None:
        raise UserError("--group names the run group of shards: give --shard K/N too")
    fleet = {"shard": shard, "group": group, "executor": executor, "address": address}
    threads = threads or scenario.defaults.threads
    if threads is None:
        return _run_scenario(scenario, results_dir, reports_dir, device, progress, resume, isolate, case_timeout, None,
                             only, fleet)
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        return _run_scenario(scenario, results_dir, reports_dir, device, progress, resume, isolate, case_timeout,
                             threads, only, fleet)
    finally:
        torch.set_num_threads(before)


def _shard_of(results_dir, scenario: Scenario, spec: dict, fleet: dict, resume: str | None):
    """(shard, run group id, the run to resume) of a sharded run. A resumed shard takes its shard
    and group from its journal; a shard started again under its group finds its earlier run."""
    shard, run_group = fleet["shard"], None
    if resume is not None:
        head = store.journal_header(results_dir, scenario.name, resume)
        then = head.get("shard")
        then = sharding.Shard(*then) if then else None
        if shard is not None and then != shard:
            raise UserError(f"run {resume} is shard {then or 'none (not sharded)'}, not shard {shard}; "
                            "resume it as what it was")
        return then, head.get("run_group"), resume
    if shard is None:
        return None, None, None
    if fleet["group"] is None:
        raise UserError("--shard needs a run group shared by every shard of the fleet run: --group NAME, or "
                        "$MPSUITE_RUN_GROUP (a SLURM array's SLURM_ARRAY_JOB_ID, a GitHub Actions run's "
                        "GITHUB_RUN_ID name it by themselves)")
    run_group = sharding.group_id(fleet["group"], spec["spec_hash"])
    found = store.find_shard_run(results_dir, scenario.name, run_group, shard.index, shard.count)
    if found is not None:
        run_id, complete = found
        print(f"mpsuite: shard {shard} of run group {run_group} is run {run_id} "
              f"({'complete' if complete else 'unfinished: resuming it'})", file=sys.stderr)
        return shard, run_group, run_id
    return shard, run_group, None


def _run_scenario(scenario, results_dir, reports_dir, device, progress, resume, isolate, case_timeout,
                  threads, only, fleet) -> RunResult:
    cases = plan.only(plan.expand(scenario), only)
    if not cases:
        raise UserError(f"scenario {scenario.name!r} has no cases: its include/exclude rules leave none")
    spec = scenario_spec(scenario, device or scenario.defaults.device, only)
    shard, run_group, resume = _shard_of(results_dir, scenario, spec, fleet, resume)
    if shard is not None:
        cases = sharding.select(cases, shard)
        if not cases:
            raise UserError(f"shard {shard} of scenario {scenario.name!r} has no cases: there are fewer "
                            "settings (a case and its baseline) than shards")
    order = [case.case_id for case in cases]
    ray = fleet["executor"] == "ray"
    dev = env.resolve_device(device or scenario.defaults.device)
    if case_timeout is not None and not isolate and (ray or dev.type != "cuda"):
        raise UserError("--case-timeout needs --isolate here: only a case in a process of its own can be stopped "
                        "(a CUDA run's cases run in a worker process, which it stops)")
    meta = {**run_meta(dev), "scenario_description": scenario.description, "threads_setting": threads}
    if shard is not None:
        meta.update(run_group=run_group, shard_index=shard.index, shard_count=shard.count)
    if ray:
        meta["executor"] = "ray"

    report_dir = None if reports_dir is None else location.where(reports_dir) / scenario.name
    if report_dir is not None:
        from suite import report  # matplotlib and jinja2: only paid for when a report is wanted

        report.output_dir(report_dir)  # an unwritable report folder is found now, not after the run
    folder = store.scenario_dir(results_dir, scenario.name)
    remove_stale(folder)  # temporaries of writes killed midway (their process is gone)
    if resume is not None and store.run_path(results_dir, scenario.name, resume).exists():
        return _already_complete(store.run_path(results_dir, scenario.name, resume), report_dir)
    if resume is None:
        for other in store.incomplete_runs(results_dir, scenario.name):
            print(f"mpsuite: note: run {other} of {scenario.name} is unfinished; "
                  f"`python -m suite run {scenario.name} --resume {other}` finishes it", file=sys.stderr)
    executor = None
    if ray:  # the cluster is reached (or found unreachable) before a journal is made
        from suite.fleet import ray_executor

        executor = ray_executor.Executor(device or scenario.defaults.device, fleet["address"], threads)
    try:
        if resume is not None:
            journal = store.continue_run(results_dir, scenario.name, resume)
            try:
                _check_resumable(journal, order, meta, spec)
            except BaseException:
                journal.close()
                raise
        else:
            header = {
                "plan": order,
                **spec,
                **({"run_group": run_group, "shard": [shard.index, shard.count]} if shard is not None else {}),
                **({"executor": "ray"} if ray else {}),
                "identity": {key: meta.get(key) for key in IDENTITY},
                "code_hash": meta.get("code_hash"),
                "created_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            }
            journal = store.start_run(results_dir, scenario.name, store.new_run_id(), header)
    except BaseException:
        if executor is not None:
            executor.close()
        raise
    run_id = journal.header["run_id"]
    meta = {"run_id": run_id, **meta, **({"shard_run_id": run_id} if shard is not None else {})}
    todo = [case for case in cases if case.case_id not in journal.case_ids]

    where = "a Ray cluster" if ray else meta["device_name"] or f"{dev.type} (not available)"
    done = f", resuming with {len(journal)} done and {len(todo)} to run" if resume else ""
    part = f", shard {shard} of run group {run_group}" if shard is not None else ""
    print(f"mpsuite: {scenario.name}: {len(cases)} cases on {where} (torch {meta['torch_version']}), "
          f"run {run_id}{part}{done}", file=sys.stderr)
    unavailable = None if ray else runner.device_unavailable(dev)  # a Ray worker decides on its node
    if unavailable:
        print(f"mpsuite: {unavailable}: every case is recorded as skipped", file=sys.stderr)
    bar = runner.progress_for(len(cases), len(journal), dev.type) if progress else None
    run_one, worker = None, None
    if isolate:
        from suite.measure import isolate as isolation

        run_one = isolation.CaseProcess(dev, meta, case_timeout)
    elif dev.type == "cuda" and unavailable is None:
        from suite.measure import isolate as isolation

        # One worker process for the run, replaced after a case that leaves CUDA unusable or hangs.
        run_one = isolation.CaseWorker(dev, meta, timeout_s=case_timeout)
    elif not ray:
        worker = runner.CaseThread()
    try:
        with _stop_signals() as stop:
            produced = executor.run(todo, meta, bar) if ray else runner.run(todo, dev, meta, bar, run_one, worker)
            for record in produced:
                record.update(model.record_columns(record))  # the roofline beside each measurement
                with stop.atomic():
                    journal.append(record)
            with stop.atomic():
                path = store.finish_run(journal, results_dir, order)
    except KeyboardInterrupt:
        journal.close()
        if bar is not None:
            bar.interrupted()
        if store.run_path(results_dir, scenario.name, run_id).exists():
            raise  # the run was complete and stored before the signal came
        raise RunInterrupted(scenario.name, run_id, len(journal), len(cases), journal.path,
                             int(stop.signal), abandoned=bool(worker and worker.busy)) from None
    except UserError as err:
        journal.close()
        raise UserError(f"{err} (finished cases are kept: `--resume {run_id}` continues the run)") from None
    except BaseException:
        journal.close()
        raise
    finally:
        if bar is not None:
            bar.close()
        if worker is not None:
            worker.close()
        if hasattr(run_one, "close"):
            run_one.close()
        if executor is not None:
            executor.close()
    print(f"mpsuite: wrote {path}", file=sys.stderr)

    records = store.read_file(path)
    shown = records if shard is None else _group_records(folder, run_group, records)
    return RunResult(run_id, path, records.to_dict("records"), _render(shown, path, report_dir),
                     None if shard is None else shown.to_dict("records"))


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
    store.journal_path(path.parent.parent, path.parent.name, path.stem).unlink(missing_ok=True)  # inert now
    records = store.read_file(path)
    return RunResult(path.stem, path, records.to_dict("records"), _render(records, path, report_dir))
