"""Update-side recipes: where a training step keeps its weights and optimizer state.

All compute in bf16 (autocast, so the loss and the fp32-listed ops stay fp32, as `bf16` does); they
differ in what the optimizer updates and stores (seeds 000 "Why naive fp16 breaks", "Stochastic
rounding"; seeds 001 "What bf16 does not fix is precision"):

- `bf16` (suite.precisions.floating) is the reference: fp32 parameters, which are the master
  weights, and fp32 AdamW moments. 16 bytes per parameter with the fp32 gradients.
- `bf16_pure`: the parameters themselves are bf16 and torch's AdamW keeps bf16 moments; the update
  is rounded to nearest. bf16 keeps 8 significant bits, so w + u == w whenever |u| < 2^-8 |w| (half
  an ulp at the bottom of w's binade): late in a decaying schedule most updates are swamped.
- `bf16_pure_sr`: bf16 parameters, the update computed in fp32 and rounded stochastically to bf16
  (torchao's AdamW with `bf16_stochastic_round=True`; torchao 0.18 exports it as `_AdamW`): a
  sub-ulp update is kept in expectation.
- `bf16_pure_kahan`: bf16 parameters with a bf16 Kahan compensation buffer that carries what the
  rounding dropped into the next step (torch-optimi's AdamW, `kahan_sum=True`).
- `bf16_adamw8bit`, `bf16_adamw4bit`, `bf16_adamw_fp8`: torchao's low-bit AdamW, moments stored in
  8-bit, 4-bit or fp8 codes with one fp32 scale per block; on fp32 master weights by default, or
  on bf16 parameters with stochastic rounding (`master = "bf16_sr"`).

torchao's optimizers compile their per-parameter step with torch.compile (inductor), which on a
CPU needs a C++ compiler; without one, or without the library, the case is skipped with the reason.
`compile_step = false` runs that same step function eagerly instead (tens of seconds of inductor
per parameter shape saved on a small CPU, where the update's numerics are the point, not its speed).
"""

from __future__ import annotations

import dataclasses
import functools
import importlib
from dataclasses import dataclass

import torch

from suite.precisions.compiler import compile_unsupported
from suite.precisions.floating.recipes import Half
from suite.precisions.update import LowBitParams, TorchaoOptimParams

BF16_BYTES, FP32_BYTES = 2, 4


def _missing(module: str, extra: str) -> str | None:
    """Why `module` cannot be imported (the import error and the extra that installs it), or None."""
    try:
        importlib.import_module(module)
    except ImportError as err:  # a broken install raises more than ModuleNotFoundError
        return f"{module} is not importable ({err}); install it with pip install 'mpsuite[{extra}]'"
    return None


def _compiler_missing(device: torch.device) -> str | None:
    reason = compile_unsupported(device)
    return f"torchao's optimizers torch.compile their step: {reason}" if reason else None


def _eager(optimizer: torch.optim.Optimizer) -> torch.optim.Optimizer:
    """The optimizer with its torch.compile'd step run eagerly: the same function, not compiled."""
    step = optimizer.step

    @functools.wraps(step)
    def eager_step(*args, **kwargs):
        with torch.compiler.set_stance("force_eager"):
            return step(*args, **kwargs)

    optimizer.step = eager_step
    return optimizer


@dataclass(frozen=True)
class TorchaoOptim(Half):
    """A recipe whose optimizer is torchao's: the library, and a C++ compiler where it compiles."""

    compile_step: bool = True

    def unsupported(self, device):
        return (super().unsupported(device) or _missing("torchao.optim", "fp8")
                or (_compiler_missing(device) if self.compile_step else None))

    def _built(self, optimizer):
        return optimizer if self.compile_step else _eager(optimizer)


@dataclass(frozen=True)
class PureBF16(Half):
    """bf16 parameters and bf16 AdamW moments, updated with round-to-nearest (torch's AdamW)."""

    def prepare_module(self, module, device):
        return module.to(device=device, dtype=torch.bfloat16)

    def textbook_bytes(self):
        return {"weights": BF16_BYTES, "master": 0, "grads": BF16_BYTES, "optimizer": 2 * BF16_BYTES}


