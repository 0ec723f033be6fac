"""The results store: one parquet file per run under `results/<scenario>/`, one row per case.

Only this module writes `results/`. Files are written to a unique temporary name in the same folder,
fsynced, then renamed into place, so a reader never sees half a file and two runs never collide.
The schema version lives in the parquet key-value metadata and in every row's `schema_version`
column (what is left of it after pandas, polars or DuckDB write a read of the file back); `read`
checks a file against its own version's contract, migrates an older one, and checks it again.

While a run is going, its finished cases live in a journal next to where its parquet will be,
`results/<scenario>/_journals/<run_id>.journal.jsonl` (format: `suite.results.journal`). `finish_run` turns the
journal into the parquet and then deletes it, so a journal on disk always means "this run is not
complete" and `--resume <run_id>` continues it.

The results folder may be a URL fsspec reaches (`s3://bucket/prefix`): every path here then is a
`suite.results.location.Remote`, files are published the object-store way, and a run's journal is
appended in a local spool and uploaded whole after each case, to the same `_journals/` key a local
run would use (`_remote_journal`), by the one process that holds the run's lease beside it
(`suite.results.lease`, the object-store form of the journal's `flock`).
"""

from __future__ import annotations

import json
import os
import secrets
import sys
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path
from typing import Iterable, NamedTuple

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from suite.core import files, jsontext, names
from suite.core.quantiles import median_level
from suite.results import columns, groups, journal, lease, location, validate
from suite.results.atomic import atomic_write
from suite.core.errors import JournalError, UserError

# 1: the first schema. 2: case ids from typed, normalised parameters (see `_typed_params`).
# 3: every defined column in every file, in its declared type (`suite.results.columns`); a
# version-2 file reads as before (the reader's frames are the same), so its migration is empty.
# 4: `started_at` a timestamp (UTC), no longer ISO 8601 text (`_timestamps`).
# 6: precisions renamed since (`_renamed`): Transformer Engine's `mxfp8`, `nvfp4` are `te_mxfp8`,
# `te_nvfp4`, the plain names torchao's formats (a file of version 5 or older means TE's).
SCHEMA_VERSION = 6
META_KEY = b"mpsuite.schema_version"

# Columns every record has (the record contract); workloads and recipes add more. Every column,
# with its type and unit, is defined in `suite.results.columns`.
CONTRACT = columns.CONTRACT
TIMESTAMP_COLUMNS = [c.name for c in columns.COLUMNS if c.type == "timestamp"]

def _typed_params(df: pd.DataFrame) -> pd.DataFrame:
    """Schema 1 -> 2. A case's identity now uses its validated parameters with defaults left out
    and only the keys its own workload or precision takes (`suite.scenario.params`), so `{}` and
    the explicit defaults are one case: `params`, `case_id` and `baseline_case_id` are recomputed
    that way, and the committed runs of version 1 join runs made now. A run that measured one case
    twice under a parameter it ignores (bf16 beside an FP8 recipe's `quantize` sweep) keeps the
    first. Rows of unknown workloads or precisions (an imported file) are left as they were."""
    df = _reidentify(df.copy(), df.index)
    return df.drop_duplicates(subset=["run_id", "case_id"], keep="first").reset_index(drop=True)


def _reidentify(df: pd.DataFrame, rows) -> pd.DataFrame:
    """`params`, `case_id` and `baseline_case_id` of these rows recomputed as planning computes them
    now (in place), where their workload and precision are known."""
    from suite.scenario import plan, registry

    def dim(value):
        return None if value is None or pd.isna(value) else int(value)

    for i, row in df.loc[rows].iterrows():
        workload, precision, baseline = row.get("workload"), row.get("precision"), row.get("baseline")
        if workload not in registry.WORKLOADS or precision not in registry.PRECISIONS:
            continue
        try:
            raw = jsontext.loads(row["params"]) if isinstance(row.get("params"), str) else {}
            own = plan.identity_params(workload, precision, raw)
            base = plan.identity_params(workload, baseline, raw) if baseline in registry.PRECISIONS else None
        except (UserError, ValueError, TypeError):
            continue  # parameters no model accepts: the row keeps its old identity
        shape = [dim(row.get(d)) for d in ("m", "k", "n")]
        df.at[i, "params"] = json.dumps(own, sort_keys=True)
        df.at[i, "case_id"] = plan.case_hash(workload, precision, *shape, own)
        if base is not None:
            df.at[i, "baseline_case_id"] = plan.case_hash(workload, baseline, *shape, base)
    return df


def renamed(version: int) -> dict[str, str]:
    """Old name -> name of the precisions that files of schema `version` and older call otherwise
    (each folder declares its own former name: `PrecisionRecord.formerly`)."""
    from suite.scenario import registry

    return {record.formerly[0]: name for name, record in registry.PRECISIONS.items()
            if record.formerly and record.formerly[1] == version}


def _renamed(df: pd.DataFrame, version: int = 5) -> pd.DataFrame:
    """Schema 5 -> 6: the precisions renamed after version 5 get their new names, and the rows
    naming them their case ids under those names (so they join runs made now, and never a case of
    the format that took the old name)."""
    names, columns = renamed(version), [c for c in ("precision", "baseline") if c in df]
    hit = pd.Series(False, index=df.index)
    for column in columns:
        hit |= df[column].isin(list(names))
    if not hit.any():
        return df
    df = df.copy()
    for column in columns:
        df.loc[hit, column] = df.loc[hit, column].replace(names)
    return _reidentify(df, df.index[hit])


def _timestamps(df: pd.DataFrame) -> pd.DataFrame:
    """Schema 3 -> 4: timestamp columns held ISO 8601 text; now timestamps in UTC (text without an
    offset was written as UTC). Text that is no time becomes null rather than costing the file.
    Each distinct text is parsed alone: pandas 2 parsing a column of ISO 8601 text gives an offset-less
    text the offset of an earlier one (09:30 after 10:00+01:00 read as 08:30 UTC); a version 3 file
    holds one text per case, so this is cheap."""
    df = df.copy()
    for column in TIMESTAMP_COLUMNS:
        if column in df:
            text = df[column]
            when = {value: pd.to_datetime(value, utc=True, format="ISO8601", errors="coerce")
                    for value in text.dropna().unique()}
            df[column] = pd.to_datetime(text.map(when), utc=True)
    return df


