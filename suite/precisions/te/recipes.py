"""NVIDIA Transformer Engine recipes: `te.Linear` under TE's autocast with one recipe each.

| name         | TE recipe (transformer_engine.common.recipe) | needs                        |
|--------------|----------------------------------------------|------------------------------|
| `te_delayed` | DelayedScaling: scale from an amax history   | compute capability >= 8.9    |
| `te_current` | Float8CurrentScaling: scale from this tensor | compute capability >= 8.9    |
| `te_block`   | Float8BlockScaling: 1x128 / 128x128 blocks   | >= 9.0 and CUDA >= 12.9      |
| `te_mxfp8`   | MXFP8BlockScaling: 32-element blocks, e8m0   | >= 10.0 (Blackwell)          |
| `te_nvfp4`   | NVFP4BlockScaling: fp4 e2m1, 16-element blocks | >= 10.0 (Blackwell)        |

Transformer Engine is optional: where it cannot be imported, every TE case is skipped with the
import error as the reason. TE runs on CUDA only. Capability rules are TE's own
(`transformer_engine/pytorch/quantization.py`: `_compute_fp8_support` and friends); where the
installed TE exposes `is_*_available(return_reason=True)`, its verdict is used as well.

Case parameters (`params`), read by `configured` (layers) and `gemm`:
- DelayedScaling: `fp8_format` ("HYBRID": e4m3 forward / e5m2 backward, or "E4M3"),
  `amax_history_len`, `amax_compute_algo` ("max" or "most_recent"), `margin` (TE's defaults:
  HYBRID, 1024, "max", 0). Float8CurrentScaling, Float8BlockScaling and MXFP8BlockScaling take
  `fp8_format` too. A parameter meant for another recipe is ignored.
- `use_fast_accum`: the forward GEMM's accumulation (TE: `fp8_gemm_fprop.use_split_accumulator`,
  its inverse). Only current and block scaling expose it; the other recipes always accumulate the
  forward GEMM the fast way (TE's `_2X_ACC_FPROP = False`), so `use_fast_accum = false` is skipped
  for them rather than silently ignored.
- GEMM cases: `quantize` must be "inline" (`te.Linear` quantizes its input inside its forward, so
  TE has no pre-quantized GEMM here) and `pad` pads K and N to multiples of 16 and M to 8.

GEMM level: one `te.Linear` forward (bias-free, bf16 parameters) is the GEMM, quantization
included. Layer level: `prepare_module` replaces every `nn.Linear` (but a model's
`high_precision_modules`) with a `te.Linear` holding the same fp32 weights; the forward runs under
`autocast`: torch's bf16 autocast and TE's (backward outside both, as TE documents).
"""

from __future__ import annotations

import dataclasses
import functools
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Callable

import torch
import torch.nn.functional as F

from suite.precisions.fp8 import numerics as q
from suite.core.errors import Unsupported, UserError
from suite.precisions.base import Precision
from suite.precisions.fp8.recipes import fp8_linears
from suite.precisions.fp8 import FP8GemmParams
from suite.precisions.te import PRECISIONS as DECLARED, TE

FORMATS = ("HYBRID", "E4M3")
AMAX_ALGOS = ("max", "most_recent")
# Recipes whose forward-GEMM accumulation is a field (`fp8_gemm_fprop: MMParams`) in TE 2.x that
# may be either way. Float8BlockScaling has the field but its __post_init__ asserts
# fp8_gemm_fprop.use_split_accumulator ("Split accumulator required for fprop.", every TE release
# since the recipe appeared): it always splits.
FPROP_CONFIGURABLE = ("Float8CurrentScaling",)
FPROP_ALWAYS_SPLIT = ("Float8BlockScaling",)
# TE's FP8 GEMM shape rule: last dim % 16, product of the leading dims % 8 (te.Linear asserts it).
ALIGN_FEATURES, ALIGN_TOKENS = 16, 8


