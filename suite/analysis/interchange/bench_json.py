"""pytest-benchmark JSON, both ways.

`export(df, out)` writes each run as a pytest-benchmark JSON file, so `pytest-benchmark compare
a.json b.json` (and its --histogram, --csv) works on mpsuite runs; files go in a folder per torch
build, so its tables say which torch each row ran on (`export`). Only measured cases can be
expressed there; skipped and failed ones go into a top-level "mpsuite" key that pytest-benchmark
ignores, with each benchmark's mpsuite identity in its `extra_info`, so importing an exported file
gives back the same case ids.

`import_file(path, results_dir)` reads a pytest-benchmark JSON file (`--benchmark-json`, or one
saved by `--benchmark-autosave`) and stores it through `suite.results.store` as one run. Per-round times
(`stats.data`, saved unless --benchmark-save-data is off in autosave) become `samples_ms`; the
median becomes `time_ms_median`, the run's value `compare` compares (import 3 runs per side for a
verdict: one run cannot show run-to-run noise).

Format: pytest-benchmark 5.x: top-level machine_info, commit_info, benchmarks, datetime, version;
per benchmark group, name, fullname, params, param, extra_info, options, stats (seconds). Export
computes `stats` with pytest-benchmark's own `Stats` class, so it needs pytest-benchmark installed
(the `pytest-benchmark` extra: anyone comparing the files has it); import needs nothing beyond mpsuite.
"""

from __future__ import annotations

import hashlib
import json
import math
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
import pandas as pd

from suite.core import files, jsontext, names
from suite.analysis.frame import derived
from suite.scenario import plan
from suite.results import columns, store
from suite.results.atomic import atomic_write_text
from suite.core.errors import UserError

IMPORTED_WORKLOAD = "pytest-benchmark"
# pytest-benchmark keeps every round's time: 10,000 benchmarks of 1,000 rounds make about 200 MB of
# JSON. A file past the limit of every JSON the suite parses is refused by name rather than parsed into
# memory (or /dev/zero read forever).
MAX_IMPORT_BYTES = jsontext.MAX_BYTES
IMPORTED_PRECISION = "default"
# Record columns carried in extra_info so that an exported run imports back as the same cases.
IDENTITY = ["case_id", "baseline_case_id", "workload", "precision", "baseline", "m", "k", "n", "params", "seed"]
CARRIED = ["speedup", "tflops", "gbps", "peak_tflops", "rel_err", "max_abs_err", "sqnr_db", "emulated", "flops",
           "bytes_moved", "stop_reason", "warmup_calls", "timer", "rel_ci"]
SUMMARY = ["time_ms_median", "time_ms_p10", "time_ms_p90", "n_samples"]
RUN_FIELDS = ["run_id", "scenario", "torch_version", "torch_git_version", "cuda_version", "cudnn_version",
              columns.LIBRARIES, "triton_version", "numpy_version", "device", "device_name",
              "compute_capability", "driver_version", "cpu_model", "cpu_threads", "code_hash", "suite_version",
              "git_sha", "git_dirty", "host", "python_version", "os", "label"]


def _plain(value):
    """A JSON-safe Python value (numpy scalars unwrapped, NaN and NA as null)."""
    if value is None:
        return None
    if hasattr(value, "item") and not isinstance(value, (list, dict, str)):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    try:
        if pd.isna(value):
            return None
    except (TypeError, ValueError):
        pass
    return value


# --- the statistics pytest-benchmark stores, computed by pytest-benchmark -------------------------


def _pytest_benchmark():
    """pytest-benchmark, which export needs (its own `Stats` computes the statistics, so they are
    what `pytest-benchmark compare` would compute); import reads JSON and needs nothing."""
    try:
        import pytest_benchmark
        from pytest_benchmark.stats import Stats
    except ImportError:
        raise UserError("export computes pytest-benchmark's statistics with pytest-benchmark, which is not "
                        "installed: pip install 'mpsuite[pytest-benchmark]' (or pip install pytest-benchmark)") from None
    return pytest_benchmark.__version__, Stats


