"""suite.analysis.regression.envdiff and `python -m suite env-diff`: what differs between two sets of runs, generically
over the environment columns, per case for the kernel that ran."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from suite import cli
from suite.analysis.regression import envdiff
from suite.results import columns, store
from tests.json_docs import cli_json

ROOT = Path(__file__).resolve().parent.parent
REFERENCE = ROOT / "results" / "reference" / "cpu-torch-2.13.0-vs-2.14.1"


@pytest.fixture(scope="module")
def reference() -> pd.DataFrame:
    return store.read([REFERENCE / "cpu"])


def sides(df: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    old = df["torch_version"].str.startswith("2.13")
    return df[old].copy(), df[~old].copy()


def test_versions_that_differ_are_listed_and_equal_ones_are_not(reference):
    a, b = sides(reference)
    found = {d.column: d for d in envdiff.diff(a, b).differences}
    assert found["torch_version"].text == "torch 2.13.0+cpu -> 2.14.1+cu130"
    assert found["cuda_version"].text == "CUDA none -> 13.0"  # a CPU build has no CUDA: none, never nan
    assert "torchao_version" not in found and "python_version" not in found and "device_name" not in found
    assert found["torch_git_version"].base == ("cf30153c4c13",)  # a commit as git prints it on one line
    assert not any("nan" in line for line in envdiff.diff(a, b).lines())
    assert envdiff.diff(a, a.copy()).lines() == []


def test_a_column_of_the_machine_group_joins_without_a_change_here(reference, monkeypatch):
    """The diff is generic: a column a later schema adds to the machine group is compared as soon as
    records hold it; per-case columns (the kernel) are compared case by case."""
    a, b = sides(reference)
    extra = columns.Column("nccl_version", "string", "", "NCCL", "machine")
    monkeypatch.setattr(columns, "COLUMNS", [*columns.COLUMNS, extra])
    a["nccl_version"], b["nccl_version"] = "2.21.5", "2.26.2"
    assert "nccl 2.21.5 -> 2.26.2" in envdiff.diff(a, b).lines()  # a column named nowhere in envdiff
    a["power_limit_w"], b["power_limit_w"] = 700.0, 600.0  # board facts from the telemetry group
    assert "power limit (W) 700 -> 600" in envdiff.diff(a, b).lines()


def test_kernel_changes_are_named_per_case(reference):
    a, b = sides(reference)
    bf16 = a["precision"] == "bf16"
    a["kernel"] = "aten"
    b["kernel"] = "aten"
    a.loc[bf16, "kernel"] = "onednn:brgemm:avx512_core_amx"
    b.loc[b["precision"] == "bf16", "kernel"] = "onednn:ref:any"
    result = envdiff.diff(a, b, {c: f"gemm bf16 {c[:4]}" for c in a["case_id"]})
    assert {c.case_id for c in result.cases} == set(a.loc[bf16, "case_id"])
    first = result.cases[0]
    assert first.differences[0].text == "kernel changed: onednn:brgemm:avx512_core_amx -> onednn:ref:any"
    assert f"{first.label}: kernel changed: onednn:brgemm:avx512_core_amx -> onednn:ref:any" in result.lines()


def test_a_kernel_one_side_never_recorded_is_unknown_not_changed(reference):
    """An older run has no `kernel`, and a case too slow to look at has none: only cases whose both
    sides name a kernel are compared (else every comparison with an older run says "none -> ...")."""
    a, b = sides(reference)
    b["kernel"] = "mkl:sgemm"
    assert envdiff.diff(a, b).cases == ()
    a["kernel"] = None
    a.loc[a.index[0], "kernel"] = "aten"
    changed = envdiff.diff(a, b).cases
    assert [c.case_id for c in changed] == [a.loc[a.index[0], "case_id"]]
    assert changed[0].differences[0].text == "kernel changed: aten -> mkl:sgemm"


def test_values_read_as_text():
    assert envdiff.as_text(float("nan")) is None and envdiff.as_text(None) is None
    assert envdiff.as_text(700.0) == "700" and envdiff.as_text(2.5) == "2.5" and envdiff.as_text(True) == "yes"
    assert envdiff.as_text(np.int64(2)) == "2" and envdiff.as_text(np.array(["a", "b"])) == "a, b"  # a row's values
    assert envdiff.values([{"x": 1.0}, {"x": math.nan}, {"x": 2.0}, {}], "x") == ("1", "2")


def test_env_diff_command_prints_and_returns_a_typed_object(capsys):
    selectors = ["torch=2.13.0,runs=all", "torch=2.14.1,runs=all", "--results", str(REFERENCE)]
    assert cli.main(["env-diff", *selectors]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0].startswith("A torch=2.13.0,runs=all: 20261129T155320Z-36a347, ")
    assert "  torch 2.13.0+cpu -> 2.14.1+cu130" in out.splitlines()
    doc = cli_json(capsys, ["env-diff", *selectors, "--json"])
    assert doc["differences"][0] == {"column": "torch_version", "title": "torch", "base": ["2.13.0+cpu"],
                                     "cand": ["2.14.1+cu130"], "per_case": False,
                                     "text": "torch 2.13.0+cpu -> 2.14.1+cu130"}
    assert len(doc["a"]["runs"]) == len(doc["b"]["runs"]) == 3


def test_env_diff_of_a_run_with_itself_is_a_one_line_error(capsys):
    assert cli.main(["env-diff", "torch=2.13.0", "torch=2.13.0", "--results", str(REFERENCE)]) == 2
    assert "a run has no difference with itself" in capsys.readouterr().err
