"""No workload or precision name outside its own folder (and the scenario files): the stages read
what they need of one from its declaration (`suite.scenario.declare`), so adding one is a folder.
Nor what a folder declares: a column a workload records, a column a folder's `derived` hook adds
(`Hooks.columns`), an accuracy metric a folder lets a budget bound (`Hooks.metrics`: its column,
what it is against, its bound and that bound's flag), a scaling kind a recipe declares
(`test_no_stage_spells_a_declared_column_or_scaling`), nor a backing library (`Library`:
`test_no_stage_spells_a_declared_library`). What only one folder means is that folder's (its hooks:
`suite.scenario.declare.Hooks`), and the stages iterate over the declarations: none imports a
folder's module (`test_no_stage_imports_a_folder`).

Code names one in two ways, both found here in every module of `suite/` but the folders of
`suite/precisions/` and `suite/workloads/`: a string that is a name (`"linear"`, a dict keyed by
`"fp8_rowwise"`), and a precision, baseline or workload compared with one (`precision == "bf16"`,
`workload in (...)`, `precision.startswith("bf16")`). Prose in messages and docstrings is not
code. fp32, tf32, bf16 and fp16 are also number formats (a recipe's declared `peak` column), which
the device tables and the roofline model key by format: as plain strings they are formats, and only
comparing a precision with one counts. The same holds of what core declares: `rel_err` and
`sqnr_db` are every case's errors against its reference (`suite.core.accuracy`), bounded by the
core's own budget metrics (`suite.core.budgets.ERROR_METRICS`), so they are no folder's.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

from suite.scenario import registry

ROOT = Path(__file__).resolve().parent.parent
PLUGIN_PACKAGES = ("suite/precisions", "suite/workloads")
# What names recipes on purpose (none: published measurements of a recipe are its folder's `anchors`).
ALLOWED: dict[str, str] = {}
SUBJECTS = ("precision", "baseline", "workload")


def names() -> tuple[set[str], set[str]]:
    """(every declared name, the names that are not also a number format)."""
    every = set(registry.PRECISIONS) | set(registry.WORKLOADS)
    formats = {record.peak for record in registry.PRECISIONS.values()}
    return every, every - formats


def generic_modules() -> list[Path]:
    """Every module of suite/ outside the precision and workload folders (their base modules count)."""
    out = []
    for path in sorted((ROOT / "suite").rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        inside = [p for p in PLUGIN_PACKAGES if rel.startswith(p + "/") and rel.count("/") > p.count("/") + 1]
        if not inside and rel not in ALLOWED:
            out.append(path)
    return out


def _docstrings(tree: ast.AST) -> set[int]:
    """Strings that stand alone as statements (docstrings), by id."""
    return {id(node.value) for node in ast.walk(tree)
            if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)}


def _strings(node: ast.AST) -> list[str]:
    """The string constants of a constant or a tuple/list/set of them."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node.value]
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return [s for element in node.elts for s in _strings(element)]
    return []


def _subject(node: ast.AST) -> bool:
    """A precision, baseline or workload value: a name, attribute or column, never a call's result."""
    return not isinstance(node, ast.Call) and any(word in ast.unparse(node).lower() for word in SUBJECTS)


def violations(source: str, every: set[str], plain: set[str]) -> list[str]:
    """Where `source` names a declared precision or workload, as 'line: code'."""
    tree, found = ast.parse(source), []
    docs = _docstrings(tree)
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs \
                and node.value in plain:
            found.append(f"{node.lineno}: {node.value!r}")
        elif isinstance(node, ast.Compare):
            sides = [node.left, *node.comparators]
            named = [s for side in sides for s in _strings(side) if s in every]
            if named and any(_subject(side) for side in sides):
                found.append(f"{node.lineno}: {ast.unparse(node)}")
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                and node.func.attr in ("startswith", "endswith", "isin") and _subject(node.func.value):
            if any(s in every for arg in node.args for s in _strings(arg)):
                found.append(f"{node.lineno}: {ast.unparse(node)}")
    return found


def test_no_stage_names_a_workload_or_precision():
    every, plain = names()
    modules = generic_modules()
    scanned = {p.relative_to(ROOT).as_posix() for p in modules}
    assert {"suite/measure/progress.py", "suite/measure/executors/__init__.py", "suite/analysis/roofline/model.py", "suite/report/plots.py",
            "suite/results/columns.py", "suite/scenario/registry.py", "suite/precisions/base.py"} <= scanned
    assert not any(s.startswith(("suite/precisions/fp8/", "suite/workloads/gemm/")) for s in scanned)
    found = {rel: v for rel in sorted(scanned) if (v := violations((ROOT / rel).read_text(), every, plain))}
    assert not found, found


