"""A model's dimensions and one training step's GEMMs on one GPU (suite/models/architecture.py,
suite/models/step_work.py): presets against published parameter counts, shapes under tensor and
expert parallel against hand-computed ones, config.json files read into the same presets, and the
GEMMs' FLOPs against the suite's own FLOP formula."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from dataclasses import replace

import pytest

from suite.core.errors import UserError
from suite.models import step_work as sw
from suite.models.architecture import PRESETS, Architecture, from_config, resolve
from suite.models.flops import training_flops_per_token
from suite.models.step import PASSES, Gemm, Parallel

# (preset, published total, published active, digits' unit, how the publisher wrote it). Meta rounds
# (70.55B is "70.6B"); Qwen and DeepSeek truncate (3.35B is "3.3B", 37.55B is "37B").
PUBLISHED = [
    ("gpt2", 124e6, None, 1e6, "round"),  # OpenAI's GPT-2 small, "124M"
    ("llama3-8b", 8.03e9, None, 0.01e9, "round"),  # Llama 3 model card: 8.03B
    ("llama3-70b", 70.6e9, None, 0.1e9, "round"),  # Llama 3 model card: 70.6B
    ("llama3-405b", 405.9e9, None, 0.1e9, "round"),  # Llama 3.1 model card: 405.9B
    ("llama4-scout", 109e9, 17e9, 1e9, "round"),  # Llama 4 model card: 17B active, 109B total
    ("deepseek-v3", 671e9, 37e9, 1e9, "truncate"),  # DeepSeek-V3 report: 671B total, 37B activated
    ("qwen3-30b-a3b", 30.5e9, 3.3e9, 0.1e9, "truncate"),  # Qwen3-30B-A3B card: 30.5B, 3.3B activated
]


def _written(count: int, unit: float, how: str) -> float:
    """A parameter count as its publisher writes it, to `unit`."""
    return (round(count / unit) if how == "round" else count // unit) * unit


@pytest.mark.parametrize("name, total, active, unit, how", PUBLISHED)
def test_presets_match_their_published_parameter_counts(name, total, active, unit, how):
    arch = PRESETS[name]
    assert _written(arch.total_params(), unit, how) == pytest.approx(total)
    assert _written(arch.active_params(), unit, how) == pytest.approx(active or total)


def test_exact_counts_of_the_checkpoints():
    # GPT-2's and Llama 3 8B's are transformers' num_parameters() of the checkpoints; Scout's is the
    # count its config implies, held here to the parameter (text decoder and vision encoder apart)
    assert PRESETS["gpt2"].total_params() == 124_439_808
    assert PRESETS["llama3-8b"].total_params() == 8_030_261_248
    assert PRESETS["llama4-scout"].total_params() == 108_641_793_536  # text 107.77B + vision 0.87B
    assert PRESETS["llama4-scout"].encoder_params == 871_932_416
    # Qwen3-30B-A3B's card: 29.9B without the embeddings (two untied tables of 151936 x 2048)
    qwen = PRESETS["qwen3-30b-a3b"]
    assert round((qwen.total_params() - 2 * 151936 * 2048) / 1e8) == 299


def _fprop(work, layer: str) -> Gemm:
    return next(g for g in work.gemms if g.layer == layer and g.pass_ == "fprop")


def test_llama3_8b_on_one_gpu():
    work = sw.step_work(PRESETS["llama3-8b"], Parallel(seq=8192, batch=1))
    shapes = {(g.layer, g.pass_): (g.m, g.k, g.n, g.count, g.groups) for g in work.gemms}
    T = 8192
    assert shapes[("layers.*.attention.wq", "fprop")] == (T, 4096, 4096, 32, 1)
    assert shapes[("layers.*.attention.wk", "fprop")] == (T, 4096, 1024, 32, 1)  # 8 kv heads x 128
    assert shapes[("layers.*.attention.wk", "dgrad")] == (T, 1024, 4096, 32, 1)
    assert shapes[("layers.*.attention.wk", "wgrad")] == (1024, T, 4096, 32, 1)
    assert shapes[("layers.*.feed_forward.w1", "fprop")] == (T, 4096, 14336, 32, 1)
    assert shapes[("layers.*.feed_forward.w2", "fprop")] == (T, 14336, 4096, 32, 1)
    assert shapes[("layers.*.feed_forward.w2", "wgrad")] == (4096, T, 14336, 32, 1)
    assert shapes[("output", "fprop")] == (T, 4096, 128256, 1, 1)
    assert len(work.gemms) == 3 * 8  # wq wk wv wo w1 w3 w2 output, three passes each
    assert work.tp_bytes == work.ep_bytes == 0
    assert work.params_local == work.params_total == PRESETS["llama3-8b"].total_params()


def test_llama3_8b_under_tensor_parallel_8():
    work = sw.step_work(PRESETS["llama3-8b"], Parallel(gpus=8, tp=8, seq=8192))
    T = 8192
    assert (_fprop(work, "layers.*.attention.wq").k, _fprop(work, "layers.*.attention.wq").n) == (4096, 512)
    assert _fprop(work, "layers.*.attention.wv").n == 128  # one kv head per GPU
    wo = _fprop(work, "layers.*.attention.wo")
    assert (wo.m, wo.k, wo.n) == (T, 512, 4096)  # row-parallel: inputs cut
    assert _fprop(work, "layers.*.feed_forward.w3").n == 14336 // 8
    assert _fprop(work, "layers.*.feed_forward.w2").k == 14336 // 8
    assert _fprop(work, "output").n == 128256 // 8  # vocab-parallel
    arch = PRESETS["llama3-8b"]
    norms = arch.norm_params()
    assert work.params_local == (arch.total_params() - norms) // 8 + norms  # everything cut but the norms
    assert work.tp_bytes == (8 * 32 + 4) * T * 4096 * 2 * 7 / 8


def test_qwen3_30b_a3b_under_expert_parallel_8():
    arch = PRESETS["qwen3-30b-a3b"]
    work = sw.step_work(arch, Parallel(gpus=8, ep=8, seq=2048, batch=1))
    w1 = _fprop(work, "layers.*.moe.experts.w1")
    # 128 experts / 8 = 16 local; 8 GPUs x 2048 tokens x top 8 over 128 experts = 1024 tokens each
    assert (w1.m, w1.k, w1.n, w1.count, w1.groups) == (1024, 2048, 768, 48, 16)
    w2 = [g for g in work.gemms if g.layer == "layers.*.moe.experts.w2"]
    assert [(g.pass_, g.m, g.k, g.n) for g in w2] == [("fprop", 1024, 768, 2048), ("dgrad", 1024, 2048, 768),
                                                      ("wgrad", 2048, 1024, 768)]
    router = _fprop(work, "layers.*.moe.router.gate")
    assert (router.m, router.k, router.n, router.module) == (2048, 2048, 128, "router")
    assert _fprop(work, "layers.*.attention.wq").n == 32 * 128  # attention is not cut by EP
    assert not [g for g in work.gemms if "feed_forward" in g.layer or "shared" in g.layer]
    assert work.ep_bytes == 48 * 4 * 2048 * 8 * 2048 * 2 * 7 / 8
    experts = 48 * 128 * 3 * 2048 * 768
    assert work.params_local == arch.total_params() - experts + experts // 8


def test_experts_without_expert_parallel_are_tensor_parallel_and_skew_only_moves_ep_ranks():
    arch = PRESETS["qwen3-30b-a3b"]
    alone = _fprop(sw.step_work(arch, Parallel(seq=2048)), "layers.*.moe.experts.w1")
    assert (alone.m, alone.n, alone.groups) == (2048 * 8 // 128, 768, 128)
    cut = _fprop(sw.step_work(arch, Parallel(gpus=4, tp=4, seq=2048)), "layers.*.moe.experts.w1")
    assert (cut.m, cut.n, cut.groups) == (128, 768 // 4, 128)
    assert sw.tokens_per_expert(arch, Parallel(seq=2048), skew=2.0) == 128  # no EP: total rows are fixed
    assert sw.tokens_per_expert(arch, Parallel(gpus=8, ep=8, seq=2048), skew=1.5) == 1536
    assert sw.tokens_per_expert(arch, Parallel(gpus=8, ep=8, seq=2048), skew=1000.0) == 8 * 2048  # all it can get
    # EP with TP: the TP ranks split the tokens before the all-to-all (torchtitan), experts whole
    both = _fprop(sw.step_work(arch, Parallel(gpus=8, tp=4, ep=8, seq=2048)), "layers.*.moe.experts.w1")
    assert (both.m, both.n, both.groups) == (512 * 8 * 8 // 128, 768, 16)


def test_deepseek_v3_latent_attention_and_dense_layers():
    work = sw.step_work(PRESETS["deepseek-v3"], Parallel(gpus=8, tp=8, seq=4096))
    shape = {g.layer: (g.k, g.n, g.count) for g in work.gemms if g.pass_ == "fprop"}
    assert shape["layers.*.attention.wq_a"] == (7168, 1536, 61)  # replicated
    assert shape["layers.*.attention.wq_b"] == (1536, 128 * 192 // 8, 61)
    assert shape["layers.*.attention.wkv_a"] == (7168, 512 + 64, 61)
    assert shape["layers.*.attention.wkv_b"] == (512, 128 * 256 // 8, 61)
    assert shape["layers.*.attention.wo"] == (128 * 128 // 8, 7168, 61)
    assert shape["layers.*.feed_forward.w1"] == (7168, 18432 // 8, 3)  # first 3 layers dense
    assert shape["layers.*.moe.shared_experts.w1"] == (7168, 2048 // 8, 58)
    assert shape["layers.*.moe.experts.w1"] == (7168, 2048 // 8, 58)  # no EP: experts cut by TP


def test_counts_per_step():
    for name, arch in PRESETS.items():
        work = sw.step_work(arch, Parallel(seq=512))
        for linear in arch.linears():
            gemms = [g for g in work.gemms if g.layer == linear.fqn]
            assert [g.pass_ for g in gemms] == list(PASSES), name
            assert {g.count for g in gemms} == {linear.count}
        per_layer = [g for g in work.gemms if g.module == "attention"]
        assert {g.count for g in per_layer} == {arch.layers}, name
        assert [g.count for g in work.gemms if g.module == "output"] == [1, 1, 1]
        assert {g.count for g in work.gemms if g.module in ("experts", "router")} <= {arch.moe_layers}


@pytest.mark.parametrize("name", ["llama3-8b", "llama3-70b", "gpt2"])
def test_gemm_flops_are_the_palm_formula(name):
    """Sum over the GEMMs of 2 m k n per token = 6 N (fprop alone: 2 N), N the parameters that
    multiply (suite/models/flops.py: lookup-only embeddings out, biases and norms in: a rounding
    error); attention at PaLM's 3x forward, full rather than causal, is its 12 L H Q T."""
    arch = PRESETS[name]
    seq = 1024
    work = sw.step_work(arch, Parallel(seq=seq, batch=2))
    tokens = 2 * seq
    flops = {p: sum(2 * g.m * g.k * g.n * g.count * g.groups for g in work.gemms if g.pass_ == p) / tokens
             for p in PASSES}
    lookup = (0 if arch.tied_embedding else arch.vocab * arch.hidden) + arch.positions * arch.hidden
    n = arch.total_params() - lookup
    assert flops["fprop"] == pytest.approx(2 * n, rel=1e-3)  # GPT-2: biases and LayerNorms are 0.1%
    assert flops["fprop"] == flops["dgrad"] == flops["wgrad"]
    palm = training_flops_per_token(n, arch.layers, arch.heads, arch.head_dim, seq)
    attention = work.attention_flops / tokens * 3 / (1 + sw.ATTENTION_BACKWARD) * 2  # PaLM's backward, not causal
    assert sum(flops.values()) + attention == pytest.approx(palm, rel=1e-3)


