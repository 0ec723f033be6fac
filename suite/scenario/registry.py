"""Every precision and workload the suite knows, found by folder: each package under
`suite/precisions/` and `suite/workloads/` declares its own in a torch-free `__init__.py` (a
`PRECISIONS` or `WORKLOADS` table of `suite.scenario.declare` records: its parameter model, the
columns it records, its report formats, where its code lives).

Adding a precision or a workload is one new folder; tests/test_registry.py checks that every
record is complete, and tests/test_plugins.py adds a toy of each. Kept free of torch: scenario
validation (`suite.scenario.spec`) lists valid names and checks parameters without importing it;
`load` imports the implementing object only when a case needs it.
"""

from __future__ import annotations

import importlib
import pkgutil

from suite.core.budgets import ERROR_METRICS, Metric
from suite.scenario import params as p
from suite.scenario.declare import Column, Hooks, Library, PrecisionRecord, WorkloadRecord

# name -> record, in folder order (then each folder's own order); filled by `discover`
PRECISIONS: dict[str, PrecisionRecord] = {}
WORKLOADS: dict[str, WorkloadRecord] = {}
# folder (its package) -> the hooks it declares (`HOOKS`), precisions' folders first; filled by `discover`
HOOKS: dict[str, Hooks] = {}
# where the folders are, and the table each folder's __init__ holds
PACKAGES = (("suite.precisions", "PRECISIONS", PRECISIONS), ("suite.workloads", "WORKLOADS", WORKLOADS))


def _folders(package: str):
    """The folders (subpackages) of a package, imported (their torch-free __init__ only), by name."""
    root = importlib.import_module(package)
    for info in sorted(pkgutil.iter_modules(root.__path__), key=lambda info: info.name):
        if info.ispkg:
            yield importlib.import_module(f"{package}.{info.name}")


def discover() -> None:
    """Fill PRECISIONS, WORKLOADS and HOOKS from the folders, in place (a module holding a reference
    to one sees the new contents). A name two folders declare is an error, as is a folder that
    declares nothing."""
    hooks: dict[str, Hooks] = {}
    for package, attr, table in PACKAGES:
        found: dict = {}
        for folder in _folders(package):
            declared = getattr(folder, attr, None)
            if not declared:
                raise ValueError(f"{folder.__name__}: a folder of {package} declares its {attr.lower()} in "
                                  f"its __init__.py: {attr} = {{name: record}} (suite.scenario.declare)")
            for name in declared:
                if name in found:
                    raise ValueError(f"{attr.lower()[:-1]} {name!r} is declared twice ({folder.__name__})")
            found.update(declared)
            if getattr(folder, "HOOKS", None) is not None:
                hooks[folder.__name__] = folder.HOOKS
        table.clear()
        table.update(found)
    HOOKS.clear()
    HOOKS.update(hooks)


def scalings() -> dict[str, str]:
    """Scaling kind -> "module:attribute" of its `Casts`, as the folders declare them; a kind two
    folders declare is an error."""
    return _kinds("scalings", "scaling")


def rooflines() -> dict[str, str]:
    """A workload's kind of call -> "module:function" of the roofline model's kernels for it, as the
    folders declare them (`Hooks.rooflines`); a kind two folders declare is an error."""
    return _kinds("rooflines", "roofline kind")


def _kinds(field: str, what: str) -> dict[str, str]:
    """A `Hooks` field of kind -> target, merged over the folders: a kind declared twice is an error."""
    found: dict[str, str] = {}
    for folder, declared in HOOKS.items():
        for kind, target in getattr(declared, field).items():
            if found.setdefault(kind, target) != target:
                raise ValueError(f"{what} {kind!r} is declared twice ({folder})")
    return found


def hooks(kind: str) -> list:
    """The functions the folders declare as hooks of one kind (a `suite.scenario.declare.Hooks`
    field: "derived", "answers"), loaded, in folder order (precisions' folders, then workloads')."""
    return [load(target) for declared in HOOKS.values() for target in getattr(declared, kind)]


def derived_columns() -> list[Column]:
    """The columns the folders' `derived` hooks add (`Hooks.columns`), in folder order."""
    return [column for declared in HOOKS.values() for column in declared.columns]


def budget_metrics() -> list[Metric]:
    """The accuracy metrics a budget may bound: the errors every case records against its reference
    (`suite.core.budgets.ERROR_METRICS`), then the folders' own (`Hooks.metrics`), in folder order; a
    column or a bound two of them declare is an error."""
    found = [*ERROR_METRICS, *(metric for declared in HOOKS.values() for metric in declared.metrics)]
    for key in ("column", "bound"):
        names = [getattr(metric, key) for metric in found]
        twice = sorted({name for name in names if names.count(name) > 1})
        if twice:
            raise ValueError(f"budget metric {key} {twice[0]!r} is declared twice")
    return found


# The last answer of declared_columns and the (name, record) pairs it was computed from: reading a
# results file asks for the columns once per column and record, and comparing every declared column
# with its twins each time cost seconds per file read (the records are frozen, so the same objects
# declare the same columns).
_declared: tuple[tuple, list] = ((), [])