def benchmark_stats(samples_s: list[float]) -> dict:
    """pytest-benchmark's `stats` dict for these per-round times (seconds, one iteration each),
    laid out as pytest-benchmark saves it: its Stats fields, then `data` and `iterations`."""
    _, Stats = _pytest_benchmark()
    stats = Stats()
    for x in samples_s:
        stats.update(float(x))
    return {**stats.as_dict(), "data": list(stats.data), "iterations": 1}


# --- export ---------------------------------------------------------------------------------------


def _benchmark(row, scenario: str) -> dict:
    shape = derived.shape_label(row)
    params = json.loads(row["params"]) if isinstance(row.get("params"), str) else {}
    # the same case has the same name in every run (so `compare --group-by name` and `--between`
    # pair them up); which run a row is from, pytest-benchmark shows by its file (`export`)
    name = f"{row['workload']}[{row['precision']}-{shape.replace(' ', '-')}]"
    return {
        "group": f"{row['workload']} {shape}",
        "name": name,
        "fullname": f"{scenario}::{name}",
        "params": {"precision": row["precision"], **{k: _plain(row.get(k)) for k in ("m", "k", "n")}, **params},
        "param": f"{row['precision']}-{shape.replace(' ', '-')}",
        "extra_info": {"mpsuite": {c: _plain(row.get(c)) for c in IDENTITY + CARRIED if c in row}},
        "options": {"timer": _plain(row.get("timer")), "warmup": bool(_plain(row.get("warmup_calls")))},
        "stats": benchmark_stats([x / 1e3 for x in row["samples_ms"]]),
    }


def _iso(value) -> str | None:
    """A time as ISO 8601 text, the way pytest-benchmark writes `datetime` and `commit_info.time`."""
    if value is None or pd.isna(value):
        return None
    return pd.Timestamp(value).isoformat()


def to_pytest_benchmark(run: pd.DataFrame) -> dict:
    """One run's records as a pytest-benchmark JSON document."""
    if run["run_id"].nunique() != 1:
        raise ValueError("to_pytest_benchmark takes the records of exactly one run")
    version, _ = _pytest_benchmark()
    run = derived.with_speedups(run)
    first = run.iloc[0]
    scenario = str(first["scenario"])
    measured = run[(run["status"] == "ok") & run["samples_ms"].map(lambda s: s is not None and len(s) > 0)]
    others = run.drop(measured.index)
    return {
        "machine_info": {
            "node": _plain(first.get("host")),
            "processor": _plain(first.get("cpu_model")),
            "machine": _plain(first.get("device_name")),
            "python_implementation": "CPython",
            "python_version": _plain(first.get("python_version")),
            "system": _plain(first.get("os")),
            "cpu": {"brand_raw": _plain(first.get("cpu_model")), "count": _plain(first.get("cpu_threads"))},
        },
        "commit_info": {
            "id": _plain(first.get("git_sha")) or "unversioned",
            "time": _iso(first.get("started_at")),
            "dirty": bool(_plain(first.get("git_dirty"))),
            "project": "mpsuite",
            "branch": None,
        },
        "benchmarks": [_benchmark(row, scenario) for _, row in measured.iterrows()],
        "datetime": _iso(first.get("started_at")),
        "version": version,  # the pytest-benchmark whose Stats computed the statistics
        "mpsuite": {
            "schema_version": store.SCHEMA_VERSION,
            "run": {c: _plain(first.get(c)) for c in columns.with_libraries(RUN_FIELDS) if c in run},
            # skipped and failed cases, and any measured without per-repetition samples (which
            # pytest-benchmark cannot express), with what they have
            "not_measured": [
                {**{c: _plain(row.get(c)) for c in IDENTITY + SUMMARY if c in row}, "status": row["status"],
                 "reason": _plain(row.get("reason"))}
                for _, row in others.iterrows()
            ],
        },
    }


