"""The train_step workload: loss accuracy against fp32, fp16 underflow without a scaler, divergence
recorded (not raised), and the vocabulary-padding records and analysis of a small scenario."""

from __future__ import annotations

import math

import pytest
import torch

from suite.analysis.frame import derived
from suite.scenario import registry, spec
from suite.measure import inprocess
from suite.results import store
from suite.core.errors import UserError
from suite.scenario.plan import Case
from suite.measure.timing import CpuClock, StopRule
from suite.core.errors import Unsupported
from suite.workloads.train_step.derived import vocab_padding
from suite.workloads.train_step.workload import TRAIN_STEP, StepSpec, build_model, divergence, final_loss

CPU = torch.device("cpu")
FAST = StopRule(warmup_s=0.0, warmup_max_s=0.0, min_warmup=1, min_samples=2, budget_s=0.01)
TINY = {"size": "tiny", "d_model": 32, "vocab": 256, "seq_len": 32, "batch": 4, "lr": 3e-3}


def case(precision: str, **params) -> Case:
    return Case("t", "train_step", precision, "fp32", None, None, None, {**TINY, **params}, 0, FAST)


def checked(precision: str, **params) -> dict:
    """prepare + check, the way the runner calls them (under the recipe's flags)."""
    p = registry.precision(precision)
    prepared = TRAIN_STEP.prepare(case(precision, **params), p, CPU)
    with p.active():
        first = inprocess.timed_first_call(prepared, lambda: None)
        return {**first, **prepared.check()}


def test_bf16_final_loss_within_tolerance_of_fp32():
    # 6 steps: the fp32 twin's loss falls by ~0.9 nats (the bar below is 0.5), and every bf16 step
    # costs a slow path's price where the CPU has no native bf16
    out = checked("bf16", steps=6)
    assert len(out["loss_curve"]) == len(out["fp32_loss_curve"]) == 6
    # Training made real progress, so agreement is not the trivial agreement of two untrained models.
    assert out["fp32_final_loss"] < out["fp32_loss_curve"][0] - 0.5
    # Tolerance 2% of the fp32 loss (~5 bf16 unit roundoffs, u = 2^-8 ~ 0.39%). Autocast rounds each
    # matmul's operands to bf16 (relative error <= u each; fp32 accumulation, fp32 master weights),
    # so a step's logits move by a few u relative and, since d(loss)/d(logits) = softmax - onehot has
    # L1 norm <= 2, the loss by a few u too; AdamW normalises every update, so the per-step
    # perturbations add up over the steps instead of compounding. The seeds report bf16 within 0.4%
    # of fp32 for a small net and test against 10%; this bar is 5x tighter.
    assert abs(out["loss_rel_delta_vs_fp32"]) < 0.02
    assert out["loss_delta_vs_fp32"] == pytest.approx(out["final_loss"] - out["fp32_final_loss"])
    assert out["diverged"] is False and out["divergence"] is None
    # Conditioning lowers entropy (floor < unigram entropy), and no predictor beats the floor: a
    # 128-token batch's loss sits far above it after 6 steps (per-batch noise is ~0.1 nats).
    assert out["entropy_floor"] < out["unigram_entropy"]
    assert out["entropy_floor"] < min(out["loss_curve"])
    assert out["excess_loss"] == pytest.approx(out["final_loss"] - out["entropy_floor"])
    assert out["peak_mem_mb"] is None  # CPU: no allocator statistics to measure it honestly
    assert out["state_mem_mb"] > 0 and "compile_s" not in out  # not compiled


def test_fp32_case_is_its_own_reference():
    out = checked("fp32", steps=3)
    assert out["loss_curve"] == out["fp32_loss_curve"]
    assert out["loss_delta_vs_fp32"] == 0.0 and out["grad_underflow_frac"] == 0.0


def test_fp16_without_scaler_loses_the_gradients_a_scaler_keeps():
    """At init every logit's gradient is about p / tokens = 1 / (50257 x 768) ~ 2.6e-8, below half
    of fp16's smallest subnormal (2^-25 ~ 3.0e-8): in the fp16 backward it rounds to 0. The lm_head
    is tied to the token embedding, which holds nearly all parameters, so most gradient entries
    that fp32 computes as non-zero come out exactly zero. GradScaler (2^16) lifts them into range."""
    # one step: the probe reads the first step's gradients (same weights, same batch as fp32).
    # GPT-2's vocabulary and enough tokens for the bound above; the width does not enter it, so the
    # narrowest model keeps the fp16 logits cheap where fp16 is a slow path.
    big = dict(d_model=4, n_layer=1, n_head=1, vocab=50257, seq_len=48, batch=16, steps=1)
    naive = checked("fp16_noscaler", **big)
    scaled = checked("fp16", **big)
    assert naive["grad_underflow_frac"] > 0.5
    assert scaled["grad_underflow_frac"] < 0.01
    assert scaled["scaler_skipped_steps"] >= 0 and scaled["loss_scale_final"] > 0
    assert "scaler_skipped_steps" not in naive  # no scaler, nothing skipped


