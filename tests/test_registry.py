"""Every precision and workload folder declares complete records, and the registry finds them
(tests/test_plugins.py adds a folder of each and runs them through plan, run and report)."""

from __future__ import annotations

import dataclasses
import re
import subprocess
import sys

import pytest

from suite.scenario import declare, params, registry

PEAK_COLUMNS = {"fp32", "tf32", "bf16", "fp16", "fp8", "fp4"}


@pytest.mark.parametrize("name", sorted(registry.PRECISIONS))
def test_every_precision_record_is_complete(name):
    from suite.precisions.base import Precision

    record = registry.PRECISIONS[name]
    recipe = registry.precision(name)
    assert isinstance(recipe, Precision) and recipe.name == name and record.description
    assert issubclass(record.params, params.Params)
    assert record.peak in PEAK_COLUMNS and registry.peak_column(name) == record.peak
    for field, info in record.params.model_fields.items():
        assert info.description, f"{name}: params.{field} has no description"


@pytest.mark.parametrize("name", sorted(registry.WORKLOADS))
def test_every_workload_record_is_complete(name):
    from suite.results import columns

    record = registry.WORKLOADS[name]
    assert registry.workload(name).name == name and record.description
    assert issubclass(record.params, params.Params) and isinstance(record.shaped, bool)
    for column in record.columns:
        assert column.type in declare.COLUMN_TYPES and column.description and column.group and not column.contract
        assert columns.BY_NAME[column.name] == column
    from suite.report import plots

    for plot in record.plots:
        assert (plot.draw in plots.DRAWINGS or callable(registry.load(plot.draw))) and plot.name
    for column, title, fmt in record.detail_columns + record.case_columns:
        assert column and title and (fmt == "" or format(0.5, fmt))
    assert all(columns.BY_NAME[column] for column, _, _ in record.case_columns)
    for field, info in record.params.model_fields.items():
        assert info.description, f"{name}: params.{field} has no description"