def torch_folder(run: pd.DataFrame) -> str:
    """The folder an exported run goes in: its torch build, e.g. torch2.13.0-cpu (from 2.13.0+cpu)."""
    versions = run["torch_version"].dropna().unique() if "torch_version" in run else []
    text = f"torch{versions[0]}".replace("+", "-") if len(versions) == 1 else "torch-unknown"
    return names.slug(text)  # the version comes from a file, perhaps from elsewhere


def export(df: pd.DataFrame, out: str | Path) -> list[Path]:
    """Write every run in df as pytest-benchmark JSON: to `out` if it ends in .json (one run only),
    else into the folder `out` as <torch build>/NNNN_<run_id>.json, numbered oldest run first.

    That is pytest-benchmark's storage layout (a folder per environment holding NNNN_<name>.json),
    so `pytest-benchmark compare --storage file://OUT 0001 0002` works too. Its tables label a row by
    its file's path under the files' common folder, the file name cut to 12 characters: runs of
    two torch builds show as "(torch2.13.0-cpu/0001_2026112)" and "(torch2.14.1-cu130/0002_2026112)";
    a torch version in the file name would be cut off. A folder is written only while new, empty
    or an earlier export's, whose files are then replaced whole (`EXPORT_MARKER`)."""
    out = Path(out)
    run_ids = sorted(df["run_id"].unique())
    if not run_ids:
        raise UserError("no runs to export")
    runs = {rid: df[df["run_id"] == rid] for rid in run_ids}
    if out.suffix == ".json":
        if len(run_ids) > 1:
            raise UserError(f"{len(run_ids)} runs selected but {out} is one file; give a folder instead")
        targets, earlier = [(run_ids[0], out)], None
    else:
        earlier = _earlier_export(out)  # before anything is written
        targets = [(rid, names.inside(out, out / torch_folder(runs[rid]) / f"{i:04d}_{rid}.json"))
                   for i, rid in enumerate(run_ids, start=1)]  # run ids come from files: checked, and checked again
    _pytest_benchmark()  # before writing anything
    new = [path.relative_to(out).as_posix() for _, path in targets] if earlier is not None else []
    if earlier:  # a kill from here on leaves only files a marker lists: the next export replaces them
        _mark(out, [*earlier, *new])
        _remove(out, set(earlier) - set(new))
    written = []
    for run_id, path in targets:
        text = json.dumps(to_pytest_benchmark(runs[run_id]), indent=2, ensure_ascii=True)
        written.append(atomic_write_text(path, text))
    if earlier is not None:
        _mark(out, new)
    return written


# A folder `export` wrote holds this marker, listing the files it wrote. The next export into it
# removes those and writes its own: a re-export of fewer runs must not leave an earlier 0001_ beside
# its own (`pytest-benchmark compare 0001` would pick either). A folder without one is written into
# only while empty, and nothing a marker does not list is ever removed.
EXPORT_MARKER = ".mpsuite-export"


def _earlier_export(out: Path) -> list[str]:
    """The files of an earlier export in `out` (to be replaced); [] for a new or empty folder. A
    folder holding anything else is refused, naming it."""
    if not out.exists():
        return []
    if not out.is_dir():
        raise UserError(f"{out}: cannot export into it: it is a file, not a folder (a single run: -o FILE.json)")
    held = files.held(out)
    try:
        listed = {f for f in json.loads(files.read_bytes(out / EXPORT_MARKER, 2**20, "marker"))["files"]
                  if isinstance(f, str)}
    except (OSError, ValueError, KeyError, TypeError):  # absent, a FIFO, not ours: no earlier export
        listed = None if held else set()
    if listed is None:
        raise UserError(f"{out}: not an export folder (no {EXPORT_MARKER} marker) and not empty (it holds "
                        f"{held[0]!r}), and an export replaces its folder's files: give -o a new or empty folder")
    foreign = [h for h in held if h != EXPORT_MARKER and h not in listed]
    if foreign:
        raise UserError(f"{out}: holds {foreign[0]!r}, which no export wrote, and an export replaces its folder's "
                        "files: move it out of the folder, or give -o another one")
    return [h for h in held if h != EXPORT_MARKER]


