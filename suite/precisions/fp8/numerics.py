"""FP8 quantization: amax -> scale -> saturating cast, per tensor, per row or per block.

Shared by the FP8 GEMM recipes (`suite.precisions.fp8`) and the outlier sweep. The conventions are
torchao's (`torchao.float8.float8_utils`) and `torch._scaled_mm`'s:
- the quantization multiplier is `scale = fp8_max / amax` (computed in float64, stored as float32,
  amax clamped below by EPS so an all-zero tensor does not divide by zero);
- a quantized tensor keeps `inv_scale = 1 / scale`, the factor `torch._scaled_mm` takes to undo it;
- the cast saturates at +-fp8_max (eager casts before PyTorch 2.12 did not);
- `pow2=True` rounds the scale down to a power of two (torchao's rowwise recipes and TE's block
  recipe do this), so scaling changes only exponents and adds no rounding of its own.

Block scaling follows DeepSeek-V3 and TE's `Float8BlockScaling`: 1x128 blocks for activations and
gradients, 128x128 for weights. Partial edge blocks are scaled by their own amax.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

# torchao.float8.float8_utils.EPS: keeps fp8_max / amax finite for all-zero tensors, rows or blocks.
EPS = 1e-12

# e4m3 for forward operands (torchao and TE's HYBRID both use it there): 3 mantissa bits, max 448.
E4M3 = getattr(torch, "float8_e4m3fn", None)
# e5m2 (2 mantissa bits, max 57344): torchao's tensorwise recipe uses it for gradients.
E5M2 = getattr(torch, "float8_e5m2", None)

GRANULARITIES = ("tensorwise", "rowwise", "block")
ACTIVATION_BLOCK = (1, 128)
WEIGHT_BLOCK = (128, 128)


def missing_fp8_support() -> str | None:
    """Why this torch cannot run FP8 GEMMs at all, or None when it can."""
    if E4M3 is None or E5M2 is None:
        return f"torch {torch.__version__} has no float8 dtypes (torch.float8_e4m3fn needs torch >= 2.1)"
    if not hasattr(torch, "_scaled_mm"):
        return f"torch {torch.__version__} has no torch._scaled_mm"
    return None


@dataclass
class Quantized:
    """`data` (fp8) times `inv_scale` (float32, broadcast per granularity) approximates the input."""

    data: torch.Tensor
    inv_scale: torch.Tensor
    granularity: str
    block: tuple[int, int] | None = None

    def dequantize(self) -> torch.Tensor:
        """float32 values the quantized tensor stands for."""
        values = self.data.to(torch.float32)
        if self.granularity != "block":
            return values * self.inv_scale
        rows, cols = values.shape
        br, bc = self.block
        scale = self.inv_scale.repeat_interleave(br, dim=0).repeat_interleave(bc, dim=1)
        return values * scale[:rows, :cols]


def amax_to_scale(amax: torch.Tensor, dtype: torch.dtype, pow2: bool = False) -> torch.Tensor:
    """The float32 multiplier that maps `amax` onto the largest finite value of `dtype`."""
    scale = (torch.finfo(dtype).max / amax.to(torch.float64).clamp(min=EPS)).to(torch.float32)
    if pow2:
        scale = torch.exp2(torch.floor(torch.log2(scale)))
    return scale


def saturated_cast(x: torch.Tensor, scale: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """x * scale in `dtype`, clamped to its finite range instead of overflowing to NaN."""
    fmax = torch.finfo(dtype).max
    return (x.to(torch.float32) * scale).clamp(-fmax, fmax).to(dtype)


def _block_amax(x: torch.Tensor, block: tuple[int, int]) -> torch.Tensor:
    rows, cols = x.shape
    br, bc = block
    pad_r, pad_c = (-rows) % br, (-cols) % bc
    # zero padding cannot raise an amax, so edge blocks are scaled by their own values only
    padded = F.pad(x.abs().to(torch.float32), (0, pad_c, 0, pad_r))
    grid = padded.view((rows + pad_r) // br, br, (cols + pad_c) // bc, bc)
    return grid.amax(dim=(1, 3))


def quantize(
    x: torch.Tensor,
    granularity: str,
    dtype: torch.dtype | None = None,
    pow2: bool = False,
    block: tuple[int, int] = ACTIVATION_BLOCK,
) -> Quantized:
    """Quantize a 2-D tensor with one scale per tensor, per row, or per `block` (rows x cols)."""
    dtype = dtype or E4M3
    if x.dim() != 2:
        raise ValueError(f"quantize expects a 2-D tensor, got shape {tuple(x.shape)}")
    if granularity == "tensorwise":
        scale = amax_to_scale(x.abs().amax(), dtype, pow2)
        return Quantized(saturated_cast(x, scale, dtype), scale.reciprocal(), granularity)
    if granularity == "rowwise":
        scale = amax_to_scale(x.abs().amax(dim=1, keepdim=True), dtype, pow2)
        return Quantized(saturated_cast(x, scale, dtype), scale.reciprocal(), granularity)
    if granularity == "block":
        scale = amax_to_scale(_block_amax(x, block), dtype, pow2)
        rows, cols = x.shape
        full = scale.repeat_interleave(block[0], dim=0).repeat_interleave(block[1], dim=1)[:rows, :cols]
        return Quantized(saturated_cast(x, full, dtype), scale.reciprocal(), granularity, block)
    raise ValueError(f"unknown scaling granularity {granularity!r}; valid: {', '.join(GRANULARITIES)}")


def alignment_reason(k: int, n: int, multiple: int = 16) -> str | None:
    """torch._scaled_mm (cuBLASLt FP8) needs K and N to be multiples of 16; None when they are."""
    bad = [f"{name}={v}" for name, v in (("K", k), ("N", n)) if v % multiple]
    if not bad:
        return None
    return f"FP8 GEMMs need K and N to be multiples of {multiple} (cuBLASLt); got {', '.join(bad)}"


def round_up(value: int, multiple: int) -> int:
    return -(-value // multiple) * multiple