@pytest.mark.parametrize("name", ["qwen3-30b-a3b", "deepseek-v3", "llama4-scout"])
def test_moe_fprop_flops_are_twice_the_active_parameters(name):
    arch = PRESETS[name]  # 4096 tokens x top-k spread evenly over the experts: a whole number each
    work = sw.step_work(arch, Parallel(seq=4096))
    fprop = sum(2 * g.m * g.k * g.n * g.count * g.groups for g in work.gemms if g.pass_ == "fprop") / 4096
    active_linears = arch.active_params() - arch.vocab * arch.hidden - arch.norm_params() - arch.router_bias_params
    assert fprop == pytest.approx(2 * active_linears)


def test_attention_and_elementwise_work_by_hand():
    arch = PRESETS["llama3-8b"]
    work = sw.step_work(arch, Parallel(seq=8192))
    assert work.attention_flops == 32 * 8192 ** 2 * 32 * (128 + 128) * 3.5  # causal pairs S^2/2, 2 FLOPs each
    assert sw.step_work(arch, Parallel(gpus=8, tp=8, seq=8192)).attention_flops == work.attention_flops / 8
    tiny = Architecture("llama", layers=2, hidden=8, heads=2, kv_heads=1, head_dim=4, intermediate=16, vocab=32)
    # per layer: norms and adds 4 x 10 x 8 = 320, rotary 4 x 2 x 3 x 4 = 96; SwiGLU 4 x 3 x 16 = 192;
    # embedding and final norm 4 x 4 x 8 = 128; forward 2 x 416 + 2 x 192 + 128 = 1344, backward
    # twice that; loss 3 x 4 x 32 = 384; bf16
    assert sw.elementwise_bytes(tiny, Parallel(seq=4)) == 2 * (1344 * 3 + 384)


