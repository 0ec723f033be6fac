"""The record contract, checked on data from elsewhere: a results file read, a JSON file imported.

`problems(table)` lists what breaks the contract (`suite.measure.columns` defines the columns; a
record is checked against the same definitions when it is made, `suite.measure.record`);
`check(table, source)` raises one line naming the source and the first problem. The checks are
columnar (pyarrow.compute), so a million records cost milliseconds, not a Python loop.

What a record must hold, and why each check exists (each was a crash or a silent wrong answer):
- `run_id` (a run id, `names.RUN_ID`) and `scenario` (a folder name, `suite.core.names.NAME`): they
  become paths of reports and exports;
- `case_id`: present and unique within its run (a comparison joins on it: a duplicate made
  `compare` report a case "missing", a null one crashed it);
- `workload`, `precision`: present; `status`: ok, skipped or failed;
- every defined column in its declared type (`suite.measure.columns`: `rel_err` as text, `m` as
  text or `baseline_case_id` as a number crashed report, recommend and compare), `params` a JSON
  object;
- `m`, `k`, `n` all three or none (a shape label read `k` beside `m`);
- `run_group` a folder name and `shard_run_id` a run id (a group's run id is built from them and
  becomes a path and a printed `--resume` command), a shard within its count, at most
  `suite.fleet.shard.MAX_SHARDS` shards;
- every number in its column's range (`suite.scenario.declare.Column.accepts`, declared with the
  column: a speedup of 0 divided by zero in the headline, one of 1e308 or a median of 5e-324 ms
  overflowed in compare, a median of 0 read as "not measured"; times finite and not negative, a
  call's from 1 ns; speedups from 1e-12 to 1e12; sizes and counts not negative); an `ok` case has
  a median time. A file of an older schema is checked against its own version's declared types
  (`types`) before its migration reads it.

`conform` first gives a column that another writer (pandas, polars, DuckDB) stored in another type
of the same kind its declared type, where no value changes.

A journal's header is checked too (`header_problems`): its fields steer a resumed run (its plan,
shard and run group), name its paths and print its resume command (`options`: words on one line).
"""

from __future__ import annotations

import json
import math
from datetime import datetime, timezone

import pyarrow as pa
import pyarrow.compute as pc

from suite.core import jsontext, names
from suite.core.errors import UserError
from suite.core.text import CONTROL
from suite.results import columns

STATUSES = columns.STATUSES
REQUIRED = ("run_id", "scenario", "case_id", "workload", "precision", "status")


def _first(table: pa.Table, mask: pa.ChunkedArray, column: str) -> str:
    """`case <case_id>` (or the row number) of the first row where mask holds, for the message."""
    rows = pc.indices_nonzero(pc.fill_null(mask, False))
    i = rows[0].as_py()
    case = table.column("case_id")[i].as_py() if "case_id" in table.column_names else None
    where = f"case {case}" if isinstance(case, str) else f"row {i}"
    return f"{where}, {column} = {table.column(column)[i].as_py()!r}"


def _bad_count(mask) -> int:
    return pc.sum(mask).as_py() or 0  # a boolean sum counts the true values (nulls skipped)


def _fits(kind: pa.DataType, declared: str) -> bool:
    """Whether a column stored as `kind` holds the declared type (or nothing: all null)."""
    if pa.types.is_null(kind):
        return True
    if declared in ("string", "json"):
        return pa.types.is_string(kind) or pa.types.is_large_string(kind)
    if declared == "int":
        return pa.types.is_integer(kind)
    if declared == "float":
        return pa.types.is_floating(kind) or pa.types.is_integer(kind)
    if declared == "bool":
        return pa.types.is_boolean(kind)
    if declared == "timestamp":
        return pa.types.is_timestamp(kind)
    if pa.types.is_list(kind) or pa.types.is_large_list(kind):  # list<float>, list<bool>
        return _fits(kind.value_type, declared[5:-1])
    return False


