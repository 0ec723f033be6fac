"""Transformer Engine recipes (suite.precisions.te).

Without TE (any CPU machine) the tests that need it skip with TE's import error as the reason, and
the tests of what the suite does without TE run: every TE case is recorded as skipped with that
error. With TE on a GPU the recipes run for real. No stand-in TE module is ever used.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from suite import pipeline
from suite.scenario import spec
from suite.core.accuracy import error_metrics
from suite.core.errors import UserError
from suite.scenario.plan import Case
from suite.precisions.te import recipes as te
from suite.measure.timing import StopRule

SCENARIOS = Path(__file__).resolve().parent.parent / "scenarios"
from suite.core.errors import Unsupported
from suite.workloads.gemm.workload import random_operands
from suite.workloads.linear.workload import LINEAR

TE_ERROR = te.import_error()
ALL = [te.TE_DELAYED, te.TE_CURRENT, te.TE_BLOCK, te.TE_MXFP8, te.TE_NVFP4]
needs_te = pytest.mark.skipif(TE_ERROR is not None, reason=TE_ERROR or "")
needs_no_te = pytest.mark.skipif(
    TE_ERROR is None, reason="Transformer Engine is installed: its absence cannot be tested here")
NO_CUDA = "no CUDA device: torch.cuda.is_available() is False"
# the import error first: on a machine without TE that is the reason, GPU or not
needs_te_and_gpu = pytest.mark.skipif(TE_ERROR is not None or not torch.cuda.is_available(), reason=TE_ERROR or NO_CUDA)
CUDA = torch.device("cuda")
E4M3_BAND = (25.0, 32.0)  # dB: one GEMM of two e4m3-quantized normal operands (tests/test_fp8.py)
E5M2_GRAD_BAND = (22.0, 27.0)  # dB: an e5m2 gradient times an e4m3 operand


# --- what runs everywhere -----------------------------------------------------------------------

def test_recipe_params_are_validated_without_te():
    assert te.recipe_kwargs("DelayedScaling", {
        "fp8_format": "E4M3", "amax_history_len": 16, "amax_compute_algo": "most_recent", "margin": 1,
        "quantize": "inline",  # another layer's parameter: not the recipe's business
    }) == {"fp8_format": "E4M3", "amax_history_len": 16, "amax_compute_algo": "most_recent", "margin": 1}
    # a DelayedScaling knob means nothing to current scaling and is left out
    assert te.recipe_kwargs("Float8CurrentScaling", {"amax_history_len": 16, "use_fast_accum": True}) == {
        "use_fast_accum": True}
    for params, match in (({"fp8_format": "E5M2"}, "fp8_format"), ({"amax_history_len": 0}, "amax_history_len"),
                          ({"amax_compute_algo": "mean"}, "amax_compute_algo"), ({"margin": -1}, "margin")):
        with pytest.raises(UserError, match=match):
            te.recipe_kwargs("DelayedScaling", params)


def test_fast_accumulation_that_te_cannot_turn_off_is_a_skip():
    assert te.recipe_kwargs("DelayedScaling", {"use_fast_accum": True}) == {}
    with pytest.raises(Unsupported, match="use_fast_accum = false"):
        te.recipe_kwargs("DelayedScaling", {"use_fast_accum": False})
    assert te.recipe_kwargs("Float8BlockScaling", {"use_fast_accum": False}) == {"use_fast_accum": False}


def test_compiled_te_cases_are_skipped_not_timed_eagerly():
    # te.Linear.forward is wrapped in torch._dynamo.disable: a "compiled" TE row would be eager.
    for recipe in (te.TE_DELAYED, te.TE_CURRENT, te.TE_BLOCK):
        with pytest.raises(Unsupported, match="no_torch_dynamo"):
            recipe.configured({"compile": True})
    assert te.TE_CURRENT.configured({"compile": False}).params == (("compile", False),)


@needs_no_te
def test_without_te_every_recipe_is_skipped_with_the_import_error():
    assert TE_ERROR.startswith("Transformer Engine is not importable: ")
    for precision in ALL:
        assert precision.unsupported(torch.device("cpu")) == TE_ERROR
        assert precision.unsupported(CUDA) == TE_ERROR  # checked before anything about the device
        with pytest.raises(Unsupported, match="not importable"):
            precision.prepare_module(torch.nn.Linear(16, 16), torch.device("cpu"))


@needs_no_te
def test_a_scenario_records_te_cases_as_skipped(write_scenario, tmp_path):
    path = write_scenario("""
        name = "te_cpu"
        [defaults]
        device = "cpu"
        baseline = "bf16"
        [defaults.timing]
        warmup_s = 0.0
        min_samples = 3
        budget_s = 0.01
        [[sweep]]
        workload = "gemm"
        precisions = ["bf16", "te_delayed", "te_current", "te_block", "te_mxfp8", "te_nvfp4"]
        mkn = [[32, 32, 32]]
        params = { quantize = "inline" }
        """)
    result = pipeline.run(pipeline.RunRequest(spec.load(path), tmp_path / "results", None, progress=False))
    by = {r["precision"]: r for r in result.records.to_dict("records")}
    assert by["bf16"]["status"] == "ok"
    for name in ("te_delayed", "te_current", "te_block", "te_mxfp8", "te_nvfp4"):
        assert by[name]["status"] == "skipped" and by[name]["reason"] == TE_ERROR


# --- with Transformer Engine on a GPU ---------------------------------------------------------------

@needs_te
def test_recipes_carry_the_case_params():
    recipe = te.TE_DELAYED.configured({"amax_history_len": 16, "amax_compute_algo": "most_recent"}).recipe()
    assert recipe.amax_history_len == 16 and recipe.amax_compute_algo == "most_recent"
    current = te.TE_CURRENT.recipe({"use_fast_accum": False})
    assert current.fp8_gemm_fprop.use_split_accumulator is True


@needs_te_and_gpu
@pytest.mark.parametrize("precision", [te.TE_DELAYED, te.TE_CURRENT, te.TE_BLOCK])
def test_te_gemm_is_in_the_e4m3_band(precision):
    reason = precision.unsupported(CUDA)
    if reason:
        pytest.skip(reason)
    a, b = random_operands(256, 512, 384, 0, CUDA)
    out = precision.gemm(a, b, {"quantize": "inline"})()
    assert out.shape == (256, 384)
    assert E4M3_BAND[0] <= error_metrics(out, a.double() @ b.double())["sqnr_db"] <= E4M3_BAND[1]
    with pytest.raises(Unsupported, match="inline"):
        precision.gemm(a, b, {"quantize": "pre"})


@needs_te_and_gpu
@pytest.mark.parametrize("precision", [te.TE_DELAYED, te.TE_CURRENT])
def test_te_linear_step_uses_te_layers(precision):
    reason = precision.unsupported(CUDA)
    if reason:
        pytest.skip(reason)
    case = Case("t", "linear", precision.name, None, 256, 512, 384, {}, 0, StopRule())
    prepared = LINEAR.prepare(case, precision, CUDA)
    metrics = prepared.check()
    # HYBRID (TE's default): e4m3 forward, e5m2 gradients (4x the noise power: ~24.5 dB, see
    # tests/test_linear.py)
    assert E4M3_BAND[0] <= metrics["sqnr_db"] <= E4M3_BAND[1]
    for key in ("sqnr_grad_input_db", "sqnr_grad_weight_db"):
        assert E5M2_GRAD_BAND[0] <= metrics[key] <= E5M2_GRAD_BAND[1]
    assert isinstance(prepared.fn(), torch.Tensor)


@needs_te
def test_capability_rules_with_te(monkeypatch):
    if not torch.cuda.is_available():
        pytest.skip(NO_CUDA)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (8, 0))
    assert "8.9" in te.TE_CURRENT.unsupported(CUDA)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (9, 0))
    assert "10.0" in te.TE_MXFP8.unsupported(CUDA) and "10.0" in te.TE_NVFP4.unsupported(CUDA)


def test_block_scaling_always_splits_the_forward_accumulation():
    # TE's Float8BlockScaling.__post_init__ asserts fp8_gemm_fprop.use_split_accumulator, so fast
    # accumulation is a skip with the reason, not 13 failed cases; split (false) is its own setting.
    with pytest.raises(Unsupported, match="requires split accumulation in the forward GEMM"):
        te.recipe_kwargs("Float8BlockScaling", {"use_fast_accum": True})
    assert te.recipe_kwargs("Float8BlockScaling", {}) == {}  # TE's default: split


def test_te_keeps_an_explicit_accumulation_choice_in_the_case():
    from suite.scenario import plan

    # None is "the recipe's own": an explicit false is a choice, kept in the case's identity, and
    # DelayedScaling (which cannot honour it) skips it instead of measuring fast accumulation.
    assert plan.identity_params("gemm", "te_delayed", {"use_fast_accum": False}) == {"use_fast_accum": False}
    # torchao's recipes too: unset is torchao's forward default (fast), false a choice of its own
    assert plan.identity_params("gemm", "fp8_rowwise", {"use_fast_accum": False}) == {"use_fast_accum": False}
    assert plan.identity_params("gemm", "fp8_rowwise", {}) == {}


def test_te_gemm_bytes_count_fp8_operands_as_one_byte():
    assert te.TE_CURRENT.operand_bytes() == te.TE_DELAYED.operand_bytes() == te.TE_BLOCK.operand_bytes() == 1
    assert te.TE_NVFP4.operand_bytes() == 0.5


def test_the_shipped_te_block_cases_ask_for_what_te_can_do():
    from suite.scenario import plan, spec

    for case in plan.expand(spec.load(SCENARIOS / "h100_fp8.toml")):
        if case.precision == "te_block":
            assert case.params.get("use_fast_accum") is not True, case.label