# schema version -> function upgrading a DataFrame from that version to the next one.
# 4 -> 5 added columns only (distributed steps, update-side precision, fleet runs): an older file
# reads without them, and a rewrite (`rewrite`) gives it every defined column, null.
MIGRATIONS: dict[int, callable] = {1: _typed_params, 2: lambda df: df, 3: _timestamps, 4: lambda df: df,
                                   5: _renamed}
# Declared types that differ in older schemas: column -> (the last version with it, its type then).
# An older file is checked against its own version's contract before a migration reads it (a
# column in either type passes: the migration converts the old one and keeps the new).
FORMER_TYPES: dict[str, tuple[int, str]] = {"started_at": (3, "string")}


def former_types(version: int) -> dict[str, str]:
    """The declared types of a file of schema `version`, by name, where they differ from this one's."""
    return {name: kind for name, (last, kind) in FORMER_TYPES.items() if version <= last}


# Creating the journal with O_EXCL catches the collisions a run id's random bits leave.
RUN_ID = names.RUN_ID
JOURNAL_SUFFIX = ".journal.jsonl"
# Journals live in a subfolder whose name pyarrow's dataset discovery skips (a leading "_"), so
# `pandas.read_parquet("results/<scenario>")` and DuckDB/polars globs see parquet files only.
JOURNAL_DIR = "_journals"


def new_run_id(now: datetime | None = None) -> str:
    now = now or datetime.now(timezone.utc)
    return f"{now:%Y%m%dT%H%M%SZ}-{secrets.token_hex(3)}"


def check_run_id(run_id: str) -> str:
    """A run id as `new_run_id` makes them; anything else (a path, '..') is refused."""
    if not RUN_ID.fullmatch(run_id):
        raise UserError(f"{run_id!r} is not a run id (expected e.g. 20250101T120000Z-1a2b3c, "
                        "as printed when the run started)")
    return run_id


def scenario_dir(results_dir: str | Path, scenario: str) -> Path:
    """`results/<scenario>`; the name must be one plain path component (never '..' or a path).
    `results_dir` may be a URL (`suite.results.location`): the folder is then a `Remote`."""
    return location.where(results_dir) / names.check_name("scenario name", scenario)


def run_path(results_dir: str | Path, scenario: str, run_id: str) -> Path:
    return scenario_dir(results_dir, scenario) / f"{check_run_id(run_id)}.parquet"


def journal_path(results_dir: str | Path, scenario: str, run_id: str) -> Path:
    return scenario_dir(results_dir, scenario) / JOURNAL_DIR / f"{check_run_id(run_id)}{JOURNAL_SUFFIX}"


def lease_path(journal_file: location.Remote) -> location.Remote:
    """The lease of a remote run (`suite.results.lease`), beside its journal."""
    return journal_file.parent / f"{journal_file.name[: -len(JOURNAL_SUFFIX)]}.lease"


def _plain_type(kind: pa.DataType) -> bool:
    """A type every reader takes as it is: text, a number, a bool, a time, or a list of one."""
    if pa.types.is_list(kind):
        return _plain_type(kind.value_type)
    return any(test(kind) for test in (pa.types.is_null, pa.types.is_string, pa.types.is_boolean,
                                       pa.types.is_integer, pa.types.is_floating, pa.types.is_timestamp))


def _column(values: list) -> tuple[pa.Array, bool]:
    """One column as an Arrow array; values of mixed types (a producer's bug, e.g. a number in
    one record and a string in the next) or of nested ones (an object: a struct parquet may not
    even hold) become JSON text rather than costing the whole run."""
    try:
        array = pa.array(values)
        if _plain_type(array.type):
            return array, False
    except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError, ValueError, TypeError):
        pass
    return pa.array([None if v is None else json.dumps(v, default=str) for v in values], pa.string()), True


def _instant(value):
    """A timestamp column's value as a time with its zone: records that went through a journal
    (JSON) hold ISO 8601 text; a time without a zone is UTC, as every producer writes it."""
    if isinstance(value, str):
        value = datetime.fromisoformat(value)
    if isinstance(value, datetime) and value.tzinfo is None:
        value = value.replace(tzinfo=timezone.utc)
    return value


def _typed(values: list, field: pa.Field) -> tuple[pa.Array, bool]:
    """A defined column in its declared type; a value that does not fit (a producer's bug) turns
    the column into JSON text rather than costing the run, and the file's metadata says so."""
    try:
        if pa.types.is_timestamp(field.type):
            values = [None if v is None else _instant(v) for v in values]
        return pa.array(values, type=field.type), False
    except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError, ValueError):
        return pa.array([None if v is None else json.dumps(v, default=str) for v in values], pa.string()), True


def _table(records: list[dict]) -> pa.Table:
    """Every defined column (`suite.results.columns`) in its declared type, in one order, null
    where a record has no value; a column no definition knows (there should be none: a test checks)
    after them, its type inferred."""
    records = [{**r, "schema_version": SCHEMA_VERSION} for r in records]  # the store stamps the version
    schema = columns.arrow_schema()
    extra = sorted({k for r in records for k in r} - set(schema.names))
    fields, arrays, as_text = [], [], []
    for field in [*schema, *(pa.field(name, pa.null()) for name in extra)]:
        values = [r.get(field.name) for r in records]
        array, text = _column(values) if field.name in extra else _typed(values, field)
        fields.append(pa.field(field.name, array.type, metadata=field.metadata))
        arrays.append(array)
        if text:
            as_text.append(field.name)
    table = pa.Table.from_arrays(arrays, schema=pa.schema(fields))
    meta = {META_KEY: str(SCHEMA_VERSION).encode(), b"mpsuite.columns": json.dumps(CONTRACT).encode(),
            b"mpsuite.text_columns": json.dumps(as_text).encode()}
    return table.replace_schema_metadata({**(table.schema.metadata or {}), **meta})


def records_of(df: pd.DataFrame) -> list[dict]:
    """A DataFrame of records back to plain records in the declared types (pandas turns an int
    column with nulls into floats, and lists into arrays), e.g. to rewrite a migrated file."""
    out = []
    kinds = {c.name: c.type for c in columns.all_columns()}  # once: the registry stands still while we read
    for row in df.to_dict("records"):
        record = {}
        for name, value in row.items():
            if hasattr(value, "tolist"):
                value = value.tolist()
            if isinstance(value, float) and value != value or value is pd.NaT:
                value = None
            kind = kinds.get(name)
            if kind == "int" and isinstance(value, float) and value.is_integer():
                value = int(value)
            record[name] = value
        out.append(record)
    return out