def _same_kind(kind: pa.DataType, declared: str) -> bool:
    """Whether a column stored as `kind` may hold the declared type's values in another Arrow type:
    what pandas, polars and DuckDB write back from a read of a results file."""
    if declared.startswith("list<"):
        listed = pa.types.is_list(kind) or pa.types.is_large_list(kind) or pa.types.is_fixed_size_list(kind)
        return listed and _same_kind(kind.value_type, declared[5:-1])
    text = pa.types.is_string(kind) or pa.types.is_large_string(kind) or pa.types.is_string_view(kind)
    number = pa.types.is_integer(kind) or pa.types.is_floating(kind)
    return {"string": text, "json": text, "int": number, "float": number, "bool": pa.types.is_boolean(kind),
            "timestamp": pa.types.is_timestamp(kind)}.get(declared, False)


def conform(table: pa.Table, types: dict[str, str] | None = None) -> pa.Table:
    """Defined columns in their declared type (a column in the type `types` gives it, a file of an
    older schema's own, is left so) where another writer stored the same values in another Arrow
    type: large_string or string_view
    for text, large lists, a timestamp in ns or without its zone (UTC, as every producer writes),
    an int column with nulls widened to float64 by pandas (cast back when every value is whole), a
    column of nulls. A cast that would change a value is not made: `type_problems` then names the column."""
    by_name, types = columns.BY_NAME, types or {}
    for i, name in enumerate(table.column_names):
        column = by_name.get(name)
        if column is None:
            continue
        kind = table.schema.field(i).type
        if name in types and _fits(kind, types[name]):
            continue  # as its own schema stored it: the migration converts it
        target = columns.arrow_type(column)
        if kind == target or not (pa.types.is_null(kind) or _same_kind(kind, column.type)):
            continue
        try:
            cast = table.column(i).cast(target, safe=True)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            continue
        table = table.set_column(i, table.schema.field(i).with_type(target), cast)
    return table


def type_problems(table: pa.Table, types: dict[str, str] | None = None) -> list[str]:
    """Every defined column not in its declared type (nor in the one `types` gives it: a file of an
    older schema's own, by name), and JSON columns that do not parse."""
    out = []
    by_name, types = columns.BY_NAME, types or {}
    for name in table.column_names:
        column, kind = by_name.get(name), table.schema.field(name).type
        accepted = [] if column is None else [column.type] + ([types[name]] if name in types else [])
        if accepted and not any(_fits(kind, declared) for declared in accepted):
            out.append(f"column {name} holds {kind} values, expected {' or '.join(accepted)} "
                       "(suite/measure/columns.py)")
        elif column is not None and column.type == "json" and table.column(name).null_count < table.num_rows:
            for text in table.column(name).unique().drop_null().to_pylist():  # a few hundred distinct sets
                try:
                    value = jsontext.loads(text)
                except jsontext.JSONLimit as err:
                    out.append(f"column {name} holds {err}")
                    break
                except ValueError:
                    value = None
                if not isinstance(value, dict):
                    out.append(f"column {name} holds {text[:40]!r}, expected a JSON object")
                    break
    return out


def _fleet_problems(table: pa.Table) -> list[str]:
    """`run_group` a folder name, `shard_run_id` a run id, shards within their count (checked after
    the types)."""
    from suite.fleet.shard import MAX_SHARDS

    out, present = [], set(table.column_names)
    if "shard_run_id" in present and table.column("shard_run_id").null_count < table.num_rows:
        bad = pc.invert(pc.match_substring_regex(table.column("shard_run_id"), f"^{names.RUN_ID.pattern}$"))
        if _bad_count(bad):
            out.append(f"shard_run_id is not a run id ({_first(table, bad, 'shard_run_id')})")
    if "run_group" in present:
        for group in table.column("run_group").unique().drop_null().to_pylist():
            if not names.NAME.fullmatch(group):
                out.append(f"run_group {group!r} cannot name a run group (expected {names.NAME_RULE})")
    if {"shard_index", "shard_count"} <= present:
        index, count = table.column("shard_index"), table.column("shard_count")
        if pa.types.is_integer(index.type) and pa.types.is_integer(count.type):
            bad = pc.or_(pc.or_(pc.less(index, 0), pc.greater_equal(index, count)),
                         pc.or_(pc.less(count, 1), pc.greater(count, MAX_SHARDS)))
            if _bad_count(bad):
                out.append(f"shard_index must be from 0 to shard_count - 1, shard_count from 1 to {MAX_SHARDS:,} "
                           f"({_first(table, bad, 'shard_count')}, {_first(table, bad, 'shard_index')})")
    return out