def _mark(out: Path, written: list[str]) -> None:
    text = json.dumps({"mpsuite": "pytest-benchmark export, replaced by the next export into this folder; only "
                                  "the files listed are removed", "files": sorted(set(written))}, indent=1)
    atomic_write_text(out / EXPORT_MARKER, text + "\n")


def _remove(out: Path, earlier: set[str]) -> None:
    """An earlier export's files, then the folders that leaves empty."""
    for name in earlier:
        (out / name).unlink(missing_ok=True)
    for folder in sorted({(out / name).parent for name in earlier} - {out}, key=lambda p: -len(p.parts)):
        try:
            folder.rmdir()
        except OSError:
            pass  # holds a file of the new export


# --- import ---------------------------------------------------------------------------------------


def _started(doc: dict) -> datetime:
    """The run's start in UTC: `datetime` (else `commit_info.time`); now where there is no time."""
    field = "datetime" if doc.get("datetime") else "commit_info.time"
    text = doc.get("datetime") or _obj(doc.get("commit_info"), "commit_info").get("time")
    try:
        when = datetime.fromisoformat(str(text))
    except ValueError:
        return datetime.now(timezone.utc)
    try:
        return when.astimezone(timezone.utc) if when.tzinfo else when.replace(tzinfo=timezone.utc)
    except OverflowError:  # 9999-12-31T23:59:59-05:00 is in year 10000 in UTC
        raise _Malformed(f"{field} is {text!r}, a time that is not in years 1 to 9999 in UTC") from None


class _Malformed(ValueError):
    """A part of the document is not what pytest-benchmark writes (its message says which)."""


def _obj(value, what: str) -> dict:
    """`value` as a JSON object; absent (null) is an empty one."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise _Malformed(f"{what} is a {type(value).__name__}, expected an object")
    return value


def _list(value, what: str) -> list:
    if value is None:
        return []
    if not isinstance(value, list):
        raise _Malformed(f"{what} is a {type(value).__name__}, expected a list")
    return value


def _seconds(value, what: str) -> float:
    """A time in seconds: a finite number >= 0 (an integer too large for a float is refused too)."""
    number = isinstance(value, (int, float)) and not isinstance(value, bool)
    seconds = float(value) if number and abs(value) < 1e300 else math.inf if number else None
    if seconds is None or not 0 <= seconds < math.inf:
        shown = f"{value!r}"[:40] if not number or isinstance(value, float) or abs(value) < 1e300 else "a huge integer"
        raise _Malformed(f"{what} is {shown}, expected a time in seconds (a finite number >= 0)")
    return seconds


def _foreign_identity(bench: dict) -> dict:
    """Identity of a benchmark written by pytest-benchmark itself: the test's full name is the case."""
    params = {"test": str(bench.get("fullname") or bench.get("name"))}
    precision = str(_obj(bench.get("params"), "params").get("precision") or IMPORTED_PRECISION)
    return {
        "case_id": plan.case_hash(IMPORTED_WORKLOAD, precision, None, None, None, params),
        "baseline_case_id": None, "workload": IMPORTED_WORKLOAD, "precision": precision, "baseline": None,
        "m": None, "k": None, "n": None, "params": json.dumps(params, sort_keys=True),
    }


