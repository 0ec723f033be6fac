"""What differs between two sets of runs: the recorded facts that can explain a number that moved.

`diff(base, cand)` compares two sets of records column by column, generically: every environment
column the records hold (the results schema's "machine" group, `suite.results.columns`, the
versions of the libraries the precision and workload folders declare, and the board facts NVML
records: maximum SM clock and power limit) is compared over whole runs, and the
per-case columns (`PER_CASE`: the `kernel` a case ran, the matmul flags in force) case by case, and
the measured ones (`MEASURED`: the mean SM clock while a case was timed) case by case beyond a tolerance.
A column joins as soon as records hold it: a column a later schema adds to the machine group, or a
per-case `kernel` (the GEMM implementation that ran, `suite.measure.kernels`), needs no change here. `compare` and `history` attach the
same differences to every verdict that is not "same"; `python -m suite env-diff A B` prints them.
"""

from __future__ import annotations

import dataclasses
import math
import numbers
from dataclasses import dataclass
from typing import Iterable, Mapping

import numpy as np
import pandas as pd

from suite.analysis.frame import derived, rows as frame_rows
from suite.results import columns

# Looked at first, in this order, where the records hold them: what usually explains a moved
# speedup (a different torch or CUDA stack picks another kernel; a capped clock slows everything).
# Names not yet in the schema (cublas_version, scenario_hash) join when a writer adds them.
LEADING = (
    "torch_version", columns.LIBRARIES, "cuda_version", "cublas_version", "cudnn_version",
    "driver_version", "triton_version", "python_version", "device_name", "compute_capability",
    "sm_clock_max_mhz", "power_limit_w", "cpu_isa", "cpu_isa_env", "cpu_threads", "threads_setting",
    "env_threads", "code_hash", "scenario_hash", "git_sha",
)
# Board facts NVML records on every case: properties of the card, compared like the machine's.
BOARD = ("sm_clock_max_mhz", "power_limit_w")
# Columns of the machine group that label or describe one case's mechanics, not the environment.
NOT_ENVIRONMENT = frozenset({"label", "seed", "isolate_log", "worker_replaced"})
# Facts that differ case by case within a run: compared for one case at a time. `busy_machine` is
# derived (yes/no: whether other work left the case's threads short of CPUs, `derived.contended`):
# a busy machine can change a speedup itself (docs/timing.md), so it is a fact that explains one.
PER_CASE = ("kernel", "matmul_flags", "busy_machine")
# Facts measured while a case was timed (NVML telemetry; a CPU records none): they move a little from
# run to run, so each side's value is the geometric mean of the case's records and the two differ only
# beyond CLOCK_TOLERANCE (`clocks_differ`, the test compare's clock-normalised time makes too).
MEASURED = ("sm_clock_mhz_mean",)
# Clocks that differ by more than this fraction differ (and compare's cases are compared in cycles
# too). Data-centre GPUs step their SM clock by 15 MHz (0.76% of an H100's 1980 MHz), so 1% is just
# over one step of the recorded mean; below it, normalising moves a time change by under 1%, a fifth
# of the default minimum effect.
CLOCK_TOLERANCE = 0.01
TITLES = {
    "torch_version": "torch", "cuda_version": "CUDA", "cublas_version": "cuBLAS", "cudnn_version": "cuDNN",
    "driver_version": "driver",
    "triton_version": "triton", "python_version": "Python", "numpy_version": "numpy", "device_name": "device",
    "compute_capability": "compute capability", "sm_clock_max_mhz": "max SM clock (MHz)",
    "sm_clock_mhz_mean": "mean SM clock (MHz)",
    "power_limit_w": "power limit (W)", "cpu_isa": "CPU ISA", "cpu_isa_env": "ISA override",
    "cpu_threads": "threads", "threads_setting": "threads setting", "env_threads": "OMP_NUM_THREADS",
    "code_hash": "suite code hash", "scenario_hash": "scenario hash", "git_sha": "git commit",
    "git_dirty": "uncommitted changes", "torch_git_version": "torch git", "matmul_flags": "matmul flags",
    "scenario_description": "scenario description", "cpu_flags": "CPU flags", "cpu_model": "CPU",
    "busy_machine": "machine busy with other work",
}
NONE = "none"
# Commit hashes are shown as git shows them in one line: 12 characters tell them apart.
HASHES = frozenset({"git_sha", "torch_git_version"})
HASH_CHARS = 12


def title(column: str) -> str:
    """What pages call a column: its title here, a declared library's own, else its name in words."""
    found = TITLES.get(column) or columns.library_titles().get(column)
    return found or column.removesuffix("_version").replace("_", " ")


def environment_columns(available: Iterable[str]) -> list[str]:
    """The run-level environment columns among `available`, the leading ones first."""
    machine = [c.name for c in columns.COLUMNS if c.group == "machine" and c.name not in NOT_ENVIRONMENT]
    ordered = list(dict.fromkeys([*columns.with_libraries(LEADING), *machine, *BOARD]))
    have = set(available)
    return [c for c in ordered if c in have and c not in PER_CASE]


