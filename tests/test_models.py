"""GPT-2 and Llama models: shapes, causality, init, rotary embeddings, configuration errors."""

from __future__ import annotations

import math

import pytest
import torch

from suite.core.errors import UserError
from suite.models import gpt2, llama


def small_gpt2(**kw):
    torch.manual_seed(0)
    return gpt2.GPT2(gpt2.config("tiny", d_model=32, vocab=96, seq_len=16, **kw))


def small_llama(**kw):
    torch.manual_seed(0)
    return llama.Llama(llama.config("tiny", d_model=32, vocab=96, seq_len=16, ffn_hidden=64, **kw))


MODELS = {"gpt2": small_gpt2, "llama": small_llama, "llama_norope": lambda: small_llama(rope=False)}


@pytest.mark.parametrize("name", MODELS)
def test_logits_shape_and_untrained_loss_is_log_vocab(name):
    model = MODELS[name]()
    gen = torch.Generator().manual_seed(1)
    x, y = torch.randint(0, 96, (2, 2, 16), generator=gen)
    assert model(x).shape == (2, 16, 96)
    # Init std 0.02 keeps the logits near zero, so the softmax is near uniform: loss ~ ln V.
    # (Targets independent of the inputs: GPT-2's tied embedding favours repeating the input.)
    loss = model(x, y).detach()
    assert loss.dtype == torch.float32
    assert float(loss) == pytest.approx(math.log(96), abs=0.05)


@pytest.mark.parametrize("name", MODELS)
def test_causal_no_position_sees_the_future(name):
    model = MODELS[name]()
    x = torch.randint(0, 96, (1, 16), generator=torch.Generator().manual_seed(2))
    y = x.clone()
    y[0, 10] = (y[0, 10] + 1) % 96
    with torch.no_grad():
        a, b = model(x), model(y)
    assert torch.equal(a[:, :10], b[:, :10])
    assert not torch.allclose(a[:, 10:], b[:, 10:])


def test_gpt2_ties_lm_head_to_the_token_embedding_and_names_its_high_precision_module():
    model = small_gpt2()
    assert model.lm_head.weight is model.wte.weight
    names = dict(model.named_modules())
    for llm in (model, small_llama()):
        assert all(n in dict(llm.named_modules()) for n in llm.high_precision_modules)
    assert isinstance(names["lm_head"], torch.nn.Linear)


def test_bf16_autocast_loss_is_float32_and_close_to_fp32():
    model = small_llama()
    x = torch.randint(0, 96, (2, 16), generator=torch.Generator().manual_seed(3))
    ref = float(model(x, x).detach())
    with torch.autocast("cpu", dtype=torch.bfloat16):
        loss = model(x, x).detach()
    assert loss.dtype == torch.float32  # logits cast to fp32 before the cross-entropy
    # bf16 keeps 8 significant bits (unit roundoff 2^-8 ~ 0.4%): near-zero logits move the loss
    # by far less than 1% of ln V.
    assert float(loss) == pytest.approx(ref, rel=0.01)


def test_rope_rotates_pairs_without_changing_their_length():
    cos, sin = llama.rope_tables(head_dim=8, seq_len=5, theta=10000.0)
    x = torch.randn(1, 2, 5, 8, generator=torch.Generator().manual_seed(4))
    y = llama.apply_rope(x, cos, sin)
    pairs = lambda t: t.unflatten(-1, (-1, 2)).norm(dim=-1)  # noqa: E731
    assert torch.allclose(pairs(x), pairs(y), atol=1e-6)
    assert torch.allclose(y[:, :, 0], x[:, :, 0])  # position 0: angle 0, identity
    assert not torch.allclose(y[:, :, 1:], x[:, :, 1:])


def test_grouped_query_attention_shapes():
    model = small_llama(n_head=4, n_kv_head=1)
    assert model.layers[0].attention.wk.out_features == 32 // 4
    x = torch.randint(0, 96, (2, 16))
    assert model(x).shape == (2, 16, 96)


def test_llama3_8b_dims_are_selectable_without_allocating():
    with torch.device("meta"):
        model = llama.Llama(llama.config("llama3_8b", n_layer=1))
    attn, ffn = model.layers[0].attention, model.layers[0].feed_forward
    assert (attn.wq.out_features, attn.wk.out_features) == (4096, 1024)  # 32 heads, 8 KV heads of 128
    assert ffn.w1.out_features == 14336 and model.lm_head.out_features == 128256


@pytest.mark.parametrize("make, kw, message", [
    (gpt2.config, {"size": "tiny", "n_head": 3}, "not divisible by n_head"),
    (gpt2.config, {"size": "huge"}, "unknown size"),
    (gpt2.config, {"size": "tiny", "vocab": 0}, "vocab must be a positive integer"),
    (llama.config, {"size": "tiny", "n_kv_head": 3}, "not a multiple of n_kv_head"),
])
def test_bad_configurations_name_the_problem(make, kw, message):
    with pytest.raises(UserError, match=message):
        make(**kw)


def test_sequence_longer_than_seq_len_is_refused():
    with pytest.raises(ValueError, match="longer than seq_len"):
        small_gpt2()(torch.zeros(1, 17, dtype=torch.long))
