"""A decoder's dimensions, torch-free: what its GEMMs and its parameter count need (`Architecture`),
the linears it holds (`Linear`, as many layers hold each), named presets (`PRESETS`) and Hugging Face
`config.json` files read into one (`from_config`; `resolve` takes either).

Layer names are fully qualified name patterns, as a `module_filter_fn` or torchtitan's `filter_fqns`
matches them. The convention is torchtitan's for every family but GPT-2 (torchtitan's llama3, qwen3,
llama4 and deepseek_v3 models): `tok_embeddings`, `layers.*.attention.wq|wk|wv|wo` (DeepSeek's
multi-head latent attention: `wq_a`, `wq_b` or `wq`, `wkv_a`, `wkv_b`, `wo`), a dense MLP
`layers.*.feed_forward.w1|w3|w2` (gate, up, down), a mixture of experts `layers.*.moe.router.gate`,
`layers.*.moe.experts.w1|w3|w2` (one grouped GEMM each) and `layers.*.moe.shared_experts.w1|w3|w2`,
and `output`. GPT-2 has no torchtitan model: its names are nanoGPT's and Hugging Face's
(`transformer.h.*.attn.c_attn|c_proj`, `transformer.h.*.mlp.c_fc|c_proj`, `lm_head`).

Parameter counts are exact counts of the checkpoint's tensors (weights, biases, norms, embeddings;
DeepSeek-V3's multi-token-prediction layer left out, as its published 671B leaves it): `total_params`
all of them, `active_params` what one text token runs through (the top-k routed
experts of a mixture rather than all of them, both embedding tables, no vision encoder).
"""

from __future__ import annotations

from dataclasses import MISSING, dataclass, field, fields
from pathlib import Path

from suite.core import files, jsontext
from suite.core.errors import UserError

# An architecture's family: the config.json model_type it reads as (llama4_text as llama4). "gpt2"
# takes nanoGPT's layer names, the others torchtitan's.
FAMILIES = ("llama", "mistral", "qwen2", "qwen3", "qwen3_moe", "deepseek_v3", "llama4", "gpt2")
NORMS = ("rms", "layer")  # RMSNorm (a weight) or LayerNorm (a weight and a bias)
ROUTERS = ("softmax", "sigmoid")  # how a mixture scores its experts (Qwen3's softmax; DeepSeek-V3's, Llama 4's sigmoid)
SPLITS = ("column", "row", "none")  # how tensor parallel cuts a linear: its outputs, its inputs, or not at all
MODULES = ("attention", "mlp", "experts", "shared_experts", "router", "output")
MAX_CONFIG_BYTES = 4 * 2**20  # a config.json is a few KB; one with a tokenizer pasted in stays far below


@dataclass(frozen=True)
class Linear:
    """One linear of a model, as every layer that has it holds it: (tokens x fan_in) @ (fan_in x
    fan_out). `experts` > 1: a bank of that many experts, one weight each, run as one grouped GEMM."""

    fqn: str
    module: str  # one of MODULES
    fan_in: int
    fan_out: int
    count: int  # layers that hold it (1 for the output projection)
    split: str  # one of SPLITS: column-parallel cuts fan_out by tp, row-parallel fan_in
    bias: bool = False
    experts: int = 1
    tied: bool = False  # its weight is the token embedding's (GPT-2's lm_head): counted there

    @property
    def params(self) -> int:
        """Parameters of every layer's copy, all experts included (0 for a tied weight)."""
        if self.tied:
            return 0
        return self.count * self.experts * (self.fan_in * self.fan_out + (self.fan_out if self.bias else 0))