def declared_columns() -> list[Column]:
    """The record columns the workloads declare, each once, in folder order; a name declared twice
    must be declared alike (a train step's columns are its distributed twin's too)."""
    global _declared
    now = tuple(WORKLOADS.items())
    then, columns = _declared
    if len(now) == len(then) and all(a == b and r is s for (a, r), (b, s) in zip(now, then)):
        return list(columns)
    out: dict[str, Column] = {}
    for name, record in now:
        for column in record.columns:
            if out.setdefault(column.name, column) != column:
                raise ValueError(f"column {column.name!r}: workload {name!r} declares it otherwise than another")
    _declared = (now, list(out.values()))
    return list(out.values())


# The last answer of `libraries` and the records it was computed from, as for declared_columns.
_libraries: tuple[tuple, list] = ((), [])


def libraries() -> list[Library]:
    """The libraries the precision and workload folders declare (`Library`), each once, in folder
    order, precisions first; a column declared twice must be declared alike (one library serves
    several folders)."""
    global _libraries
    now = tuple(record for table in (PRECISIONS, WORKLOADS) for record in table.values())
    then, found = _libraries
    if len(now) == len(then) and all(r is s for r, s in zip(now, then)):
        return list(found)
    out: dict[str, Library] = {}
    for record in now:
        for library in record.libraries:
            if out.setdefault(library.column, library) != library:
                raise ValueError(f"library column {library.column!r}: {record.target} declares it otherwise "
                                 "than another")
    _libraries = (now, list(out.values()))
    return list(out.values())


def gemms_per_call(workload: str) -> int:
    """GEMMs of the case's (m, k, n) one call of the workload runs (1 for one not declared)."""
    record = WORKLOADS.get(workload)
    return record.gemms_per_call if record else 1


def peak_column(precision: str) -> str | None:
    """The vendor-peak column a precision's throughput is set against (`suite.core.peaks`), or None
    (FP8 recipes share the fp8 column)."""
    record = PRECISIONS.get(precision)
    return record.peak if record else None


def params_model(workload: str, precision: str) -> type[p.Params]:
    """The parameter model of one case: its workload's fields and its precision's."""
    return p.case_model(WORKLOADS[workload].params, PRECISIONS[precision].params)


def load(target: str):
    module, _, attr = target.partition(":")
    return getattr(importlib.import_module(module), attr)


def precision(name: str):
    return load(PRECISIONS[name].target)


def workload(name: str):
    return load(WORKLOADS[name].target)


def _type_text(prop: dict) -> str:
    """A JSON-schema property as a short type: `int > 0`, `'pre' or 'inline'`, `bool or none`."""
    if "anyOf" in prop:
        return " or ".join(_type_text(p) for p in prop["anyOf"])
    if "enum" in prop or "const" in prop:
        return " or ".join(repr(v) for v in prop.get("enum", [prop.get("const")]))
    kind = {"integer": "int", "number": "float", "boolean": "bool", "string": "str", "null": "none"}.get(
        prop.get("type"), str(prop.get("type")))
    for key, op in (("exclusiveMinimum", ">"), ("minimum", ">="), ("minLength", "length >=")):
        if key in prop:
            kind += f" {op} {prop[key]}"
    return kind


def parameters_markdown() -> str:
    """docs/parameters.md: every workload's and precision's parameters (`python -m
    suite.scenario.registry > docs/parameters.md`; a test fails when the page and the code differ)."""
    lines = [
        "# Parameters",
        "",
        "Generated from the folders' declarations (`suite/precisions/*/__init__.py`,",
        "`suite/workloads/*/__init__.py`): `python -m suite.scenario.registry > docs/parameters.md`.",
        "A sweep's `params` may hold the parameters of its workload and of its precisions; a list is",
        "swept. Types are strict (`true` is no 1, \"64\" is no 64); a key no one declares, or a bad value,",
        "is a one-line error when the scenario loads. A case keeps only the non-default values of the",
        "keys its own workload or precision declares: that is its identity (`case_id`).",
        "",
    ]
    for kind, table in (("workload", WORKLOADS), ("precision", PRECISIONS)):
        lines += [f"## By {kind}", ""]
        for name, record in table.items():
            lines += _section(name, record)
    return "\n".join(lines)


def _section(name: str, record: PrecisionRecord | WorkloadRecord) -> list[str]:
    """One workload's or precision's entry: what it is, then its parameters' table."""
    fields = record.params.model_fields
    lines = [f"### `{name}`", "", record.description + ("." if fields else ". No parameters."), ""]
    if fields:
        props = record.params.model_json_schema()["properties"]
        lines += [" ".join(record.params.__doc__.split()), "",
                  "| parameter | type | default | meaning |", "|---|---|---|---|"]
        for field, info in fields.items():
            default = "(required)" if info.is_required() else f"`{info.default!r}`"
            lines.append(f"| `{field}` | {_type_text(props[field])} | {default} | {info.description or ''} |")
        lines.append("")
    return lines


discover()

if __name__ == "__main__":
    print(parameters_markdown(), end="")