@functools.lru_cache(maxsize=1)
def _import() -> tuple[object, object, str | None]:
    """(transformer_engine.pytorch, transformer_engine.common.recipe, None) or (None, None, reason)."""
    try:
        import transformer_engine.pytorch as te
        from transformer_engine.common import recipe
    except (ImportError, OSError, RuntimeError) as err:  # not installed, or its CUDA libraries missing
        return None, None, f"Transformer Engine is not importable: {type(err).__name__}: {err}"
    return te, recipe, None


def import_error() -> str | None:
    """Why Transformer Engine cannot be used here (the import error), or None."""
    return _import()[2]


def te_version() -> str:
    return TE.version() or "(version unknown)"


def recipe_kwargs(recipe_class: str, params: dict) -> dict:
    """Keyword arguments for the TE recipe from case params, validated; TE objects excluded
    (`fp8_format` stays a name, `use_fast_accum` a bool) so this runs without TE installed."""
    kwargs: dict = {}
    if "fp8_format" in params and recipe_class != "NVFP4BlockScaling":
        fmt = params["fp8_format"]
        if fmt not in FORMATS:
            raise UserError(f"params.fp8_format: expected one of {', '.join(FORMATS)}, got {fmt!r}")
        kwargs["fp8_format"] = fmt
    if recipe_class == "DelayedScaling":
        if "amax_history_len" in params:
            n = params["amax_history_len"]
            if isinstance(n, bool) or not isinstance(n, int) or n < 1:
                raise UserError(f"params.amax_history_len: expected a positive integer, got {n!r}")
            kwargs["amax_history_len"] = n
        if "amax_compute_algo" in params:
            algo = params["amax_compute_algo"]
            if algo not in AMAX_ALGOS:
                raise UserError(f"params.amax_compute_algo: expected one of {', '.join(AMAX_ALGOS)}, got {algo!r}")
            kwargs["amax_compute_algo"] = algo
    if recipe_class in ("DelayedScaling", "MXFP8BlockScaling") and "margin" in params:
        margin = params["margin"]
        if isinstance(margin, bool) or not isinstance(margin, int) or margin < 0:
            raise UserError(f"params.margin: expected a non-negative integer, got {margin!r}")
        kwargs["margin"] = margin
    if params.get("use_fast_accum") is not None:  # None: the recipe's own accumulation
        fast = FP8GemmParams.of(params).use_fast_accum
        if recipe_class in FPROP_CONFIGURABLE or (recipe_class in FPROP_ALWAYS_SPLIT and not fast):
            kwargs["use_fast_accum"] = fast
        elif recipe_class in FPROP_ALWAYS_SPLIT:
            raise Unsupported(
                f"TE's {recipe_class} requires split accumulation in the forward GEMM (its __post_init__ "
                "asserts fp8_gemm_fprop.use_split_accumulator); use_fast_accum = true cannot be honoured"
            )
        elif not fast:
            raise Unsupported(
                f"TE's {recipe_class} always accumulates the forward GEMM the fast way (no "
                "fp8_gemm_fprop setting); use_fast_accum = false cannot be honoured"
            )
    return kwargs