def test_every_hook_a_folder_declares_loads_without_torch():
    """Hooks run where the report runs, which needs no torch: their modules import none."""
    assert registry.HOOKS and all(isinstance(h, declare.Hooks) for h in registry.HOOKS.values())
    code = ("import sys; from suite.scenario import registry; "
            "loaded = [f for kind in ('derived', 'answers', 'anchors') for f in registry.hooks(kind)]; "
            "print(len(loaded), all(map(callable, loaded)), 'torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    declared = sum(len(h.derived) + len(h.answers) + len(h.anchors) for h in registry.HOOKS.values())
    assert out == [str(declared), "True", "False"]


def test_the_registry_finds_the_folders_without_importing_torch():
    code = ("import sys; from suite.scenario import registry, spec; from suite.results import columns; "
            "columns.arrow_schema(); registry.parameters_markdown(); "
            "print(len(registry.PRECISIONS), len(registry.WORKLOADS), 'torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out == [str(len(registry.PRECISIONS)), str(len(registry.WORKLOADS)), "False"]


def test_a_name_two_folders_declare_and_a_folder_that_declares_nothing_are_errors(tmp_path, monkeypatch):
    import suite.workloads

    for folder, text in (("twice", "from suite.workloads.gemm import WORKLOADS\n"), ("empty", '"""nothing"""\n')):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "__init__.py").write_text(text)
    monkeypatch.setattr(suite.workloads, "__path__", [*suite.workloads.__path__, str(tmp_path)])
    try:
        with pytest.raises(ValueError, match="suite.workloads.empty: a folder of suite.workloads declares"):
            registry.discover()
        (tmp_path / "empty" / "__init__.py").unlink()
        (tmp_path / "empty").rmdir()
        with pytest.raises(ValueError, match="workload 'gemm' is declared twice"):
            registry.discover()
    finally:
        monkeypatch.undo()
        for name in ("suite.workloads.twice", "suite.workloads.empty"):
            sys.modules.pop(name, None)
        registry.discover()
    assert "gemm" in registry.WORKLOADS and "twice" not in sys.modules


def test_a_declared_column_must_not_redefine_a_core_one_or_another_folders(monkeypatch):
    from suite.results import columns

    own = declare.columns("mine", ("out_mean", "float", "", "the output's mean"))
    monkeypatch.setitem(registry.WORKLOADS, "a", registry.WorkloadRecord("x:A", columns=own))
    monkeypatch.setitem(registry.WORKLOADS, "b", registry.WorkloadRecord("x:B", columns=own))  # alike: fine
    assert columns.BY_NAME["out_mean"] == own[0] and columns.arrow_schema().names[-1] == "out_mean"
    other = declare.columns("mine", ("out_mean", "int", "", "the output's mean"))
    monkeypatch.setitem(registry.WORKLOADS, "c", registry.WorkloadRecord("x:C", columns=other))
    with pytest.raises(ValueError, match="column 'out_mean': workload 'c' declares it otherwise"):
        columns.all_columns()
    core = declare.columns("mine", ("time_ms_median", "float", "ms", "mine"))
    monkeypatch.setitem(registry.WORKLOADS, "c", registry.WorkloadRecord("x:C", columns=core))
    with pytest.raises(ValueError, match="'time_ms_median' is a core column"):
        columns.all_columns()


# A library's version column, and the requirement repro pins (a PEP 508 name, extras allowed).
VERSION_COLUMN = re.compile(r"[a-z][a-z0-9_]*_version")
REQUIREMENT = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*(\[[A-Za-z0-9._-]+(,[A-Za-z0-9._-]+)*\])?")


def test_every_declared_library_is_complete():
    from suite.results import columns

    libraries = registry.libraries()
    assert len(libraries) >= 2 and len({library.column for library in libraries}) == len(libraries)
    for library in libraries:
        assert VERSION_COLUMN.fullmatch(library.column) and library.title and library.distributions
        assert library.module.isidentifier() and REQUIREMENT.fullmatch(library.install)
        assert all(option.startswith("--") and " " not in option for option in library.install_options)
        column = columns.BY_NAME[library.column]  # one group, on every record, as text
        assert column.group == columns.LIBRARY_GROUP and column.type == "string" and column.contract
    assert columns.with_libraries(["a", columns.LIBRARIES, ("b", "B"), (columns.LIBRARIES, "")]) == [
        "a", *(library.column for library in libraries), ("b", "B"),
        *((library.column, library.title) for library in libraries)]


def test_a_library_two_folders_declare_must_be_declared_alike(monkeypatch):
    from suite.results import columns

    toy = declare.Library("toy_version", "toy", ("toy",), "toy", "toy")
    monkeypatch.setitem(registry.PRECISIONS, "a", declare.PrecisionRecord("x:A", libraries=(toy,)))
    monkeypatch.setitem(registry.WORKLOADS, "b", declare.WorkloadRecord("x:B", libraries=(toy,)))  # alike: fine
    assert registry.libraries().count(toy) == 1 and columns.BY_NAME["toy_version"].contract
    other = dataclasses.replace(toy, install="toy[all]")
    monkeypatch.setitem(registry.WORKLOADS, "c", declare.WorkloadRecord("x:C", libraries=(other,)))
    with pytest.raises(ValueError, match="library column 'toy_version': x:C declares it otherwise"):
        registry.libraries()
    monkeypatch.setitem(registry.WORKLOADS, "c", declare.WorkloadRecord(
        "x:C", columns=declare.columns("mine", ("toy_version", "string", "", "mine"))))
    with pytest.raises(ValueError, match="'toy_version' is a declared library's version"):
        columns.all_columns()
    core = dataclasses.replace(toy, column="torch_version")
    monkeypatch.setitem(registry.WORKLOADS, "c", declare.WorkloadRecord("x:C", libraries=(core,)))
    with pytest.raises(ValueError, match="'torch_version' is a core column"):
        columns.all_columns()
def test_every_scaling_kind_has_one_folders_cast_kernels(monkeypatch):
    """A scaling kind a recipe declares has its cast kernels in one folder (`Hooks.scalings`); a
    second folder declaring it otherwise is an error, not a silent override."""
    used = {record.scaling for record in registry.PRECISIONS.values() if record.scaling}
    known = registry.scalings()
    assert used == set(known)
    assert all(isinstance(registry.load(target), declare.Casts) for target in known.values())
    kind, target = next(iter(known.items()))
    monkeypatch.setitem(registry.HOOKS, "elsewhere", declare.Hooks(scalings={kind: target + "_TWIN"}))
    with pytest.raises(ValueError, match=f"scaling '{kind}' is declared twice"):
        registry.scalings()


def test_a_recipe_that_casts_eagerly_has_its_kinds_eager_casts():
    """`Casts.eager` and `Casts.layer` may be None only for a kind whose recipes all cast with their
    library's kernels (`fused_casts`): the model calls them for every other recipe of the kind."""
    known = registry.scalings()
    for name, record in registry.PRECISIONS.items():
        if record.scaling and not record.fused_casts:
            kind = registry.load(known[record.scaling])
            assert kind.eager is not None and kind.layer is not None, name