def test_full_activation_checkpointing_counts_by_hand():
    arch = PRESETS["llama3-8b"]
    none, full = (sw.step_work(arch, Parallel(gpus=8, tp=8, seq=8192, batch=2, ac=ac)) for ac in ("none", "full"))
    counts = {(g.layer, g.pass_): g.count for g in full.gemms}
    assert counts[("layers.*.attention.wq", "fprop")] == 64  # 32 layers, forward and its recomputation
    assert counts[("layers.*.feed_forward.w2", "fprop")] == 64
    assert counts[("layers.*.feed_forward.w2", "dgrad")] == counts[("layers.*.feed_forward.w2", "wgrad")] == 32
    assert counts[("output", "fprop")] == 1  # outside the checkpointed blocks
    assert [(g.m, g.k, g.n, g.groups) for g in full.gemms] == [(g.m, g.k, g.n, g.groups) for g in none.gemms]
    forward = 32 * 2 * 8192 ** 2 * 4 * (128 + 128)  # layers x batch x S^2 x heads/tp x (qk + v)
    assert none.attention_flops == forward * 3.5 and full.attention_flops == forward * 4.5
    T, h = 2 * 8192, 4096
    assert full.tp_bytes == (12 * 32 + 4) * T * h * 2 * 7 / 8  # the forward's 4 collectives again per layer
    assert full.params_local == none.params_local
    tiny = Architecture("llama", layers=2, hidden=8, heads=2, kv_heads=1, head_dim=4, intermediate=16, vocab=32)
    # test_attention_and_elementwise_work_by_hand's: the blocks' forward 2 x 416 + 2 x 192 = 1216 once more
    assert sw.elementwise_bytes(tiny, Parallel(seq=4, ac="full")) == 2 * (1344 * 3 + 1216 + 384)


