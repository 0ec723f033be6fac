"""What a precision or a workload folder declares about itself (torch-free).

Each folder of `suite/precisions/` and `suite/workloads/` is one package whose `__init__.py`
holds a `PRECISIONS` or `WORKLOADS` table of these records, name -> record, next to its parameter
models; its torch code sits beside it and is named here by "module:attribute", loaded only when a
case runs (`suite.scenario.registry` finds the folders). Everything the rest of the suite needs to
know about one precision or workload is a field here, so no stage after the registry names one.
"""

from __future__ import annotations

import importlib.metadata
import math
from dataclasses import dataclass, field
from typing import Mapping

from suite.scenario.params import NoParams, Params

# How a results file stores a column (suite/results/columns.py has the Arrow type of each).
COLUMN_TYPES = ("string", "json", "int", "float", "bool", "list<float>", "list<bool>", "list<string>", "timestamp")


@dataclass(frozen=True)
class Range:
    """The values a number column (or a list column's elements) may hold: what the arithmetic on
    it needs (a speedup is inverted and logged, a time divides FLOPs), checked on every read, import
    and migration before any of it (`suite.results.validate`). Null is always in range, NaN never."""

    low: float = -math.inf
    above: bool = False  # low itself is out of range
    high: float = math.inf  # the most (itself in range)
    infinite: bool = False  # +inf is in range (rel_ci of a single sample)

    def __str__(self) -> str:
        bounds = [f"{'> ' if self.above else '>= '}{self.low:g}"] if self.low != -math.inf else []
        bounds += [f"<= {self.high:g}"] if self.high != math.inf else []
        bounds += [] if self.infinite or self.high != math.inf else ["finite"]
        return ", ".join(bounds) or "any"


ANY = Range(infinite=True)  # any number but NaN (a signed seed)
COUNT = Range(0.0)  # sizes and counts (whole numbers by their type)
RATIO = Range(1e-12, high=1e12)  # speedups and ratios: inverted, logged, one over another in compare
DURATION = Range(0.0)  # ms or s that may be zero (a warm-up skipped): the default of those units
CALL_MS = Range(1e-6, high=1e12)  # one call's time in ms: 1 ns (a kernel launch takes microseconds) to 30 years


@dataclass(frozen=True)
class Column:
    """A record column: its type as the file stores it, its unit ("" where it has none), what it
    means, the group the schema page lists it under, and the values it may hold (`accepts`)."""

    name: str
    type: str
    unit: str
    description: str
    group: str
    contract: bool = False  # every record has it (only core columns: suite/results/columns.py)
    values: Range | None = None  # None: the default for its type and unit (`accepts`)

    @property
    def accepts(self) -> Range | None:
        """Its declared range, else: ms and s columns `DURATION`, ints `COUNT`; None (unchecked)
        for other floats (a diverged loss is NaN) and for columns that hold no numbers."""
        if self.values is not None or self.type not in ("int", "float", "list<float>"):
            return self.values
        return DURATION if self.unit in ("ms", "s") else COUNT if self.type == "int" else None

    @property
    def accepts_text(self) -> str:
        """Its range in words ("" where unchecked); a whole number is finite by its type."""
        text = "" if self.accepts is None else str(self.accepts)
        return text.replace(", finite", "") if self.type == "int" else text


def columns(group: str, *rows: tuple) -> tuple[Column, ...]:
    """A group of columns from (name, type, unit, description) rows, a `Range` fifth where the
    column's values are narrower or wider than its type's default (`Column.accepts`)."""
    return tuple(Column(*row[:4], group, values=row[4] if len(row) > 4 else None) for row in rows)


@dataclass(frozen=True)
class Plot:
    """A plot the report draws for a workload's records, beside the plots every workload gets:
    `draw` ("module:attribute") is called as draw(df, workload, path, **options) and returns the
    SVG it wrote (`suite.report.figures.save`: points named on hover), or None. The file is `<name>_<workload>.svg`."""

    name: str
    draw: str
    options: Mapping[str, object] = field(default_factory=dict)


@dataclass(frozen=True)
class Versus:
    """A workload parameter one of whose values is the reference of the others: the report sets
    each case's time against that of the case differing from it only in `param` = `value` (same
    run, device, precision and shape), as `versus_speedup`, and draws and answers it against the
    record column `along`."""

    param: str
    value: str
    along: str