def test_the_check_finds_what_it_looks_for():
    every, plain = names()
    planted = '''
"""A docstring may say linear and bf16."""
LAYERS = ("linear", "ln_linear")
rows = df[df["precision"] == "bf16"]
if case.workload in ("gemm",):
    pass
half = precision.startswith("fp16")
fmt = {"bf16": 2}  # a format table: not a precision
message = f"{workload} at fp8_rowwise speed"  # prose
'''
    found = violations(planted, every, plain)
    assert sorted(int(f.split(":")[0]) for f in found) == [3, 3, 4, 5, 5, 7], found


# --- libraries: a backing library's version columns and names are its folders' ---------------------
# (`suite.scenario.declare.Library`; the generic stages take them from `registry.libraries()`)

TEMPLATES = ROOT / "suite" / "report" / "templates"


def library_names() -> tuple[set[str], set[str]]:
    """(every declared library's version column, its distribution, import and install names)."""
    libraries = registry.libraries()
    return ({library.column for library in libraries},
            {name for library in libraries for name in (library.module, library.install, *library.distributions)})


def library_violations(source: str, columns: set[str], names: set[str]) -> list[str]:
    """Where code spells a declared library, as 'line: code': a version column anywhere in a string
    or as a name, attribute or keyword; a distribution, import or install name as a whole string, or
    imported; a docstring or a comment is prose."""
    tree, found = ast.parse(source), []
    docs = _docstrings(tree)
    modules = {name.split("[")[0] for name in names}
    column_word = re.compile(r"\b(" + "|".join(map(re.escape, sorted(columns))) + r")\b")
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs:
            if column_word.search(node.value) or node.value in names \
                    or node.value.split(".")[0] in modules and "." in node.value and " " not in node.value:
                found.append(f"{node.lineno}: {node.value!r}")
        elif isinstance(node, (ast.Name, ast.Attribute, ast.keyword)):
            word = node.id if isinstance(node, ast.Name) else node.attr if isinstance(node, ast.Attribute) else node.arg
            if word in columns:
                found.append(f"{node.lineno}: {ast.unparse(node)}")
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            imported = [node.module or ""] if isinstance(node, ast.ImportFrom) else [a.name for a in node.names]
            if any(name.split(".")[0] in modules for name in imported):
                found.append(f"{node.lineno}: {ast.unparse(node)}")
    return found


def test_no_stage_spells_a_declared_library():
    """The versions of the libraries the folders declare are collected, stored, selected, diffed,
    shown and reproduced through the declared group: no generic module, and no template, names one."""
    columns, names = library_names()
    assert {"torchao_version", "te_version"} <= columns and "transformer_engine" in names  # what is declared
    found = {path.relative_to(ROOT).as_posix(): v for path in generic_modules()
             if (v := library_violations(path.read_text(), columns, names))}
    column_word = re.compile(r"\b(" + "|".join(sorted(columns)) + r")\b")
    found |= {path.relative_to(ROOT).as_posix(): column_word.findall(path.read_text())
              for path in sorted(TEMPLATES.glob("*.j2")) if column_word.search(path.read_text())}
    assert not found, found


def test_the_library_check_finds_what_it_looks_for():
    columns, names = {"toy_version"}, {"toylib", "toy-lib", "toylib[extra]"}
    planted = '''
"""A docstring may say toy_version and toylib."""
RUN = ("run_id", "toy_version")
print(f"{facts['toy_version']}")
version = importlib.metadata.version("toylib")
steps.append(pip_argv("toylib[extra]", facts.toy_version))
import toylib.sub
from toylib import thing
module = importlib.import_module("toylib.sub")
text = "the toylib kernels, or toy-lib's"  # prose: fine
row = dict(toy_version=None)
'''
    found = library_violations(planted, columns, names)
    assert sorted({int(f.split(":")[0]) for f in found}) == [3, 4, 5, 6, 7, 8, 9, 11], found


# --- folders: a generic stage reaches a folder through the registry, never by its module path ----

# Where a generic module still imports a folder's module, each with why; anything else fails.
STILL_IMPORTED = {
    # advise's published anchors (torchtitan's 70B tokens/s, TE's GEMM guide) have no hook of their own:
    # the roofline model's are `Hooks.anchors`, the step estimate's are read from the folders' modules
    "suite/analysis/advise/published.py": {"suite.precisions.fp8.anchors", "suite.precisions.te.anchors"},
    # the dry run lets the NVFP4 recipe ask for mslk where it is missing (its fake needs none)
    "suite/measure/dryrun/child.py": {"suite.precisions.mx.recipes"},
}