@dataclass(frozen=True)
class Architecture:
    """What a decoder's GEMMs and parameter count need. `family` is the Hugging Face `model_type` it
    was read as (it picks the layer-name convention: GPT-2's, or torchtitan's); `name` is only a
    label (equality ignores it, so a preset equals the same model read from its config.json)."""

    family: str
    layers: int
    hidden: int
    heads: int
    kv_heads: int
    head_dim: int  # latent attention: v_head_dim (its q/k widths are qk_nope_head_dim + qk_rope_head_dim)
    intermediate: int  # the dense MLP's width (dense layers of a mixture too)
    vocab: int
    gated: bool = True  # SwiGLU (gate, up, down) or a two-layer GELU MLP (GPT-2)
    tied_embedding: bool = False
    qkv_bias: bool = False
    out_bias: bool = False  # the attention output projection's bias
    mlp_bias: bool = False
    norm: str = "rms"  # one of NORMS
    qk_norm: bool = False  # Qwen3's RMSNorm over each head's queries and keys
    positions: int = 0  # rows of a learned position embedding (GPT-2's n_positions); 0: rotary
    experts: int = 0  # routed experts of a mixture-of-experts layer; 0: a dense model
    top_k: int = 0
    expert_intermediate: int = 0
    shared_experts: int = 0  # experts every token runs through, each expert_intermediate wide
    dense_layers: tuple[int, ...] = ()  # with experts: the layers (0-based) whose MLP is dense
    router: str = "softmax"  # one of ROUTERS
    router_bias: bool = False  # DeepSeek-V3's per-expert score correction bias
    q_lora_rank: int = 0  # multi-head latent attention (DeepSeek): 0 projects queries directly
    kv_lora_rank: int = 0  # > 0: multi-head latent attention
    qk_nope_head_dim: int = 0
    qk_rope_head_dim: int = 0
    v_head_dim: int = 0
    encoder_params: int = 0  # a vision encoder's and projector's (Llama 4): in the total, no GEMM of a text step
    name: str = field(default="", compare=False)

    def __post_init__(self):
        label = self.name or self.family
        for spec in fields(self):  # the dimensions without a default are positive, the others may be 0
            if spec.type == "int":
                _positive(label, spec.name, getattr(self, spec.name), zero=spec.default is not MISSING)
        if self.heads % self.kv_heads:
            raise UserError(f"{label}: {self.heads} heads are not a multiple of {self.kv_heads} key-value heads")
        for key, valid in (("family", FAMILIES), ("norm", NORMS), ("router", ROUTERS)):
            if getattr(self, key) not in valid:
                raise UserError(f"{label}: {key} must be one of {', '.join(valid)}, got {getattr(self, key)!r}")
        if self.experts and not (0 < self.top_k <= self.experts and self.expert_intermediate):
            raise UserError(f"{label}: a mixture of {self.experts} experts needs 0 < top_k <= {self.experts} and an "
                            f"expert_intermediate, got top_k {self.top_k}, "
                            f"expert_intermediate {self.expert_intermediate}")
        layers = list(self.dense_layers)
        if any(not 0 <= i < self.layers for i in layers) or layers != sorted(set(layers)):
            raise UserError(f"{label}: dense_layers must be distinct layer indices in 0..{self.layers - 1}, in order")
        if self.kv_lora_rank and not (self.qk_nope_head_dim and self.qk_rope_head_dim and self.v_head_dim):
            raise UserError(f"{label}: latent attention (kv_lora_rank {self.kv_lora_rank}) needs qk_nope_head_dim, "
                            "qk_rope_head_dim and v_head_dim")

    @property
    def latent_attention(self) -> bool:
        return self.kv_lora_rank > 0

    @property
    def moe_layers(self) -> int:
        """Layers whose MLP is a mixture of experts."""
        return self.layers - len(self.dense_layers) if self.experts else 0

    @property
    def qk_head_dim(self) -> int:
        """Width of one head's queries and keys (latent attention: its no-rotary and rotary parts)."""
        return self.qk_nope_head_dim + self.qk_rope_head_dim if self.latent_attention else self.head_dim

    @property
    def v_dim(self) -> int:
        """Width of one head's values."""
        return self.v_head_dim if self.latent_attention else self.head_dim

    def linears(self) -> tuple[Linear, ...]:
        """Every linear of the decoder, in the order a layer runs them, the output projection last."""
        if self.family == "gpt2":
            return _gpt2_linears(self)
        attention = _latent_attention(self) if self.latent_attention else _attention(self)
        dense = self.layers - self.moe_layers
        mlp = _mlp(self, "layers.*.feed_forward", "mlp", self.intermediate, dense) if dense else ()
        moe = _moe(self) if self.experts else ()
        output = Linear("output", "output", self.hidden, self.vocab, 1, "column", tied=self.tied_embedding)
        return attention + mlp + moe + (output,)

    def total_params(self) -> int:
        """Every parameter of the checkpoint: linears, embeddings, norms, router biases, an encoder."""
        return sum(linear.params for linear in self.linears()) + self._other_params()

    def active_params(self) -> int:
        """Parameters one text token runs through: top_k of the routed experts (Meta's and Qwen's
        convention: embeddings counted, no vision encoder)."""
        routed = sum(linear.params for linear in self.linears() if linear.module == "experts")
        return self.total_params() - self.encoder_params - routed + routed * self.top_k // max(self.experts, 1)

    def norm_params(self) -> int:
        """The norms' weights (and LayerNorm's biases) of the whole model."""
        width = 2 if self.norm == "layer" else 1
        per_layer = 2 * self.hidden * width + (2 * self.head_dim if self.qk_norm else 0)
        if self.latent_attention:
            per_layer += self.q_lora_rank + self.kv_lora_rank
        return self.layers * per_layer + self.hidden * width

    @property
    def router_bias_params(self) -> int:
        return self.moe_layers * self.experts if self.router_bias else 0

    def _other_params(self) -> int:
        embeddings = (self.vocab + self.positions) * self.hidden
        return embeddings + self.norm_params() + self.router_bias_params + self.encoder_params


