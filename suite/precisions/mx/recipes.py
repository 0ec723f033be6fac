"""MXFP8, MXFP4 and NVFP4 through torchao (`torchao.prototype.mx_formats`, `.moe_training`).

Every GEMM operand is quantized along the GEMM's inner dimension (K): blocks of `block_size`
consecutive values share one scale (MX: an e8m0 power of two; NVFP4: an e4m3 number, 16 values,
under an optional float32 scale per tensor). Operands start where a training step has them, in
bf16 (weights stored (N, K) like nn.Linear's), as the FP8 recipes' do.

How each level runs (the record's `gemm_path` says which):
- GEMM (`gemm`): both operands become torchao tensors (MXTensor.to_mx, NVFP4Tensor.to_nvfp4) and
  `torch.mm` dispatches on them: on a Blackwell GPU to torchao's kernels (cuBLAS MXFP8,
  `F.scaled_mm` block-wise 1x32 for MXFP4, `torch._scaled_mm` for NVFP4), elsewhere to torchao's
  emulation (dequantize to bf16, then a bf16 GEMM): `torchao-emulated`. An inline case on a GPU
  quantizes with torchao's cast kernels where it has them (`cast = "fast"`, the default: MXFP8's
  triton dim0 cast for floor and rceil scales, NVFP4's mslk triton kernel), as its training
  forward does, else (`cast = "eager"`, MXFP4, MXFP8 with ceil or even scales) with its PyTorch
  quantizer: `gemm_path` is `torchao-kernel+triton-cast` or `torchao-kernel+eager-cast`. A CPU
  always runs the PyTorch quantizer (the triton kernels need a GPU).
- Linear layers (`prepare_module`): each nn.Linear becomes a `BlockScaledLinear` over its fp32
  master weight; MX formats run torchao's training GEMMs (`moe_training.mxfp8_linear.mx_mm`: all
  three GEMMs of a step quantized along their own K; emulated on a CPU); NVFP4 has no torchao
  training path but its triton kernels (`NVFP4TrainingConfig`, Blackwell only), so on a CPU its
  numerics are `qdq-fp32`: torchao's quantize-dequantize around float32 GEMMs. That recipe is plain
  1x16 NVFP4 with round-to-nearest: NVIDIA's training recipe adds 16x16 weight blocks, a random
  Hadamard transform before the weight-gradient GEMM and stochastic rounding (`te_nvfp4`).
- Grouped GEMMs (`grouped_gemm`): MXFP8 through torchao's MoE path
  (`_to_mxfp8_then_scaled_grouped_mm`, token groups in multiples of 32); MXFP4 and NVFP4 have no
  torchao grouped path but mslk kernels on Blackwell, so `qdq-fp32` on a CPU and skipped on a GPU.

On a CUDA GPU below compute capability 10.0 every case skips with the capability; CPU timings are
emulation (`emulated`), never FP8/FP4 speed.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib.util
from dataclasses import dataclass
from types import SimpleNamespace

import torch
from torch import nn

from suite.core.errors import Unsupported
from suite.precisions.base import Precision, cuda_reason
from suite.precisions.fp8.recipes import fp8_linears
from suite.precisions.mx import BLACKWELL, BlockGemmParams, MXParams, NVFP4Params

# Names of how a case's block-scaled math ran (the `gemm_path` column).
EMULATED = "torchao-emulated"  # torchao quantizes, dequantizes to bf16 and multiplies in bf16
QDQ = "qdq-fp32"  # torchao quantizes and dequantizes; the suite multiplies in float32
KERNEL = "torchao-kernel"  # the format's own GEMM kernel, through torchao
# How an inline GEMM case's casts ran on a GPU (appended to KERNEL in `gemm_path`): torchao's cast
# kernels, or its PyTorch quantizer (many small kernels; the only path for MXFP4 in torchao 0.18).
FAST_CAST, EAGER_CAST = "+triton-cast", "+eager-cast"
# The scale modes torchao's triton MXFP8 dim0 cast takes (kernels.triton_to_mxfp8_dim0, torchao 0.18).
TRITON_SCALE_MODES = ("floor", "rceil")
# The block every MX kernel uses (OCP MX v1.0; torchao asserts it on its real GEMM path).
KERNEL_BLOCK = 32
NVFP4_BLOCK = 16


@functools.lru_cache(maxsize=1)
def _torchao() -> tuple[SimpleNamespace | None, str | None]:
    """torchao's block-scaled API, or None and why it cannot be imported (torchao is optional)."""
    try:
        from torchao.prototype.moe_training.mxfp8_grouped_mm import _to_mxfp8_then_scaled_grouped_mm
        from torchao.prototype.moe_training.mxfp8_linear import mx_mm
        from torchao.prototype.mx_formats import config
        from torchao.prototype.mx_formats.mx_tensor import MXTensor
        from torchao.prototype.mx_formats.nvfp4_tensor import (NVFP4Tensor, QuantizeTensorToNVFP4Kwargs,
                                                               per_tensor_amax_to_scale)
        from torchao.quantization.quantize_.common.kernel_preference import KernelPreference
    except Exception as err:  # ImportError, or a torchao built against another torch
        return None, f"torchao's block-scaled formats are not importable: {type(err).__name__}: {err}"
    return SimpleNamespace(MXTensor=MXTensor, NVFP4Tensor=NVFP4Tensor, NVFP4Kwargs=QuantizeTensorToNVFP4Kwargs,
                           tensor_scale=per_tensor_amax_to_scale, Kernel=KernelPreference, config=config,
                           mx_mm=mx_mm, grouped_mxfp8=_to_mxfp8_then_scaled_grouped_mm), None