def rewrite(path: str | Path) -> Path:
    """Read a results file (migrating it) and write it back in the current schema, in place.
    Idempotent: a file the reader refuses (a column of the wrong type among them) is refused here
    too, left as it was, never re-encoded."""
    return write_run(records_of(read_file(path)), path)


def check_records(records: list[dict], source) -> None:
    """Records from elsewhere (an imported file) against the record contract: a one-line UserError
    naming `source` and what is wrong (`suite.results.validate`)."""
    validate.check(_table(records), source)


def write_run(records: list[dict], path: str | Path) -> Path:
    if not records:
        raise ValueError("a run with no records is not written")
    return _write(_table(records), path)


def _write(table: pa.Table, path: str | Path) -> Path:
    # Dictionary encoding of floats (per-round times: values that rarely repeat) saves nothing and
    # took 6x their size while the file was written; text and the rest keep it.
    coded = [f.name for f in table.schema if not pa.types.is_floating(f.type) and not (
        pa.types.is_list(f.type) and pa.types.is_floating(f.type.value_type))]
    return atomic_write(location.where(path), lambda tmp: pq.write_table(table, tmp, use_dictionary=coded))


def _uploader(remote: location.Remote, held: lease.Lease | None):
    """The uploader of a remote run's journal: a failed upload (a network blip) costs nothing that
    the local journal does not keep, so it is a warning and the run goes on; a run another process
    has taken over (`lease.Held`) stops."""

    def mirror(local: Path) -> None:
        try:
            remote.put(local) if held is None else held.upload(local.read_bytes())
        except lease.Held:
            _lost(local)
            raise
        except Exception as err:  # any backend's error: the local journal is durable either way
            _warn(f"cannot upload the run journal to {remote} ({err}); it is kept in {local}")

    return mirror


def _lost(local: Path) -> None:
    """A run another process has taken over: this machine's copy of its journal is out of date
    (the bucket's is the run's now), and a later resume here must not take it for the longer one."""
    local.unlink(missing_ok=True)


def _remote_journal(opened: journal.Journal, remote: location.Remote, held: lease.Lease | None) -> journal.Journal:
    opened.mirror, opened.lease = _uploader(remote, held), held
    return opened


def start_run(results_dir: str | Path, scenario: str, run_id: str, header: dict) -> journal.Journal:
    """Create the journal of a new run; `header` holds what a resume must check (plan, machine).
    For remote results the journal is appended in the local spool and its copy created remotely
    only if no run has this id there (the object-store form of O_EXCL), under the run's lease
    where the store writes conditionally (`suite.results.lease`; elsewhere a run cannot be resumed)."""
    header = {"run_id": run_id, "scenario": scenario, "schema_version": SCHEMA_VERSION, **header}
    path = journal_path(results_dir, scenario, run_id)
    if not isinstance(path, location.Remote):
        return journal.Journal.create(path, header)
    local = location.spool(path)
    opened = journal.Journal.create(local, header)
    try:
        if path.conditional() is None:
            opened.lease = lease.Lease.take(lease_path(path), path, run_id)
            opened.lease.journal_etag = path.create(local)
        else:
            path.create(local)
    except (FileExistsError, lease.Held):
        opened.close()
        local.unlink(missing_ok=True)
        raise JournalError(f"{path}: a run journal with this run id already exists") from None
    except BaseException:
        opened.close()
        local.unlink(missing_ok=True)
        raise
    return _remote_journal(opened, path, opened.lease)


def incomplete_runs(results_dir: str | Path, scenario: str) -> list[str]:
    """Run ids of this scenario that have a journal and no results file yet, oldest first."""
    folder = scenario_dir(results_dir, scenario)
    ids = [p.name[: -len(JOURNAL_SUFFIX)] for p in (folder / JOURNAL_DIR).glob(f"*{JOURNAL_SUFFIX}")
           if journal.has_header(p)]
    return sorted(i for i in ids if RUN_ID.fullmatch(i) and not (folder / f"{i}.parquet").exists())


def _local_copy(remote: location.Remote, held: lease.Lease) -> Path:
    """The spool file of a remote run's journal, brought up to date from the uploaded copy when
    that holds more (the run went on elsewhere, or this machine never held it); the copy's ETag
    goes to `held`, so that this process replaces only what it read."""
    local = location.spool(remote)
    try:
        data, held.journal_etag = remote.read_object()
    except FileNotFoundError:
        return local  # never uploaded (the upload failed): only this machine's copy exists
    except Exception as err:
        raise UserError(f"cannot read the run journal {remote}: {err}") from None
    if not local.exists() or local.stat().st_size < len(data):
        atomic_write(local, lambda tmp: tmp.write_bytes(data))
    return local


def _lease(remote: location.Remote, run_id: str) -> lease.Lease:
    """The lease of a remote run to resume, taken before anything is read or measured; refused in
    one line where the store cannot keep one writer per run, or another process holds it."""
    why = remote.conditional()
    if why is not None:
        raise UserError(f"cannot resume run {run_id}: {why}, without which a second process could write the "
                        "run too; start a new run")
    return lease.Lease.take(lease_path(remote), remote, run_id)


def continue_run(results_dir: str | Path, scenario: str, run_id: str) -> journal.Journal:
    """Reopen the journal of an interrupted run, locked (and, remote, under the run's lease), with
    its finished records loaded."""
    done = run_path(results_dir, scenario, run_id)
    path = journal_path(results_dir, scenario, run_id)
    remote = path if isinstance(path, location.Remote) else None

    def refuse_if_complete():
        if done.exists():
            raise UserError(f"run {run_id} is already complete: {done}")

    refuse_if_complete()
    held = _lease(remote, run_id) if remote is not None else None
    try:
        if remote is not None:
            path = _local_copy(remote, held)
        if not path.exists():
            others = incomplete_runs(results_dir, scenario)
            hint = f"; runs that can be resumed: {', '.join(others)}" if others else "; no run of it can be resumed"
            raise UserError(f"no journal of run {run_id} for scenario {scenario!r} in {(remote or path).parent}{hint}")
        opened = journal.Journal.resume(path, lambda contents: _check_journal(contents, path, run_id, scenario))
    except BaseException:
        if held is not None:
            held.release()
        raise
    if remote is not None:
        _remote_journal(opened, remote, held)
    try:
        refuse_if_complete()  # it may have finished while we waited for the lock
    except BaseException:
        opened.close()
        raise
    return opened