def _positive(label: str, key: str, value, zero: bool = False) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < (0 if zero else 1):
        kind = "a non-negative" if zero else "a positive"
        raise UserError(f"{label}: {key} must be {kind} integer, got {value!r}")


def _mlp(arch: Architecture, prefix: str, module: str, width: int, count: int) -> tuple[Linear, ...]:
    """A SwiGLU MLP, `width` wide: w1 (gate) and w3 (up) column-parallel, w2 (down) row-parallel;
    a dense MLP that is not gated has no w3. Experts are always gated."""
    experts = arch.experts if module == "experts" else 1
    bias = arch.mlp_bias and module == "mlp"
    up = Linear(f"{prefix}.w3", module, arch.hidden, width, count, "column", bias, experts)
    return (Linear(f"{prefix}.w1", module, arch.hidden, width, count, "column", bias, experts),
            *((up,) if arch.gated or module != "mlp" else ()),
            Linear(f"{prefix}.w2", module, width, arch.hidden, count, "row", bias, experts))


def _attention(arch: Architecture) -> tuple[Linear, ...]:
    q, kv, n = arch.heads * arch.head_dim, arch.kv_heads * arch.head_dim, arch.layers
    return (Linear("layers.*.attention.wq", "attention", arch.hidden, q, n, "column", arch.qkv_bias),
            Linear("layers.*.attention.wk", "attention", arch.hidden, kv, n, "column", arch.qkv_bias),
            Linear("layers.*.attention.wv", "attention", arch.hidden, kv, n, "column", arch.qkv_bias),
            Linear("layers.*.attention.wo", "attention", q, arch.hidden, n, "row", arch.out_bias))


def _latent_attention(arch: Architecture) -> tuple[Linear, ...]:
    """DeepSeek's multi-head latent attention, as torchtitan's deepseek_v3 shards it: the down
    projections (wq_a, wkv_a) replicated, the up projections column-parallel, wo row-parallel."""
    n, heads = arch.layers, arch.heads
    if arch.q_lora_rank:
        query = (Linear("layers.*.attention.wq_a", "attention", arch.hidden, arch.q_lora_rank, n, "none"),
                 Linear("layers.*.attention.wq_b", "attention", arch.q_lora_rank, heads * arch.qk_head_dim, n,
                        "column"))
    else:
        query = (Linear("layers.*.attention.wq", "attention", arch.hidden, heads * arch.qk_head_dim, n, "column"),)
    kv_down, kv_up = arch.kv_lora_rank + arch.qk_rope_head_dim, heads * (arch.qk_nope_head_dim + arch.v_head_dim)
    return query + (
        Linear("layers.*.attention.wkv_a", "attention", arch.hidden, kv_down, n, "none"),
        Linear("layers.*.attention.wkv_b", "attention", arch.kv_lora_rank, kv_up, n, "column"),
        Linear("layers.*.attention.wo", "attention", heads * arch.v_head_dim, arch.hidden, n, "row"))