def ao() -> SimpleNamespace:
    api, error = _torchao()
    if error:
        raise Unsupported(error)
    return api


def capability_reason(device: torch.device) -> str | None:
    """Why `device` cannot run block-scaled kernels, or None (a CPU emulates them)."""
    return cuda_reason(device, "block-scaled formats", (int(BLACKWELL), 0),
                       f"needs compute capability {BLACKWELL:.1f}; this GPU is {{cc}}",
                       "block-scaled formats here use NVIDIA's kernels through torchao; ROCm is not wired")


def mslk_importable() -> bool:
    """Whether torchao's NVFP4 cast kernel can run: it is mslk's (torchao's own check, kernels.py).
    The GPU dry run stands in for it (suite/measure/dryrun/child.py)."""
    return importlib.util.find_spec("mslk") is not None


@dataclass(frozen=True)
class BlockScaled(Precision):
    """One block-scaled format; `element` is the value format (e4m3 or e2m1)."""

    element: str = "e4m3"
    nv: bool = False  # NVFP4 (e4m3 block scales of 16) rather than OCP MX (e8m0 scales)
    block_size: int = KERNEL_BLOCK
    scale_mode: str = "floor"
    tensor_scale: bool = True  # NVFP4 only
    cast: str = "fast"  # an inline GEMM's casts on a GPU (BlockGemmParams.cast)
    inline: bool = False  # a GEMM case's casts are timed (quantize = "inline")

    # --- support --------------------------------------------------------------------------------

    def configured(self, params):
        gemm = BlockGemmParams.of(params)
        base = dataclasses.replace(self, cast=gemm.cast, inline=gemm.quantize == "inline")
        if self.nv:
            return dataclasses.replace(base, tensor_scale=NVFP4Params.of(params).tensor_scale)
        opts = MXParams.of(params)
        return dataclasses.replace(base, block_size=opts.block_size, scale_mode=opts.scale_mode)

    def unsupported(self, device):
        missing = [name for name in ("float8_e8m0fnu", "float4_e2m1fn_x2") if not hasattr(torch, name)]
        if missing:
            return f"torch {torch.__version__} has no {' or '.join(missing)} (block-scaled formats need torch >= 2.8)"
        return _torchao()[1] or capability_reason(device) or self._block_reason(device)

    def _block_reason(self, device) -> str | None:
        # NVFP4's blocks are 16 values by design (its kernels' own size); MX kernels use 32
        kernel_block = NVFP4_BLOCK if self.nv else KERNEL_BLOCK
        if device.type == "cuda" and self.block_size != kernel_block:
            return (f"block_size = {self.block_size}: {self.name} kernels use {kernel_block}-value blocks; other "
                    "sizes run emulated on a CPU only")
        return None

    def emulated(self, device):
        return device.type != "cuda"

    def operand_bytes(self):
        return 1 if self.element == "e4m3" else 0.5  # e2m1: two values per byte

    def scale_block(self) -> int:
        return self.block_size

    def gemm_path(self, device, level):
        if device.type == "cuda":  # an inline GEMM also says which casts were timed with it
            if level == "gemm" and self.inline:
                return KERNEL + (FAST_CAST if self.fast_cast(device, self.cast) else EAGER_CAST)
            return KERNEL
        return QDQ if self.nv and level in ("layer", "grouped") or self.element == "e2m1" and level == "grouped" \
            else EMULATED

    def tokens_unsupported(self, tokens, device):
        # the weight-gradient GEMM contracts over the tokens: they form its blocks
        if tokens % self.block_size:
            return (f"the weight-gradient GEMM contracts over the tokens, quantized in blocks of {self.block_size}: "
                    f"the token count (M = {tokens}) must be a multiple of it")
        return None

    def check_inner(self, *dims: tuple[str, int]) -> None:
        bad = [f"{name}={value}" for name, value in dims if value % self.block_size]
        if bad:
            raise Unsupported(f"{self.name} quantizes along the inner dimension in blocks of {self.block_size}: "
                              f"{', '.join(bad)} is not a multiple of it")

    # --- quantization -------------------------------------------------------------------------------

    def _kernel(self, device: torch.device):
        kernel = ao().Kernel
        return kernel.AUTO if device.type == "cuda" else kernel.EMULATED

    def _elem(self):
        return torch.float8_e4m3fn if self.element == "e4m3" else torch.float4_e2m1fn_x2

    def _mode(self):
        return getattr(ao().config.ScaleCalculationMode, self.scale_mode.upper())

    def fast_cast(self, device: torch.device, cast: str = "fast") -> bool:
        """Whether an inline GEMM's casts run torchao's cast kernels on `device`: on a GPU, where
        `cast` asks for them and torchao 0.18 has one for this format (MXFP8 with floor or rceil
        scales: triton_to_mxfp8_dim0; NVFP4: to_nvfp4's use_triton_kernel). Else its PyTorch quantizer."""
        if device.type != "cuda" or cast != "fast":
            return False
        return self.nv or self.element == "e4m3" and self.scale_mode in TRITON_SCALE_MODES

    def quantize(self, x: torch.Tensor, weight: bool = False, fast: bool = False) -> torch.Tensor:
        """x (rows, K), bf16 or float32, as torchao's tensor of this format (blocks along K). On a
        GPU the scales are stored swizzled for the kernel, and an NVFP4 weight carries its
        activations' settings, which selects torchao's kernel over its dequantizing fallback.
        `fast` (`fast_cast`): torchao's cast kernel; MXFP8's leaves the scales unswizzled, swizzled
        by the GEMM's dispatch (mx_tensor._addmm_mx_dispatch), as torchao's MXFP8 training forward
        (moe_training/mxfp8_linear.py) runs it."""
        api, real = ao(), x.device.type == "cuda"
        x = x.contiguous()
        if not self.nv:
            dim0 = api.config.MXFP8Dim0CastKernelChoice
            return api.MXTensor.to_mx(x, self._elem(), self.block_size, self._mode(), self._kernel(x.device),
                                      is_swizzled_scales=real and not fast,
                                      mxfp8_dim0_cast_kernel_choice=dim0.TRITON if fast else dim0.TORCH)
        scale = api.tensor_scale(x.abs().max().float()) if self.tensor_scale else None
        act = api.NVFP4Kwargs(is_swizzled_scales=True) if real and weight else None
        return api.NVFP4Tensor.to_nvfp4(x, NVFP4_BLOCK, per_tensor_scale=scale, is_swizzled_scales=real,
                                        use_triton_kernel=fast, act_quant_kwargs=act)

    def qdq(self, x: torch.Tensor) -> torch.Tensor:
        """float32 values of x (rows, K) after quantizing to this format and back (torchao's own).
        torchao quantizes in float32 either way; a float32 input (the same values) spares its NVFP4
        path bf16 elementwise ops, which take ~18x as long on a CPU without native bf16."""
        rows = x.reshape(-1, x.shape[-1]).float()
        quantized = ao().MXTensor.to_mx(rows.contiguous(), self._elem(), self.block_size, self._mode()) \
            if not self.nv else self._nvfp4_emulated(rows)
        return quantized.dequantize(torch.float32).reshape(x.shape)

    def _nvfp4_emulated(self, x: torch.Tensor):
        api = ao()
        scale = api.tensor_scale(x.abs().max().float()) if self.tensor_scale else None
        return api.NVFP4Tensor.to_nvfp4(x.contiguous(), NVFP4_BLOCK, per_tensor_scale=scale)

    def operand_values(self, a):
        self.check_inner(("K", a.shape[-1]))
        return self.qdq(a.to(self.dtype))

    # --- GEMM ---------------------------------------------------------------------------------------

    def gemm(self, a, b, params):
        """A (M, K) @ B (K, N): both quantized along K (the weight as W = B^T, (N, K))."""
        opts = BlockGemmParams.of(params)
        self.check_inner(("K", a.shape[1]))
        a_hp, w_hp = a.to(self.dtype), b.t().contiguous().to(self.dtype)
        if opts.quantize == "pre":
            qa, qw = self.quantize(a_hp), self.quantize(w_hp, weight=True)
            return lambda: torch.mm(qa, qw.t())
        fast = self.fast_cast(a.device, opts.cast)
        if fast and self.nv and not mslk_importable():
            raise Unsupported("torchao's NVFP4 cast kernel (to_nvfp4's use_triton_kernel) needs mslk, not "
                              "importable here; cast = 'eager' times torchao's PyTorch quantizer instead")
        return lambda: torch.mm(self.quantize(a_hp, fast=fast), self.quantize(w_hp, weight=True, fast=fast).t())

    # --- layers ---------------------------------------------------------------------------------

    def prepare_module(self, module, device):
        if device.type == "cuda" and self.nv:
            raise Unsupported("torchao trains NVFP4 Linears only with its triton kernels (NVFP4TrainingConfig: "
                              "Hadamard transform, 16x16 weight blocks), not wired here; NVFP4 layer numerics "
                              "are measured on the CPU (scenarios/cpu_mx.toml)")
        linears = fp8_linears(module)
        for name in sorted(linears):
            linear = module.get_submodule(name)
            self.check_inner(("in_features", linear.in_features), ("out_features", linear.out_features))
        module, fn = module.to(device), self._linear_fn(device)
        if "" in linears:  # the module is a Linear itself
            return BlockScaledLinear(module, fn)
        for name in sorted(linears):
            parent, _, child = name.rpartition(".")
            owner = module.get_submodule(parent) if parent else module
            setattr(owner, child, BlockScaledLinear(getattr(owner, child), fn))
        return module

    def _linear_fn(self, device):
        """(x, w) -> x @ w^T with every GEMM of the step quantized along its own K."""
        if self.nv:
            return lambda x, w: QDQLinearFn.apply(x, w, self.qdq)
        api, elem, kernel = ao(), self._elem(), self._kernel(device)
        choice = api.config
        mxfp8_kernels = device.type == "cuda" and self.element == "e4m3"  # torchao's own cast kernels
        dim0 = choice.MXFP8Dim0CastKernelChoice.TRITON if mxfp8_kernels else choice.MXFP8Dim0CastKernelChoice.TORCH
        dim1 = choice.MXFP8Dim1CastKernelChoice.CUDA if mxfp8_kernels else choice.MXFP8Dim1CastKernelChoice.TORCH
        return lambda x, w: api.mx_mm.apply(x, w, elem, elem, elem, self.block_size, kernel, dim0, dim1,
                                            self._mode(), False)

    def autocast(self, device):
        # everything but the converted Linears runs as under the bf16 recipe
        return torch.autocast(device_type=device.type, dtype=self.dtype)

    # --- grouped GEMMs --------------------------------------------------------------------------

    def grouped_gemm(self, x, w, offs, params):
        """x (M, K) @ w[e] (K, N) for each expert's rows (offs: cumulative ends, int32)."""
        if BlockGemmParams.of(params).quantize == "pre":
            raise Unsupported("block-scaled grouped GEMMs quantize inside the call (torchao's MoE training path): "
                              "use quantize = 'inline'")
        self.check_inner(("K", x.shape[1]))
        experts_nk = w.transpose(1, 2).contiguous()  # (E, N, K): each expert's weight as nn.Linear holds it
        if self.element == "e4m3" and not self.nv:
            return self._grouped_mxfp8(x.to(self.dtype), experts_nk.to(self.dtype), offs)
        if x.device.type == "cuda":
            raise Unsupported(f"torchao 0.18 has no {self.name} grouped GEMM but mslk's kernels, not wired here; "
                              "its numerics are measured on the CPU (scenarios/cpu_moe.toml)")
        a_hp = x.to(self.dtype)

        def qdq_grouped() -> torch.Tensor:
            weights = torch.stack([self.qdq(expert) for expert in experts_nk.to(self.dtype)])
            return torch._grouped_mm(self.qdq(a_hp), weights.transpose(1, 2), offs=offs).to(self.dtype)

        return qdq_grouped

    def _grouped_mxfp8(self, a_hp, experts_nk, offs):
        if self.block_size != KERNEL_BLOCK:
            raise Unsupported(f"torchao's MXFP8 grouped GEMM uses {KERNEL_BLOCK}-value blocks; block_size = "
                              f"{self.block_size} is not wired")
        sizes = torch.diff(offs, prepend=offs.new_zeros(1)).tolist()
        if any(size % KERNEL_BLOCK for size in sizes):
            raise Unsupported(f"torchao's MXFP8 grouped GEMM needs every expert's token count to be a multiple of "
                              f"{KERNEL_BLOCK} (its weight-gradient blocks run along the tokens): got {sizes}; set "
                              f"align = {KERNEL_BLOCK}")
        api, kernel, mode = ao(), self._kernel(a_hp.device), self._mode()
        b_t = experts_nk.transpose(-2, -1)  # (E, K, N), column-major per expert, as the kernels need
        return lambda: api.grouped_mxfp8(a_hp, b_t, offs, kernel_preference=kernel, scale_calculation_mode=mode)


