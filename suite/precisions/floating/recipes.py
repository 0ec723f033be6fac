"""IEEE-style formats PyTorch multiplies natively: fp32 (TF32 off), tf32, bf16, fp16 (declared in `__init__`)."""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass

import torch

from suite.precisions import gates
from suite.precisions.base import Precision
from suite.precisions.flags import float32_matmul
from suite.precisions.grouped import column_major, grouped_mm


@dataclass(frozen=True)
class Native(Precision):
    """A format torch multiplies as it is, grouped GEMMs included."""

    def grouped_gemm(self, x, w, offs, params):
        a, b = x.to(self.dtype), column_major(w.to(self.dtype))
        return lambda: grouped_mm(a, b, offs)


@dataclass(frozen=True)
class Float32(Native):
    tf32: bool = False

    def unsupported(self, device):
        if not self.tf32:
            return None
        if device.type != "cuda":
            return f"TF32 is a CUDA tensor-core mode; device is {device.type}"
        cc = torch.cuda.get_device_capability(device)
        if gates.below("tf32", cc):
            return f"TF32 needs compute capability >= {gates.min_cc('tf32'):.1f} (Ampere); this GPU is {cc[0]}.{cc[1]}"
        return None

    @contextmanager
    def active(self):
        with float32_matmul(tf32=self.tf32):
            yield


@dataclass(frozen=True)
class Half(Native):
    def unsupported(self, device):
        if device.type == "cuda" and self.dtype == torch.bfloat16 and not torch.cuda.is_bf16_supported():
            return "this GPU has no bf16 support (needs compute capability >= 8.0)"
        return None

    def autocast(self, device):
        # Autocast keeps precision-sensitive ops (softmax, losses, norms) in fp32; weights stay fp32
        # masters. The op lists differ between CPU and CUDA (see the seeds' autocast chapter).
        return torch.autocast(device_type=device.type, dtype=self.dtype)

    @contextmanager
    def active(self):
        # Reductions inside half-precision matmuls may use lower-precision accumulation on CUDA
        # unless forbidden; fix both flags to PyTorch's defaults so a user's setting cannot leak in.
        m = torch.backends.cuda.matmul
        saved = (m.allow_bf16_reduced_precision_reduction, m.allow_fp16_reduced_precision_reduction)
        try:
            m.allow_bf16_reduced_precision_reduction = True
            m.allow_fp16_reduced_precision_reduction = True
            yield
        finally:
            m.allow_bf16_reduced_precision_reduction, m.allow_fp16_reduced_precision_reduction = saved


FP32 = Float32("fp32", torch.float32, tf32=False)
TF32 = Float32("tf32", torch.float32, tf32=True)
BF16 = Half("bf16", torch.bfloat16)
FP16 = Half("fp16", torch.float16, grad_scaler=True)
# fp16 autocast WITHOUT loss scaling: gradients below fp16's smallest subnormal (2^-24 ~ 6e-8) flush
# to zero in the backward pass, the failure GradScaler exists to prevent (seeds: "Why naive fp16
# breaks"). For models only; its GEMMs are fp16's.
FP16_NOSCALER = Half("fp16_noscaler", torch.float16, grad_scaler=False)
