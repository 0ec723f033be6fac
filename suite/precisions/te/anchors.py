"""Measurements published for this folder's recipes, which the roofline model is checked against
(this folder's `anchors` hook: `suite.analysis.roofline.published` gathers them; docs/model.md and
docs/advise.md show them).

Source: Transformer Engine's GEMM profiling guide (docs/examples/gemm_profiling/gemm_profiling.rst,
with benchmarks/gemm/benchmark_gemm.py, 2026): the 12 GEMMs of one layer of a 5B model (hidden 4096,
intermediate 16384, micro-batch 31 x sequence 512 = M 15,872 tokens; QKV 4096 -> 12288, attention
out 4096 -> 4096, MLP up 4096 -> 16384, MLP down 16384 -> 4096; each one's Fprop, Dgrad and Wgrad
shape), each timed alone with CUDA events. Autocast: one `te.Linear(K, N)` forward on an (M, K)
input under `te.autocast` per shape, so each GEMM casts both its operands with TE's kernels (the
model's `gemm_case` of a TE recipe); pre-quantized: the GEMM kernel alone (the model's GEMM time).
"Per-layer GEMM time" is the sum of the 12.

Torch-free, importing no later stage: the model (`suite.analysis.roofline.model`) is handed to it.
"""

from __future__ import annotations

TE_GUIDE = "TE GEMM profiling guide"
TOKENS = 31 * 512  # micro-batch x sequence: M
# (name, in features, out features) of the four linears of one layer
LINEARS = (("QKV", 4096, 12288), ("attention out", 4096, 4096), ("MLP up", 4096, 16384), ("MLP down", 16384, 4096))
# H200 NVL, autocast, per-layer GEMM time (ms) per recipe
H200_NVL_LAYER_MS = {"bf16": 32.014, "te_delayed": 18.978, "te_current": 20.285, "te_block": 22.882}
# speedups over bf16's per-layer GEMM time: (device, recipe, quantized) -> speedup; quantized
# "autocast" (TE's training path) or "pre" (the GEMM kernel alone)
SPEEDUPS = {("H200 NVL", "te_current", "pre"): 1.90, ("B300", "te_mxfp8", "autocast"): 1.42,
            ("B300", "te_nvfp4", "autocast"): 1.98, ("B300", "te_nvfp4", "pre"): 3.48}


def layer_shapes() -> list[tuple[str, str, int, int, int]]:
    """(linear, pass, M, K, N) of the layer's 12 GEMMs: Fprop (tokens x in) @ (in x out), Dgrad
    (tokens x out) @ (out x in), Wgrad (out x tokens) @ (tokens x in)."""
    return [shape for name, fan_in, fan_out in LINEARS for shape in (
        (name, "fprop", TOKENS, fan_in, fan_out), (name, "dgrad", TOKENS, fan_out, fan_in),
        (name, "wgrad", fan_out, TOKENS, fan_in))]


def layer_time(model, device: str, precision: str, quantized: str) -> float:
    """The model's per-layer GEMM time (s) as the guide times it: autocast, or the GEMMs alone."""
    gpu = model.gpu_device(device)
    times = [model.predict(model.gemm_case(precision, m, k, n, {}), gpu) for _, _, m, k, n in layer_shapes()]
    return sum(p.seconds if quantized == "autocast" else p.gemm_s for p in times)


def anchors(model) -> list[tuple]:
    """(source, device, case, published, unit, the model's value) per measurement."""
    rows = [(TE_GUIDE, "H200 NVL", f"5B layer's 12 GEMMs, {precision} autocast, per-layer time", ms, "ms",
             layer_time(model, "h200 nvl", precision, "autocast") * 1e3) for precision, ms in H200_NVL_LAYER_MS.items()]
    for (device, precision, quantized), speedup in SPEEDUPS.items():
        predicted = layer_time(model, device, "bf16", quantized) / layer_time(model, device, precision, quantized)
        rows.append((TE_GUIDE, device, f"5B layer's 12 GEMMs, {precision} {quantized} speedup over bf16",
                     speedup, "x", predicted))
    return rows