class QDQLinearFn(torch.autograd.Function):
    """y = x @ w^T where each of the step's three GEMMs multiplies its operands after a
    quantize-dequantize (`qdq`: blocks along the last dimension) along its own inner dimension, in
    float32: output (K = in_features), input gradient (K = out_features), weight gradient (K =
    tokens). Gradients come back in their inputs' dtypes."""

    @staticmethod
    def forward(ctx, x, w, qdq):
        ctx.save_for_backward(x, w)
        ctx.qdq = qdq
        return (qdq(x) @ qdq(w).t()).to(x.dtype)

    @staticmethod
    def backward(ctx, grad):
        x, w = ctx.saved_tensors
        q = ctx.qdq
        grad_x = q(grad) @ q(w.t().contiguous()).t()
        grad_w = q(grad.t().contiguous()) @ q(x.t().contiguous()).t()
        return grad_x.to(x.dtype), grad_w.to(w.dtype), None


class BlockScaledLinear(nn.Module):
    """An nn.Linear whose GEMMs run in a block-scaled format: the fp32 master weight (and bias) of
    the Linear it replaces, cast to bf16 for each step as autocast would; the GEMMs themselves run
    outside autocast (a float32 quantize-dequantize GEMM must stay float32)."""

    def __init__(self, linear: nn.Linear, fn):
        super().__init__()
        self.in_features, self.out_features = linear.in_features, linear.out_features
        self.weight, self.bias = linear.weight, linear.bias
        self.fn = fn

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shape = x.shape
        with torch.autocast(device_type=x.device.type, enabled=False):
            y = self.fn(x.reshape(-1, shape[-1]).to(torch.bfloat16), self.weight.to(torch.bfloat16))
            if self.bias is not None:
                y = y + self.bias.to(y.dtype)
        return y.reshape(*shape[:-1], self.out_features)


MXFP8 = BlockScaled("mxfp8", torch.bfloat16, element="e4m3")
MXFP4 = BlockScaled("mxfp4", torch.bfloat16, element="e2m1")
NVFP4 = BlockScaled("nvfp4", torch.bfloat16, element="e2m1", nv=True, block_size=NVFP4_BLOCK)
