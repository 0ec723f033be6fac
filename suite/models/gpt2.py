"""GPT-2 in the style of nanoGPT (Karpathy, github.com/karpathy/nanoGPT, model.py): pre-LayerNorm
blocks, learned position embeddings, GELU MLP of width 4 d_model, lm_head tied to the token
embedding, attention through `F.scaled_dot_product_attention` (flash / memory-efficient kernels
where the device has them). Random init only: nothing is downloaded.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import torch
import torch.nn.functional as F
from torch import nn

from suite.core.errors import UserError


@dataclass(frozen=True)
class GPT2Config:
    n_layer: int = 12
    n_head: int = 12
    d_model: int = 768
    vocab: int = 50257
    seq_len: int = 1024

    def __post_init__(self):
        for name in ("n_layer", "n_head", "d_model", "vocab", "seq_len"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
                raise UserError(f"gpt2: {name} must be a positive integer, got {value!r}")
        if self.d_model % self.n_head:
            raise UserError(f"gpt2: d_model {self.d_model} is not divisible by n_head {self.n_head}")

    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_head


# Sizes. 124m/350m are OpenAI's GPT-2 small/medium (Hugging Face gpt2 and gpt2-medium config.json:
# n_layer, n_head, n_embd, n_positions); "124M" is the parameter count at vocab 50257, tied lm_head.
# tiny and mini are for CPUs and tests.
SIZES: dict[str, GPT2Config] = {
    "tiny": GPT2Config(n_layer=2, n_head=2, d_model=64, seq_len=64),
    "mini": GPT2Config(n_layer=4, n_head=4, d_model=256, seq_len=256),
    "124m": GPT2Config(n_layer=12, n_head=12, d_model=768, seq_len=1024),
    "350m": GPT2Config(n_layer=24, n_head=16, d_model=1024, seq_len=1024),
}


def config(size: str = "124m", **overrides) -> GPT2Config:
    """A named size with some fields replaced (e.g. vocab=50304)."""
    if size not in SIZES:
        raise UserError(f"gpt2: unknown size {size!r}; valid: {', '.join(SIZES)}")
    return replace(SIZES[size], **overrides)


class CausalSelfAttention(nn.Module):
    def __init__(self, cfg: GPT2Config):
        super().__init__()
        self.n_head = cfg.n_head
        self.c_attn = nn.Linear(cfg.d_model, 3 * cfg.d_model)
        self.c_proj = nn.Linear(cfg.d_model, cfg.d_model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.c_attn(x).split(d, dim=2)
        q, k, v = (z.view(b, t, self.n_head, d // self.n_head).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.c_proj(y.transpose(1, 2).reshape(b, t, d))


class MLP(nn.Module):
    def __init__(self, cfg: GPT2Config):
        super().__init__()
        self.c_fc = nn.Linear(cfg.d_model, 4 * cfg.d_model)
        self.c_proj = nn.Linear(4 * cfg.d_model, cfg.d_model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.c_proj(F.gelu(self.c_fc(x), approximate="tanh"))  # GPT-2 uses the tanh GELU


class Block(nn.Module):
    def __init__(self, cfg: GPT2Config):
        super().__init__()
        self.ln_1 = nn.LayerNorm(cfg.d_model)
        self.attn = CausalSelfAttention(cfg)
        self.ln_2 = nn.LayerNorm(cfg.d_model)
        self.mlp = MLP(cfg)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT2(nn.Module):
    # Modules an FP8 recipe must leave in high precision (torchao: module_filter_fn returning False
    # for these names). The lm_head's output feeds the softmax directly, and at vocab 50257 its N
    # is not even a multiple of 16, which FP8 GEMMs need.
    high_precision_modules: tuple[str, ...] = ("lm_head",)

    def __init__(self, cfg: GPT2Config):
        super().__init__()
        self.cfg = cfg
        self.wte = nn.Embedding(cfg.vocab, cfg.d_model)
        self.wpe = nn.Embedding(cfg.seq_len, cfg.d_model)
        self.h = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layer))
        self.ln_f = nn.LayerNorm(cfg.d_model)
        self.lm_head = nn.Linear(cfg.d_model, cfg.vocab, bias=False)
        self.lm_head.weight = self.wte.weight  # weight tying (GPT-2; nanoGPT)
        self.apply(self._init_weights)
        # GPT-2 paper sec. 2.3: residual projections scaled by 1/sqrt(N) for N residual layers (2 per block).
        for name, p in self.named_parameters():
            if name.endswith("c_proj.weight"):
                nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * cfg.n_layer))

    @staticmethod
    def _init_weights(module: nn.Module) -> None:
        if isinstance(module, nn.Linear):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)
            if module.bias is not None:
                nn.init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)

    def lookup_parameters(self) -> list[nn.Parameter]:
        """Parameters used only as table lookups (no multiply-adds): the position embedding. The
        token embedding is also the lm_head's weight, so it does count (nanoGPT's get_num_params)."""
        return [self.wpe.weight]

    def forward(self, idx: torch.Tensor, targets: torch.Tensor | None = None) -> torch.Tensor:
        """Logits (B, T, vocab); with `targets`, the mean cross-entropy instead (computed in fp32:
        a log-softmax over ~50k logits in a 16-bit type loses the small probabilities)."""
        t = idx.shape[1]
        if t > self.cfg.seq_len:
            raise ValueError(f"sequence of {t} tokens is longer than seq_len {self.cfg.seq_len}")
        pos = torch.arange(t, device=idx.device)
        x = self.wte(idx) + self.wpe(pos)
        for block in self.h:
            x = block(x)
        logits = self.lm_head(self.ln_f(x))
        if targets is None:
            return logits
        return F.cross_entropy(logits.float().view(-1, logits.shape[-1]), targets.reshape(-1))