@dataclass(frozen=True)
class Trend:
    """A record column `y` the report's answers follow along a swept parameter (`param`, recorded
    as column `x`): each precision's value at the smallest and at the largest x. `what` names y."""

    x: str
    y: str
    param: str
    what: str


@dataclass(frozen=True)
class Library:
    """A library whose version matters to a precision's or a workload's numbers, declared by the
    folders that use it (their records' `libraries`): every record stores its installed version in
    `column` (null where it is not installed), and the stages after it take their version columns
    from these declarations (`suite.results.columns.LIBRARIES`): run selectors (`torchao=0.18`: the
    column less `_version`), what differs between runs, the pages, `env`, and repro's install line
    (`pip install <install>==<version>`)."""

    column: str  # the record column of its version, `<name>_version`
    title: str  # what pages call it
    distributions: tuple[str, ...]  # the distributions that may hold it: the first installed gives the version
    module: str  # its import name (the generic stages never import it)
    install: str  # the requirement repro pins to the recorded version, e.g. "transformer_engine[pytorch]"
    install_options: tuple[str, ...] = ()  # pip's options for it, e.g. ("--no-build-isolation",)

    @property
    def name(self) -> str:
        """What run selectors and `env` call it: the column without `_version`."""
        return self.column.removesuffix("_version")

    def version(self) -> str | None:
        """Its installed version (distribution metadata: nothing imported), or None."""
        for dist in self.distributions:
            try:
                return importlib.metadata.version(dist)
            except importlib.metadata.PackageNotFoundError:
                continue
        return None


@dataclass(frozen=True)
class PrecisionRecord:
    target: str  # "module:attribute"; the attribute is a suite.precisions.base.Precision instance
    params: type[Params] = NoParams
    # the vendor-peak column (suite/core/peaks.py) its throughput is set against: the number
    # format its GEMMs run in (fp32, tf32, bf16, fp16, fp8, fp4)
    peak: str | None = None
    description: str = ""
    # --- the roofline model (suite/analysis/model.py, docs/model.md) ---
    # how it scales and casts its operands, for a recipe that does (`model.fused_cast`): tensorwise,
    # rowwise, rowwise_with_gw_hp, delayed, current, block, microscaled
    scaling: str | None = None
    fused_casts: bool = False  # its casts are its library's own kernels, eager or compiled (TE)
    weight_grad_format: str | None = None  # the weight-gradient GEMM's format, where not `peak`'s
    min_cc: float = 0.0  # the CUDA compute capability it needs (the model knows its format's too)
    no_roofline: str | None = None  # why the model has no roofline for it (its GEMM is emulated)
    # --- the update-side answer (suite/analysis/update.py) ---
    reference: str | None = None  # the recipe whose final loss this one's is set against
    # --- reading older results (suite/results/store.py) ---
    # (old name, last results schema version that wrote it): files up to that version call it so
    formerly: tuple[str, int] | None = None
    libraries: tuple[Library, ...] = ()  # those whose version its numbers depend on (beyond torch's)


@dataclass(frozen=True)
class WorkloadRecord:
    target: str  # "module:attribute"; the attribute is a suite.workloads.base.Workload instance
    params: type[Params] = NoParams
    shaped: bool = False  # cases defined by (m, k, n); the others take their shape from params
    # workload-specific record columns the report shows in a table of their own: (column, title, format)
    detail_columns: tuple[tuple[str, str, str], ...] = ()
    # each case is one torchrun launch of `world_size` ranks (suite.measure.executors.torchrun), not a call here
    launched: bool = False
    description: str = ""
    columns: tuple[Column, ...] = ()  # the record columns it adds to the core ones
    # GEMMs of (m, k, n) one call runs (a layer's training step: three), for cost estimates
    gemms_per_call: int = 1
    # what one call is to the roofline model (suite/analysis/model.py KERNELS): matmul,
    # grouped_matmul, linear_step, norm_linear_step; None: not modelled
    roofline: str | None = None
    # grouped_matmul: "module:function" (torch-free), (m, params) -> (the rows of each group's
    # GEMM of (rows, k, n), whether one kernel runs them all)
    groups: str | None = None
    versus: Versus | None = None  # a parameter value the other cases are timed against
    trend: Trend | None = None  # a column the report's answers follow along a swept parameter
    plots: tuple[Plot, ...] = ()  # drawn after the plots every workload gets
    libraries: tuple[Library, ...] = ()  # those whose version its numbers depend on (beyond torch's)
