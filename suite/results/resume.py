"""Which journal a run writes, and whether it may: a run resumed by its id, a shard of a run group
started again (it finds its own earlier run, `which_run`), or a new run; a journal reopened only when
the run is asked what it was asked when it started, on the same kind of machine (`check_resumable`,
its reason a one-line `UserError`); the journal opened or created with what a later resume checks
in its header (`open_journal`), the run's options among it; and the command line that finishes a run
with those options (`command`: after Ctrl-C, in a run's error, in the note on an unfinished run). The
store's side of `suite.pipeline`'s `resume` and `shard`."""

from __future__ import annotations

import json
import shlex
import sys
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from suite.core.errors import UserError
from suite.fleet.shard import Shard, group_id
from suite.results import journal, store


@dataclass(frozen=True)
class Asked:
    """What a run is asked, as its journal's header keeps it for a resume to check: the plan (its case
    ids, in order), the scenario as asked and its hash (`suite.pipeline.scenario_spec`: "spec",
    "spec_hash"), the shard and run group it is, whether Ray runs it (then its records carry each
    node's facts, not the driver's), and the options a command that resumes it repeats (`command`;
    the CLI's words for them, `suite.cli.run.resumed_words`)."""

    order: list[str]
    spec: dict
    shard: Shard | None = None
    run_group: str | None = None
    ray: bool = False
    options: tuple[str, ...] = ()

    def header(self) -> dict:
        shard = self.shard
        return {
            "plan": self.order,
            **self.spec,
            **({"run_group": self.run_group, "shard": [shard.index, shard.count]} if shard is not None else {}),
            **({"executor": "ray"} if self.ray else {}),
            **({"options": list(self.options)} if self.options else {}),
        }


def command(scenario: str, run_id: str, options=()) -> str:
    """The command line that finishes run `run_id` of `scenario`, with the options it was run with."""
    return shlex.join(["python", "-m", "suite", "run", scenario, "--resume", run_id, *options])


def stored_options(results: str | Path, scenario: str, run_id: str) -> list[str]:
    """The options run `run_id` was started with, as its journal keeps them ([] where it keeps none,
    or cannot be read)."""
    try:
        return store.journal_header(results, scenario, run_id).get("options") or []
    except UserError:
        return []


def which_run(results: str | Path, scenario: str, spec_hash: str, shard: Shard | None, group: str | None,
              resume: str | None) -> tuple[Shard | None, str | None, str | None]:
    """(shard, run group id, the run to resume) of a run. A resumed shard takes its shard and group
    from its journal; a shard started again under its group finds its earlier run."""
    if resume is not None:
        head = store.journal_header(results, scenario, resume)
        then = head.get("shard")
        then = Shard(*then) if then else None
        if shard is not None and then != shard:
            raise UserError(f"run {resume} is shard {then or 'none (not sharded)'}, not shard {shard}; "
                            "resume it as what it was")
        return then, head.get("run_group"), resume
    if shard is None:
        return None, None, None
    if group is None:
        raise UserError("--shard needs a run group shared by every shard of the fleet run: --group NAME, or "
                        "$MPSUITE_RUN_GROUP (a SLURM array's SLURM_ARRAY_JOB_ID, a GitHub Actions run's "
                        "GITHUB_RUN_ID name it by themselves)")
    run_group = group_id(group, spec_hash)
    found = store.find_shard_run(results, scenario, run_group, shard.index, shard.count)
    if found is not None:
        run_id, complete = found
        print(f"mpsuite: shard {shard} of run group {run_group} is run {run_id} "
              f"({'complete' if complete else 'unfinished: resuming it'})", file=sys.stderr)
        return shard, run_group, run_id
    return shard, run_group, None


def note_unfinished(results: str | Path, scenario: str) -> None:
    """A note per unfinished run of the scenario, with the command that finishes it."""
    for other in store.incomplete_runs(results, scenario):
        finish = command(scenario, other, stored_options(results, scenario, other))
        print(f"mpsuite: note: run {other} of {scenario} is unfinished; `{finish}` finishes it", file=sys.stderr)


def open_journal(results: str | Path, scenario: str, resume: str | None, asked: Asked, meta: dict,
                 identity: tuple[str, ...]) -> journal.Journal:
    """The run's journal: run `resume`'s, checked against what is asked now (`check_resumable`), or a
    new run's, its header what is asked and this machine's `identity` (those keys of `meta`)."""
    if resume is not None:
        opened = store.continue_run(results, scenario, resume)
        try:
            check_resumable(opened.header, asked, meta, identity)
        except BaseException:
            opened.close()
            raise
        return opened
    header = {
        **asked.header(),
        "identity": {key: meta.get(key) for key in identity},
        "code_hash": meta.get("code_hash"),
        "created_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
    }
    return store.start_run(results, scenario, store.new_run_id(), header)


def check_resumable(head: dict, asked: Asked, meta: dict, identity: tuple[str, ...]) -> None:
    """A journal (its header `head`) may go on only under the same scenario and plan, on a machine of
    the same `identity` (`meta`'s keys); else a `UserError` says what changed. A run under the Ray
    executor spans the cluster's nodes, each record with its node's facts: the driver's own machine is
    not the run's, so only the scenario and the plan are checked."""
    if head.get("spec_hash") not in (None, asked.spec["spec_hash"]):
        changed = _differences(head.get("spec"), asked.spec["spec"])
        shown = "; ".join(changed[:3]) + (f"; and {len(changed) - 3} more" if len(changed) > 3 else "")
        raise UserError(
            f"scenario {head['scenario']!r} changed since run {head['run_id']} started ({shown or 'its hash differs'}); "
            "one run must be measured under one scenario: restore the scenario file to resume, or start a new run"
        )
    planned, now = set(head.get("plan") or []), set(asked.order)
    if planned != now:
        raise UserError(
            f"scenario {head['scenario']!r} changed since run {head['run_id']} started "
            f"({len(now - planned)} case(s) added, {len(planned - now)} removed); restore the scenario "
            "file to resume, or start a new run"
        )
    then = head.get("identity") or {}
    for key in identity if head.get("executor") != "ray" else ():
        if then.get(key) != meta.get(key):
            raise UserError(
                f"run {head['run_id']} was measured with {key} = {then.get(key)!r} and this machine has "
                f"{meta.get(key)!r}; resume it where it started, or start a new run"
            )
    if head.get("code_hash") != meta.get("code_hash"):
        print(f"mpsuite: note: the suite's code changed since run {head['run_id']} started "
              f"(code_hash {head.get('code_hash')} -> {meta.get('code_hash')}); each record keeps its own",
              file=sys.stderr)


def _differences(then, now, where: str = "") -> list[str]:
    """`path: old -> new` for every leaf where two plain-data trees differ."""
    if isinstance(then, dict) and isinstance(now, dict):
        return [d for key in sorted(set(then) | set(now), key=str)
                for d in _differences(then.get(key), now.get(key), f"{where}.{key}" if where else str(key))]
    if isinstance(then, list) and isinstance(now, list) and len(then) == len(now):
        return [d for i, (a, b) in enumerate(zip(then, now)) for d in _differences(a, b, f"{where}[{i}]")]
    return [] if then == now else [f"{where}: {json.dumps(then)} -> {json.dumps(now)}"]