@dataclass(frozen=True)
class TransformerEngine(Precision):
    recipe_class: str = "DelayedScaling"
    min_capability: tuple[int, int] = (8, 9)
    # name of TE's own availability check (transformer_engine.pytorch.is_*_available)
    availability: str = "is_fp8_available"
    min_cuda: tuple[int, int] | None = None
    params: tuple = ()  # the case's params, as sorted (key, value) pairs (set by `configured`)

    # --- support ------------------------------------------------------------------------------

    def unsupported(self, device):
        te, recipe_mod, error = _import()
        if error:
            return error
        if device.type != "cuda":
            return f"Transformer Engine runs on CUDA GPUs only; device is {device.type}"
        major, minor = torch.cuda.get_device_capability(device)
        if (major, minor) < self.min_capability:
            need = ".".join(map(str, self.min_capability))
            return f"{self.name} ({self.recipe_class}) needs compute capability >= {need}; this GPU is {major}.{minor}"
        if self.min_cuda is not None:
            cuda = tuple(int(x) for x in (torch.version.cuda or "0.0").split(".")[:2])
            if cuda < self.min_cuda:
                need = ".".join(map(str, self.min_cuda))
                return (f"{self.name} ({self.recipe_class}) needs CUDA >= {need}; "
                        f"torch was built with {torch.version.cuda}")
        if not hasattr(recipe_mod, self.recipe_class):
            return f"Transformer Engine {te_version()} has no recipe.{self.recipe_class}; upgrade TE"
        check = getattr(te, self.availability, None)
        try:
            verdict = check(return_reason=True) if check is not None else (True, "")
        except TypeError:  # a TE whose check has no return_reason: the rules above still hold
            verdict = (True, "")
        if not verdict[0]:
            return f"Transformer Engine: {verdict[1]}"
        return None

    def configured(self, params):
        recipe_kwargs(self.recipe_class, params)  # validate now: a bad value fails the case early
        if params.get("compile") is True:
            # te.Linear.forward is wrapped in torch._dynamo.disable (TE's `no_torch_dynamo`): under
            # torch.compile it runs eagerly, so a "compiled" TE row would be an eager number set
            # against a truly compiled bf16 baseline.
            raise Unsupported("Transformer Engine's te.Linear.forward is excluded from torch.compile "
                              "(torch._dynamo.disable via TE's no_torch_dynamo): a compiled TE case would run "
                              "eagerly; TE cases are measured with compile = false")
        return dataclasses.replace(self, params=tuple(sorted(params.items())))

    def tokens_unsupported(self, tokens, device):
        if tokens % ALIGN_TOKENS:  # te.Linear asserts it on FP8 inputs
            return (f"Transformer Engine's FP8 GEMMs need the product of the leading dimensions (M = {tokens}) "
                    f"to be a multiple of {ALIGN_TOKENS}")
        return None

    def operand_bytes(self):
        """The GEMM reads FP8 operands (1 byte; NVFP4's are 4-bit, half a byte), whatever dtype the
        activations stay in around it; the output is counted at the precision's dtype."""
        return 0.5 if self.recipe_class == "NVFP4BlockScaling" else 1

    def operand_values(self, a):
        return None  # TE quantizes inside its fused kernels

    # --- the recipe and TE's autocast -----------------------------------------------------------

    def recipe(self, params: dict | None = None):
        """The TE recipe object for these params (default: the configured ones)."""
        te, recipe_mod, error = _import()
        if error:
            raise Unsupported(error)
        kwargs = recipe_kwargs(self.recipe_class, dict(self.params) if params is None else params)
        cls = getattr(recipe_mod, self.recipe_class)
        if "fp8_format" in kwargs:
            kwargs["fp8_format"] = recipe_mod.Format[kwargs["fp8_format"]]
        if "use_fast_accum" in kwargs:
            fast = kwargs.pop("use_fast_accum")
            if "fp8_gemm_fprop" not in {f.name for f in dataclasses.fields(cls)}:
                raise Unsupported(f"Transformer Engine {te_version()}'s {self.recipe_class} has no fp8_gemm_fprop")
            kwargs["fp8_gemm_fprop"] = recipe_mod.MMParams(use_split_accumulator=not fast)
        return cls(**kwargs)

    def _autocast(self, recipe):
        te = _import()[0]
        if hasattr(te, "autocast"):  # TE >= 2.9
            return te.autocast(enabled=True, recipe=recipe)
        return te.fp8_autocast(enabled=True, fp8_recipe=recipe)

    @contextmanager
    def autocast(self, device):
        # fp32 master weights under torch.autocast(bf16), as for the bf16 and torchao recipes:
        # te.Linear takes its activation dtype from torch's autocast, and TE's autocast adds FP8.
        with torch.autocast(device_type=device.type, dtype=self.dtype), self._autocast(self._configured_recipe):
            yield

    @functools.cached_property
    def _configured_recipe(self):
        # One recipe object per configured precision: DelayedScaling keeps its amax history per
        # autocast key, so every step of a case must enter autocast with the same recipe.
        return self.recipe()

    # --- GEMM level -----------------------------------------------------------------------------

    def gemm(self, a, b, params) -> Callable[[], torch.Tensor]:
        te = _import()[0]
        opts = FP8GemmParams.of(params)
        if opts.quantize != "inline":
            raise Unsupported(
                'te.Linear quantizes its input inside its forward; TE GEMMs run with quantize = "inline" only'
            )
        recipe = self.recipe(params)
        m, k = a.shape
        n = b.shape[1]
        reason = _alignment_reason(m, k, n)
        if reason and not opts.pad:
            raise Unsupported(f"{reason}; set pad = true to pad with zeros")
        mp, kp, np_ = (
            (q.round_up(m, ALIGN_TOKENS), q.round_up(k, ALIGN_FEATURES), q.round_up(n, ALIGN_FEATURES))
            if opts.pad else (m, k, n)
        )
        layer = te.Linear(kp, np_, bias=False, params_dtype=self.dtype, device=a.device)
        layer.weight.requires_grad_(False)
        with torch.no_grad():
            layer.weight.zero_()
            layer.weight[:n, :k].copy_(b.t())
        x = a.to(self.dtype)

        def forward():
            # Grad mode stays on (nothing requires grad, so no graph is kept): TE updates
            # DelayedScaling's scales when autocast exits only while grad mode is enabled.
            inp = F.pad(x, (0, kp - k, 0, mp - m)) if (mp, kp) != (m, k) else x
            with self._autocast(recipe):
                out = layer(inp)
            return out if (mp, np_) == (m, n) else out[:m, :n]

        # Two calls before anything is checked or timed: the first fills DelayedScaling's amax
        # history (its initial scale is 1), the second runs with a scale derived from the data.
        forward()
        forward()
        return forward

    # --- layer level ----------------------------------------------------------------------------

    def prepare_module(self, module, device):
        te = _import()[0]
        if te is None:
            raise Unsupported(import_error())
        module = module.to(device)
        names = fp8_linears(module)
        swaps = [(name, mod) for name, mod in module.named_modules() if name in names]
        for name, lin in swaps:
            reason = q.alignment_reason(lin.in_features, lin.out_features, ALIGN_FEATURES)
            if reason:
                raise Unsupported(f"{reason} (Transformer Engine layer {name!r})")
        for name, lin in swaps:
            layer = te.Linear(lin.in_features, lin.out_features, bias=lin.bias is not None,
                              params_dtype=lin.weight.dtype, device=device)
            with torch.no_grad():
                layer.weight.copy_(lin.weight)
                if lin.bias is not None:
                    layer.bias.copy_(lin.bias)
            if not name:  # the module is itself the Linear
                return layer
            parent, _, attr = name.rpartition(".")
            setattr(module.get_submodule(parent) if parent else module, attr, layer)
        return module