def _check_journal(contents: journal.Contents, path, run_id: str | None = None, scenario: str | None = None) -> None:
    """A journal (perhaps copied from elsewhere, or edited) checked before anything runs or changes
    it: its header (`validate.check_header`), the run and schema version it must be (to resume it),
    and its records against the record contract (`validate.check`)."""
    head = contents.header or {}
    validate.check_header(head, path)
    if run_id is not None and (head.get("run_id") != run_id or head.get("scenario") != scenario):
        raise UserError(f"{path}: journal belongs to run {head.get('run_id')!r} of scenario "
                        f"{head.get('scenario')!r}, not run {run_id} of {scenario!r}")
    version = head.get("schema_version")
    if run_id is not None and version != SCHEMA_VERSION or version is not None and version > SCHEMA_VERSION:
        raise UserError(f"{path}: journal written with results schema version {version!r}; this mpsuite "
                        f"writes version {SCHEMA_VERSION} and cannot "
                        f"{'mix them in one run; start a new run' if run_id else 'read a newer one; upgrade mpsuite'}")
    if contents.records:
        validate.check(_table(contents.records), path)


def forget_journal(results_dir: str | Path, scenario: str, run_id: str) -> None:
    """The journal (and, remote, the lease) of a run stored whole: inert, deleted."""
    path = journal_path(results_dir, scenario, run_id)
    path.unlink(missing_ok=True)
    if isinstance(path, location.Remote):
        lease_path(path).unlink(missing_ok=True)


def journal_header(results_dir: str | Path, scenario: str, run_id: str) -> dict:
    """The checked header of a run's journal (`validate.check_header`); {} where there is none."""
    path = journal_path(results_dir, scenario, run_id)
    if not path.exists():
        return {}
    head = journal.read(path).header or {}
    validate.check_header(head, path)
    return head


class Stored(NamedTuple):
    """A run as `finish_run` stored it: its file, and its records as `read_file` would read them back
    (the same table, made into pandas without the round trip through the file)."""

    path: Path
    records: pd.DataFrame


def request_columns(head: dict) -> dict:
    """What the run was asked (its journal header's validated scenario spec and its hash) as record
    columns, so the stored run carries them once its journal is gone (`python -m suite repro`)."""
    if not head.get("spec"):
        return {}
    return {"scenario_spec": json.dumps(head["spec"], sort_keys=True), "scenario_hash": head.get("spec_hash")}


def finish_run(run: journal.Journal, results_dir: str | Path, order: list[str]) -> Stored:
    """Write the run's parquet (atomically) from its journal, records in `order` (case ids; any
    others after), then delete the journal: the parquet now holds every record it had."""
    head = run.header
    rank = {case_id: i for i, case_id in enumerate(order)}
    asked = request_columns(head)
    records = sorted(({**r, **asked} for r in run.records), key=lambda r: rank.get(r["case_id"], len(rank)))
    try:
        table = _table(records)
        validate.check(table, run.path)  # what the reader would refuse is never written, nor its journal deleted
        if run.lease is not None:
            try:
                run.lease.renew()  # a process that lost the run writes no results
            except lease.Held:
                _lost(run.path)
                raise
        path = _write_results(table, results_dir, head, run.path)
        _drop_journal(run, results_dir, head, path)
    finally:
        run.close()
    return Stored(path, _frame(table))


def _write_results(table: pa.Table, results_dir: str | Path, head: dict, journal_file) -> Path:
    try:
        return _write(table, run_path(results_dir, head["scenario"], head["run_id"]))
    except Exception as err:
        if not (isinstance(err, OSError) or location.is_storage_error(err)):
            raise
        raise UserError(f"cannot write the results of run {head['run_id']}: {err}; the journal "
                        f"{journal_file} still holds every finished case") from None


def _drop_journal(run: journal.Journal, results_dir: str | Path, head: dict, path) -> None:
    """The journal of a run now stored whole is inert: deleted (and its remote copy), its folder too
    when it was the last."""
    if isinstance(path, location.Remote):
        try:  # this process wrote the results, so the run is its own: the journal goes whoever wrote it last
            journal_path(results_dir, head["scenario"], head["run_id"]).unlink(missing_ok=True)
        except Exception as err:  # the run is stored whole; its journal copy beside it is inert
            _warn(f"cannot delete the run journal's copy in {path.parent}: {err}")
    try:
        run.path.unlink()
        journal.fsync_dir(run.path.parent)
    except OSError:
        pass  # a journal beside its run's parquet is inert: never resumed, never read
    try:
        run.path.parent.rmdir()  # the last journal of the folder: leave only parquet files
    except OSError:
        pass


@contextmanager
def _source(path):
    """What pyarrow reads: a remote file's bytes, fetched once; a local file opened only if it is a
    regular file (a FIFO named *.parquet would block its reader forever: `suite.core.files`)."""
    if isinstance(path, location.Remote):
        try:
            data = path.read_bytes()
        except FileNotFoundError as err:
            raise OSError(f"no such file: {err}") from None
        yield pa.BufferReader(data)
        return
    with files.reader(path) as f:
        # a small file whole, as one buffer: pyarrow then parses and decodes it without calling back
        # into Python for each read (so without the GIL: `read_files` reads files on threads)
        yield pa.BufferReader(f.read()) if os.fstat(f.fileno()).st_size <= WHOLE_FILE else f


# The size up to which `_source` reads a local results file whole (a nightly's is 100 KB; a million
# records are read as a file, as they were).
WHOLE_FILE = 16 * 2**20


def _version(path, meta: dict | None, column=None) -> int:
    """A file's schema version: its metadata's, else its `schema_version` column's (`column()` reads
    it: pandas, polars and DuckDB drop the metadata when they write a read of the file back)."""
    meta = meta or {}
    if META_KEY not in meta:
        values = column() if column is not None else None
        if values is None:
            raise UserError(f"{path}: not an mpsuite results file (no {META_KEY.decode()} metadata and no "
                            "schema_version column)")
        return _column_version(path, values)
    try:
        return int(meta[META_KEY])
    except ValueError:
        raise UserError(f"{path}: results schema version {meta[META_KEY]!r} is not a number") from None