def _is_module(name: str) -> bool:
    path = ROOT.joinpath(*name.split("."))
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


def folder_imports(source: str, folders: set[str]) -> set[str]:
    """The folders' modules `source` imports, or names as a "module:attribute" target, in code."""
    tree, found = ast.parse(source), set()
    docs = _docstrings(tree)
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:  # `from package import module` imports the module
            found |= {f"{node.module}.{alias.name}" if _is_module(f"{node.module}.{alias.name}") else node.module
                      for alias in node.names}
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs:
            found.add(node.value.split(":")[0])
    return {name for name in found if any(name == f or name.startswith(f + ".") for f in folders)}


def test_no_stage_imports_a_folder():
    """A generic module takes what it needs of a precision or a workload from its declaration
    (`suite.scenario.registry`), so adding or removing a folder changes no stage."""
    folders = {f"{package.replace('/', '.')}.{path.parent.name}" for package in PLUGIN_PACKAGES
               for path in (ROOT / package).glob("*/__init__.py")}
    assert {"suite.precisions.fp8", "suite.workloads.train_step"} <= folders
    found = {}
    for path in generic_modules():
        rel = path.relative_to(ROOT).as_posix()
        extra = folder_imports(path.read_text(), folders) - STILL_IMPORTED.get(rel, set())
        if extra:
            found[rel] = sorted(extra)
    assert not found, found
    stale = {rel: sorted(names - folder_imports((ROOT / rel).read_text(), folders))
             for rel, names in STILL_IMPORTED.items()}
    assert not any(stale.values()), f"no longer imported there: take them off STILL_IMPORTED: {stale}"


def test_the_import_check_finds_what_it_looks_for():
    planted = '''
"""A docstring may say suite.precisions.toy.recipes."""
from suite.precisions.toy import anchors
import suite.workloads.toy_step.workload
from suite.precisions import base, toy
target = "suite.precisions.toy.recipes:TOY"
from suite.precisions.base import Precision
'''
    # (the toy folders are not on disk: `from suite.precisions.toy import anchors` counts as the folder)
    assert folder_imports(planted, {"suite.precisions.toy", "suite.workloads.toy_step"}) == {
        "suite.precisions.toy", "suite.workloads.toy_step.workload", "suite.precisions.toy.recipes"}
    real = "from suite.precisions.fp8 import anchors\nfrom suite.precisions.te.anchors import TE_GUIDE\n"
    assert folder_imports(real, {"suite.precisions.fp8", "suite.precisions.te"}) == {
        "suite.precisions.fp8.anchors", "suite.precisions.te.anchors"}


# Where a generic stage still spells what a folder declares, each with why; anything else fails.
STILL_SPELLED = {
    # a launched rank's CUDA allocator high-water mark, the record's max over ranks (GPU only)
    "suite/measure/executors/rank.py": ({"peak_mem_mb"}, "the ranks' peak memory"),
    # the models' config fields, which train_step's columns are named after (not a column read)
    "suite/models/gpt2.py": ({"d_model", "n_head", "n_layer", "seq_len", "vocab"}, "model config fields"),
    "suite/models/llama.py": ({"d_model", "n_head", "n_layer", "seq_len", "vocab"}, "model config fields"),
    # advise's JSON keys (docs/schemas/advise.schema.json) and its MODEL argument, not record columns read
    "suite/analysis/advise/answer.py": ({"model", "batch"}, "advise's JSON document"),
    "suite/cli/advise.py": ({"model"}, "advise's MODEL argument"),
    # GPT-2's Hugging Face config.json fields, read by advise's architecture (not a column read)
    "suite/models/architecture.py": ({"n_head", "n_layer"}, "config.json fields"),
}


def folder_metrics() -> list:
    """The budget metrics the folders declare (`Hooks.metrics`), not core's (`ERROR_METRICS`)."""
    return [metric for hooks in registry.HOOKS.values() for metric in hooks.metrics]


def declared_identifiers() -> set[str]:
    """What the folders declare that code could spell as a name as well as a string: a derived
    column (`row.loss_gap_nats`), a budget metric's column and bound (`Budget(max_loss_delta=...)`,
    `args.max_loss_delta`)."""
    metrics = folder_metrics()
    return ({column.name for column in registry.derived_columns()} | {m.column for m in metrics}
            | {m.reference for m in metrics if m.reference} | {m.bound for m in metrics})


