"""Names of precisions and workloads, and where their code lives.

Kept free of torch so that scenario validation (`suite.scenario.spec`) can list valid names without paying
for a torch import. `load` imports the implementing class only when a case needs it.
"""

from __future__ import annotations

import importlib

# name -> "module:attribute". The attribute is a Precision instance.
PRECISIONS: dict[str, str] = {
    "fp32": "suite.precisions.floating:FP32",
    "tf32": "suite.precisions.floating:TF32",
    "bf16": "suite.precisions.floating:BF16",
    "fp16": "suite.precisions.floating:FP16",
    "fp16_noscaler": "suite.precisions.floating:FP16_NOSCALER",
    # FP8: torchao recipes (torch._scaled_mm GEMMs), emulated block scaling, Transformer Engine
    "fp8_tensorwise": "suite.precisions.fp8:FP8_TENSORWISE",
    "fp8_rowwise": "suite.precisions.fp8:FP8_ROWWISE",
    "fp8_rowwise_gw_hp": "suite.precisions.fp8:FP8_ROWWISE_GW_HP",
    "fp8_block": "suite.precisions.fp8:FP8_BLOCK",
    "te_delayed": "suite.precisions.te:TE_DELAYED",
    "te_current": "suite.precisions.te:TE_CURRENT",
    "te_block": "suite.precisions.te:TE_BLOCK",
    "mxfp8": "suite.precisions.te:TE_MXFP8",
    "nvfp4": "suite.precisions.te:TE_NVFP4",
}

# name -> "module:attribute". The attribute is a Workload instance.
WORKLOADS: dict[str, str] = {
    "gemm": "suite.workloads.gemm:GEMM",
    "train_step": "suite.workloads.train_step:TRAIN_STEP",
    "fidelity": "suite.workloads.fidelity:FIDELITY",
    "linear": "suite.workloads.linear:LINEAR",
    "ln_linear": "suite.workloads.linear:LN_LINEAR",
    "outlier": "suite.workloads.outlier:OUTLIER",
}

# Workloads whose cases are defined by (m, k, n); the others take all their shape from `params`.
SHAPED_WORKLOADS: set[str] = {"gemm", "fidelity", "linear", "ln_linear", "outlier"}


def load(table: dict[str, str], name: str):
    module, _, attr = table[name].partition(":")
    return getattr(importlib.import_module(module), attr)


def precision(name: str):
    return load(PRECISIONS, name)


def workload(name: str):
    return load(WORKLOADS, name)