def _column_version(path, values: pa.ChunkedArray) -> int:
    """The one version a `schema_version` column holds, a whole number in every row."""
    try:
        values = values.cast(pa.int64(), safe=True) if pa.types.is_floating(values.type) else values
    except pa.ArrowInvalid:
        pass
    found = values.unique().to_pylist()
    if not pa.types.is_integer(values.type) or None in found or len(found) != 1:
        shown = ", ".join(map(repr, found[:4]))
        raise UserError(f"{path}: column schema_version holds {shown}, expected one schema version (a whole number) "
                        "in every row")
    return found[0]


def _file_version(path, parquet: pq.ParquetFile, schema: pa.Schema | None = None) -> int:
    """The schema version of an opened results file (reading one column at most); `schema`: its
    Arrow schema where the caller has it (made from the file's metadata on each ask: 0.5 ms)."""
    schema = parquet.schema_arrow if schema is None else schema

    def column():
        if "schema_version" not in schema.names:
            return None
        return parquet.read(columns=["schema_version"]).column(0)

    return _version(path, schema.metadata, column)


def schema_version_of(path: Path) -> int:
    try:
        with _source(location.where(path)) as source:
            return _file_version(path, pq.ParquetFile(source))
    except (OSError, pa.ArrowException) as err:
        raise UserError(f"{path}: cannot read results file: {err}") from None


def _arrow_list(kind: pa.DataType):
    """pandas' type for a column of a `lean` read: Arrow-backed where it is a list."""
    return pd.ArrowDtype(kind) if pa.types.is_list(kind) else None


# The schema of no column: what a read leaves out where it reads every column.
EMPTY = pa.schema([])


def read_file(path: str | Path, lean: bool = False) -> pd.DataFrame:
    """A results file's records (checked against the record contract of its own schema version,
    migrated to this one, checked again). `lean`, for reading a million records into a report: list
    columns (per-sample times, loss curves) stay Arrow arrays, null where a record has none, rather
    than a numpy array per cell (`suite.analysis.frame.derived.stalls` reads them columnar), and columns no
    record fills are left out (the contract's stay); made into pandas, they would cost seconds."""
    path = location.where(path)
    return with_interval_levels(_records(path, *_read_table(path, lean), lean))


def _records(path, version: int, table: pa.Table, left_out: pa.Schema, lean: bool = False) -> pd.DataFrame:
    """`read_file` of a table read from `path`, of schema `version`, less the columns `left_out`."""
    # A file from elsewhere is data, not trusted: its records are checked against the contract as
    # its own version defines it (types, then every number's range), so a migration only ever
    # reads valid rows, and again as this version defines it once migrated. A column left out
    # unread holds no value, so its type is all there is to check.
    types = former_types(version)
    table = validate.conform(table, types)
    validate.check(table, path, types)
    validate.check_types(left_out, path, types)
    current = version == SCHEMA_VERSION
    try:
        df = _frame(table, lean=lean and current)
    except (pa.ArrowException, ValueError, TypeError) as err:
        raise UserError(f"{path}: cannot read results file: {err}") from None
    while version < SCHEMA_VERSION:
        if version not in MIGRATIONS:
            raise UserError(f"{path}: results schema version {version} has no migration to {SCHEMA_VERSION}")
        df = MIGRATIONS[version](df)
        version += 1
    if not current:
        check_records(records_of(df), path)
    return df


# Interval columns -> the count of values each interval was taken from: runs before issue #38 stored
# the intervals without their coverage, a function of that count alone (`quantiles.median_level`).
# (The fidelity workload's own interval is its folder's: its old runs keep a null level, which its
# column's description explains.)
LEVEL_OF_COUNT = {"speedup_paired_level": "paired_rounds"}


def with_interval_levels(df: pd.DataFrame) -> pd.DataFrame:
    """The records with each paired interval's level filled in where a file predates it: the stored
    ends are the same order statistics as now, and only their coverage was unsaid (read as 95%)."""
    for level, count in LEVEL_OF_COUNT.items():
        if count not in df:
            continue
        counts = pd.to_numeric(df[count], errors="coerce")
        missing = counts.gt(0) & (df[level].isna() if level in df else True)
        if missing.any():
            filled = counts[missing].map({n: median_level(int(n)) for n in counts[missing].unique()})
            df[level] = (df[level] if level in df else pd.Series(np.nan, index=df.index)).astype(float)
            df.loc[missing, level] = filled
    return df


def _read_table(path, lean: bool = False) -> tuple[int, pa.Table, pa.Schema]:
    """A results file's schema version, its table as stored, and the schema of the columns left out
    of it: with `lean`, a file of this schema version is read projected (`_read_projected`); a newer
    version is refused."""
    try:
        with _source(path) as source:
            parquet = pq.ParquetFile(source)
            schema = parquet.schema_arrow
            version = _file_version(path, parquet, schema)
            if version > SCHEMA_VERSION:
                raise UserError(f"{path}: written with results schema version {version}, newer than this "
                                f"mpsuite's {SCHEMA_VERSION}; upgrade mpsuite to read it")
            if lean and version == SCHEMA_VERSION:
                return version, *_read_projected(parquet, schema)
            return version, parquet.read(use_threads=_threaded(parquet)), EMPTY
    except (OSError, pa.ArrowException) as err:
        raise UserError(f"{path}: cannot read results file: {err}") from None


# Rows from which a file is decoded on several threads: below, starting them costs more than they
# save (a nightly's file of a few dozen cases decodes in half the CPU time on one).
THREADED_ROWS = 10_000


def _threaded(parquet: pq.ParquetFile) -> bool:
    return parquet.metadata.num_rows >= THREADED_ROWS


def _empty_columns(parquet: pq.ParquetFile, schema: pa.Schema) -> set[str]:
    """The flat columns the file's own statistics show null in every row (each row group's chunk
    counts as many nulls as rows): most of a results file's columns belong to other workloads. (A
    list's statistics count an empty list as null too, so lists are never among them.)"""
    meta = parquet.metadata
    if meta.num_row_groups == 0:
        return set()
    flat = _by_schema(("flat leaves", validate.layout(schema)), lambda: _flat_leaves(meta, schema))
    empty = {name for _, name in flat}
    for r in range(meta.num_row_groups):
        group = meta.row_group(r)
        for j, name in flat:
            if name in empty:
                stats = group.column(j).statistics
                if stats is None or not stats.has_null_count or stats.null_count != group.num_rows:
                    empty.discard(name)
    return empty


