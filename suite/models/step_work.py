"""One training step of a model on one GPU, torch-free: every GEMM it runs and the work beside them
(`step_work`, a `suite.models.step.StepWork`), from a model's dimensions (`Architecture`) and how the
step is laid out (`Parallel`).

Sharding follows torchtitan (Megatron's layout, with sequence parallel):
- Tensor parallel (tp): column-parallel linears (q, k, v, gate, up; MLA's wq_b and wkv_b; shared
  experts' w1/w3) keep fan_out / tp outputs, row-parallel ones (o, down) fan_in / tp inputs, the
  output projection is vocab-parallel (vocab / tp); the router and MLA's down projections (wq_a,
  wkv_a) are replicated. Every linear sees all `batch x seq` tokens of its data-parallel rank; norms
  and residual adds see tokens / tp (sequence parallel). A width tp does not divide is rounded up:
  the largest shard sets the time.
- Expert parallel (ep): each GPU holds experts / ep whole experts (no expert tensor parallel). Each
  GPU routes its tokens (tokens / tp when tp > 1: torchtitan splits them across the TP ranks before
  the all-to-all), so an expert receives tokens x ep x top_k / experts of them when routing is
  balanced. `skew` >= 1 is the busiest rank's share over the balanced one (the step waits for it):
  every local expert's token count is scaled by it, up to all the tokens the EP group routes.
  Without ep (ep = 1) the experts are tensor-parallel like a dense MLP (torchtitan's TensorParallel
  for GroupedExperts), each gets tokens x top_k / experts tokens, and skew changes nothing (a
  grouped GEMM's total rows stay tokens x top_k).
- Activation checkpointing (`Parallel.ac`, torchtitan's modes): "full" reruns every transformer
  block's forward in its backward: each block linear's fprop counts twice, the attention core's
  forward, the blocks' forward elementwise bytes and their forward TP and EP collectives run once
  more. The embedding, the final norm, the output projection and the loss are outside the blocks
  (torchtitan checkpoints each block), so they run once. FSDP moves nothing more: the backward
  all-gathers each block's parameters anyway (reshard_after_forward).

A GEMM's passes (see `suite.models.step.Gemm`): fprop (m x fan_in) @ (fan_in x fan_out), dgrad
(m x fan_out) @ (fan_out x fan_in), wgrad (fan_out x m) @ (m x fan_in); `count` is the number of
layers holding the linear (1 for the output projection), its fprop's times `Parallel.forwards`
inside the blocks.
"""

from __future__ import annotations

import math
from dataclasses import fields
from fractions import Fraction

from suite.core.errors import UserError
from suite.models.architecture import Architecture, Linear
from suite.models.step import AC_MODES, Gemm, Parallel, StepWork

ACTIVATION_BYTES = 2  # bf16 activations, gradients and logits: what the elementwise and collective bytes count
# FlashAttention's backward does 2.5x its forward's FLOPs (Dao 2023, FlashAttention-2, section 4.1;
# flash-attention's benchmarks count fwd + bwd as 3.5x the forward): the recomputed Q K^T included,
# so attention time is its FLOPs at the kernel's measured throughput.
ATTENTION_BACKWARD = 2.5
# Elementwise backward: each op reads its saved input and its output's gradient and writes its input's
# gradient, twice the bytes of its forward (which reads the input and writes the output).
ELEMENTWISE_BACKWARD = 2


def step_work(arch: Architecture, parallel: Parallel, skew: float = 1.0) -> StepWork:
    """Every GEMM of one training step on one GPU, with the step's other work."""
    check(arch, parallel, skew)
    gemms = tuple(gemm for linear in arch.linears()
                  for gemm in passes(linear, *local_shape(arch, parallel, linear, skew),
                                     forwards=1 if linear.module == "output" else parallel.forwards))
    return StepWork(gemms=gemms, attention_flops=attention_flops(arch, parallel),
                    elementwise_bytes=elementwise_bytes(arch, parallel, skew),
                    params_local=params_local(arch, parallel),
                    params_total=arch.total_params() - arch.encoder_params,  # what the step trains
                    tp_bytes=tp_bytes(arch, parallel), ep_bytes=ep_bytes(arch, parallel))


