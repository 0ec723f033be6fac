"""The grouped_gemm workload: a MoE layer's expert GEMMs as one grouped call or a per-expert loop.

A grouped GEMM multiplies exactly what the loop multiplies: on a CPU `torch._grouped_mm` runs one
GEMM per group with the same float32 accumulation, so in fp32 the two agree to fp32 rounding
(K * 2^-24 relative, at most) and in bf16 to one bf16 rounding of the output (2^-8), empty experts
included; both against float64 within the format's error.
"""

from __future__ import annotations

import json

import pandas as pd
import pytest
import torch

from suite.core.errors import Unsupported, UserError
from suite.measure.timing import StopRule
from suite.precisions.floating.recipes import BF16, FP32
from suite.precisions.fp8.recipes import FP8_ROWWISE, FP8_TENSORWISE
from suite.scenario.plan import Case
from suite.workloads.grouped_gemm.roofline import groups
from suite.workloads.grouped_gemm.routing import LOADS, expert_tokens, imbalance
from suite.workloads.grouped_gemm.workload import GROUPED_GEMM, expert_loop, offsets, operands

CPU = torch.device("cpu")
needs_grouped_mm = pytest.mark.skipif(not hasattr(torch, "_grouped_mm"), reason="torch has no _grouped_mm")


@pytest.mark.parametrize("load", LOADS)
def test_loads_split_the_rows_exactly(load):
    counts = expert_tokens(256, 8, load, align=16)
    assert sum(counts) == 256 and len(counts) == 8 and all(c % 16 == 0 and c >= 0 for c in counts)
    assert offsets(counts, CPU).tolist() == [sum(counts[:i + 1]) for i in range(8)]


def test_each_load_is_the_skew_it_says():
    assert expert_tokens(64, 4, "balanced") == [16, 16, 16, 16]
    assert expert_tokens(64, 4, "one_hot") == [61, 1, 1, 1]
    assert expert_tokens(64, 4, "half_empty") == [32, 32, 0, 0]
    zipf = expert_tokens(250, 4, "zipf")  # 1 : 1/2 : 1/3 : 1/4 of 250 = 120, 60, 40, 30
    assert zipf == [120, 60, 40, 30] and imbalance(zipf) == pytest.approx(120 / 62.5)
    assert imbalance([61, 1, 1, 1]) == pytest.approx(61 / 16)
    with pytest.raises(UserError, match="not a multiple of align = 32"):
        expert_tokens(100, 4, "balanced", align=32)
    assert groups(100, {"align": 32, "experts": 4}) == ([32, 32, 32, 32], True)  # the model pads M


def _case(precision: str, load: str, impl: str = "grouped", m=96, k=32, n=24, **params):
    return Case("t", "grouped_gemm", precision, "fp32", m, k, n, {"experts": 4, "load": load, "impl": impl, **params},
                0, StopRule())


@needs_grouped_mm
@pytest.mark.parametrize("load", LOADS)
@pytest.mark.parametrize("recipe,tolerance", [(FP32, 32 * 2.0 ** -24), (BF16, 2.0 ** -8)])
def test_grouped_equals_the_per_expert_loop(recipe, tolerance, load):
    counts = expert_tokens(96, 4, load)
    x, w = operands(96, 32, 24, 4, 0, CPU)
    grouped = recipe.grouped_gemm(x, w, offsets(counts, CPU), {})()
    loop = expert_loop(recipe, x, w, counts, {})()
    assert grouped.shape == loop.shape == (96, 24) and grouped.dtype == recipe.dtype
    scale = loop.float().abs().max()
    assert float((grouped.float() - loop.float()).abs().max()) <= tolerance * float(scale)


@needs_grouped_mm
@pytest.mark.parametrize("impl", ["grouped", "loop"])
def test_a_skewed_load_is_recorded_with_its_imbalance(impl):
    prepared = GROUPED_GEMM.prepare(_case("bf16", "one_hot", impl), BF16, CPU)
    metrics = prepared.check_output(prepared.fn())
    assert prepared.extra["imbalance"] == pytest.approx(93 / 24) and prepared.extra["empty_experts"] == 0
    assert json.loads(prepared.extra["expert_tokens"]) == [93, 1, 1, 1]
    assert 1e-4 < metrics["rel_err"] < 2.0 ** -7  # bf16 operands against float64
    empty = GROUPED_GEMM.prepare(_case("fp32", "half_empty", impl), FP32, CPU)
    assert empty.extra["empty_experts"] == 2 and empty.check()["rel_err"] < 1e-5
    assert empty.bytes_moved == 4.0 * (96 * 32 + 2 * 32 * 24 + 96 * 24)  # only the busy experts' weights


