"""Measurements published for this folder's recipes, which the roofline model is checked against
(this folder's `anchors` hook: `suite.analysis.roofline.published` gathers them; docs/model.md shows them).

Source: torchao's float8 README (torchao/float8/README.md, "Performance"): FP8 (dynamic tensorwise)
against bf16 on an H100, the float8_roofline.py microbenchmark of that version: LNLinearSigmoid
(LayerNorm -> Linear -> Sigmoid, bf16 weights) under torch.compile, forward and backward, GPU kernel
time. "Example 1 (small shapes): M, K, N = 1024, 2048, 1024, benchmark speedup is 0.80"; "Example 2
(large shapes): M, K, N = 4096, 8192, 16384, benchmark speedup is 1.39".

Training steps (`TORCHTITAN_70B`, a whole step: `suite.analysis.advise.published` sets the step estimate
against it, which the roofline model alone cannot make): torchtitan's async TP benchmark
(benchmarks/asyncTP_llama3_h100_2025-06_torchtitan.md, June 2025, its table
assets/images/async-tp-perf-06-14-2025.png), the vanilla TP rows: Llama 3.1 70B on 256 H100s (Grand
Teton: 96 GB HBM2e at 2.4 TB/s, 500 W limit; NVLink within 8, 400 Gb/s RDMA per GPU), FSDP 32 x TP 8,
torch.compile, full activation checkpointing, local batch size 16, sequence 8192 (llama3_70b.toml),
tokens/s per GPU. Its note: rowwise's low vanilla-TP number is pytorch/torchtitan#1207.

Torch-free, importing no later stage: the model (`suite.analysis.roofline.model`) is handed to it.
"""

from __future__ import annotations

TORCHAO_README = "torchao float8 README"
# torchao's examples: (M, K, N) -> FP8 tensorwise's speedup over bf16
LAYER_SPEEDUPS = {(1024, 2048, 1024): 0.80, (4096, 8192, 16384): 1.39}

TORCHTITAN = "torchtitan async TP benchmark"
# (model, GPUs, tensor parallel, sequence, local batch, activation checkpointing) and tokens/s per GPU per recipe
TORCHTITAN_70B_RUN = ("llama3-70b", 256, 8, 8192, 16, "full")
TORCHTITAN_70B = {"bf16": 597.3, "fp8_tensorwise": 809.8, "fp8_rowwise": 599.6}
TORCHTITAN_MEMORY_TBS = 2.4  # the benchmark's H100s: 96 GB HBM2e


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
