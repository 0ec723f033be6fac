"""FP8 recipes on PyTorch's own kernels: `torch._scaled_mm` for GEMMs, torchao for layers.

- `fp8_tensorwise`, `fp8_rowwise`, `fp8_rowwise_gw_hp`: torchao's three float8 training recipes
  (`Float8LinearConfig.from_recipe_name`). A GEMM case runs the recipe's forward GEMM with
  `torch._scaled_mm`: e4m3 operands, one scale per tensor (tensorwise) or per row of A and per
  column of B (rowwise; `rowwise_with_gw_hp` differs from `rowwise` only in its backward GEMMs).
  Rowwise scales are rounded down to powers of two, as torchao's rowwise recipes do.
- `fp8_block`: 1x128 activation / 128x128 weight block scaling (DeepSeek-V3, TE's
  Float8BlockScaling) quantized for real but multiplied by dequantizing into a float32 GEMM, on
  every device: its numerics are real, its timing never is (`emulated` is always True). Block
  scaling's speed is measured by `te_block`.

Layers (`prepare_module`): torchao's `convert_to_float8_training` swaps every nn.Linear but a
model's `high_precision_modules` for a Float8Linear of the recipe; weights stay fp32 masters and the
forward runs under bf16 autocast, exactly as with the bf16 recipe. `pad = true` sets torchao's
`pad_inner_dim`; without it a Linear whose dims are not multiples of 16 skips the case.

FP8 tensor cores need compute capability >= 8.9 (Ada, Hopper). On a CPU, `torch._scaled_mm` and
torchao's `emulate=True` give the same FP8 numerics; those timings are emulation, not FP8 speed.

GEMM case parameters (`params` in a scenario):
- `quantize`: "pre" (default) quantizes the operands before timing, so the time is the FP8 kernel's;
  "inline" times amax + scale + cast + GEMM, what one training-step GEMM pays.
- `use_fast_accum` (default: unset, which is fast): cuBLASLt's fast FP8 accumulation. torchao uses
  it for the forward GEMM (torchao/float8/config.py, Float8LinearConfig.gemm_config_output) and for
  every GEMM of its FP8 MoE grouped GEMMs (prototype/moe_training/fp8_grouped_mm.py), not for the
  two gradient GEMMs of a Linear; false times those (rowwise: the unit-scale kernel, then the scales).
- `pad` (default false): K or N not a multiple of 16 is skipped unless `pad = true`, which pads
  with zeros (inside the timed call when quantize = "inline", as torchao's `pad_inner_dim` does).
"""

from __future__ import annotations

import dataclasses
import importlib.metadata
from dataclasses import dataclass
from typing import Callable

import torch
import torch.nn.functional as F

from suite.precisions.fp8 import numerics as q
from suite.core.errors import Unsupported
from suite.precisions.fp8 import FP8GemmParams, FP8TensorwiseParams
from suite.precisions import gates
from suite.precisions.base import Precision, cuda_reason
from suite.precisions.grouped import grouped_mm



def fp8_device_reason(device: torch.device) -> str | None:
    """Why `device` cannot run FP8 GEMMs, or None. CPUs can (emulation: real numerics)."""
    need = gates.FORMAT_MIN_CC["fp8"]
    return q.missing_fp8_support() or cuda_reason(
        device, "FP8 recipes", gates.capability(need),
        f"FP8 tensor cores need compute capability >= {need:.1f} (Ada, Hopper); this GPU is {{cc}}",
        "FP8 recipes here use NVIDIA's float8_e4m3fn; ROCm GPUs use the e4m3fnuz variant")


def scaled_grouped_reason(device: torch.device) -> str | None:
    """Why `device` cannot run FP8 rowwise grouped GEMMs, or None (a CPU emulates them). torch's own
    gate for torch._scaled_grouped_mm is compute capability 9.x or 10.x exactly
    (aten/src/ATen/native/cuda/GroupedBlas.cpp, _scaled_mm_allowed_device): not 8.9, not 12.0."""
    if device.type != "cuda":
        return None
    if not hasattr(torch, "_scaled_grouped_mm"):
        return f"torch {torch.__version__} has no torch._scaled_grouped_mm (PyTorch 2.8 or newer)"
    major, minor = torch.cuda.get_device_capability(device)
    if major not in (9, 10):
        return f"torch._scaled_grouped_mm needs compute capability 9.0 or 10.x; this GPU is {major}.{minor}"
    return None