def _shape_problems(table: pa.Table) -> list[str]:
    """A shaped case has all of m, k and n; an unshaped one none (a shape label, FLOPs and the
    plots read all three)."""
    if not {"m", "k", "n"} <= set(table.column_names):
        return []
    given = [pc.is_valid(table.column(d)) for d in ("m", "k", "n")]
    bad = pc.or_(pc.not_equal(given[0], given[1]), pc.not_equal(given[0], given[2]))
    if not _bad_count(bad):
        return []
    return [f"m, k and n must be given together or not at all ({_first(table, bad, 'm')})"]


def problems(table: pa.Table, types: dict[str, str] | None = None) -> list[str]:
    """Every way the records break the contract, one phrase each (empty: they keep it); `types`: the
    declared types a file of an older schema had where they differ from this one's, by name."""
    out: list[str] = []
    present = set(table.column_names)
    missing = [c for c in REQUIRED if c not in present]
    if missing:
        return [f"no {', '.join(missing)} column{'s' if len(missing) > 1 else ''} (not mpsuite records)"]
    for name in REQUIRED:
        col = table.column(name)
        if not pa.types.is_string(col.type) and not pa.types.is_large_string(col.type):
            if col.null_count == len(col):
                return [f"{name} is empty in every record"]
            return [f"{name} holds {col.type} values, expected text"]
        if col.null_count:
            out.append(f"{col.null_count} record(s) have no {name} (first: {_first(table, pc.is_null(col), name)})")
    if out:
        return out
    typed = type_problems(table, types)
    if typed:
        return typed  # the checks below assume the declared types
    bad = pc.invert(pc.match_substring_regex(table.column("run_id"), f"^{names.RUN_ID.pattern}$"))
    if _bad_count(bad):
        out.append(f"run_id is not a run id ({_first(table, bad, 'run_id')})")
    scenarios = table.column("scenario").unique().to_pylist()
    for name in scenarios:
        if not names.NAME.fullmatch(name):
            out.append(f"scenario {name!r} cannot name a folder (expected {names.NAME_RULE})")
    out += _fleet_problems(table) + _shape_problems(table)
    bad = pc.invert(pc.is_in(table.column("status"), value_set=pa.array(STATUSES)))
    if _bad_count(bad):
        out.append(f"status must be one of {', '.join(STATUSES)} ({_first(table, bad, 'status')})")
    if _unique_cases(table):
        return out + _range_problems(table) + _instant_problems(table)
    keys = pa.table({"run": table.column("run_id"), "case": table.column("case_id")})
    counts = keys.group_by(["run", "case"]).aggregate([([], "count_all")])
    dup = counts.filter(pc.greater(counts.column("count_all"), 1))
    if dup.num_rows:
        out.append(f"{dup.num_rows} case_id(s) appear more than once in one run "
                   f"(first: {dup.column('case')[0].as_py()} in run {dup.column('run')[0].as_py()})")
    return out + _range_problems(table) + _instant_problems(table)


def _unique_cases(table: pa.Table) -> bool:
    """Whether no case id is there twice in the whole table, so none is twice within a run: what
    settles a file of one run by counting distinct ids (cheaper than counting (run, case) pairs)."""
    case_ids = table.column("case_id")
    return len(pc.unique(case_ids)) == len(case_ids)


