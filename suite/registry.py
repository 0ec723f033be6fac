"""Names of precisions and workloads, and where their code lives.

Kept free of torch so that scenario validation (`suite.spec`) can list valid names without paying
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
}

# name -> "module:attribute". The attribute is a Workload instance.
WORKLOADS: dict[str, str] = {
    "gemm": "suite.workloads.gemm:GEMM",
}

# Workloads whose cases are defined by (m, k, n); the others take all their shape from `params`.
SHAPED_WORKLOADS: set[str] = {"gemm"}


def load(table: dict[str, str], name: str):
    module, _, attr = table[name].partition(":")
    return getattr(importlib.import_module(module), attr)


def precision(name: str):
    return load(PRECISIONS, name)


def workload(name: str):
    return load(WORKLOADS, name)