def _cpu_rowwise(a: torch.Tensor, b: torch.Tensor, scale_a: torch.Tensor,
                 scale_b: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """On the CPU, one scale per tensor broadcast to every row of A and column of B: the same
    quantized operands and float32-accumulated product (tests check it against the tensorwise
    kernel), through the rowwise kernel. torch 2.13's CPU tensorwise kernel is a slow reference loop
    (1.5 s for 256x512x384, ~500x its rowwise kernel), and with dispatch lowered to AVX2
    (ATEN_CPU_CAPABILITY=avx2 ONEDNN_MAX_CPU_ISA=AVX2) it fails outright once the process has run a
    bf16 matmul: "could not create a primitive descriptor for the matmul primitive". CPU timings
    are emulation."""
    if a.device.type != "cpu" or scale_a.dim() != 0:
        return scale_a, scale_b
    return scale_a.expand(a.shape[0], 1).contiguous(), scale_b.expand(1, b.shape[1]).contiguous()


def _pad2d(x: torch.Tensor, rows: int, cols: int) -> torch.Tensor:
    if x.shape == (rows, cols):
        return x
    return F.pad(x, (0, cols - x.shape[1], 0, rows - x.shape[0]))


def _torchao_float8():
    """torchao.float8, or Unsupported with the import error (torchao is an optional dependency)."""
    try:
        import torchao.float8 as ao_float8
    except Exception as err:  # ImportError, or a torchao built against another torch
        raise Unsupported(f"torchao is not importable: {type(err).__name__}: {err}") from None
    return ao_float8


@dataclass(frozen=True)
class ScaledFloat8(Precision):
    """An FP8 recipe whose forward GEMM is one `torch._scaled_mm` call."""

    granularity: str = "tensorwise"  # of both forward GEMM operands
    pow2_scales: bool = False
    torchao_recipe: str | None = None  # Float8LinearRecipeName value used for layers
    pad: bool = False  # layers: torchao's pad_inner_dim (from params via `configured`)
    # layers under FSDP2: torchao's enable_fsdp_float8_all_gather (weights gathered in float8;
    # tensorwise only: params.fp8_all_gather). Without FSDP2 it changes nothing but the weights' wrapper.
    fsdp_float8_all_gather: bool = False

    def unsupported(self, device):
        return fp8_device_reason(device)

    def emulated(self, device):
        return device.type != "cuda"

    def configured(self, params):
        gather = self.torchao_recipe == "tensorwise" and FP8TensorwiseParams.of(params).fp8_all_gather
        return dataclasses.replace(self, pad=FP8GemmParams.of(params).pad, fsdp_float8_all_gather=gather)

    def tokens_unsupported(self, tokens, device):
        # In a training step the weight-gradient GEMM, dW = dY^T X, contracts over the tokens, and
        # torch._scaled_mm on CUDA needs its inner dimension to be a multiple of 16 (tensorwise and
        # rowwise alike); rowwise_with_gw_hp keeps that GEMM in bf16.
        if device.type == "cuda" and self.torchao_recipe in ("tensorwise", "rowwise") and tokens % 16:
            return (f"torchao's {self.torchao_recipe} FP8 training needs the token count (M = {tokens}) to be a "
                    "multiple of 16: its weight-gradient torch._scaled_mm contracts over the tokens")
        return None

    def operand_bytes(self):
        return 1  # float8 operands; the bf16 output is counted at the precision's dtype

    def operand_values(self, a):
        return q.quantize(a.to(self.dtype), self.granularity, q.E4M3, self.pow2_scales, q.ACTIVATION_BLOCK).dequantize()

    def scale_block(self):
        return q.ACTIVATION_BLOCK[1] if self.granularity == "block" else None

    # --- GEMM level -----------------------------------------------------------------------------

    def _quantize(self, a_hp: torch.Tensor, w_hp: torch.Tensor) -> tuple[q.Quantized, q.Quantized]:
        """A (M, K) and the weight W (N, K) = B^T, each scaled along K: per row for rowwise."""
        return (
            q.quantize(a_hp, self.granularity, q.E4M3, self.pow2_scales, q.ACTIVATION_BLOCK),
            q.quantize(w_hp, self.granularity, q.E4M3, self.pow2_scales, q.WEIGHT_BLOCK),
        )

    def _matmul_fn(self, qa: q.Quantized, qw: q.Quantized, use_fast_accum: bool) -> Callable[[], torch.Tensor]:
        """The forward GEMM of quantized operands as a call. What does not change between calls
        (the scales' layout, unit scales) is set up here, once; each call runs what torchao's
        `float8_ops.addmm_float8_unwrapped` runs per call (torchao 0.18), nothing more."""
        # b must be column-major: W (N, K) is row-major, so W^T is the (K, N) column-major view.
        # Rowwise scales: (M, 1) for A and (1, N) for B; tensorwise: 0-d. Both are inverse scales.
        a, b = qa.data, qw.data.t()
        scale_a = qa.inv_scale
        scale_b = qw.inv_scale.t().contiguous() if qw.inv_scale.dim() == 2 else qw.inv_scale
        if scale_a.dim() == 2 and not use_fast_accum:
            # torchao's path for rowwise scales without fast accumulation: the tensorwise kernel with
            # unit scales, then the (M, N) product of the row and column scales multiplied into its
            # bf16 output in place (no second M x N temporary).
            unit_a, unit_b = _cpu_rowwise(a, b, scale_a.new_ones(()), scale_b.new_ones(()))

            def unit_kernel_then_scales() -> torch.Tensor:
                out = torch._scaled_mm(a, b, unit_a, unit_b, out_dtype=torch.bfloat16, use_fast_accum=False)
                out *= scale_a * scale_b
                return out

            return unit_kernel_then_scales
        scale_a, scale_b = _cpu_rowwise(a, b, scale_a, scale_b)
        return lambda: torch._scaled_mm(a, b, scale_a, scale_b, out_dtype=torch.bfloat16, use_fast_accum=use_fast_accum)

    def _matmul(self, qa: q.Quantized, qw: q.Quantized, use_fast_accum: bool) -> torch.Tensor:
        return self._matmul_fn(qa, qw, use_fast_accum)()

    def check_alignment(self, k: int, n: int, pad: bool) -> None:
        reason = q.alignment_reason(k, n)
        if reason and not pad:
            raise Unsupported(f"{reason}; set pad = true to pad with zeros")

    def gemm(self, a, b, params) -> Callable[[], torch.Tensor]:
        if self.fsdp_float8_all_gather:
            raise Unsupported("fp8_all_gather is a setting of FSDP2-sharded models (dist_train_step); a GEMM "
                              "has no all-gather")
        opts = FP8GemmParams.of(params)
        m, k = a.shape
        n = b.shape[1]
        self.check_alignment(k, n, opts.pad)
        kp, np_ = (q.round_up(k, 16), q.round_up(n, 16)) if opts.pad else (k, n)
        # Operands start where a training step has them: bf16 activations and weights, the weight
        # stored (N, K) like nn.Linear's. Padding with zeros changes no amax.
        a_hp = a.to(self.dtype)
        w_hp = b.t().contiguous().to(self.dtype)
        fast = opts.fast_accum()

        if opts.quantize == "pre":
            qa, qw = self._quantize(_pad2d(a_hp, m, kp), _pad2d(w_hp, np_, kp))
            multiply = self._matmul_fn(qa, qw, fast)  # the scales' layout is set up before timing
            if np_ == n:
                return multiply
            return lambda: multiply()[:, :n]

        def quantize_and_multiply():
            qa, qw = self._quantize(_pad2d(a_hp, m, kp), _pad2d(w_hp, np_, kp))
            out = self._matmul(qa, qw, fast)
            return out if np_ == n else out[:, :n]

        return quantize_and_multiply

    # --- grouped GEMMs (MoE experts) ---------------------------------------------------------------

    def grouped_gemm(self, x, w, offs, params):
        """Every expert's GEMM in one call, rowwise scaled: A per row (M,), each expert's weight per
        output column (E, N), as torchao's FP8 MoE training does. On compute capability 9.x and
        10.x `torch._scaled_grouped_mm` (bf16 out); on a CPU the same quantized operands,
        dequantized into a float32 `torch._grouped_mm` (emulation: real numerics)."""
        if self.granularity != "rowwise":
            raise Unsupported(f"{self.name}: FP8 grouped GEMMs take rowwise scales (torch._scaled_grouped_mm, "
                              "torchao's FP8 MoE training): the rowwise recipes run them")
        opts = FP8GemmParams.of(params)
        experts, k, n = w.shape
        self.check_alignment(k, n, pad=False)
        reason = scaled_grouped_reason(x.device)
        if reason or opts.pad:
            raise Unsupported(reason or "pad is a setting of single GEMMs; grouped GEMMs need K and N aligned")
        a_hp, w_nk = x.to(self.dtype), w.transpose(1, 2).contiguous().to(self.dtype)  # (E, N, K)

        def quantized() -> tuple[q.Quantized, q.Quantized]:
            return (q.quantize(a_hp, "rowwise", q.E4M3, self.pow2_scales),
                    q.quantize(w_nk.reshape(experts * n, k), "rowwise", q.E4M3, self.pow2_scales))

        def multiply(qa: q.Quantized, qw: q.Quantized) -> torch.Tensor:
            if x.device.type == "cuda":
                b = qw.data.view(experts, n, k).transpose(-2, -1)  # column-major per expert
                return torch._scaled_grouped_mm(qa.data, b, qa.inv_scale.view(-1), qw.inv_scale.view(experts, n),
                                                offs=offs, out_dtype=torch.bfloat16,
                                                use_fast_accum=opts.fast_accum())
            b = qw.dequantize().view(experts, n, k).transpose(-2, -1)
            return grouped_mm(qa.dequantize(), b, offs).to(torch.bfloat16)

        if opts.quantize == "pre":
            operands = quantized()
            return lambda: multiply(*operands)
        return lambda: multiply(*quantized())

    # --- layer level (torchao) ------------------------------------------------------------------

    def prepare_module(self, module, device):
        if self.torchao_recipe is None:
            raise Unsupported(f"{self.name} is a GEMM-level recipe only (no torchao layer for it)")
        ao = _torchao_float8()
        try:
            config = ao.Float8LinearConfig.from_recipe_name(self.torchao_recipe)
        except (AttributeError, AssertionError, ValueError) as err:
            version = _dist_version("torchao")
            raise Unsupported(
                f"torchao {version} has no float8 recipe {self.torchao_recipe!r}: {type(err).__name__}: {err}"
            ) from None
        # emulate=True: torchao's CPU path (real FP8 casts, float32 matmul); CUDA uses _scaled_mm.
        config = dataclasses.replace(config, emulate=device.type != "cuda", pad_inner_dim=self.pad,
                                     enable_fsdp_float8_all_gather=self.fsdp_float8_all_gather)
        linears = fp8_linears(module)
        for name in sorted(linears):
            mod = module.get_submodule(name)
            self.check_alignment(mod.in_features, mod.out_features, self.pad)
        # fp32 master weights under torch.autocast(bf16) (see `autocast`), as torchtitan trains
        # without FSDP and as the bf16 recipe here does: FP8 and bf16 then differ only in the Linear
        # GEMMs. Float8Linear casts its input to the CUDA autocast dtype, so its output is bf16.
        module = module.to(device)
        return ao.convert_to_float8_training(
            module, config=config, module_filter_fn=lambda mod, fqn: fqn in linears
        )

    def autocast(self, device):
        # Everything outside the converted Linears (norms, attention, activations) runs as under
        # the bf16 recipe. On a CPU, Float8Linear reads only the CUDA autocast state, so its input
        # keeps the dtype it arrives in: same FP8 quantization, output rounded at the end or not.
        return torch.autocast(device_type=device.type, dtype=self.dtype)


def fp8_linears(module: torch.nn.Module) -> set[str]:
    """Names of the nn.Linear layers an FP8 recipe converts: all but those under the model's
    `high_precision_modules` (e.g. an lm_head, which training recipes keep in bf16)."""
    keep = tuple(getattr(module, "high_precision_modules", ()))
    names = {
        name for name, mod in module.named_modules()
        if isinstance(mod, torch.nn.Linear) and not any(name == k or name.startswith(k + ".") for k in keep)
    }
    if not names:
        raise Unsupported("the module has no nn.Linear for an FP8 recipe to convert")
    return names


def _dist_version(name: str) -> str:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return "(version unknown)"


@dataclass(frozen=True)
class EmulatedBlockFloat8(ScaledFloat8):
    """Block-scaled FP8 quantization with a float32 GEMM of the dequantized operands."""

    def unsupported(self, device):
        return q.missing_fp8_support()

    def emulated(self, device):
        return True  # the GEMM runs in float32 everywhere: never FP8 speed

    def check_alignment(self, k, n, pad):
        return None  # dequantized operands have no FP8 kernel's shape constraints

    def _matmul_fn(self, qa, qw, use_fast_accum):
        # Per-block scales applied before a float32 GEMM: what a block-scaled kernel computes up
        # to summation order (it applies the scales to each 128-wide partial sum in float32).
        return lambda: (qa.dequantize() @ qw.dequantize().t()).to(torch.bfloat16)


FP8_TENSORWISE = ScaledFloat8(
    "fp8_tensorwise",
    torch.bfloat16,
    granularity="tensorwise",
    torchao_recipe="tensorwise",
)
FP8_ROWWISE = ScaledFloat8(
    "fp8_rowwise",
    torch.bfloat16,
    granularity="rowwise",
    pow2_scales=True,
    torchao_recipe="rowwise",
)
FP8_ROWWISE_GW_HP = ScaledFloat8(
    "fp8_rowwise_gw_hp",
    torch.bfloat16,
    granularity="rowwise",
    pow2_scales=True,
    torchao_recipe="rowwise_with_gw_hp",
)
FP8_BLOCK = EmulatedBlockFloat8(
    "fp8_block",
    torch.bfloat16,
    granularity="block",
    pow2_scales=True,
)