def _flat_leaves(meta: pq.FileMetaData, schema: pa.Schema) -> tuple[tuple[int, str], ...]:
    """(leaf position, name) of each flat column of a file of this schema (a list's leaf,
    `samples_ms.list.element`, is not asked); none where a name is there twice (read as it is)."""
    if len(set(schema.names)) < len(schema.names):
        return ()
    flat = {field.name for field in schema if not pa.types.is_nested(field.type)}
    group = meta.row_group(0)
    leaves = ((j, group.column(j).path_in_schema) for j in range(group.num_columns))
    return tuple((j, name) for j, name in leaves if name in flat)


class _Projection(NamedTuple):
    """A `lean` read of a schema with these columns empty: the columns read, the table's columns
    (each the name of one read, or the type of one made as nulls) and schema, the left out's schema."""

    read: list[str]
    columns: list[tuple[str, pa.DataType | None]]
    schema: pa.Schema
    left_out: pa.Schema


def _projection(schema: pa.Schema, empty: frozenset) -> _Projection:
    kept = [f for f in schema if f.name not in empty or f.name in CONTRACT]
    return _Projection([name for name in schema.names if name not in empty],
                       [(f.name, f.type if f.name in empty else None) for f in kept],
                       pa.schema(kept, metadata=schema.metadata),
                       pa.schema([f for f in schema if f.name in empty and f.name not in CONTRACT]))


def _read_projected(parquet: pq.ParquetFile, schema: pa.Schema) -> tuple[pa.Table, pa.Schema]:
    """A `lean` read's table: the columns some record fills, and the contract's (those empty made as
    nulls of their type, not decoded), and the schema of the empty ones left out, whose types are
    still checked (`validate.check_types`). A million records of 226 columns, 200 of them empty,
    read in a tenth of the time of the whole table."""
    empty = frozenset(_empty_columns(parquet, schema))
    if not empty:
        return parquet.read(use_threads=_threaded(parquet)), EMPTY
    metadata = tuple(sorted((schema.metadata or {}).items()))
    plan = _by_schema(("projection", validate.layout(schema), metadata, empty), lambda: _projection(schema, empty))
    read = parquet.read(columns=plan.read, use_threads=_threaded(parquet))
    rows = parquet.metadata.num_rows
    arrays = [read.column(name) if null is None else pa.nulls(rows, null) for name, null in plan.columns]
    return pa.Table.from_arrays(arrays, schema=plan.schema), plan.left_out


# What a read works out from a file's schema alone, kept for the next file of the same schema (a
# year of nightlies is a thousand files of one schema, 1 ms each to work it out again), by what it
# depends on: the schema's `validate.layout`, its metadata, the columns found empty.
_SCHEMA_MEMO: dict[tuple, object] = {}
SCHEMA_MEMO_SIZE = 256


def _by_schema(key: tuple, make):
    """The memo's value of `key`, made (`make()`) where it has none (`read_files`' threads may both
    make one: the same value)."""
    found = _SCHEMA_MEMO.get(key)
    if found is None:
        if len(_SCHEMA_MEMO) >= SCHEMA_MEMO_SIZE:
            _SCHEMA_MEMO.clear()
        found = _SCHEMA_MEMO[key] = make()
    return found


def _frame(table: pa.Table, lean: bool = False) -> pd.DataFrame:
    """A results table as the readers' DataFrame, stamped with this schema version (`lean`: as for
    `read_file`)."""
    if lean:
        table = table.select([c for c in table.column_names if c in CONTRACT or table[c].null_count < table.num_rows])
    df = table.to_pandas(types_mapper=_arrow_list if lean else None)
    df["schema_version"] = SCHEMA_VERSION
    return df


def run_files(paths: Iterable[str | Path]) -> list[Path]:
    """Parquet run files under the given files or folders (recursively), oldest name first."""
    found: list[Path] = []
    for p in map(location.where, paths):
        if p.is_dir():
            found += sorted(f for f in p.rglob("*.parquet") if not f.name.startswith("."))
        elif p.is_file():
            found.append(p)
        elif isinstance(p, Path) and p.exists():
            raise UserError(f"{p}: {files.kind(p.stat().st_mode)}, not a results file or folder")
        else:
            raise UserError(f"{p}: no such results file or folder")
    return found


def unfinished_journals(paths: Iterable[str | Path]) -> list[Path]:
    """Journals under the given files or folders (recursively) whose run has no results file yet:
    interrupted runs, or runs still going. Oldest name first."""
    found: list[Path] = []
    for p in map(location.where, paths):
        candidates = sorted(p.rglob(f"*{JOURNAL_SUFFIX}")) if p.is_dir() else [p] if p.name.endswith(JOURNAL_SUFFIX) else []
        for path in candidates:
            run_id = path.name[: -len(JOURNAL_SUFFIX)]
            folder = path.parent.parent if path.parent.name == JOURNAL_DIR else path.parent
            if RUN_ID.fullmatch(run_id) and not (folder / f"{run_id}.parquet").exists():
                found.append(path)
    return found


def read_journal(path: str | Path) -> pd.DataFrame:
    """The finished cases of an unfinished run, as records typed like a results file's, marked
    `run_partial` with `run_planned_cases` (how many the run was to have)."""
    contents = journal.read(path)
    _check_journal(contents, path)
    if not contents.records:
        return pd.DataFrame()
    df = _table(contents.records).to_pandas()
    df["run_partial"] = True
    df["run_planned_cases"] = len((contents.header or {}).get("plan") or []) or None
    return with_interval_levels(df)


def _warn(message: str) -> None:
    print(f"mpsuite: warning: {message}", file=sys.stderr)


class Part(NamedTuple):
    """Records read from several files: `source[i]` is the position of row i's file (in the list read)."""

    records: pd.DataFrame
    source: np.ndarray


