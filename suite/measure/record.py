"""A case's record: the one record type, the one place a record is built and the one place an
error becomes its status.

`Record` is immutable and checked when it is made (`problems`: every column one that
`suite.measure.columns` defines or a folder declares, each value in its column's type and range,
the case's identity and a known status, a shape whole or absent, an ok case's median time); a stage
that learns more derives a new record (`Record.replace`, `with_columns`), so what one
stage handed on is never changed under another.

Every way a case runs (`suite.measure.executors`) makes its record here: `base` (the case and the
run's facts, status "failed" until something better is known), `skipped` and `failed` (a case that
never ran, or whose process sent nothing back), `measured` (the columns of a timing), `paired` (those of paired rounds: how the case was timed
beside the other cases of its setting, and its speedup from the rounds), and `outcome`,
the error triage around running a case: a case that cannot run here is skipped with the reason, one
that broke is failed with its error's first line, and neither stops the run.
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timezone
from types import MappingProxyType
from typing import Iterable, Iterator, Mapping

from suite.core import jsontext, peaks
from suite.core.quantiles import median_interval, quantile
from suite.core.errors import NonFiniteOutput, TimingUnsupported, Unsupported
from suite.measure import columns as definitions, telemetry
from suite.scenario import registry
from suite.scenario.declare import Column
from suite.scenario.plan import Case

# How much of an error message a reason keeps: its first line, at most this many characters.
REASON_CHARS = 500


# The columns every record names: the case it is of and how it went (the run's own facts, `run_id`
# among them, come from the run and are checked when it is stored: `suite.results.validate`).
IDENTITY = ("scenario", "case_id", "workload", "precision", "status")


class RecordInvalid(ValueError):
    """A record that breaks its contract: a bug in the code that made it, named with the case."""


class Record(Mapping):
    """One case's record: its columns by name, in the order they were added; read like a dict,
    never changed (`replace` and the others derive a new record, checked again). JSON
    (`suite.core.jsonl`) and pickle (a Ray worker's) carry it as a plain dict of its columns."""

    __slots__ = ("_columns",)

    def __init__(self, columns: Mapping[str, object] = MappingProxyType({}), /, **more: object):
        object.__setattr__(self, "_columns", _checked({**columns, **more}))

    def __setattr__(self, name: str, value) -> None:
        raise AttributeError("a record is immutable: derive a new one (Record.replace)")

    def __getitem__(self, name: str):
        return self._columns[name]

    def __iter__(self):
        return iter(self._columns)

    def __len__(self) -> int:
        return len(self._columns)

    def __repr__(self) -> str:
        return f"Record({dict(getattr(self, '_columns', {}))!r})"  # one that failed its check has none

    def __reduce__(self):
        return Record, (dict(self._columns),)

    def replace(self, **changes: object) -> Record:
        """This record with `changes` (a new column goes last, a known one keeps its place)."""
        return self.with_columns(changes)

    def with_columns(self, columns: Mapping[str, object]) -> Record:
        """`replace` for columns held in a mapping (what a workload's check or derive returns). The
        columns it keeps were checked when this record was made: the new values are checked, and
        the rules across columns again."""
        out = Record.__new__(Record)
        object.__setattr__(out, "_columns", _checked({**self._columns, **columns}, columns))
        return out


@dataclass
class Draft:
    """A case's record while a stage makes it: the latest `Record`, each step setting the one it
    derives, so an error (`outcome`) keeps what the steps before it found."""

    record: Record


def _plain(value):
    """A value as the journal will hold it: numpy and torch scalars and arrays as Python values."""
    return value.tolist() if hasattr(value, "tolist") else list(value) if isinstance(value, tuple) else value


def _number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _json_object(value) -> bool:
    try:
        return isinstance(jsontext.loads(value), dict)
    except ValueError:
        return False


def _instant(value) -> bool:
    try:
        return isinstance(value, datetime) or datetime.fromisoformat(value) is not None
    except (TypeError, ValueError):
        return False


# Whether one (non-null) value is of a declared type, list elements one by one (null among them too).
_OF_TYPE = {
    "string": lambda v: isinstance(v, str),
    "json": lambda v: isinstance(v, str) and _json_object(v),
    "int": lambda v: isinstance(v, int) and not isinstance(v, bool),
    "float": _number,
    "bool": lambda v: isinstance(v, bool),
    "timestamp": _instant,
}


def value_problem(column: Column, value) -> str | None:
    """What is wrong with a non-null value of `column` ("expected ..."), or None: its declared type
    (`suite.measure.columns`), and each number in the column's range (`Column.accepts`)."""
    value = _plain(value)
    listed = column.type.startswith("list<")
    kind = column.type[5:-1] if listed else column.type
    if listed and not isinstance(value, list):
        return f"expected {column.type}"
    items = value if listed else [value]
    if not all(v is None or _OF_TYPE[kind](_plain(v)) for v in items):
        return f"expected {column.type}"
    accepts = column.accepts
    if accepts is not None and not all(v is None or accepts.holds(_plain(v)) for v in items):
        return f"expected {column.accepts_text}"
    return None


def problems(values: Mapping[str, object], new: Iterable[str] | None = None) -> list[str]:
    """Every way the columns `values` break a record's contract, one phrase each (empty: they keep
    it): a column nothing defines (`suite.measure.columns`, a folder's declarations), a value out of
    its column's type or range (of the columns `new` only, where given), no case identity
    (`IDENTITY`), an unknown status, a shape not whole (m, k and n together or not at all), an ok
    case without a median time."""
    known = definitions.BY_NAME
    names = list(values) if new is None else list(new)
    out = [f"{name!r} is no defined column (suite/measure/columns.py or a folder's declarations)"
           for name in names if name not in known]
    for name in names:
        value = values[name]
        why = None if value is None or name not in known else value_problem(known[name], value)
        if why:
            out.append(f"column {name} holds {str(value)[:60]!r}, {why}")
    out += [f"no {name}" for name in IDENTITY if values.get(name) is None]
    if values.get("status") not in (None, *definitions.STATUSES):
        out.append(f"status must be one of {', '.join(definitions.STATUSES)}, not {values['status']!r}")
    if len({values.get(d) is None for d in ("m", "k", "n")}) > 1:
        out.append("m, k and n must be given together or not at all")
    if values.get("status") == "ok" and values.get("time_ms_median") is None:
        out.append("an ok case has no median time")
    return out


def _checked(values: dict, new: Iterable[str] | None = None) -> MappingProxyType:
    """`values`, read-only, where they keep the contract (`problems`); else RecordInvalid."""
    found = problems(values, new)
    if found:
        more = f" (and {len(found) - 1} more)" if len(found) > 1 else ""
        raise RecordInvalid(f"record of case {values.get('case_id')}: {found[0]}{more}")
    return MappingProxyType(values)


def now() -> str:
    """A record's `started_at`: UTC, to the second, ISO 8601."""
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def base(case: Case, run_meta: dict) -> Record:
    """The columns every record has: the run's facts, the case, the vendor peak of its precision
    on a GPU (a CPU model name is never looked up in the GPU table), and status "failed"."""
    return Record({
        **run_meta,
        "scenario": case.scenario,
        "case_id": case.case_id,
        "baseline_case_id": case.baseline_case_id,
        "workload": case.workload,
        "precision": case.precision,
        "baseline": case.baseline,
        "m": case.m,
        "k": case.k,
        "n": case.n,
        "params": case.params_json(),
        "seed": case.seed,
        "peak_tflops": peaks.peak_tflops(run_meta.get("device_name"), registry.peak_column(case.precision))
        if run_meta.get("device") == "cuda" else None,
        "status": "failed",
        "reason": None,
    })


def started(case: Case, run_meta: dict) -> Record:
    """`base`, stamped with the time the case starts."""
    return base(case, run_meta).replace(started_at=now())


def skipped(case: Case, run_meta: dict, reason: str) -> Record:
    """A case that cannot run here at all (no such device): skipped, with the reason."""
    return started(case, run_meta).replace(status="skipped", reason=reason)


def failed(case: Case, run_meta: dict, reason: str, started_at: str | None = None, **columns) -> Record:
    """A case whose process or worker sent no record back (it crashed, hung or died): failed, with
    why, and what else is known (`columns`: a log, a retry count)."""
    return base(case, run_meta).replace(status="failed", reason=reason, started_at=started_at or now(), **columns)


def error_text(err: BaseException) -> str:
    """'RuntimeError: what went wrong': an error's type and the first line of its message."""
    text = f"{type(err).__name__}: {err}".strip()
    return text.splitlines()[0][:REASON_CHARS] if text else type(err).__name__


def missing_dependency(err: ImportError) -> bool:
    """An optional backend that is not installed (or not loadable) here: a skip, not a failure.
    A broken import inside the suite itself is a bug and stays a failure."""
    top = (err.name or "").partition(".")[0]
    return top != "suite"


def triage(err: Exception) -> dict:
    """The status and reason of a case that raised `err` (the one error triage)."""
    if isinstance(err, (Unsupported, TimingUnsupported)):
        return {"status": "skipped", "reason": str(err)}
    if isinstance(err, NonFiniteOutput):
        return {"status": "failed", "reason": str(err)}
    if _out_of_memory(err):
        # the case's tensors are freed by the caller, so the next case starts with the memory back
        return {"status": "failed", "reason": f"out of memory: {error_text(err)}"}
    if isinstance(err, ImportError) and missing_dependency(err):
        return {"status": "skipped", "reason": f"optional dependency not importable: {error_text(err)}"}
    return {"status": "failed", "reason": error_text(err)}


def _out_of_memory(err: Exception) -> bool:
    import torch

    return isinstance(err, torch.cuda.OutOfMemoryError)


@contextmanager
def outcome(draft) -> Iterator:
    """Run a case's steps inside: an exception they raise becomes the status and reason (`triage`)
    of `draft`'s record (a `Draft`, or anything holding the case's latest `record`), never the
    caller's; Ctrl-C still stops the run."""
    try:
        yield draft
    except KeyboardInterrupt:
        raise
    except Exception as err:  # one broken case must not cost the others: record it and go on
        draft.record = draft.record.replace(**triage(err))


def measured(result, prepared) -> dict:
    """The record columns of a measurement (`timing.Measurement`) of a prepared case."""
    median_s = result.median_ms / 1e3
    return dict(
        time_ms_median=result.median_ms,
        time_ms_p10=result.p10_ms,
        time_ms_p90=result.p90_ms,
        n_samples=len(result.samples_ms),
        samples_ms=result.samples_ms,
        rel_ci=result.rel_ci,
        rel_ci_window=result.rel_ci_window,
        rel_ci_batches=result.rel_ci_batches,
        rel_ci_level=result.rel_ci_level,
        rel_spread=result.rel_spread,
        stop_reason=result.stop_reason,
        warmup_calls=result.warmup_calls,
        warmup_s=result.warmup_s,
        warmup_reason=result.warmup_reason,
        first_call_ms=result.first_call_ms,
        first_call_kept=result.first_call_kept,
        case_cap_s=result.case_cap_s,
        timer=result.clock,
        timing_mode=result.timing_mode,
        cache=result.cache,
        flops=prepared.flops,
        bytes_moved=prepared.bytes_moved,
        tflops=prepared.flops / median_s / 1e12 if prepared.flops else None,
        gbps=prepared.bytes_moved / median_s / 1e9 if prepared.bytes_moved else None,
        **telemetry.energy_columns(result, prepared.flops),  # null where the GPU's energy was not read
        **prepared.extra,
    )


def round_ratios(numerator: list[float], denominator: list[float]) -> list[float]:
    """Round by round, one batch median over another's taken in the same round (paired rounds)."""
    return [a / b for a, b in zip(numerator, denominator) if b > 0]


def paired_speedup(base, own) -> dict:
    """A case's speedup from paired rounds (`timing.Paired`): per round, its baseline's batch median
    over its own in the same round, and the median of those ratios with its distribution-free
    interval from the rounds (`quantiles.median_interval`: 95% or more from 6 rounds, with 5 or fewer
    their range at the lower level it has, which `speedup_paired_level` says)."""
    ratios = round_ratios(base.batch_medians_ms, own.batch_medians_ms)
    if not ratios:
        return {"pairing_note": "no round holds a batch of both it and its baseline"}
    low, high, level = median_interval(ratios)
    return {"speedup_paired": quantile(sorted(ratios), 0.5), "speedup_paired_low": low, "speedup_paired_high": high,
            "speedup_paired_level": level, "paired_ratios": ratios, "paired_rounds": len(ratios)}


def pairing(result, index: int, group: str, baseline_index: int | None, alone_why: str | None) -> dict:
    """The pairing columns of party `index` of paired rounds (`timing.Paired`) of the setting `group`:
    how it was timed (paired, alone beside the others' rounds, or its whole setting sequential), with
    the seed of the rounds' order; its paired speedup over party `baseline_index` (None: its baseline
    is not among the parties, `alone_why` says why), or why there is none."""
    own = result.measurements[index]
    mode = "sequential" if not result.paired else "alone" if index in result.alone else "paired"
    out = {"pairing": mode, "pairing_group": group, "pairing_seed": result.seed,
           "pairing_note": result.alone.get(index, result.note)}
    if mode != "paired" or own is None or baseline_index == index:
        return out
    if baseline_index in result.alone:  # its batches are not in the rounds: no round to pair with
        return {**out, "pairing_note": f"its baseline was timed alone: {result.alone[baseline_index]}"}
    base = result.measurements[baseline_index] if baseline_index is not None else None
    if base is None:
        return {**out, "pairing_note": alone_why}
    return {**out, **paired_speedup(base, own)}
