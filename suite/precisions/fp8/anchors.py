"""Measurements published for this folder's recipes, which the roofline model is checked against
(this folder's `anchors` hook: `suite.analysis.roofline.published` gathers them; docs/model.md shows them).

Source: torchao's float8 README (torchao/float8/README.md, "Performance"): FP8 (dynamic tensorwise)
against bf16 on an H100, the float8_roofline.py microbenchmark of that version: LNLinearSigmoid
(LayerNorm -> Linear -> Sigmoid, bf16 weights) under torch.compile, forward and backward, GPU kernel
time. "Example 1 (small shapes): M, K, N = 1024, 2048, 1024, benchmark speedup is 0.80"; "Example 2
(large shapes): M, K, N = 4096, 8192, 16384, benchmark speedup is 1.39".

Torch-free, importing no later stage: the model (`suite.analysis.roofline.model`) is handed to it.
"""

from __future__ import annotations

TORCHAO_README = "torchao float8 README"
# torchao's examples: (M, K, N) -> FP8 tensorwise's speedup over bf16
LAYER_SPEEDUPS = {(1024, 2048, 1024): 0.80, (4096, 8192, 16384): 1.39}


def _layer_speedup(model, m: int, k: int, n: int) -> float:
    """torchao's benchmark case: LNLinearSigmoid with bf16 weights, compiled, tensorwise FP8 vs bf16."""
    h100 = model.gpu_device("h100")
    kernels = {p: model.layer_case(True, p, m, k, n, compiled=True, master=False)
               for p in ("bf16", "fp8_tensorwise")}
    return model.predict(kernels["bf16"], h100).seconds / model.predict(kernels["fp8_tensorwise"], h100).seconds


def anchors(model) -> list[tuple]:
    """(source, device, case, published, unit, the model's value) per measurement."""
    return [(TORCHAO_README, "H100 SXM", f"FP8 tensorwise LNLinearSigmoid speedup, M,K,N = {m},{k},{n}", speedup, "x",
             _layer_speedup(model, m, k, n)) for (m, k, n), speedup in LAYER_SPEEDUPS.items()]