def _out_of_range(values: pa.Array, accepts) -> pa.Array:
    """Where numbers break their column's range (null where the value is null)."""
    if pa.types.is_floating(values.type):
        bad = pc.is_nan(values) if accepts.infinite else pc.invert(pc.is_finite(values))
    else:
        bad = pc.not_equal(values, values)  # all false: whole numbers are finite
    if accepts.low != -math.inf:
        bad = pc.or_(bad, (pc.less_equal if accepts.above else pc.less)(values, accepts.low))
    if accepts.high != math.inf:
        bad = pc.or_(bad, pc.greater(values, accepts.high))
    return bad


def _range_problems(table: pa.Table) -> list[str]:
    """Every number in its column's range (`suite.scenario.declare.Column.accepts`: a speedup from
    1e-12 to 1e12, a call's time at least 1 ns, a size or count not negative), numbers by now
    (`type_problems`), before any arithmetic reads them; a median time on every ok case."""
    out, present = [], set(table.column_names)  # once: column_names builds a new list each call
    for column in columns.COLUMNS:
        accepts = column.accepts
        if accepts is None or column.name not in present:
            continue
        col = table.column(column.name)
        listed = pa.types.is_list(col.type) or pa.types.is_large_list(col.type)
        values = pc.list_flatten(col) if listed else col
        if pa.types.is_null(values.type) or not len(values) or values.null_count == len(values):
            continue
        bad = _out_of_range(values, accepts)
        if not _bad_count(bad):
            continue
        first = pc.indices_nonzero(pc.fill_null(bad, False))[0].as_py()
        row = pc.list_parent_indices(col)[first].as_py() if listed else first
        case = table.column("case_id")[row].as_py()
        shown = values[first].as_py()
        out.append(f"column {column.name} holds {shown!r} (case {case}), expected {column.accepts_text} "
                   "(suite/measure/columns.py)")
    if "time_ms_median" in table.column_names:
        no_time = pc.and_(pc.equal(table.column("status"), "ok"), pc.is_null(table.column("time_ms_median")))
        if _bad_count(no_time):
            out.append(f"{_bad_count(no_time)} ok case(s) have no median time "
                       f"(first: {_first(table, no_time, 'time_ms_median')})")
    return out


# The instants a timestamp column may hold, in seconds from 1970 in UTC: those Python's datetime (and
# so pandas' isoformat, export and repro) can represent, years 1 to 9999; 9999-12-31T23:59:59-05:00
# is in year 10000 in UTC.
_INSTANTS = (int((datetime(1, 1, 1, tzinfo=timezone.utc) - datetime(1970, 1, 1, tzinfo=timezone.utc)).total_seconds()),
             int((datetime(9999, 12, 31, 23, 59, 59, tzinfo=timezone.utc)
                  - datetime(1970, 1, 1, tzinfo=timezone.utc)).total_seconds()) + 1)
_PER_SECOND = {"s": 1, "ms": 10**3, "us": 10**6, "ns": 10**9}


def _instant_problems(table: pa.Table) -> list[str]:
    """Timestamp columns (by now of a timestamp type: `type_problems`) within `_INSTANTS`, in
    whatever unit a file stores them (no cast that could fail on the way)."""
    out, present = [], set(table.column_names)
    for name in (c.name for c in columns.COLUMNS if c.type == "timestamp"):
        kind = table.schema.field(name).type if name in present else None
        if kind is None or not pa.types.is_timestamp(kind):
            continue
        ticks, per = pc.cast(table.column(name), pa.int64()), _PER_SECOND[kind.unit]
        low, high = max(_INSTANTS[0] * per, -2**63), min(_INSTANTS[1] * per, 2**63 - 1)
        bad = pc.or_(pc.less(ticks, low), pc.greater_equal(ticks, high))
        if _bad_count(bad):
            row = pc.indices_nonzero(pc.fill_null(bad, False))[0].as_py()
            out.append(f"{name} is a time outside years 1 to 9999 in UTC (case {table.column('case_id')[row].as_py()}, "
                       f"{ticks[row].as_py() / per:,.0f} s from 1970 in UTC)")
    return out


