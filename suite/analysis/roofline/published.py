"""The roofline model against published measurements: each one with its source, the model's
prediction for the same case and the error. `python -m suite.analysis.roofline.published` prints the
table docs/model.md holds (a test fails when they differ).

A recipe's measurements are its folder's (`suite.scenario.declare.Hooks.anchors`: torchao's float8
README in `suite/precisions/fp8/anchors.py`, its MoE training README in `suite/precisions/mx/`),
gathered here in folder order. The format-level ones are here:

- mamf-finder (stas00/ml-engineering, compute/accelerator/README.md, "Maximum Achievable Matmul
  FLOPS comparison table"): the best bf16 and FP8 (e4m3) matmul TFLOP/s found per GPU, with the
  shape it was found at (M x N x K as printed there), a mean of 100 iterations after 50 warm-up.
"""

from __future__ import annotations

from dataclasses import dataclass

from suite.analysis.roofline import model
from suite.scenario import registry

MAMF = "mamf-finder (ml-engineering)"


@dataclass(frozen=True)
class Published:
    source: str
    device: str  # a peak-table name
    what: str
    measured: float
    unit: str  # "x" (speedup) or "TFLOP/s"


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


def comparisons() -> list[tuple[Published, float]]:
    """Each published measurement with the model's prediction of the same case: the folders' (in
    folder order), then mamf-finder's."""
    rows = [(Published(*row[:5]), row[5]) for anchors in registry.hooks("anchors") for row in anchors(model)]
    rows.append((Published(MAMF, "H100 SXM", "bf16 GEMM 8192^3 against its best shape's 794.5", 794.5, "TFLOP/s"),
                 _gemm_tflops("H100 SXM", "bf16", 8192, 8192, 8192)))
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
