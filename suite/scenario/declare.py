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
from typing import Callable, Mapping

from suite.core.budgets import Metric  # noqa: F401  (a folder declares its budget metrics with it: `Hooks.metrics`)
from suite.scenario.params import NoParams, Params

# How a results file stores a column (suite/results/columns.py has the Arrow type of each).
COLUMN_TYPES = ("string", "json", "int", "float", "bool", "list<float>", "list<bool>", "list<string>", "timestamp")


@dataclass(frozen=True)
class Range:
    """The values a number column (or a list column's elements) may hold: what the arithmetic on
    it needs (a speedup is inverted and logged, a time divides FLOPs), checked when a record is made
    (`suite.measure.record`) and on every read, import and migration before any of it
    (`suite.results.validate`). Null is always in range, NaN never."""

    low: float = -math.inf
    above: bool = False  # low itself is out of range
    high: float = math.inf  # the most (itself in range)
    infinite: bool = False  # +inf is in range (rel_ci of a single sample)

    def holds(self, value) -> bool:
        """Whether one number is in range, as the file check counts it (`suite.results.validate`):
        NaN never, an infinity only where `infinite` (and within the bounds)."""
        if value != value or (not self.infinite and abs(value) == math.inf):
            return False
        if self.low != -math.inf and (value <= self.low if self.above else value < self.low):
            return False
        return self.high == math.inf or value <= self.high

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
LEVEL = Range(0.0, high=1.0)  # an interval's coverage, a probability


@dataclass(frozen=True)
class Column:
    """A record column: its type as the file stores it, its unit ("" where it has none), what it
    means, the group the schema page lists it under, and the values it may hold (`accepts`)."""

    name: str
    type: str
    unit: str
    description: str
    group: str
    contract: bool = False  # every stored record has it (only core columns: suite/measure/columns.py)
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
    """A plot the report draws for a workload's records, beside the plots every workload gets. `draw`
    is one of the report's own drawings by name ("sweep": a column against a swept parameter,
    `suite.report.plots.DRAWINGS`), called as draw(df, workload, path, **options), or a torch-free
    "module:function" of the folder, called as draw(df, workload, path, kit, **options): `kit`
    holds what the report draws with (`suite.report.plots.Kit`: the figures, the palette), which the
    folder may not import (it sits before the report). Either returns the SVG it wrote
    (`suite.report.figures.save`: points named on hover), or None. The file is `<name>_<workload>.svg`."""

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
class Casts:
    """The kernels a scaling kind scales and casts its operands with, as the roofline model counts
    them (`suite.analysis.roofline.model`, docs/model.md): torch-free functions of the folder, each handed
    the model (its `Kernel`, `tiny`, `eager_cast`, `eager_block_cast`), which it may not import.

    - `fused(model, role, elements, source, first, width)`: one operand's casts in a training step
      as torch.compile or its library's own kernels run them (`role`: input, weight or grad_output;
      `source` bytes per element; `first` the bytes of its first read, 0 where the op before it did
      that read; `width` bytes per element cast to);
    - `eager(model, role, elements, source, width)`: one eager cast of an operand (a GEMM's inline
      quantization); None where its recipes cast with their library's kernels only;
    - `inline(opts)`: whether a GEMM case of the case's parameters `opts` casts its operands inside
      the timed call (each then counts its `eager` casts), as the folder's parameters say it; None:
      never (its operands are cast before the timing);
    - `layer(model, tensors, width)`: an eager Linear training step's casts and layout copies, from
      its (role, elements, source) tensors; None as `eager`;
    - `output(model, opts, m, n)`: kernels a GEMM adds after its own for the case's parameters
      `opts` (rowwise scales applied to the output without fast accumulation); None: none;
    - `grouped_fused`: a grouped GEMM of the kind casts with its library's own kernels.
    """

    fused: Callable
    eager: Callable | None = None
    layer: Callable | None = None
    output: Callable | None = None
    grouped_fused: bool = False
    inline: Callable | None = None


