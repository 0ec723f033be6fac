"""One training step of a Linear layer: forward and backward, the three GEMMs of training.

- `linear`: y = x W^T (bias-free), x (M, K), W (N, K): M tokens, K input and N output features.
- `ln_linear`: LayerNorm -> Linear -> Sigmoid, the block torchao's float8 roofline measures (the
  norm and the activation are where eager FP8 pays for its separate cast kernels).

The timed call is forward (under the recipe's autocast) plus backward with a fixed upstream
gradient; FLOPs count the three GEMMs, 6 * M * N * K (output, grad input, grad weight; the norm
and the sigmoid are not counted). Inputs enter in the recipe's dtype (`precision.dtype`).

Accuracy: SQNR (and relative error) of the output, of the input gradient and of the Linear's
weight gradient, against a float32 run (TF32 off) of the same layer on the same float32 inputs.

Params: `compile` (default false) runs the layer through `torch.compile` with `compile_backend`
(default "inductor"); the first, compiling step's wall time is the `compile_s` column and is never
part of the timed samples.
"""

from __future__ import annotations

import copy

import torch
from torch import nn

from suite.core import peaks
from suite.core.accuracy import error_metrics
from suite.precisions import flags
from suite.core.errors import Unsupported
from suite.precisions.compiler import compile_unsupported
from suite.scenario import registry
from suite.workloads.base import Prepared, Workload
from suite.workloads.linear import CompileParams


def build_layer(layernorm: bool, k: int, n: int, seed: int) -> nn.Module:
    """float32 on the CPU, weights ~ N(0, 1/K) so outputs have unit scale (same numbers on every
    device for the same seed)."""
    gen = torch.Generator().manual_seed(seed)
    linear = nn.Linear(k, n, bias=False)
    with torch.no_grad():
        linear.weight.copy_(torch.randn(n, k, generator=gen) / k**0.5)
    if not layernorm:
        return linear
    return nn.Sequential(nn.LayerNorm(k), linear, nn.Sigmoid())



def _refuse_unsupported(opts, tokens: int, precision, device) -> None:
    """Raise `Unsupported` where this device cannot compile the step or the recipe cannot run
    GEMMs of `tokens` rows here."""
    reason = compile_unsupported(device, opts.compile_backend) if opts.compile else None
    reason = reason or precision.tokens_unsupported(tokens, device)
    if reason:
        raise Unsupported(reason)

class LinearStep(Workload):
    def __init__(self, name: str, layernorm: bool):
        self.name = name
        self.layernorm = layernorm
        self.linear_path = "1" if layernorm else ""  # where the Linear sits in the module

    def prepare(self, case, precision, device):
        opts = CompileParams.of(case.params)
        _refuse_unsupported(opts, case.m, precision, device)
        m, k, n = case.m, case.k, case.n

        reference_cpu, x_cpu, grad_cpu = self._inputs(case)

        model = precision.prepare_module(copy.deepcopy(reference_cpu), device)
        weight = model.get_submodule(self.linear_path).weight
        params = [p for p in model.parameters() if p.requires_grad]
        x = x_cpu.to(device=device, dtype=precision.dtype).requires_grad_()

        forward = _forward(model, opts)

        upstream: dict[torch.dtype, torch.Tensor] = {}

        def step() -> torch.Tensor:
            x.grad = None
            for p in params:
                p.grad = None
            with precision.autocast(device):
                y = forward(x)
            g = upstream.get(y.dtype)
            if g is None:  # once, on the first call: the output dtype is the recipe's choice
                g = upstream[y.dtype] = grad_cpu.to(device=device, dtype=y.dtype)
            y.backward(g)  # outside autocast, as torch.autocast and TE's autocast both document
            return y

        def check() -> dict:
            # A step before the checked one (the runner made the first): TE's delayed scaling starts
            # from scale 1 and derives its scales from the amax history earlier steps recorded.
            step()
            with flags.float32_matmul(tf32=False):
                ref = copy.deepcopy(reference_cpu).to(device)
                x_ref = x_cpu.to(device).requires_grad_()
                y_ref = ref(x_ref)
                y_ref.backward(grad_cpu.to(device))
            y = step()
            out = error_metrics(y, y_ref)
            for what, got, want in (
                ("grad_input", x.grad, x_ref.grad),
                ("grad_weight", weight.grad, ref.get_submodule(self.linear_path).weight.grad),
            ):
                metrics = error_metrics(got, want)
                out[f"sqnr_{what}_db"] = metrics["sqnr_db"]
                out[f"rel_err_{what}"] = metrics["rel_err"]
            return out

        return Prepared(
            fn=step,
            flops=6.0 * m * n * k,
            bytes_moved=None,
            check=check,
            first_call=step,  # compiles a compiled step: the runner times it as compile_s
            first_call_column="compile_s" if opts.compile else None,
            split_kernels=True,  # GEMMs against FP8's scaling and casting (suite.measure.attribution)
            extra={"gemm_path": precision.gemm_path(device, "layer")},
            derive=step_mfu(6.0 * m * n * k, precision.name, device),
        )


    def _inputs(self, case):
        """The float32 reference layer, the input and the upstream gradient, on the CPU (seeded)."""
        reference_cpu = build_layer(self.layernorm, case.k, case.n, case.seed)
        gen = torch.Generator().manual_seed(case.seed + 1)
        return reference_cpu, torch.randn(case.m, case.k, generator=gen), torch.randn(case.m, case.n, generator=gen)


# The peak every recipe's MFU is also set against (as train_step's `mfu_bf16`).
BF16_PEAK = "bf16"


def step_peak(device_name: str | None, precision: str) -> float | None:
    """The step's own peak TFLOP/s: its three GEMMs of equal FLOPs, the output and input-gradient
    GEMMs at the precision's peak and the weight-gradient GEMM at the peak of the format the
    recipe declares for it (`weight_grad_format`: fp8_rowwise_gw_hp's runs bf16), so the time at
    peak is 2/3 / peak + 1/3 / its peak. None where a peak is unknown (CPUs)."""
    record = registry.PRECISIONS.get(precision)
    own = peaks.peak_tflops(device_name, record.peak if record else None)
    weight_grad = peaks.peak_tflops(device_name, record.weight_grad_format) if record and \
        record.weight_grad_format else own
    if not own or not weight_grad:
        return None
    return own if weight_grad == own else 3.0 / (2.0 / own + 1.0 / weight_grad)


def step_mfu(flops: float, precision: str, device):
    """`derive` of a layer step: `mfu` against the step's own peak (`step_peak`) and `mfu_bf16`
    against the GPU's bf16 peak, from the median step time in seconds."""
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else None
    own, bf16 = step_peak(name, precision), peaks.peak_tflops(name, BF16_PEAK)

    def derive(median_s: float) -> dict:
        tflops = flops / median_s / 1e12
        return {"mfu": tflops / own if own else None, "mfu_bf16": tflops / bf16 if bf16 else None}

    return derive


def _forward(model, opts):
    """The layer's forward, torch.compile'd where the case asks. The runner resets dynamo once per
    setting, before its cases are prepared (suite.precisions.compiler.cold_start): a reset here
    would wipe the compiled code of the setting's members prepared before this one."""
    if not opts.compile:
        return model
    return torch.compile(model, backend=opts.compile_backend)


LINEAR = LinearStep("linear", layernorm=False)
LN_LINEAR = LinearStep("ln_linear", layernorm=True)
