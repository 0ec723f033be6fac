"""Choosing runs from the results store with a small selector language (used by compare, export).

    SELECTOR := TERM [',' TERM]...        every term must hold
    TERM     := PATH                      a results file or folder, or its URL (s3://bucket/prefix)
                                          (default folder: --results)
              | RUN_ID                    a run id, or a unique prefix of one
              | run=ID                    the same, spelled out
              | scenario=NAME
              | torch=V | cuda=V | python=V | LIBRARY=V
                                          a version, or a prefix of one that ends at '.' or '+'
                                          ("2.13" and "2.13.0" both match "2.13.0+cpu");
                                          LIBRARY: a library a precision or workload folder
                                          declares, by its column less `_version` (torchao, te)
              | device=cpu|cuda           the device type
              | gpu=TEXT                  text in the device name ("H100", "Xeon"), any case
              | host=NAME | label=TEXT    exact host name; exact `label` column (imports set one)
              | git=SHA | code=HASH       prefix of the git commit / of the suite's code hash
              | runs=N|all                pool the N newest matching runs (default 1: the newest)
              | skip=N                    leave out the N newest matching runs first
                                          (`scenario=cpu,skip=1`: the run before the newest)

Run ids start with their UTC start time, so "newest" is the largest run id.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from suite.results import columns, location, store
from suite.core.errors import UserError

VERSIONS = ("torch_version", "cuda_version", "python_version", columns.LIBRARIES)
EXACT_KEYS = {"scenario": "scenario", "device": "device", "host": "host", "label": "label"}
PREFIX_KEYS = {"run": "run_id", "git": "git_sha", "code": "code_hash"}
SUBSTRING_KEYS = {"gpu": "device_name"}
COUNT_KEYS = ("runs", "skip")


def version_keys() -> dict[str, str]:
    """Selector key -> version column: torch's, CUDA's, Python's and each declared library's (the
    column less `_version`: torchao=0.18)."""
    return {column.removesuffix("_version"): column for column in columns.with_libraries(VERSIONS)}


def column_keys() -> dict[str, str]:
    """Every selector key that filters on a column -> the column."""
    return version_keys() | EXACT_KEYS | PREFIX_KEYS | SUBSTRING_KEYS


def keys() -> list[str]:
    return sorted([*column_keys(), *COUNT_KEYS])


@dataclass(frozen=True)
class Selector:
    text: str
    paths: tuple[Path, ...] = ()
    terms: tuple[tuple[str, str], ...] = ()  # (key, value) filters on run columns
    runs: int | None = 1  # None: every matching run
    skip: int = 0
    bare: tuple[str, ...] = field(default=())  # run-id prefixes given without `run=`

    def describe(self) -> str:
        return self.text


def _count(key: str, value: str, allow_all: bool) -> int | None:
    if allow_all and value == "all":
        return None
    try:
        n = int(value)
    except ValueError:
        n = -1
    if n < (1 if key == "runs" else 0):
        raise UserError(f"selector {key}={value!r}: expected {'a positive number or all' if allow_all else 'a number >= 0'}")
    return n


def parse(text: str) -> Selector:
    """Parse a selector string (see the module docstring); raises UserError naming the bad term."""
    if not text or not text.strip():
        raise UserError("empty run selector; give a path, a run id, or terms like torch=2.13.0,scenario=cpu")
    paths: list[Path] = []
    terms: list[tuple[str, str]] = []
    bare: list[str] = []
    runs: int | None = 1
    skip = 0
    for raw in text.split(","):
        term = raw.strip()
        if not term:
            continue
        key, eq, value = term.partition("=")
        if eq:
            key, value = key.strip().lower(), value.strip()
            if key not in (known := keys()):
                raise UserError(f"selector term {term!r}: unknown key {key!r}; known: {', '.join(known)}")
            if not value:
                raise UserError(f"selector term {term!r}: no value after '='")
            if key == "runs":
                runs = _count(key, value, allow_all=True)
            elif key == "skip":
                skip = _count(key, value, allow_all=False)
            else:
                terms.append((key, value))
        elif location.is_url(term):
            paths.append(location.where(term))  # checked when read: one listing, not two
        elif Path(term).exists():
            paths.append(Path(term))
        elif "/" in term or term.endswith(".parquet"):
            raise UserError(f"selector term {term!r}: no such results file or folder")
        else:
            bare.append(term)
    return Selector(text, tuple(paths), tuple(terms), runs, skip, tuple(bare))


def _version_match(value: str, wanted: str) -> bool:
    return value == wanted or value.startswith(wanted + "+") or value.startswith(wanted + ".")


def _matches(run: pd.Series, key: str, wanted: str) -> bool:
    column = column_keys()[key]
    value = run.get(column)
    if value is None or (isinstance(value, float) and pd.isna(value)):
        return False
    value = str(value)
    if key in version_keys():
        return _version_match(value, wanted)
    if key in PREFIX_KEYS:
        return value.startswith(wanted)
    if key in SUBSTRING_KEYS:
        return wanted.lower() in value.lower()
    return value == wanted


def runs_of(df: pd.DataFrame) -> pd.DataFrame:
    """One row per run (its first record), newest first."""
    return df.drop_duplicates("run_id").sort_values("run_id", ascending=False).reset_index(drop=True)


def _seen(runs: pd.DataFrame, key: str) -> str:
    column = column_keys().get(key, "run_id")
    if column not in runs:
        return f"no run has a {column!r} column"
    values = sorted({str(v) for v in runs[column].dropna()})
    shown = ", ".join(values[:8]) + (f", ... ({len(values)} in all)" if len(values) > 8 else "")
    return f"{column} seen: {shown or 'none'}"


def _source_paths(sel: Selector, results_dir: Path) -> list[Path]:
    if sel.paths:
        return list(sel.paths)
    scenario = dict(sel.terms).get("scenario")
    if scenario is not None:
        folder = store.scenario_dir(results_dir, scenario)
        if not folder.is_dir():
            raise UserError(f"no results of scenario {scenario!r}: {folder} does not exist")
        return [folder]
    if not results_dir.is_dir():
        raise UserError(f"results folder {results_dir} does not exist")
    return [results_dir]


def select(selector: Selector | str, results_dir: str | Path = "results", role: str = "selection") -> pd.DataFrame:
    """The records of the runs the selector picks. Raises UserError when it picks none."""
    sel = parse(selector) if isinstance(selector, str) else selector
    sources = _source_paths(sel, location.where(results_dir))
    where = ", ".join(map(str, sources))
    df = store.read(sources)
    runs = runs_of(df)
    for key, wanted in sel.terms:
        keep = runs.apply(lambda r, k=key, w=wanted: _matches(r, k, w), axis=1).astype(bool)
        if not keep.any():
            raise UserError(f"{role} {sel.text!r}: no run under {where} has {key}={wanted} "
                            f"({len(runs)} run(s) left to match; {_seen(runs, key)})")
        runs = runs[keep]
    for prefix in sel.bare:
        keep = runs["run_id"].astype(str).str.startswith(prefix)
        if not keep.any():
            raise UserError(f"{role} {sel.text!r}: {prefix!r} is neither a results file or folder nor "
                            f"the start of a run id under {where}")
        runs = runs[keep]
    if sel.skip >= len(runs):
        raise UserError(f"{role} {sel.text!r}: skip={sel.skip} leaves none of the {len(runs)} matching run(s)")
    runs = runs.iloc[sel.skip:]
    if sel.runs is not None:
        runs = runs.iloc[: sel.runs]
    chosen = df[df["run_id"].isin(set(runs["run_id"]))].copy()
    scenarios = sorted(chosen["scenario"].dropna().unique())
    if len(scenarios) > 1:
        raise UserError(f"{role} {sel.text!r} picks runs of several scenarios ({', '.join(scenarios)}); "
                        "add scenario=NAME")
    return chosen.reset_index(drop=True)