@needs_grouped_mm
def test_fp8_rowwise_grouped_quantizes_each_row_as_the_loop_does():
    counts = expert_tokens(96, 4, "zipf")
    x, w = operands(96, 32, 32, 4, 0, CPU)
    params = {"quantize": "inline"}
    grouped = FP8_ROWWISE.grouped_gemm(x, w, offsets(counts, CPU), params)()
    loop = expert_loop(FP8_ROWWISE, x, w, counts, params)()
    assert grouped.dtype == torch.bfloat16
    assert float((grouped.float() - loop.float()).abs().max()) <= 2.0 ** -7 * float(loop.float().abs().max())
    with pytest.raises(Unsupported, match="rowwise"):
        FP8_TENSORWISE.grouped_gemm(x, w, offsets(counts, CPU), params)


@needs_grouped_mm
def test_block_formats_group_as_their_kernels_need():
    pytest.importorskip("torchao.prototype.mx_formats")
    from suite.precisions.mx.recipes import MXFP8, NVFP4

    inline = {"quantize": "inline"}
    with pytest.raises(Unsupported, match="multiple of 32"):
        GROUPED_GEMM.prepare(_case("mxfp8", "zipf", k=64, **inline), MXFP8, CPU)
    prepared = GROUPED_GEMM.prepare(_case("mxfp8", "half_empty", m=128, k=64, align=32, **inline), MXFP8, CPU)
    assert prepared.extra["gemm_path"] == "torchao-emulated" and 0.02 < prepared.check()["rel_err"] < 0.06
    nv = GROUPED_GEMM.prepare(_case("nvfp4", "half_empty", m=128, k=64, **inline), NVFP4, CPU)
    assert nv.extra["gemm_path"] == "qdq-fp32" and 0.05 < nv.check()["rel_err"] < 0.2
    with pytest.raises(Unsupported, match="inline"):
        GROUPED_GEMM.prepare(_case("mxfp8", "balanced", m=128, k=64, align=32), MXFP8, CPU)


@needs_grouped_mm
def test_a_run_reports_speedup_against_the_load_and_the_loop(tmp_path, write_scenario, quick_png):
    from conftest import quick_toml
    from suite import pipeline
    from suite.report import render
    from suite.scenario import spec

    text = quick_toml("moe", """
        [[sweep]]
        workload = "grouped_gemm"
        precisions = ["fp32", "bf16"]
        mkn = [[64, 32, 32]]
        params = { experts = 4, load = ["balanced", "one_hot", "half_empty"], impl = ["grouped", "loop"] }
        """, baseline="fp32")
    result = pipeline.run(pipeline.RunRequest(spec.load(write_scenario(text)), tmp_path / "results", None,
                                              progress=False))
    records = result.records
    assert len(records) == 12 and (records["status"] == "ok").all()
    skewed = records[records["params"].map(lambda p: json.loads(p).get("load")) == "one_hot"]
    assert set(skewed["imbalance"]) == {61 / 16}
    files = render(pd.read_parquet(result.path), tmp_path / "report")
    names = {f.name for f in files}
    assert {"speedup_by_imbalance_grouped_gemm.svg", "grouped_vs_loop_grouped_gemm.svg"} <= names
    page = (tmp_path / "report" / "report.md").read_text()
    assert "grouped\\_gemm against impl=loop (its time over each case's): fp32" in page or \
        "grouped_gemm against impl=loop (its time over each case's): fp32" in page


@pytest.mark.parametrize("isa", ["avx2", "amx"])
def test_the_reference_runs_record_every_load_with_its_imbalance(isa):
    from pathlib import Path

    from suite.results import store

    files = sorted((Path(__file__).resolve().parent.parent / "results" / "reference" / "cpu_moe" / isa).glob("*.parquet"))
    df = store.read_file(files[-1])
    assert (df["status"] == "ok").all() and len(df) == 64
    for row in df.to_dict("records"):
        opts = json.loads(row["params"])
        counts = expert_tokens(int(row["m"]), opts.get("experts", 8), opts.get("load", "balanced"), opts.get("align", 1))
        assert json.loads(row["expert_tokens"]) == counts and row["imbalance"] == pytest.approx(imbalance(counts))
        assert row["empty_experts"] == counts.count(0)
        bound = {"fp32": 1e-6, "bf16": 2.0 ** -8}.get(row["precision"])
        if bound:  # grouped and loop alike, empty experts included: the format's own rounding only
            assert row["rel_err"] < bound
    assert df["imbalance"].max() > 30 and (df["empty_experts"] > 0).any()
