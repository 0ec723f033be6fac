"""Whether torch.compile can run here: recipes (torchao's optimizers compile their step) and
workloads (compiled layers and models) both ask, so it sits below both."""

from __future__ import annotations

import shutil
import sys


def compile_unsupported(device, backend: str = "inductor") -> str | None:
    """Why torch.compile cannot run here, or None: inductor on a CPU generates C++ and needs a compiler."""
    if backend == "inductor" and device.type == "cpu" and not any(
        shutil.which(cc) for cc in ("g++", "c++", "clang++")
    ):
        return "torch.compile (inductor) on a CPU needs a C++ compiler; none found"
    return None


def cold_start() -> None:
    """Drop every compiled graph (torch._dynamo.reset), so the next setting's compiled cases (layers,
    models, a recipe's compiled optimizer step) compile from a cold start. Once per setting, before
    its cases are prepared (suite.measure.inprocess.run_setting): a reset while the setting's cases
    are prepared would wipe the code of the members prepared before it, whose recompiles would then
    land in their timed samples. Where dynamo was never imported nothing was compiled (and importing
    it takes seconds), so there is nothing to drop."""
    dynamo = sys.modules.get("torch._dynamo")
    if dynamo is not None:
        dynamo.reset()
