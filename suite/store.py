"""The results store: one parquet file per run under `results/<scenario>/`, one row per case.

Only this module writes `results/`. Files are written to a unique temporary name in the same folder,
fsynced, then renamed into place, so a reader never sees half a file and two runs never collide.
The schema version lives in the parquet key-value metadata; `read` migrates older files.
"""

from __future__ import annotations

import json
import os
import secrets
from datetime import datetime, timezone
from pathlib import Path
from typing import Iterable

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from suite.errors import UserError

SCHEMA_VERSION = 1
META_KEY = b"mpsuite.schema_version"

# Columns every record has (the record contract); workloads and recipes may add more.
CONTRACT = [
    "schema_version", "run_id", "scenario", "case_id", "baseline_case_id", "workload", "precision",
    "baseline", "status", "reason", "m", "k", "n", "params", "time_ms_median", "time_ms_p10",
    "time_ms_p90", "n_samples", "samples_ms", "tflops", "peak_tflops", "rel_err", "max_abs_err",
    "sqnr_db", "device", "device_name", "compute_capability", "torch_version", "cuda_version",
    "driver_version", "torchao_version", "te_version", "python_version", "host", "git_sha",
    "started_at",
]

# schema version -> function upgrading a DataFrame from that version to the next one.
MIGRATIONS: dict[int, callable] = {}


def new_run_id(now: datetime | None = None) -> str:
    now = now or datetime.now(timezone.utc)
    return f"{now:%Y%m%dT%H%M%SZ}-{secrets.token_hex(3)}"


def run_path(results_dir: str | Path, scenario: str, run_id: str) -> Path:
    return Path(results_dir) / scenario / f"{run_id}.parquet"


def _table(records: list[dict]) -> pa.Table:
    columns = list(CONTRACT) + sorted({k for r in records for k in r} - set(CONTRACT))
    rows = [{c: r.get(c) for c in columns} for r in records]
    table = pa.Table.from_pylist(rows)
    meta = {META_KEY: str(SCHEMA_VERSION).encode(), b"mpsuite.columns": json.dumps(CONTRACT).encode()}
    return table.replace_schema_metadata({**(table.schema.metadata or {}), **meta})


def atomic_write_bytes(path: Path, write) -> Path:
    """Call write(tmp_path), fsync it, and rename it to `path` (unique tmp name: no collisions)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
    try:
        write(tmp)
        with open(tmp, "rb") as f:
            os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)
    return path


def write_run(records: list[dict], path: str | Path) -> Path:
    if not records:
        raise ValueError("a run with no records is not written")
    table = _table(records)
    return atomic_write_bytes(Path(path), lambda tmp: pq.write_table(table, tmp))


def schema_version_of(path: Path) -> int:
    meta = pq.read_schema(path).metadata or {}
    if META_KEY not in meta:
        raise UserError(f"{path}: not an mpsuite results file (no {META_KEY.decode()} metadata)")
    return int(meta[META_KEY])


def read_file(path: str | Path) -> pd.DataFrame:
    path = Path(path)
    try:
        version = schema_version_of(path)
        df = pq.read_table(path).to_pandas()
    except (OSError, pa.ArrowInvalid) as err:
        raise UserError(f"{path}: cannot read results file: {err}") from None
    if version > SCHEMA_VERSION:
        raise UserError(
            f"{path}: written with results schema version {version}, newer than this mpsuite's "
            f"{SCHEMA_VERSION}; upgrade mpsuite to read it"
        )
    while version < SCHEMA_VERSION:
        if version not in MIGRATIONS:
            raise UserError(f"{path}: results schema version {version} has no migration to {SCHEMA_VERSION}")
        df = MIGRATIONS[version](df)
        version += 1
    df["schema_version"] = SCHEMA_VERSION
    return df


def run_files(paths: Iterable[str | Path]) -> list[Path]:
    """Parquet run files under the given files or folders (recursively), oldest name first."""
    found: list[Path] = []
    for p in map(Path, paths):
        if p.is_dir():
            found += sorted(f for f in p.rglob("*.parquet") if not f.name.startswith("."))
        elif p.is_file():
            found.append(p)
        else:
            raise UserError(f"{p}: no such results file or folder")
    return found


def read(paths: Iterable[str | Path]) -> pd.DataFrame:
    """All records of the runs under `paths`, as one DataFrame."""
    paths = list(paths)
    files = run_files(paths)
    if not files:
        raise UserError(f"no results (*.parquet) under {', '.join(map(str, paths))}")
    return pd.concat([read_file(f) for f in files], ignore_index=True)
