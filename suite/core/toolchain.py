"""What torch.compile needs of the machine beyond torch: asked by the recipes and the workloads
that compile, so a case that cannot compile here is skipped with the reason."""

from __future__ import annotations

import shutil
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch


def compile_unsupported(device: torch.device, backend: str = "inductor") -> str | None:
    """Why torch.compile cannot run here, or None: inductor on a CPU generates C++ and needs a compiler."""
    if backend == "inductor" and device.type == "cpu" and not any(
        shutil.which(cc) for cc in ("g++", "c++", "clang++")
    ):
        return "torch.compile (inductor) on a CPU needs a C++ compiler; none found"
    return None