def from_pytest_benchmark(doc: dict, scenario: str | None = None, label: str | None = None,
                          source: str = "", content: bytes | None = None) -> list[dict]:
    """Records (one per benchmark, plus any not-measured cases of an mpsuite export) of one run.
    A document of another shape is a one-line UserError naming the part that is wrong. The run id
    is the document's start time and a hash of `content` (the file's bytes; else the document), so
    a file imported twice is one run id (refused the second time by `import_file`)."""
    if not isinstance(doc, dict) or not isinstance(doc.get("benchmarks"), list):
        raise UserError(f"{source}: not a pytest-benchmark JSON file (no 'benchmarks' list)")
    if content is None:
        content = json.dumps(doc, sort_keys=True, default=str).encode()
    try:
        records = _records(doc, scenario, label, source, hashlib.sha256(content).hexdigest()[:6])
    except _Malformed as err:
        raise UserError(f"{source}: not a pytest-benchmark JSON file we can read: {err}") from None
    if not records:
        raise UserError(f"{source}: no benchmarks in the file")
    store.check_records(records, source)
    return records


def _records(doc: dict, scenario: str | None, label: str | None, source: str, digest: str) -> list[dict]:
    ours = _obj(doc.get("mpsuite"), "mpsuite")
    version = ours.get("schema_version", store.SCHEMA_VERSION)
    if isinstance(version, bool) or not isinstance(version, int) or not 1 <= version <= store.SCHEMA_VERSION:
        raise _Malformed(f"mpsuite.schema_version is {version!r}; this mpsuite reads versions 1 to "
                         f"{store.SCHEMA_VERSION} (a newer file needs a newer mpsuite)")
    run_meta = dict(_obj(ours.get("run"), "mpsuite.run"))
    machine, commit = _obj(doc.get("machine_info"), "machine_info"), _obj(doc.get("commit_info"), "commit_info")
    started = _started(doc)
    # A file mpsuite exported carries its run's own machine fields, kept as they were (an all-skipped
    # CUDA run has no device name, and must not gain the importing machine's); a file
    # pytest-benchmark wrote has only its machine_info.
    meta = {
        "device": "cpu",
        "device_name": _obj(machine.get("cpu"), "machine_info.cpu").get("brand_raw") or machine.get("processor")
        or machine.get("machine"),
        "host": machine.get("node"),
        "python_version": machine.get("python_version"),
        "git_sha": None if commit.get("id") in (None, "unversioned") else commit.get("id"),
        "git_dirty": commit.get("dirty"),
    }
    meta = {k: v if v is None or isinstance(v, (bool, int, float)) else str(v) for k, v in meta.items()}
    carried = set(columns.with_libraries(RUN_FIELDS))
    meta.update({k: v for k, v in run_meta.items() if k in carried})
    meta.update(
        run_id=f"{started.astimezone(timezone.utc):%Y%m%dT%H%M%SZ}-{digest}",  # the same file: the same run
        scenario=scenario or run_meta.get("scenario") or IMPORTED_WORKLOAD,
        started_at=started,  # the store writes it as a timestamp
        schema_version=store.SCHEMA_VERSION,
        imported_from=source,
        source_run_id=run_meta.get("run_id"),
        pytest_benchmark_version=None if doc.get("version") is None else str(doc.get("version")),
    )
    if label is not None:
        meta["label"] = label
    records = [_bench_record(_obj(bench, f"benchmarks[{i}]"), f"benchmarks[{i}]", meta)
               for i, bench in enumerate(doc["benchmarks"])]
    for i, row in enumerate(_list(ours.get("not_measured"), "mpsuite.not_measured")):
        row = _obj(row, f"mpsuite.not_measured[{i}]")
        records.append({**meta, **{c: row.get(c) for c in IDENTITY + SUMMARY}, "status": row.get("status"),
                        "reason": row.get("reason")})
    return records


