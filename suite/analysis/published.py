"""The roofline model against published measurements: each one with its source, the model's
prediction for the same case and the error. `python -m suite.analysis.published` prints the
table docs/model.md holds (a test fails when they differ).

Sources:
- torchao's float8 README (torchao/float8/README.md, "Performance"): FP8 (dynamic tensorwise)
  against bf16 on an H100, the float8_roofline.py microbenchmark of that version: LNLinearSigmoid
  (LayerNorm -> Linear -> Sigmoid, bf16 weights) under torch.compile, forward and backward, GPU
  kernel time. "Example 1 (small shapes): M, K, N = 1024, 2048, 1024, benchmark speedup is 0.80";
  "Example 2 (large shapes): M, K, N = 4096, 8192, 16384, benchmark speedup is 1.39".
- mamf-finder (stas00/ml-engineering, compute/accelerator/README.md, "Maximum Achievable Matmul
  FLOPS comparison table"): the best bf16 and FP8 (e4m3) matmul TFLOP/s found per GPU, with the
  shape it was found at (M x N x K as printed there), a mean of 100 iterations after 50 warm-up.
- torchao's MoE training README (torchao/prototype/moe_training/README.md): MXFP8 grouped GEMMs
  (`torchao_scaled_grouped_mm`) against bf16 `torch._grouped_mm`, forward and backward, on an
  NVIDIA B200 (1000 W limit), M rows over G equal groups of (K, N) weights; "M,N,K,G" as printed.
  Llama 4 and DeepSeek-V3 shapes from commit 5e79e5ed3434aa04281931039da1bab338c415b3 (torchao
  0.14.0+gitc7b8e13da, torch 2.10.0a0); the small-N shape (0.858x) from the version at
  838dcebb13be7cd7b7ae5d1d8c4e674c89a5d7b8 (PR #3163), which the current README no longer lists.
"""

from __future__ import annotations

from dataclasses import dataclass

from suite.analysis import model

TORCHAO_README = "torchao float8 README"
TORCHAO_MOE = "torchao MoE training README"
MAMF = "mamf-finder (ml-engineering)"


@dataclass(frozen=True)
class Published:
    source: str
    device: str  # a peak-table name
    what: str
    measured: float
    unit: str  # "x" (speedup) or "TFLOP/s"


def _layer_speedup(m: int, k: int, n: int) -> float:
    """torchao's benchmark case: LNLinearSigmoid with bf16 weights, compiled, tensorwise FP8 vs bf16."""
    h100 = model.gpu_device("h100")
    kernels = {p: model.layer_case(True, p, m, k, n, compiled=True, master=False)
               for p in ("bf16", "fp8_tensorwise")}
    return model.predict(kernels["bf16"], h100).seconds / model.predict(kernels["fp8_tensorwise"], h100).seconds


def _gemm_tflops(device: str, fmt: str, m: int, n: int, k: int) -> float:
    pred = model.predict([model.gemm("GEMM", m, k, n, fmt)], model.gpu_device(device))
    return 2.0 * m * n * k / pred.seconds / 1e12


# mamf-finder's best shapes, (device, format) -> (TFLOP/s, (M, N, K))
MAMF_BEST = {
    ("A100 SXM", "bf16"): (271.2, (1024, 10240, 5120)), ("A100 PCIe", "bf16"): (252.9, (2048, 5120, 6144)),
    ("H100 SXM", "bf16"): (794.5, (2048, 2048, 13312)), ("GH200", "bf16"): (828.6, (1024, 15360, 4096)),
    ("B200", "bf16"): (1745.0, (1792, 16128, 3072)), ("GB200", "bf16"): (1822.0, (4096, 9728, 2048)),
    ("H100 SXM", "fp8"): (1402.6, (1024, 9216, 14336)), ("H200", "fp8"): (1453.4, (1280, 4096, 12032)),
    ("GH200", "fp8"): (1535.0, (1024, 14336, 14336)), ("B200", "fp8"): (3432.5, (15360, 4096, 3072)),
    ("GB200", "fp8"): (3615.6, (19456, 5120, 1536)),
}


# torchao's MXFP8 grouped GEMM over bf16's, forward + backward: (M, N, K, G) -> speedup
MOE_MXFP8 = {
    (128000, 8192, 5120, 1): 1.808, (128000, 8192, 5120, 2): 1.690, (128000, 8192, 5120, 4): 1.637,
    (128000, 8192, 5120, 8): 1.700, (128000, 2048, 7168, 1): 1.188, (128000, 2048, 7168, 2): 1.321,
    (128000, 2048, 7168, 4): 1.595, (128000, 2048, 7168, 8): 1.440, (128000, 1536, 5120, 1): 0.858,
}


def _moe_step(m: int, n: int, k: int, groups: int, fmt: str, casts: bool) -> list[model.Kernel]:
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


def _moe_speedup(m: int, n: int, k: int, groups: int) -> float:
    b200 = model.gpu_device("b200")
    bf16 = model.predict(_moe_step(m, n, k, groups, "bf16", False), b200).seconds
    return bf16 / model.predict(_moe_step(m, n, k, groups, "fp8", True), b200).seconds


def comparisons() -> list[tuple[Published, float]]:
    """Each published measurement with the model's prediction of the same case."""
    rows = [
        (Published(TORCHAO_README, "H100 SXM", "FP8 tensorwise LNLinearSigmoid speedup, M,K,N = 1024,2048,1024",
                   0.80, "x"), _layer_speedup(1024, 2048, 1024)),
        (Published(TORCHAO_README, "H100 SXM", "FP8 tensorwise LNLinearSigmoid speedup, M,K,N = 4096,8192,16384",
                   1.39, "x"), _layer_speedup(4096, 8192, 16384)),
        (Published(MAMF, "H100 SXM", "bf16 GEMM 8192^3 against its best shape's 794.5", 794.5, "TFLOP/s"),
         _gemm_tflops("H100 SXM", "bf16", 8192, 8192, 8192)),
    ]
    for (m, n, k, groups), speedup in MOE_MXFP8.items():
        rows.append((Published(TORCHAO_MOE, "B200", f"MXFP8 grouped GEMM fwd+bwd speedup, M,N,K,G = {m},{n},{k},{groups}",
                               speedup, "x"), _moe_speedup(m, n, k, groups)))
    for (device, fmt), (tflops, (m, n, k)) in MAMF_BEST.items():
        rows.append((Published(MAMF, device, f"{fmt} GEMM, best shape M,N,K = {m},{n},{k}", tflops, "TFLOP/s"),
                     _gemm_tflops(device, fmt, m, n, k)))
    return rows


def markdown() -> str:
    """The comparison as docs/model.md shows it."""
    lines = ["| source | device | case | published | model | error |", "|---|---|---|---|---|---|"]
    for pub, predicted in comparisons():
        fmt = ".2f" if pub.unit == "x" else ".1f"
        unit = "x" if pub.unit == "x" else f" {pub.unit}"
        lines.append(f"| {pub.source} | {pub.device} | {pub.what} | {pub.measured:{fmt}}{unit} | "
                     f"{predicted:{fmt}}{unit} | {predicted / pub.measured - 1:+.1%} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    print(markdown(), end="")
