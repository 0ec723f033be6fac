"""Block-scaled formats through torchao (`recipes`): MXFP8 and MXFP4 (OCP Microscaling: e4m3 or
e2m1 values, one power-of-two e8m0 scale per 32 values) and NVFP4 (e2m1 values, one e4m3 scale per
16 values, optionally under one float32 scale per tensor), from `torchao.prototype.mx_formats`.

Numerics run on any machine (torchao's emulated GEMM: dequantize, then a bf16 GEMM; or the suite's
quantize-dequantize around a float32 GEMM where torchao has no emulated path: a record's `numerics`
column says which); real kernels need compute capability 10.x (Blackwell), and a CUDA GPU below
that skips with the capability. Transformer Engine's recipes of the same formats are `te_mxfp8` and
`te_nvfp4` (suite/precisions/te)."""

from typing import Literal

from pydantic import Field

from suite.precisions.fp8 import TORCHAO
from suite.scenario.declare import Hooks, PrecisionRecord
from suite.scenario.params import Params, PositiveInt


class BlockGemmParams(Params):
    """torchao's block-scaled formats (`mxfp8`, `mxfp4`, `nvfp4`)."""

    quantize: Literal["pre", "inline"] = Field(
        "pre", description="GEMM cases: pre = operands quantized once, outside the timing; inline = the casts "
                           "are timed with the GEMM, as in training (grouped GEMMs quantize inline only)")
    cast: Literal["fast", "eager"] = Field(
        "fast", description="GEMM cases with quantize = inline on a GPU: fast = torchao's cast kernels where it has "
                            "them (MXFP8 with floor or rceil scales: its triton dim0 cast; NVFP4: use_triton_kernel, "
                            "mslk's kernel, skipped where mslk is not importable); eager = torchao's PyTorch "
                            "quantizer (many small kernels), timed on purpose. MXFP4, and MXFP8 with ceil or even "
                            "scales, have no fast cast in torchao 0.18 and run eager; so does every CPU case. The "
                            "record's gemm_path says which ran")


class MXParams(BlockGemmParams):
    """OCP Microscaling formats through torchao (`mxfp8`, `mxfp4`)."""

    block_size: PositiveInt = Field(
        32, description="values sharing one e8m0 scale, along the GEMM's inner dimension; the OCP spec and every "
                        "kernel use 32 (other sizes run emulated only, to show what the block size buys)")
    scale_mode: Literal["floor", "rceil", "ceil", "even"] = Field(
        "floor", description="how a block's amax becomes its power-of-two scale (torchao ScaleCalculationMode): "
                             "floor is the OCP spec's rule and torchao's to_mx default (the block maximum may "
                             "clip), rceil rounds the scale up so nothing clips (cuBLAS, torchao's training default)")


class NVFP4Params(BlockGemmParams):
    """NVFP4 through torchao (`nvfp4`): blocks are always 16 values."""

    tensor_scale: bool = Field(
        True, description="a float32 scale per tensor above the e4m3 block scales (amax / (448 * 6), NVIDIA's "
                          "two-level recipe); false: block scales alone")


CODE = "suite.precisions.mx.recipes"
# Blackwell (sm_100) and later: torchao's own gate for its MX and NVFP4 kernels is
# torchao.utils.is_sm_at_least_100() (prototype/mx_formats, torchao 0.18).
BLACKWELL = 10.0
PRECISIONS = {
    "mxfp8": PrecisionRecord(
        f"{CODE}:MXFP8", MXParams, "fp8", scaling="microscaled", min_cc=BLACKWELL, libraries=(TORCHAO,),
        description="torchao MXFP8: e4m3 values, one e8m0 (power-of-two) scale per 32 values"),
    "mxfp4": PrecisionRecord(
        f"{CODE}:MXFP4", MXParams, "fp4", scaling="microscaled", min_cc=BLACKWELL, libraries=(TORCHAO,),
        description="torchao MXFP4: e2m1 values, one e8m0 (power-of-two) scale per 32 values"),
    "nvfp4": PrecisionRecord(
        f"{CODE}:NVFP4", NVFP4Params, "fp4", scaling="microscaled", min_cc=BLACKWELL, libraries=(TORCHAO,),
        description="torchao NVFP4: e2m1 values, one e4m3 scale per 16 values under a float32 tensor scale"),
}
# the roofline model's cast kernels per scaling kind (`casts`); measurements published for these
# recipes, which the model is checked against (`anchors`)
HOOKS = Hooks(scalings={
    "microscaled": "suite.precisions.mx.casts:MICROSCALED",
},
              anchors=("suite.precisions.mx.anchors:anchors",))
