"""What every precision recipe provides.

A recipe says whether a device can run it (`unsupported`: a reason, or None), sets and restores the
global state it needs (`active`), and knows how to run a GEMM in its format (`gemm`). Operand
preparation (casting, quantizing weights) happens in `gemm`, outside the timed callable it returns.

For layers and models a recipe also says how to convert a module (`prepare_module`, e.g. swapping
Linear layers for FP8 ones) and what to run the forward pass under (`autocast`). A training step is
    model = precision.prepare_module(model, device)
    with precision.active(), precision.autocast(device):
        loss = model(x) ...
and `grad_scaler` says whether the step needs a GradScaler (fp16). The update side has two more
hooks: `optimizer` builds the optimizer the step uses (AdamW on the fp32 parameters unless the recipe
says otherwise, `suite.precisions.update`) and `textbook_bytes` gives its bytes per parameter.
"""

from __future__ import annotations

from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from typing import Callable

import torch

from suite.core.errors import Unsupported


@dataclass(frozen=True)
class Precision:
    name: str  # its name in its folder's declaration, which describes it (suite.scenario.declare)
    # dtype the operands are stored and multiplied in (for FP8: the dtype activations stay in)
    dtype: torch.dtype

    def unsupported(self, device: torch.device) -> str | None:
        """Why this recipe cannot run on `device`, or None when it can."""
        return None

    def emulated(self, device: torch.device) -> bool:
        """True when the numerics are real but the speed is not (e.g. FP8 on a CPU)."""
        return False

    @contextmanager
    def active(self):
        """Set every global flag the recipe needs, and restore each on exit."""
        yield

    def tokens_unsupported(self, tokens: int, device: torch.device) -> str | None:
        """Why a layer or model case whose GEMMs have `tokens` rows (M) cannot run here, or None."""
        return None

    def operand_bytes(self) -> int:
        """Bytes per element of the GEMM operands as the kernel reads them (for bytes moved)."""
        return torch.empty((), dtype=self.dtype).element_size()

    def configured(self, params: dict) -> "Precision":
        """This recipe with a case's parameters applied (e.g. TE DelayedScaling's amax_history_len,
        FP8 padding). Layer workloads call it before `prepare_module`; `gemm` gets params itself."""
        return self

    def prepare_module(self, module: torch.nn.Module, device: torch.device) -> torch.nn.Module:
        """The module converted for this recipe (in place or new), on `device`."""
        return module.to(device)

    def autocast(self, device: torch.device):
        """Context for the forward pass: nothing for fp32/tf32, torch.autocast for half types."""
        return nullcontext()

    grad_scaler: bool = False

    def optimizer(self, groups: list[dict], *, lr: float, betas: tuple[float, float], eps: float,
                  device: torch.device) -> torch.optim.Optimizer:
        """The optimizer a training step uses: torch's AdamW on the module's parameters (fused on
        CUDA, as nanoGPT: one kernel for the update, and GradScaler then checks for inf without a
        host synchronisation inside the timed step)."""
        fused = True if device.type == "cuda" else None
        return torch.optim.AdamW(groups, lr=lr, betas=betas, eps=eps, fused=fused)

    def textbook_bytes(self) -> dict[str, float]:
        """Persistent bytes per parameter of a training step with `optimizer`, by role, as the
        textbook counts them: fp32 parameters (which are the master copy), fp32 gradients, AdamW's
        two fp32 moments (seeds 001: "Persistent bytes per parameter with Adam")."""
        return {"weights": 4, "master": 0, "grads": 4, "optimizer": 8}

    def gemm(self, a: torch.Tensor, b: torch.Tensor, params: dict) -> Callable[[], torch.Tensor]:
        """a: (M, K), b: (K, N), float32 on the target device. Returns the callable to time."""
        a, b = a.to(self.dtype), b.to(self.dtype)
        return lambda: torch.matmul(a, b)

    def grouped_gemm(self, x: torch.Tensor, w: torch.Tensor, offs: torch.Tensor,
                     params: dict) -> Callable[[], torch.Tensor]:
        """A MoE layer's expert GEMMs as one call: x (M, K) float32, its rows sorted by expert; w
        (E, K, N) float32, one weight per expert; offs (E,) int32, the cumulative end of each
        expert's rows. Returns the callable to time, whose output is (M, N)."""
        raise Unsupported(f"{self.name} has no grouped GEMM")

    def gemm_path(self, device: torch.device, level: str) -> str | None:
        """How the recipe's low-precision GEMMs run where that is not plain (the record's
        `gemm_path`: an emulation's name, or its library's kernel) at `level` (gemm, layer,
        grouped); None for a format the device multiplies natively."""
        return None

    def operand_values(self, a: torch.Tensor) -> torch.Tensor | None:
        """The float32 values a GEMM in this recipe multiplies for an activation operand `a` (M, K):
        what its cast or quantization keeps of them (None where a library's kernel hides it)."""
        return a.to(self.dtype).to(torch.float32)

    def scale_block(self) -> int | None:
        """How many consecutive values along K share one scale in the recipe's quantization of an
        operand (None: no scaling, or one scale per tensor or row)."""
        return None


def cuda_reason(device: torch.device, what: str, need: tuple[int, int], too_old: str, on_rocm: str) -> str | None:
    """Why `device` cannot run `what`'s kernels, or None: a CPU emulates them (real numerics), a
    CUDA GPU needs compute capability `need` (else `too_old`, its `{cc}` the GPU's), ROCm gets
    `on_rocm`, any other device type cannot."""
    if device.type == "cpu":
        return None
    if device.type != "cuda":
        return f"{what} run on CUDA GPUs (or emulated on the CPU); device is {device.type}"
    if torch.version.hip:
        return on_rocm
    major, minor = torch.cuda.get_device_capability(device)
    return too_old.format(cc=f"{major}.{minor}") if (major, minor) < need else None