def _bench_record(bench: dict, where: str, meta: dict) -> dict:
    """The record of one benchmark of a pytest-benchmark file (`where`: its place in the file)."""
    s = _obj(bench.get("stats"), f"{where}.stats")
    carried = _obj(_obj(bench.get("extra_info"), f"{where}.extra_info").get("mpsuite"), f"{where}.extra_info.mpsuite")
    identity = {c: carried.get(c) for c in IDENTITY} if carried else _foreign_identity(bench)
    data = _samples_ms(s.get("data"), f"{where}.stats.data")
    if s.get("median") is None:
        raise _Malformed(f"benchmark {bench.get('fullname')!r} has no median in its stats")
    median_ms = _seconds(s["median"], f"{where}.stats.median") * 1e3
    q1 = _seconds(s.get("q1", s["median"]), f"{where}.stats.q1") * 1e3
    q3 = _seconds(s.get("q3", s["median"]), f"{where}.stats.q3") * 1e3
    rounds = s.get("rounds")
    p10, p90 = _p10_p90(data) if len(data) else (q1, q3)  # q1/q3 stand in when there are no rounds
    # mpsuite's own columns, where it wrote the file, carried back as they were (its speedup is derived)
    carried_back = {c: carried.get(c) for c in CARRIED if c in carried and c != "speedup"} if carried else {}
    return {
        **meta, **identity,
        "status": "ok", "reason": None,
        "time_ms_median": median_ms,
        "time_ms_p10": p10,
        "time_ms_p90": p90,
        "n_samples": len(data) or (rounds if isinstance(rounds, int) and not isinstance(rounds, bool) else None),
        "samples_ms": data if len(data) else None,
        "pytest_benchmark_name": None if bench.get("fullname") is None else str(bench.get("fullname")),
        "pytest_benchmark_iterations": s.get("iterations") or 1,
        **carried_back,
    }


def _samples_ms(value, where: str) -> list[float] | np.ndarray:
    """Per-round times (seconds) in ms: a list checked number by number, or a long one read packed
    (`jsontext.loads(packed=True)`: a float64 array, 8 bytes a round) checked and scaled in place."""
    if not isinstance(value, np.ndarray):
        return [_seconds(x, f"{where}[{j}]") * 1e3 for j, x in enumerate(_list(value, where))]
    bad = np.flatnonzero(~(np.isfinite(value) & (value >= 0)))
    if len(bad):
        _seconds(float(value[bad[0]]), f"{where}[{bad[0]}]")  # raises, naming the first
    value *= 1e3
    return value


def _p10_p90(xs: list[float] | np.ndarray) -> tuple[float, float]:
    from suite.core.quantiles import quantile

    ordered = np.sort(xs) if isinstance(xs, np.ndarray) else sorted(xs)  # one sorted copy for both
    return float(quantile(ordered, 0.1)), float(quantile(ordered, 0.9))


def import_file(path: str | Path, results_dir: str | Path = "results", *, scenario: str | None = None,
                label: str | None = None) -> Path:
    """Store one pytest-benchmark JSON file as a run; returns the parquet written."""
    path = Path(path)
    try:
        content = files.read_bytes(path, MAX_IMPORT_BYTES, "pytest-benchmark JSON file")
        content.decode("utf-8")  # UTF-8 or refused (json would also take UTF-16 and UTF-32)
        doc = jsontext.loads(content, packed=True)  # rounds read packed: 8 bytes each
    except FileNotFoundError:
        raise UserError(f"{path}: no such file") from None
    except (OSError, ValueError) as err:  # ValueError: bad JSON, bad UTF-8, over the JSON limits
        raise UserError(f"{path}: not readable as JSON: {err}") from None
    if scenario is not None:
        names.check_name("--scenario", scenario)
    records = from_pytest_benchmark(doc, scenario=scenario, label=label, source=str(path), content=content)
    first = records[0]
    target = store.run_path(results_dir, first["scenario"], first["run_id"])
    if target.exists():
        raise UserError(f"{path}: already imported as run {first['run_id']} ({target}); importing it again "
                        "would count one measurement as two runs")
    try:
        return store.write_run(records, target)
    except FileExistsError:  # an object store's conditional write: imported meanwhile
        raise UserError(f"{path}: already imported as run {first['run_id']} ({target})") from None