@dataclass(frozen=True)
class PureBF16SR(TorchaoOptim, PureBF16):
    """bf16 parameters, the AdamW update computed in fp32 and stochastically rounded to bf16."""

    def configured(self, params):
        return dataclasses.replace(self, compile_step=TorchaoOptimParams.of(params).compile_step)

    def optimizer(self, groups, *, lr, betas, eps, device):
        from torchao.optim import _AdamW  # torchao 0.18's plain AdamW; its moments take the param's dtype

        return self._built(_AdamW(groups, lr=lr, betas=betas, eps=eps, bf16_stochastic_round=True))


@dataclass(frozen=True)
class PureBF16Kahan(PureBF16):
    """bf16 parameters with Kahan-compensated updates: a bf16 buffer per parameter holds the part of
    each update the bf16 rounding dropped and adds it back at the next step."""

    def unsupported(self, device):
        return super().unsupported(device) or _missing("optimi", "update")

    def optimizer(self, groups, *, lr, betas, eps, device):
        import optimi

        # optimi's weight decay multiplies by lr like torch's AdamW (decouple_lr=False), the same update
        return optimi.AdamW(groups, lr=lr, betas=betas, eps=eps, kahan_sum=True)

    def textbook_bytes(self):
        return {**super().textbook_bytes(), "master": BF16_BYTES}  # the compensation buffer


# torchao.optim's classes and their state formats: bits per moment entry and entries per fp32 scale
# (torchao/optim/adam.py and subclass_*.py: AdamW8bit block 256, AdamW4bit block 128, AdamWFp8 256).
LOW_BIT = {"8bit": ("AdamW8bit", 8, 256), "4bit": ("AdamW4bit", 4, 128), "fp8": ("AdamWFp8", 8, 256)}


@dataclass(frozen=True)
class LowBitAdamW(TorchaoOptim):
    """torchao's low-bit AdamW: moments quantized blockwise; fp32 master weights (the module's fp32
    parameters under autocast), or bf16 parameters with stochastic rounding (`master = "bf16_sr"`)."""

    state: str = "8bit"
    master: str = "fp32"

    def configured(self, params):
        chosen = LowBitParams.of(params)
        return dataclasses.replace(self, master=chosen.master, compile_step=chosen.compile_step)

    def prepare_module(self, module, device):
        dtype = torch.bfloat16 if self.master == "bf16_sr" else torch.float32
        return module.to(device=device, dtype=dtype)

    def optimizer(self, groups, *, lr, betas, eps, device):
        import torchao.optim

        cls = getattr(torchao.optim, LOW_BIT[self.state][0])
        return self._built(cls(groups, lr=lr, betas=betas, eps=eps, bf16_stochastic_round=self.master == "bf16_sr"))

    def textbook_bytes(self):
        # Tensors under 4096 entries keep full-precision moments (torchao follows bitsandbytes):
        # the measured count sits above this one by their share.
        _, bits, block = LOW_BIT[self.state]
        weight = BF16_BYTES if self.master == "bf16_sr" else FP32_BYTES
        return {"weights": weight, "master": 0, "grads": weight, "optimizer": 2 * (bits / 8 + FP32_BYTES / block)}


BF16_PURE = PureBF16("bf16_pure", torch.bfloat16)
BF16_PURE_SR = PureBF16SR("bf16_pure_sr", torch.bfloat16)
BF16_PURE_KAHAN = PureBF16Kahan("bf16_pure_kahan", torch.bfloat16)
BF16_ADAMW8BIT = LowBitAdamW("bf16_adamw8bit", torch.bfloat16, state="8bit")
BF16_ADAMW4BIT = LowBitAdamW("bf16_adamw4bit", torch.bfloat16, state="4bit")
BF16_ADAMW_FP8 = LowBitAdamW("bf16_adamw_fp8", torch.bfloat16, state="fp8")