def read_files(paths: list, lean: bool = False) -> tuple[list[Part], dict[int, UserError]]:
    """Each file's records as `read_file` reads them (`lean` as there), in as few frames as the
    files allow, and the error of each file that `read_file` would refuse, by its position. The
    files of this schema version that store the same columns in the same types are checked and
    made into pandas as one table: a year of nightlies is a thousand small files, and per file the
    checks and the conversion cost 40 ms. Every check is per record or over a run's records
    (`suite.results.validate`), so a table that keeps the contract is files that each keep it;
    one that breaks it is checked by halves down to the file, so that a broken file is named and
    the rest read. Older files are read one by one (each is checked against its own version, then migrated)."""
    parts, errors, batches = [], {}, {}  # batches: stored schema -> (position, table) of its files
    left_out_types: dict = {}  # what `validate.check_types` found of each schema of left-out columns
    for i, (path, read) in enumerate(zip(paths, _read_tables(paths, lean))):
        try:
            if isinstance(read, UserError):
                raise read
            version, table, left_out = read
            if version != SCHEMA_VERSION:
                parts.append(Part(_records(path, version, table, left_out, lean), np.full(1, i)))
                continue
            validate.check_types(left_out, path, former_types(version), left_out_types)
            batch = batches.setdefault(validate.layout(table.schema), [])
            batch.append((i, table))
            if len(batch) % COMPACT == 0:
                batch[-COMPACT:] = _compacted(batch[-COMPACT:])
        except UserError as err:
            errors[i] = err
    for batch in batches.values():
        for rows, table in _keeping(batch, paths, errors):
            try:
                parts.append(Part(_frame(table, lean=lean), rows))
            except (pa.ArrowException, ValueError, TypeError):  # named file by file, as read_file does
                for i in dict.fromkeys(rows):
                    try:
                        records = _records(paths[i], SCHEMA_VERSION, dict(batch)[i], EMPTY, lean)
                        parts.append(Part(records, np.full(1, i)))
                    except UserError as err:
                        errors[i] = err
    return [p._replace(source=np.resize(p.source, len(p.records))) for p in parts], errors


# Threads `read_files` reads files on: a small file's read is mostly pyarrow's own work (its footer
# parsed, its columns decoded), done without the GIL, so a second thread keeps a second core busy
# (the Python around it, and the checks on the main thread, hold the GIL: a third would mostly
# wait). They read at most READ_AHEAD files ahead of the one being checked.
READ_THREADS, READ_AHEAD = 2, 8


def _read_tables(paths: list, lean: bool):
    """`_read_table(path, lean)` of each path (or the UserError it raised), in order, read on
    READ_THREADS threads."""
    def one(path):
        try:
            return _read_table(path, lean)
        except UserError as err:
            return err

    if len(paths) < 2:
        yield from map(one, paths)
        return
    with ThreadPoolExecutor(READ_THREADS, thread_name_prefix="mpsuite-read") as pool:
        pending = deque()
        for path in paths:
            pending.append(pool.submit(one, path))
            if len(pending) > READ_AHEAD:
                yield pending.popleft().result()
        while pending:
            yield pending.popleft().result()


# Files whose tables are copied into one as they are read: a small file's table held as read costs
# about 400 KB (a buffer per column, each its own allocation), a thousand of them more than the rest.
COMPACT = 64


def _compacted(tables: list[tuple[int, pa.Table]]) -> list[tuple[int, pa.Table]]:
    """The same tables, as slices of one copy of them all."""
    whole = pa.concat_tables([t for _, t in tables]).combine_chunks()
    starts = np.cumsum([0] + [t.num_rows for _, t in tables])
    return [(i, whole.slice(start, t.num_rows)) for (i, t), start in zip(tables, starts)]


def _keeping(tables: list[tuple[int, pa.Table]], paths: list, errors: dict) -> list[tuple[np.ndarray, pa.Table]]:
    """The files' tables (of one stored schema) that keep the contract, conformed and joined: all of
    them where their concatenation does, else those of each half (a bad file costs a check per
    halving, not one per file), each with the file position of its rows; the error of a file that
    breaks it goes into `errors`, by position."""
    joined = pa.concat_tables([t for _, t in tables]) if len(tables) > 1 else tables[0][1]
    joined = validate.conform(joined)
    if len(tables) == 1:
        i = tables[0][0]
        try:
            validate.check(joined, paths[i])
        except UserError as err:
            errors[i] = err
            return []
    elif validate.problems(joined):
        half = len(tables) // 2
        return _keeping(tables[:half], paths, errors) + _keeping(tables[half:], paths, errors)
    return [(np.repeat([i for i, _ in tables], [t.num_rows for _, t in tables]), joined)]


def read(paths: Iterable[str | Path], unfinished: bool = False, warn=_warn, lean: bool = False) -> pd.DataFrame:
    """All records of the runs under `paths`, as one DataFrame; with `unfinished`, also the
    finished cases of runs that have only a journal (marked `run_partial`, for a partial report);
    `lean` as for `read_file`, and the run-constant strings (`RUN_CONSTANT`) made categoricals.

    A file that cannot be read or breaks the record contract is left out, with `warn` told which
    and why, so one bad file never hides every other run; a file named explicitly is an error.
    A run read from two files (a copy, a second import) counts once (`_once`)."""
    paths = list(paths)
    named = {p for p in map(location.where, paths) if p.is_file()}
    sources = run_files(paths)
    parts, errors = read_files(sources, lean)
    left_out = [sources[i] for i in sorted(errors)]
    for i in sorted(errors):
        if sources[i] in named:
            raise errors[i]
        warn(f"left out {errors[i]}")
    journals = unfinished_journals(paths)
    if unfinished:
        for path in journals:
            try:
                df = read_journal(path)
            except (UserError, OSError) as err:
                warn(f"left out {path}: {err}" if str(path) not in str(err) else f"left out {err}")
                continue
            if df.empty:
                warn(f"run {path.name[: -len(JOURNAL_SUFFIX)]} is unfinished with no finished case yet ({path})")
            else:
                parts.append(Part(df, np.full(len(df), len(sources))))
                sources.append(path)
    if not parts:
        where = ", ".join(map(str, paths))
        why = f"; {len(left_out)} file(s) left out as unreadable" if left_out else ""
        runs = [p.name[: -len(JOURNAL_SUFFIX)] for p in journals]
        pending = f"; unfinished run(s) without a results file yet: {', '.join(runs)}" if runs else ""
        raise UserError(f"no results (*.parquet) under {where}{why}{pending}")
    # a fleet run's shards: one run
    df = with_interval_levels(groups.as_runs(_in_file_order(_once(parts, sources, warn)), warn))
    return as_categories(df, RUN_CONSTANT) if lean else df