def as_text(value) -> str | None:
    """A recorded value as text; None for a missing one. 700.0 reads 700."""
    if value is None or (isinstance(value, float) and math.isnan(value)) or value is pd.NA:
        return None
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    if isinstance(value, (list, tuple)):
        return ", ".join(str(v) for v in value)
    if hasattr(value, "tolist") and not isinstance(value, str):  # a numpy array from a list column, or a scalar
        plain = value.tolist()
        return ", ".join(str(v) for v in plain) if isinstance(plain, list) else as_text(plain)
    return str(value)


def values(rows: Iterable[Mapping], column: str) -> tuple[str, ...]:
    """The distinct recorded values of a column over these rows, sorted; () when none has one."""
    return _shown({t for t in (as_text(r.get(column)) for r in rows) if t is not None}, column)


def _shown(found: set[str], column: str) -> tuple[str, ...]:
    """Distinct texts of a column as a difference shows them: sorted, hashes shortened."""
    if column in HASHES:
        found = {t[:HASH_CHARS] for t in found}
    return tuple(sorted(found))


@dataclass(frozen=True)
class Difference:
    """One column whose recorded values differ between the sides (each side: its distinct values)."""

    column: str
    base: tuple[str, ...]
    cand: tuple[str, ...]
    per_case: bool = False

    @property
    def title(self) -> str:
        return title(self.column)

    @property
    def text(self) -> str:
        b, c = ", ".join(self.base) or NONE, ", ".join(self.cand) or NONE
        return f"{self.title} changed: {b} -> {c}" if self.per_case else f"{self.title} {b} -> {c}"


def compare_columns(base_rows: list[Mapping], cand_rows: list[Mapping], names: Iterable[str],
                    per_case: bool = False) -> tuple[Difference, ...]:
    """A Difference for every column of `names` whose values differ between the two sets of rows.
    A per-case fact one side never recorded (an older run has no `kernel`; a case too slow to look
    at) is unknown there, not changed: only facts both sides hold are compared."""
    out = []
    for column in names:
        b, c = values(base_rows, column), values(cand_rows, column)
        if b != c and (not per_case or (b and c)):
            out.append(Difference(column, b, c, per_case))
    return tuple(out)


def clocks_differ(base_mhz: float, cand_mhz: float) -> bool:
    """Both clocks are finite and positive and differ by more than CLOCK_TOLERANCE."""
    return (all(math.isfinite(x) and x > 0 for x in (base_mhz, cand_mhz))
            and abs(math.log(cand_mhz) - math.log(base_mhz)) > math.log1p(CLOCK_TOLERANCE))


def compare_measured(base_rows: list[Mapping], cand_rows: list[Mapping], names: Iterable[str]) -> tuple[Difference, ...]:
    """A per-case Difference for every measured column of `names` whose values both sides recorded and
    whose geometric means differ (`clocks_differ`), each shown in whole units."""
    out = []
    for column in names:
        b, c = (_geomean(rows, column) for rows in (base_rows, cand_rows))
        if clocks_differ(b, c):
            out.append(Difference(column, (f"{b:.0f}",), (f"{c:.0f}",), per_case=True))
    return tuple(out)


def _geomean(rows: list[Mapping], column: str) -> float:
    """Of a column's positive finite numbers over these rows (NaN where none has one), in plain Python:
    a comparison asks it of every case on both sides (about 5 us for three runs, `derived.geomean` 100)."""
    found = [math.log(v) for v in (r.get(column) for r in rows)
             if isinstance(v, numbers.Real) and math.isfinite(v) and v > 0]
    return math.exp(sum(found) / len(found)) if found else math.nan


@dataclass(frozen=True)
class CaseDifferences:
    """The per-case facts that differ for one case (e.g. the kernel that ran)."""

    case_id: str
    label: str
    differences: tuple[Difference, ...]


@dataclass(frozen=True)
class EnvDiff:
    """What differs between two sets of runs: run-level facts, then case by case."""

    differences: tuple[Difference, ...]
    cases: tuple[CaseDifferences, ...]

    def lines(self) -> list[str]:
        out = [d.text for d in self.differences]
        out += [f"{c.label}: {d.text}" for c in self.cases for d in c.differences]
        return out

    def summary(self) -> list[str]:
        """The run-level lines, then one line per per-case column: in how many cases it changed."""
        changed: dict[str, int] = {}
        for c in self.cases:
            for d in c.differences:
                changed[d.title] = changed.get(d.title, 0) + 1
        return [d.text for d in self.differences] + [f"{t} changed in {n} case(s)" for t, n in changed.items()]

    def as_json(self) -> dict:
        """The typed object as JSON-ready data: each Difference with its title and its line of text."""
        def one(d: Difference) -> dict:
            return {**dataclasses.asdict(d), "title": d.title, "text": d.text}

        return {"differences": [one(d) for d in self.differences],
                "cases": [{"case_id": c.case_id, "label": c.label, "differences": [one(d) for d in c.differences]}
                          for c in self.cases]}