def test_full_activation_checkpointing_reruns_the_forward_all_to_alls():
    arch = PRESETS["qwen3-30b-a3b"]
    none, full = (sw.step_work(arch, Parallel(gpus=8, ep=8, seq=2048, ac=ac)) for ac in ("none", "full"))
    assert full.ep_bytes == none.ep_bytes * 6 / 4  # dispatch and combine forward twice, backward once
    experts = {(g.layer, g.pass_): (g.count, g.groups) for g in full.gemms}
    assert experts[("layers.*.moe.experts.w1", "fprop")] == (96, 16)
    assert experts[("layers.*.moe.router.gate", "fprop")] == (96, 1)


@pytest.mark.parametrize("parallel, message", [
    (Parallel(ac="selective"), "ac must be one of none, full, got 'selective'"),
    (Parallel(tp=0), "tp must be a positive integer, got 0"),
    (Parallel(gpus=12, tp=8), "gpus 12 is not a multiple of tp 8"),
    (Parallel(gpus=16, tp=16), "tp 16 does not divide llama3-8b's 8 key-value heads"),
    (Parallel(gpus=8, ep=8), "ep 8 needs a mixture of experts; llama3-8b is dense"),
    (Parallel(seq=1.5), "seq must be a positive integer"),
])
def test_layouts_the_model_cannot_take_are_one_line_errors(parallel, message):
    with pytest.raises(UserError, match=message):
        sw.step_work(PRESETS["llama3-8b"], parallel)


def test_expert_parallel_errors():
    with pytest.raises(UserError, match="ep 3 does not divide qwen3-30b-a3b's 128 experts"):
        sw.step_work(PRESETS["qwen3-30b-a3b"], Parallel(gpus=3, ep=3))
    with pytest.raises(UserError, match="gpus 4 is not a multiple of ep 8"):
        sw.step_work(PRESETS["qwen3-30b-a3b"], Parallel(gpus=4, ep=8))
    with pytest.raises(UserError, match="skew must be a number of at least 1"):
        sw.step_work(PRESETS["qwen3-30b-a3b"], Parallel(gpus=8, ep=8), skew=0.5)