# Columns a run holds one value of (and a results folder a handful): a `lean` read makes each a
# categorical, so that each of the report's groupings, joins and comparisons on them works on a
# code per row, not a string (10^6 records: 0.3-0.9 s less CPU of 9.5 s, 50 MB less peak memory in
# `report`). `precision` and `baseline` stay strings: they are compared with each other row by row,
# which two categoricals of different categories refuse. Code on a lean frame writes no new value
# into these columns, maps them with `.astype(str)` first, and drops value_counts' zero counts.
RUN_CONSTANT = ("run_id", "scenario", "workload", "status", "device", "device_name", "torch_version")


# pandas 2 groups by every category of a categorical key, held or not, unless each groupby asks for
# observed=True (pandas 3's default): there the run-constant columns stay strings.
CATEGORICALS = int(pd.__version__.split(".")[0]) >= 3


def as_categories(df: pd.DataFrame, names: Iterable[str]) -> pd.DataFrame:
    """`df` with each of the string columns `names` it holds as an ordered categorical of its sorted
    values: sorting, min and max order it as they order the strings (`df` as it is under pandas 2)."""
    if not CATEGORICALS:
        return df
    for name in names:
        if name in df and pd.api.types.is_string_dtype(df[name].dtype):
            values = df[name].astype("category")
            df[name] = values.cat.reorder_categories(sorted(values.cat.categories), ordered=True)
    return df


def _in_file_order(parts: list[Part]) -> pd.DataFrame:
    """The parts' records as one frame, file by file in the order read."""
    df = pd.concat([p.records for p in parts], ignore_index=True) if len(parts) > 1 else parts[0].records
    source = np.concatenate([p.source for p in parts])
    if len(parts) > 1 and (np.diff(source) < 0).any():
        df = df.take(np.argsort(source, kind="stable"))
    return df.reset_index(drop=True)


# What identifies one measurement, whatever its run id says: the cases with their start times and
# medians (two runs never share a start time to the microsecond and a median to the last bit).
MEASUREMENT = ["case_id", "started_at", "time_ms_median", "status"]


def _once(parts: list[Part], sources: list, warn) -> list[Part]:
    """Each run once: a run id already read from another file (a copied results file), or the same
    measurement under another run id (a file imported twice), is left out, with a warning naming
    both files. The first file read (in path order) keeps it."""
    source = parts[0].source if len(parts) == 1 else None
    if source is not None and parts[0].records["run_id"].nunique() < 2 and (source[:1] == source).all():
        return parts  # one run of one file (or none): nothing to count twice (and a million rows left unhashed)
    ids: dict[str, object] = {}
    measured: dict[int, tuple[object, str]] = {}
    runs = sorted((first, p, run_id, fingerprint) for p, part in enumerate(parts)
                  for first, run_id, fingerprint in _fingerprints(part))
    dropped: dict[int, set] = {}
    for (i, _), p, run_id, fingerprint in runs:
        source = sources[i]
        if run_id in ids:
            warn(f"run {run_id} is in both {ids[run_id]} and {source}: counted once, from {ids[run_id]}")
        elif fingerprint in measured:
            first, other = measured[fingerprint]
            warn(f"{source} holds the same measurement as {first} (run {run_id} is run {other} again: a "
                 f"copy, or a file imported twice): counted once, as run {other}")
        else:
            ids[run_id], measured[fingerprint] = source, (source, run_id)
            continue
        dropped.setdefault(p, set()).add((i, run_id))
    out = []
    for p, part in enumerate(parts):
        if p in dropped:
            keep = ~pd.Series(list(zip(part.source, part.records["run_id"]))).isin(dropped[p]).to_numpy()
            part = Part(part.records[keep], part.source[keep])
        out.append(part)
    return out


def _fingerprints(part: Part) -> list[tuple[tuple[int, int], str, int]]:
    """((file, first row), run id, fingerprint) of each file's runs in a part: the run's rows'
    MEASUREMENT hashed, summed (mod 2**64) and xor'ed with their count."""
    rows = part.records
    hashes = pd.util.hash_pandas_object(rows[MEASUREMENT], index=False).to_numpy()
    keys = pd.DataFrame({"source": part.source, "run_id": rows["run_id"].to_numpy()})
    codes = keys.groupby(["source", "run_id"], sort=False, dropna=False).ngroup().to_numpy()
    sums = np.zeros(codes.max() + 1 if len(codes) else 0, dtype=np.uint64)
    np.add.at(sums, codes, hashes)
    counts = np.bincount(codes, minlength=len(sums))
    firsts = np.unique(codes, return_index=True)[1]
    return [((int(part.source[row]), int(row)), rows["run_id"].iloc[row], int(sums[g]) ^ int(counts[g]))
            for g, row in enumerate(firsts)]


def find_shard_run(results_dir: str | Path, scenario: str, run_group: str, index: int, count: int
                   ) -> tuple[str, bool] | None:
    """The run of shard `index`/`count` of `run_group` already in the results folder, and whether it
    is complete (a results file) or unfinished (a journal only), or None: a shard started again by
    its scheduler (a requeued SLURM task, a retried pod) finds its own run instead of starting over."""
    folder = scenario_dir(results_dir, scenario)
    wanted = {"run_group": run_group, "shard": [index, count]}
    for run_id in incomplete_runs(results_dir, scenario):
        try:
            head = journal.read(journal_path(results_dir, scenario, run_id)).header or {}
        except UserError:
            continue
        if {key: head.get(key) for key in wanted} == wanted:
            return run_id, False
    for path in sorted(folder.glob("*.parquet"), key=lambda p: p.name, reverse=True):
        try:
            with _source(path) as source:
                rows = pq.read_table(source, columns=["run_group", "shard_index", "shard_count", "run_id"]).to_pylist()
        except (OSError, pa.ArrowException, KeyError):
            continue  # not a results file of this schema (or not a file): not a shard of this group
        first = rows[0] if rows else {}
        if (first.get("run_group"), first.get("shard_index"), first.get("shard_count")) == (run_group, index, count) \
                and isinstance(first["run_id"], str) and RUN_ID.fullmatch(first["run_id"]):
            return first["run_id"], True
    return None