def test_divergence_is_recorded_not_raised():
    # lr 50 without clipping: AdamW moves every weight by ~50 per step and the loss blows up.
    c = case("fp32", steps=4, lr=50.0, grad_clip=0.0)
    record = inprocess.run_case(c, CPU, CpuClock(), {"run_id": "r", "device_name": None})
    assert record["status"] == "ok", record["reason"]
    assert record["diverged"] is True
    assert "loss" in record["divergence"]
    assert record["tokens_per_s"] > 0


def test_divergence_rules():
    assert divergence([5.0, 4.0, 3.0]) is None
    assert "nan at step 1" in divergence([5.0, math.nan, 3.0])
    assert "rose" in divergence([5.0, 6.0, 7.0])
    assert final_loss([9.0, 8.0, 7.0, 6.0, 5.0, 4.0, 3.0, 2.0, 1.0, 0.0]) == 0.5  # mean of the last fifth


def test_same_seed_same_init_for_every_precision():
    s = StepSpec.from_params(TINY)
    a, b = build_model(s, 3), build_model(s, 3)
    assert all(torch.equal(x, y) for x, y in zip(a.parameters(), b.parameters()))


@pytest.mark.parametrize("params, message", [
    ({"batchsize": 4}, "unknown parameter 'batchsize'"),
    ({"model": "bert"}, "unknown model 'bert'"),
    ({"steps": 0}, "steps must be a positive integer"),
    ({"vocab": 256, "data_vocab": 300}, "exceeds the model's vocab"),
    ({"n_kv_head": 2}, "unknown parameter 'n_kv_head' for model gpt2"),
])
def test_bad_parameters_are_one_line_errors(params, message):
    with pytest.raises(UserError, match=message):
        StepSpec.from_params({**TINY, **params})


def test_a_model_too_large_for_the_machine_is_skipped_before_allocating(monkeypatch):
    import suite.workloads.train_step.workload as ts

    monkeypatch.setattr(ts, "available_bytes", lambda device: 2**30)  # pretend 1 GiB is free
    c = Case("t", "train_step", "bf16", None, None, None, None,
             {"model": "llama", "size": "llama3_8b", "n_layer": 1, "seq_len": 128, "batch": 1}, 0, FAST)
    with pytest.raises(Unsupported, match="GiB"):
        TRAIN_STEP.prepare(c, registry.precision("bf16"), CPU)


def test_a_compiled_case_leaves_dynamo_alone_the_runner_resets_it_once_per_setting(monkeypatch):
    # a reset in prepare (or on release) would wipe the compiled code of the setting's other members
    # (suite.precisions.compiler.cold_start, run once per setting by suite.measure.inprocess)
    import gc

    calls = []
    monkeypatch.setattr(torch._dynamo, "reset", lambda: calls.append(1))
    prepared = TRAIN_STEP.prepare(case("fp32", steps=1, compile=True), registry.precision("fp32"), CPU)
    del prepared
    gc.collect()
    assert calls == []


def test_tf32_is_skipped_on_a_cpu():
    record = inprocess.run_case(case("tf32", steps=1), CPU, CpuClock(), {"run_id": "r", "device_name": None})
    assert record["status"] == "skipped" and "CUDA" in record["reason"]


VOCAB_SCENARIO = """
name = "vocab_small"
[defaults]
device = "cpu"
baseline = "fp32"
[defaults.timing]
warmup_s = 0.0
warmup_max_s = 0.0
min_warmup = 1
min_samples = 2
budget_s = 0.01

[[sweep]]
workload = "train_step"
precisions = ["fp32", "bf16"]
params = { size = "tiny", d_model = 32, n_layer = 1, seq_len = 16, batch = 2, steps = 3, vocab = [250, 256], data_vocab = 250 }

# lm_head GEMMs: 32 tokens, d_model 32, vocab 250 and 256 (forward, input grad, weight grad)
[[sweep]]
workload = "gemm"
precisions = ["fp32", "bf16"]
mkn = [[32, 32, 250], [32, 250, 32], [250, 32, 32], [32, 32, 256], [32, 256, 32], [256, 32, 32]]
"""