def declared_terms() -> set[str]:
    """The record columns the workloads declare, the columns the folders' derived hooks add, the
    folders' budget metrics (column, reference, bound and its flag) and the scaling kinds the recipes declare."""
    scalings = {record.scaling for record in registry.PRECISIONS.values() if record.scaling}
    flags = {"--" + metric.bound.replace("_", "-") for metric in folder_metrics()}
    return {column.name for column in registry.declared_columns()} | scalings | declared_identifiers() | flags


def spelled(source: str, terms: set[str], identifiers: set[str] = frozenset()) -> set[str]:
    """The declared terms `source` holds as a string of its code (docstrings and comments aside; an
    f-string's literal parts are prose), and the `identifiers` it uses as a name, an attribute or a
    keyword."""
    tree = ast.parse(source)
    docs = _docstrings(tree)
    prose = {id(part) for node in ast.walk(tree) if isinstance(node, ast.JoinedStr) for part in node.values}
    strings = {node.value for node in ast.walk(tree) if isinstance(node, ast.Constant) and isinstance(node.value, str)
               and id(node) not in docs | prose and node.value in terms}
    words = {node.id if isinstance(node, ast.Name) else node.attr if isinstance(node, ast.Attribute) else node.arg
             for node in ast.walk(tree) if isinstance(node, (ast.Name, ast.Attribute, ast.keyword))}
    return strings | (words & set(identifiers))


def test_no_stage_spells_a_declared_column_or_scaling():
    terms, identifiers = declared_terms(), declared_identifiers()
    assert {"final_loss", "fidelity_ratio", "textbook_bytes_per_param", "microscaled"} <= terms  # columns, scalings
    assert {"loss_gap_nats", "loss_reference", "max_loss_delta"} <= identifiers  # derived, a metric's bound
    assert "--max-loss-delta" in terms and not {"rel_err", "max_rel_err"} & terms  # core's metrics are core's
    found = {}
    for path in generic_modules():
        rel = path.relative_to(ROOT).as_posix()
        extra = spelled(path.read_text(), terms, identifiers) - STILL_SPELLED.get(rel, (set(), ""))[0]
        if extra:
            found[rel] = sorted(extra)
    assert not found, found
    stale = {rel: sorted(names - spelled((ROOT / rel).read_text(), terms, identifiers))
             for rel, (names, _) in STILL_SPELLED.items()}
    assert not any(stale.values()), f"no longer spelled there: take them off STILL_SPELLED: {stale}"


def test_the_column_check_finds_what_it_looks_for():
    planted = '''
"""A docstring may say final_loss."""
gap = df["final_loss"] - df["fp32_final_loss"]
if recipe.scaling == "microscaled":
    pass
text = f"{row['model']} final_loss"  # prose around a column read
gap = row["loss_gap_nats"]  # a derived column train_step's hook adds
budget = Budget(max_loss_delta=0.01, max_rel_err=1e-2)  # a folder's bound as a keyword; core's is core's
bound, against = args.max_loss_delta, r.loss_reference
parser.add_argument("--max-loss-delta", type=float)
margin = row.loss_gap_nats_margin  # no declared name
'''
    assert spelled(planted, declared_terms(), declared_identifiers()) == {
        "final_loss", "fp32_final_loss", "microscaled", "model", "loss_gap_nats", "max_loss_delta", "loss_reference",
        "--max-loss-delta"}


def test_the_check_knows_a_toy_folders_derived_column_and_metric():
    """What a folder declares in its hooks is found by the check, whatever the folder."""
    from suite.core.budgets import Metric
    from suite.scenario.declare import Hooks, columns

    toy = Hooks(columns=columns("toy", ("toy_offset", "float", "", "derived")),
                metrics=(Metric("toy_gap", "max_toy_gap", "toy gap", "help", "X", reference="toy_against"),))
    registry.HOOKS["suite.workloads.toy"] = toy
    try:
        assert {"toy_offset", "toy_gap", "toy_against", "max_toy_gap"} <= declared_identifiers()
        assert "--max-toy-gap" in declared_terms()
        planted = 'df["toy_offset"]; Budget(max_toy_gap=1); args.max_toy_gap; p.add_argument("--max-toy-gap")\n'
        assert spelled(planted, declared_terms(), declared_identifiers()) == {"toy_offset", "max_toy_gap", "--max-toy-gap"}
    finally:
        del registry.HOOKS["suite.workloads.toy"]
