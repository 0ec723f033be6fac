"""The roofline model's cast kernels for this folder's scaling kinds (its `scalings` hook:
`suite.scenario.declare.Casts`), torch-free and handed the model (`suite.analysis.roofline.model`).

Bytes per kernel as torchao counts them: compiled, its benchmarks/float8/float8_roofline.py via
torchao/testing/training/roofline_utils.py; eager, one kernel per op of torchao's float8_utils /
float8_training_tensor (this suite's fp8 numerics run the same ops). docs/model.md has the sources.
"""

from __future__ import annotations

from suite.scenario.declare import Casts


def _tensorwise_fused(model, role: str, e: float, s: int, first: int, width: float) -> list:
    """An amax pass, the scale, then the cast to both layouts (the weight's twice, one per layout)."""
    amax = [] if first == 0 else [model.Kernel("cast", f"{role} amax", s * e)]
    casts = [model.Kernel("cast", f"{role} cast", (s + 1) * e)] * 2 if role == "weight" \
        else [model.Kernel("cast", f"{role} cast (both layouts)", (s + 2) * e)]
    return amax + model.tiny(f"{role} scale") + casts


def _rowwise_fused(model, role: str, e: float, s: int, first: int, width: float) -> list:
    """Per-row scales need the whole row: a bf16 transpose, then its cast."""
    if role == "weight":
        return [model.Kernel("cast", "weight cast", (s + 1) * e), model.Kernel("cast", "weight transpose", (s + 2) * e),
                model.Kernel("cast", "weight transposed cast", 3 * e)]
    return [model.Kernel("cast", f"{role} cast and transpose", (first + 3) * e),
            model.Kernel("cast", f"{role} transposed cast", 3 * e)]


def _gw_hp_fused(model, role: str, e: float, s: int, first: int, width: float) -> list:
    """The weight-gradient GEMM stays bf16: one layout."""
    if role == "weight":
        return [model.Kernel("cast", "weight cast", (s + 1) * e), *model.tiny("weight tensorwise scale"),
                model.Kernel("cast", "weight transposed cast", (s + 1) * e)]
    return [model.Kernel("cast", f"{role} cast", (first + 1) * e)]


def _eager(pow2: bool):
    """One eager dynamic cast; torchao's rowwise recipes round scales to powers of two."""
    return lambda model, role, e, s, width: model.eager_cast(role, e, s, pow2=pow2)


def _layer(pow2: bool, uses: dict, copies: tuple):
    """Eager torchao casts each operand once per GEMM that uses it (`uses`) and copies the FP8
    operands `copies` into the layout _scaled_mm needs."""
    def layer(model, tensors, width: float) -> list:
        out = [c for role, e, s in tensors for _ in range(uses[role]) for c in model.eager_cast(role, e, s, pow2)]
        elements = {role: e for role, e, _ in tensors}
        return out + [model.Kernel("cast", f"{role} layout copy", 2.0 * elements[role]) for role in copies]
    return layer


def _rowwise_output(model, opts, m: int, n: int) -> list:
    """Rowwise without fast accumulation (fp8._matmul here, as torchao's training path): the
    tensorwise kernel, then the outer product of the scales applied to its bf16 output."""
    if opts.fast_accum():
        return []
    return [model.Kernel("cast", "row x column scales", 4.0 * m * n),
            model.Kernel("cast", "output scaling", 10.0 * m * n), model.Kernel("cast", "output to bf16", 6.0 * m * n)]


def quantized_inline(opts) -> bool:
    """A GEMM case casts A and B^T in the timed call where its `quantize` parameter says so."""
    return opts.quantize == "inline"


EVERY_GEMM = {"input": 2, "weight": 2, "grad_output": 2}
ALL_COPIES = ("weight", "grad_output", "input")
TENSORWISE = Casts(_tensorwise_fused, _eager(False), _layer(False, EVERY_GEMM, ALL_COPIES), inline=quantized_inline)
ROWWISE = Casts(_rowwise_fused, _eager(True), _layer(True, EVERY_GEMM, ALL_COPIES), output=_rowwise_output,
                inline=quantized_inline)
# four casts: the weight-gradient GEMM is bf16
GW_HP_GEMMS = {"input": 1, "weight": 2, "grad_output": 1}
ROWWISE_WITH_GW_HP = Casts(_gw_hp_fused, _eager(True), _layer(True, GW_HP_GEMMS, ("weight",)), inline=quantized_inline)
