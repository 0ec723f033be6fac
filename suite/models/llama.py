"""A Llama-style decoder (Touvron et al. 2023; Meta's llama3 model.py, torchtitan's llama3):
RMSNorm before attention and MLP, rotary position embeddings (or none: `rope=False`), grouped-query
attention through `F.scaled_dot_product_attention`, SwiGLU MLP, untied output projection.
Random init only: nothing is downloaded.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch
import torch.nn.functional as F
from torch import nn

from suite.core.errors import UserError


@dataclass(frozen=True)
class LlamaConfig:
    n_layer: int = 32
    n_head: int = 32
    n_kv_head: int = 8
    d_model: int = 4096
    ffn_hidden: int = 14336
    vocab: int = 128256
    seq_len: int = 8192
    rope: bool = True
    rope_theta: float = 500000.0
    norm_eps: float = 1e-5

    def __post_init__(self):
        for name in ("n_layer", "n_head", "n_kv_head", "d_model", "ffn_hidden", "vocab", "seq_len"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
                raise UserError(f"llama: {name} must be a positive integer, got {value!r}")
        if self.d_model % self.n_head:
            raise UserError(f"llama: d_model {self.d_model} is not divisible by n_head {self.n_head}")
        if self.n_head % self.n_kv_head:
            raise UserError(f"llama: n_head {self.n_head} is not a multiple of n_kv_head {self.n_kv_head}")
        if self.rope and self.head_dim % 2:
            raise UserError(f"llama: rotary embeddings need an even head_dim, got {self.head_dim}")

    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_head


# llama3_8b: Meta-Llama-3-8B config.json (hidden_size 4096, intermediate_size 14336, 32 attention
# heads, 8 key-value heads, 32 layers, vocab_size 128256, rope_theta 500000, rms_norm_eps 1e-5,
# max_position_embeddings 8192). Override n_layer to fit a few of its blocks on one device.
SIZES: dict[str, LlamaConfig] = {
    "tiny": LlamaConfig(n_layer=2, n_head=4, n_kv_head=2, d_model=64, ffn_hidden=176, vocab=512,
                        seq_len=64, rope_theta=10000.0),
    "llama3_8b": LlamaConfig(),
}


def config(size: str = "llama3_8b", **overrides) -> LlamaConfig:
    if size not in SIZES:
        raise UserError(f"llama: unknown size {size!r}; valid: {', '.join(SIZES)}")
    return replace(SIZES[size], **overrides)


class RMSNorm(nn.Module):
    """x / sqrt(mean(x^2) + eps) * weight, computed in fp32 whatever the input dtype (Llama's
    reference casts to float for the same reason: the mean of squares of 16-bit values loses bits)."""

    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        xf = x.float()
        y = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)
        return (y * self.weight).type_as(x)


def rope_tables(head_dim: int, seq_len: int, theta: float, device=None) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin of position * theta^(-2i/head_dim), shape (seq_len, head_dim / 2), fp32.

    Made in each forward pass (T x head_dim / 2 values: nothing next to attention) rather than
    kept as buffers, so that a recipe casting the module to bf16 (FP8 recipes do) cannot round
    the angles: bf16 keeps 8 bits, and positions in the thousands need more."""
    inv_freq = theta ** (-torch.arange(0, head_dim, 2, dtype=torch.float32, device=device) / head_dim)
    angles = torch.arange(seq_len, dtype=torch.float32, device=device)[:, None] * inv_freq[None, :]
    return angles.cos(), angles.sin()


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate consecutive pairs (x0, x1) of the head dimension (Meta's interleaved layout), in fp32,
    back in x's dtype. x: (B, H, T, head_dim); cos, sin: (T, head_dim / 2)."""
    xf = x.float().unflatten(-1, (-1, 2))
    x0, x1 = xf[..., 0], xf[..., 1]
    out = torch.stack((x0 * cos - x1 * sin, x0 * sin + x1 * cos), dim=-1)
    return out.flatten(-2).type_as(x)


class Attention(nn.Module):
    def __init__(self, cfg: LlamaConfig):
        super().__init__()
        self.n_head, self.n_kv_head, self.head_dim = cfg.n_head, cfg.n_kv_head, cfg.head_dim
        self.wq = nn.Linear(cfg.d_model, cfg.n_head * cfg.head_dim, bias=False)
        self.wk = nn.Linear(cfg.d_model, cfg.n_kv_head * cfg.head_dim, bias=False)
        self.wv = nn.Linear(cfg.d_model, cfg.n_kv_head * cfg.head_dim, bias=False)
        self.wo = nn.Linear(cfg.n_head * cfg.head_dim, cfg.d_model, bias=False)

    def forward(self, x: torch.Tensor, rope: tuple[torch.Tensor, torch.Tensor] | None) -> torch.Tensor:
        b, t, _ = x.shape
        q = self.wq(x).view(b, t, self.n_head, self.head_dim).transpose(1, 2)
        k = self.wk(x).view(b, t, self.n_kv_head, self.head_dim).transpose(1, 2)
        v = self.wv(x).view(b, t, self.n_kv_head, self.head_dim).transpose(1, 2)
        if rope is not None:
            q, k = apply_rope(q, *rope), apply_rope(k, *rope)
        if self.n_kv_head != self.n_head:
            # Grouped-query attention: each K/V head serves n_head / n_kv_head query heads. Expanded
            # explicitly (as torchtitan does) so every SDPA backend and torch >= 2.6 accepts it.
            rep = self.n_head // self.n_kv_head
            k, v = k.repeat_interleave(rep, dim=1), v.repeat_interleave(rep, dim=1)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.wo(y.transpose(1, 2).reshape(b, t, -1))


class SwiGLU(nn.Module):
    """w2(silu(w1 x) * w3 x) (Shazeer 2020, "GLU Variants Improve Transformer")."""

    def __init__(self, cfg: LlamaConfig):
        super().__init__()
        self.w1 = nn.Linear(cfg.d_model, cfg.ffn_hidden, bias=False)
        self.w3 = nn.Linear(cfg.d_model, cfg.ffn_hidden, bias=False)
        self.w2 = nn.Linear(cfg.ffn_hidden, cfg.d_model, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class Block(nn.Module):
    def __init__(self, cfg: LlamaConfig):
        super().__init__()
        self.attention_norm = RMSNorm(cfg.d_model, cfg.norm_eps)
        self.attention = Attention(cfg)
        self.ffn_norm = RMSNorm(cfg.d_model, cfg.norm_eps)
        self.feed_forward = SwiGLU(cfg)

    def forward(self, x: torch.Tensor, rope) -> torch.Tensor:
        x = x + self.attention(self.attention_norm(x), rope)
        return x + self.feed_forward(self.ffn_norm(x))


class Llama(nn.Module):
    # Modules an FP8 recipe must leave in high precision (see GPT2.high_precision_modules).
    high_precision_modules: tuple[str, ...] = ("lm_head",)

    def __init__(self, cfg: LlamaConfig):
        super().__init__()
        self.cfg = cfg
        self.tok_embeddings = nn.Embedding(cfg.vocab, cfg.d_model)
        self.layers = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layer))
        self.norm = RMSNorm(cfg.d_model, cfg.norm_eps)
        self.lm_head = nn.Linear(cfg.d_model, cfg.vocab, bias=False)
        # GPT-2-style init (normal, std 0.02; the residual output projections wo and w2 scaled by
        # 1/sqrt(2 n_layer)): a random-init benchmark needs a stable start, not a particular recipe.
        for name, p in self.named_parameters():
            if p.dim() == 1:
                continue  # norm weights stay 1
            std = 0.02 / (2 * cfg.n_layer) ** 0.5 if name.endswith(("wo.weight", "w2.weight")) else 0.02
            nn.init.normal_(p, mean=0.0, std=std)

    def lookup_parameters(self) -> list[nn.Parameter]:
        """Parameters used only as table lookups (no multiply-adds): the untied token embedding."""
        return [self.tok_embeddings.weight]

    def forward(self, idx: torch.Tensor, targets: torch.Tensor | None = None) -> torch.Tensor:
        """Logits (B, T, vocab); with `targets`, the mean cross-entropy (in fp32) instead."""
        t = idx.shape[1]
        if t > self.cfg.seq_len:
            raise ValueError(f"sequence of {t} tokens is longer than seq_len {self.cfg.seq_len}")
        rope = rope_tables(self.cfg.head_dim, t, self.cfg.rope_theta, idx.device) if self.cfg.rope else None
        x = self.tok_embeddings(idx)
        for layer in self.layers:
            x = layer(x, rope)
        logits = self.lm_head(self.norm(x))
        if targets is None:
            return logits
        return F.cross_entropy(logits.float().view(-1, logits.shape[-1]), targets.reshape(-1))
