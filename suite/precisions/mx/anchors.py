"""Measurements published for this folder's recipes, which the roofline model is checked against
(this folder's `anchors` hook: `suite.analysis.roofline.published` gathers them; docs/model.md shows them).

Source: torchao's MoE training README (torchao/prototype/moe_training/README.md): MXFP8 grouped
GEMMs (`torchao_scaled_grouped_mm`) against bf16 `torch._grouped_mm`, forward and backward, on an
NVIDIA B200 (1000 W limit), M rows over G equal groups of (K, N) weights; "M,N,K,G" as printed.
Llama 4 and DeepSeek-V3 shapes from commit 5e79e5ed3434aa04281931039da1bab338c415b3 (torchao
0.14.0+gitc7b8e13da, torch 2.10.0a0); the small-N shape (0.858x) from the version at
838dcebb13be7cd7b7ae5d1d8c4e674c89a5d7b8 (PR #3163), which the current README no longer lists.

Torch-free, importing no later stage: the model (`suite.analysis.roofline.model`) is handed to it.
"""

from __future__ import annotations

TORCHAO_MOE = "torchao MoE training README"

# torchao's MXFP8 grouped GEMM over bf16's, forward + backward: (M, N, K, G) -> speedup
MOE_MXFP8 = {
    (128000, 8192, 5120, 1): 1.808, (128000, 8192, 5120, 2): 1.690, (128000, 8192, 5120, 4): 1.637,
    (128000, 8192, 5120, 8): 1.700, (128000, 2048, 7168, 1): 1.188, (128000, 2048, 7168, 2): 1.321,
    (128000, 2048, 7168, 4): 1.595, (128000, 2048, 7168, 8): 1.440, (128000, 1536, 5120, 1): 0.858,
}


def _moe_step(model, m: int, n: int, k: int, groups: int, fmt: str, casts: bool) -> list:
    """A grouped GEMM's forward and backward: output (M, K, N) and input gradient (M, N, K) over
    `groups` weights, weight gradients (K, M, N) into `groups` outputs; MXFP8 casts each operand
    into both layouts with torchao's own kernels (triton, CUDA)."""
    operand, out = model.OPERAND_BYTES[fmt], model.OUTPUT_BYTES[fmt]
    kernels = [model.gemm("output", m, k, n, fmt, groups=groups), model.gemm("input gradient", m, n, k, fmt, groups=groups),
               model.Kernel("matmul", "weight gradients", operand * (m * k + m * n) + out * groups * k * n,
                            2.0 * m * k * n, fmt)]
    if casts:
        for role, elements in (("input", m * k), ("weight", groups * n * k), ("grad_output", m * n)):
            kernels += model.fused_cast(role, elements, 2, "microscaled", False, operand)
    return kernels


def _moe_speedup(model, m: int, n: int, k: int, groups: int) -> float:
    b200 = model.gpu_device("b200")
    bf16 = model.predict(_moe_step(model, m, n, k, groups, "bf16", False), b200).seconds
    return bf16 / model.predict(_moe_step(model, m, n, k, groups, "fp8", True), b200).seconds


def anchors(model) -> list[tuple]:
    """(source, device, case, published, unit, the model's value) per measurement."""
    return [(TORCHAO_MOE, "B200", f"MXFP8 grouped GEMM fwd+bwd speedup, M,N,K,G = {m},{n},{k},{groups}", speedup, "x",
             _moe_speedup(model, m, n, k, groups)) for (m, n, k, groups), speedup in MOE_MXFP8.items()]
