"""The roofline model's cast kernels for block-scaled formats (`microscaled`: MXFP8's 1x32 and
NVFP4's 1x16 blocks; this folder's `scalings` hook, `suite.scenario.declare.Casts`), torch-free and
handed the model (`suite.analysis.roofline.model`). Transformer Engine's MXFP8 and NVFP4 recipes share it."""

from __future__ import annotations

from suite.precisions.fp8.casts import quantized_inline
from suite.scenario.declare import Casts


def _fused(model, role: str, e: float, s: int, first: int, width: float) -> list:
    """One kernel per layout."""
    return [model.Kernel("cast", f"{role} cast", (first + width) * e),
            model.Kernel("cast", f"{role} transposed cast", (s + width) * e)]


def _eager(model, role: str, e: float, s: int, width: float) -> list:
    return model.eager_block_cast(role, e, s, width)


def _layer(model, tensors, width: float) -> list:
    """Each operand cast along each GEMM's K, from a transposed copy for one."""
    casts = [c for role, e, s in tensors for c in model.eager_block_cast(role, e, 2, width) * 2]
    return casts + [model.Kernel("cast", f"{role} transposed copy", 4.0 * e) for role, e, _ in tensors]


# a grouped call casts with torchao's own kernels (its MoE path's triton and CUDA casts)
MICROSCALED = Casts(_fused, _eager, _layer, grouped_fused=True, inline=quantized_inline)