def _alignment_reason(m: int, k: int, n: int) -> str | None:
    bad = [f"{d}={v}" for d, v, mult in (("M", m, ALIGN_TOKENS), ("K", k, ALIGN_FEATURES), ("N", n, ALIGN_FEATURES))
           if v % mult]
    if not bad:
        return None
    return f"Transformer Engine FP8 GEMMs need M % 8 == 0 and K, N % 16 == 0; got {', '.join(bad)}"


def _recipe(name: str, recipe_class: str, **kwargs) -> TransformerEngine:
    """The recipe its folder declares as `name`, needing the compute capability declared there."""
    major, minor = divmod(round(DECLARED[name].min_cc * 10), 10)
    return TransformerEngine(name, torch.bfloat16, recipe_class=recipe_class, min_capability=(major, minor), **kwargs)


TE_DELAYED = _recipe("te_delayed", "DelayedScaling")
TE_CURRENT = _recipe("te_current", "Float8CurrentScaling")
TE_BLOCK = _recipe("te_block", "Float8BlockScaling", availability="is_fp8_block_scaling_available", min_cuda=(12, 9))
TE_MXFP8 = _recipe("te_mxfp8", "MXFP8BlockScaling", availability="is_mxfp8_available")
TE_NVFP4 = _recipe("te_nvfp4", "NVFP4BlockScaling", availability="is_nvfp4_available")