def check(arch: Architecture, parallel: Parallel, skew: float = 1.0) -> None:
    """One-line errors for a layout the model cannot take."""
    for spec in (spec for spec in fields(parallel) if spec.type == "int"):  # its counts
        value = getattr(parallel, spec.name)
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise UserError(f"{spec.name} must be a positive integer, got {value!r}")
    if parallel.ac not in AC_MODES:
        raise UserError(f"ac must be one of {', '.join(AC_MODES)}, got {parallel.ac!r}")
    name, tp, ep, gpus = arch.name or arch.family, parallel.tp, parallel.ep, parallel.gpus
    if gpus % tp:
        raise UserError(f"gpus {gpus} is not a multiple of tp {tp}")
    for what, count in (("attention heads", arch.heads), ("key-value heads", arch.kv_heads)):
        if count % tp:
            raise UserError(f"tp {tp} does not divide {name}'s {count} {what}")
    if ep > 1 and not arch.experts:
        raise UserError(f"ep {ep} needs a mixture of experts; {name} is dense (use ep 1)")
    if arch.experts % ep:
        raise UserError(f"ep {ep} does not divide {name}'s {arch.experts} experts")
    if gpus % ep:
        raise UserError(f"gpus {gpus} is not a multiple of ep {ep}")
    if isinstance(skew, bool) or not isinstance(skew, (int, float)) or not math.isfinite(skew) or skew < 1:
        raise UserError(f"skew must be a number of at least 1 (the busiest expert-parallel rank's tokens over "
                        f"the balanced share), got {skew!r}")