class RunFacts:
    """One side's records indexed for repeated questions: each run's environment facts as text, and
    the per-case facts of each run's and each case's rows."""

    def __init__(self, records: pd.DataFrame):
        records = with_busy_machine(records)
        present = environment_columns(records.columns)
        wanted = [c for c in ("run_id", "case_id", *PER_CASE, *MEASURED) if c in records]
        rows = frame_rows.records(records[wanted])
        self.env_columns = present
        self.per_case = [c for c in PER_CASE if c in records]
        self.measured = [c for c in MEASURED if c in records]
        self.by_run: dict[str, list[dict]] = {}
        self.by_case: dict[str, list[dict]] = {}
        for r in rows:
            self.by_run.setdefault(r["run_id"], []).append(r)
            self.by_case.setdefault(r["case_id"], []).append(r)
        self.run_texts = _run_texts(records, present)

    def texts(self, runs: Iterable[str]) -> dict[str, set[str]]:
        """Environment column -> the distinct texts these runs recorded in it (`values` of their rows)."""
        out: dict[str, set[str]] = {}
        for run in runs:
            for column, found in self.run_texts.get(run, {}).items():
                out.setdefault(column, set()).update(found)
        return out


def _run_texts(records: pd.DataFrame, names: list[str]) -> dict[str, dict[str, set[str]]]:
    """Run -> environment column -> the distinct texts its records hold, each distinct (run, value)
    made text once: a history asks about hundreds of runs for every change point, and a run's
    records mostly repeat its facts."""
    out: dict[str, dict[str, set[str]]] = {}
    runs = records["run_id"].tolist()
    for column in names:
        seen = set()  # plain Python values: pandas' drop_duplicates costs more than it saves on a column
        for run, value in zip(runs, records[column].tolist()):
            try:
                if (run, value) in seen:
                    continue
                seen.add((run, value))
            except TypeError:  # a list value (not hashable): made text each time
                pass
            text = as_text(value)
            if text is not None:
                out.setdefault(run, {}).setdefault(column, set()).add(text)
    return out


def with_busy_machine(records: pd.DataFrame) -> pd.DataFrame:
    """`busy_machine` per record: "yes" where other work left its threads short of CPUs, "no" where
    it did not, null where the record did not count (before `others_cpus`, off Linux)."""
    if "others_cpus" not in records:
        return records
    known = pd.to_numeric(records["others_cpus"], errors="coerce").notna()
    busy = pd.Series(np.where(derived.contended(records), "yes", "no"), index=records.index).where(known)
    return records.assign(busy_machine=busy)


def between(base: RunFacts, cand: RunFacts, base_runs: Iterable[str], cand_runs: Iterable[str]) -> tuple[Difference, ...]:
    """The environment columns whose values differ between these runs of each side."""
    b, c = base.texts(base_runs), cand.texts(cand_runs)
    out = []
    for column in dict.fromkeys([*base.env_columns, *cand.env_columns]):
        shown = _shown(b.get(column, set()), column), _shown(c.get(column, set()), column)
        if shown[0] != shown[1]:
            out.append(Difference(column, *shown))
    return tuple(out)


def case_between(base: RunFacts, cand: RunFacts, base_runs: Iterable[str], cand_runs: Iterable[str],
                 case_id: str) -> tuple[Difference, ...]:
    """The per-case columns (the kernel that ran, ...) whose values differ for one case between
    its records in these runs of each side, then the measured ones (the mean SM clock)."""
    base_runs, cand_runs = set(base_runs), set(cand_runs)
    b = [r for r in base.by_case.get(case_id, []) if r["run_id"] in base_runs]
    c = [r for r in cand.by_case.get(case_id, []) if r["run_id"] in cand_runs]
    return (*compare_columns(b, c, dict.fromkeys([*base.per_case, *cand.per_case]), per_case=True),
            *compare_measured(b, c, dict.fromkeys([*base.measured, *cand.measured])))


def diff(base: pd.DataFrame, cand: pd.DataFrame, labels: Mapping[str, str] | None = None) -> EnvDiff:
    """What differs between two sets of records: run-level facts over all their runs, and per-case
    facts for every case on both sides (`labels`: case_id -> a readable name)."""
    return diff_facts(RunFacts(base), RunFacts(cand), labels)


def diff_facts(b: RunFacts, c: RunFacts, labels: Mapping[str, str] | None = None) -> EnvDiff:
    """`diff` of two sides already indexed (compare has them from its verdicts' explanations)."""
    run_level = between(b, c, b.by_run, c.by_run)
    cases = []
    for case_id in [k for k in b.by_case if k in c.by_case]:
        found = case_between(b, c, b.by_run, c.by_run, case_id)
        if found:
            cases.append(CaseDifferences(case_id, (labels or {}).get(case_id, case_id), found))
    return EnvDiff(run_level, tuple(cases))