def _moe(arch: Architecture) -> tuple[Linear, ...]:
    """Router (replicated), routed experts (grouped), shared experts (a SwiGLU MLP every token runs)."""
    n = arch.moe_layers
    router = (Linear("layers.*.moe.router.gate", "router", arch.hidden, arch.experts, n, "none"),)
    routed = _mlp(arch, "layers.*.moe.experts", "experts", arch.expert_intermediate, n)
    shared = arch.shared_experts * arch.expert_intermediate
    return router + routed + (_mlp(arch, "layers.*.moe.shared_experts", "shared_experts", shared, n) if shared else ())


def _gpt2_linears(arch: Architecture) -> tuple[Linear, ...]:
    """GPT-2: fused q/k/v (c_attn), output projection, a GELU MLP four times as wide, tied lm_head."""
    h, n, width = arch.hidden, arch.layers, arch.intermediate
    return (Linear("transformer.h.*.attn.c_attn", "attention", h, 3 * h, n, "column", arch.qkv_bias),
            Linear("transformer.h.*.attn.c_proj", "attention", h, h, n, "row", arch.out_bias),
            Linear("transformer.h.*.mlp.c_fc", "mlp", h, width, n, "column", arch.mlp_bias),
            Linear("transformer.h.*.mlp.c_proj", "mlp", width, h, n, "row", arch.mlp_bias),
            Linear("lm_head", "output", h, arch.vocab, 1, "column", tied=arch.tied_embedding))


