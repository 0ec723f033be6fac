"""An independent quantize-dequantize of the block-scaled formats in plain torch (no torchao), from
the specifications: OCP Microscaling Formats (MX) v1.0 (e8m0 block scales, element formats e4m3
and e2m1; the "floor" scale rule X = 2^(floor(log2 amax) - emax_elem)), cuBLAS's "rceil" rule
(X = 2^ceil(log2(amax / max_elem)), docs.nvidia.com/cuda/cublas, "D block quantization"), and
NVIDIA's NVFP4 (e2m1 values, an e4m3 scale per 16, optionally under a float32 tensor scale
amax / (448 * 6)). The tests hold torchao's numbers against it, bit for bit.

Conventions where the specs leave a choice, as torchao 0.18 makes it: block scales below the
float32 minimum normal are raised to it; an all-zero block gets the smallest scale; NVFP4 block
scales are clamped to e4m3's smallest *normal* (2^-6) and to 448.
"""

from __future__ import annotations

import torch

E4M3 = dict(ebits=4, mbits=3, maxval=448.0, emax=8)  # emax: the largest power of two (OCP emax_elem)
E2M1 = dict(ebits=2, mbits=1, maxval=6.0, emax=2)


def round_minifloat(v: torch.Tensor, ebits: int, mbits: int, maxval: float, **_) -> torch.Tensor:
    """float32 rounded to the nearest value of a saturating minifloat (no inf or nan), ties to even."""
    emin = 1 - (2 ** (ebits - 1) - 1)  # exponent of the smallest normal
    a = v.abs().clamp(max=maxval)
    _, e = torch.frexp(a)  # a = m * 2**e, m in [0.5, 1)
    ulp = torch.exp2((torch.clamp(e - 1, min=emin) - mbits).float())
    return torch.sign(v) * (torch.round(a / ulp) * ulp).clamp(max=maxval)  # torch.round: half to even


def mx_qdq(x: torch.Tensor, fmt: dict = E4M3, block: int = 32, mode: str = "floor") -> torch.Tensor:
    """MX quantize-dequantize along the last dimension."""
    xb = x.float().reshape(*x.shape[:-1], x.shape[-1] // block, block)
    amax = xb.abs().amax(-1, keepdim=True)
    mantissa, exponent = torch.frexp(amax)
    floor_log2 = exponent - 1
    if mode == "floor":
        se = floor_log2 - fmt["emax"]
    elif mode == "rceil":
        se = torch.ceil(torch.log2(amax / fmt["maxval"])).int()
    elif mode == "ceil":
        se = floor_log2 + ((2 * mantissa) > 1).int() - fmt["emax"]
    else:
        raise ValueError(mode)
    se = torch.where(amax == 0, torch.full_like(se, -127), se.clamp(-127, 127))
    scale = torch.exp2(se.float()).clamp(min=2.0 ** -126)
    return (round_minifloat(xb / scale, **fmt) * scale).reshape(x.shape)


def nvfp4_qdq(x: torch.Tensor, tensor_scale: bool = True, block: int = 16) -> torch.Tensor:
    """NVFP4 quantize-dequantize along the last dimension, the tensor scale from x's own amax."""
    xb = x.float().reshape(*x.shape[:-1], x.shape[-1] // block, block)
    block_scale = xb.abs().amax(-1, keepdim=True) / 6.0
    tiny = 2.0 ** -6
    if not tensor_scale:
        s8 = block_scale.clamp(tiny, 448.0).to(torch.float8_e4m3fn).float()
        y, s = xb * (1.0 / s8), s8
    else:
        pts = x.abs().max().float() / (448.0 * 6.0)
        s8 = (block_scale / pts).clamp(tiny, 448.0).to(torch.float8_e4m3fn).float()
        y, s = xb * ((1.0 / pts) / s8), pts * s8  # torchao's order of float operations
    return (round_minifloat(y.clamp(-6.0, 6.0), **E2M1) * s).reshape(x.shape)


def tensorwise_fp8_qdq(x: torch.Tensor) -> torch.Tensor:
    s = x.abs().max().float() / 448.0
    return (x.float() / s).to(torch.float8_e4m3fn).float() * s
