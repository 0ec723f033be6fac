"""Whether torch.compile can run here: recipes (torchao's optimizers compile their step) and
workloads (compiled layers and models) both ask, so it sits below both."""

from __future__ import annotations

import shutil


def compile_unsupported(device, backend: str = "inductor") -> str | None:
    """Why torch.compile cannot run here, or None: inductor on a CPU generates C++ and needs a compiler."""
    if backend == "inductor" and device.type == "cpu" and not any(
        shutil.which(cc) for cc in ("g++", "c++", "clang++")
    ):
        return "torch.compile (inductor) on a CPU needs a C++ compiler; none found"
    return None