# config.json files as Hugging Face publishes them (the fields that matter, and a few that do not)
CONFIGS = {
    "llama3-8b": {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 4096,
                  "intermediate_size": 14336, "num_attention_heads": 32, "num_hidden_layers": 32,
                  "num_key_value_heads": 8, "vocab_size": 128256, "rope_theta": 500000.0, "attention_bias": False,
                  "tie_word_embeddings": False, "torch_dtype": "bfloat16"},
    "gpt2": {"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2", "n_embd": 768, "n_head": 12,
             "n_layer": 12, "n_positions": 1024, "n_inner": None, "vocab_size": 50257, "n_ctx": 1024},
    "qwen3-30b-a3b": {"model_type": "qwen3_moe", "hidden_size": 2048, "intermediate_size": 6144,
                      "moe_intermediate_size": 768, "num_hidden_layers": 48, "num_attention_heads": 32,
                      "num_key_value_heads": 4, "head_dim": 128, "num_experts": 128, "num_experts_per_tok": 8,
                      "decoder_sparse_step": 1, "mlp_only_layers": [], "norm_topk_prob": True,
                      "vocab_size": 151936, "tie_word_embeddings": False, "attention_bias": False},
    "deepseek-v3": {"model_type": "deepseek_v3", "hidden_size": 7168, "intermediate_size": 18432,
                    "moe_intermediate_size": 2048, "num_hidden_layers": 61, "num_attention_heads": 128,
                    "num_key_value_heads": 128, "n_shared_experts": 1, "n_routed_experts": 256,
                    "num_experts_per_tok": 8, "first_k_dense_replace": 3, "moe_layer_freq": 1,
                    "q_lora_rank": 1536, "kv_lora_rank": 512, "qk_nope_head_dim": 128, "qk_rope_head_dim": 64,
                    "v_head_dim": 128, "vocab_size": 129280, "scoring_func": "sigmoid", "topk_method": "noaux_tc",
                    "num_nextn_predict_layers": 1, "tie_word_embeddings": False},
    "llama4-scout": {"model_type": "llama4", "tie_word_embeddings": False,
                     "text_config": {"model_type": "llama4_text", "hidden_size": 5120, "intermediate_size": 8192,
                                     "intermediate_size_mlp": 16384, "num_hidden_layers": 48,
                                     "num_attention_heads": 40, "num_key_value_heads": 8, "head_dim": 128,
                                     "num_local_experts": 16, "num_experts_per_tok": 1,
                                     "interleave_moe_layer_step": 1, "vocab_size": 202048, "use_qk_norm": True},
                     "vision_config": {"model_type": "llama4_vision_model", "hidden_size": 1408,
                                       "intermediate_size": 5632, "num_hidden_layers": 34, "num_attention_heads": 16,
                                       "image_size": 336, "patch_size": 14, "num_channels": 3,
                                       "projector_input_dim": 4096, "projector_output_dim": 4096,
                                       "vision_output_dim": 4096, "pixel_shuffle_ratio": 0.5}},
}


def _write(tmp_path, name: str, config: dict):
    folder = tmp_path / name
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(config))
    return folder / "config.json"


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_a_config_json_reads_into_its_preset(tmp_path, name):
    path = _write(tmp_path, name, CONFIGS[name])
    arch = from_config(path)
    assert arch == PRESETS[name]
    assert arch.name == name  # the folder's name
    assert resolve(str(path.parent)) == resolve(str(path)) == PRESETS[name]


def test_other_families_and_interleaved_layers(tmp_path):
    qwen2 = dict(CONFIGS["llama3-8b"], model_type="qwen2")
    arch = from_config(_write(tmp_path, "qwen2", qwen2))
    assert (arch.qkv_bias, arch.out_bias) == (True, False)
    assert arch.total_params() == PRESETS["llama3-8b"].total_params() + 32 * (4096 + 2 * 1024)
    mistral = from_config(_write(tmp_path, "mistral", dict(CONFIGS["llama3-8b"], model_type="mistral")))
    assert mistral == replace(PRESETS["llama3-8b"], family="mistral")
    qwen3 = from_config(_write(tmp_path, "qwen3", dict(CONFIGS["llama3-8b"], model_type="qwen3", head_dim=128)))
    assert qwen3.qk_norm and qwen3.total_params() == PRESETS["llama3-8b"].total_params() + 32 * 2 * 128
    maverick = json.loads(json.dumps(CONFIGS["llama4-scout"]))
    maverick["text_config"].update(num_local_experts=128, interleave_moe_layer_step=2)
    arch = from_config(_write(tmp_path, "maverick", maverick))
    assert arch.dense_layers == tuple(range(0, 48, 2)) and arch.moe_layers == 24
    assert round(arch.total_params() / 1e9) == 402  # Llama 4 Maverick: 17B active, 400B total (402B with vision)
    assert round(arch.active_params() / 1e9) == 17
    sparse = dict(CONFIGS["qwen3-30b-a3b"], decoder_sparse_step=2, mlp_only_layers=[1])
    assert from_config(_write(tmp_path, "sparse", sparse)).dense_layers == tuple([0, 1] + list(range(2, 48, 2)))


