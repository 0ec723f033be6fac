"""Every precision and workload has one complete registry record, and adding one is one file plus
one record: a dummy precision written to a file of its own runs through spec, plan, run and report."""

from __future__ import annotations

import textwrap

import pytest

from suite.scenario import params, registry

PEAK_COLUMNS = {"fp32", "tf32", "bf16", "fp16", "fp8", "fp4"}


@pytest.mark.parametrize("name", sorted(registry.PRECISIONS))
def test_every_precision_record_is_complete(name):
    from suite.precisions.base import Precision

    record = registry.PRECISIONS[name]
    recipe = registry.precision(name)
    assert isinstance(recipe, Precision) and recipe.name == name and recipe.description
    assert issubclass(record.params, params.Params)
    assert record.peak in PEAK_COLUMNS and registry.peak_column(name) == record.peak
    for field, info in record.params.model_fields.items():
        assert info.description, f"{name}: params.{field} has no description"


@pytest.mark.parametrize("name", sorted(registry.WORKLOADS))
def test_every_workload_record_is_complete(name):
    record = registry.WORKLOADS[name]
    assert registry.workload(name).name == name
    assert issubclass(record.params, params.Params) and isinstance(record.shaped, bool)
    for column, title, fmt in record.detail_columns:
        assert column and title and (fmt == "" or format(0.5, fmt))
    for field, info in record.params.model_fields.items():
        assert info.description, f"{name}: params.{field} has no description"


DUMMY = '''
"""A dummy precision for the registry test: bf16 operands, float32 output."""
import torch

from suite.precisions.base import Precision
from suite.scenario.params import Params
from pydantic import Field


class ScaleParams(Params):
    scale: float = Field(1.0, description="multiplies A before the GEMM")


class Dummy(Precision):
    def gemm(self, a, b, params):
        a = (a * params.get("scale", 1.0)).to(torch.bfloat16)
        b = b.to(torch.bfloat16)
        return lambda: torch.matmul(a, b).float()


DUMMY = Dummy("dummy", "bf16 operands, float32 output (test)", torch.bfloat16)
'''


def test_adding_a_precision_is_one_file_and_one_record(tmp_path, monkeypatch, write_scenario):
    (tmp_path / "dummy_precision.py").write_text(textwrap.dedent(DUMMY))
    monkeypatch.syspath_prepend(str(tmp_path))
    import dummy_precision

    # the one record:
    monkeypatch.setitem(registry.PRECISIONS, "dummy",
                        registry.PrecisionRecord("dummy_precision:DUMMY", dummy_precision.ScaleParams, "bf16"))
    from suite import pipeline
    from suite.scenario import spec
    from tests.conftest import quick_toml

    scenario = spec.load(write_scenario(quick_toml("dummy", """
        [[sweep]]
        workload = "gemm"
        precisions = ["fp32", "dummy"]
        mkn = [[32, 48, 16]]
        params = { scale = [1.0, 2.0] }
    """, baseline="fp32")))
    result = pipeline.run(pipeline.RunRequest(scenario, tmp_path / "results", tmp_path / "reports", "cpu", progress=False))
    dummy = [r for r in result.records.to_dict("records") if r["precision"] == "dummy"]
    assert [r["status"] for r in dummy] == ["ok", "ok"]
    by_params = {r["params"]: r for r in dummy}
    assert sorted(by_params) == ['{"scale": 2.0}', "{}"]  # scale = 1.0 is the default: left out
    assert by_params["{}"]["rel_err"] < 1e-2  # bf16 operands: about 2^-8
    assert abs(by_params['{"scale": 2.0}']["rel_err"] - 1.0) < 1e-2  # 2AB against AB: the parameter took effect
    assert "dummy" in (tmp_path / "reports" / "dummy" / "report.md").read_text()
    with pytest.raises(spec.ScenarioError, match="params.scale: 'big' is not valid for 'dummy'"):
        spec.load(write_scenario(quick_toml("dummy2", """
            [[sweep]]
            workload = "gemm"
            precisions = ["dummy"]
            mkn = [[32, 48, 16]]
            params = { scale = "big" }
        """), "d2.toml"))