def test_vocab_scenario_records_both_levels_of_the_padding_effect(write_scenario, tmp_path, quick_png):
    """The effect of the vocabulary is recorded and analysed; its size is a measurement, not asserted."""
    from suite import pipeline

    scenario = spec.load(write_scenario(VOCAB_SCENARIO))
    result = pipeline.run(pipeline.RunRequest(scenario, tmp_path / "results", tmp_path / "reports", progress=False))
    df = store.read_file(result.path)
    steps = df[df["workload"] == "train_step"]
    assert (steps["status"] == "ok").all(), steps["reason"].tolist()
    assert sorted(steps["vocab"].unique()) == [250, 256]
    assert (steps["tokens_per_s"] > 0).all() and steps["mfu"].isna().all()  # no CPU peak: no MFU
    assert all(len(c) == 3 for c in steps["loss_curve"])
    table = vocab_padding(df, "train_step", "gemm", derived.is_emulated(df))
    step_rows = table[table["level"] == "train_step"]
    assert len(step_rows) == 4  # 2 precisions x 2 vocabularies
    assert (step_rows["lm_head_share"] > 0).all()  # all three lm_head GEMMs were measured
    assert step_rows[step_rows["vocab"] == 250]["speedup"].tolist() == [1.0, 1.0]  # the unpadded base
    gemm_total = table[table["level"] == "gemm total"]
    assert sorted(gemm_total["vocab"].unique()) == [250, 256]
    report = tmp_path / "reports" / "vocab_small"
    assert (report / "vocab_padding_train_step.svg").stat().st_size > 0
    assert (report / "loss_train_step.svg").stat().st_size > 0


def test_cosine_schedule_warms_up_then_decays_to_the_final_rate():
    spec = StepSpec.from_params({"steps": 11, "lr": 1e-3, "lr_schedule": "cosine", "warmup_steps": 2, "final_lr": 1e-5})
    assert spec.lr_at(0) == pytest.approx(5e-4) and spec.lr_at(1) == pytest.approx(1e-3)
    assert spec.lr_at(2) == pytest.approx(1e-3)  # the cosine starts at lr
    assert spec.lr_at(2 + 4) == pytest.approx((1e-3 + 1e-5) / 2)  # half way: the cosine's mean
    assert spec.lr_at(10) == pytest.approx(1e-5)  # the last step runs at final_lr
    assert all(spec.lr_at(i) >= spec.lr_at(i + 1) for i in range(2, 10))
    assert StepSpec.from_params({"lr": 1e-3}).lr_at(7) == 1e-3  # constant by default


def test_mfu_is_set_against_the_precisions_peak_and_against_bf16s(monkeypatch):
    # issue #36: an FP8 step against the FP8 peak alone reads about half bf16's MFU at the same speed
    from suite.workloads.train_step import workload as ts

    h100 = "NVIDIA H100 80GB HBM3"  # suite/core/peaks.py: bf16 989.5, fp8 1979 dense TFLOP/s
    monkeypatch.setattr(ts, "_device_name", lambda device: h100)
    prepared = TRAIN_STEP.prepare(case("fp8_rowwise", steps=1), registry.precision("fp8_rowwise"), CPU)
    out = prepared.derive(0.5)
    achieved = prepared.flops / 0.5
    assert out["mfu"] == pytest.approx(achieved / 1979e12) and out["mfu_bf16"] == pytest.approx(achieved / 989.5e12)
    bf16 = ts.mfu_columns(h100, "bf16", 1e9, 1e5)
    assert bf16 == pytest.approx({"mfu": 1e14 / 989.5e12, "mfu_bf16": 1e14 / 989.5e12})
    assert ts.mfu_columns(None, "fp8_rowwise", 1e9, 1e5) == {"mfu": None, "mfu_bf16": None}  # a CPU: no peak
    # declared, with what each is set against, for the model steps (FSDP2 too) and the layer steps
    for workload in ("train_step", "dist_train_step", "linear", "ln_linear"):
        record = registry.WORKLOADS[workload]
        described = {c.name: c.description for c in record.columns}
        assert "own vendor peak" in described["mfu"] and "bf16 dense peak" in described["mfu_bf16"]
        labels = dict((column, title) for column, title, _ in record.detail_columns)
        assert "bf16 peak" in labels["mfu_bf16"] and "own peak" in labels["mfu"]