def _ceil(a: int, b: int) -> int:
    return -(-a // b)


def routed_tokens(parallel: Parallel) -> int:
    """Tokens one GPU routes to the experts: all of its rank's, or its share of them under TP with EP."""
    tokens = parallel.batch * parallel.seq
    return _ceil(tokens, parallel.tp) if parallel.ep > 1 else tokens


def tokens_per_expert(arch: Architecture, parallel: Parallel, skew: float = 1.0) -> int:
    """Tokens each local expert multiplies (rounded up), balanced routing scaled by `skew`."""
    routed = routed_tokens(parallel)
    if parallel.ep == 1:
        return _ceil(routed * arch.top_k, arch.experts)
    share = Fraction(routed * parallel.ep * arch.top_k, arch.experts) * Fraction(skew)
    return min(math.ceil(share), routed * parallel.ep)


def local_shape(arch: Architecture, parallel: Parallel, linear: Linear, skew: float = 1.0) -> tuple[int, int, int, int]:
    """(m tokens, fan_in, fan_out, groups) of a linear on one GPU."""
    if linear.module == "experts":  # whole experts under EP; without it, cut by TP like a dense MLP
        groups, m = linear.experts // parallel.ep, tokens_per_expert(arch, parallel, skew)
        tp = parallel.tp if parallel.ep == 1 else 1
    else:
        groups, tp, m = 1, parallel.tp, parallel.batch * parallel.seq
    fan_in = _ceil(linear.fan_in, tp) if linear.split == "row" else linear.fan_in
    fan_out = _ceil(linear.fan_out, tp) if linear.split == "column" else linear.fan_out
    return m, fan_in, fan_out, groups


def passes(linear: Linear, m: int, fan_in: int, fan_out: int, groups: int, forwards: int = 1) -> tuple[Gemm, ...]:
    """fprop, dgrad and wgrad of a linear of that local shape, its fprop run `forwards` times a layer."""
    shapes = {"fprop": (m, fan_in, fan_out), "dgrad": (m, fan_out, fan_in), "wgrad": (fan_out, m, fan_in)}
    return tuple(Gemm(linear.fqn, linear.module, name, *shape,
                      count=linear.count * (forwards if name == "fprop" else 1), groups=groups)
                 for name, shape in shapes.items())


def attention_flops(arch: Architecture, parallel: Parallel) -> float:
    """The attention core on one GPU, forward and backward: per layer and sequence, seq^2 / 2 causal
    query-key pairs (FlashAttention's count), 2 FLOPs per multiply-add over the query-key width (Q K^T)
    and the value width (P V), for the GPU's heads / tp heads; the backward ATTENTION_BACKWARD times it;
    the forward `parallel.forwards` times (full activation checkpointing reruns it)."""
    forward = parallel.batch * parallel.seq ** 2 * (arch.heads // parallel.tp) * (arch.qk_head_dim + arch.v_dim)
    return float(arch.layers * forward * (parallel.forwards + ATTENTION_BACKWARD))


def elementwise_bytes(arch: Architecture, parallel: Parallel, skew: float = 1.0) -> float:
    """Bytes the step's memory-bound work reads and writes on one GPU, ACTIVATION_BYTES an element.

    Forward, per token, h the hidden width, widths local to the GPU:
    - per layer, on tokens / tp (sequence parallel): two norms (read h, write h) and two residual
      adds (read 2h, write h): 10h;
    - per layer, on all tokens: rotary on the queries and keys (read and write each rotated element;
      latent attention rotates qk_rope_head_dim of each head and one shared key), Qwen3's q/k norms
      (read and write), latent attention's q and kv norms; the MLP's activation (SwiGLU: read gate and
      up, write their product: 3 x width; GELU: 2 x width); a mixture's router scores (read and write
      the experts' logits), shared experts' SwiGLU, and per routed row (a token's copy at an expert)
      its permutation and un-permutation (read and write h each: 4h) and its experts' SwiGLU;
    - once: the embedding lookup and the final norm (2h each), GPT-2's position add (3h).
    The backward moves ELEMENTWISE_BACKWARD times the forward's bytes; full activation checkpointing
    reruns the blocks' part of the forward (not the embedding's, final norm's, loss's). The loss reads the logits
    (vocab / tp a token) forward, and reads them and writes their gradient backward: 3 x vocab.
    Attention's softmax is inside the attention kernel (its FLOPs, not here)."""
    tp, tokens, h = parallel.tp, parallel.batch * parallel.seq, arch.hidden
    shard, heads, kv = _ceil(tokens, tp), arch.heads // tp, arch.kv_heads // tp
    per_layer = shard * 10 * h
    if arch.latent_attention:
        per_layer += tokens * 2 * ((heads + 1) * arch.qk_rope_head_dim + arch.q_lora_rank + arch.kv_lora_rank)
    elif not arch.positions:
        per_layer += tokens * 2 * (heads + kv) * arch.head_dim
    if arch.qk_norm:
        per_layer += tokens * 2 * (heads + kv) * arch.head_dim
    dense_layers = arch.layers - arch.moe_layers
    mlp = tokens * (3 if arch.gated else 2) * _ceil(arch.intermediate, tp)
    blocks = arch.layers * per_layer + dense_layers * mlp
    if arch.experts:
        blocks += arch.moe_layers * _moe_elementwise(arch, parallel, skew)
    outside = shard * (4 + (3 if arch.positions else 0)) * h
    loss = 3 * tokens * _ceil(arch.vocab, tp)
    recomputed = (parallel.forwards - 1) * blocks
    return float(ACTIVATION_BYTES * ((blocks + outside) * (1 + ELEMENTWISE_BACKWARD) + recomputed + loss))


def _moe_elementwise(arch: Architecture, parallel: Parallel, skew: float) -> int:
    """Forward elements of one mixture layer on one GPU (see `elementwise_bytes`)."""
    tokens, tp = parallel.batch * parallel.seq, parallel.tp
    expert_width = _ceil(arch.expert_intermediate, tp) if parallel.ep == 1 else arch.expert_intermediate
    rows = tokens_per_expert(arch, parallel, skew) * arch.experts // parallel.ep
    shared = tokens * 3 * _ceil(arch.shared_experts * arch.expert_intermediate, tp)
    return tokens * 2 * arch.experts + rows * (4 * arch.hidden + 3 * expert_width) + shared


def params_local(arch: Architecture, parallel: Parallel) -> int:
    """Parameters one GPU holds after tensor and expert parallel, before FSDP shards them: its shard
    of each linear (a column-parallel bias is cut with its outputs, a row-parallel one replicated),
    of the vocab-parallel token embedding, and the replicated norms, positions and router biases."""
    held = 0
    for linear in arch.linears():
        if not linear.tied:
            _, fan_in, fan_out, groups = local_shape(arch, parallel, linear)
            held += linear.count * groups * (fan_in * fan_out + (fan_out if linear.bias else 0))
    embedding = (_ceil(arch.vocab, parallel.tp) + arch.positions) * arch.hidden
    return held + embedding + arch.norm_params() + arch.router_bias_params


def tp_bytes(arch: Architecture, parallel: Parallel) -> float:
    """Bytes one GPU sends in tensor parallel's collectives per step (ring algorithms: (tp - 1) / tp of
    the whole tensor per all-gather or reduce-scatter). Each is of one (tokens x hidden) activation:
    per layer, an all-gather before attention and before the MLP and a reduce-scatter after each,
    forward, and the same four backward (8); the embedding's reduce-scatter and the output
    projection's all-gather, forward and backward (4); full activation checkpointing reruns each
    layer's forward four (4 more per layer). All-reduces without sequence parallel move
    the same bytes. FP8 all-gathers (torchao's float8 TP) would halve their part."""
    if parallel.tp == 1:
        return 0.0
    tokens = parallel.batch * parallel.seq
    collectives = (4 * parallel.forwards + 4) * arch.layers + 4
    return float(collectives * tokens * arch.hidden * ACTIVATION_BYTES * (parallel.tp - 1) / parallel.tp)


def ep_bytes(arch: Architecture, parallel: Parallel) -> float:
    """Bytes one GPU sends in expert parallel's all-to-alls per step: per mixture layer, each routed
    row (routed tokens x top_k of them, hidden wide) is dispatched and combined, forward and
    backward (4 all-to-alls; full activation checkpointing reruns the forward's 2), (ep - 1) / ep of it to other GPUs when routing is balanced."""
    if parallel.ep == 1:
        return 0.0
    rows = routed_tokens(parallel) * arch.top_k
    return float(arch.moe_layers * (2 * parallel.forwards + 2) * rows * arch.hidden * ACTIVATION_BYTES * (parallel.ep - 1) / parallel.ep)