def llama4_vision_params(vision: dict, text_hidden: int) -> int:
    """Parameters of Llama 4's vision encoder, pixel-shuffle adapter and projector to the text width,
    from a config.json's `vision_config` (Hugging Face's Llama4VisionModel and
    Llama4MultiModalProjector): patch embedding (no bias), class and position embeddings, two
    LayerNorms, each layer's q/k/v/o and GELU MLP with biases and two LayerNorms, the adapter's two
    bias-free linears."""
    h, width, layers = vision["hidden_size"], vision["intermediate_size"], vision["num_hidden_layers"]
    patch, channels, image = vision["patch_size"], vision.get("num_channels", 3), vision["image_size"]
    embedding = channels * patch * patch * h + h + ((image // patch) ** 2 + 1) * h + 4 * h
    layer = 4 * (h * h + h) + (h * width + width) + (width * h + h) + 4 * h
    adapter = width * vision["projector_input_dim"] + vision["projector_output_dim"] ** 2
    return embedding + layers * layer + adapter + vision["vision_output_dim"] * text_hidden


# Llama 4 Scout's vision_config (meta-llama/Llama-4-Scout-17B-16E, config.json).
SCOUT_VISION = {"hidden_size": 1408, "intermediate_size": 5632, "num_hidden_layers": 34, "patch_size": 14,
                "num_channels": 3, "image_size": 336, "projector_input_dim": 4096, "projector_output_dim": 4096,
                "vision_output_dim": 4096}

# Each preset is its model's Hugging Face config.json (the repository named beside it); the test
# `test_presets_match_their_published_parameter_counts` holds each to its published count.
PRESETS: dict[str, Architecture] = {
    # openai-community/gpt2: n_layer 12, n_head 12, n_embd 768, n_inner null (4 x 768),
    # n_positions 1024, vocab_size 50257, lm_head tied to wte; Conv1D layers with biases, LayerNorm.
    "gpt2": Architecture("gpt2", layers=12, hidden=768, heads=12, kv_heads=12, head_dim=64, intermediate=3072,
                         vocab=50257, gated=False, tied_embedding=True, qkv_bias=True, out_bias=True,
                         mlp_bias=True, norm="layer", positions=1024, name="gpt2"),
    # meta-llama/Meta-Llama-3-8B: hidden_size 4096, intermediate_size 14336, 32 layers, 32 heads,
    # 8 key-value heads, vocab_size 128256, untied.
    "llama3-8b": Architecture("llama", layers=32, hidden=4096, heads=32, kv_heads=8, head_dim=128,
                              intermediate=14336, vocab=128256, name="llama3-8b"),
    # meta-llama/Meta-Llama-3-70B: hidden_size 8192, intermediate_size 28672, 80 layers, 64 heads, 8 kv.
    "llama3-70b": Architecture("llama", layers=80, hidden=8192, heads=64, kv_heads=8, head_dim=128,
                               intermediate=28672, vocab=128256, name="llama3-70b"),
    # meta-llama/Llama-3.1-405B: hidden_size 16384, intermediate_size 53248, 126 layers, 128 heads, 8 kv.
    "llama3-405b": Architecture("llama", layers=126, hidden=16384, heads=128, kv_heads=8, head_dim=128,
                                intermediate=53248, vocab=128256, name="llama3-405b"),
    # meta-llama/Llama-4-Scout-17B-16E, text_config: hidden_size 5120, 48 layers, 40 heads, 8 kv,
    # head_dim 128, 16 local experts, top-1 (sigmoid), intermediate_size 8192 (each expert and the
    # shared expert), intermediate_size_mlp 16384 (dense layers: none, interleave_moe_layer_step 1),
    # vocab_size 202048, untied; use_qk_norm is a weightless L2 norm. The published 109B counts the
    # vision encoder (vision_config above), which a text step does not run.
    "llama4-scout": Architecture("llama4", layers=48, hidden=5120, heads=40, kv_heads=8, head_dim=128,
                                 intermediate=16384, vocab=202048, experts=16, top_k=1, expert_intermediate=8192,
                                 shared_experts=1, router="sigmoid",
                                 encoder_params=llama4_vision_params(SCOUT_VISION, 5120), name="llama4-scout"),
    # deepseek-ai/DeepSeek-V3: hidden_size 7168, intermediate_size 18432 (first_k_dense_replace 3 dense
    # layers), 61 layers, 128 heads, q_lora_rank 1536, kv_lora_rank 512, qk_nope_head_dim 128,
    # qk_rope_head_dim 64, v_head_dim 128, 256 routed experts of moe_intermediate_size 2048, top 8
    # (sigmoid, noaux_tc: a score correction bias per expert), 1 shared expert, vocab_size 129280,
    # untied. The multi-token-prediction layer (num_nextn_predict_layers 1) is left out, as the
    # published 671B leaves it out.
    "deepseek-v3": Architecture("deepseek_v3", layers=61, hidden=7168, heads=128, kv_heads=128, head_dim=128,
                                intermediate=18432, vocab=129280, experts=256, top_k=8, expert_intermediate=2048,
                                shared_experts=1, dense_layers=(0, 1, 2), router="sigmoid", router_bias=True,
                                q_lora_rank=1536, kv_lora_rank=512, qk_nope_head_dim=128, qk_rope_head_dim=64,
                                v_head_dim=128, name="deepseek-v3"),
    # Qwen/Qwen3-30B-A3B: hidden_size 2048, 48 layers, 32 heads, 4 kv, head_dim 128 (q/k RMSNorm),
    # 128 experts of moe_intermediate_size 768, top 8 (softmax), decoder_sparse_step 1, no
    # mlp_only_layers (intermediate_size 6144 unused), vocab_size 151936, untied.
    "qwen3-30b-a3b": Architecture("qwen3_moe", layers=48, hidden=2048, heads=32, kv_heads=4, head_dim=128,
                                  intermediate=6144, vocab=151936, qk_norm=True, experts=128, top_k=8,
                                  expert_intermediate=768, name="qwen3-30b-a3b"),
}


def resolve(model: str) -> Architecture:
    """A preset by name, else the path of a Hugging Face config.json (or of the folder holding one)."""
    if model in PRESETS:
        return PRESETS[model]
    path = Path(model)
    if path.is_dir():
        path = path / "config.json"
    if not path.exists():
        looks_like_a_path = path.suffix == ".json" or len(path.parts) > 1
        what = "no such file" if looks_like_a_path else "neither a preset nor a config.json file"
        raise UserError(f"model {model!r}: {what} (presets: {', '.join(PRESETS)})")
    return from_config(path)


class _Fields:
    """A config.json's fields, read with one-line errors naming the field and the file."""

    def __init__(self, data: dict, path: Path, prefix: str = ""):
        self.data, self.path, self.prefix = data, path, prefix

    def fail(self, key: str, problem: str) -> UserError:
        return UserError(f"{self.path}: {self.prefix}{key} {problem}")

    def int(self, key: str, default: int | None = None, zero: bool = False) -> int:
        """A field's integer; null or absent is `default` (Hugging Face's meaning of null)."""
        value = default if self.data.get(key) is None else self.data[key]
        if value is None:
            raise self.fail(key, "is missing")
        if not isinstance(value, int) or isinstance(value, bool) or value < (0 if zero else 1):
            raise self.fail(key, f"must be a {'non-negative' if zero else 'positive'} integer, got {value!r}")
        return value

    def flag(self, key: str, default: bool) -> bool:
        value = default if self.data.get(key) is None else self.data[key]
        if not isinstance(value, bool):
            raise self.fail(key, f"must be true or false, got {value!r}")
        return value

    def ints(self, key: str) -> list[int]:
        value = self.data.get(key) or []
        if not isinstance(value, list) or any(not isinstance(v, int) or isinstance(v, bool) for v in value):
            raise self.fail(key, f"must be a list of integers, got {value!r}")
        return value

    def section(self, key: str) -> _Fields:
        value = self.data.get(key)
        if not isinstance(value, dict):
            raise self.fail(key, "is missing or not an object")
        return _Fields(value, self.path, f"{self.prefix}{key}.")


def _decoder(f: _Fields, family: str) -> dict:
    """The fields every Llama-like config.json shares (Hugging Face's defaults where one is absent)."""
    hidden, heads = f.int("hidden_size"), f.int("num_attention_heads")
    if "head_dim" not in f.data and hidden % heads:
        raise f.fail("hidden_size", f"{hidden} is not divisible by num_attention_heads {heads} (and no head_dim)")
    bias = f.flag("attention_bias", False)
    return dict(family=family, layers=f.int("num_hidden_layers"), hidden=hidden, heads=heads,
                kv_heads=f.int("num_key_value_heads", heads), head_dim=f.int("head_dim", hidden // heads),
                intermediate=f.int("intermediate_size"), vocab=f.int("vocab_size"),
                tied_embedding=f.flag("tie_word_embeddings", False), qkv_bias=bias, out_bias=bias,
                mlp_bias=f.flag("mlp_bias", False))


def _llama(f: _Fields) -> dict:
    return _decoder(f, f.data["model_type"])


def _qwen2(f: _Fields) -> dict:
    return _decoder(f, "qwen2") | dict(qkv_bias=True, out_bias=False)  # Qwen2: q/k/v biases, none on o


def _qwen3(f: _Fields) -> dict:
    return _decoder(f, "qwen3") | dict(qk_norm=True)


def _qwen3_moe(f: _Fields) -> dict:
    """Layer i is a mixture unless listed in mlp_only_layers or off the decoder_sparse_step grid."""
    base, step = _decoder(f, "qwen3_moe"), f.int("decoder_sparse_step", 1)
    dense_only = set(f.ints("mlp_only_layers"))
    dense = tuple(i for i in range(base["layers"]) if i in dense_only or (i + 1) % step)
    return base | dict(qk_norm=True, experts=f.int("num_experts"), top_k=f.int("num_experts_per_tok"),
                       expert_intermediate=f.int("moe_intermediate_size"), dense_layers=dense)


def _deepseek_v3(f: _Fields) -> dict:
    """Layer i is a mixture from first_k_dense_replace on, every moe_layer_freq-th; the
    multi-token-prediction layers (num_nextn_predict_layers) are left out."""
    base = _decoder(f, "deepseek_v3")
    first, freq = f.int("first_k_dense_replace", 0, zero=True), f.int("moe_layer_freq", 1)
    dense = tuple(i for i in range(base["layers"]) if i < first or i % freq)
    return base | dict(
        head_dim=f.int("v_head_dim"), experts=f.int("n_routed_experts"), top_k=f.int("num_experts_per_tok"),
        expert_intermediate=f.int("moe_intermediate_size"), shared_experts=f.int("n_shared_experts", 0, zero=True),
        dense_layers=dense, router="sigmoid" if f.data.get("scoring_func", "sigmoid") == "sigmoid" else "softmax",
        router_bias=f.data.get("topk_method", "noaux_tc") == "noaux_tc",
        q_lora_rank=f.int("q_lora_rank", 0, zero=True),
        kv_lora_rank=f.int("kv_lora_rank"), qk_nope_head_dim=f.int("qk_nope_head_dim"),
        qk_rope_head_dim=f.int("qk_rope_head_dim"), v_head_dim=f.int("v_head_dim"))


def _llama4(f: _Fields) -> dict:
    """Llama 4 (a `text_config` and a `vision_config`) or its text model alone (llama4_text): the
    mixture layers are `moe_layers`, else every interleave_moe_layer_step-th; each has one shared
    expert as wide as a routed one; dense layers are intermediate_size_mlp wide."""
    text = f.section("text_config") if f.data["model_type"] == "llama4" else f
    base = _decoder(text, "llama4")
    step, layers = text.int("interleave_moe_layer_step", 1), base["layers"]
    moe = set(text.ints("moe_layers")) or set(range(step - 1, layers, step))
    encoder = 0
    if f.data["model_type"] == "llama4":
        vision = f.section("vision_config")
        encoder = llama4_vision_params({key: vision.int(key, 3 if key == "num_channels" else None)
                                        for key in SCOUT_VISION}, base["hidden"])
    return base | dict(
        tied_embedding=f.flag("tie_word_embeddings", False), intermediate=text.int("intermediate_size_mlp"),
        experts=text.int("num_local_experts"), top_k=text.int("num_experts_per_tok"),
        expert_intermediate=text.int("intermediate_size"), shared_experts=1, router="sigmoid",
        dense_layers=tuple(i for i in range(layers) if i not in moe), encoder_params=encoder)


def _gpt2(f: _Fields) -> dict:
    hidden, heads = f.int("n_embd"), f.int("n_head")
    if hidden % heads:
        raise f.fail("n_embd", f"{hidden} is not divisible by n_head {heads}")
    return dict(family="gpt2", layers=f.int("n_layer"), hidden=hidden, heads=heads, kv_heads=heads,
                head_dim=hidden // heads,
                intermediate=f.int("n_inner", 4 * hidden), vocab=f.int("vocab_size"), gated=False,
                tied_embedding=f.flag("tie_word_embeddings", True), qkv_bias=True, out_bias=True, mlp_bias=True,
                norm="layer", positions=f.int("n_positions"))


READERS = {"llama": _llama, "mistral": _llama, "qwen2": _qwen2, "qwen3": _qwen3, "qwen3_moe": _qwen3_moe,
           "deepseek_v3": _deepseek_v3, "gpt2": _gpt2, "llama4": _llama4, "llama4_text": _llama4}


def from_config(path: str | Path) -> Architecture:
    """A Hugging Face config.json read into an Architecture (its folder's name as the label)."""
    path = Path(path)
    try:
        data = jsontext.loads(files.read_bytes(path, MAX_CONFIG_BYTES, "config.json"))
    except (OSError, ValueError) as e:
        raise UserError(f"cannot read config.json {path}: {e}") from None
    if not isinstance(data, dict):
        raise UserError(f"{path}: not a config.json (a JSON object)")
    model_type = data.get("model_type")
    if model_type not in READERS:
        raise UserError(f"{path}: model_type {model_type!r} is not supported; supported: {', '.join(READERS)}")
    read = READERS[model_type](_Fields(data, path))
    return Architecture(**read, name=path.resolve().parent.name or str(path))