def test_config_errors_name_the_field_and_the_file(tmp_path):
    unknown = _write(tmp_path, "bert", {"model_type": "bert"})
    with pytest.raises(UserError, match=r"model_type 'bert' is not supported; supported: llama, mistral") as e:
        from_config(unknown)
    assert "\n" not in str(e.value) and str(unknown) in str(e.value)
    missing = _write(tmp_path, "missing", {k: v for k, v in CONFIGS["llama3-8b"].items() if k != "vocab_size"})
    with pytest.raises(UserError, match=r"missing/config.json: vocab_size is missing"):
        from_config(missing)
    bad = _write(tmp_path, "bad", dict(CONFIGS["llama3-8b"], num_key_value_heads="8"))
    with pytest.raises(UserError, match=r"num_key_value_heads must be a positive integer, got '8'"):
        from_config(bad)
    nested = json.loads(json.dumps(CONFIGS["llama4-scout"]))
    del nested["vision_config"]["patch_size"]
    with pytest.raises(UserError, match=r"vision_config.patch_size is missing"):
        from_config(_write(tmp_path, "nested", nested))
    broken = tmp_path / "broken.json"
    broken.write_text("{")
    with pytest.raises(UserError, match="cannot read config.json"):
        from_config(broken)
    with pytest.raises(UserError, match="'.*absent': no such file"):
        resolve(str(tmp_path / "absent"))
    with pytest.raises(UserError, match="'gpt5': neither a preset nor a config.json file"):
        resolve("gpt5")


def test_an_inconsistent_architecture_is_a_one_line_error():
    with pytest.raises(UserError, match="top_k"):
        replace(PRESETS["qwen3-30b-a3b"], top_k=0)
    with pytest.raises(UserError, match="32 heads are not a multiple of 5 key-value heads"):
        replace(PRESETS["llama3-8b"], kv_heads=5)


def test_the_modules_are_torch_free():
    code = ("import sys; import suite.models.architecture, suite.models.step_work; "
            "print('torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


@pytest.mark.parametrize("model", ["llama", "gpt2"])
def test_the_suites_own_models_hold_the_linears_and_parameters_their_architecture_counts(model):
    """The suite's torch Llama and GPT-2 (tiny sizes) against the architecture of the same dims: every
    nn.Linear by name pattern, shape and bias, and the unique parameter count."""
    from torch import nn

    from suite.models import gpt2, llama
    from suite.models.flops import unique_parameters

    if model == "llama":
        cfg = llama.config("tiny")
        module = llama.Llama(cfg)
        arch = Architecture("llama", layers=cfg.n_layer, hidden=cfg.d_model, heads=cfg.n_head, kv_heads=cfg.n_kv_head,
                            head_dim=cfg.head_dim, intermediate=cfg.ffn_hidden, vocab=cfg.vocab)
        rename = {"lm_head": "output"}  # the suite's Llama names torchtitan's `output` lm_head
    else:
        cfg = gpt2.config("tiny")
        module = gpt2.GPT2(cfg)
        arch = replace(PRESETS["gpt2"], layers=cfg.n_layer, hidden=cfg.d_model, heads=cfg.n_head, kv_heads=cfg.n_head,
                       head_dim=cfg.head_dim, intermediate=4 * cfg.d_model, vocab=cfg.vocab, positions=cfg.seq_len)
        rename = {}  # nanoGPT's names without its `transformer.` prefix
    held = {}
    for name, linear in module.named_modules():
        if isinstance(linear, nn.Linear):
            pattern = rename.get(name, re.sub(r"\.\d+\.", ".*.", name))
            held[pattern] = (linear.in_features, linear.out_features, linear.bias is not None)
    expected = {linear.fqn.removeprefix("transformer."): (linear.fan_in, linear.fan_out, linear.bias)
                for linear in arch.linears()}
    assert held == expected
    assert unique_parameters(module) == arch.total_params()
