"""Named GEMM shape sets a scenario can refer to (`shapes = "square_pow2"`).

Each set turns the sweep's `sizes` / `tokens` into (M, K, N) triples: C[M, N] = A[M, K] @ B[K, N].
For a Linear layer y = x W^T, M is the token count, K the input and N the output features.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable


@dataclass(frozen=True)
class ShapeSet:
    description: str
    # sizes, tokens -> triples
    build: Callable[[list[int] | None, int | None], list[tuple[int, int, int]]]
    needs_sizes: bool = False
    pow2_only: bool = False
    default_tokens: int | None = None

    def check(self, sizes: list[int] | None, tokens: int | None) -> None:
        if self.needs_sizes and not sizes:
            raise ValueError(f"this shape set needs `sizes` ({self.description})")
        if self.pow2_only and sizes:
            bad = [s for s in sizes if s & (s - 1)]
            if bad:
                raise ValueError(f"sizes must be powers of two for this shape set, got {bad}")
        if not self.needs_sizes and sizes:
            raise ValueError(f"this shape set takes no `sizes` ({self.description})")
        if self.default_tokens is None and tokens is not None:
            raise ValueError(f"this shape set takes no `tokens` ({self.description})")

    def triples(self, sizes: list[int] | None, tokens: int | None) -> list[tuple[int, int, int]]:
        return self.build(sizes, tokens or self.default_tokens)


def _square(sizes, _tokens):
    return [(s, s, s) for s in sizes]


def _transformer(hidden: int, intermediate: int, n_heads: int, n_kv_heads: int):
    """The four Linear GEMMs of one Llama-style block's forward pass, QKV and gate/up fused."""
    head_dim = hidden // n_heads
    kv = n_kv_heads * head_dim

    def build(_sizes, tokens):
        return [
            (tokens, hidden, hidden + 2 * kv),  # fused q, k, v projection
            (tokens, hidden, hidden),  # attention output projection
            (tokens, hidden, 2 * intermediate),  # fused gate and up projection (SwiGLU)
            (tokens, intermediate, hidden),  # down projection
        ]

    return build


SHAPE_SETS: dict[str, ShapeSet] = {
    "square": ShapeSet("M = K = N = each of `sizes`", _square, needs_sizes=True),
    "square_pow2": ShapeSet(
        "M = K = N = each of `sizes`, powers of two", _square, needs_sizes=True, pow2_only=True
    ),
    # Llama-3-8B config.json: hidden_size 4096, intermediate_size 14336, 32 heads, 8 KV heads.
    "llama3_8b": ShapeSet(
        "Llama-3-8B block GEMMs for `tokens` tokens (default 16384)",
        _transformer(4096, 14336, 32, 8),
        default_tokens=16384,
    ),
    # Llama-3-70B config.json: hidden_size 8192, intermediate_size 28672, 64 heads, 8 KV heads.
    "llama3_70b": ShapeSet(
        "Llama-3-70B block GEMMs for `tokens` tokens (default 16384)",
        _transformer(8192, 28672, 64, 8),
        default_tokens=16384,
    ),
}
