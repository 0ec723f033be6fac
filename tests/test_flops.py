"""FLOP counting and MFU against hand calculations and published parameter counts."""

from __future__ import annotations

import pytest
import torch

from suite.models import flops, gpt2, llama
from suite.scenario.plan import Case
from suite.precisions.floating.recipes import BF16
from suite.measure.timing import StopRule
from suite.workloads.train_step.workload import TRAIN_STEP


def tiny_gpt2() -> gpt2.GPT2:
    return gpt2.GPT2(gpt2.config("tiny", vocab=128, seq_len=32))


def test_tiny_gpt2_flops_by_hand():
    """L = 2 layers, H = 2 heads, d = 64 (head dim Q = 32), V = 128, T = 32.
    Per block: ln_1 2d = 128; c_attn d*3d + 3d = 12480; attn c_proj d*d + d = 4160; ln_2 128;
    c_fc d*4d + 4d = 16640; mlp c_proj 4d*d + d = 16448; sum 49984, times 2 blocks = 99968.
    Token embedding (= the tied lm_head) V*d = 8192; ln_f 128. N = 99968 + 8192 + 128 = 108288.
    The position embedding T*d = 2048 is a lookup: left out, so 110336 parameters in all.
    FLOPs/token = 6 N + 12 L H Q T = 649728 + 12*2*2*32*32 = 649728 + 49152 = 698880."""
    model = tiny_gpt2()
    assert flops.unique_parameters(model) == 110336
    assert flops.matmul_parameters(model) == 108288
    assert flops.model_flops_per_token(model) == 698880


def test_published_parameter_counts():
    # GPT-2 small at vocab 50257 with the tied lm_head: 124,439,808 parameters (OpenAI's "124M";
    # nanoGPT prints 123.65M after subtracting the 786,432 position-embedding entries).
    with torch.device("meta"):
        small = gpt2.GPT2(gpt2.config("124m"))
        big = llama.Llama(llama.config("llama3_8b"))
    assert flops.unique_parameters(small) == 124_439_808
    assert flops.matmul_parameters(small) == 124_439_808 - 1024 * 768
    # Meta-Llama-3-8B: 8,030,261,248 parameters (the model card's "8B"); the untied token
    # embedding (128256 x 4096) is a lookup, the lm_head of the same size is not.
    assert flops.unique_parameters(big) == 8_030_261_248
    assert flops.matmul_parameters(big) == 8_030_261_248 - 128256 * 4096


def test_mfu_by_hand():
    # 698880 FLOPs/token x 25600 tokens/s = 1.7891328e10 FLOP/s; on a 312 TFLOP/s peak (A100 bf16
    # dense) that is 5.7344e-5 of the peak.
    assert flops.mfu(698880, 25600, 312.0) == pytest.approx(1.7891328e10 / 312e12, rel=1e-12)
    assert flops.mfu(698880, 25600, None) is None  # no vendor peak (CPUs): no MFU


def test_workload_reports_the_same_flops_and_derives_tokens_per_second():
    case = Case("t", "train_step", "bf16", None, None, None, None,
                {"size": "tiny", "vocab": 128, "seq_len": 32, "batch": 8, "steps": 1}, 0, StopRule())
    prepared = TRAIN_STEP.prepare(case, BF16, torch.device("cpu"))
    assert prepared.extra["flops_per_token"] == 698880
    assert prepared.extra["tokens_per_step"] == 8 * 32
    assert prepared.flops == 698880 * 256
    # a step of 10 ms moves 256 tokens: 25600 tokens/s; a CPU has no vendor peak, so no MFU
    assert prepared.derive(0.010) == {"tokens_per_s": pytest.approx(25600.0), "mfu": None, "mfu_bf16": None}