@dataclass(frozen=True)
class Hooks:
    """What a folder adds to the analysis and the report beyond its records, as `HOOKS` in its
    `__init__.py` beside its table: each entry a torch-free "module:function" of the folder, loaded
    when a report or an answer first needs it (`suite.scenario.registry.hooks`). A hook's module
    imports only `suite.core`, `suite.scenario` and its own folder (the folders sit before the
    analysis and the report: tests/test_layout.py); what it needs of those is handed to it.

    - `derived`: derive(df) -> df with columns of its own added, where its records are (a training
      step's loss gap to its reference); run on the records "which precision" and the headline judge,
      once they hold speedups, short names and their `setting_key` (`suite.analysis.outcome.answers.with_settings`).
    - `columns`: the `Column`s its `derived` hooks add (not stored: computed from the records each
      time), so the stages and tests/test_names.py know them as the folder's.
    - `metrics`: the accuracy metrics of its own a budget may bound (`suite.core.budgets.Metric`: a
      training step's loss gap): `recommend`'s flags, the report's "which precision" and headline.
    - `answers`: answer(df, kit) -> sentences the headline adds after the crossovers (the update-side
      answer), from the records with their settings and derived columns; `kit` is
      `suite.analysis.outcome.answers.Kit` (`with_settings`, `short`, `margins`: each budget
      metric's margin by its column).
    - `plots`: `Plot`s drawn for every workload's records after the workload's own, as those are
      (a drawing returns None where the records hold nothing of its folder's); a precision's plots.
    - `scalings`: a scaling kind its recipes declare (`PrecisionRecord.scaling`) -> its `Casts`, the
      roofline model's cost terms for it (`suite.analysis.roofline.model`); a kind is declared by one folder
      (Transformer Engine's MXFP8 recipes use the `mx` folder's `microscaled`).
    - `rooflines`: a kind of call a workload declares as its `roofline` (beyond the model's own:
      matmul, grouped_matmul, linear_step, norm_linear_step) -> "module:function" of the kernels one
      call runs, kernels(model, task, precision, m, k, n, params) -> [model.Kernel] (the roofline
      model's cost terms of its call, `suite.analysis.roofline.model.case_kernels`); a kind is
      declared by one folder.
    - `anchors`: anchors(model) -> rows (source, device, case, published value, unit, the model's
      value): measurements published for its recipes, which the roofline model is checked against
      (`suite.analysis.roofline.published`, docs/model.md); `model` is `suite.analysis.roofline.model`.
    """

    derived: tuple[str, ...] = ()
    columns: tuple[Column, ...] = ()  # what its `derived` hooks add
    metrics: tuple[Metric, ...] = ()  # accuracy metrics a budget may bound
    answers: tuple[str, ...] = ()
    anchors: tuple[str, ...] = ()
    plots: tuple[Plot, ...] = ()  # drawn for every workload's records, after its own (a precision's plots)
    # scaling kind -> "module:attribute" of its `Casts`: the roofline model's cast kernels for it
    scalings: Mapping[str, str] = field(default_factory=dict)
    # a workload's kind of call (`WorkloadRecord.roofline`) -> "module:function": the kernels one call runs
    rooflines: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class PrecisionRecord:
    target: str  # "module:attribute"; the attribute is a suite.precisions.base.Precision instance
    params: type[Params] = NoParams
    # the vendor-peak column (suite/core/peaks.py) its throughput is set against: the number
    # format its GEMMs run in (fp32, tf32, bf16, fp16, fp8, fp4)
    peak: str | None = None
    description: str = ""
    # --- the roofline model (suite/analysis/roofline/model.py, docs/model.md) ---
    # how it scales and casts its operands, for a recipe that does: a kind a folder declares the
    # model's cast kernels of (`Hooks.scalings`: fp8's tensorwise, rowwise, rowwise_with_gw_hp; te's
    # delayed, current, block; mx's microscaled)
    scaling: str | None = None
    fused_casts: bool = False  # its casts are its library's own kernels, eager or compiled (TE)
    weight_grad_format: str | None = None  # the weight-gradient GEMM's format, where not `peak`'s
    min_cc: float = 0.0  # the CUDA compute capability it needs (the model knows its format's too)
    no_roofline: str | None = None  # why the model has no roofline for it (its GEMM is emulated)
    # the format FSDP all-gathers its converted linears' weights in where it can cast them before the
    # all-gather (torchao's tensorwise: fp8, its `fp8_all_gather`); None: they travel in bf16 (advise's estimate)
    fsdp_gather: str | None = None
    # --- the update-side answer (suite/precisions/update/answers.py) and training steps' loss gaps ---
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
    # what one call is to the roofline model (suite/analysis/roofline/model.py KERNELS): matmul,
    # grouped_matmul, linear_step, norm_linear_step, or a kind its folder declares (`Hooks.rooflines`);
    # None: not modelled
    roofline: str | None = None
    # grouped_matmul: "module:function" (torch-free), (m, params) -> (the rows of each group's
    # GEMM of (rows, k, n), whether one kernel runs them all)
    groups: str | None = None
    versus: Versus | None = None  # a parameter value the other cases are timed against
    trend: Trend | None = None  # a column the report's answers follow along a swept parameter
    plots: tuple[Plot, ...] = ()  # drawn after the plots every workload gets
    libraries: tuple[Library, ...] = ()  # those whose version its numbers depend on (beyond torch's)
    # record columns the report's table of every case shows, where any case records one: (column, title, format)
    case_columns: tuple[tuple[str, str, str], ...] = ()