def check(table: pa.Table, source, types: dict[str, str] | None = None) -> None:
    """Raise one line naming `source` and the first broken rule, if any (`types` as for `problems`)."""
    found = problems(table, types)
    if found:
        more = f" (and {len(found) - 1} more problem{'s' if len(found) > 2 else ''})" if len(found) > 1 else ""
        raise UserError(f"{source}: {found[0]}{more}")


def check_types(schema: pa.Schema, source, types: dict[str, str] | None = None,
                known: dict[str, list[str]] | None = None) -> None:
    """Raise one line naming `source` where a column of `schema`, left out of a read because no
    record fills it, is in a type its declaration refuses (as `check` would on the column read).
    `known`: the problems of the schemas checked before under the same `types`, by `layout`, added
    to here (a year of nightlies leaves the same columns out of a thousand files: 5 ms each to check)."""
    key = layout(schema) if known is not None else ""
    found = None if known is None else known.get(key)
    if found is None:
        found = type_problems(conform(schema.empty_table(), types), types)
        if known is not None:
            known[key] = found
    if found:
        raise UserError(f"{source}: {found[0]}")


def layout(schema: pa.Schema) -> str:
    """The columns' names and types, in order, as one string (a tenth of the time of a tuple of
    them, or of hashing the schema): what tells apart tables a check or a concatenation treats alike."""
    return schema.to_string(show_field_metadata=False, show_schema_metadata=False)


def _is_text(value) -> bool:
    return isinstance(value, str)


def _is_word(value) -> bool:
    """A command-line word a resume command may print: text on one line, no control characters."""
    return isinstance(value, str) and "\n" not in value and not CONTROL.search(value)


# A journal header's fields, what each must be, and a test for it (None: the field may be absent).
HEADER_FIELDS = {
    "run_id": ("a run id", lambda v: isinstance(v, str) and names.RUN_ID.fullmatch(v)),
    "scenario": ("a scenario name", lambda v: isinstance(v, str) and names.NAME.fullmatch(v)),
    "schema_version": ("a whole number", lambda v: v is None or (isinstance(v, int) and not isinstance(v, bool))),
    "plan": ("a list of case ids", lambda v: v is None or (isinstance(v, list) and all(map(_is_text, v)))),
    "run_group": ("a run group's name", lambda v: v is None or (isinstance(v, str) and names.NAME.fullmatch(v))),
    "shard": ("[K, N], 0 <= K < N", lambda v: v is None or (
        isinstance(v, list) and len(v) == 2 and all(isinstance(x, int) and not isinstance(x, bool) for x in v)
        and 0 <= v[0] < v[1])),
    "spec": ("an object", lambda v: v is None or isinstance(v, dict)),
    "spec_hash": ("text", lambda v: v is None or isinstance(v, str)),
    "identity": ("an object", lambda v: v is None or isinstance(v, dict)),
    "code_hash": ("text", lambda v: v is None or isinstance(v, str)),
    "executor": ("ray or absent", lambda v: v in (None, "ray")),
    "options": ("a list of command-line words", lambda v: v is None or (isinstance(v, list) and all(map(_is_word, v)))),
}


def header_problems(header: dict) -> list[str]:
    """What is wrong with a journal's header, one phrase each."""
    return [f"journal header: {key} is {json.dumps(header.get(key))[:60]}, expected {what}"
            for key, (what, ok) in HEADER_FIELDS.items() if not ok(header.get(key))]


def check_header(header: dict, source) -> None:
    """Raise one line naming `source` and the first thing wrong with the journal's header."""
    found = header_problems(header)
    if found:
        raise UserError(f"{source}: {found[0]}")
